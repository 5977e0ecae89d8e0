"""Splicing a summary marker over an id range of a live history."""

import copy

import pytest

from ai_contrib.core.splice import SpliceError, splice


def msgs(*ids):
    return [{"id": i, "role": "user", "content": f"text {i}"} for i in ids]


def ids(history):
    return [m["id"] for m in history]


def test_replaces_the_range_and_keeps_later_messages_in_order():
    history = msgs("a", "b", "c", "d", "e")
    marker = {"id": "M", "role": "system", "content": "[CONTEXT SUMMARY]\nx"}
    assert ids(splice(history, "a", "c", [marker])) == ["M", "d", "e"]
    assert ids(splice(history, "b", "d", [marker])) == ["a", "M", "e"]
    assert ids(splice(history, "e", "e", [])) == ["a", "b", "c", "d"]


def test_messages_appended_after_the_snapshot_survive():
    live = msgs("a", "b", "c")
    snapshot = list(live)
    live += msgs("new1", "new2")  # arrived while the summary call was pending
    marker = {"id": "M", "role": "system", "content": "[CONTEXT SUMMARY]\nx"}
    out = splice(live, snapshot[0]["id"], snapshot[1]["id"], [marker])
    assert ids(out) == ["M", "c", "new1", "new2"]


def test_does_not_modify_its_input():
    history = msgs("a", "b", "c")
    before = copy.deepcopy(history)
    out = splice(history, "a", "b", msgs("M"))
    assert history == before and out is not history
    assert out[1] is history[2]  # untouched messages are the same dicts


@pytest.mark.parametrize(
    "first, last",
    [("zz", "b"), ("a", "zz"), ("c", "a")],
)
def test_missing_or_reversed_ids_raise(first, last):
    with pytest.raises(SpliceError):
        splice(msgs("a", "b", "c"), first, last, [])


def test_expected_ids_guard_against_a_changed_range():
    history = msgs("a", "b", "c")
    assert ids(splice(history, "a", "b", [], expected_ids=["a", "b"])) == ["c"]
    changed = msgs("a", "x", "b", "c")  # something appeared inside the summarised range
    with pytest.raises(SpliceError):
        splice(changed, "a", "b", [], expected_ids=["a", "b"])


def test_splice_error_is_a_value_error():
    assert issubclass(SpliceError, ValueError)
