"""
Walking a guest to the next room (``ai_contrib`` docs, "Actions"): the game's ``lead`` command,
and the action cmdset ``server/conf/settings.py`` names.

:class:`CmdLead` takes the one who runs it through an exit and the person led after it, each by
the exit's own command (``ai_contrib.action_commands.traverse``), so the exit's lock applies to
both, as when each types its name. Marta runs it as an action (``aiactions Marta = give, lead``)
to show a guest up to the east room; her typeclass walks her back to her counter
(``typeclasses/innkeeper.py``). :class:`TavernActionCmdSet` is the town gate's action cmdset plus
``lead``.
"""

from evennia.commands.default.muxcommand import MuxCommand

from ai_contrib.action_commands import traverse

from .gate import GateActionCmdSet


class CmdLead(MuxCommand):
    """
    walk someone through an exit with you

    Usage:
      lead <person> = <exit>

    You go through the exit and the person follows you, if its lock lets
    both of you through.
    """

    key = "lead"
    locks = "cmd:all()"

    def func(self):
        """
        Find the person and the exit here; when the exit's traverse lock passes both, go through
        it, then take the person through it after you.

        Returns:
            Deferred or None: the two walks, one after the other (waited on by the command
            handler).
        """
        caller, here = self.caller, self.caller.location
        if not (self.lhs and self.rhs) or here is None:
            caller.msg("Usage: lead <person> = <exit>")
            return None
        person = caller.search(self.lhs.strip(), location=here)
        exits = [obj for obj in here.contents if obj.destination]
        exit_obj = person and caller.search(
            self.rhs.strip(), candidates=exits, nofound_string=f"There is no exit '{self.rhs}' here.")
        if not exit_obj:
            return None
        for walker in (caller, person):
            if not exit_obj.access(walker, "traverse"):
                who = "You" if walker is caller else person.key
                caller.msg(f"{who} cannot go {exit_obj.key}: "
                           f"{exit_obj.db.err_traverse or 'the way is barred'}")
                return None

        def follow(_):
            # the person follows only a leader who did get through
            if caller.location == exit_obj.destination and person.location == here:
                return traverse(person, exit_obj)
            return None

        return traverse(caller, exit_obj).addCallback(follow)


class TavernActionCmdSet(GateActionCmdSet):
    """The contrib's default actions, the gate's ``unlock`` and :class:`CmdLead`."""

    def at_cmdset_creation(self):
        """The gate's action cmdset, then ``lead``."""
        super().at_cmdset_creation()
        self.add(CmdLead())
