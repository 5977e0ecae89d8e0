"""
The LoCoMo benchmark's scoring functions (``benchmarks/locomo_metrics.py``) and the pure parts of
``benchmarks/locomo.py``; the benchmark itself runs in ``tests/bench/test_locomo.py``.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks import locomo_metrics as m

from tests.support.locomo_sample import SENTINEL, synthetic_sample



# ------------------------------------------------------------------------------------------------
# normalisation and containment


def test_normalize_answer_follows_locomo():
    assert m.normalize_answer("The Cat, and a Dog!") == "cat dog"
    assert m.normalize_answer("  An  apple ") == "apple"
    assert m.normalize_answer(2022) == "2022"
    assert m.normalize_answer(None) == ""
    # words that merely contain an article survive
    assert m.normalize_answer("theatre and anthem") == "theatre anthem"


def test_normalize_answer_strips_unicode_punctuation():
    assert m.normalize_answer("Caroline\u2019s \u201cpride\u201d \u2014 parade") == "carolines pride parade"


@given(st.text())
def test_normalize_answer_is_idempotent(text):
    once = m.normalize_answer(text)
    assert m.normalize_answer(once) == once


def test_stem_matches_porter_examples():
    examples = {
        "caresses": "caress", "ponies": "poni", "ties": "tie", "cats": "cat", "agreed": "agre",
        "hopping": "hop", "falling": "fall", "filing": "file", "happy": "happi",
        "enjoy": "enjoy", "relational": "relat", "conditional": "condit", "hopeful": "hope",
        "goodness": "good", "adoption": "adopt", "controll": "control", "dying": "die",
        "skies": "sky", "generously": "gener", "painting": "paint", "is": "is",
    }
    assert {w: m.stem(w) for w in examples} == examples


def test_f1_uses_stems_and_is_symmetric_in_overlap():
    assert m.f1_score("painted a sunset", "painting sunsets") == pytest.approx(1.0)
    assert m.f1_score("a red bicycle", "bicycle") == pytest.approx(2 * 0.5 * 1 / 1.5)
    assert m.f1_score("", "anything") == 0.0
    assert m.f1_score("nothing alike", "totally different") == 0.0


def test_locomo_f1_per_category():
    # multi-hop: each gold part takes its best predicted part
    assert m.locomo_f1("Lisbon, Porto", "Porto, Lisbon", 1) == pytest.approx(1.0)
    assert m.locomo_f1("Lisbon", "Porto, Lisbon", 1) == pytest.approx(0.5)
    # open-domain: the gold answer is cut at ';'
    assert m.locomo_f1("marine biology", "marine biology; she loves the sea", 3) == pytest.approx(1.0)
    assert m.locomo_f1("7 May 2023", "7 May 2023", 2) == pytest.approx(1.0)
    # adversarial: only a refusal scores
    assert m.locomo_f1("No information available.", "anything", 5) == 1.0
    assert m.locomo_f1("It was self-care.", "self-care", 5) == 0.0
    assert m.locomo_f1(None, "x", 4) == 0.0
    with pytest.raises(ValueError):
        m.locomo_f1("x", "x", 9)


def test_contains_part_exact_and_by_recall():
    texts = ["Jon: [1:56 pm on 8 May, 2023] I opened my dance studio downtown!", "Gina: nice"]
    assert m.contains_part("8 May 2023", texts)
    assert m.contains_part("dance studio", texts)
    # words must be contiguous for the exact match, but 80 % recall in one message also counts
    assert m.contains_part("opened studio dance", texts)
    assert not m.contains_part("studio in Paris opened yesterday", texts)
    # a match never spans two messages
    assert not m.contains_part("downtown gina nice", texts)
    # no partial-word matches
    assert not m.contains_part("dance stud", ["the dance studios"])


def test_answer_score_multi_hop_is_per_part():
    texts = ["Bob: I visited Lisbon last year", "Alice: and then?"]
    assert m.answer_score("Lisbon, Porto", texts, 1) == pytest.approx(0.5)
    assert m.answer_score("Lisbon, Porto", texts, 4) == 0.0  # one part, not contained
    assert m.answer_score("the", texts, 4) is None  # nothing left to score


def test_token_recall():
    assert m.token_recall("red bicycle", "I bought a red bicycle") == 1.0
    assert m.token_recall("red bicycle", "a bicycle") == 0.5
    assert m.token_recall("", "anything") == 0.0


# ------------------------------------------------------------------------------------------------
# evidence


def test_parse_evidence_is_lenient():
    assert m.parse_evidence(["D1:3"]) == ["D1:3"]
    assert m.parse_evidence(["D8:6; D9:17"]) == ["D8:6", "D9:17"]
    assert m.parse_evidence(["D:11:26"]) == ["D11:26"]
    assert m.parse_evidence(["D30:05"]) == ["D30:5"]
    assert m.parse_evidence(["D"]) == []
    assert m.parse_evidence(["D1:3", "D1:03"]) == ["D1:3"]
    assert m.parse_evidence(None) == []
    assert m.parse_evidence("D2:4") == ["D2:4"]
    assert m.normalise_dia_id("D1:03") == "D1:3"
    assert m.normalise_dia_id("nothing") is None
    assert m.evidence_session("D12:4") == 12


@given(st.lists(st.tuples(st.integers(0, 999), st.integers(0, 999)), max_size=5))
def test_parse_evidence_round_trips(pairs):
    ids = [f"D{s}:{t:02d}" for s, t in pairs]
    expected = list(dict.fromkeys(f"D{s}:{t}" for s, t in pairs))
    assert m.parse_evidence(ids) == expected
    assert m.parse_evidence(["; ".join(ids)]) == expected


def test_evidence_score():
    turns = {"D1:1": "[date] hello there", "D1:2": "[date] my cat Pickle"}
    assert m.evidence_score(["D1:1", "D1:2"], turns, ["Alice: [date] hello there"]) == 0.5
    assert m.evidence_score(["D1:2"], turns, ["[date] my cat Pickle"]) == 1.0
    assert m.evidence_score(["D9:9"], turns, ["anything"]) is None  # points nowhere


def test_evidence_in_prompt_is_the_turns_own_text_anywhere_in_the_prompt():
    said = {"D1:1": "I went to the support group yesterday.", "D1:2": "My cat is Pickle."}
    # a recall note's line with the server's time and a date annotation counts
    note = ("RELATED MEMORIES:\n- [8 May 2023] Caroline: I went to the support group "
            "yesterday (7 May 2023).")
    assert m.evidence_in_prompt(["D1:1"], said, ["persona", note]) == 1.0
    # the same words in another order, or a paraphrase in a summary, do not
    assert m.evidence_in_prompt(["D1:1"], said, ["Yesterday I went to the support group."]) == 0.0
    assert m.evidence_in_prompt(["D1:1", "D1:2"], said, ["Summary: she has a cat, Pickle.",
                                                         "Mel: My cat is Pickle."]) == 0.5
    # an annotation the contrib does not write is not removed
    assert m.evidence_in_prompt(["D1:2"], said, ["My cat (a tabby) is Pickle."]) == 0.0
    assert m.evidence_in_prompt(["D9:9"], said, ["anything"]) is None  # points nowhere


def test_aggregate_and_report():
    rows = [
        {"system": "full", "category": 4, "answer_in_prompt": 1.0, "evidence_verbatim": 1.0,
         "prompt_tokens": 100, "f1": 0.5},
        {"system": "full", "category": 2, "answer_in_prompt": 0.0, "evidence_verbatim": None,
         "prompt_tokens": 300, "f1": 0.0},
        {"system": "full", "category": 5, "adversarial_in_prompt": 0.0, "evidence_verbatim": 1.0,
         "prompt_tokens": 200, "f1": 1.0, "asserted": 0.0},
    ]
    summary = m.aggregate(rows)
    assert summary["full"]["1-4"]["n"] == 2
    assert summary["full"]["1-4"]["answer_in_prompt"] == 0.5
    assert summary["full"]["1-4"]["evidence_verbatim"] == 1.0  # None is not scored
    assert summary["full"]["1-4"]["prompt_tokens"] == 200
    assert summary["full"]["1-4"]["prompt_tokens_max"] == 300
    assert summary["full"][5]["n"] == 1 and "1-4" in summary["full"]
    stats = {"full": {"llm_calls": 3, "wall_s": 1.5, "summary_calls": 2,
                      "summary_completion_tokens": 250, "extraction_calls": 1,
                      "compaction_s": 12.25}}
    text = m.format_report(summary, ["full"], stats, True)
    assert "| full | all 1-4 | 2 | - | 50.0 | 100.0 | 25.0 | 200 | 300 | 3 | 1.5 |" in text
    assert "| 2 | 250 | 1 | 12.2 |" in text
    assert "Category 5" in text


# ------------------------------------------------------------------------------------------------
# reading the data (benchmarks/locomo.py's pure part)


def test_conversation_turns_carry_time_caption_and_roles():
    from benchmarks import locomo

    conversation = synthetic_sample()["conversation"]
    turns = locomo.conversation_turns(conversation)
    assert len(turns) == 54
    first, image = turns[0], turns[2]
    assert first["role"] == "user" and first["speaker"] == "Alice" and first["id"] == "D1:1"
    # the date is the message's timestamp only, as a game's line has it; the text is as said
    assert first["content"].startswith("Hi Bob!")
    assert first["timestamp"] == "2023-05-08T13:56:00+00:00"
    assert turns[1]["role"] == "assistant"
    assert image["content"].endswith("[shares a photo of a red bicycle leaning on a wall]")
    assert {t["session"] for t in locomo.conversation_turns(conversation, max_sessions=1)} == {1}


def test_select_questions_skips_what_was_not_replayed():
    from benchmarks import locomo

    sample = synthetic_sample()
    every = locomo.select_questions(sample, {1, 2}, truncated=False)
    assert [q["category"] for q in every] == [4, 2, 1, 3, 4, 5]
    assert every[2]["evidence"] == ["D1:2", "D1:4"]
    assert every[5]["gold"] == SENTINEL  # the adversarial answer, for category 5
    first_only = locomo.select_questions(sample, {1}, truncated=True)
    assert [q["index"] for q in first_only] == [0, 1, 2, 4, 5]
    assert len(locomo.select_questions(sample, {1, 2}, False, max_questions=2)) == 2


def test_spread_questions_take_every_kind_in_its_share():
    from benchmarks import locomo

    # LoCoMo lists its questions by kind: a block of multi-hop, then temporal, then single-hop
    qa = ([{"question": f"m{i}", "category": 1, "answer": "a", "evidence": ["D1:1"]}
           for i in range(10)]
          + [{"question": f"t{i}", "category": 2, "answer": "a", "evidence": ["D1:1"]}
             for i in range(10)]
          + [{"question": "adv", "category": 5, "adversarial_answer": "x", "evidence": []}]
          + [{"question": f"s{i}", "category": 4, "answer": "a", "evidence": ["D1:1"]}
             for i in range(20)])
    sample = {"qa": qa}
    first = locomo.select_questions(sample, {1}, False, max_questions=4)
    assert {q["category"] for q in first} == {1}
    spread = locomo.select_questions(sample, {1}, False, spread=4)
    assert [q["category"] for q in spread] == [1, 2, 4, 4]
    assert [q["question"] for q in spread] == ["m5", "t5", "s5", "s15"]
    # a smaller list than asked for is asked whole, adversarial questions left out
    whole = locomo.select_questions({"qa": qa[18:22]}, {1}, False, spread=10)
    assert [q["question"] for q in whole] == ["t8", "t9", "s0"]
    assert locomo.select_questions({"qa": qa[18:22]}, {1}, False)[2]["category"] == 5


def test_session_time():
    from benchmarks import locomo

    assert locomo.parse_session_time("10:04 am on 20 June, 2023") == "2023-06-20T10:04:00+00:00"
    assert locomo.parse_session_time("sometime") is None


def _result(system, final_tokens, budget=4096):
    row = {"system": system, "category": 4, "answer_in_prompt": 1.0, "evidence_verbatim": 0.5,
           "prompt_tokens": 100}
    return {
        "config": {"data_sha256": "x", "max_context_tokens": budget, "max_sessions": None,
                   "max_questions": None, "model": "m", "seed": 1, "answer": False,
                   "conversations": ["c1"], "systems": [system], "systems_done": [system]},
        "wall_s": 10.0,
        "stats": {system: {"conversations": 1, "llm_calls": 3, "final_tokens": final_tokens}},
        "per_conversation": {"c1": {system: {"replay_s": 1.0}}},
        "questions": [row],
    }


def test_versus_full_sets_each_system_against_full_on_the_same_questions():
    def row(system, conv, index, got, tokens, category=1):
        return {"system": system, "conversation": conv, "qa_index": index,
                "category": category, "answer_in_prompt": got, "prompt_tokens": tokens}

    rows = [
        row("full", "c1", 0, 1.0, 1000), row("full", "c1", 1, 1.0, 1000),
        row("full", "c2", 0, 0.0, 3000), row("full", "c2", 1, 1.0, 3000),
        row("mask", "c1", 0, 1.0, 100), row("mask", "c1", 1, 0.0, 100),
        row("mask", "c2", 0, 1.0, 300), row("mask", "c2", 1, 1.0, 300),
        row("mask", "c2", 2, 1.0, 300, category=5),  # adversarial: not in the table
    ]
    for r in rows:  # the strict figure: mask has half of full's evidence on c1
        r["evidence_in_prompt"] = 0.5 if (r["system"], r["conversation"]) == ("mask", "c1") else 1.0
    table = m.versus_full_rows(rows, ["mask", "full"])
    assert table == [
        ["mask", "c1", 2, "50.0", "100.0", "50.0", "100.0", "50.0", "100", "1000", "10.0"],
        ["mask", "c2", 2, "100.0", "100.0", "100.0", "50.0", "200.0", "300", "3000", "10.0"],
        ["mask", "all", 4, "75.0", "100.0", "75.0", "75.0", "100.0", "200", "2000", "10.0"],
    ]
    assert m.versus_full_rows([r for r in rows if r["system"] != "full"], ["mask"]) == []


def test_merge_results_of_runs_over_disjoint_systems():
    from benchmarks import locomo

    merged = locomo.merge_results([_result("full", None), _result("summary", 900)])
    assert merged["config"]["systems"] == ["summary", "full"]  # baselines last
    assert merged["summary"]["summary"]["1-4"]["n"] == 1
    assert merged["stats"]["summary"]["final_tokens"] == 900
    assert len(merged["config"]["runs"]) == 2
    # the game path's rows are kept with their system's
    played = _result("summary", 900)
    played["questions"].append(dict(played["questions"][0],
                                    system=m.game_label("summary", 1)))
    merged = locomo.merge_results([_result("full", None), played])
    assert [r["system"] for r in merged["questions"]] == ["full", "summary",
                                                          "summary in a game, reply 1"]
    assert m.label_system("summary in a game, small talk") == "summary"
    with pytest.raises(SystemExit):
        locomo.merge_results([_result("summary", 900), _result("summary", 800)])
    with pytest.raises(SystemExit):
        locomo.merge_results([_result("summary", 900), _result("full", None, budget=1024)])


def test_a_recall_note_counts_item_by_item():
    from benchmarks import locomo

    note = ("RELATED MEMORIES:\n- [8 May 2023] Mel: \"I painted a sunrise.\"\n"
            "- [9 May 2023] Mel: \"The lake was calm.\"")
    prompt = [{"role": "system", "content": "You are Mel."},
              {"role": "system", "content": note},
              {"role": "user", "content": "Caroline: What did Mel paint at the lake?"}]
    texts = locomo.answer_texts(prompt, "Caroline: What did Mel paint at the lake?")
    assert texts[0] == "You are Mel." and len(texts) == 4  # the note as its two items
    assert '- [8 May 2023] Mel: "I painted a sunrise."' in texts
    # an answer whose words are spread over two items is not in the prompt...
    assert m.answer_score("the sunrise, the calm lake", texts, 4) == 0.0
    # ...though the note as one message would have held it; one item that holds it counts
    assert m.answer_score("the sunrise, the calm lake", [note], 4) == 1.0
    assert m.answer_score("a sunrise", texts, 4) == 1.0


def test_facts_journaled_rejected_and_replaced_per_conversation():
    from benchmarks.locomo import fact_checks
    from ai_contrib.core.cuts import EXTRACTION_TYPE

    traffic = {"type": EXTRACTION_TYPE}
    archived = [
        {"role": "user", "content": "error: not recorded: a player's line, not a tool result"},
        {"role": "tool", "content": "error: not recorded: no one line says it.",
         "metadata": traffic},
        {"role": "tool", "content": "ok: recorded in your journal as fact_1 (importance 5).",
         "metadata": traffic},
        {"role": "tool", "content": "error: not recorded: names or numbers ...",
         "metadata": traffic},
    ]
    entries = [{"source_type": "fact", "grounding": "model"},
               {"source_type": "fact", "grounding": "replaced"},
               {"source_type": "compaction"}]
    assert fact_checks(entries, archived) == {"rejected": 2, "replaced": 1}
    stats = {"summary": {"facts_by_conversation": {
        "conv-1": {"journaled": 2, "rejected": 2, "replaced": 1}, "conv-0": 4},
        "facts": 6, "facts_rejected": 2, "facts_replaced": 1}}
    rows = m.memory_table_rows(["summary", "full"], stats)
    header = m.MEMORY_HEADER
    cells = [dict(zip(header, row)) for row in rows]
    assert [(c["conversation"], c["facts journaled"], c["facts rejected"],
             c["facts replaced by their line"]) for c in cells] == [
        ("conv-0", 4, "-", "-"),  # a result from before the check: journaled only
        ("conv-1", 2, 2, 1), ("all", 6, 2, 1)]
    assert all(len(row) == len(header) for row in rows)


def test_the_reply_time_table_sets_each_reply_beside_the_small_talk_of_the_same_run():
    def row(turn, seconds):
        return {"system": m.game_label("mask", turn), "turn_s": seconds}

    rows = [row(1, s) for s in (4.0, 6.0, 5.0)] + [row(2, 3.0), row(3, 2.0)] + [
        row(m.SMALL_TALK_TURN, s) for s in (2.0, 2.0, 3.0)]
    table = {r[1]: r for r in m.game_time_rows(["mask"], rows)}
    assert table["reply 1"][2:] == [3, "5.00", "6.00", "2.50"]
    assert table["small talk"][3] == "2.00" and table["small talk"][5] == "1.00"
    assert table["reply 3"][5] == "1.00"
    # without small talk in the run there is nothing to compare with: no table
    assert m.game_time_rows(["mask"], rows[:5]) == []
    assert m.game_time_rows(["other"], rows) == []


def test_evaluated_tokens_count_the_prompt_after_its_common_prefix():
    def msg(text):
        return {"role": "user", "content": text}

    def count(message):
        return len(message["content"].split())

    first = [msg("persona words here"), msg("one two"), msg("three")]
    # nothing cached: the whole prompt
    assert m.evaluated_tokens(None, first, count) == 6
    # a prompt that goes on from the last: only the new message
    assert m.evaluated_tokens(first, first + [msg("four five")], count) == 2
    # a message changed early (a note given up): everything from it
    changed = [first[0], msg("one"), first[2], msg("four five")]
    assert m.evaluated_tokens(first, changed, count) == 4


def test_the_evaluated_tokens_table_sets_each_reply_beside_the_small_talk():
    def row(turn, tokens):
        return {"system": m.game_label("mask", turn), "evaluated_tokens": tokens}

    rows = [row(1, t) for t in (300, 600, 450)] + [row(2, 150), row(3, 75)] + [
        row(m.SMALL_TALK_TURN, t) for t in (50, 75, 100)]
    table = {r[1]: r for r in m.game_evaluated_rows(["mask"], rows)}
    assert table["reply 1"][2:] == [3, "450", "600", "6.00", "3.00"]
    assert table["small talk"][5] == "1.00" and table["reply 2"][5] == "2.00"
    assert m.game_evaluated_rows(["mask"], rows[:5]) == []


def test_invented_quotes_are_counted_where_a_prompt_reads_them():
    from ai_contrib.core.summary import make_marker

    said = [{"id": "a1", "role": "user", "name": "Caroline", "content": "My son hurt his leg."},
            {"id": "a2", "role": "assistant", "name": "Melanie", "content": "Oh no, I am sorry."}]
    summary = ('- Caroline said: "My son hurt his leg."\n'
               '- Caroline said: "My brother crashed the car."')
    marker = make_marker(summary, said, 40, 20)
    # journal entries as ai_contrib.memory.journal.add_entry writes them
    entries = [{"content": 'Melanie said: "Oh no, I am sorry."'},
               {"content": 'Melanie said: "I will drive him home."'},
               {"content": "No quote here."}]
    counts = m.invented_quotes([marker], said, entries)
    # one invented quote in the summary, one in the journal; the true quotes pass (control)
    assert counts == {"context": 1, "journal": 1}
    assert m.invented_quotes([], said, entries[:1]) == {"context": 0, "journal": 0}


def test_journal_facts_are_a_player_line_an_npc_line_or_junk():
    archived = [
        {"role": "user", "name": "Caroline", "content": "I went to a LGBTQ support group "
         "yesterday and it was so powerful."},
        {"role": "assistant", "name": "Marta", "content": "Aye, that sounds like a good day."},
        {"role": "tool", "content": "ok: recorded"},
    ]
    entries = [
        {"source_type": "fact", "content": "Caroline went to an LGBTQ support group."},
        {"source_type": "observation", "content": "That sounds like a good day."},
        {"source_type": "fact", "content": "Alice is allergic to peanuts."},
        {"source_type": "fact", "content": "How have you been feeling lately?"},
        {"source_type": "synthesis", "content": "Alice is allergic to peanuts."},  # not a fact
    ]
    kinds = m.journal_kinds(entries, archived)
    assert [k for k, _ in kinds["contents"]] == ["player", "npc", "junk", "junk"]
    assert (kinds["player"], kinds["npc"], kinds["junk"]) == (1, 1, 2)
    assert kinds["junk_share"] == 0.5
    assert m.journal_kinds([], archived)["junk_share"] == 0.0
    stats = {"summary": {"facts_by_conversation": {"conv-1": 4}, "facts": 4,
                         "journal_junk": 2, "journal_classified": 4,
                         "misquoted_summaries": 3, "quotes_repaired": 1}}
    cells = dict(zip(m.MEMORY_HEADER, m.memory_table_rows(["summary"], stats)[-1]))
    assert cells["junk facts (of facts classified)"] == "2 of 4 (50.0%)"
    assert (cells["summaries refused for a quote"], cells["quotes repaired"]) == (3, 1)
