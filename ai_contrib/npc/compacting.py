"""
A compaction of the NPC's history with its shared checks, and the fact extraction that reads
what it will replace first (``docs/design.md``, "One compaction engine", "Summary compaction",
"Pre-compaction fact extraction"): the entry points the emergency check, the sleep phase, the
per-turn hook (:mod:`ai_contrib.npc.memory_work`) and an admin's ``compact`` call.

The strategies and their plans are :mod:`ai_contrib.core.compaction`, run by
:mod:`ai_contrib.npc.compaction_runner`; a compaction is hardened so that a message arriving
during it survives (it replaces an id range) and a failed summary leaves the history as it
was.

:func:`compact_conversation_history` gives a
:class:`~ai_contrib.core.compaction.CompactionResult`, stored in the compaction log as its dict
(``docs/design.md``, "Summary compaction", result dicts):

* skipped: ``{"skipped": True, "reason": str, ...}``
* failed: ``{"success": False, "error": str, "trigger": str}``
* done: ``{"success": True, "compacted_messages": int, "preserved_messages": int,
  "original_tokens": int, "new_tokens": int, "reduction_pct": float, "summary_tokens": int,
  "trigger": str, "marker_id": str}`` (tokens are model tokens, see ``core/tokens.py``)
"""

from evennia.utils import logger
from twisted.internet import defer

from ..core.compaction import AUTOMATIC_TRIGGERS, CompactionResult
from ..core.messages import is_marker
from ..core.outcome import FAILED, ExtractionResult
from ..memory.compaction_log import breaker_open
from ..settings import get_setting
from . import compaction_runner, hurry


@defer.inlineCallbacks
def compact_conversation_history(script, character, force=False, trigger=None, strategy=None,
                                 hold_from=None) -> defer.Deferred:
    """
    Compact the NPC's history with its compaction strategy. The ``summary`` strategy (the
    default) summarises the messages before the preserve window and replaces them with one
    ``[CONTEXT SUMMARY]`` system message (``docs/design.md``, "Summary compaction"); the others
    (``mask``, ``hybrid``, ``cascade``, ``replace_all``) are run by
    :func:`ai_contrib.npc.compaction_runner.run_strategy` after the shared checks below.

    Args:
        script (AssistantScript): the NPC's script (history, config Attributes).
        character (AssistantCharacter): the NPC (journal).
        force (bool): ignore the threshold (never the preserve window) and ``compact_enabled``.
        trigger (str, optional): ``"sleep"``, ``"emergency"``, ``"turn"`` (after a reply) or
            ``"manual"``; defaults to ``"emergency"`` when forced, else ``"sleep"``. Automatic
            triggers respect the circuit breaker; ``"manual"`` always runs.
        strategy (str, optional): run this strategy once instead of the NPC's
            ``compact_strategy`` (``compact <npc>/strategy=<name>``).
        hold_from (str, optional): the id of the first message the compaction may not replace,
            with everything after it (the emergency path: what its fact extraction did not read,
            :func:`ai_contrib.npc.compaction_runner.planned_span`).

    Returns:
        Deferred firing a :class:`~ai_contrib.core.compaction.CompactionResult` (module
        docstring; other strategies set ``strategy`` and add their own fields, see
        :mod:`ai_contrib.npc.compaction_runner`). Never errbacks
        for LLM, archive or summary-validation failures: those give ``success: False`` and
        leave the history exactly as it was. An unknown ``strategy`` gives ``success: False``.
    """
    trigger = trigger or ("emergency" if force else "sleep")
    if script.ndb.compacting:
        return CompactionResult.skip("already compacting", trigger)
    if not script.cfg("compact_enabled") and not force:
        return CompactionResult.skip("compaction disabled", trigger)
    if trigger in AUTOMATIC_TRIGGERS and breaker_open(script):
        return CompactionResult.skip(
            f"automatic compaction paused after {script.db.compact_failures} "
            f"failures (last: {script.db.compact_last_error})", trigger,
        )
    try:
        strategy = compaction_runner.resolve_strategy(script, strategy)
    except ValueError as err:
        return CompactionResult.fail(str(err), trigger)
    try:
        result = yield compaction_runner.run_strategy(script, character, strategy, force,
                                                      trigger, hold_from)
    finally:
        # the next compaction counts its hurry from where it begins (npc.hurry)
        hurry.work_ended(script)
    return result


