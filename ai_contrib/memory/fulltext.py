"""
The archive's full-text index: one SQLite FTS5 file per NPC beside its JSONL archive, ranked
with FTS5's ``bm25()`` (design: ``docs/design.md``, "The archive's full-text index").

Retrieval for a reply looks up the player's words among every message the NPC ever archived
(:mod:`ai_contrib.memory.retrieval`). An index held in Python and rebuilt whenever the archive
changed cost 334/417 ms p50/p95 per query, a 2.1 s rebuild and 312 MB per NPC at 100k messages;
this one costs 11/19 ms and 2 MB (``benchmarks/retrieval_scale.py``).

What is indexed: each archived ``user``/``assistant`` message with text, one row per message,
``rowid`` = its archive ``seq``. The indexed column holds the message's BM25 terms
(:func:`ai_contrib.memory.lexical.terms` of :func:`~ai_contrib.memory.lexical.doc_text`: stop
words dropped, Snowball English stems, space-joined), so FTS5's document lengths and document
frequencies are those of our tokenizer. An UNINDEXED column carries the archive record's JSON
line as it is in the file (``{"seq": ..., "kind": "message", "msg": {...}}``), so a query
reads no other file.

Who writes, and when: **only the memory worker thread, lazily, from the archive's tail.** The
reactor thread appends to the JSONL file and never touches SQLite; before each search the index
reads the lines appended since the byte offset it stored (:meth:`MessageArchive.tail`) and
inserts them in one transaction. The cost of a reply is therefore the messages said since the
previous reply, whatever the archive's length; nothing in the reactor waits on SQLite, and the
file has a single writer. The connection is opened with ``check_same_thread=False`` behind a
lock, so whichever thread searches may use it in turn (retrieval runs on the shared
``mem0_store.WorkerThread``, or a private one when memory is disabled).

The JSONL archive stays the record. The index stores the archive ``seq`` and byte offset it has
read to, with a CRC of the last line read. If the file is missing, unreadable, of another
schema version, or that line no longer matches (the archive was replaced, e.g. by an older
backup), the index file is deleted and rebuilt from the archive; if the index is merely behind
(an older copy of it was restored), it catches up from its offset.

Scores are FTS5's ``bm25()`` (k1 = 1.2, b = 0.75, IDF ``log((N - n + 0.5) / (n + 0.5))``
floored at 1e-6), as positive numbers. :meth:`FullTextIndex.score_external` gives texts that are
not indexed (Mem0 hits) the same formula from the index's statistics: the document frequencies
from an ``fts5vocab`` table, the document count and token total from the index's own counters.

Shapes: *doc* is the archived message dict (``core/messages.py``); *hit* is ``(doc, score)``,
score a float > 0, best first.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import zlib
from collections import OrderedDict
from typing import Any, TypedDict

from ..core.audience import heard_by
from ..core.messages import Message
from .archive_vectors import (
    LINE_BEFORE_SQL,
    MAX_K,
    VectorTables,
    model_key,
    name_vector,
    without_directions,
)
from .lexical import STOP_WORDS, bm25, doc_text, terms
from .sqlite_ext import load_vec, sqlite3

logger = logging.getLogger(__name__)

#: Suffix of the index file after the archive's path (``npc5-ab12cd34.jsonl.fts.sqlite3``).
SUFFIX = ".fts.sqlite3"
#: Bumped when the schema or the indexed text changes: an index of another version is rebuilt.
SCHEMA_VERSION = 2  # 2: stemmed terms
#: FTS5's built-in ``bm25()`` constants (``ext/fts5/fts5_aux.c``).
BM25_K1 = 1.2
BM25_B = 0.75
#: Open index files at most: each holds a page cache and three file descriptors, and a server
#: may host hundreds of NPCs; reopening one costs about a millisecond.
MAX_OPEN = 64
#: Page cache per connection, KiB (SQLite's default is 2,000; query times were the same with
#: 1,024 and 8,000 at 100k messages: the OS caches the file).
CACHE_KIB = 1024
#: Docs a query may make SQLite score (the sum of its words' document frequencies) before its
#: commonest words are left out of the MATCH (:meth:`FullTextIndex.search`). Below it the
#: ranking is exact; 12,000 kept 99.8 % of the exact top 20 at 100k messages and cut the p95.
MAX_POSTINGS = 12000
_ROLES = ("user", "assistant")
_BATCH = 5000  # rows per transaction while catching up: a rebuild commits as it goes

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5("
    "terms, record UNINDEXED, tokenize = 'unicode61')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS docs_vocab USING fts5vocab(docs, 'row')",
)
#: The best rows for a MATCH. ORDER BY bm25() LIMIT keeps a bounded heap of rows (ORDER BY rank
#: would sort every match); the inner query reads only rowids and scores, because SQLite
#: computes every selected column of every matching row before the heap drops it, and reading
#: a row's stored columns costs a lookup in the content table: the records and terms are read
#: for the rows kept only (up to 12,000 matches at 100k messages: the SQL a quarter faster).
_RANKED_SQL = (
    "SELECT d.rowid, d.record, d.terms, top.score FROM ("
    "SELECT rowid, bm25(docs) AS score FROM docs WHERE docs MATCH ? ORDER BY score, rowid "
    "LIMIT ?) AS top JOIN docs AS d ON d.rowid = top.rowid ORDER BY top.score, top.rowid")
_FRESH = {"version": SCHEMA_VERSION, "seq": -1, "offset": 0, "line_start": 0, "line_crc": 0,
          "docs": 0, "tokens": 0}


class IndexStats(TypedDict):
    """An index's counters (:meth:`FullTextIndex.stats`)."""

    seq: int  #: the last archive seq read
    docs: int  #: rows indexed
    tokens: int  #: terms indexed, all rows together
    offset: int  #: bytes of the archive read


