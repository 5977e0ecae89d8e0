"""
The lossless archive: an append-only JSONL file per NPC ("lossy in runtime, lossless in
persistence"; Claude Code keeps its raw transcript as JSONL too).

Every message is written here *before* it enters the runtime history, so whatever compaction,
masking or eviction later does to the context, an admin can still read what was said. The file is
also the write-ahead record of the runtime history: ``script.db.conversation_history`` is only
checkpointed now and then (re-pickling a long list on every append costs O(n)), and on load
the records after the checkpoint are replayed. Retrieval searches it through a full-text index
kept beside it (:mod:`ai_contrib.memory.fulltext`), which it can always be rebuilt from.

One record per line, ``seq`` first so a reader can skip lines without parsing them::

    {"seq": 0, "kind": "message", "msg": {<message dict, see core/messages.py>}}
    {"seq": 7, "kind": "compaction", "marker": {<marker>}, "first_id": "...", "last_id": "...",
     "trigger": "sleep"}
    {"seq": 9, "kind": "evict", "ids": ["...", ...], "reason": "..."}
    {"seq": 12, "kind": "receipt", "reply_seq": 11, "receipt": {<core/receipts.py>}}
    {"seq": 15, "kind": "forget", "player": "#12", "ids": ["...", ...], "seqs": [3, 4, ...]}
      (staff made the NPC forget a player: ``ids`` leave the runtime history, ``seqs`` the
      full-text index, for good; ``memory/forget.py``)
    {"seq": 90, "kind": "resume", "behind": 41, "reason": "..."}   (see resume_after)

``seq`` counts records from 0 and never repeats; numbers are skipped only where
:meth:`MessageArchive.resume_after` mended an archive that a database restore left behind.
A message's ``seq`` is its record's.

Why files and not a table: an append is one ``write()`` of one line, O(1) whatever the history
length, needs no migration in the host game, survives ``kill -9`` of the server as soon as
``write()`` returns (the data is in the OS page cache), and stays readable with ``grep``/``jq``.
"""

from __future__ import annotations

from collections.abc import Iterator

import json
import os
import re
import threading
from typing import Required, TypedDict

from ..core.messages import Message
from ..core.receipts import Receipt

_SEQ_RE = re.compile(rb'^\{"seq": (\d+),')
_archives = {}
_archives_lock = threading.Lock()


class ArchiveRecord(TypedDict, total=False):
    """
    One line of the archive (module docstring): ``seq`` and ``kind``, and the fields of its
    kind.
    """

    #: the record's place, never repeated (None only in an admin's view of a summary the
    #: archive does not hold: :func:`ai_contrib.admin.item_views.find_archive_record`)
    seq: Required[int | None]
    #: ``"message"``, ``"compaction"``, ``"evict"``, ``"receipt"``, ``"forget"``, ``"resume"``
    kind: Required[str]
    msg: Message  #: a message's
    marker: Message  #: a compaction's summary marker
    first_id: str  #: a compaction's range of message ids
    last_id: str
    trigger: str  #: what asked for the compaction
    ids: list[str]  #: message ids an eviction or a forget took out of context
    seqs: list[int]  #: archived seqs a forget took out of the full-text index
    player: str  #: the dbref a forget was for
    reason: str  #: why (an eviction, a resume)
    reply_seq: int  #: the reply a receipt is of
    receipt: Receipt  #: a lean one (:func:`ai_contrib.core.receipts.lean_receipt`)
    behind: int  #: a resume's last seq before the gap


#: A line :meth:`MessageArchive.tail` yields: ``(seq, start, line, record)``, the record's seq
#: (None for a line that is not a record), the line's byte offset, its bytes and the parsed
#: record (None when not parsed)
TailLine = tuple[int | None, int, bytes, ArchiveRecord | None]


class ArchiveError(OSError):
    """The archive could not be written or read (disk full, permissions, corrupt file)."""


