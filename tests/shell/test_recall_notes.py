"""
Recall notes (``ai_contrib.core.recall_notes``, ``docs/design.md``, "Recall notes"): what
retrieval returns stays where it was first shown, so the reply prompt's prefix stays the same
from one reply to the next; and the prompt assembly places and accounts for them.
"""

import threading
from unittest import mock

from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.core.prompts import assemble_reply_prompt
from ai_contrib.core.receipts import describe_recall
from ai_contrib.npc import deadline
from ai_contrib.core.recall_notes import (
    QUESTION_DROP_SHARE, give_up_leaving, item_marks, lendable_tokens, notes_over_budget,
    plan_ahead, plan_recall, visible_notes, withdraw)

from tests.support.llm_double import reply, respond
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for, wait_until
from tests.support.waiting import HANG_GUARD


def render(items):
    return "RELATED MEMORIES:\n" + "\n".join(item["line"] for item in items)


def count(text):
    return len(text.split())


def item(key, words=4):
    return {"key": key, "kind": "memory", "line": "- " + " ".join([key] * words)}


def plan(notes, items, anchor, ids, budget=40, listeners=None):
    return plan_recall(notes, items, anchor, set(ids), budget, render, count,
                       listeners=listeners)


def test_a_memory_already_shown_is_not_added_again():
    first = plan([], [item("a"), item("b")], "m1", {"m1"})
    assert [i["key"] for i in first.new["items"]] == ["a", "b"]
    second = plan(first.notes, [item("b"), item("c")], "m3", {"m1", "m2", "m3"})
    assert [i["key"] for i in second.new["items"]] == ["c"]
    # the first note is shown again unchanged, before the second
    assert second.shown[0] is first.notes[0]
    assert [n["anchor"] for n in second.shown] == ["m1", "m3"]


def test_a_note_holding_an_erased_memory_leaves_and_the_memory_is_not_added_again():
    fact = dict(item("fact"), key="m:mem-7", journal_id="j3")
    first = plan([], [item("a"), fact], "m1", {"m1"})
    other = plan(first.notes, [item("b")], "m2", {"m1", "m2"})
    assert item_marks(fact) == {"m:mem-7", "j:j3"}
    # control: unmarked, both notes stay
    kept = plan(other.notes, [item("b")], "m3", {"m1", "m2", "m3"})
    assert [n["anchor"] for n in kept.shown] == ["m1", "m2"] and kept.withdrawn == 0
    # the fact's journal entry erased: its note leaves whole, the other stays, and a
    # retrieval that still found it (its Mem0 deletion under way) does not bring it back
    erased = plan_recall(other.notes, [fact, item("c")], "m3", {"m1", "m2", "m3"}, 40,
                         render, count, withdrawn={"j:j3"})
    assert erased.withdrawn == 1
    assert [n["anchor"] for n in erased.shown] == ["m2", "m3"]
    assert "fact" not in " ".join(n["text"] for n in erased.shown)
    assert [i["key"] for i in erased.new["items"]] == ["c"]
    # by its key too; and withdraw alone answers the same
    notes, items, left = withdraw(other.notes, [fact], {"m:mem-7": None})
    assert left == 1 and items == [] and [n["anchor"] for n in notes] == ["m2"]
    assert withdraw(other.notes, [fact], None) == (other.notes, [fact], 0)


def test_nothing_new_adds_no_note():
    first = plan([], [item("a")], "m1", {"m1"})
    second = plan(first.notes, [item("a")], "m2", {"m1", "m2"})
    assert second.new is None and second.shown == first.notes


def test_a_note_leaves_with_its_anchor():
    first = plan([], [item("a")], "m1", {"m1"})
    # m1 was compacted away: its note goes, and "a" is new again
    second = plan(first.notes, [item("a")], "m5", {"m5"})
    assert [n["anchor"] for n in second.notes if not n.get("lost")] == ["m5"]
    assert [i["key"] for i in second.new["items"]] == ["a"]


def test_shown_notes_stay_and_new_ones_take_what_room_is_left():
    notes = plan([], [item("a", 10)], "m1", {"m1"}, budget=30).notes
    second = plan(notes, [item("a", 10), item("b", 10), item("c", 10)], "m2", {"m1", "m2"},
                  budget=30)
    # "a" stays where it was; of b and c only one fits beside it
    assert second.dropped == 0 and second.left_out == 1
    assert [[i["key"] for i in n["items"]] for n in second.shown] == [["a"], ["b"]]


def test_a_change_of_subject_gives_up_the_newest_notes_first():
    # one-item notes cost 11 "tokens", two-item notes 20; the budget holds two of the latter
    notes = plan([], [item("a", 8), item("b", 8)], "m1", {"m1"}, budget=40).notes
    second = plan(notes, [item("a", 8), item("c", 8), item("d", 8)], "m2", {"m1", "m2"},
                  budget=40)
    assert second.dropped == 0
    third = plan(second.notes, [item("x", 8), item("y", 8), item("z", 8)], "m3",
                 {"m1", "m2", "m3"}, budget=40)
    # the oldest note stays in the cached prefix; the newest makes room for the new subject
    assert third.dropped == 1
    assert third.shown[0] is notes[0]
    assert [[i["key"] for i in n["items"]] for n in third.shown] == [["a", "b"], ["x", "y"]]
    assert [n["anchor"] for n in third.notes if not n.get("lost")] == ["m1", "m3"]


def test_a_change_of_subject_gives_up_nothing_when_half_the_budget_is_free():
    notes = plan([], [item("a", 8)], "m1", {"m1"}, budget=40).notes
    second = plan(notes, [item("x", 8), item("y", 8), item("z", 8)], "m2", {"m1", "m2"},
                  budget=40)
    assert second.dropped == 0
    assert [[i["key"] for i in n["items"]] for n in second.shown] == [["a"], ["x", "y"]]


