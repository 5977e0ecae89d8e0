"""
``compact``: run, force or switch an AI NPC's compaction strategy (``docs/design.md``,
"One compaction engine").
"""

from __future__ import annotations

import re

from evennia.utils import logger
from evennia.utils.utils import wrap

from ..core.compaction import REGISTRY, CompactionResult, context_change
from ..core.outcome import SleepResults
from ..npc.compacting import compact_after_extraction
from .compaction_report import describe_result
from ..npc.compaction_runner import STRATEGIES, resolve_strategy
from ..npc.memory_wait import memory_under_way, when_memory_idle
from .command_util import StaffCommand, shown, split_npc_switch
from .npcs import find_npc
from .history_command import fidelity_cell

_STRATEGY_ARG = re.compile(r"/?\bstrategy\s*=\s*([\w-]*)", re.IGNORECASE)


class CmdCompact(StaffCommand):
    """
    Compact an AI NPC's conversation history now.

    Usage:
      compact <npc>
      compact/force <npc>
      compact <npc>/strategy=<name>
      compact/strategy=<name> <npc>
      compact/set <npc>/strategy=<name>

    Compacts with the NPC's strategy (see aihistory), or runs the named one
    once; /set makes the named one the NPC's strategy from now on (compacting
    nothing now; safe on a live NPC: summaries already in its history stay and
    are folded in later):
{strategies}
    Without /force a summary only runs above the NPC's sleep threshold (a
    cascade cycle also when one is due); /force ignores the threshold and the
    benefit guard (never the preserve window). Reports what was done and tokens
    before -> after, or why nothing was done. Everything removed from the
    context stays in the archive (aihistory /raw). While the NPC's memory work
    runs (an emergency compaction, its sleep work, another compaction) you are
    told so at once, then what that work did, and the compaction runs when it
    ends.
    """

    key = "compact"
    switch_options = ("force", "set")

    def parse(self) -> None:
        # "strategy=<name>" may come as a switch or after the NPC's name; take it out before
        # MuxCommand sees it (it would drop it as an unknown switch)
        match = _STRATEGY_ARG.search(self.args)
        self.strategy = match.group(1).lower() if match else None
        if match:
            rest = self.args[: match.start()] + " " + self.args[match.end():]
            self.args = rest.lstrip() if rest.lstrip().startswith("/") else " " + rest.strip()
        super().parse()

    def func(self) -> None:
        caller = self.caller
        words, switches = split_npc_switch(self)
        if not words:
            caller.msg("Usage: compact[/force|/set] <npc>[/strategy=<name>]")
            return
        if self.strategy is not None and self.strategy not in STRATEGIES:
            caller.msg(f"Unknown strategy '{self.strategy}'. Choose one of: {', '.join(STRATEGIES)}.")
            return
        npc, script = find_npc(caller, words[0])
        if not npc:
            return
        if "set" in switches:
            if self.strategy is None:
                caller.msg("Usage: compact/set <npc>/strategy=<name>")
                return
            before = resolve_strategy(script)
            script.db.compact_strategy = self.strategy
            caller.msg(f"{npc.key} now compacts with strategy {self.strategy} (was {before}).")
            return
        force = "force" in switches
        how = f" with strategy {self.strategy}" if self.strategy else ""
        running = memory_under_way(script)
        if running:
            # beside it, both would compete for the memory server and time out together
            caller.msg(f"{npc.key}'s {running} is under way: compacting{how} when it ends...")
            work = script.ndb.memory_work
            if work is not None:  # the NPC's own work: its outcome is told before this one's
                work.addCallback(_report_waited, caller, script, running)
        else:
            caller.msg(f"Compacting {npc.key}'s history{how}{' (forced)' if force else ''}...")
        # the fact extraction first, as before every compaction
        d = when_memory_idle(script).addCallback(
            lambda _: compact_after_extraction(script, npc, force=force, trigger="manual",
                                               strategy=self.strategy))
        d.addCallback(lambda result: caller.msg(format_compaction_result(npc, result)))
        d.addErrback(lambda failure: caller.msg(f"Compaction of {npc.key} failed: "
                                                f"{shown(failure.getErrorMessage())}"))


def _report_waited(result, caller, script, running):
    """
    Tell ``caller`` what the memory work a ``compact`` waited for did (a Deferred callback on
    that work: returns ``result`` untouched, and never raises into a chain others share).

    Args:
        result: the work's result: a :class:`~ai_contrib.core.compaction.CompactionResult`
            (an emergency compaction), a :class:`~ai_contrib.core.outcome.SleepResults` (the
            sleep work), or None (nothing was needed, or the work failed and was logged).
        script: the NPC's ``AssistantScript``: a sleep is told in its wording
            (``describe_sleep``, as ``aisleep`` tells it).
        running (str): the work in words (:func:`ai_contrib.npc.memory_wait.memory_under_way`).
    """
    npc = script.obj
    try:
        if isinstance(result, SleepResults):
            line = f": {shown(script.describe_sleep(result))}"
        elif isinstance(result, CompactionResult):
            line = f". {format_compaction_result(npc, result)}"
        else:
            line = ": nothing compacted."
        caller.msg(f"{npc.key}'s {running} ended{line}")
    except Exception as err:  # a report must never break the memory work's chain
        logger.log_warn(f"AI {npc}: compact could not report the work it waited for: {err}")
    return result


def _strategy_help(width=78, indent=6, column=13):
    """The strategy list of the ``compact`` help, from each record's ``description``."""
    lines = []
    for record in REGISTRY.values():
        text = wrap(record.description, width - indent - column, indent=0).splitlines()
        lines.append(" " * indent + record.name.ljust(column) + text[0])
        lines.extend(" " * (indent + column) + more for more in text[1:])
    return "\n".join(lines)


CmdCompact.__doc__ = CmdCompact.__doc__.replace("{strategies}", _strategy_help())


def format_compaction_result(npc, result) -> str:
    """One line for an admin describing a compaction result (a
    :class:`~ai_contrib.core.compaction.CompactionResult`, see
    :mod:`ai_contrib.npc.compacting`)."""
    return describe_result(
        npc.key, result,
        skipped=lambda r: f"Compaction of {npc.key} skipped: {r.reason}.",
        failed=lambda r: (f"Compaction of {npc.key} failed: {shown(r.error)}. "
                          "History unchanged."),
        done=lambda r: _summary_line(npc.key, r),
    )


def _not_kept(result):
    """Why a replaced summary was not kept: it failed the fidelity check (it has a score) or
    the server did not write it in time (none)."""
    return "failed the check" if result.get("model_fidelity") is not None else "was not used"


def _summary_line(npc_key, result):
    return (
        f"Compacted {npc_key}: {result.compacted_messages} messages -> summary, "
        f"{result.original_tokens} -> {result.new_tokens} tokens "
        f"({result.reduction_pct:.1f}% reduction), {result.get('preserved_messages')} kept"
        + context_change(result)
        + (f"; fidelity {fidelity_cell(result)}"
           + (f" (the model's summary {_not_kept(result)}, {shown(result.get('fidelity_reason'))}"
              ": an extract of the span replaced it)"
              if result.get("fidelity_replaced") else "")
           if result.get("fidelity") is not None else "")
        + "."
    )
