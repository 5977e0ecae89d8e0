"""
The runtime history of one NPC: the message list its prompts are built from, with a running
token total and the archive as write-ahead record.

Costs (the point of this module): an append is one archive line plus one token count of the new
message, O(1) in the history length; the budget check reads a running total, O(1); a compaction
or eviction is O(n) once.

The running total counts what a reply prompt can show. Fact extraction's tool calls and results
(:func:`ai_contrib.core.cuts.is_extraction_traffic`) never are: they are kept in the history as
the NPC's record of what it journaled, cost no budget, and leave with the compaction they
prepared (``docs/design.md``, "Preserve window and cuts"). Counted, they were 29 % of the text
that entered the context on a default install, and set off compactions and evictions of their
own. The checkpoint into ``script.db.conversation_history`` (a full
re-pickle, O(n)) is the caller's to schedule, not done per append.
"""

from __future__ import annotations

from ..core.cuts import eviction_ids, is_extraction_traffic
from ..core.messages import Message, normalise_message
from ..core.replay import replay
from ..core.splice import splice
from ..core.tokens import TokenLedger


class RuntimeHistory:
    """
    Runtime context rebuilt from a checkpoint plus the archive.

    Args:
        archive (MessageArchive): this NPC's archive.
        checkpoint (list[dict]): the last saved ``db.conversation_history`` (may hold
            ``{role, content}`` entries from older code).
        checkpoint_seq (int or None): the archive ``seq`` the checkpoint reflects; ``-1`` for an
            empty start. ``None`` means the checkpoint predates the archive: its messages are
            archived now so that nothing said before stays unrecorded.
        model (str, optional): model name used for token counting.

    Attributes:
        messages (list[dict]): the live runtime history (do not mutate directly: use
            :meth:`append`, :meth:`apply_compaction`, :meth:`evict`).
        replayed (list[dict]): archive records applied while loading (for crash recovery).
        dirty (bool): True when ``messages`` differs from the last checkpoint.

    Raises:
        ArchiveError: if archiving legacy messages fails.
    """

    def __init__(self, archive, checkpoint, checkpoint_seq, model=None):
        self.archive = archive
        self.messages = [normalise_message(dict(m)) for m in (checkpoint or [])]
        self.replayed = []
        self.dirty = False
        #: ``(archive's last seq, checkpoint seq)`` when the archive ended before the database's
        #: checkpoint (a database restored without its archive): the shell warns the admins
        self.archive_behind = None
        if checkpoint_seq is not None and checkpoint_seq > archive.last_seq:
            self.archive_behind = (archive.last_seq, checkpoint_seq)
            archive.resume_after(
                checkpoint_seq, self.messages,
                reason="the archive ended before the database's checkpoint")
        if checkpoint_seq is None:
            for msg in self.messages:
                if msg.get("seq") is None:
                    archive.append_message(msg)
            self.dirty = bool(self.messages)
        else:
            self.messages, self.replayed = replay(
                self.messages, archive.records(start_seq=checkpoint_seq + 1)
            )
            self.dirty = bool(self.replayed)
        self.ledger = TokenLedger(model, uncounted=is_extraction_traffic)
        self.ledger.replace(self.messages)

    @property
    def tokens(self) -> int:
        """Tokens of the runtime history a reply prompt can show (running total, O(1);
        extraction traffic is not counted)."""
        return self.ledger.total

    def token_counts(self, messages=None) -> list:
        """Per-message token counts for ``messages`` (default the runtime history), cached."""
        return [self.ledger.tokens_of(m) for m in (self.messages if messages is None else messages)]

    def append(self, msg) -> Message:
        """
        Archive ``msg`` and add it to the runtime history; returns it with ``seq`` set.

        Raises:
            ArchiveError: the archive write failed; the message is not added.
        """
        self.archive.append_message(msg)
        self.messages.append(msg)
        self.ledger.add(msg)
        self.dirty = True
        return msg

    def apply_compaction(self, marker, first_id, last_id, **info) -> list[Message]:
        """
        Record a compaction in the archive, then splice ``marker`` over the id range.

        The archive record is the commit point: if writing it fails nothing changes. Messages
        appended after the range (while the summary was being written) keep their place.

        Returns:
            list[dict]: the messages the marker replaced.

        Raises:
            ArchiveError: the record could not be written (history unchanged).
            SpliceError: the range is no longer in the history (history unchanged).
        """
        new_messages = splice(self.messages, first_id, last_id, [marker])
        kept = {m["id"] for m in new_messages}
        removed = [m for m in self.messages if m["id"] not in kept]
        self.archive.append(
            "compaction", marker=marker, first_id=first_id, last_id=last_id, **info
        )
        self.messages = new_messages
        self.ledger.remove_ids([m["id"] for m in removed])
        self.ledger.add(marker)
        self.dirty = True
        return removed

    def drop_extraction_traffic(self) -> list[Message]:
        """
        Move fact extraction's tool traffic out of the runtime history once the compaction or
        eviction it prepared has landed: its facts are in the journal, and the messages stay
        in the archive (an ``evict`` record; a crash before it only leaves them in context,
        where they cost no budget).

        Returns:
            list[dict]: the messages moved out.

        Raises:
            ArchiveError: the eviction could not be recorded (history unchanged).
        """
        traffic = [m["id"] for m in self.messages if is_extraction_traffic(m)]
        return self.evict(traffic, reason="journaled before the compaction") if traffic else []

    def evict(self, ids, reason) -> list[Message]:
        """
        Drop messages ``ids`` from the runtime history; they stay in the archive.

        Raises:
            ArchiveError: the eviction could not be recorded (history unchanged).
        """
        present = {m["id"] for m in self.messages}
        ids = [i for i in ids if i in present]
        if not ids:
            return []
        self.archive.append("evict", ids=ids, reason=reason)
        gone = set(ids)
        removed = [m for m in self.messages if m["id"] in gone]
        self.messages = [m for m in self.messages if m["id"] not in gone]
        self.ledger.remove_ids(ids)
        self.dirty = True
        return removed

    def forget(self, player, ids, seqs) -> list[Message]:
        """
        Take ``ids`` (a player's lines and the summaries made from them) out of the runtime
        history for good, and ``seqs`` out of the full-text index (``docs/design.md``,
        "Forgetting a player"). The ``forget`` archive record is written first: it is the
        commit point, replayed after a crash like an eviction, and read by the index.

        Returns:
            list[dict]: the messages removed from the runtime history.

        Raises:
            ArchiveError: the record could not be written (history unchanged).
        """
        self.archive.append("forget", player=player, ids=list(ids), seqs=list(seqs))
        gone = set(ids)
        removed = [m for m in self.messages if m["id"] in gone]
        self.messages = [m for m in self.messages if m["id"] not in gone]
        self.ledger.remove_ids([m["id"] for m in removed])
        self.dirty = True
        return removed

    def evict_oldest(self, target_tokens, reason, keep_ids=frozenset(),
                     stop_ids=frozenset()) -> list[str]:
        """
        Move the oldest raw messages out of the runtime history until at most ``target_tokens``
        remain, cutting only where no tool call loses its results
        (:func:`ai_contrib.core.cuts.eviction_ids`, which says what ``keep_ids`` and
        ``stop_ids`` spare); they stay in the archive.

        Returns:
            list[str]: the ids evicted (empty when nothing needs to go).

        Raises:
            ArchiveError: the eviction could not be recorded (history unchanged).
        """
        ids = eviction_ids(self.messages, [self.ledger.counted(m) for m in self.messages],
                           target_tokens, keep_ids=keep_ids, stop_ids=stop_ids)
        if ids:
            self.evict(ids, reason=reason)
        return ids
