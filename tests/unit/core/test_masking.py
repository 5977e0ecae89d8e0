"""Observation masking (core/masking.py) and its replay (core/replay.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.core.masking import (
    MASK_PREFIX,
    apply_masks,
    archive_ref,
    call_trail_intact,
    is_masked,
    make_masked,
    masked_count,
    parse_archive_ref,
    plan_masks,
    protected_start,
    status_line,
)
from ai_contrib.core.messages import make_message
from ai_contrib.core.replay import apply_record
from ai_contrib.core.tokens import count_message_tokens

BIG = "The ledger lists: " + ", ".join(f"item {i} costs {i * 3} silver" for i in range(40))


class Seq:
    def __init__(self):
        self.n = 0

    def __call__(self, msg):
        msg["seq"] = self.n
        self.n += 1
        return msg


def tool_turn(seq, name, output, call_id):
    call = {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": '{"q": "x"}'}}
    return [
        seq(make_message("assistant", "", name="Marta", tool_calls=[call])),
        seq(make_message("tool", output, tool_call_id=call_id)),
    ]


def conversation(turns_after=3, output=BIG):
    seq = Seq()
    history = [seq(make_message("user", "What is in the ledger?", name="Bob"))]
    history += tool_turn(seq, "read_ledger", output, "c1")
    history.append(seq(make_message("assistant", "Forty items, love.", name="Marta")))
    for i in range(turns_after):
        history.append(seq(make_message("user", f"And then {i}?", name="Bob")))
        history.append(seq(make_message("assistant", f"Then {i}.", name="Marta")))
    return history


def counts(history):
    return [count_message_tokens(m) for m in history]


def test_placeholder_keeps_trail_tool_name_status_and_archive_ref():
    history = conversation(turns_after=10)
    (masked,) = plan_masks(history, counts(history), window=10)
    original = history[2]
    assert masked["id"] == original["id"] and masked["seq"] == original["seq"] == 2
    assert masked["tool_call_id"] == "c1" and masked["role"] == "tool"
    assert masked["timestamp"] == original["timestamp"]
    assert masked["content"].startswith(f"{MASK_PREFIX}seq 2] read_ledger: The ledger lists:")
    assert masked["content"].endswith("...")
    assert parse_archive_ref(masked["content"]) == 2
    meta = masked["metadata"]
    assert meta["masked"] is True and meta["original_tool"] == "read_ledger"
    assert meta["archive_ref"] == archive_ref(2) == "seq 2"
    assert meta["original_tokens"] == count_message_tokens(original)
    assert meta["archived_at"].endswith("+00:00")
    assert original["content"] == BIG  # the input is not modified
    assert count_message_tokens(masked) < count_message_tokens(original)


def test_last_window_turns_are_never_masked():
    history = conversation(turns_after=8)  # the tool turn is 10th and 11th assistant from the end
    assert plan_masks(history, counts(history), window=10) == []
    assert len(plan_masks(history, counts(history), window=9)) == 1
    assert plan_masks(history, counts(history), window=100) == []


def test_window_counts_assistant_messages():
    history = conversation(turns_after=2)
    assistants = [i for i, m in enumerate(history) if m["role"] == "assistant"]
    assert protected_start(history, 1) == assistants[-1]
    assert protected_start(history, len(assistants)) == assistants[0]
    assert protected_start(history, len(assistants) + 1) == 0
    assert protected_start(history, 0) == len(history)


def test_small_outputs_unarchived_and_already_masked_are_left_alone():
    small = conversation(turns_after=10, output="ok")
    assert plan_masks(small, counts(small), window=10) == []  # the placeholder would be longer
    history = conversation(turns_after=10)
    assert plan_masks(history, counts(history), window=10, min_tokens=10_000) == []
    unarchived = [dict(m, seq=None) for m in history]
    assert plan_masks(unarchived, counts(unarchived), window=10) == []
    masked = apply_masks(history, plan_masks(history, counts(history), window=10))
    assert masked_count(masked) == 1
    assert plan_masks(masked, counts(masked), window=10) == []


def test_tool_name_falls_back_to_metadata_then_call():
    history = conversation(turns_after=10)
    history[2] = dict(history[2], metadata={"tool": "add_journal_entry"})
    (masked,) = plan_masks(history, counts(history), window=10)
    assert masked["metadata"]["original_tool"] == "add_journal_entry"
    assert masked["metadata"]["tool"] == "add_journal_entry"  # existing metadata kept


def test_apply_masks_is_pure_and_keeps_order():
    history = conversation(turns_after=10)
    plan = plan_masks(history, counts(history), window=10)
    out = apply_masks(history, plan + [dict(plan[0], id="not-there")])
    assert [m["id"] for m in out] == [m["id"] for m in history]
    assert is_masked(out[2]) and not is_masked(history[2])
    assert call_trail_intact(out)


def test_make_masked_refuses_non_tool_and_unarchived():
    with pytest.raises(ValueError):
        make_masked(make_message("user", "x", seq=1), "t")
    with pytest.raises(ValueError):
        make_masked(make_message("tool", "x", tool_call_id="c"), "t")


@pytest.mark.parametrize(
    "content, expected",
    [
        ("", "(empty)"),
        ("\n\n  ok:   done \nmore", "ok: done"),
        ("x" * 100, "x" * 77 + "..."),
    ],
)
def test_status_line(content, expected):
    assert status_line(content) == expected


def test_mismatched_counts_raise():
    with pytest.raises(ValueError):
        plan_masks(conversation(), [1], window=1)


def test_mask_record_replays_once():
    history = conversation(turns_after=10)
    plan = plan_masks(history, counts(history), window=10)
    record = {"seq": 99, "kind": "mask", "ids": [m["id"] for m in plan], "replacements": plan}
    replayed, changed = apply_record(history, record)
    assert changed and is_masked(replayed[2])
    again, changed = apply_record(replayed, record)
    assert not changed and again is replayed
    gone = [m for m in history if m["id"] != history[2]["id"]]
    assert apply_record(gone, record) == (gone, False)  # compacted away since: nothing to do


@st.composite
def histories(draw):
    seq = Seq()
    history = []
    for index in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["user", "reply", "tools"]))
        if kind == "user":
            history.append(seq(make_message("user", "hi " * draw(st.integers(1, 30)), name="Bob")))
        elif kind == "reply":
            history.append(seq(make_message("assistant", "yes " * draw(st.integers(1, 30)))))
        else:
            calls = [{"id": f"c{index}_{k}", "type": "function",
                      "function": {"name": f"tool{k}", "arguments": "{}"}}
                     for k in range(draw(st.integers(1, 3)))]
            history.append(seq(make_message("assistant", "", tool_calls=calls)))
            for call in calls:
                size = draw(st.integers(0, 300))
                history.append(seq(make_message("tool", "data " * size, tool_call_id=call["id"])))
    return history


@settings(max_examples=150, deadline=None)
@given(histories(), st.integers(0, 12), st.integers(0, 80))
def test_masking_properties(history, window, min_tokens):
    before = counts(history)
    plan = plan_masks(history, before, window=window, min_tokens=min_tokens)
    out = apply_masks(history, plan)
    after = counts(out)
    # same messages, same order, same call trail; only tool outputs change
    assert [m["id"] for m in out] == [m["id"] for m in history]
    assert call_trail_intact(out)
    for old, new in zip(history, out):
        assert (old["role"], old.get("tool_call_id"), old.get("tool_calls")) == (
            new["role"], new.get("tool_call_id"), new.get("tool_calls"))
        if new is not old:
            assert old["role"] == "tool" and is_masked(new)
            assert parse_archive_ref(new["content"]) == old["seq"]  # resolvable to the original
    # every masked message costs strictly less; nothing else changes cost
    assert all(a <= b for a, b in zip(after, before))
    assert sum(after) <= sum(before)
    # the protected tail is untouched
    stop = protected_start(history, window)
    assert out[stop:] == history[stop:]
