"""Safe cut points, the preserve window and compaction plans (docs/design.md, "Preserve window
and cuts")."""

import pytest

from ai_contrib.core.cuts import (
    eviction_ids,
    hold_cut,
    is_safe_cut,
    plan_compaction,
    preserve_start,
    safe_cut,
)


def user(text="hi", i=None):
    return {"id": i or f"u-{text}", "role": "user", "content": text, "name": "Mara"}


def npc(text="hello"):
    return {"id": f"a-{text}", "role": "assistant", "content": text}


def call(*ids):
    calls = [
        {"id": c, "type": "function", "function": {"name": "look", "arguments": "{}"}} for c in ids
    ]
    return {"id": "call-" + "-".join(ids), "role": "assistant", "content": "", "tool_calls": calls}


def result(call_id):
    return {"id": f"res-{call_id}", "role": "tool", "content": "a forge", "tool_call_id": call_id}


def marker():
    return {
        "id": "mk",
        "role": "system",
        "content": "[CONTEXT SUMMARY]\nold notes",
        "metadata": {"type": "compaction"},
    }


def safe_positions(history):
    return [i for i in range(len(history) + 1) if is_safe_cut(history, i)]


def test_tool_call_and_results_stay_together():
    history = [user("a"), call("x", "y"), result("x"), result("y"), user("b"), npc()]
    assert safe_positions(history) == [0, 1, 4, 5, 6]
    assert safe_cut(history, 3) == 1
    assert safe_cut(history, 4) == 4


def test_messages_between_a_call_and_its_result_go_with_them():
    history = [call("x"), user("meanwhile"), result("x"), user("b")]
    assert safe_positions(history) == [0, 3, 4]


def test_kept_part_never_starts_with_an_orphan_tool_result():
    history = [user("a"), result("ghost"), user("b")]
    assert safe_positions(history) == [0, 2, 3]


def test_call_still_waiting_for_results_is_not_cut_off():
    waiting = [user("a"), call("x", "y"), result("x")]
    assert safe_positions(waiting) == [0, 1]
    assert safe_cut(waiting, 3) == 1
    assert safe_positions([user("a"), call("x")]) == [0, 1]


def test_abandoned_call_blocks_nothing():
    # A call that never got a result but was followed by more talk must not stop compaction.
    history = [user("a"), call("x"), user("b"), npc()]
    assert safe_positions(history) == [0, 1, 2, 3, 4]


def test_cut_bounds():
    history = [user("a"), npc()]
    assert not is_safe_cut(history, -1) and not is_safe_cut(history, 3)
    assert safe_cut(history, 99) == 2
    assert is_safe_cut([result("x")], 0)  # cutting nothing separates nothing
    with pytest.raises(ValueError):
        safe_cut(history, -1)


def test_preserve_start_window_or_tokens_whichever_keeps_more():
    history = [user(str(i)) for i in range(10)]
    counts = [10] * 10
    assert preserve_start(history, counts, 3, 0) == 7  # window wins
    assert preserve_start(history, counts, 3, 45) == 5  # 45 tokens need 5 messages
    assert preserve_start(history, counts, 0, 1000) == 0  # everything kept
    assert preserve_start(history, counts, 0, 0) == 10


def journaled(call_id):
    """Fact extraction's tool call and its result, as the loop writes them."""
    meta = {"metadata": {"type": "pre_compaction"}}
    return [dict(call(call_id), **meta), dict(result(call_id), **meta)]