def test_a_question_about_the_past_gives_up_old_subjects_and_keeps_its_own():
    # three one-subject notes fill the budget: "a" (oldest), "b", then "q" (the newest)
    def note(anchor, *keys):
        items = [item(key, 8) for key in keys]
        return {"anchor": anchor, "audience": None, "items": items, "text": render(items),
                "tokens": count(render(items))}

    notes = [note("m1", "a", "a2"), note("m2", "b", "b2"), note("m3", "q")]  # 51 of 60 tokens
    ids = {"m1", "m2", "m3", "m4"}
    asked = [item("q", 8), item("b", 8), item("b2", 8), item("r", 8), item("s", 8)]
    # control: the turn's best candidate is shown, so without a question nothing is given up
    # and the full budget leaves the new memories no room
    plain = plan_recall(notes, asked, "m4", ids, 60, render, count)
    assert plain.dropped == 0 and plain.new is None
    question = plan_recall(notes, asked, "m4", ids, 60, render, count, asking=True)
    # the note holding "q" and the one holding "b" are what the turn asks about (all their
    # items are candidates): kept; the oldest subject is given up for the new memories
    assert question.dropped == 1
    kept = [[i["key"] for i in n["items"]] for n in question.shown]
    assert kept[:2] == [["b", "b2"], ["q"]] and kept[2][0] == "r"
    # giving a note up costs what follows it, the notes kept after it included (5 + 20 + 11
    # tokens): a question may spend QUESTION_DROP_SHARE allowances on it, beside its note's
    costs = {"m1": 5, "m2": 3, "m3": 1, "m4": 1}
    tight = plan_recall(notes, asked, "m4", ids, 60, render, count, asking=True,
                        new_tokens=36 // QUESTION_DROP_SHARE,
                        anchor_cost=costs)
    assert tight.dropped == 0
    roomy = plan_recall(notes, asked, "m4", ids, 60, render, count, asking=True,
                        new_tokens=36 // QUESTION_DROP_SHARE + 1, anchor_cost=costs)
    assert roomy.dropped == 1 and roomy.new["items"][0]["key"] == "r"
    # the note still has its own allowance: giving up the old note did not use it
    assert roomy.new["tokens"] <= 36 // QUESTION_DROP_SHARE + 1


def test_a_question_gives_notes_up_beside_its_notes_allowance():
    def note(anchor, *keys):
        items = [item(key, 8) for key in keys]
        return {"anchor": anchor, "audience": None, "items": items, "text": render(items),
                "tokens": count(render(items))}

    notes = [note("m1", "a", "a2", "a3"), note("m2", "b", "b2")]  # 49 of 50 tokens
    ids = {"m1", "m2", "m3"}
    other = [item("u", 3), item("v", 3)]  # a note of "u" alone: 6 tokens
    costs = {"m1": 28, "m2": 12, "m3": 1}
    # small talk on a new subject: giving up the newest note (cost 12) fits an allowance of
    # 15, the older one (cost 28) does not; what is left of the allowance (3) holds no note
    talk = plan_recall(notes, other, "m3", ids, 50, render, count, new_tokens=15,
                       anchor_cost=costs)
    assert talk.dropped == 1 and talk.new is None
    assert [i["key"] for i in talk.shown[0]["items"]] == ["a", "a2", "a3"]
    # a question about the past gives notes up from its own QUESTION_DROP_SHARE allowances:
    # its note keeps the whole allowance
    question = plan_recall(notes, other, "m3", ids, 50, render, count, new_tokens=15,
                           anchor_cost=costs, asking=True)
    assert question.dropped == (2 if QUESTION_DROP_SHARE * 15 > 28 else 1)
    assert [i["key"] for i in question.new["items"]] == ["u", "v"]


def test_follow_up_questions_on_one_subject_keep_its_notes_and_give_up_older_subjects():
    def note(anchor, *keys):
        items = [item(key, 8) for key in keys]
        return {"anchor": anchor, "audience": None, "items": items, "text": render(items),
                "tokens": count(render(items))}

    # "x" an older subject; "q" the first reply's note (the best candidates), "r", "s" the
    # second's (the next ones): the newest note holds none of the turn's three best
    notes = [note("m1", "x", "x2"), note("m2", "q", "q2"), note("m3", "r", "s")]
    ids = {"m1", "m2", "m3", "m4"}
    asked = [item(key, 8) for key in ("q", "q2", "b", "r", "s", "t")]
    third = plan_recall(notes, asked, "m4", ids, 60, render, count, asking=True)
    kept = [[i["key"] for i in n["items"]] for n in third.shown]
    # the second reply's note is on the subject (all its items are candidates): it stays, and
    # the older subject is given up for the new memories
    assert ["r", "s"] in kept and ["x", "x2"] not in kept and third.dropped == 1
    assert kept[-1][0] == "b"
    # control: on a new subject (none of its best candidates shown, no note mostly among its
    # candidates) the same note is given up
    other = [item(key, 8) for key in ("u", "v", "w", "r", "t")]
    fresh = plan_recall(notes, other, "m4", ids, 60, render, count, asking=True)
    assert ["r", "s"] not in [[i["key"] for i in n["items"]] for n in fresh.shown]
    # a follow-up whose best three moved still goes on while a shown note is mostly among
    # its candidates: that note stays
    moved = [item(key, 8) for key in ("u", "v", "w", "r", "s")]
    going_on = plan_recall(notes, moved, "m4", ids, 60, render, count, asking=True)
    assert ["r", "s"] in [[i["key"] for i in n["items"]] for n in going_on.shown]


def _note(anchor, *keys, audience=None):
    items = [item(key, 8) for key in keys]
    return {"anchor": anchor, "audience": audience, "items": items, "text": render(items),
            "tokens": count(render(items))}


def test_a_question_that_finds_the_budget_full_borrows_the_historys_room():
    # the budget is full and giving up either older note costs more than the allowance
    notes = [_note("m1", "a", "a2", "a3"), _note("m2", "b", "b2")]  # 49 of 50 tokens
    ids = {"m1", "m2", "m3"}
    costs = {"m1": 80, "m2": 40, "m3": 1}
    asked = [item(key, 8) for key in ("u", "v", "w")]  # 9 tokens each, 28 for all three

    def ask(lent, asking=True, allowance=30):
        return plan_recall(notes, asked, "m3", ids, 50, render, count, new_tokens=allowance,
                           anchor_cost=costs, asking=asking, lent_tokens=lent)

    # control: nothing lent, nothing given up, no room for the question's memories
    assert ask(0).new is None and ask(0).dropped == 0
    lent = ask(20)
    assert lent.dropped == 0 and [i["key"] for i in lent.new["items"]] == ["u", "v"]
    assert lent.new["tokens"] <= 20 + 1  # the room left in the budget and the loan
    # the allowance still bounds it: a large loan adds no more than the reply may evaluate
    capped = ask(500, allowance=12)
    assert [i["key"] for i in capped.new["items"]] == ["u"]
    # small talk never borrows (same allowance: only the loan differs)
    assert ask(500, asking=False).new is None
    # a first note is not lent to: it has the whole budget and no more (seven items of 9
    # tokens would fit the loan; five fit the budget)
    first = plan_recall([], [item(k, 8) for k in "abcdefg"], "m3", ids, 50, render, count,
                        asking=True, lent_tokens=500)
    assert first.new["tokens"] <= 50 and first.left_out == 2


def test_a_question_gives_notes_up_after_its_reply_while_the_history_can_lend_them():
    notes = [_note("m1", "a", "a2", "a3"), _note("m2", "b", "b2")]  # 49 of 50 tokens
    ids = {"m1", "m2", "m3"}
    costs = {"m1": 40, "m2": 12, "m3": 1}  # the oldest costs more than the allowance
    asked = [item(key, 3) for key in ("u", "v")]  # a note of both: 10 tokens

    def ask(lent, later=True, state=notes):
        return plan_recall(state, asked, "m3", ids, 50, render, count, new_tokens=30,
                           anchor_cost=costs, asking=True, lent_tokens=lent,
                           give_up_later=later)

    # control: given up before the reply, as without warm-ups
    now = ask(40, later=False)
    assert now.dropped == 1 and now.leaving == 0
    assert [n["anchor"] for n in now.shown] == ["m1", "m3"]
    # kept on loan: the prompt still shows the newest note where the server cached it, word
    # for word, and the question's note is the same as when it was given up first
    later = ask(40)
    assert later.dropped == 0 and later.leaving == 1
    assert [n["text"] for n in later.shown[:2]] == [n["text"] for n in notes]
    assert later.new["text"] == now.new["text"]
    assert [bool(n.get("leaving")) for n in later.notes] == [False, True, False]
    # after the reply the warm-up gives it up: the state is the one giving it up first left
    settled, given_up = give_up_leaving(later.notes)
    assert given_up == 1
    assert [n["anchor"] for n in settled] == [n["anchor"] for n in now.notes]
    assert give_up_leaving(settled) == (settled, 0)
    # not given up since (the shell gives it up once the reply is spoken): the next turn
    # gives it up first, and plans as it would once it was given up, within its allowance
    other = [item(key, 3) for key in ("w", "x", "y")]
    after = [plan_recall(state, other, "m4", ids | {"m4"}, 50, render, count, new_tokens=12,
                         anchor_cost=costs) for state in (later.notes, settled)]
    assert after[0].dropped == after[1].dropped + 1
    assert "m2" not in [n["anchor"] for n in after[0].shown]
    assert after[0].shown == after[1].shown and after[0].notes == after[1].notes
    assert after[0].new == after[1].new and after[0].new["tokens"] <= 12
    # a loan too small to hold it beside the new note: given up before the reply
    tight = ask(5)
    assert tight.dropped == 1 and tight.leaving == 0


def test_a_note_fetched_ahead_is_shown_free_when_the_turn_goes_on_with_its_subject():
    shown = [_note("m1", "a", "b")]  # 20 of 100 tokens
    ids = {"m1", "m2", "m3"}
    asked = [item(key, 8) for key in ("a", "b", "c", "d", "e", "f")]
    ahead = plan_ahead(shown, asked, ids, 100, render, count, listeners=["#1"])
    # what no shown note holds, within half the budget, with no time limit
    assert [i["key"] for i in ahead["items"]] == ["c", "d", "e", "f"]
    assert ahead["tokens"] <= 50 and ahead["anchor"] is None
    # half the budget bounds it: of twice as many candidates, not all fit
    more = plan_ahead(shown, asked + [item(k, 8) for k in "ghij"], ids, 100, render, count)
    assert 4 <= len(more["items"]) < 8 and more["tokens"] <= 50

    def turn(items, listeners=("#1",), note=ahead, allowance=10):
        return plan_recall(shown, items, "m3", ids, 100, render, count, asking=True,
                           listeners=list(listeners), new_tokens=allowance, ahead=note)

    # control: with nothing fetched ahead, 10 tokens of allowance hold no 9-token line's note
    assert turn(asked, note=None).new is None
    on = turn(asked)
    assert on.ahead["anchor"] == "m3" and on.ahead["text"] == ahead["text"]
    assert on.shown[-1] is on.ahead and on.ahead in on.notes  # kept, shown last
    assert on.new is None and on.left_out == 0  # nothing else found room beside it
    # another subject, or other listeners: it is let go
    other = [item(key, 8) for key in ("x", "y", "z")]
    assert turn(other).ahead is None and turn(other).shown == shown
    assert turn(asked, listeners=("#1", "#2")).ahead is None
    # an ahead note whose item staff erased is let go too
    erased = plan_recall(shown, asked, "m3", ids, 100, render, count, asking=True,
                         listeners=["#1"], new_tokens=10, ahead=ahead, withdrawn={"c"})
    assert erased.ahead is None


def test_notes_over_budget_are_counted_per_audience_and_leave_with_their_anchor():
    notes = [_note("m1", "a", "a2", "a3", audience=["#1"]),          # 29 tokens
             _note("m2", "b", "b2", audience=["#1", "#2"]),          # 20
             _note("m3", "c", "c2", "c3", "c4", audience=["#2"])]   # 38
    ids = {"m1", "m2", "m3"}
    # #1 is shown 29 + 20 = 49, #2 20 + 38 = 58: the most one prompt shows counts
    assert notes_over_budget(notes, ids, 50) == 8
    assert notes_over_budget(notes, ids, 60) == 0
    # compaction took m3's line: its note no longer counts
    assert notes_over_budget(notes, {"m1", "m2"}, 40) == 9
    assert notes_over_budget([], ids, 10) == 0


def test_the_history_lends_only_what_keeps_it_under_the_compaction_threshold():
    # budget 1,000 tokens, 600 used, threshold 0.8: it may lose 1,000 - 750 = 250 (less one)
    loan = lendable_tokens(1000, 600, 0.8)
    assert loan == 249 and 600 / (1000 - loan) < 0.8
    assert lendable_tokens(1000, 800, 0.8) == 0 and lendable_tokens(1000, 900, 0.8) == 0


def test_the_first_note_may_fill_the_budget_and_a_note_beside_it_takes_at_most_half():
    items = [item("a", 8), item("b", 8), item("c", 8), item("d", 8)]
    first = plan([], items, "m1", {"m1"}, budget=35)
    # nothing shown yet: a question asked afresh gets all the room there is
    assert [i["key"] for i in first.new["items"]] == ["a", "b", "c"]
    assert first.new["tokens"] == 29 and first.left_out == 1
    small = plan([], [item("a", 8)], "m1", {"m1"}, budget=60)
    second = plan(small.notes, [item("a", 8)] + [item(k, 8) for k in "wxyz"], "m2",
                  {"m1", "m2"}, budget=60)
    # beside a shown note, a new one leaves room for the next subject
    assert second.dropped == 0
    assert [i["key"] for i in second.new["items"]] == ["w", "x", "y"]
    assert second.new["tokens"] <= 30 and second.left_out == 1


def test_after_a_compaction_the_talk_goes_on_under_the_latency_allowance():
    items = [item(k, 8) for k in "abcd"]
    before = plan([], [item("x", 8)], "m1", {"m1"}, budget=60)
    # m1 was compacted away mid-conversation: the next note keeps to the allowance (20 tokens
    # here: two items of 9), not the whole budget
    after = plan_recall(before.notes, items, "m5", {"m5"}, 60, render, count, new_tokens=20)
    assert [i["key"] for i in after.new["items"]] == ["a", "b"]
    assert after.new["tokens"] <= 20
    # the same turn asked afresh (no notes before) still gets the whole budget
    fresh = plan_recall([], items, "m5", {"m5"}, 60, render, count, new_tokens=20)
    assert [i["key"] for i in fresh.new["items"]] == ["a", "b", "c", "d"]
    # and once the compacted note is gone from the state, a later note beside the new one
    # keeps to the allowance as any note beside others does
    later = plan_recall(after.notes, [item("e", 8)], "m6", {"m5", "m6"}, 60, render, count,
                        new_tokens=20)
    assert [n["anchor"] for n in later.shown] == ["m5", "m6"]


def test_a_conversation_that_lost_its_notes_keeps_to_the_allowance_on_every_later_turn():
    items = [item(k, 8) for k in "abcd"]
    before = plan_recall([], [item("x", 8)], "m1", {"m1"}, 60, render, count,
                         listeners=["#1", "#2"])
    # the prompt window moved past m1; the allowance (5 tokens) has no room for an item, so
    # this turn adds no note and the NPC shows none
    lost = plan_recall(before.notes, items, "m5", {"m5"}, 60, render, count,
                       listeners=["#1", "#2"], new_tokens=5)
    assert lost.new is None and lost.shown == []
    # the next turn still goes on under the allowance: it is not a question asked afresh
    # (before, it took the whole budget: four items, ~1,200 tokens on the default install)
    later = plan_recall(lost.notes, items, "m6", {"m5", "m6"}, 60, render, count,
                        listeners=["#2"], new_tokens=20)
    assert [i["key"] for i in later.new["items"]] == ["a", "b"]
    # the same turn with no notes before gets the whole budget, and so does a listener who
    # walks in and was shown none of the lost notes
    fresh = plan_recall([], items, "m6", {"m5", "m6"}, 60, render, count, listeners=["#2"],
                        new_tokens=20)
    assert [i["key"] for i in fresh.new["items"]] == ["a", "b", "c", "d"]
    newcomer = plan_recall(lost.notes, items, "m6", {"m5", "m6"}, 60, render, count,
                           listeners=["#2", "#3"], new_tokens=20)
    assert [i["key"] for i in newcomer.new["items"]] == ["a", "b", "c", "d"]
    # the marks stay few and are never shown
    assert [n["anchor"] for n in later.notes] == [None, "m6"]
    assert visible_notes(later.notes, {"m5", "m6"}, ["#2"]) == [later.new]


def test_a_note_is_shown_only_to_listeners_who_heard_its_reply():
    first = plan([], [item("a")], "m1", {"m1"}, listeners=["#1", "#2"])
    assert visible_notes(first.notes, {"m1"}, ["#1"]) == first.notes
    assert visible_notes(first.notes, {"m1"}, ["#1", "#3"]) == []
    # #3 walked in: "a" is retrieved again for the new audience, in a note of its own
    second = plan(first.notes, [item("a")], "m2", {"m1", "m2"}, listeners=["#1", "#3"])
    assert [n["anchor"] for n in second.shown] == ["m2"]
    assert second.new["audience"] == ["#1", "#3"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=4, unique=True), min_size=1,
                max_size=12),
       st.integers(min_value=6, max_value=40))
