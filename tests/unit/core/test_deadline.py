"""
Time limits that follow the work (``ai_contrib.core.deadline``; ``docs/design.md``, "Time limits
that follow the work"): what the server must evaluate, how long a reply may take, and where a
window that fits an allowance starts.
"""

from ai_contrib.core.deadline import (
    cached_messages,
    evaluation_tokens,
    reply_timeout,
    after_step,
    grown_head,
    held_head,
    warm_up_steps,
    window_start,
)
from ai_contrib.core.tokens import PER_MESSAGE_OVERHEAD, count_message_tokens
from hypothesis import given, strategies as st
import pytest


def _count(text):
    return len(text.split())


def _msgs(*texts):
    return [{"role": "system" if i == 0 else "user", "content": t} for i, t in enumerate(texts)]


def _sizes(messages):
    return [_count(m["content"]) + PER_MESSAGE_OVERHEAD for m in messages]


def test_only_what_follows_the_last_prompt_is_evaluated():
    last = _msgs("you are marta", "bob: hi there", "bob: a room")
    now = _msgs("you are marta", "bob: hi there", "bob: a room", "bob: and supper")
    assert cached_messages(now, last) == 3
    assert evaluation_tokens(now, last, _sizes(now)) == 3 + PER_MESSAGE_OVERHEAD
    # a restart: nothing is known to be cached, everything is evaluated
    assert cached_messages(now, None) == 0
    assert evaluation_tokens(now, None, _sizes(now)) == sum(_sizes(now))
    # a change near the start (a compaction's summary) costs everything after it
    changed = _msgs("you are marta", "[summary] bob asked", "bob: a room", "bob: and supper")
    assert cached_messages(changed, last) == 1
    assert evaluation_tokens(changed, last, _sizes(changed)) == 9 + 3 * PER_MESSAGE_OVERHEAD
    # the sizes given are the ones summed: nothing is counted again
    assert evaluation_tokens(changed, last, [0, 1, 2, 3]) == 6


def test_the_time_limit_grows_with_the_prompt_and_is_flat_when_the_speed_is_unknown():
    assert reply_timeout(3000, 50.0, 60.0) == 60.0 + 2 * 60.0  # a cold prompt, a loaded CPU
    assert reply_timeout(100, 50.0, 60.0) == 64.0
    assert reply_timeout(3000, None, 60.0) == 60.0  # a server that reports no timings
    assert reply_timeout(3000, 150.0, 10.0, margin=1.0) == 30.0


def test_a_window_takes_the_newest_lines_that_fit_and_never_starts_after_the_turn():
    # the history's counts already hold each message's overhead (count_message_tokens)
    messages = [{"role": "user", "content": "word " * n} for n in (100, 100, 20, 20, 20)]
    counts = [count_message_tokens(m) for m in messages]
    step = counts[-1]
    assert step > 20  # the overhead is in the count, and not added a second time below
    assert window_start(counts, 3 * step, 4) == 2
    assert window_start(counts, 3 * step - 1, 4) == 3
    assert window_start(counts, 10_000, 4) == 0  # everything fits
    # a turn larger than the allowance is shown whole
    assert window_start(counts, step, 2) == 2
    assert window_start(counts, 0, 4) == 4


def test_a_cancel_spares_only_what_follows_the_evaluation_step_under_way():
    # one 2,048-token step: the server ends it whatever the client does
    assert after_step(900, 0, 2048) == 0
    assert after_step(2048, 10, 2048) == 0
    # a longer evaluation: a cancel in its first step spares the rest, none in its last
    assert after_step(3000, 0, 2048) == 952
    assert after_step(3000, 2047.9, 2048) == 952
    assert after_step(3000, 2048, 2048) == 0
    assert after_step(3000, 2900.5, 2048) == 0
    # the step unknown: all that is left may be spared
    assert after_step(900, 100, None) == 800
    assert after_step(900, 1000, None) == 0