def test_extraction_traffic_never_takes_the_place_of_conversation():
    talk = [user(str(i)) for i in range(10)]
    chatter = journaled("j1") + journaled("j2") + journaled("j3")
    history = talk + chatter
    counts = [10] * len(history)
    # the window of 4 holds 4 lines people said, the chatter after them besides
    start = preserve_start(history, counts, 4, 0)
    assert history[start:] == talk[-4:] + chatter
    # control: the same six messages as conversation fill the window themselves
    plain = talk + [dict(m, metadata={}) for m in chatter]
    assert preserve_start(plain, counts, 4, 0) == len(plain) - 4
    # tokens too: 40 tokens of conversation, whatever the chatter weighs
    assert history[preserve_start(history, counts, 0, 40):] == talk[-4:] + chatter
    # and the cap on what the count keeps weighs the conversation only
    assert preserve_start(history, counts, 8, 0, max_preserve_tokens=40) == start
    # with fewer lines than the window, nothing is compacted to make room for the chatter
    plan = plan_compaction(talk[:3] + chatter, [10] * 9, 1000, 4, 0.0)
    assert plan.skipped and plan.reason == "history within preserve window"
    assert not plan_compaction(talk[:5] + chatter, [10] * 11, 1000, 4, 0.0).skipped


def test_preserve_start_moves_earlier_to_a_safe_cut():
    history = [user("a"), user("b"), call("x"), result("x"), user("c")]
    assert preserve_start(history, [5] * 5, 2, 0) == 2  # 3 would split the call from its result


def test_preserve_start_validates_arguments():
    with pytest.raises(ValueError):
        preserve_start([user()], [1, 2], 1, 0)
    with pytest.raises(ValueError):
        preserve_start([user()], [1], -1, 0)


def test_plan_skips_history_within_the_window():
    history = [user(str(i)) for i in range(5)]
    plan = plan_compaction(history, [10] * 5, 1000, 5, 0.0)
    assert plan.skipped and plan.reason == "history within preserve window"
    assert plan.to_compact == [] and plan.to_preserve == history and plan.cut == 0


def test_plan_skips_when_only_an_old_marker_would_be_compacted():
    history = [marker(), user("a"), user("b"), user("c")]
    plan = plan_compaction(history, [50, 10, 10, 10], 1000, 3, 0.0)
    assert plan.skipped and plan.reason == "nothing to compact"


def test_a_summary_over_half_the_budget_is_folded_alone_whatever_the_window():
    # an admin lowered the budget under a summary: nothing but the summary precedes the window
    history = [marker(), user("a"), npc("b")]
    plan = plan_compaction(history, [300, 10, 10], 300, 4, 0.0)
    assert not plan.skipped
    assert plan.to_compact == history[:1] and plan.to_preserve == history[1:]
    assert (plan.compact_tokens, plan.preserve_tokens) == (300, 20)
    # the control: the same summary within half the budget is left alone
    plan = plan_compaction(history, [150, 10, 10], 300, 4, 0.0)
    assert plan.skipped and plan.reason == "history within preserve window"
    # and with lines before the window, it is folded with them as before
    history = [marker(), user("a"), npc("b"), user("c"), npc("d")]
    plan = plan_compaction(history, [300, 10, 10, 10, 10], 300, 2, 0.0)
    assert plan.to_compact == history[:3]


def test_plan_splits_with_marker_folded_in_and_token_sums():
    history = [marker(), user("a"), npc("b"), user("c"), npc("d"), user("e")]
    counts = [40, 10, 20, 30, 40, 50]
    plan = plan_compaction(history, counts, 1000, 2, 0.0)
    assert not plan.skipped and plan.reason is None
    assert plan.cut == 4
    assert plan.to_compact == history[:4] and plan.to_preserve == history[4:]
    assert (plan.compact_tokens, plan.preserve_tokens) == (100, 90)


def test_plan_preserve_fraction_of_the_budget():
    history = [user(str(i)) for i in range(10)]
    # 20 % of 250 tokens = 50 tokens = 5 messages of 10, more than the window of 2
    plan = plan_compaction(history, [10] * 10, 250, 2, 0.2)
    assert plan.cut == 5 and len(plan.to_preserve) == 5


