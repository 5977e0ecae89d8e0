"""
Rebuilding the runtime history from a checkpoint plus the archive records written after it.

The archive (``memory/archive.py``) is the write-ahead record; ``db.conversation_history`` is a
checkpoint of the runtime history. After a crash the records newer than the checkpoint are
applied here in order. Each application is idempotent, so replaying a record that the
checkpoint already reflects changes nothing: this is what makes a ``kill -9`` at any point of a
compaction leave a consistent state (no message missing from both context and archive, no
duplicated marker).
"""

from __future__ import annotations

from .masking import apply_masks
from .splice import SpliceError, splice


def apply_record(messages, record) -> tuple:
    """
    Apply one archive record to ``messages`` (a list of message dicts).

    Args:
        messages (list[dict]): the runtime history; not modified.
        record (dict): an archive record (``kind`` ``message``, ``compaction``, ``evict``,
            ``forget`` or ``mask``; shapes in ``memory/archive.py``; a ``mask`` record is
            ``{"kind": "mask", "ids": [...], "replacements": [<placeholder message>, ...]}``,
            see ``core/masking.py``). Unknown kinds are ignored.

    Returns:
        tuple: ``(new_messages, changed)``; ``new_messages`` is ``messages`` itself when
        nothing changed.
    """
    kind = record.get("kind")
    ids = {m.get("id") for m in messages}
    if kind == "message":
        msg = record.get("msg") or {}
        if msg.get("id") in ids:
            return messages, False
        return messages + [msg], True
    if kind == "compaction":
        marker = record.get("marker") or {}
        if marker.get("id") in ids:
            return messages, False
        try:
            return splice(messages, record["first_id"], record["last_id"], [marker]), True
        except (KeyError, SpliceError):
            return messages, False
    if kind in ("evict", "forget"):
        # a forget record (docs/design.md, "Forgetting a player") takes its ids out for good:
        # replayed after a crash, the player's lines and the summaries made from them stay out
        gone = set(record.get("ids") or ())
        if not gone & ids:
            return messages, False
        return [m for m in messages if m.get("id") not in gone], True
    if kind == "mask":
        # observation masking (core/masking.py): placeholders swapped in by id; a message
        # already masked, or compacted away since, is left alone
        current = {m.get("id"): m for m in messages}
        todo = [
            r for r in record.get("replacements") or ()
            if r.get("id") in current and current[r["id"]].get("content") != r.get("content")
        ]
        if not todo:
            return messages, False
        return apply_masks(messages, todo), True
    return messages, False


def replay(messages, records) -> tuple:
    """
    Apply ``records`` in order to ``messages`` (not modified) and return
    ``(new_messages, applied_records)``.

    Message records, the bulk of any replay, are appended in O(1) each against one running id
    set; compaction, eviction and mask records go through :func:`apply_record` (O(n) each), after
    which the id set is rebuilt. So a replay costs O(records + n x structural records) instead of
    O(records x n).
    """
    current = list(messages)
    ids = {m.get("id") for m in current}
    applied = []
    for record in records:
        if record.get("kind") == "message":
            msg = record.get("msg") or {}
            if msg.get("id") in ids:
                continue
            current.append(msg)
            ids.add(msg.get("id"))
            applied.append(record)
            continue
        current, changed = apply_record(current, record)
        if changed:
            applied.append(record)
            ids = {m.get("id") for m in current}
    return current, applied
