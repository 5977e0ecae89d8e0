"""
Property tests for the compaction core over random histories with tool-call groups.

Safety is checked against an oracle written differently from the implementation (sets of call
ids on each side of the cut instead of blocked spans).
"""

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ai_contrib.core.cuts import MARKER_FOLD_SHARE, is_safe_cut, plan_compaction, safe_cut
from ai_contrib.core.messages import SUMMARY_PREFIX, is_marker
from ai_contrib.core.splice import splice
from ai_contrib.core.summary import (
    format_messages_for_compaction,
    make_marker,
    plan_summary_chunks,
)
from ai_contrib.core.tokens import (
    TokenLedger,
    count_conversation_tokens,
    count_message_tokens,
    count_tokens,
)

MAIN = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)


class Ids:
    """Fresh ids within one example (prefix keeps snapshot and appended messages apart)."""

    def __init__(self, prefix):
        self.prefix, self.n = prefix, 0

    def __call__(self):
        self.n += 1
        return f"{self.prefix}{self.n}"


def _msg(new_id, role, content, **extra):
    return {"id": new_id(), "role": role, "content": content, **extra}


@st.composite
def items(draw, new_id, allow_pending):
    """One conversational item: a list of messages (a tool group is one item)."""
    kind = draw(
        st.sampled_from(
            [
                "user",
                "user",
                "assistant",
                "assistant",
                "system",
                "group",
                "group",
                "orphan",
                "abandoned",
            ]
            + (["pending"] if allow_pending else [])
        )
    )
    if kind in ("user", "assistant", "system"):
        name = {"user": "Mara", "assistant": "Innkeeper", "system": None}[kind]
        extra = {"name": name} if name else {}
        return [_msg(new_id, kind, draw(texts), **extra)]
    if kind == "orphan":
        return [_msg(new_id, "tool", draw(texts), tool_call_id="nowhere")]
    count = draw(st.integers(1, 3))
    call_ids = [new_id() + "c" for _ in range(count)]
    calls = [
        {"id": c, "type": "function", "function": {"name": "look", "arguments": "{}"}}
        for c in call_ids
    ]
    group = [_msg(new_id, "assistant", draw(texts), tool_calls=calls)]
    if kind == "abandoned":
        return group
    order = draw(st.permutations(call_ids))
    if kind == "pending":  # results still on their way: the history must end here
        order = order[: draw(st.integers(0, count - 1))]
    results = [_msg(new_id, "tool", draw(texts), tool_call_id=c) for c in order]
    if results and draw(st.integers(0, 4)) == 0:  # a player speaks while the tool runs
        results.insert(
            draw(st.integers(0, len(results) - 1)), _msg(new_id, "user", draw(texts), name="Tom")
        )
    return group + results


@st.composite
def histories(draw, prefix="m", max_items=14):
    new_id = Ids(prefix)
    history = []
    if draw(st.booleans()):
        history.append(
            _msg(
                new_id,
                "system",
                f"{SUMMARY_PREFIX}\n{draw(texts)}",
                metadata={"type": "compaction", "first_seq": 0, "last_seq": 3},
            )
        )
    n_items = draw(st.integers(0, max_items))
    for index in range(n_items):
        history += draw(items(new_id, allow_pending=index == n_items - 1))
    return history


def draw_range(data, history):
    """Indices ``a <= b`` of two messages of the non-empty ``history``, drawn with ``data``."""
    a = data.draw(st.integers(0, len(history) - 1))
    return a, data.draw(st.integers(a, len(history) - 1))


def oracle_safe(history, i):
    """Cut at i is safe iff no call/result pair straddles it, the kept part does not start with a
    tool result, and no call still awaiting results at the end is compacted."""
    if i == 0:
        return True
    compacted, kept = history[:i], history[i:]
    if kept and kept[0]["role"] == "tool":
        return False
    compacted_calls = {c["id"] for m in compacted for c in m.get("tool_calls") or []}
    if any(m.get("tool_call_id") in compacted_calls for m in kept if m["role"] == "tool"):
        return False
    tail = len(history)
    while tail > 0 and history[tail - 1]["role"] == "tool":
        tail -= 1
    if tail > 0 and tail - 1 < i:
        last = history[tail - 1]
        answered = {m.get("tool_call_id") for m in history[tail:]}
        if {c["id"] for c in last.get("tool_calls") or []} - answered:
            return False
    return True


@MAIN
@given(histories(), st.integers(0, 80))
def test_safe_cut_agrees_with_oracle_and_is_the_largest(history, i):
    n = len(history)
    assert [is_safe_cut(history, k) for k in range(n + 1)] == [
        oracle_safe(history, k) for k in range(n + 1)
    ]
    j = safe_cut(history, i)
    assert 0 <= j <= min(i, n) and oracle_safe(history, j)
    assert not any(oracle_safe(history, k) for k in range(j + 1, min(i, n) + 1))


