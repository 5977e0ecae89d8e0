"""
The action cmdset: the game's commands an AI NPC may be given to run as itself
(``docs/design.md``, "Actions").

:class:`ActionCmdSet` holds the commands every Evennia game has: ``give``, ``get``, ``drop``,
``pose`` (``emote``), ``look``, ``whisper``, :class:`CmdGo` (moving through an exit, which
Evennia otherwise offers as one command per exit) and :class:`CmdRecall` (searching the NPC's own
memories). ``AI_ACTION_CMDSET`` names the cmdset the
contrib reads (this one by default); a game adds its own commands (a ``sell``, an ``unlock``) to
a subclass and names that. Which of its commands one NPC may run is ``AI_ACTIONS``, or the
NPC's own list (``aiactions``). The commands run through Evennia's command handler with the NPC
as caller, so their lock strings and the NPC's permissions apply as for anyone.
"""

from evennia.commands.cmdset import CmdSet
from evennia.commands.default.muxcommand import MuxCommand


class CmdGo(MuxCommand):
    """
    go through an exit

    Usage:
      go <exit>

    Leaves the room through the exit named, if its traverse lock lets you.
    """

    key = "go"
    locks = "cmd:all()"
    arg_regex = r"\s|$"

    def func(self):
        """
        Find the exit among the room's and go through it by its own command (:func:`traverse`):
        its traverse lock, ``err_traverse``, ``at_traverse`` and ``SIGNAL_EXIT_TRAVERSED`` all
        apply as when a player types its name.

        Returns:
            Deferred or None: the exit command's run (waited on by the command handler).
        """
        caller = self.caller
        if not self.args.strip() or caller.location is None:
            caller.msg("Usage: go <exit>")
            return None
        exits = [obj for obj in caller.location.contents if obj.destination]
        exit_obj = caller.search(self.args.strip(), candidates=exits,
                                 nofound_string=f"There is no exit '{self.args.strip()}' here.")
        if not exit_obj:
            return None
        return traverse(caller, exit_obj)


def traverse(walker, exit_obj):
    """
    Take ``walker`` through ``exit_obj`` by the exit's own command (``exit.exit_command``, as
    :meth:`~evennia.objects.objects.DefaultExit.create_exit_cmdset` makes it), run through
    Evennia's command handler as ``walker``: the exit's traverse lock, its ``err_traverse``,
    ``at_traverse`` and ``SIGNAL_EXIT_TRAVERSED`` apply as when a player types its name. What
    :class:`CmdGo` runs, and a game's commands that walk someone (``game_template``'s
    ``lead``).

    Returns:
        Deferred: the exit command's run.
    """
    from evennia.commands.cmdhandler import cmdhandler

    exit_cmd = exit_obj.create_exit_cmdset(exit_obj).commands[0]
    return cmdhandler(walker, "", callertype="object", cmdobj=exit_cmd, cmdobj_key=exit_cmd.key)


class CmdRecall(MuxCommand):
    """
    search your own memories of what was said and done

    Usage:
      recall <words>

    Searches what you remember (your archive and your memories) for the words given, and
    tells you only what everyone listening now could have heard.
    """

    key = "recall"
    locks = "cmd:all()"
    arg_regex = r"\s|$"
    #: run by the action runner itself, never through the command handler: the search needs
    #: the turn's listeners, which a command is not given (``ai_contrib.npc.actions``)
    ai_recall = True

    def func(self):
        """Only an AI NPC recalls, as an action; typed by anyone else it says so."""
        self.caller.msg("Only an AI NPC recalls, as one of its actions.")


class ActionCmdSet(CmdSet):
    """The commands an NPC may be given by default: never added to anyone's cmdsets, only read
    by the action runner (:mod:`ai_contrib.npc.actions`)."""

    key = "ai_actions"

    def at_cmdset_creation(self):
        """Evennia's own give, get, drop, pose, look and whisper, :class:`CmdGo` and
        :class:`CmdRecall`."""
        from evennia.commands.default.general import (
            CmdDrop,
            CmdGet,
            CmdGive,
            CmdLook,
            CmdPose,
            CmdWhisper,
        )

        for command in (CmdGive, CmdGet, CmdDrop, CmdPose, CmdLook, CmdWhisper, CmdGo,
                        CmdRecall):
            self.add(command())
