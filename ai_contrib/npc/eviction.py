"""
The NPC's history moved out of context when no compaction brings it back in time
(``docs/design.md``, "Memory work is never starved", "Bounded while a compaction is written"):
the last resort of an over-budget history (:func:`evict_overflow`) and the bound kept while
memory work is under way (:func:`bound_in_flight`), both through :func:`evict_oldest`, which
the ``mask`` strategy's eviction at the emergency threshold uses too. What goes stays in the
archive, and what the NPC did among it is journaled (``docs/design.md``, "Actions"); how far
it goes is :func:`ai_contrib.core.tick.overflow_target` and
:func:`~ai_contrib.core.tick.in_flight_target`.
"""

from evennia.utils import logger

from ..core.tick import in_flight_target, overflow_target
from ..memory.archive import ArchiveError
from ..memory.compaction_log import log_event, now_iso
from .extraction import journal_evicted_actions
from .notify import notify_admins


def evict_oldest(script, character, target, reason, keep_ids=frozenset(),
                 stop_ids=frozenset()) -> list[str]:
    """
    Move the NPC's oldest messages out of context down to ``target`` tokens
    (:meth:`ai_contrib.memory.runtime.RuntimeHistory.evict_oldest`: they stay in the archive,
    no tool call loses its results; ``keep_ids`` and ``stop_ids`` as it takes them), then
    journal what the NPC did among them
    (:func:`ai_contrib.npc.extraction.journal_evicted_actions`): no extraction reads an
    eviction's messages, and what the NPC gave to whom must outlive them as it outlives a
    summary (``docs/design.md``, "Actions").

    Returns:
        list[str]: the ids evicted (empty when nothing needs to go).

    Raises:
        ArchiveError: the eviction could not be recorded (history unchanged, nothing
            journaled).
    """
    before = list(script.history)
    ids = script.runtime.evict_oldest(target, reason=reason, keep_ids=keep_ids,
                                      stop_ids=stop_ids)
    if ids:
        gone = set(ids)
        journal_evicted_actions(script, character, [m for m in before if m.get("id") in gone])
    return ids


def evict_overflow(script, character) -> int:
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
    target = overflow_target(script.cfg("compact_emergency_threshold"), script.budgeting.tokens())
    try:
        # a line still waiting for its answer, and all after it, stay: evicted, it would never
        # be answered (the reply reads its lines from the history)
        ids = evict_oldest(
            script, character, target, reason="context full and no summary could be made",
            stop_ids=frozenset(script.hearing.awaiting_answer_ids()))
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


def inflight_cap(script) -> float:
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


def bound_in_flight(script, character) -> int:
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
    budget = script.budgeting.tokens()
    try:
        cap = inflight_cap(script)
    except ValueError as err:
        logger.log_err(f"AI {character}: {err}; using 2.0")
        cap = 2.0
    before = script.conversation.token_count()
    target = in_flight_target(before, budget, cap)
    if target is None:
        return 0
    try:
        ids = evict_oldest(
            script, character, target,
            reason=f"context at {cap:g} times its budget while a compaction was written",
            keep_ids=script.ndb.compacting_ids or frozenset(),
            stop_ids=frozenset(script.hearing.pending_ids()),
        )
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not move the oldest messages out: {err}")
        return 0
    if not ids:
        return 0
    after = script.conversation.token_count()
    if script.ndb.compacting:
        script.ndb.compacting_evicted = (script.ndb.compacting_evicted or 0) + before - after
    logger.log_warn(
        f"AI {character}: context {before} tokens, {cap:g} times its budget, while memory work "
        f"was under way: moved the {len(ids)} oldest messages outside the range being "
        f"summarised to the archive ({before} -> {after} tokens)"
    )
    return len(ids)