@MAIN
@given(
    histories(),
    st.data(),
    st.integers(0, 5000),
    st.integers(0, 30),
    st.floats(0, 1),
)
def test_plan_is_safe_keeps_order_and_honours_the_window(history, data, budget, window, fraction):
    counts = data.draw(st.lists(st.integers(0, 300), min_size=len(history), max_size=len(history)))
    plan = plan_compaction(history, counts, budget, window, fraction)
    n = len(history)
    head = next((i for i, m in enumerate(history) if not is_marker(m)), n)
    if plan.to_compact and all(is_marker(m) for m in plan.to_compact):
        # the summary markers at the head, over their share of the budget, folded alone
        assert plan.to_compact == history[:head] and plan.to_preserve == history[head:]
        assert plan.compact_tokens == sum(counts[:head]) > budget * MARKER_FOLD_SHARE
        return
    if plan.skipped:
        assert sum(counts[:head]) <= budget * MARKER_FOLD_SHARE
        assert plan.to_compact == [] and plan.to_preserve == history
        if plan.reason == "nothing to compact":
            assert n > window
        else:
            assert n <= window
        return
    assert plan.to_compact + plan.to_preserve == history
    assert all(a is b for a, b in zip(plan.to_compact + plan.to_preserve, history))
    assert oracle_safe(history, plan.cut) and plan.cut == len(plan.to_compact)
    assert any(not is_marker(m) for m in plan.to_compact)
    assert len(plan.to_preserve) >= min(window, n)
    assert plan.preserve_tokens >= min(int(budget * fraction), sum(counts))
    assert (plan.compact_tokens, plan.preserve_tokens) == (
        sum(counts[: plan.cut]),
        sum(counts[plan.cut :]),
    )


@MAIN
@given(histories(), histories(prefix="new", max_items=4), st.integers(0, 6), st.data())
def test_splice_after_concurrent_appends_keeps_every_new_message(history, appended, window, data):
    live = list(history)
    snapshot = list(live)
    counts = [count_message_tokens(m) for m in snapshot]
    fraction = data.draw(st.sampled_from([0.0, 0.1, 0.5]))
    plan = plan_compaction(snapshot, counts, sum(counts), window, fraction)
    assume(not plan.skipped)
    live.extend(appended)  # arrived while the summary call was pending
    marker = make_marker("notes", plan.to_compact, plan.compact_tokens, 5)
    out = splice(
        live,
        plan.to_compact[0]["id"],
        plan.to_compact[-1]["id"],
        [marker],
        expected_ids=[m["id"] for m in plan.to_compact],
    )
    assert out == [marker] + plan.to_preserve + appended
    compacted_ids = {m["id"] for m in plan.to_compact}
    assert not compacted_ids & {m["id"] for m in out}
    assert live == snapshot + appended  # the live list itself is untouched


@MAIN
@given(histories(), st.data())
def test_splice_replaces_exactly_the_range(history, data):
    assume(history)
    a, b = draw_range(data, history)
    replacement = [{"id": "R", "role": "system", "content": "r"}]
    out = splice(history, history[a]["id"], history[b]["id"], replacement)
    assert out == history[:a] + replacement + history[b + 1 :]


@MAIN
@given(histories(), st.data())
def test_a_shorter_marker_lowers_the_count(history, data):
    assume(history)
    a, b = draw_range(data, history)
    before = count_conversation_tokens(history)
    replaced = count_conversation_tokens(history[a : b + 1])
    marker = make_marker(data.draw(texts), history[a : b + 1], replaced, 0)
    after = count_conversation_tokens(history[:a] + [marker] + history[b + 1 :])
    assert after == before - replaced + count_message_tokens(marker)
    if count_message_tokens(marker) < replaced:
        assert after < before


@st.composite
def ledger_ops(draw):
    pool = draw(histories(max_items=10))
    assume(pool)
    index = st.integers(0, len(pool) - 1)
    ops = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("add"), index),
                st.tuples(st.just("remove"), st.lists(index, max_size=4)),
                st.tuples(st.just("replace"), st.lists(index, max_size=6, unique=True)),
            ),
            max_size=25,
        )
    )
    return pool, ops


@MAIN
@given(ledger_ops())
def test_ledger_total_always_equals_a_full_recount(pool_and_ops):
    pool, ops = pool_and_ops
    ledger, current = TokenLedger(), {}
    for op, arg in ops:
        if op == "add":
            assert ledger.add(pool[arg]) == count_message_tokens(pool[arg])
            current[pool[arg]["id"]] = pool[arg]
        elif op == "remove":
            ids = [pool[k]["id"] for k in arg]
            ledger.remove_ids(ids)
            for msg_id in ids:
                current.pop(msg_id, None)
        else:
            current = {pool[k]["id"]: pool[k] for k in arg}
            ledger.replace(list(current.values()))
        assert ledger.total == count_conversation_tokens(list(current.values()))
        assert len(ledger) == len(current)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(max_items=10), st.integers(40, 400))
def test_summary_chunks_cover_everything_in_order_and_fit(history, budget):
    chunks = plan_summary_chunks(history, [count_message_tokens(m) for m in history], budget)
    assert [m["id"] for chunk in chunks for m in chunk] == [m["id"] for m in history]
    assert all(chunk for chunk in chunks)
    for chunk in chunks:
        assert count_tokens(format_messages_for_compaction(chunk)) <= budget
