"""
The lexical side of retrieval, shared by the archive's FTS5 index (:mod:`.fulltext`) and the
fusion of Mem0 hits (:mod:`.retrieval`): one tokenizer and one Okapi BM25 sum, so both score
words the same way (``docs/design.md``, "The archive's full-text index"). Pure functions.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from functools import lru_cache

import snowballstemmer

from ..core.dates import short_time


#: English function words dropped before BM25: they match everywhere and drown the rare words
#: (recall@10 on LoCoMo with rank-bm25: .571 without this list, .609 with it).
STOP_WORDS = frozenset(
    """a an the and or but if of at by for with about to from in on into over under up down
    out is are was were be been being am do does did have has had having i me my you your he
    him his she her it its we our they them their this that these those what which who whom
    when where why how there here so than too very can will just not no s t""".split()
)

_TOKEN_RE = re.compile(r"[0-9a-z]+")


def tokenize(text, stop_words=STOP_WORDS) -> list:
    """
    BM25 tokens of a text: lower-cased alphanumeric runs, stop words removed.

    Apostrophes split words (``"don't"`` -> ``"don"``), which keeps possessives (``"Bob's"``)
    matching ``"Bob"``.

    Args:
        text (str): the text.
        stop_words (frozenset): words to drop (default :data:`STOP_WORDS`; empty to keep all).

    Returns:
        list[str]
    """
    return [token for token in _TOKEN_RE.findall((text or "").lower()) if token not in stop_words]


#: Snowball's stemmer objects keep state while they stem a word: one per thread
_stemmers = threading.local()


@lru_cache(maxsize=65536)
def stem(word) -> str:
    """
    ``word``'s stem by the Snowball English stemmer (Porter2; the ``snowballstemmer``
    package): "instruments" -> "instrument", "playing" -> "play". Cached: a conversation
    repeats its words.
    """
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)


def terms(text, stop_words=STOP_WORDS) -> list:
    """
    The words BM25 matches: :func:`tokenize`'s tokens as their stems (:func:`stem`), so that
    "instruments" finds a line about an "instrument" and "playing" one that says "play"
    (``docs/design.md``, "The archive's full-text index"). The stop list applies to the words,
    before stemming.

    Returns:
        list[str]
    """
    return [stem(token) for token in tokenize(text, stop_words)]


def bm25(query_tokens, words, idf, average_length, k1, b) -> float:
    """
    Okapi BM25 of one document for a query.

    Args:
        query_tokens (list[str]): the query's tokens (a repeated token counts again).
        words (list[str]): the document's tokens.
        idf (dict[str, float]): inverse document frequency of each query token.
        average_length (float): the corpus's mean document length, in tokens (> 0).
        k1 (float), b (float): the usual BM25 constants.

    Returns:
        float: >= 0 when every idf is.
    """
    counts = Counter(words)
    norm = k1 * (1 - b + b * len(words) / average_length)
    score = 0.0
    for token in query_tokens:
        freq = counts.get(token, 0)
        if freq:
            score += idf[token] * freq * (k1 + 1) / (freq + norm)
    return score


def doc_text(doc, with_time=True) -> str:
    """
    The text of an archive doc: ``"[timestamp] name: content"`` (parts optional), the text the
    full-text index tokenizes.

    With ``with_time`` False, ``"name: content"``: the text of the line that is embedded
    (:mod:`ai_contrib.memory.archive_vectors`), since dates say nothing of what a line means
    and would pull every line of a day together (``docs/design.md``, "Archived lines'
    vectors").
    """
    parts = []
    stamp = short_time(doc.get("timestamp")) if with_time else ""
    if stamp:
        parts.append(f"[{stamp}]")
    if doc.get("name"):
        parts.append(f"{doc['name']}:")
    parts.append(str(doc.get("content") or ""))
    return " ".join(parts)
