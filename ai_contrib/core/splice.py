"""
Replace a run of messages, found by id, with a summary marker.

A summary is written from a snapshot of the history while the NPC keeps talking; by the time it
comes back, new messages have been appended to the live list. Replacing by position would drop
or duplicate them, so the compacted range is located by its first and last message ids and only
that run is replaced (``docs/design.md``, "Preserve window and cuts"). Message shape:
:mod:`ai_contrib.core.messages`.
"""

from __future__ import annotations

from .messages import Message

__all__ = ["SpliceError", "splice"]


class SpliceError(ValueError):
    """The range to replace is not in the history as expected (missing id, reversed range,
    or different messages than the ones summarised)."""


def _index_of(history, msg_id, what):
    for index, msg in enumerate(history):
        if msg.get("id") == msg_id:
            return index
    raise SpliceError(f"{what} id {msg_id!r} is not in the history")


def splice(history, first_id, last_id, replacement, *, expected_ids=None) -> list[Message]:
    """
    Return a NEW list: ``history`` with the contiguous run from the message ``first_id`` to the
    message ``last_id`` (both included) replaced by ``replacement``.

    Messages before and after the run, including any appended while the summary was being
    written, keep their order. Neither ``history`` nor its dicts are modified.

    Args:
        history (list[dict]): the live history.
        first_id (str): id of the first message to replace.
        last_id (str): id of the last message to replace (may equal ``first_id``).
        replacement (list[dict]): messages to put in their place (usually one marker).
        expected_ids (list[str], optional): the ids the run must hold, in order; guards against
            a run that changed while the summary was pending (e.g. a concurrent compaction).

    Raises:
        SpliceError: if either id is missing, ``last_id`` comes before ``first_id``, or the run
            does not match ``expected_ids``.
    """
    first = _index_of(history, first_id, "first")
    last = _index_of(history, last_id, "last")
    if last < first:
        raise SpliceError(f"last id {last_id!r} comes before first id {first_id!r}")
    if expected_ids is not None:
        found = [msg.get("id") for msg in history[first : last + 1]]
        if found != list(expected_ids):
            raise SpliceError(
                "the range no longer holds the messages that were summarised "
                f"({len(found)} found, {len(expected_ids)} expected)"
            )
    return list(history[:first]) + list(replacement) + list(history[last + 1 :])
