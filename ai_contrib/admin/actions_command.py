"""
``aiactions``: which of the game's commands an AI NPC may run as itself (``docs/design.md``,
"Actions"; ``docs/admin-commands.md``).
"""

from __future__ import annotations

from ..npc.actions import action_cmdset, command_names, offered_actions
from ..settings import NPC_SOURCE, resolve_option
from .command_util import StaffCommand


def _names(text):
    """``"give, look"`` -> ``["give", "look"]`` (lower case, in order, once each)."""
    seen = []
    for name in text.replace(",", " ").split():
        name = name.strip().lower()
        if name and name not in seen:
            seen.append(name)
    return seen


def _command_names():
    """``{name: key}`` of every key and alias of ``AI_ACTION_CMDSET``'s commands."""
    names = {}
    for cmd in action_cmdset().commands:
        for name in command_names(cmd):
            names[name] = cmd.key.lstrip("@")
    return names


class CmdAIActions(StaffCommand):
    """
    Show or change which actions an AI NPC may take.

    Usage:
      aiactions <npc>
      aiactions <npc> = <action>[, <action>...]
      aiactions/add <npc> = <action>[, <action>...]
      aiactions/remove <npc> = <action>[, <action>...]
      aiactions/reset <npc>

    An action is one of the game's commands (those of the cmdset the
    AI_ACTION_CMDSET setting names: give, get, drop, pose, look, whisper, go
    and recall, a search of its own memories, by default) that the NPC may
    run as itself before it answers. Its own locks and the NPC's permissions
    apply, and the game's at_ai_action hook
    may refuse it. Without a value: the NPC's actions, where they come from
    (its own list, or the game's AI_ACTIONS) and the commands it could be
    given. With one: the NPC's own list becomes exactly those; /add and
    /remove change it; /reset makes it follow AI_ACTIONS again. A name that
    is no command of the cmdset is refused.
    """

    key = "aiactions"
    switch_options = ("add", "remove", "reset")

    def func(self) -> None:
        """Parse ``<npc>[ = <actions>]`` and show or change (see the class doc)."""
        name, equals, value = self.args.partition("=")
        npc, script = self.npc_named(name, "aiactions <npc>[ = <action>, ...]")
        if not npc:
            return
        try:
            known = _command_names()
        except Exception as err:  # noqa: BLE001 - tell the admin, not a traceback
            self.caller.msg(f"AI_ACTION_CMDSET cannot be loaded: {err}")
            return
        if "reset" in self.switches:
            script.attributes.remove("actions")
            self.caller.msg(f"{npc.key} follows AI_ACTIONS again.")
        elif equals:
            wanted = _names(value)
            unknown = [n for n in wanted if n not in known]
            if unknown:
                self.caller.msg(f"No such command in the action cmdset: {', '.join(unknown)} "
                                f"(it has: {', '.join(sorted(set(known.values())))}).")
                return
            current = list(script.cfg("actions") or [])
            if "add" in self.switches:
                wanted = current + [n for n in wanted if n not in current]
            elif "remove" in self.switches:
                wanted = [n for n in current if n not in wanted]
            script.db.actions = wanted
        self.show(npc, script, known)

    def show(self, npc, script, known) -> None:
        """Tell the caller the NPC's actions, their source and what else it could be given."""
        names, source = resolve_option("actions", script)
        offered = [name for name, _ in offered_actions(script)]
        missing = [n for n in names or () if n not in offered]
        text = (f"|w{npc.key}|n's actions ({'its own' if source == NPC_SOURCE else 'game: AI_ACTIONS'}"
                f"): {', '.join(offered) or 'none (it only speaks)'}")
        if missing:
            text += f"\n  not in the action cmdset, left out: {', '.join(missing)}"
        text += f"\n  the action cmdset has: {', '.join(sorted(set(known.values())))}"
        self.caller.msg(text)
