"""
The town gate's command and the game's action cmdset (``ai_contrib`` docs, "Actions").

:class:`CmdUnlock` unbars a locked exit for whoever passes the exit's ``unlock`` lock (the gate's
is ``tag(watch, faction)``: the watch). :class:`GateActionCmdSet` is the contrib's default action
cmdset plus ``unlock``; ``server/conf/settings.py`` names its subclass
``commands.lead.TavernActionCmdSet`` as ``AI_ACTION_CMDSET`` so that staff can give Bram
``aiactions Bram = unlock, look``. Whether he may unlock it now is his typeclass's
hook (``typeclasses/gatekeeper.py``).
"""

from evennia.commands.default.muxcommand import MuxCommand

from ai_contrib.action_commands import ActionCmdSet


class CmdUnlock(MuxCommand):
    """
    unbar a locked exit you hold the right to open

    Usage:
      unlock <exit>

    Opens the exit for everyone, if its unlock lock lets you.
    """

    key = "unlock"
    locks = "cmd:all()"
    arg_regex = r"\s|$"

    def func(self):
        """Find the exit among the room's; open its traverse lock if its unlock lock allows."""
        caller = self.caller
        if not self.args.strip() or caller.location is None:
            caller.msg("Usage: unlock <exit>")
            return
        exits = [obj for obj in caller.location.contents if obj.destination]
        target = caller.search(self.args.strip(), candidates=exits,
                               nofound_string=f"There is no exit '{self.args.strip()}' here.")
        if not target:
            return
        if not target.access(caller, "unlock"):
            caller.msg(f"You cannot unlock the {target.key}.")
            return
        target.locks.add("traverse:all()")
        caller.msg(f"You unbar the {target.key}.")
        caller.location.msg_contents(f"{caller.key} unbars the {target.key}.", exclude=[caller])


class GateActionCmdSet(ActionCmdSet):
    """The contrib's default actions plus :class:`CmdUnlock`."""

    def at_cmdset_creation(self):
        """The default actions, then ``unlock``."""
        super().at_cmdset_creation()
        self.add(CmdUnlock())