def test_notes_stay_within_budget_and_never_change_once_shown(turns, budget):
    notes, ids, texts = [], set(), {}
    for n, keys in enumerate(turns):
        anchor = f"m{n}"
        ids.add(anchor)
        result = plan(notes, [item(k, 1) for k in keys], anchor, ids, budget=budget)
        notes = result.notes
        shown_keys = [i["key"] for note in result.shown for i in note["items"]]
        assert sum(note["tokens"] for note in result.shown) <= budget
        assert len(shown_keys) == len(set(shown_keys))  # nothing shown twice
        anchors = [int(note["anchor"][1:]) for note in result.shown]
        assert anchors == sorted(anchors)
        for note in result.shown:  # a note shown before is shown again word for word
            assert texts.setdefault(note["anchor"], note["text"]) == note["text"]
        if keys and not result.left_out:
            assert set(keys) <= set(shown_keys)


def _history(n):
    return [{"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant", "name": "Bob",
             "content": f"line {i}", "seq": 10 + i} for i in range(n)]


def test_notes_sit_before_their_lines_and_the_prefix_survives_the_next_turn():
    history = _history(4)
    note1 = {"anchor": "m2", "text": "RELATED MEMORIES:\n- one", "tokens": 5, "new": True}
    first, parts = assemble_reply_prompt("P", "Marta", history, [3] * 4, 1000, notes=[note1],
                                         keep_ids=["m2"])
    texts = [m["content"] for m in first]
    assert texts.index(note1["text"]) == texts.index("Bob: line 2") - 1
    history = _history(6)
    note2 = {"anchor": "m4", "text": "RELATED MEMORIES:\n- two", "tokens": 5, "new": True}
    second, parts = assemble_reply_prompt(
        "P", "Marta", history, [3] * 6, 1000, notes=[dict(note1, new=False), note2],
        keep_ids=["m4"])
    # everything the first prompt held up to its last line is the second prompt's prefix
    assert second[: len(first)] == first
    assert [p["part"] for p in parts] == ["system", "history", "memories", "history",
                                          "memories", "turn", "history"]
    memories = [p for p in parts if p["part"] == "memories"]
    assert [p["new"] for p in memories] == [False, True]
    turn = next(p for p in parts if p["part"] == "turn")
    assert (turn["first_seq"], turn["last_seq"], turn["messages"]) == (14, 14, 1)


