"""
Evennia's ``destroy`` command, which also tells the admin what became of a destroyed AI NPC's
memory: its archive is kept (moved to ``deleted/`` beside the archives) and its Mem0 memories
are deleted (``docs/design.md``, "Deleting an NPC"), where Evennia alone says only "Hilda was
destroyed.". :class:`ai_contrib.commands.AIContribCmdSet` holds it in place of Evennia's.

A module of its own: Evennia's building commands can be imported only once Evennia is set up,
and the cmdset imports this when it is built.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from evennia.commands.default.building import CmdDestroy as _EvenniaDestroy

from .command_util import shown

if TYPE_CHECKING:
    from collections.abc import Generator

    from ..npc.erase import RetirementReport


def describe_retired(name, report) -> str:
    """
    The line telling an admin what became of a deleted NPC's memory.

    Args:
        name (str): the NPC's name.
        report (RetirementReport): :func:`ai_contrib.npc.erase.retire_memory`'s report.

    Returns:
        str: e.g. ``"Hilda: its archive was kept: 2 file(s) moved to
        /game/server/ai_archive/deleted (npc-8.jsonl, npc-8.fts); Mem0: 12 memories
        deleted."``
    """
    moved = report.get("moved") or []
    if report.get("file_error"):
        archive = f"|rits archive could not be moved|n: {shown(report['file_error'])}"
    elif moved:
        names = ", ".join(os.path.basename(path) for path in moved)
        archive = (f"its archive was kept: {len(moved)} file(s) moved to "
                   f"{os.path.dirname(moved[0])} ({names})")
    else:
        archive = "it had no archive"
    if report.get("memory_error"):
        memory = f"|rMem0 failed|n: {shown(report['memory_error'])}"
    elif report.get("memories") is not None:
        memory = f"Mem0: {report['memories']} memories deleted"
    else:
        memory = "Mem0: it held none (off or never used)"
    return f"{name}: {archive}; {memory}."


class CmdDestroy(_EvenniaDestroy):
    """
    permanently delete objects

    Usage:
       destroy[/switches] [obj, obj2, obj3, [dbref-dbref], ...]

    Switches:
       override - The destroy command will usually avoid accidentally
                  destroying account objects. This switch overrides this check.
       force - destroy without confirmation.
    Examples:
       destroy house, roof, door, 44-78
       destroy 5-10, flower, 45
       destroy/force north

    Destroys one or many objects. If dbrefs are used, a range to delete can be
    given, e.g. 4-10. Also the end points will be deleted. This command
    displays a confirmation before destroying, to make sure of your choice.
    You can specify the /force switch to bypass this confirmation.

    An AI NPC's archive is kept (moved to deleted/ beside the archives) and its
    Mem0 memories are deleted; the command says which, once done.
    """

    def func(self) -> Generator:
        """Evennia's ``destroy`` step by step (it asks for confirmation with ``yield``), each
        step watched for NPC retirements, whose reports the caller is told when they come."""
        from ..npc.erase import watching_retirements

        steps, answer = super().func(), None
        while True:
            with watching_retirements() as retired:
                try:
                    prompt = steps.send(answer)
                except StopIteration:
                    prompt = None
            for name, report in retired:
                report.addCallback(self.tell_retired, name)
            if prompt is None:
                return
            answer = yield prompt

    def tell_retired(self, report, name) -> RetirementReport:
        """Tell the caller what became of ``name``'s memory (:func:`describe_retired`)."""
        self.caller.msg(describe_retired(name, report))
        return report