def test_plan_validates_arguments():
    with pytest.raises(ValueError):
        plan_compaction([user()], [], 100, 1)
    with pytest.raises(ValueError):
        plan_compaction([user()], [1], 100, 1, 1.5)


def test_a_line_awaiting_an_answer_is_never_compacted_nor_anything_after_it():
    history = [user("a"), npc("b"), user("c"), user("d"), npc("e"), user("f")]
    # with a window of 1 the plan would cut at 5; "c" still awaits its answer
    plan = plan_compaction(history, [10] * 6, 1000, 1, 0.0, keep_ids=["u-c", "u-f"])
    assert plan.cut == 2 and plan.to_preserve == history[2:]
    assert plan_compaction(history, [10] * 6, 1000, 1, 0.0, keep_ids=["u-a"]).reason \
        == "nothing to compact"
    # ids no longer in the history (answered and compacted earlier) hold nothing back
    assert plan_compaction(history, [10] * 6, 1000, 1, 0.0, keep_ids=["gone"]).cut == 5


def test_hold_cut_moves_to_a_safe_cut_before_the_kept_line():
    history = [user("a"), call("c1"), result("c1"), user("q"), npc("b")]
    assert hold_cut(history, 5, ["u-q"]) == 3
    # inside a tool group the cut moves before the call
    assert hold_cut(history, 5, [result("c1")["id"]]) == 1
    assert hold_cut(history, 2, ["u-q"]) == 1
    assert hold_cut(history, 4, ()) == 4


def test_the_preserve_window_yields_to_its_share_of_the_budget():
    from ai_contrib.core.cuts import plan_compaction
    from ai_contrib.core.messages import make_message

    history = [make_message("user" if i % 2 == 0 else "assistant", f"line {i}") for i in range(30)]
    counts = [70] * 30  # long lines: 20 messages are 1,400 tokens
    kept_all = plan_compaction(history, counts, 2000, preserve_window=20, preserve_fraction=0.2)
    assert len(kept_all.to_preserve) >= 20  # the message count alone keeps 70 % of the budget
    capped = plan_compaction(history, counts, 2000, preserve_window=20, preserve_fraction=0.2,
                             max_preserve_fraction=0.4)
    assert sum(counts[capped.cut:]) <= 800 + 70  # at most 40 % of the budget (one safe-cut step)
    assert sum(counts[capped.cut:]) >= 400  # never below the 20 % floor
    assert capped.cut > kept_all.cut


# -- eviction while a compaction is written (docs/design.md, "Bounded while a compaction is
# written") ------------------------------------------------------------------------------------


def test_eviction_spares_the_range_being_summarised_and_takes_the_oldest_after_it():
    history = [marker()] + [user(f"s{i}") for i in range(3)] + [user(f"n{i}") for i in range(5)]
    counts = [1] + [10] * 8
    span = {f"u-s{i}" for i in range(3)}
    # positive control: without the range kept, the oldest lines (the range's) go first
    assert eviction_ids(history, counts, 51) == ["u-s0", "u-s1", "u-s2"]
    assert eviction_ids(history, counts, 51, keep_ids=span) == ["u-n0", "u-n1", "u-n2"]


def test_eviction_stops_before_the_first_line_awaiting_an_answer():
    history = [user(f"n{i}") for i in range(6)]
    counts = [10] * 6
    assert eviction_ids(history, counts, 10) == [f"u-n{i}" for i in range(5)]  # control
    assert eviction_ids(history, counts, 10, stop_ids={"u-n2", "u-n4"}) == ["u-n0", "u-n1"]


def test_eviction_keeps_a_tool_call_with_its_results_before_a_stop():
    history = [user("a"), call("c1"), result("c1"), user("b")]
    counts = [10, 10, 10, 10]
    # the cut after the call would orphan its result, and the result's stop forbids the one
    # after it: the nearest safe cut before is taken
    assert eviction_ids(history, counts, 20, stop_ids={"res-c1"}) == ["u-a"]
