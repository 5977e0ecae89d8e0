"""
Orchestration of the NPC's memory work: compaction, the sleep tick, the emergency check.

This module only sequences (``docs/design.md``, "One compaction engine"): the strategies and
their plans are :mod:`ai_contrib.core.compaction`, run by :mod:`ai_contrib.npc.compaction_runner`;
the
summary requests are :mod:`ai_contrib.llm.summariser`; the compaction log, the circuit breaker
and the journal synthesis are :mod:`ai_contrib.memory.compaction_log`. Design:
``docs/design.md``, "Summary compaction" (sleep-triggered compaction at 70 %, emergency
compaction at 80 %, ``compact_conversation_history``, result dicts) and "Pre-compaction fact
extraction", hardened
so that a message arriving during compaction survives it (compaction replaces an id range) and
a failed summary leaves the history as it was.

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

from .core.compaction import AUTOMATIC_TRIGGERS, STALL_FRACTION, CompactionResult  # noqa: F401
from .core.outcome import FAILED, ExtractionResult, SleepResults
from .core.summary import DEFAULT_COMPACTION_PROMPT
from .llm.summariser import summary_input_budget  # noqa: F401  (re-exported)
from .memory.archive import ArchiveError
from .memory.compaction_log import (  # noqa: F401  (re-exported)
    breaker_open,
    log_event,
    note_compaction_applied,
    now_iso,
    record_synthesis,
    recover_after_replay,
)
from .memory.housekeeping import consolidate_entities, prune_episodic
from .memory.journal import ensure_journal
from .npc import compaction_runner
from .npc.gossip import receive_gossip
from .npc.notify import notify_admins
from .npc.quote_repair import repair_quotes
from .npc.recall import embed_archive
from .npc.scene import update_impressions
from .settings import get_setting

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "after_turn_compaction",
    "breaker_open",
    "check_emergency_compaction",
    "compact_after_extraction",
    "compact_conversation_history",
    "evict_overflow",
    "extract_before_compaction",
    "recover_after_replay",
    "run_pre_compaction_extraction",
    "run_sleep_tick",
]

#: the old private name of the journal synthesis step, used by the storage benchmark
_record_synthesis = record_synthesis


@defer.inlineCallbacks
def compact_conversation_history(script, character, force=False, trigger=None, strategy=None,
                                 hold_from=None):
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
    result = yield compaction_runner.run_strategy(script, character, strategy, force, trigger,
                                                  hold_from)
    return result


def run_pre_compaction_extraction(script, character, max_iterations=None, span_ids=None):
    """
    Let the NPC journal the facts it must not lose before compaction (``docs/design.md``,
    "Pre-compaction fact extraction"); ``span_ids`` (a set of message ids) limits what it reads
    to those messages (default: the whole history).

    Returns:
        Deferred firing an :class:`~ai_contrib.core.outcome.ExtractionResult`; never errbacks.
    """
    from .npc.extraction import run_pre_compaction_extraction as run

    d = defer.maybeDeferred(run, script, character, max_iterations=max_iterations,
                            span_ids=span_ids)

    def _failed(failure):
        logger.log_warn(f"AI {character}: fact extraction failed: {failure.getErrorMessage()}")
        return ExtractionResult(FAILED, error=failure.getErrorMessage())

    return d.addErrback(_failed)


@defer.inlineCallbacks
def extract_before_compaction(script, character, trigger, force=True, strategy=None):
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
    if read and not span_ids <= read:  # one request could not hold it all
        history = script.history
        # a compaction that ran meanwhile (compact/force) may have taken what it read
        positions = [i for i, m in enumerate(history) if m.get("id") in read]
        if positions and positions[-1] + 1 < len(history):
            hold_from = history[positions[-1] + 1]["id"]
    return hold_from


@defer.inlineCallbacks
def compact_after_extraction(script, character, force=False, trigger="manual", strategy=None):
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


@defer.inlineCallbacks
def check_emergency_compaction(script, character):
    """
    The emergency check at the start of an awake tick (``docs/design.md``, "Summary compaction"):
    at or above ``compact_emergency_threshold`` of the budget, plan the compaction, extract facts
    from what it will replace (3 iterations), compact with ``force=True`` no further than the
    extraction read, then consolidate the journal into Mem0 (``docs/design.md``, "Journal and
    Mem0": a busy NPC does not wait for a sleep). O(1) when nothing needs doing: it reads the
    running token total.

    Returns:
        Deferred firing the :class:`~ai_contrib.core.compaction.CompactionResult`, or None
        when no compaction was needed.
    """
    if not script.cfg("compact_enabled") or script.ndb.compacting:
        return None
    usage = script.token_usage()
    if usage < script.cfg("compact_emergency_threshold"):
        return None
    if breaker_open(script):
        if usage >= 1.0:
            evict_overflow(script, character)
        return None
    logger.log_warn(f"AI {character}: emergency compaction triggered: {usage:.1%} context usage")
    result = yield compact_after_extraction(script, character, force=True, trigger="emergency")
    # masking alone (or a cascade cycle over a few huge messages) can leave it over budget
    if script.token_usage() >= 1.0:
        evict_overflow(script, character)
    # a busy NPC may not sleep for days: what this compaction journaled (its facts, its
    # synthesis) reaches long-term memory now, on the store's thread, as a sleep would store it
    consolidation = yield _consolidate_into_mem0(character)
    if consolidation.added:
        logger.log_info(f"AI {character}: {consolidation.added} journal entries "
                        "consolidated into Mem0 after an emergency compaction")
    return result


def evict_overflow(script, character):
    """
    Last resort when the context is full and no summary can be made (summariser down, breaker
    open): move the oldest messages out of the runtime context so the NPC keeps answering. They
    stay in the archive (``aihistory <npc>/raw``), so nothing is lost, and admins are told.

    Evicts from the oldest non-summary message up to a safe cut (tool calls stay with their
    results) until the history is back under the emergency threshold. Does nothing while a
    compaction is being written: it will bring the context back, and taking messages out of the
    range it replaces would make its splice fail.

    Returns:
        int: the number of messages evicted.
    """
    if script.ndb.compacting:
        return 0
    target = float(script.cfg("compact_emergency_threshold")) * script.budget()
    try:
        # a line still waiting for its answer, and all after it, stay: evicted, it would never
        # be answered (the reply reads its lines from the history)
        ids = script.runtime.evict_oldest(
            target, reason="context full and no summary could be made",
            stop_ids=frozenset(script.awaiting_answer_ids()))
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not evict overflowing messages: {err}")
        return 0
    if not ids:
        return 0
    script.checkpoint()
    log_event(script, {"at": now_iso(), "trigger": "overflow", "success": False,
                       "error": f"evicted {len(ids)} oldest messages to the archive"})
    why = (f"compaction failing: {script.db.compact_last_error}" if script.db.compact_last_error
           else "more was said while it was compacted than the compaction saved")
    notify_admins(
        f"AI {character}: context over its budget ({why}); "
        f"moved the {len(ids)} oldest messages out of context into the archive "
        f"(aihistory {character.key}/raw). Check the summariser, then `compact {character.key}`."
    )
    return len(ids)


def inflight_cap(script):
    """
    ``AI_COMPACT_INFLIGHT_CAP`` for this NPC: the multiple of its budget its runtime history may
    reach while memory work is under way (``docs/design.md``, "Bounded while a compaction is
    written").

    Returns:
        float: at least 1.0.

    Raises:
        ValueError: the setting is not a number of at least 1.0.
    """
    value = script.cfg("compact_inflight_cap")
    problem = f"AI_COMPACT_INFLIGHT_CAP must be a number >= 1.0, got {value!r}"
    try:
        cap = float(value)
    except (TypeError, ValueError):
        raise ValueError(problem) from None
    if not cap >= 1.0:
        raise ValueError(problem)
    return cap


def bound_in_flight(script, character):
    """
    Keep the runtime history within ``AI_COMPACT_INFLIGHT_CAP`` times the budget while memory
    work (a compaction, the fact extraction before it, a sleep phase) is under way, however
    long the summariser takes (``docs/design.md``, "Bounded while a compaction is written").

    At the cap, the oldest messages outside the range the compaction is replacing
    (``ndb.compacting_ids``: its id-range splice still finds every one of them) leave the
    context for the archive, down to halfway between the budget and the cap, so it runs once per
    half a budget of new lines, not on every line. Lines awaiting an answer, and everything
    after the first of them, stay. O(1) below the cap (the running token total).

    Returns:
        int: the number of messages moved out (0 below the cap, or when nothing may go).
    """
    budget = script.budget()
    try:
        cap = inflight_cap(script)
    except ValueError as err:
        logger.log_err(f"AI {character}: {err}; using 2.0")
        cap = 2.0
    if script.token_count() < cap * budget:
        return 0
    before = script.token_count()
    try:
        ids = script.runtime.evict_oldest(
            (1.0 + cap) / 2 * budget,
            reason=f"context at {cap:g} times its budget while a compaction was written",
            keep_ids=script.ndb.compacting_ids or frozenset(),
            stop_ids=frozenset(script.pending_ids()),
        )
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not move the oldest messages out: {err}")
        return 0
    if not ids:
        return 0
    after = script.token_count()
    if script.ndb.compacting:
        script.ndb.compacting_evicted = (script.ndb.compacting_evicted or 0) + before - after
    logger.log_warn(
        f"AI {character}: context {before} tokens, {cap:g} times its budget, while memory work "
        f"was under way: moved the {len(ids)} oldest messages outside the range being "
        f"summarised to the archive ({before} -> {after} tokens)"
    )
    return len(ids)


def _consolidate_entities(character):
    from .memory.mem0_store import memory_setting

    profiles, stats = consolidate_entities(
        dict(character.db.entity_profiles or {}),
        int(memory_setting("MEMORY_ENTITY_MAX_OBSERVATIONS") or 0),
    )
    character.db.entity_profiles = profiles
    return stats


def _prune_episodic(character):
    journal = ensure_journal(character.db.journal)
    removed = prune_episodic(
        journal,
        max_importance=int(get_setting("JOURNAL_PRUNE_IMPORTANCE")),
        min_age_seconds=float(get_setting("JOURNAL_PRUNE_AGE")),
    )
    if removed:
        character.db.journal = journal
    return {"pruned": len(removed)}


def _consolidate_into_mem0(character):
    from .memory.mem0_store import consolidate_journal

    return consolidate_journal(character)


#: lines said since the NPC last journaled that make a sleep journal them even when no
#: compaction is due (docs/design.md, "Sleep phase")
SLEEP_JOURNAL_MIN_MESSAGES = 10


@defer.inlineCallbacks
def run_sleep_tick(script, character):
    """
    The sleep phase (``docs/design.md``, "Journal and Mem0", "Sleep phase"): memory work while
    no one is waiting for an answer.

    Steps, in order: entity consolidation (merge and de-duplicate ``db.entity_profiles``),
    episodic prune (low-importance journal entries Mem0 already holds), fact extraction (when
    compaction is due and the strategy summarises, or when at least
    :data:`SLEEP_JOURNAL_MIN_MESSAGES` lines were said since the NPC last journaled,
    ``db.journaled_through_seq``), compaction at
    ``compact_sleep_threshold``, gossip (the NPC hears what the NPCs of its gossip networks
    learned in public, :func:`ai_contrib.npc.gossip.receive_gossip`; no LLM call), the quote
    repair (stored summaries and journal entries that quote a line nobody said lose that line,
    :func:`ai_contrib.npc.quote_repair.repair_quotes`; bounded per sleep), and journal ->
    Mem0 consolidation (so facts, syntheses and gossip taken in this sleep are stored in the
    same sleep), vectors for the archived lines that have none yet
    (:func:`ai_contrib.npc.recall.embed_archive`; ``docs/design.md``, "Archived lines'
    vectors"), then the impressions of the people the NPC
    has met, made from the journal's facts (:func:`ai_contrib.npc.scene.update_impressions`; no LLM
    call). There are no memory-link steps: Mem0's vector
    index is the only link structure, so there is no link graph to build or clean.
    A failing step is logged and recorded; the next steps still run.

    Returns:
        Deferred firing a :class:`~ai_contrib.core.outcome.SleepResults`: what each step run
        did.
    """
    results = SleepResults()
    for name, step in (("entity_consolidation", _consolidate_entities),
                       ("episodic_prune", _prune_episodic)):
        try:
            setattr(results, name, step(character))
        except Exception as err:  # housekeeping must never stop the sleep phase
            logger.log_trace(f"AI {character}: sleep step {name} failed")
            setattr(results, name, {"success": False, "error": str(err)})
    usage = script.token_usage()
    compaction_due = (script.cfg("compact_enabled")
                      and usage >= script.cfg("compact_sleep_threshold")
                      and compaction_runner.summarises(script))
    said = [m.get("seq") for m in script.history
            if m.get("role") in ("user", "assistant") and not m.get("tool_calls")
            and m.get("seq") is not None]
    unjournaled = [seq for seq in said if seq > (script.db.journaled_through_seq or -1)]
    # a conversation that never reaches the compaction threshold still reaches long-term memory:
    # the NPC journals it while it sleeps (docs/design.md, "Sleep phase")
    if compaction_due or len(unjournaled) >= SLEEP_JOURNAL_MIN_MESSAGES:
        results.pre_compaction_extraction = yield run_pre_compaction_extraction(
            script, character, max_iterations=int(script.cfg("pre_compact_max_iterations"))
        )
        if said and not results.pre_compaction_extraction.failed:
            script.db.journaled_through_seq = max(said)
    results.context_compaction = yield compact_conversation_history(
        script, character, trigger="sleep"
    )
    if results.pre_compaction_extraction is not None:
        _drop_journaling(script, character)
    try:  # before consolidation, so what it heard reaches Mem0 in this sleep
        results.gossip = receive_gossip(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step gossip failed")
        results.gossip = {"success": False, "error": str(err)}
    try:  # before consolidation, so what it leaves of an entry reaches Mem0 in this sleep
        results.quote_repair = yield repair_quotes(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step quote_repair failed")
        results.quote_repair = {"success": False, "error": str(err)}
    results.memory_consolidation = yield _consolidate_into_mem0(character)
    try:  # the lines said since the last sleep get their vectors (docs/design.md)
        results.archive_vectors = yield embed_archive(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step archive_vectors failed")
        results.archive_vectors = {"success": False, "error": str(err)}
    try:  # after extraction, so this sleep's facts count (docs/design.md, "Scene, events and people")
        results.people_impressions = update_impressions(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step people_impressions failed")
        results.people_impressions = {"success": False, "error": str(err)}
    return results


def _drop_journaling(script, character):
    """
    Move the sleep's fact-extraction traffic (its tool calls and results) out of the runtime
    history when no compaction took it (journaling without a compaction due, or a compaction
    that failed): its facts are in the journal, and a history of tool messages must not stand
    where the conversation was (``docs/design.md``, "Preserve window and cuts"). The messages
    stay in the archive; an archive that cannot record it leaves them (logged).
    """
    try:
        if script.runtime.drop_extraction_traffic():
            script.checkpoint()
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not move the journaling out of context: {err}")


def after_turn_compaction(script, character):
    """
    The micro-compaction hook, called by the ``AssistantScript`` after each turn in which the NPC
    replied (micro-compaction, ``docs/design.md``, "Observation masking"): masks old tool outputs
    under the ``mask`` and ``hybrid`` strategies, starts a due cascade cycle under ``cascade``
    (:func:`ai_contrib.npc.compaction_runner.after_turn`).

    Returns:
        Deferred firing the result dict or None; never errbacks, never blocks a reply.
    """
    return compaction_runner.after_turn(script, character, compact_conversation_history)
