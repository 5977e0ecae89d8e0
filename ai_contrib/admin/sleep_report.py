"""
What a sleep phase did, in one line for admins: the ``aisleep`` report and ``aihistory``'s
"Last sleep" row.

The sleep phase (:func:`ai_contrib.npc.sleep_phase.run_sleep_tick`) returns a
:class:`~ai_contrib.core.outcome.SleepResults`; when it ends,
:func:`ai_contrib.npc.sleep_watch.sleep_finished` asks the script for its line
(``AssistantScript.describe_sleep``, which calls :func:`describe_sleep`: a game's subclass may
word it its own way), keeps it in ``db.last_sleep`` and hands it to the admins who wait.
"""

from __future__ import annotations

from twisted.python.failure import Failure

from ..core.text import inert_markup
from .compaction_report import describe_result

__all__ = ["describe_sleep"]


def _compaction(result, name):
    if not result:
        return "compaction not run"
    return describe_result(
        name, result,
        skipped=lambda r: f"compaction skipped ({inert_markup(r.reason)})",
        failed=lambda r: f"compaction failed ({inert_markup(r.error)})",
        done=lambda r: (
            f"compacted {r.get('compacted_messages')} messages, "
            f"{r.original_tokens} -> {r.new_tokens} tokens "
            f"({r.reduction_pct:.1f}% reduction)"
            + (f", the model's summary "
               f"{'refused' if r.get('model_fidelity') is not None else 'not used'} "
               f"({inert_markup(r.get('fidelity_reason'))}) and an extract used"
               if r.get("fidelity_replaced") else "")
        ),
        own=lambda line: line.rstrip("."),  # the other strategies' own wording, in a list
    )


def _extraction(result):
    if result is None:
        return "no fact extraction (below the sleep threshold)"
    if result.skipped:
        return f"no fact extraction ({result.reason})"
    facts = int(result.facts_recorded or 0)
    seen = int(result.observations_recorded or 0)
    text = f"{facts} fact(s) journaled" + (f", {seen} observation(s)" if seen else "")
    if result.failed:
        text += f" (extraction failed: {inert_markup(result.error)})"
    return text


def _consolidation(result):
    if not result:
        return "no consolidation"
    if result.skipped:
        return result.reason
    if result.failed:
        return f"consolidation into Mem0 failed ({inert_markup(result.error)})"
    text = f"{int(result.added or 0)} journal entries consolidated into Mem0"
    if result.already_stored:
        text += f" ({result.already_stored} already there)"
    return text


def describe_sleep(result, name="the NPC", woken=None) -> str:
    """
    One line about a sleep phase's result.

    Args:
        result (SleepResults | Failure | None): ``run_sleep_tick``'s
            :class:`~ai_contrib.core.outcome.SleepResults`; a Failure when the phase broke
            off; None when the NPC woke before its sleep work started.
        name (str): the NPC's name, for the compaction strategies' wording.
        woken (str, optional): why the NPC woke, when ``result`` is None (``"Bob speaks"``,
            ``"woken by Ann"``): the admin who waits learns what cut the sleep short.

    Returns:
        str: e.g. ``"compaction skipped (below threshold); no fact extraction (below the sleep
        threshold); 2 journal entries consolidated into Mem0; 1 journal entries pruned"``.
        Error texts come from the LLM client and the store, which mask keys.
    """
    if result is None:
        why = f" ({inert_markup(woken)})" if woken else ""
        return f"woke before the sleep work started{why}: nothing done"
    if isinstance(result, Failure):
        return f"sleep work failed: {result.getErrorMessage()}"
    parts = [
        _compaction(result.context_compaction, name),
        _extraction(result.pre_compaction_extraction),
        _consolidation(result.memory_consolidation),
    ]
    gossip = result.gossip
    if gossip is not None and gossip.failed:
        parts.append(f"gossip failed ({inert_markup(gossip.error)})")
    elif gossip is not None and gossip.count("received"):
        parts.append(f"{gossip.count('received')} fact(s) heard from {gossip.count('peers')} "
                     "NPC(s) of its gossip networks")
    if result.episodic_prune is not None and result.episodic_prune.count("pruned"):
        parts.append(f"{result.episodic_prune.count('pruned')} journal entries pruned")
    repair = result.quote_repair
    if repair is not None and repair.count("quotes_removed"):
        parts.append(f"{repair.count('quotes_removed')} quote(s) no one said removed "
                     f"({repair.count('summaries')} summaries, {repair.count('entries')} "
                     "journal entries)")
    for step in ("entity_consolidation", "episodic_prune", "quote_repair"):
        outcome = getattr(result, step)
        if outcome is not None and outcome.failed:
            parts.append(f"{step.replace('_', ' ')} failed ({inert_markup(outcome.error)})")
    return "; ".join(parts)