def run_pre_compaction_extraction(script, character, max_iterations=None,
                                  span_ids=None) -> defer.Deferred:
    """
    Let the NPC journal the facts it must not lose before compaction (``docs/design.md``,
    "Pre-compaction fact extraction"); ``span_ids`` (a set of message ids) limits what it reads
    to those messages (default: the whole history).

    Returns:
        Deferred firing an :class:`~ai_contrib.core.outcome.ExtractionResult`; never errbacks.
    """
    from .extraction import run_pre_compaction_extraction as run

    d = defer.maybeDeferred(run, script, character, max_iterations=max_iterations,
                            span_ids=span_ids)

    def _failed(failure):
        logger.log_warn(f"AI {character}: fact extraction failed: {failure.getErrorMessage()}")
        return ExtractionResult(FAILED, error=failure.getErrorMessage())

    return d.addErrback(_failed)


@defer.inlineCallbacks
def extract_before_compaction(script, character, trigger, force=True,
                              strategy=None) -> defer.Deferred:
    """
    Journal the facts of what the NPC's next compaction will replace, before it does
    (``docs/design.md``, "Pre-compaction fact extraction"): the compaction is planned now, the
    fact extraction reads the span it will replace (``PRE_COMPACT_EMERGENCY_ITERATIONS``), and
    the compaction after it must stop where the extraction stopped reading. Nothing is read
    when the strategy writes no summary or the plan is skipped.

    Args:
        trigger (str): the compaction's trigger (``"emergency"``, ``"manual"``).
        force (bool): as the compaction's (a forced plan ignores the threshold).
        strategy (str, optional): the strategy the compaction will run (default the NPC's).

    Returns:
        Deferred[str | None]: the id of the first message the compaction may not replace
        (``hold_from`` of :func:`compact_conversation_history`), or None.
    """
    if not compaction_runner.summarises(script, strategy):
        return None
    # the lines the preserve window keeps stay in context and are read by the extraction
    # before the compaction that replaces them: each line is read once, and a request that
    # evaluated the whole history on the memory server's core now reads a part
    planned = compaction_runner.planned_span(script, trigger, force=force, strategy=strategy)
    if planned is None:
        return None
    span_ids, hold_from = planned
    extraction = yield run_pre_compaction_extraction(
        script, character, span_ids=span_ids,
        max_iterations=int(get_setting("PRE_COMPACT_EMERGENCY_ITERATIONS")),
    )
    read = set(extraction.read_ids or ())
    history = script.history
    if read and not span_ids <= read:  # one request could not hold it all
        # a compaction that ran meanwhile (compact/force) may have taken what it read
        positions = [i for i, m in enumerate(history) if m.get("id") in read]
        if positions and positions[-1] + 1 < len(history):
            hold_from = history[positions[-1] + 1]["id"]
    if hold_from is not None and all(m.get("id") != hold_from for m in history):
        # the bound on a growing history (npc.eviction.bound_in_flight) moved the oldest lines
        # out meanwhile, the span's end with them: hold from the first line it left that the
        # extraction did not read, or a compaction would replace lines no extraction read
        hold_from = next((m["id"] for m in history if not is_marker(m)
                          and m.get("id") not in span_ids and m.get("id") not in read), None)
    return hold_from


@defer.inlineCallbacks
def compact_after_extraction(script, character, force=False, trigger="manual",
                             strategy=None) -> defer.Deferred:
    """
    :func:`compact_conversation_history` after the fact extraction over what it will replace
    (:func:`extract_before_compaction`): the emergency compaction's path and an admin's
    ``compact`` (``docs/design.md``, "Pre-compaction fact extraction"). A compaction already
    under way is reported as skipped without extracting. ``script.ndb.compacting`` is set
    from the start of the extraction (:func:`ai_contrib.npc.memory_wait.memory_under_way`).

    Returns:
        Deferred firing the :class:`~ai_contrib.core.compaction.CompactionResult`.
    """
    if script.ndb.compacting:
        return CompactionResult.skip("already compacting", trigger)
    hold_from = None
    if force or script.cfg("compact_enabled"):
        # the compaction is under way from its extraction on: an admin's aisleep or compact
        # meanwhile is told so at once and waits, a sleep's work does not start beside it, and
        # the history stays bounded (ai_contrib.npc.memory_wait, core.tick)
        script.ndb.compacting = True
        try:
            hold_from = yield extract_before_compaction(script, character, trigger, force,
                                                        strategy)
        except ValueError:  # an unknown strategy: the compaction says so
            hold_from = None
        finally:
            # lowered for the compaction's own check; it raises the mark again before the
            # reactor turns, while its summaries are written (compaction_runner)
            script.ndb.compacting = False
    result = yield compact_conversation_history(script, character, force=force,
                                                trigger=trigger, strategy=strategy,
                                                hold_from=hold_from)
    return result