class RecallNotesOnARealNPC(NPCTestCase):
    """Two replies of a real NPC whose archive holds what the players ask about: the first
    reply's whole prompt is the second's prefix, and each reply leaves a receipt."""

    llm_default = staticmethod(lambda request: reply("Aye, I remember."))

    def setUp(self):
        super().setUp()
        old = [
            self.script.add_message("user", "The silver key lies under the old mill stone.",
                                    name="Bob"),
            self.script.add_message("user", "My sister Wren paints herons by the river.",
                                    name="Bob"),
        ]
        self.fill(6)
        self.script.runtime.evict([m["id"] for m in old], reason="test")
        self.old = old

    def test_the_second_prompt_starts_with_the_first_and_receipts_name_the_memories(self):
        with override_settings(AI_MEMORY_ENABLED=False):  # the archive alone answers
            self.script.receive_speech(self.char1, "Where is the silver key, Marta?")
            wait_for(self.script.run_tick())
            self.script.receive_speech(self.char1, "And what does my sister Wren paint?")
            wait_for(self.script.run_tick())
        first, second = (r["messages"] for r in self.llm.requests[-2:])
        self.assertEqual(second[: len(first)], first)
        texts = [m["content"] for m in second]
        # each memory is shown once, before the first line it was retrieved for (the heron
        # line may come with the key line, its neighbour in the archive)
        for words, line in (("silver key lies", "Where is the silver key, Marta?"),
                            ("paints herons", "And what does my sister Wren paint?")):
            notes = [t for t in texts if words in t]
            self.assertEqual(len(notes), 1, texts)
            self.assertLess(texts.index(notes[0]), texts.index(f"{self.char1.key}: {line}"))

        receipts = self.script.db.reply_receipts
        self.assertEqual(len(receipts), 2)
        last = receipts[-1]
        self.assertEqual(last["seq"], self.script.history[-1]["seq"])
        sources = {(m["source"], m["ref"]) for m in receipts[0]["memories"]}
        self.assertIn(("archive", str(self.old[0]["seq"])), sources)
        self.assertEqual([p["part"] for p in last["parts"]][0], "system")
        # the first reply's note is carried, not new
        self.assertFalse([p for p in last["parts"] if p["part"] == "memories"][0]["new"])
        archived = [r for r in self.script.archive.records(kinds=("receipt",))]
        self.assertEqual([r["reply_seq"] for r in archived], [r["seq"] for r in receipts])
        self.assertEqual(self.script.ndb.recent_prompts[-1]["messages"], second)