def test_a_warm_up_in_steps_adds_a_step_of_tokens_a_request_from_what_the_server_holds():
    sizes = [300, 40, 40, 40, 120, 40]
    roles = ["system", "system", "user", "assistant", "user", "assistant"]
    # the server holds the system message: the first request adds the summary and two lines
    assert warm_up_steps(sizes, roles, held=1, step_tokens=100) == [3, 4, 5, 6]
    # a message larger than a step is a step of its own, never split or skipped
    assert warm_up_steps(sizes, roles, held=0, step_tokens=100) == [1, 3, 4, 5, 6]
    # unknown speed (no step), or a fast server: one request, as before
    assert warm_up_steps(sizes, roles, held=1, step_tokens=None) == [6]
    assert warm_up_steps(sizes, roles, held=0, step_tokens=10_000) == [6]
    # the server holds it all: nothing to send
    assert warm_up_steps(sizes, roles, held=6, step_tokens=100) == []


def test_no_warm_up_step_ends_with_two_replies():
    # llama.cpp refuses a prompt ending with two assistant messages: the step takes the next
    sizes = [50, 30, 30, 30, 30]
    roles = ["system", "user", "assistant", "assistant", "user"]
    steps = warm_up_steps(sizes, roles, held=0, step_tokens=30)
    assert steps == [1, 2, 3, 5]
    # the control: with other roles the same sizes give a request a message
    assert warm_up_steps(sizes, ["system", "user", "assistant", "user", "assistant"],
                         held=0, step_tokens=30) == [1, 2, 3, 4, 5]


def test_warm_up_steps_refuse_sizes_and_roles_that_differ():
    with pytest.raises(ValueError):
        warm_up_steps([10, 10], ["system"], held=0, step_tokens=5)


@given(st.lists(st.tuples(st.integers(1, 400), st.sampled_from(["system", "user", "assistant"])),
                min_size=1, max_size=40),
       st.integers(0, 45), st.integers(1, 600))
def test_warm_up_steps_cover_the_prompt_in_order_within_a_step_each(messages, held, step):
    sizes, roles = [m[0] for m in messages], [m[1] for m in messages]
    ends = warm_up_steps(sizes, roles, held, step)
    start = min(held, len(sizes))
    if start == len(sizes):
        assert ends == []
        return
    assert ends[-1] == len(sizes)
    for end in ends:
        assert end > start
        added = sum(sizes[start:end])
        # within a step, unless one message alone is larger, or a run of replies is taken whole
        two_replies = any(roles[i] == roles[i - 1] == "assistant"
                          for i in range(max(1, start), end))
        assert added <= step or end - start == 1 or two_replies
        if end < len(sizes):
            assert not (end >= 2 and roles[end - 1] == roles[end - 2] == "assistant")
        start = end


def test_the_held_head_ends_before_the_first_line_the_server_does_not_hold():
    # storage order L1, L2, R1 (R1 answers L1): the prompt shows L1, R1, L2
    history = ["S", "L1", "L2", "R1", "L3"]
    shown = {"S", "L1", "L2", "R1", "L3"}
    # the warm-up stopped after S, L1, R1: L2 is stored before R1 and not held
    assert held_head(history, shown, {"S", "L1", "R1"}) == "L1"
    # the control: once L2 is held too, the head runs to R1
    assert held_head(history, shown, {"S", "L1", "R1", "L2"}) == "R1"
    # a line the prompt does not show (another audience's) does not end the head
    assert held_head(history, shown - {"L2"}, {"S", "L1", "R1"}) == "R1"
    assert held_head(history, shown, set()) is None


def test_no_warm_up_step_ends_with_a_note():
    # a note stands before the line it is anchored at: a step that ends on it takes the line
    sizes = [50, 30, 300, 30, 30]
    roles = ["system", "user", "system", "user", "assistant"]
    notes = [False, False, True, False, False]
    assert warm_up_steps(sizes, roles, held=1, step_tokens=100, notes=notes) == [2, 4, 5]
    # the control: the same prompt without the note flag ends a step on it
    assert warm_up_steps(sizes, roles, held=1, step_tokens=100) == [2, 3, 5]


def test_a_held_head_grows_towards_the_tail_within_the_allowance():
    counts = [100, 40, 40, 40, 40, 30, 30]
    # head at 1, the tail from 5: 90 tokens take two more lines, never the tail
    assert grown_head(counts, 1, 5, 90) == 3
    assert grown_head(counts, 1, 5, 10_000) == 4
    # the control: nothing to spare, the head stays
    assert grown_head(counts, 1, 5, 0) == 1
    assert grown_head(counts, 4, 5, 10_000) == 4