class MessageArchive:
    """
    An append-only JSONL archive at ``path`` (created with its directory if missing).

    A partial last line left by a crash mid-write is cut off when the file is opened, so every
    complete record stays readable and the next append starts on a clean line.

    Raises:
        ArchiveError: if the file cannot be opened.
    """

    def __init__(self, path):
        self.path = path
        # what message_log() has read so far: the messages and the byte offset after them
        self._log = []
        self._log_offset = 0
        self._log_lock = threading.Lock()
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._repair_tail()
            self.last_seq = self._read_last_seq()
            self._fh = open(path, "ab", buffering=0)
        except OSError as err:
            raise ArchiveError(f"cannot open archive {path}: {err}") from err

    # -- opening -------------------------------------------------------------------------------

    def _repair_tail(self):
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb+") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            # walk back to the last newline and cut the partial record
            pos = size - 1
            while pos > 0:
                step = min(65536, pos)
                fh.seek(pos - step)
                chunk = fh.read(step)
                idx = chunk.rfind(b"\n")
                if idx >= 0:
                    fh.truncate(pos - step + idx + 1)
                    return
                pos -= step
            fh.truncate(0)

    def _read_last_seq(self):
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            return -1
        with open(self.path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            step = 4096
            while True:
                start = max(0, end - step)
                fh.seek(start)
                lines = fh.read(end - start).splitlines()
                # the first line of a chunk may be partial unless it starts the file
                candidates = lines if start == 0 else lines[1:]
                for line in reversed(candidates):
                    match = _SEQ_RE.match(line)
                    if match:
                        return int(match.group(1))
                if start == 0:
                    return -1
                step *= 4

    # -- writing -------------------------------------------------------------------------------

    def append(self, kind, **data) -> ArchiveRecord:
        """
        Write one record and return it (``data`` with ``seq`` and ``kind`` added).

        Raises:
            ArchiveError: if the write fails; nothing is recorded then.
        """
        return self._write_at(self.last_seq + 1, kind, **data)

    def resume_after(self, seq, messages=(), reason="") -> int:
        """
        Continue numbering after ``seq`` in an archive that ends before it (a database restored
        without its archive folder, or an archive lost), so that no seq is given twice.

        ``messages`` (the database's copies, e.g. the checkpointed history) whose ``seq`` is
        above the archive's last are written back with their own seqs, in seq order, then a
        ``{"kind": "resume", "behind": <old last seq>, "reason": str}`` record at ``seq`` (unless a
        message already took it). What the archive held between its end and those messages is
        lost; the record says so.

        Returns:
            int: the number of messages written back.

        Raises:
            ArchiveError: a write failed.
        """
        behind = self.last_seq
        if seq <= behind:
            return 0
        restored = sorted((m for m in messages if isinstance(m.get("seq"), int)
                           and behind < m["seq"] <= seq), key=lambda m: m["seq"])
        for msg in restored:
            self._write_at(msg["seq"], "message", msg=msg)
        if self.last_seq < seq:
            self._write_at(seq, "resume", behind=behind, reason=reason)
        return len(restored)

    def _write_at(self, seq, kind, **data):
        """Write one record with a given ``seq`` above the last (a gap in the numbering)."""
        record = {"seq": seq, "kind": kind}
        record.update(data)
        line = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        try:
            self._fh.write(line)
        except (OSError, ValueError) as err:
            raise ArchiveError(f"cannot write archive {self.path}: {err}") from err
        self.last_seq = seq
        return record

    def append_message(self, msg) -> Message:
        """Archive message ``msg``, set its ``seq`` and return it (same dict)."""
        msg["seq"] = self.last_seq + 1
        self.append("message", msg=msg)
        return msg

    # -- reading -------------------------------------------------------------------------------

    def records(self, start_seq=0, end_seq=None, kinds=None) -> Iterator[ArchiveRecord]:
        """
        Yield records with ``start_seq <= seq <= end_seq`` (``end_seq`` None = to the end),
        oldest first, optionally only those whose ``kind`` is in ``kinds``.

        Cost: one pass over the file; lines outside the range are skipped without JSON parsing.
        """
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as fh:
            for line in fh:
                match = _SEQ_RE.match(line)
                if not match:
                    continue
                seq = int(match.group(1))
                if seq < start_seq:
                    continue
                if end_seq is not None and seq > end_seq:
                    break
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if kinds is None or record.get("kind") in kinds:
                    yield record

    def messages(self, start_seq=0, end_seq=None) -> list:
        """Return the archived message dicts with ``seq`` in the range, oldest first."""
        return [rec["msg"] for rec in self.records(start_seq, end_seq, kinds=("message",))]

    def tail(self, offset=0, kinds=None, chunk_bytes=1 << 22) -> Iterator[TailLine]:
        """
        Yield the complete record lines from byte ``offset`` on, for readers that keep their own
        position in the file (the full-text index, :mod:`ai_contrib.memory.fulltext`): each
        call costs what was appended after ``offset``, not the file's length.

        Args:
            offset (int): byte offset of a line start (0: the whole file).
            kinds (iterable[str], optional): record kinds to parse; other lines are yielded
                unparsed (None: parse every record).
            chunk_bytes (int): read size; a line longer than this is still read whole.

        Yields:
            tuple: ``(seq, start, line, record)``: the record's ``seq`` (int, or None for a line
            that is not a record), the line's byte offset, its bytes (newline included) and
            the parsed dict, or None when the line was not parsed (kind not asked for, or not
            valid JSON). The reader's next offset is ``start + len(line)``. A last line still
            being written (no newline yet) is not yielded: it comes with a later call.

        Raises:
            ArchiveError: if the file cannot be read (a missing file yields nothing).
        """
        wanted = None if kinds is None else tuple(f'"kind": "{k}"'.encode() for k in kinds)
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            return
        except OSError as err:
            raise ArchiveError(f"cannot read archive {self.path}: {err}") from err
        with fh:
            fh.seek(offset)
            position, pending = offset, b""
            while True:
                try:
                    chunk = fh.read(chunk_bytes)
                except OSError as err:
                    raise ArchiveError(f"cannot read archive {self.path}: {err}") from err
                if not chunk:
                    return
                data = pending + chunk
                end = data.rfind(b"\n") + 1
                pending = data[end:]
                for line in data[:end].splitlines(keepends=True):
                    start, position = position, position + len(line)
                    match = _SEQ_RE.match(line)
                    record = None
                    # seq and kind open every line: most lines are skipped unparsed
                    if match and (wanted is None or any(w in line[:60] for w in wanted)):
                        try:
                            record = json.loads(line)
                        except ValueError:
                            record = None
                    yield (int(match.group(1)) if match else None, start, line, record)

    def read_span(self, start, end) -> bytes:
        """
        The file's bytes from offset ``start`` to ``end`` (fewer if the file is shorter), or
        ``b""`` if the file is missing.

        Raises:
            ArchiveError: if the file exists but cannot be read.
        """
        try:
            with open(self.path, "rb") as fh:
                fh.seek(start)
                return fh.read(max(0, end - start))
        except FileNotFoundError:
            return b""
        except OSError as err:
            raise ArchiveError(f"cannot read archive {self.path}: {err}") from err

    def size(self) -> int:
        """The file's length in bytes (0 if missing)."""
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0

    def message_log(self) -> list:
        """
        Every archived message dict, oldest first, read incrementally: each call parses only
        the lines appended since the previous one (archived messages never change), but the
        list is held in memory: for tools that need every message. Retrieval for a reply uses
        the full-text index instead (:mod:`ai_contrib.memory.fulltext`). Safe to call from a
        worker thread while the reactor thread appends: a line still being written is left for
        the next call.

        Returns:
            list[dict]: a new list (the dicts are shared with later calls: do not mutate them).
        """
        with self._log_lock:
            try:
                size = os.path.getsize(self.path)
            except OSError:
                return []
            if size < self._log_offset:  # the file was replaced: start again
                self._log, self._log_offset = [], 0
            if size > self._log_offset:
                with open(self.path, "rb") as fh:
                    fh.seek(self._log_offset)
                    data = fh.read(size - self._log_offset)
                end = data.rfind(b"\n") + 1
                for line in data[:end].splitlines():
                    if not line.startswith(b'{"seq": ') or b'"kind": "message"' not in line[:40]:
                        continue
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    if record.get("kind") == "message":
                        self._log.append(record["msg"])
                self._log_offset += end
            return list(self._log)

    def close(self) -> None:
        """Close the file handle (further appends raise ArchiveError)."""
        try:
            self._fh.close()
        except OSError:
            pass


def get_archive(path) -> MessageArchive:
    """Return the process-wide :class:`MessageArchive` for ``path``, opening it on first use."""
    with _archives_lock:
        archive = _archives.get(path)
        if archive is None or archive._fh.closed:
            archive = _archives[path] = MessageArchive(path)
        return archive


def close_archive(path) -> None:
    """
    Close and forget the shared archive for ``path`` and its full-text index (used when an NPC
    is deleted, and in tests). The files stay on disk.
    """
    with _archives_lock:
        archive = _archives.pop(path, None)
    if archive:
        archive.close()
    from .fulltext import close_index

    close_index(path)