class FullTextError(Exception):
    """The index could not be read or written, even after rebuilding it from the archive."""


def index_path(archive_path) -> str:
    """The index file of the archive at ``archive_path``: the same path plus :data:`SUFFIX`."""
    return archive_path + SUFFIX


def match_expression(query, stop_words=None) -> str | None:
    """
    The FTS5 query for a player's text: its BM25 tokens, each quoted, joined by ``OR``.

    Player text is data: tokens are runs of ``[0-9a-z]``, and quoting makes even ``near`` or
    ``and`` plain words, so no input can produce an FTS5 syntax error. Repeated words stay
    repeated (each is one BM25 term, as in ``rank-bm25``).

    Args:
        query (str): any text.
        stop_words (frozenset, optional): default ``lexical.STOP_WORDS``.

    Returns:
        str | None: e.g. ``'"bob" OR "gold"'``; None when no token is left.
    """
    tokens = _tokens(query, stop_words)
    return " OR ".join(f'"{token}"' for token in tokens) or None


def _tokens(text, stop_words=None):
    return terms(text, STOP_WORDS if stop_words is None else stop_words)


def indexable(msg) -> bool:
    """True when archive message ``msg`` goes into the index: a user/assistant line with text."""
    return msg.get("role") in _ROLES and bool(str(msg.get("content") or "").strip())


_AFTER_SQL = "SELECT rowid, record FROM docs WHERE rowid > ? ORDER BY rowid LIMIT 1"
#: Host parameters per ``IN (...)`` query (SQLite's limit was 999 before 3.32).
_IN_CHUNK = 500


def _rows_by_id(conn, rowids):
    """``{rowid: record}`` of those of ``rowids`` that are indexed, in one query per
    :data:`_IN_CHUNK` rowids."""
    wanted = sorted({int(r) for r in rowids})
    found = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start:start + _IN_CHUNK]
        found.update(conn.execute(
            f"SELECT rowid, record FROM docs WHERE rowid IN ({','.join('?' * len(chunk))})",
            chunk))
    return found


def _keeper(listeners, exclude):
    """``doc -> bool``: True for a doc every one of ``listeners`` heard (None: no audience
    filter) that ``exclude`` (a ``doc -> bool``, or None) does not drop."""
    listeners = None if listeners is None else sorted({str(x) for x in listeners})

    def keep(doc):
        if listeners is not None and not heard_by(doc, listeners):
            return False
        return exclude is None or not exclude(doc)

    return keep


class _OpenIndexes:
    """Least-recently-used set of indexes holding an open file (at most :data:`MAX_OPEN`)."""

    def __init__(self):
        self._order = OrderedDict()
        self._lock = threading.Lock()

    def touch(self, index):
        with self._lock:
            self._order[index] = None
            self._order.move_to_end(index)
            excess = list(self._order)[: max(0, len(self._order) - MAX_OPEN)]
        for other in excess:
            # an index in use by another thread stays open until a later touch
            if other is not index and other.release():
                self.forget(other)

    def forget(self, index):
        with self._lock:
            self._order.pop(index, None)


_open_indexes = _OpenIndexes()


