"""
The reply server slot a handed-over cache warm-up is restored into
(``ai_contrib.llm.handover.least_recent_idle``; ``docs/design.md``, "Warm-ups handed over").
"""

import pytest

from ai_contrib.llm.handover import least_recent_idle


def slot(id_, task=None, busy=False):
    """One entry of llama.cpp's ``GET /slots``: ``id_task`` only once the slot was used."""
    entry = {"id": id_, "is_processing": busy}
    if task is not None:
        entry["id_task"] = task
    return entry


def test_the_idle_slot_used_least_recently():
    assert least_recent_idle([slot(0, task=9), slot(1, task=4)]) == 1
    assert least_recent_idle([slot(0, task=4), slot(1, task=9)]) == 0


def test_a_slot_never_used_before_any_used_one():
    assert least_recent_idle([slot(0, task=2), slot(1)]) == 1


def test_a_busy_slot_is_passed_over_while_one_is_idle():
    # the least recently used is busy (another NPC's reply): the idle one takes the cache
    assert least_recent_idle([slot(0, task=1, busy=True), slot(1, task=7)]) == 1
    # positive control: idle, the same slot is the one chosen
    assert least_recent_idle([slot(0, task=1), slot(1, task=7)]) == 0


def test_with_every_slot_busy_the_least_recently_used_waits_for_it():
    assert least_recent_idle([slot(0, task=5, busy=True), slot(1, task=3, busy=True)]) == 1


def test_no_slots_is_an_error():
    with pytest.raises(ValueError, match="no slots"):
        least_recent_idle([])