class RecallNotesOverBudget(NPCTestCase):
    """
    While the history is over its budget the prompt shows its oldest messages and a tail from a
    kept start; a note anchored between the two cannot be shown, so it must not take the memory
    budget either, or a change of subject gives up the note the prompt does show and the cached
    prefix breaks.
    """

    llm_default = staticmethod(lambda request: reply("Aye."))

    def setUp(self):
        super().setUp()
        subjects = [
            "The silver key lies under the old mill stone by the weir.",
            "The silver key opens the chapel crypt, not the mill.",
            "My sister Wren paints herons by the river every spring.",
            "Wren sells the heron paintings at the harvest fair.",
            "The copper kettle cracked when the smith dropped it.",
            "The smith mends copper kettles for two coins each.",
        ]
        old = [self.script.add_message("user", text, name="Bob") for text in subjects]
        self.fill(2, words=4)
        self.script.runtime.evict([m["id"] for m in old], reason="test")

    def ask(self, text):
        self.script.receive_speech(self.char1, text)
        wait_for(self.script.run_tick())
        return self.llm.requests[-1]["messages"]

    def test_a_note_the_prompt_cannot_show_takes_no_room_from_one_it_shows(self):
        with override_settings(AI_MEMORY_ENABLED=False, AI_MEMORY_RETRIEVAL_TOKEN_BUDGET=130,
                               AI_MEMORY_RETRIEVAL_MIN_RELATIVE_SCORE=0,
                               AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                               AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0,
                               # the over-budget prompt while a compaction is written, below
                               # the cap at which the oldest lines would go to the archive
                               AI_COMPACT_INFLIGHT_CAP=10.0):
            self.script.db.max_context_tokens = 400
            self.fill(8, words=12)  # more than the prompt keeps as its head when over budget
            self.ask("Where is the silver key, Marta?")  # a note within the budget
            # a compaction is being written (nothing is evicted meanwhile) while more is said:
            # the history goes over its budget and the prompt starts later on
            self.script.ndb.compacting = True
            self.fill(16, words=12)
            self.assertGreater(self.script.token_usage(), 1.0)
            first = self.ask("What does my sister Wren paint?")
            second = self.ask("Who cracked the copper kettle?")
        self.assertIsNotNone(self.script.ndb.prompt_start_id)
        texts = [m["content"] for m in second]
        self.assertTrue(any("copper kettle cracked" in t for t in texts), texts)
        self.assertFalse(any("silver key lies" in t for t in texts), texts)
        # the second over-budget prompt extends the first: the heron note stayed
        self.assertEqual(second[: len(first)], first)


