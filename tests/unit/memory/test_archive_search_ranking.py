"""
The archive's search gives a fixed index the rankings recorded in
``archive_search_ranking.json``: BM25 hits, vector hits (bit scan, cosine rescoring), the
neighbours, and the whole fused and rescored result of a reply (``build_memory_context``), with
the audience and in-context filters on. How the search runs (its SQL, how it reads and decodes
rows) may change for speed; what it returns may not.

The index: 400 archived lines of a village (fixed seed), one in three heard only by ``#11``,
one in ten public, the last 30 in context, and a deterministic embedder: a line's vector is the
normalised sum of a fixed pseudo-random vector per word (seeded by the word's CRC), so the
vector ranking follows shared words without a model.

Run this file as a script to record the expected rankings again (only when the ranking is meant
to change): ``PYTHONPATH=. python tests/unit/memory/test_archive_search_ranking.py``.
"""

import json
import os
import random
import re
import sys
import zlib

import numpy as np
import pytest

from ai_contrib.memory.archive import MessageArchive
from ai_contrib.memory.fulltext import ArchiveSearch, FullTextIndex, index_path
from ai_contrib.memory.retrieval import RetrievalOptions, build_memory_context

EXPECTED = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "archive_search_ranking.json")
LISTENER, OTHER = "#11", "#12"
NAMES = "Alice Bob Elena Tom Marta Ivo Greta Hal Nina Osric".split()
PLACES = "Riverwood Eastport Greyhill Millbrook Ashford Stonebridge".split()
THINGS = "horses barrels lanterns swords apples candles nets boots ropes hides".split()
TEMPLATES = [
    "Did you hear that {name} went to {place} last week with the {thing}?",
    "I bought {n} {thing} at the market in {place}.",
    "{name} told me the {thing} in {place} were stolen.",
    "We should ask {name} about the {thing} before the festival.",
    "The road to {place} is flooded, so the {thing} will come late.",
    "My cousin {name} wants to sell {n} {thing} to the guild.",
    "The {thing} at {place} broke and {name} fixed them.",
    "Nobody in {place} trusts {name} since the winter.",
]
QUERIES = [
    "Who went to Riverwood?",
    "what happened to the swords in Eastport",
    "Tell me about Marta and the lanterns",
    "is the road flooded",
    "who wants to sell horses to the guild",
    "festival",
    "Greta Greyhill candles stolen",
    "what did Osric fix",
    "zzz unknown words only",
    "Bob bought apples",
]
MEMORY_TEXTS = ["Marta keeps the lanterns of Greyhill.", "Bob owes Alice 12 silver.",
                "The festival is held in Millbrook every spring."]
DIM = 64


class WordHashEmbedder:
    """Deterministic vectors: the normalised sum of one fixed vector per word."""

    name = "wordhash"
    dim = DIM

    def encode(self, texts, is_query=False):
        rows = []
        for text in texts:
            total = np.zeros(DIM, dtype=np.float64)
            for word in re.findall(r"[a-z]+", text.lower()):
                seed = zlib.crc32(word.encode("utf-8"))
                total += np.random.RandomState(seed).standard_normal(DIM)
            norm = np.linalg.norm(total)
            rows.append(total / norm if norm else total)
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), DIM)


def _message(seq, rng):
    fields = {"name": rng.choice(NAMES), "place": rng.choice(PLACES),
              "thing": rng.choice(THINGS), "n": rng.randint(2, 30)}
    text = " ".join(rng.choice(TEMPLATES).format(**fields) for _ in range(rng.randint(1, 2)))
    roll = rng.random()
    meta = ({} if roll < 0.1 else {"speaker": LISTENER, "audience": [LISTENER]} if roll < 0.4
            else {"speaker": LISTENER, "audience": [LISTENER, OTHER]})
    return {"id": f"m{seq:04d}", "role": "user" if seq % 2 == 0 else "assistant",
            "name": "Bob" if seq % 2 == 0 else "Marta", "content": text,
            "timestamp": f"2026-0{1 + seq // 100}-{1 + seq // 8 % 28:02d}T10:{seq % 60:02d}:00",
            "metadata": meta}


def _hits():
    return [{"text": text, "score": 0.8 - 0.1 * i, "metadata": {"memory_id": f"mem{i}"}}
            for i, text in enumerate(MEMORY_TEXTS)]


def rankings(directory):
    """Every ranking the test fixes, for the index built in ``directory``."""
    rng = random.Random(20261127)
    archive = MessageArchive(os.path.join(directory, "npc.jsonl"))
    messages = [_message(seq, rng) for seq in range(400)]
    for msg in messages:
        archive.append_message(msg)
    # a system line between two indexed lines: a neighbour is the next *indexed* line
    archive.append_message({"id": "sys", "role": "system", "content": "ignored"})
    archive.append_message(_message(400, rng))
    index = FullTextIndex(index_path(archive.path), archive)
    embedder = WordHashEmbedder()
    try:
        while index.embed_pending(embedder, 128):
            pass
        in_context = {m["id"]: m["content"] for m in messages[-30:]}
        found = {}
        for query in QUERIES:
            source = ArchiveSearch(index, in_context, embedder)
            bm25 = source.search(query, 20, [LISTENER])
            nearest = source.nearest(query, 20, [LISTENER])
            rows = [doc["seq"] for doc, _score in bm25 + nearest]
            context = build_memory_context(_hits(), source, query, RetrievalOptions(),
                                           listeners=[LISTENER])
            found[query] = {
                "bm25": [[doc["id"], score] for doc, score in bm25],
                "nearest": [[doc["id"], score] for doc, score in nearest],
                "nearest_everyone": [[doc["id"], score] for doc, score in ArchiveSearch(
                    index, embedder=embedder).nearest(query, 5)],
                "neighbours": {str(row): [doc["id"] for doc in docs] for row, docs in
                               sorted(source.neighbours(rows, [LISTENER]).items())},
                "reply": [[c["key"], c["score"]] for c in context.memories
                          + context.experiences],
                "reply_text": context.text,
            }
        return found
    finally:
        index.close()
        archive.close()


def _same(found, expected, where):
    assert [key for key, _score in found] == [key for key, _score in expected], where
    assert [score for _key, score in found] == pytest.approx(
        [score for _key, score in expected], rel=1e-6, abs=1e-9), where


def test_the_archive_search_returns_the_recorded_rankings(tmp_path):
    with open(EXPECTED, encoding="utf-8") as handle:
        expected = json.load(handle)
    found = rankings(str(tmp_path))
    assert list(found) == list(expected) == QUERIES
    # positive control: the fixture exercises every path, so an empty result cannot pass
    assert any(expected[q]["bm25"] for q in QUERIES)
    assert all(expected[q]["nearest"] for q in QUERIES[:-2])
    assert any(len(v) == 2 for q in QUERIES for v in expected[q]["neighbours"].values())
    assert expected["zzz unknown words only"]["bm25"] == []
    for query in QUERIES:
        for part in ("bm25", "nearest", "nearest_everyone", "reply"):
            _same(found[query][part], expected[query][part], (query, part))
        assert found[query]["neighbours"] == expected[query]["neighbours"], query
        assert found[query]["reply_text"] == expected[query]["reply_text"], query


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as workdir:
        recorded = rankings(workdir)
    with open(EXPECTED, "w", encoding="utf-8") as handle:
        json.dump(recorded, handle, indent=1)
        handle.write("\n")
    sys.exit(0)
