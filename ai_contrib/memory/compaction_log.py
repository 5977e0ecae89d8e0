"""
What a compaction leaves on the NPC besides its archive record (``docs/design.md``, "Summary
compaction", "Journal and Mem0"): the compaction log ``aihistory`` shows
(``script.db.compaction_log``), the circuit breaker (``db.compact_failures``,
``db.compact_last_error``), the compaction count (``db.compaction_count``,
``db.compaction_counted_seq``, ``db.last_compaction``) and the summary's journal synthesis
entry. The decisions are pure functions of :mod:`ai_contrib.core.compaction`; this module reads
and writes the Attributes.

``script`` is the NPC's ``AssistantScript`` (its ``db``, ``obj`` and ``runtime``);
``character`` the NPC (its ``db.journal``).
"""

from __future__ import annotations

from datetime import datetime, timezone

from evennia.utils import logger

from ..core.compaction import (
    AUTOMATIC_TRIGGERS,
    CompactionResult,
    appended_log,
    breaker_tripped,
    context_change,
    counts_once,
    failure_event,
    recovered_event,
    synthesis_entry,
)
from ..settings import get_setting
from .journal import JournalEntry, add_entry, ensure_journal, find_entry

__all__ = [
    "breaker_open",
    "log_event",
    "note_compaction_applied",
    "record_failure",
    "record_success",
    "record_synthesis",
    "recover_after_replay",
]


def now_iso() -> str:
    """The time now, ISO-8601 UTC."""
    return datetime.now(timezone.utc).isoformat()


def log_event(script, event, at=None) -> None:
    """
    Add ``event`` to the NPC's compaction log (an Attribute of dicts): a dict with ``at``, or a
    :class:`~ai_contrib.core.compaction.CompactionResult`, stored as its dict with ``at``
    (ISO-8601 UTC; default now) first.
    """
    if isinstance(event, CompactionResult):
        event = {"at": at or now_iso(), **event.as_dict()}
    script.db.compaction_log = appended_log(script.db.compaction_log, event)


def breaker_open(script) -> bool:
    """True when automatic compaction is paused after too many consecutive failures."""
    return breaker_tripped(script.db.compact_failures, get_setting("COMPACT_FAILURE_LIMIT"))


def record_failure(script, trigger, error, strategy="summary") -> CompactionResult:
    """
    Log a failed compaction and count it towards the circuit breaker when ``trigger`` is
    automatic (an admin's ``manual`` compaction never pauses the NPC's own).

    Returns:
        CompactionResult: the failure (stored as ``{"success": False, "error", "trigger",
        "strategy"}``).
    """
    event = failure_event(now_iso(), trigger, error, strategy)
    log_event(script, event)
    script.db.compact_last_error = error
    if trigger in AUTOMATIC_TRIGGERS:
        script.db.compact_failures = (script.db.compact_failures or 0) + 1
        if breaker_open(script):
            logger.log_warn(
                f"AI {script.obj}: automatic compaction paused after "
                f"{script.db.compact_failures} consecutive failures (last: {error}); "
                "an admin can still run `compact`"
            )
    logger.log_warn(f"AI compaction [{trigger}, {strategy}] {script.obj} failed: {error}")
    return CompactionResult.fail(error, trigger, strategy)


def record_success(script, character, result, at=None) -> CompactionResult:
    """
    Bookkeeping of a successful compaction: reset the circuit breaker, add ``result`` (a
    successful :class:`~ai_contrib.core.compaction.CompactionResult`) to the compaction log at
    ``at`` (default ``db.last_compaction``) and log one server line. Returns ``result``.
    """
    script.db.compact_failures = 0
    script.db.compact_last_error = None
    log_event(script, result, at=at or script.db.last_compaction)
    logger.log_info(
        f"AI compaction [{result.trigger}, {result.strategy}] {character}: "
        f"{result.compacted_messages} messages, {result.original_tokens} -> "
        f"{result.new_tokens} tokens ({result.reduction_pct:.0f}% reduction)"
        + context_change(result)
    )
    return result


def record_synthesis(character, marker) -> JournalEntry | None:
    """
    Archive the summary ``marker`` as a synthesis entry in the journal, once per marker
    (:func:`ai_contrib.core.compaction.synthesis_entry`). Returns the entry, or None when there
    is none to add.
    """
    fields = synthesis_entry(marker)
    if fields is None:
        return None
    journal = ensure_journal(character.db.journal)
    if find_entry(journal, marker_id=marker["id"]):
        return None
    entry = add_entry(journal, fields.pop("text"), **fields)
    character.db.journal = journal
    return entry


def count_compaction(script, marker, seq) -> bool:
    """Count the compaction recorded at archive ``seq`` once; True if it was counted now."""
    counted = script.db.compaction_counted_seq
    if counted is not None and seq <= counted:
        return False
    script.db.compaction_count = (script.db.compaction_count or 0) + 1
    script.db.compaction_counted_seq = seq
    script.db.last_compaction = (marker.get("metadata") or {}).get("compacted_at")
    return True


def note_compaction_applied(script, character, marker) -> None:
    """
    The bookkeeping that follows every applied compaction, right after its archive record:
    the journal synthesis entry and the compaction count. Both are idempotent (keyed by marker
    id and archive seq), so :func:`recover_after_replay` can redo them after a crash.
    """
    record_synthesis(character, marker)
    count_compaction(script, marker, script.runtime.archive.last_seq)


def recover_after_replay(script, records) -> None:
    """
    Finish work a crash interrupted: every compaction replayed from the archive (``records``:
    archive record dicts) gets its journal synthesis entry and is counted and logged, once (see
    :func:`note_compaction_applied`).
    """
    character = script.obj
    if character is None:
        return
    for record in records:
        marker = record.get("marker")
        if record.get("kind") != "compaction" or not marker:
            continue
        record_synthesis(character, marker)
        if counts_once(marker) and count_compaction(script, marker, record["seq"]):
            log_event(script, recovered_event(record))
