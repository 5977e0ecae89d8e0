"""
In-game commands: ``talk`` for players, and the :class:`AIContribCmdSet` that bundles it with
the admin commands of :mod:`ai_contrib.admin` (``aihistory``, ``compact``, ``aisleep``,
``aiwake``, ``aimemory``, ``ailist``, ``aiconfig``, ``aireset``, ``aiforget``, ``destroy``,
``ailore``, ``aipin``, ``aigossip``).
"""

from evennia.commands.cmdset import CmdSet
from evennia.commands.default.muxcommand import MuxCommand
from evennia.utils.ansi import raw

# the admin commands; a game's own cmdsets may import them from here
from .admin.actions_command import CmdAIActions
from .admin.admin_commands import CmdAIConfig, CmdAIForget, CmdAIList, CmdAIReset
from .admin.compact_command import CmdCompact
from .admin.gossip_commands import CmdAIGossip
from .admin.history_command import CmdAIHistory
from .admin.lore_commands import CmdAILore, CmdAIPin
from .admin.memory_command import CmdAIMemory
from .admin.mode_commands import CmdAISleep, CmdAIWake
from .typeclasses import player_text, room_npcs


class CmdTalk(MuxCommand):
    """
    Talk to an NPC.

    Usage:
      talk <npc> = <text>
      talk <npc> <text>
      talk/private <npc> = <text>

    Says something to a character in the room; AI NPCs answer in character.
    Saying things with `say` in an NPC's room works too. With /private you
    whisper it: the others in the room see only that you whispered, no other
    NPC hears it, the NPC answers you in a murmur, and it never passes on
    what you told it.
    """

    key = "talk"
    aliases = ["talk to"]
    switch_options = ("private",)
    locks = "cmd:all()"
    help_category = "General"
    # a space or a switch after the name ("talk/private"): "talking" is not talk
    arg_regex = r"(?:/\w+)*(?:\s.+)?$"

    def parse(self):
        super().parse()
        if self.rhs is not None:
            self.target_name, self.speech = self.lhs.strip(), self.rhs.strip()
            return
        # "talk Marta hello there": the longest leading run of words naming something here wins
        words = self.args.split()
        self.target_name, self.speech = None, ""
        location = self.caller.location
        candidates = location.contents if location else []
        for cut in range(len(words) - 1, 0, -1):
            name = " ".join(words[:cut])
            if any(obj.key.lower() == name.lower() or name.lower() in
                   [a.lower() for a in obj.aliases.all()] for obj in candidates):
                self.target_name, self.speech = name, " ".join(words[cut:])
                return
        if len(words) >= 2:
            self.target_name, self.speech = words[0], " ".join(words[1:])

    def func(self):
        caller = self.caller
        # the room hears what the NPC will store: no colours, no forged line breaks
        self.speech = player_text(self.speech)
        if not self.target_name or not self.speech:
            caller.msg(f"Usage: {self.key} <npc> = <text>  (or: {self.key} <npc> <text>)")
            return
        target = caller.search(self.target_name)
        if not target:
            return
        if "private" in self.switches:
            self.whisper(target)
            return
        # ...and repeats it as the data it is: raw() doubles every bar left in it (one that
        # starts no code once stripped), so the room reads exactly the stored line and no
        # markup of the player's (the NPC's replies are shown the same way)
        shown_speech = raw(self.speech)
        caller.msg(f'You say to {target.get_display_name(caller)}, "{shown_speech}"')
        if caller.location:
            caller.location.msg_contents(
                f'{caller.key} says to {target.key}, "{shown_speech}"', exclude=[caller, target]
            )
        if hasattr(target, "at_heard_say"):
            target.at_heard_say(caller, self.speech, to=target)
        else:
            target.msg(f'{caller.key} says to you, "{shown_speech}"', from_obj=caller)
        # the other AI NPCs overhear it: stored with its audience, never answered by them
        # (docs/design.md, "Turns, not one call per line")
        for npc in room_npcs(caller):
            if npc != target:
                npc.at_heard_say(caller, self.speech, to=target)

    def whisper(self, target):
        """
        ``talk/private``: only ``target`` hears the line, stored with the speaker alone as its
        audience, so it is private for every purpose (``docs/design.md``, "Privacy by
        audience", "Gossip"): the reply built from it is murmured, and nothing drawn from it
        ever passes as gossip. Other NPCs in the room do not hear it.
        """
        caller = self.caller
        caller.msg(f'You whisper to {target.get_display_name(caller)}, "{raw(self.speech)}"')
        if caller.location:
            caller.location.msg_contents(f"{caller.key} whispers something to {target.key}.",
                                         exclude=[caller, target])
        if hasattr(target, "at_heard_say"):
            target.at_heard_say(caller, self.speech, to=target, audience=[])
        else:
            target.msg(f'{caller.key} whispers to you, "{raw(self.speech)}"', from_obj=caller)


class CmdAITalk(CmdTalk):
    """
    Talk to an NPC: the same as talk, under a name no other contrib uses.

    Usage:
      aitalk <npc> = <text>
      aitalk <npc> <text>

    Evennia's own LLM contrib has a talk command too; whichever cmdset is added
    last owns talk, and aitalk always reaches this contrib's NPCs.
    """

    key = "aitalk"
    aliases = []


class AIContribCmdSet(CmdSet):
    """The contrib's commands; add it to the game's ``CharacterCmdSet``."""

    key = "ai_contrib"

    def at_cmdset_creation(self):
        # Evennia's building commands import its menus, which need Evennia set up: the
        # destroy command is imported when a cmdset is made, never when this module is
        from .admin.destroy_command import CmdDestroy

        for command in (
            CmdTalk,
            CmdAITalk,  # survives a talk of another cmdset merged over this one
            CmdAIHistory, CmdCompact, CmdAISleep, CmdAIWake, CmdAIMemory,
            CmdAIList, CmdAIConfig, CmdAIReset, CmdAIForget,
            CmdDestroy,  # Evennia's destroy, which also says what became of an NPC's memories
            CmdAILore, CmdAIPin, CmdAIGossip, CmdAIActions,
        ):
            self.add(command())