class FullTextIndex:
    """
    An FTS5 index of archived messages.

    Args:
        path (str): the SQLite file, or ``":memory:"`` for a throwaway index (lists of docs,
            benchmarks); created if missing.
        archive (MessageArchive, optional): the archive it mirrors; :meth:`sync` reads its
            tail. Without one, rows come only from :meth:`add`.
        stop_words (frozenset, optional): default ``lexical.STOP_WORDS``; an index built
            with other stop words must be queried with the same ones.

    Nothing is opened until first use. Every method may be called from any thread (one at a
    time, under the index's lock); the file is opened with ``check_same_thread=False``.

    Errors: :class:`FullTextError` when SQLite fails twice in a row (once before and once after
    rebuilding the file); ``ArchiveError`` when the archive cannot be read.
    """

    def __init__(self, path, archive=None, stop_words=None):
        self.path = path
        self._archive = archive
        self._verified = False  # the last line read checked against the archive since open
        self.stop_words = stop_words
        self._memory = path == ":memory:"
        self._conn = None
        self._state = None
        self._df_cache, self._df_key = {}, None
        self._vectors = None  # VectorTables where sqlite-vec loads
        self._last_doc = None  # the highest rowid in docs (-1: none) while open
        self._lock = threading.RLock()

    @property
    def archive(self) -> Any:
        """The ``MessageArchive`` mirrored (None: rows come from :meth:`add`)."""
        return self._archive

    @archive.setter
    def archive(self, archive) -> Any:
        with self._lock:
            if archive is not self._archive:
                self._archive, self._verified = archive, False

    # -- connection ----------------------------------------------------------------------------

    def _open(self):
        if self._conn is not None:
            return self._conn
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            if not self._memory:
                # a crash may lose the last commits but never corrupts (WAL); the archive
                # has them anyway
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            for statement in _SCHEMA:
                conn.execute(statement)
            state = dict(conn.execute("SELECT key, value FROM meta"))
            if not state:
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO meta VALUES (?, ?)", _FRESH.items())
                conn.execute("COMMIT")
                state = dict(_FRESH)
            if state.get("version") == 1 and set(state) == set(_FRESH):
                state = self._terms_again(conn)
            if state.get("version") != SCHEMA_VERSION or set(state) != set(_FRESH):
                raise sqlite3.DatabaseError(f"index schema {state.get('version')!r}")
            vectors = VectorTables(conn) if load_vec(conn) else None
            last_doc = self._read_last_doc(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self._state, self._verified = conn, state, False
        self._vectors, self._last_doc = vectors, last_doc
        self._df_cache, self._df_key = {}, None
        return conn

    @staticmethod
    def _terms_again(conn) -> dict:
        """
        An index of schema 1 (unstemmed terms) made ready to index its lines again: the
        full-text rows and counters go, the catch-up that follows reads the whole archive
        again, and the lines' vectors stay (they were made from the lines' text, not their
        terms, and keep their rowids): at 100,000 lines the terms take seconds, the vectors
        took an hour of the memory thread.

        Returns:
            dict: the fresh counters (:data:`_FRESH`).
        """
        conn.execute("BEGIN")
        try:
            conn.execute("DROP TABLE IF EXISTS docs_vocab")
            conn.execute("DROP TABLE IF EXISTS docs")
            conn.execute("DELETE FROM meta")
            conn.executemany("INSERT INTO meta VALUES (?, ?)", _FRESH.items())
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
        logger.info("full-text index: indexing its lines again with stemmed terms (schema %s)",
                    SCHEMA_VERSION)
        return dict(_FRESH)

    @staticmethod
    def _read_last_doc(conn):
        """The highest rowid in docs, -1 when there is none (FTS5 walks its rowids from the top:
        one seek, whatever the index's size)."""
        row = conn.execute("SELECT rowid FROM docs ORDER BY rowid DESC LIMIT 1").fetchone()
        return -1 if row is None else int(row[0])

    def release(self) -> bool:
        """
        Close the file if no thread is using it (it is reopened on next use).

        Returns:
            bool: True if closed (or never open), False if in use or in memory.
        """
        if self._memory or not self._lock.acquire(blocking=False):
            return False
        try:
            self._close()
        finally:
            self._lock.release()
        return True

    def close(self) -> None:
        """Close the file (a ``:memory:`` index loses its rows)."""
        with self._lock:
            self._close()
        _open_indexes.forget(self)

    def _close(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        self._conn, self._state, self._vectors, self._last_doc = None, None, None, None

    def _discard(self):
        """Delete the file (and its WAL), so the next use rebuilds it from the archive."""
        self._close()
        if self._memory:
            return
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.remove(self.path + suffix)
            except FileNotFoundError:
                pass
            except OSError as err:
                raise FullTextError(f"cannot remove index {self.path}: {err}") from err

    def _run(self, work):
        """``work(conn)`` under the lock, after a catch-up; rebuilt and retried once on error."""
        with self._lock:
            if not self._memory:
                _open_indexes.touch(self)
            for attempt in (1, 2):
                try:
                    self._sync(self._open())
                    # the catch-up may have rebuilt the file: use the connection it left
                    return work(self._open())
                except sqlite3.Error as err:
                    if self._conn is not None and self._conn.in_transaction:
                        self._conn.rollback()
                    if attempt == 2 or self._memory:
                        self._close()
                        raise FullTextError(f"full-text index {self.path}: {err}") from err
                    logger.warning("full-text index %s unusable (%s): rebuilding it from the "
                                   "archive", self.path, err)
                    self._discard()

    # -- writing -------------------------------------------------------------------------------

    def sync(self) -> IndexStats:
        """
        Catch up with the archive: index the messages appended since the last call.

        Cost: the bytes appended since then (one ``stat`` when nothing was); the whole archive
        only when the index is missing, corrupt or does not match the archive (then it is
        rebuilt).

        Returns:
            IndexStats: the index's counters after it.

        Raises:
            FullTextError, ArchiveError.
        """
        return self._run(lambda conn: self.stats())

    def rebuild(self) -> IndexStats:
        """
        Delete the index and build it again from the whole archive.

        Returns:
            IndexStats: as :meth:`sync`.
        """
        with self._lock:
            self._discard()
            return self.sync()

    def stats(self) -> IndexStats:
        """The index's counters now."""
        with self._lock:
            if self._state is None:
                self._open()
            return {key: self._state[key] for key in ("seq", "docs", "tokens", "offset")}

    def add(self, docs) -> int:
        """
        Index docs directly (no archive): rows numbered from the current count, in order.

        Args:
            docs (iterable[dict]): message dicts; those without text are skipped (the
                ``role`` filter applies only to :meth:`sync`).

        Returns:
            int: rows added.
        """

        def insert(conn):
            start = self._state["docs"]
            rows = [(start + i, doc, None) for i, doc in enumerate(
                d for d in docs if str(d.get("content") or "").strip())]
            self._insert(conn, rows, {})
            return len(rows)

        return self._run(insert)

    def _row(self, rowid, doc, line):
        tokens = _tokens(doc_text(doc), self.stop_words)
        # the archive's own line is stored as it is: encoding the message again costs a third
        # of a rebuild
        record = (line.decode("utf-8") if line is not None
                  else json.dumps({"msg": doc}, ensure_ascii=False, default=str))
        return rowid, " ".join(tokens), record, len(tokens)

    def _insert(self, conn, rows, position):
        """
        Insert ``[(rowid, doc, line)]`` (``line``: the archive's bytes, or None) and update the
        counters (and ``position``) in one commit.
        """
        prepared = [self._row(*row) for row in rows]
        state = dict(self._state)
        state["docs"] += len(prepared)
        state["tokens"] += sum(row[3] for row in prepared)
        state.update(position)
        conn.execute("BEGIN")
        try:
            conn.executemany("INSERT INTO docs (rowid, terms, record) VALUES (?, ?, ?)",
                             [row[:3] for row in prepared])
            self._commit_state(conn, state)
        except BaseException:
            conn.rollback()
            raise
        self._state = state
        if prepared:
            self._last_doc = max(self._last_doc, max(row[0] for row in prepared))

    def _commit_state(self, conn, state):
        """Write the counters of ``state`` that changed, then commit the open transaction."""
        conn.executemany("UPDATE meta SET value = ? WHERE key = ?",
                         [(value, key) for key, value in state.items()
                          if value != self._state[key]])
        conn.execute("COMMIT")

    def _matches_archive(self, state):
        """True when the last line the index read is still where and what it was."""
        if state["offset"] == 0:
            return True
        if state["offset"] > self.archive.size():
            return False
        line = self.archive.read_span(state["line_start"], state["offset"])
        return line.endswith(b"\n") and zlib.crc32(line) == state["line_crc"]

    def _sync(self, conn):
        if self.archive is None:
            return
        state = self._state
        # a server appends to its archive and never rewrites it: the last line read is checked
        # once per opening (an admin restores files with the server stopped), then a query
        # that finds no new bytes costs one stat
        if self._verified and self.archive.size() == state["offset"]:
            return
        if not self._matches_archive(state):
            logger.warning("full-text index %s does not match its archive: rebuilding it",
                           self.path)
            self._discard()
            conn = self._open()
            state = self._state
        self._verified = True
        rows, position = [], {}
        for seq, start, line, record in self.archive.tail(state["offset"],
                                                          kinds=("message", "forget")):
            forget = None
            if seq is not None and seq > state["seq"]:
                kind = record.get("kind") if record is not None else None
                if kind == "message":
                    msg = record.get("msg") or {}
                    if indexable(msg):
                        rows.append((seq, msg, line))
                elif kind == "forget":
                    forget = [int(s) for s in record.get("seqs") or () if isinstance(s, int)]
                    # a player forgotten (docs/design.md, "Forgetting a player"): the rows
                    # before it are committed with the position before it, then their rows go
                    # with the position after it, so a crash between the two replays the
                    # forget and a rebuild from the archive forgets them again
                    self._insert(conn, rows, position)
                    rows, position = [], {}
                position["seq"] = seq
            position.update(offset=start + len(line), line_start=start,
                            line_crc=zlib.crc32(line))
            if forget is not None:
                self._delete(conn, forget, position)
                rows, position = [], {}
            elif len(rows) >= _BATCH:
                self._insert(conn, rows, position)
                rows, position = [], {}
        if rows or position:
            self._insert(conn, rows, position)

    def _delete(self, conn, rowids, position):
        """Delete the rows ``rowids`` (archive seqs; absent ones are skipped) and update the
        counters (and ``position``) in one commit."""
        state = dict(self._state)
        state.update(position)
        conn.execute("BEGIN")
        try:
            if self._vectors is not None:  # first: it reads the lines it drops
                self._vectors.delete(conn, rowids)
            for rowid in rowids:
                found = conn.execute("SELECT terms FROM docs WHERE rowid = ?", (rowid,)).fetchone()
                if found is None:
                    continue
                conn.execute("DELETE FROM docs WHERE rowid = ?", (rowid,))
                state["docs"] -= 1
                state["tokens"] -= len(found[0].split())
            last_doc = self._read_last_doc(conn)
            self._commit_state(conn, state)
        except BaseException:
            conn.rollback()
            raise
        self._state, self._last_doc = state, last_doc

    # -- vectors (docs/design.md, "Archived lines' vectors") ------------------------------------

    def embed_pending(self, embedder, limit) -> int:
        """
        Embed up to ``limit`` indexed lines that have no vector of ``embedder`` yet, oldest
        first (after catching up with the archive). The lines are read and the vectors stored
        under the index's lock; the embedding runs outside it. Blocking: the memory thread only.

        Args:
            embedder: anything with ``encode(texts, is_query) -> numpy array``
                (:mod:`ai_contrib.memory.embedder`).
            limit (int): lines at most.

        Returns:
            int: vectors stored (0 where sqlite-vec is unavailable or nothing is pending).

        Raises:
            FullTextError, ArchiveError; whatever the embedder raises.
        """
        model = model_key(embedder)
        rows = self._run(lambda conn: self._vectors.pending(conn, limit, model)
                         if self._vectors is not None else [])
        if not rows:
            return 0
        vectors = embedder.encode([text for _row, text in rows], is_query=False)
        model = model_key(embedder)  # an HTTP embedder learns its dimension on first use
        return self._run(lambda conn: self._vectors.add(
            conn, [row for row, _t in rows], vectors, model, [text for _row, text in rows])
            if self._vectors is not None else 0)

    def embedded_through(self) -> int:
        """The highest archive seq whose line has been embedded, as last read or written in this
        process, without touching the file: -1 when the index is not open or has no vectors."""
        vectors = self._vectors
        return -1 if vectors is None else int(vectors.seq)

    def last_doc_seq(self) -> int | None:
        """The highest archive seq of an indexed line, as last read or written in this process,
        without touching the file: -1 when the index holds no line, None when it is not open.
        Below the archive's ``last_seq`` wherever the archive ends in records that are not
        indexed lines (compactions, evictions, tool traffic)."""
        return self._last_doc

    def all_embedded(self, model=None, through=None) -> bool:
        """
        Whether nothing is left to embed, as known in this process without touching the file
        or waiting (``docs/design.md``, "Archived lines' vectors"): the check before an
        embedding job is queued.

        Args:
            model (str, optional): :func:`ai_contrib.memory.archive_vectors.model_key` of the
                embedder: lines with vectors of another model count as not embedded. None:
                whichever model made them.
            through (int, optional): an archive seq the index must have read through (records
                appended since its last catch-up may be lines). None: what it has read.

        Returns:
            bool: True when the index has read the archive through ``through``,
            :meth:`embedded_through` reaches :meth:`last_doc_seq` and no line waits to be
            embedded again after the line before it was forgotten (or sqlite-vec is
            unavailable: nothing can be embedded); False where it is not known: the index not
            open, or in use on another thread.
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._state is None or (through is not None and self._state["seq"] < through):
                return False
            vectors, last = self._vectors, self._last_doc
            if vectors is None or last < 0:
                return True
            if model is not None and vectors.model != model:
                return False
            return int(vectors.seq) >= last and not vectors.stale
        finally:
            self._lock.release()

    def vector_count(self) -> int:
        """Indexed lines with a vector (0 without sqlite-vec)."""
        return self._run(lambda conn: self._vectors.count(conn)
                         if self._vectors is not None else 0)

    def nearest(self, vector, model, limit=20, listeners=None, exclude=None, read=None) -> list:
        """
        The indexed lines nearest a query vector, best first (``docs/design.md``, "Archived
        lines' vectors"): a scan of the vectors' signs, the candidates rescored by cosine.

        Args:
            vector (numpy.ndarray): the query's vector, shape ``(dim,)``.
            model (str): :func:`ai_contrib.memory.archive_vectors.model_key` of the embedder
                that made it: vectors of another model are not searched (no hits).
            limit (int): hits at most.
            listeners, exclude: as :meth:`search`.
            read (dict, optional): rows already read, shared between searches
                (:meth:`VectorTables.nearest <ai_contrib.memory.archive_vectors.VectorTables.nearest>`).

        Returns:
            list[tuple[dict, float]]: ``(doc, cosine similarity)``.

        Raises:
            FullTextError, ArchiveError.
        """
        keep = _keeper(listeners, exclude)

        def query(conn):
            if self._vectors is None or self._vectors.model != model:
                return []
            return self._vectors.nearest(conn, vector, limit, keep, read)

        return self._run(query)

    # -- reading -------------------------------------------------------------------------------

    def search(self, query, limit=20, listeners=None, exclude=None) -> list[tuple[Message, float]]:
        """
        The indexed docs that best match ``query`` by BM25, best first (ties: oldest first).

        The ranking is one ``ORDER BY bm25(docs) LIMIT n`` query; the rows it returns are
        filtered in Python (audience, ``exclude``), and the query is run once more for
        :data:`~ai_contrib.memory.archive_vectors.MAX_K` rows if the filters left fewer than
        ``limit``: a listener who heard few of the lines that match may get fewer hits than
        there are, rather than every reply reading them all. SQLite scores every doc that holds
        a query word, so when the query's words are in more than :data:`MAX_POSTINGS` docs
        together, its commonest words are left out of the MATCH and the docs found are scored
        again in Python with every word (same formula); a doc holding only those common words
        is then not found unless the others find fewer than ``limit`` docs (top 20 against
        the exact ranking at 100k messages: 99.8 %, ``docs/design.md``).

        Args:
            query (str): any text (player text is safe: :func:`match_expression`).
            limit (int): hits at most.
            listeners (iterable[str], optional): dbrefs who will hear the reply; docs not
                heard by every one of them are left out (None: no filter).
            exclude (callable, optional): ``doc -> bool``, True to drop a doc.

        Returns:
            list[tuple[dict, float]]: hits ``(doc, score)``, score > 0 (FTS5's ``bm25()``,
            negated).

        Raises:
            FullTextError, ArchiveError.
        """
        tokens = _tokens(query, self.stop_words)
        if not tokens or limit <= 0:
            return []
        keep = _keeper(listeners, exclude)

        def query_rows(conn):
            df = self._frequencies(conn, tokens)
            present = [token for token in tokens if df[token]]
            if not present:
                return []
            chosen, postings = set(), 0
            for token in sorted(set(present), key=lambda t: (df[t], t)):
                if chosen and postings + df[token] > MAX_POSTINGS:
                    break
                chosen.add(token)
                postings += df[token]
            if len(chosen) < len(set(present)):
                scorer = self._scorer(tokens, df)
                hits = self._ranked(conn, [t for t in present if t in chosen], limit, keep,
                                    scorer)
                if len(hits) >= limit:
                    return hits
            return self._ranked(conn, present, limit, keep)

        return self._run(query_rows)

    def neighbours(self, rows, listeners=None, exclude=None) -> dict[int, list[Message]]:
        """
        The indexed docs right before and right after each of ``rows`` (rowids: the archive
        seqs of the docs), for retrieval units wider than one message (``docs/design.md``,
        "Retrieval and embedders"). A neighbour the listeners could not all have heard, or that
        ``exclude`` drops, is left out (the next one is not taken instead).

        Args:
            rows (iterable[int]): rowids.
            listeners (iterable[str], optional): as :meth:`search`.
            exclude (callable, optional): as :meth:`search`.

        Returns:
            dict[int, list[Message]]: ``{row: [doc, ...]}`` (0 to 2 docs, before first).

        Raises:
            FullTextError, ArchiveError.
        """
        rows = sorted({int(r) for r in rows})
        keep = _keeper(listeners, exclude)

        def read(conn):
            found = {}
            records = _rows_by_id(conn, [n for row in rows for n in (row - 1, row + 1)])
            for row in rows:
                docs = []
                for step, sql in ((-1, LINE_BEFORE_SQL), (1, _AFTER_SQL)):
                    # the rows right beside are most often indexed: one query reads them all,
                    # and only a gap (an unindexed line, a forgotten one) costs a query of its own
                    hit = ((row + step, records[row + step]) if row + step in records
                           else conn.execute(sql, (row,)).fetchone())
                    if hit is None:
                        continue
                    doc = json.loads(hit[1])["msg"]
                    doc.setdefault("seq", hit[0])
                    if keep(doc):
                        docs.append(doc)
                found[row] = docs
            return found

        return self._run(read) if rows else {}

    @staticmethod
    def _ranked(conn, tokens, limit, keep, scorer=None):
        expression = " OR ".join(f'"{token}"' for token in tokens)
        wanted = 3 * limit
        while True:
            rows = conn.execute(_RANKED_SQL, (expression, wanted)).fetchall()
            if scorer is None:
                ranked = [(-score, rowid, msg) for rowid, msg, _terms, score in rows]
            else:
                ranked = [(scorer(terms.split()), rowid, msg) for rowid, msg, terms, _s in rows]
                ranked.sort(key=lambda row: (-row[0], row[1]))
            hits = []
            for score, rowid, msg in ranked:
                doc = json.loads(msg)["msg"]
                doc.setdefault("seq", rowid)  # docs indexed without an archive have none
                if keep(doc):
                    hits.append((doc, score))
                    if len(hits) >= limit:
                        return hits
            # bounded like the vector scan: a listener who heard few of many matching lines
            # must not make every reply read them all; and SQLite scores every match again on
            # each try, so the second try is the last
            if len(rows) < wanted or wanted >= MAX_K:
                return hits
            wanted = MAX_K

    def _scorer(self, tokens, df):
        """``words -> score``: FTS5's ``bm25()`` of a doc's tokens for the query ``tokens``."""
        count, total = self._state["docs"], self._state["tokens"]
        if count == 0 or total == 0:
            return lambda words: 0.0
        idf = {}
        for token in set(tokens):
            n = df[token]
            value = math.log((count - n + 0.5) / (n + 0.5))
            idf[token] = value if value > 0 else 1e-6  # fts5_aux.c floors it so
        average = total / count

        return lambda words: bm25(tokens, words, idf, average, BM25_K1, BM25_B)

    def _frequencies(self, conn, tokens):
        """``{token: documents holding it}``, cached until the index changes: keyed on the last
        archive seq indexed as well as the line count, which a forget and as many new lines
        leave as it was."""
        count = (self._state["seq"], self._state["docs"])
        if self._df_key != count:
            self._df_cache, self._df_key = {}, count
        cache = self._df_cache
        for token in set(tokens) - cache.keys():
            row = conn.execute("SELECT doc FROM docs_vocab WHERE term = ?", (token,)).fetchone()
            cache[token] = row[0] if row else 0
        return cache

    def score_external(self, query, texts) -> list[float]:
        """
        BM25 scores of texts that are not in the index, on the index's scale: the same formula
        as FTS5's ``bm25()`` with the index's document count, average length and document
        frequencies (a word the index never saw has frequency 0). An indexed doc's own text
        scores what :meth:`search` gives it.

        Args:
            query (str): the query text.
            texts (list[str]): the texts (tokenized as the index's docs).

        Returns:
            list[float]: one score >= 0 per text; all 0 when the index is empty.

        Raises:
            FullTextError, ArchiveError.
        """
        tokens = _tokens(query, self.stop_words)
        texts = list(texts)
        if not tokens or not texts:
            return [0.0] * len(texts)

        def scorer(conn):
            return self._scorer(tokens, self._frequencies(conn, tokens))

        score = self._run(scorer)
        return [score(_tokens(text, self.stop_words)) for text in texts]


_indexes = {}
_indexes_lock = threading.Lock()


def index_for(archive) -> FullTextIndex:
    """
    The process-wide :class:`FullTextIndex` of ``archive`` (a ``MessageArchive``), created on
    first use. Opens nothing: cheap enough for the reactor thread.
    """
    path = index_path(archive.path)
    with _indexes_lock:
        index = _indexes.get(path)
        if index is None:
            index = _indexes[path] = FullTextIndex(path, archive)
        else:
            index.archive = archive  # the archive may have been closed and reopened
        return index


def close_index(archive_path) -> None:
    """Close and forget the index of the archive at ``archive_path`` (the file stays)."""
    with _indexes_lock:
        index = _indexes.pop(index_path(archive_path), None)
    if index is not None:
        index.close()


class ArchiveSearch:
    """
    The archived messages not verbatim in the context, as a search source for
    :func:`ai_contrib.memory.retrieval.fuse_candidates`.

    A message is left out when the context holds a message with its ``id`` and the same
    ``content`` (a masked message, whose context copy was shortened, stays searchable), and
    when it was archived after ``through_seq``: heard after the snapshot of the context was
    taken, it is in the context the prompt is built from, not a memory. A message whose id is
    in ``answered`` is left out too: a question the NPC answered from its memories holds no
    memory of its own, only the words of what it asked about, which would win every later
    search on that subject (``docs/design.md``, "Recall notes"). The index's statistics cover
    the whole archive, in context or not.

    Args:
        index (FullTextIndex): the archive's index.
        in_context (dict, optional): ``{message id: content}`` of the runtime history.
        embedder (optional): the embedder of the archive's vectors (:meth:`nearest`); None:
            the archive is searched by its words only.
        through_seq (int, optional): the archive's last seq when ``in_context`` was taken;
            None: no bound.
        answered (iterable[str], optional): ids of the messages left out as questions the
            NPC answered from its memories.
    """

    def __init__(self, index, in_context=None, embedder=None, through_seq=None, answered=()):
        self.index = index
        self.in_context = dict(in_context or {})
        self.embedder = embedder
        self.through_seq = through_seq
        self.answered = frozenset(answered or ())
        # a reply searches the vectors of its question twice (with and without the names in
        # it): the question is embedded once and the rows read once
        self._queries = {}
        self._read = {}

    @classmethod
    def of_docs(cls, docs, embedder=None) -> ArchiveSearch:
        """
        A source over a list of docs, indexed in memory (for callers without an archive); with
        an ``embedder``, every doc is embedded now (blocking).
        """
        index = FullTextIndex(":memory:")
        index.add(docs)
        if embedder is not None:
            while index.embed_pending(embedder, 256):
                pass
        return cls(index, embedder=embedder)

    def with_embedder(self, embedder) -> ArchiveSearch:
        """This source searching its vectors with ``embedder`` (None: words only)."""
        return ArchiveSearch(self.index, self.in_context, embedder, self.through_seq,
                             self.answered)

    def _in_context(self, doc):
        if doc.get("id") in self.answered:
            return True  # a question answered from memory: left out like a line in context
        if self.through_seq is not None and isinstance(doc.get("seq"), int) \
                and doc["seq"] > self.through_seq:
            return True  # heard after the snapshot: in the context the prompt is built from
        return doc.get("id") in self.in_context and self.in_context[doc["id"]] == doc.get("content")

    def _exclude(self):
        """The ``exclude`` of the index's searches: :meth:`_in_context`, or None when it
        leaves nothing out."""
        leaves_out = self.in_context or self.answered or self.through_seq is not None
        return self._in_context if leaves_out else None

    def doc_count(self) -> int:
        """Docs in the index (after catching up with the archive)."""
        return self.index.sync()["docs"]

    def search(self, query, limit, listeners=None) -> list[tuple[Message, float]]:
        """:meth:`FullTextIndex.search` without the docs still in context."""
        exclude = self._exclude()
        return self.index.search(query, limit, listeners=listeners, exclude=exclude)

    def nearest(self, query, limit, listeners=None, without=()) -> list:
        """
        :meth:`FullTextIndex.nearest` for the text ``query`` (embedded as a query), without the
        docs still in context; [] without an embedder.

        Args:
            without (iterable[str]): names whose directions are taken out of the query's vector
                first (:func:`ai_contrib.memory.archive_vectors.without_directions`): the
                question's subject without the people it names.
        """
        if self.embedder is None or limit <= 0 or not str(query or "").strip():
            return []
        query = str(query)
        if query not in self._queries:
            if len(self._queries) >= 8 or len(self._read) >= MAX_K:  # a source kept for long
                self._queries.clear()
                self._read.clear()
            self._queries[query] = self.embedder.encode([query], is_query=True)[0]
        vector = self._queries[query]
        if without:
            vector = without_directions(vector, [name_vector(self.embedder, name)
                                                 for name in without])
            if vector is None:
                return []
        exclude = self._exclude()
        return self.index.nearest(vector, model_key(self.embedder), limit, listeners=listeners,
                                  exclude=exclude, read=self._read)

    def neighbours(self, rows, listeners=None) -> dict[int, list[Message]]:
        """:meth:`FullTextIndex.neighbours` without the docs still in context."""
        exclude = self._exclude()
        return self.index.neighbours(rows, listeners=listeners, exclude=exclude)

    def score_external(self, query, texts) -> list[float]:
        """:meth:`FullTextIndex.score_external`."""
        return self.index.score_external(query, texts)