class AQuestionAboutThePastGetsTime(NPCTestCase):
    """In a conversation already under way, small talk may evaluate only a few tokens of new
    memories, a question about the past up to ``AI_MEMORY_QUESTION_SECONDS`` of them, and the
    receipt says which it was and what was left out for time (``docs/design.md``, "Recall
    notes")."""

    llm_default = staticmethod(lambda request: reply("Aye."))

    def setUp(self):
        super().setUp()
        old = [self.script.add_message("user", text, name="Bob") for text in (
            "The silver key lies under the old mill stone by the weir.",
            "My sister Wren paints herons by the river every spring.",
            "Wren sells her river paintings at the harvest fair for two coins.",
        )]
        self.fill(4, words=6)
        self.script.runtime.evict([m["id"] for m in old], reason="test")

    def ask(self, text):
        self.script.receive_speech(self.char1, text)
        wait_for(self.script.run_tick())
        return self.script.db.reply_receipts[-1]

    def test_small_talk_keeps_the_fast_path_and_a_memory_question_gets_its_note(self):
        # 100 tokens/s: small talk may evaluate 5 tokens of new memories, a question 200
        with override_settings(AI_MEMORY_ENABLED=False, AI_PROMPT_TOKENS_PER_SECOND=100,
                               AI_MEMORY_NOTE_SECONDS=0.05, AI_MEMORY_QUESTION_SECONDS=2.0,
                               AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                               AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0):
            first = self.ask("Where is the silver key, Marta?")  # the talk's first note
            self.assertTrue([m for m in first["memories"] if "silver key" in m["text"]], first)
            small = self.ask("Nice river out there, how are you keeping?")
            self.assertIsNone(small["recall"]["asks"])
            self.assertEqual(small["recall"]["allowance"], 5)
            # the river lines were candidates and found no room for time
            self.assertTrue(small["recall"]["room_limited"], small["recall"])
            self.assertGreater(small["recall"]["left_out"], 0)
            self.assertEqual(small["recall"]["dropped"], 0)  # nothing given up for room
            self.assertFalse([m for m in small["memories"] if m["new"]], small["memories"])
            asked = self.ask("Do you remember what Wren paints by the river?")
        self.assertEqual(asked["recall"]["asks"], "remember")
        self.assertEqual(asked["recall"]["allowance"], 200)
        new = [m["text"] for m in asked["memories"] if m["new"]]
        self.assertTrue([t for t in new if "paints herons" in t], asked["memories"])
        prompt = "\n".join(m["content"] for m in self.llm.requests[-1]["messages"])
        self.assertIn("paints herons", prompt)
        # the admin's receipt screen says it in words
        self.call_receipt_screen("asks to remember: new memories up to 200 tokens")

    def test_a_follow_up_asks_about_the_subject_in_hand(self):
        with override_settings(AI_MEMORY_ENABLED=False, AI_PROMPT_TOKENS_PER_SECOND=100,
                               AI_MEMORY_NOTE_SECONDS=0.05, AI_MEMORY_QUESTION_SECONDS=2.0,
                               AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                               AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0):
            # control: with no subject in hand, a bare follow-up is small talk
            idle = self.ask("Anything else?")
            self.assertIsNone(idle["recall"]["asks"])
            self.assertEqual(idle["recall"]["allowance"], 5)
            self.assertFalse(idle["recall"]["follows"], idle["recall"])
            asked = self.ask("Do you remember where Wren sells her paintings?")
            self.assertFalse(asked["recall"]["follows"])
            more = self.ask("Anything else?")
        # the follow-up is asked as the question was: a question's allowance, its subject
        self.assertTrue(more["recall"]["follows"], more["recall"])
        self.assertEqual((more["recall"]["asks"], more["recall"]["allowance"]),
                         ("remember", 200))
        shown = [m["text"] for m in more["memories"]]
        self.assertTrue([t for t in shown if "harvest fair" in t], more["memories"])
        self.call_receipt_screen("a follow-up of the subject in hand")

    def test_a_question_borrows_room_when_older_subjects_fill_the_memory_budget(self):
        self.archived("The copper kettle cracked when the smith dropped it.")
        # small talk and questions get the same 50 tokens (0.5 s at 100 tokens/s): only the
        # loan tells them apart; the memory budget holds two notes of a line, a note beside
        # others half of it
        with override_settings(AI_MEMORY_ENABLED=False, AI_PROMPT_TOKENS_PER_SECOND=100,
                               AI_MEMORY_NOTE_SECONDS=0.5, AI_MEMORY_QUESTION_SECONDS=0.5,
                               AI_MEMORY_RETRIEVAL_TOKEN_BUDGET=80,
                               AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                               AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0):
            self.ask("Where is the silver key, Marta?")
            self.ask("Who cracked the copper kettle?")
            self.assertEqual(len(self.script.ndb.recall_notes), 2)
            # both notes are far back now: giving either up costs more than 50 tokens
            self.fill(6, words=12)
            budget = self.script.budget()
            self.assertEqual(self.script.budget_info().lent, 0)
            small = self.ask("Wren and her river paintings, lovely weather for it.")
            self.assertIsNone(small["recall"]["asks"])
            self.assertFalse([m for m in small["memories"] if m["new"]], small["memories"])
            asked = self.ask("Do you remember what Wren paints by the river?")
            # the history lent the room, and its budget is that much smaller
            info = self.script.budget_info()
            self.assertGreater(info.lent, 0)
            self.assertLessEqual(info.lent, 50)
            self.assertEqual(self.script.budget(), budget - info.lent)
            self.assertIn("lent to recall notes", info.source)
            # compaction takes the key's line out of the context: the loan is paid back
            self.script.runtime.evict([self.script.ndb.recall_notes[0]["anchor"]],
                                      reason="test")
            self.assertEqual(self.script.budget_info().lent, 0)
            self.assertEqual(self.script.budget(), budget)
        self.assertEqual(asked["recall"]["asks"], "remember")
        new = [m["text"] for m in asked["memories"] if m["new"]]
        self.assertTrue([t for t in new if "paints herons" in t], asked["memories"])
        prompt = "\n".join(m["content"] for m in self.llm.requests[-1]["messages"])
        # the older notes stayed (the cached prefix holds them) beside the new one
        for words in ("paints herons", "silver key lies", "copper kettle cracked"):
            self.assertIn(words, prompt)

    def test_a_question_gives_an_older_subject_up_after_its_reply_with_the_warm_up(self):
        self.archived("The copper kettle cracked when the smith dropped it.")

        def talk(warm):
            with override_settings(AI_MEMORY_ENABLED=False, AI_PROMPT_TOKENS_PER_SECOND=100,
                                   AI_MEMORY_NOTE_SECONDS=0.5, AI_MEMORY_QUESTION_SECONDS=0.5,
                                   AI_MEMORY_RETRIEVAL_TOKEN_BUDGET=80,
                                   AI_PROMPT_CACHE_WARMUP=warm,
                                   AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                                   AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0):
                self.ask("Where is the silver key, Marta?")
                self.ask("Who cracked the copper kettle?")
                if self.script.ndb.warming is not None:
                    wait_for(self.script.ndb.warming)
                def kettle():
                    return [n for n in self.script.ndb.recall_notes or ()
                            if "copper kettle cracked" in n["text"]]

                self.assertTrue(kettle())
                sent = len(self.llm.requests)
                asked = self.ask("Do you remember what Wren paints by the river?")
                # given up as the reply was spoken, before any warm-up: the loan is back
                self.assertEqual(kettle(), [])
                self.assertEqual(self.script.budget_info().lent, 0)
                prompt = "\n".join(m["content"] for m in self.llm.requests[sent]["messages"])
                warm = None
                if self.script.ndb.warming is not None:
                    wait_for(self.script.ndb.warming)
                    warm = self.llm.requests[-1]["messages"]
                follow = self.ask("Anything else?")
            self.script.ndb.recall_notes = self.script.ndb.recall_subjects = None
            self.fill(2, words=6)
            return asked, prompt, warm, follow

        # control: no warm-ups (a hosted API): the kettle's note is given up before the reply
        asked, prompt, warm, _ = talk(False)
        self.assertEqual((asked["recall"]["dropped"], asked["recall"]["leaving"]), (1, 0))
        self.assertIn("paints herons", prompt)
        self.assertNotIn("copper kettle cracked", prompt)
        self.assertIsNone(warm)
        # with warm-ups the reply keeps it where the server cached it, on loan, and its own
        # note is the same
        asked, prompt, warm, follow = talk(True)
        self.assertEqual((asked["recall"]["dropped"], asked["recall"]["leaving"]), (0, 1))
        for words in ("paints herons", "copper kettle cracked", "silver key lies"):
            self.assertIn(words, prompt)
        self.assertIn("1 earlier note(s) given up after the reply",
                      describe_recall(asked["recall"]))
        # once the reply is spoken, the warm-up sends the prompt without it, and the follow-up
        # starts where the warm-up left the server's cache
        text = "\n".join(m["content"] for m in warm)
        self.assertIn("paints herons", text)
        self.assertNotIn("copper kettle cracked", text)
        self.assertEqual(self.llm.requests[-1]["messages"][:len(warm)], warm)
        self.assertEqual(follow["recall"]["leaving"], 0)

    def test_a_question_with_lines_said_since_its_turn_began_gives_notes_up_first(self):
        from ai_contrib.npc.replies import recall_for_turn

        self.archived("The copper kettle cracked when the smith dropped it.")
        with override_settings(AI_MEMORY_ENABLED=False, AI_PROMPT_TOKENS_PER_SECOND=100,
                               AI_MEMORY_NOTE_SECONDS=0.5, AI_MEMORY_QUESTION_SECONDS=0.5,
                               AI_MEMORY_RETRIEVAL_TOKEN_BUDGET=80, AI_PROMPT_CACHE_WARMUP=True,
                               AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                               AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0):
            self.ask("Where is the silver key, Marta?")
            self.ask("Who cracked the copper kettle?")
            if self.script.ndb.warming is not None:
                wait_for(self.script.ndb.warming)
            notes = list(self.script.ndb.recall_notes)
            line = self.script.add_message(
                "user", "Do you remember what Wren paints by the river?", name="Bob")

            def plan():
                self.script.ndb.recall_notes = list(notes)
                return wait_for(recall_for_turn(
                    self.script, self.npc, line["content"], None, line["id"])).recall

            # control: nobody else spoke, so the kettle's note stays for the reply, on loan
            self.script.ndb.pending = []
            alone = plan()
            # a line said since the turn began: the next turn comes at once, before any
            # warm-up, so the note is given up before this reply
            self.script.ndb.pending = ["#later"]
            busy = plan()
        self.assertEqual((alone["dropped"], alone["leaving"]), (0, 1))
        self.assertEqual((busy["dropped"], busy["leaving"]), (1, 0))

    def test_what_a_question_left_out_for_time_is_fetched_ahead_for_its_follow_up(self):
        def warmups():
            return [r["messages"] for r in self.llm.requests if r.get("max_tokens") == 1]

        def talk(warm, ahead=True):
            with self.herons(AI_PROMPT_CACHE_WARMUP=warm, AI_MEMORY_FETCH_AHEAD=ahead):
                self.ask("Where is the silver key, Marta?")  # the talk's first note
                asked = self.ask("Do you remember what Wren does with herons?")
                if self.script.ndb.warming is not None:
                    wait_for(self.script.ndb.warming)
                follow = self.ask("Anything else?")
            self.script.ndb.recall_notes = self.script.ndb.recall_subjects = None
            self.fill(2, words=6)
            return asked, follow

        # controls: no warm-ups (a hosted API), or fetching ahead turned off: the follow-up
        # keeps to its own allowance
        asked, follow = talk(False)
        self.assertTrue(asked["recall"]["room_limited"], asked["recall"])
        self.assertEqual(warmups(), [])
        cold = [m for m in follow["memories"] if m["new"]]
        asked, follow = talk(True, ahead=False)
        self.assertTrue(asked["recall"]["room_limited"], asked["recall"])
        self.assertEqual(warmups(), [])  # nothing changed at the front: nothing to warm
        self.assertEqual(len([m for m in follow["memories"] if m["new"]]), len(cold))
        asked, follow = talk(True)
        self.assertTrue(asked["recall"]["room_limited"], asked["recall"])
        # once the reply was spoken, the candidates left out were sent after the opening
        (warm,) = warmups()
        note = warm[-1]["content"]
        self.assertEqual(warm[-1]["role"], "system")
        self.assertIn("RELATED MEMORIES", note)
        # the follow-up shows that note right before its line, new, beyond its own allowance
        self.assertTrue(follow["recall"]["follows"], follow["recall"])
        prompt = self.llm.requests[-1]["messages"]
        self.assertEqual(prompt[:len(warm)], warm)
        self.assertIn("Anything else?", prompt[-1]["content"])
        new = [m for m in follow["memories"] if m["new"]]
        self.assertGreater(len(new), max(1, len(cold)), (new, cold))
        for memory in new:  # each in the note fetched ahead
            self.assertIn(memory["text"].split("] ", 1)[1], note)

    def archived(self, text):
        """A line of Bob's, moved out of the context into the archive (a retrieval candidate)."""
        msg = self.script.add_message("user", text, name="Bob")
        self.script.runtime.evict([msg["id"]], reason="test")

    def herons(self, **more):
        """Settings where a question may evaluate 25 tokens of new memories (0.25 s at 100
        tokens/s): one line; a third line about Wren and her herons is archived (once)."""
        if not self.script.ndb.carves_archived:
            self.archived("Wren also carves wooden herons for the children of the mill.")
            self.script.ndb.carves_archived = True
        return override_settings(AI_MEMORY_ENABLED=False, AI_PROMPT_TOKENS_PER_SECOND=100,
                                 AI_MEMORY_NOTE_SECONDS=0.05, AI_MEMORY_QUESTION_SECONDS=0.25,
                                 AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                                 AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0, **more)

    def test_a_note_fetched_ahead_serves_only_the_line_right_after_it_on_the_same_start(self):
        from ai_contrib.core.prompts import prompt_head
        from ai_contrib.npc.fetch_ahead import ahead_for_turn

        with self.herons(AI_PROMPT_CACHE_WARMUP=True):
            self.ask("Where is the silver key, Marta?")
            self.ask("Do you remember what Wren does with herons?")
            wait_for(self.script.ndb.warming)
        note = dict(self.script.ndb.ahead_note)
        self.assertEqual(note["after"], self.script.history[-1]["id"])  # the reply
        first = self.script.add_message("user", "Anything else?", name="Bob")
        self.assertEqual(ahead_for_turn(self.script, first["id"]), note)
        self.assertIsNone(ahead_for_turn(self.script, first["id"]))  # used once
        # a line came between: the note was warmed after the reply, not after that line
        self.script.ndb.ahead_note = note
        second = self.script.add_message("user", "And the herons?", name="Bob")
        self.assertIsNone(ahead_for_turn(self.script, second["id"]))
        # the prompt's start moved (a compaction, an eviction): the cache holds it elsewhere
        self.script.ndb.ahead_note = dict(note, after=second["id"],
                                          head=prompt_head(self.script.history))
        third = self.script.add_message("user", "Go on.", name="Bob")
        self.script.runtime.evict([self.script.history[0]["id"]], reason="test")
        self.assertIsNone(ahead_for_turn(self.script, third["id"]))

    def test_a_line_said_while_the_note_is_fetched_waits_for_it_and_another_subject_drops_it(
            self):
        events, gate = [], threading.Event()
        self.addCleanup(gate.set)

        def held_warm_up(request):
            events.append(request["messages"][-1]["content"])
            gate.wait(HANG_GUARD)
            events.append("warm-up ends")
            return "A"

        with self.herons(AI_PROMPT_CACHE_WARMUP=True):
            self.ask("Where is the silver key, Marta?")
            self.llm.enqueue(reply("Aye."), respond(held_warm_up))
            self.ask("Do you remember what Wren does with herons?")
            warming = self.script.ndb.warming
            wait_until(lambda: events)
            self.assertIn("carves wooden herons", events[0])  # the note is being fetched
            self.script.receive_speech(self.char1, "Lovely weather tonight, is the stew on?")
            turn = self.script.run_tick()
            # the reply waits for the warm-up rather than have the server evaluate its prompt
            # beside it, though it will not show the note
            wait_until(lambda: warming.callbacks)
            self.assertFalse(turn.called)
            gate.set()
            wait_for(turn)
        self.assertEqual(events[1], "warm-up ends")
        self.assertGreater(self.script.ndb.last_reply["waited"], 0)
        # small talk does not go on with the subject: the note was let go
        prompt = "\n".join(m["content"] for m in self.llm.requests[-1]["messages"])
        self.assertIn("Lovely weather tonight", prompt)
        self.assertNotIn("carves wooden herons", prompt)

    def test_a_follow_up_said_while_its_note_is_fetched_counts_the_wait_in_its_allowance(self):
        events, gate = [], threading.Event()
        self.addCleanup(gate.set)

        def held_warm_up(request):
            events.append(request["messages"][-1]["content"])
            gate.wait(HANG_GUARD)
            return "A"

        with self.herons(AI_PROMPT_CACHE_WARMUP=True):
            self.ask("Where is the silver key, Marta?")
            self.llm.enqueue(reply("Aye."), respond(held_warm_up))
            asked = self.ask("Do you remember what Wren does with herons?")
            warming = self.script.ndb.warming
            wait_until(lambda: events)
            self.script.receive_speech(self.char1, "Anything else?")
            # the follow-up comes as the fetch starts: none of the note is evaluated yet
            # (the clock stands still at the warm-up's start)
            with mock.patch.object(deadline, "_monotonic",
                                   lambda: self.script.ndb.warming_since):
                turn = self.script.run_tick()
                wait_until(lambda: warming.callbacks)  # it waits for the note
            gate.set()
            wait_for(turn)
        follow = self.script.db.reply_receipts[-1]
        # the question had its 25 tokens; the follow-up waited for the note's 60-odd, more
        # than its own allowance, so it adds no note of its own beside the one fetched ahead
        self.assertEqual(asked["recall"]["allowance"], 25)
        self.assertEqual(follow["recall"]["allowance"], 0)
        prompt = "\n".join(m["content"] for m in self.llm.requests[-1]["messages"])
        self.assertIn("carves wooden herons", prompt)
        self.assertIn(events[0], [m["content"] for m in self.llm.requests[-1]["messages"]])

    def call_receipt_screen(self, expected):
        from ai_contrib.admin.history_command import CmdAIHistory

        self.char1.permissions.add("Developer")
        shown = self.call(CmdAIHistory(), "Marta/prompt", caller=self.char1)
        self.assertIn(expected, " ".join(shown.split()))  # EvTable wraps long lines


class AnsweredQuestionsAreNoMemories(NPCTestCase):
    """A player's question that the NPC answered from its memories holds only the words of its
    subject: once archived, later retrieval leaves it out, while a statement of the same words
    and the fact itself stay candidates (``docs/design.md``, "Recall notes")."""

    llm_default = staticmethod(lambda request: reply("Aye, under the mill stone."))

    def setUp(self):
        super().setUp()
        fact = self.script.add_message(
            "user", "The silver key lies under the old mill stone by the weir.", name="Bob")
        self.fill(4, words=6)
        self.script.runtime.evict([fact["id"]], reason="test")

    def ask(self, text):
        self.script.receive_speech(self.char1, text)
        wait_for(self.script.run_tick())
        return self.script.db.reply_receipts[-1]

    def test_a_question_answered_from_memory_is_not_recalled_but_a_statement_is(self):
        with override_settings(AI_MEMORY_ENABLED=False, AI_MEMORY_RETRIEVAL_MIN_RELATIVE_SCORE=0,
                               AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                               AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0):
            first = self.ask("Do you remember where the silver key lies?")
            self.assertEqual(first["recall"]["asks"], "remember")
            question = next(m for m in reversed(self.script.history)
                            if m["role"] == "user" and "silver key lies?" in m["content"])
            self.assertEqual(list(self.script.db.answered_questions), [question["id"]])
            # a statement with the subject's words is no question: not marked
            statement = self.script.add_message(
                "user", "I saw the silver key by the mill stone at the weir.",
                name=self.char1.key)
            self.script.runtime.evict(
                [m["id"] for m in self.script.history
                 if m["id"] in (question["id"], statement["id"])], reason="test")
            self.assertNotIn(statement["id"], self.script.db.answered_questions)
            later = self.ask("Where does the silver key lie by the weir?")
        recalled = " | ".join(m["text"] for m in later["memories"])
        self.assertIn("old mill stone by the weir", recalled)  # the fact
        self.assertIn("I saw the silver key", recalled)  # positive control: a statement
        self.assertNotIn("Do you remember where the silver key lies?", recalled)
        # the question is still in the archive, read by staff, only recall leaves it out
        archived = [m["content"] for m in self.script.archive.messages()]
        self.assertIn(question["content"], archived)

