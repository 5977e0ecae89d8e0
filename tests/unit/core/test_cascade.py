"""
Cascading temporal summaries (core/cascade.py; docs/design.md, "Cascade summaries"): trigger
points, plans, markers.
"""

import pytest

from ai_contrib.core.cascade import (
    LONG_TERM_INSTRUCTION,
    LONG_TERM_PROMPT,
    TIER_LONG,
    TIER_SHORT,
    apply_cycle,
    build_fold_request,
    cascade_due,
    cascade_status,
    check_cycle,
    cycle_replacements,
    fitted_window,
    make_tier_marker,
    plan_cycle,
    raw_count,
    summary_text_of,
    tier_of,
)
from ai_contrib.core.cuts import EXTRACTION_TYPE, is_safe_cut
from ai_contrib.core.messages import SUMMARY_PREFIX, is_marker, make_message
from ai_contrib.core.splice import SpliceError
from ai_contrib.core.summary import make_marker


class Talk:
    """Numbered messages with archive seqs, alternating player and NPC."""

    def __init__(self):
        self.n = 0

    def msg(self):
        role = "user" if self.n % 2 == 0 else "assistant"
        msg = make_message(role, f"line {self.n}", name="Bob" if role == "user" else "Marta",
                           seq=self.n)
        self.n += 1
        return msg


def run_cycle(history, cycle):
    """Apply ``cycle`` with made-up summaries, as the shell does with real ones."""
    long_marker = None
    if cycle.fold:
        text = summary_text_of(cycle.fold[0]) if cycle.promote else f"long {cycle.cycle}"
        long_marker = make_tier_marker(TIER_LONG, text, cycle.fold, 100, 5, cycle.cycle)
    short_marker = make_tier_marker(
        TIER_SHORT, f"short {cycle.cycle}", cycle.to_summarise, 100, 5, cycle.cycle
    )
    return apply_cycle(history, cycle, long_marker, short_marker)


def test_due_rule():
    assert not cascade_due(128, False)
    assert cascade_due(129, False)
    assert not cascade_due(127, True)
    assert cascade_due(128, True)
    assert cascade_due(13, False, immediate_window=6, recent_window=6)


def test_trigger_points_128_none_129_first_193_waterfall_257_and_on():
    talk, history, fired = Talk(), [], []
    for _ in range(400):
        history.append(talk.msg())
        cycle = plan_cycle(history)
        if not cycle.skipped:
            fired.append((talk.n, cycle.cycle, cycle.waterfall, cycle.promote,
                          len(cycle.to_summarise)))
            history = run_cycle(history, cycle)
    assert fired == [
        (129, 1, False, False, 65),  # first: 129 - 64 messages -> short-term, no long-term yet
        (193, 2, True, True, 64),  # waterfall: short-term promoted to long-term
        (257, 3, True, False, 64),  # waterfall: long-term + short-term folded by the LLM
        (321, 4, True, False, 64),
        (385, 5, True, False, 64),
    ]
    # after each cycle: [long] [short] + the 64 newest messages, verbatim and in order
    assert [tier_of(m) for m in history[:2]] == [TIER_LONG, TIER_SHORT]
    assert raw_count(history) == 64 + (400 - 385)
    assert [m["seq"] for m in history[2:]] == list(range(385 - 64, 400))
    short = history[1]["metadata"]
    assert (short["memory_range_start"], short["memory_range_end"]) == (257, 320)
    assert history[0]["metadata"]["first_seq"] == 0  # the long-term summary reaches back to 0
    assert history[0]["metadata"]["last_seq"] == 256


def test_not_due_reason_names_the_next_trigger():
    talk = Talk()
    history = [talk.msg() for _ in range(128)]
    cycle = plan_cycle(history)
    assert cycle.skipped and cycle.reason == "not due: 128 raw messages, next cycle at 129"
    assert cycle.keep == history and cycle.to_summarise == [] and cycle.fold == []


def test_force_runs_early_but_never_inside_the_immediate_window():
    talk = Talk()
    history = [talk.msg() for _ in range(70)]
    cycle = plan_cycle(history, force=True)
    assert not cycle.skipped and len(cycle.to_summarise) == 6 and len(cycle.keep) == 64
    short = [talk.msg() for _ in range(64)]
    assert plan_cycle(short, force=True).reason == "within immediate window"
    assert plan_cycle([]).reason == "no history"


def test_lines_awaiting_an_answer_stay_out_of_the_cycle():
    talk = Talk()
    history = [talk.msg() for _ in range(70)]
    waiting = history[3]["id"]
    cycle = plan_cycle(history, force=True, keep_ids=[waiting])
    assert len(cycle.to_summarise) == 3 and cycle.keep[0]["id"] == waiting
    assert plan_cycle(history, force=True, keep_ids=[history[0]["id"]]).reason \
        == "within immediate window"


def journaling(n):
    """``n`` messages of fact extraction's tool traffic (a call and its result, in turn)."""
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(make_message("assistant", "", name="Marta", metadata={
                "type": EXTRACTION_TYPE},
                tool_calls=[{"id": f"call_{i}", "type": "function", "function": {
                    "name": "add_journal_entry", "arguments": "{}"}}]))
        else:
            out.append(make_message("tool", "ok: already in your journal.",
                                    tool_call_id=f"call_{i - 1}",
                                    metadata={"type": EXTRACTION_TYPE}))
    return out


def test_journaling_never_takes_the_place_of_talk_in_the_immediate_window():
    talk = Talk()
    history = [talk.msg() for _ in range(70)] + journaling(22)
    assert raw_count(history) == 70  # the tool traffic is not conversation
    cycle = plan_cycle(history, force=True)
    # the window keeps 64 lines of talk and the traffic after them, as without it (control)
    kept_talk = [m for m in cycle.keep if m["role"] != "tool" and m.get("content")]
    assert len(kept_talk) == 64 and len(cycle.to_summarise) == 6
    assert plan_cycle([talk.msg() for _ in range(64)] + journaling(22), force=True).reason \
        == "within immediate window"
    assert fitted_window(history, [10] * 92, 64, 10_000) == 64


def test_fitted_window_holds_at_most_its_token_share():
    talk = Talk()
    history = [talk.msg() for _ in range(70)]
    counts = [10] * 70
    assert fitted_window(history, counts, 64, 10_000) == 64  # the configured window fits
    assert fitted_window(history, counts, 64, 255) == 25  # 25 x 10 tokens <= 255 < 26 x 10
    assert fitted_window(history, counts, 64, 5) == 0
    # summary markers stay beside the window: their tokens count, they are not raw messages
    marked = [make_marker("s", history[:60], 500, 5)] + history[60:]
    assert fitted_window(marked, [40] + [10] * 10, 64, 95) == 5
    assert fitted_window(marked, [40] + [10] * 10, 64, 30) == 0
    with pytest.raises(ValueError):
        fitted_window(history, counts[:-1], 64, 100)


def test_cut_keeps_tool_calls_with_their_results():
    talk = Talk()
    history = [talk.msg() for _ in range(10)]
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    history.append(make_message("assistant", "", tool_calls=[call], seq=100))
    history.append(make_message("tool", "a cold forge", tool_call_id="c1", seq=101))
    history += [talk.msg() for _ in range(3)]
    # an immediate window of 4 would start at the tool result: the call moves in with it
    cycle = plan_cycle(history, immediate_window=4, recent_window=4, force=True)
    assert cycle.keep[0]["role"] == "assistant" and cycle.keep[0].get("tool_calls")
    assert is_safe_cut(history, len(cycle.to_summarise))


def test_foreign_markers_stay_until_the_first_waterfall():
    talk = Talk()
    old = make_marker("Bob owes me 3 silver.", [talk.msg()], 50, 6)  # a summary-strategy marker
    history = [old] + [talk.msg() for _ in range(13)]
    cycle = plan_cycle(history, immediate_window=6, recent_window=6)
    assert not cycle.skipped and cycle.fold == []  # nothing to waterfall yet
    history = run_cycle(history, cycle)
    assert [tier_of(m) for m in history[:2]] == [None, TIER_SHORT]
    history += [talk.msg() for _ in range(6)]
    cycle = plan_cycle(history, immediate_window=6, recent_window=6)
    assert [m["id"] for m in cycle.fold] == [history[0]["id"], history[1]["id"]]
    assert not cycle.promote  # two summaries: folded by the LLM
    history = run_cycle(history, cycle)
    assert [tier_of(m) for m in history[:2]] == [TIER_LONG, TIER_SHORT]
    assert sum(1 for m in history if is_marker(m)) == 2


def test_status_reports_cycles_and_next_trigger():
    talk = Talk()
    history = [talk.msg() for _ in range(129)]
    assert cascade_status(history) == {
        "raw": 129, "short_term": False, "long_term": False, "cycles": 0, "due_at": 129,
        "due": True,
    }
    history = run_cycle(history, plan_cycle(history))
    status = cascade_status(history)
    assert (status["raw"], status["short_term"], status["cycles"], status["due_at"]) == (
        64, True, 1, 128)


def test_tier_markers_and_summary_text():
    talk = Talk()
    msgs = [talk.msg() for _ in range(5)]
    marker = make_tier_marker(TIER_SHORT, "Bob asked about rooms.", msgs, 80, 6, 3,
                              trigger="turn")
    assert marker["content"] == f"{SUMMARY_PREFIX}\nRecent past (summary):\nBob asked about rooms."
    meta = marker["metadata"]
    assert (meta["tier"], meta["cycle"], meta["strategy"], meta["trigger"]) == (
        TIER_SHORT, 3, "cascade", "turn")
    assert (meta["memory_range_start"], meta["memory_range_end"]) == (0, 4)
    assert summary_text_of(marker) == "Bob asked about rooms."
    long = make_tier_marker(TIER_LONG, "Old times.", [marker], 10, 3, 4)
    assert "memory_range_start" not in long["metadata"]
    assert summary_text_of(long) == "Old times."
    assert (long["metadata"]["first_seq"], long["metadata"]["last_seq"]) == (0, 4)
    with pytest.raises(ValueError):
        make_tier_marker("medium", "x", msgs, 1, 1, 1)


def test_fold_request_chat_and_base():
    talk = Talk()
    long = make_tier_marker(TIER_LONG, "I opened the inn.", [talk.msg()], 10, 3, 1)
    short = make_tier_marker(TIER_SHORT, "Bob rented a room.", [talk.msg()], 10, 3, 2)
    chat = build_fold_request([long, short])
    assert chat[0] == {"role": "system", "content": LONG_TERM_PROMPT}
    user = chat[1]["content"]
    assert user.index("I opened the inn.") < user.index("Bob rented a room.")
    assert "Older memories" not in user  # the tier headings are not sent
    (base,) = build_fold_request([long, short], style="base")
    assert base["role"] == "user"
    assert base["content"].startswith(LONG_TERM_INSTRUCTION)
    assert base["content"].endswith("SUMMARY:\n")
    assert "OLDER:\nI opened the inn." in base["content"]
    assert "MORE RECENT:\nBob rented a room." in base["content"]
    with pytest.raises(ValueError):
        build_fold_request([])


def test_check_cycle():
    assert check_cycle("ok", 10, 100, 1) is None
    assert "short-term summary: empty" in check_cycle(" ", 1, 100, 0)
    assert "not shorter" in check_cycle("x", 100, 100, 0)
    assert check_cycle("ok", 10, 100, 1, long_text="old", long_marker_tokens=20,
                       fold_tokens=30) is None
    assert "long-term summary: empty" in check_cycle("ok", 10, 100, 1, long_text="",
                                                     fold_tokens=30)
    assert "would not shrink" in check_cycle("ok", 10, 20, 1, long_text="long",
                                             long_marker_tokens=60, fold_tokens=30)


def test_replacements_and_stale_ranges():
    talk = Talk()
    history = [talk.msg() for _ in range(10)]
    cycle = plan_cycle(history, immediate_window=4, recent_window=4, force=True)
    marker = make_tier_marker(TIER_SHORT, "s", cycle.to_summarise, 10, 1, 1)
    assert cycle_replacements(cycle, None, marker) == [
        (history[0]["id"], history[5]["id"], marker)]
    with pytest.raises(SpliceError):
        apply_cycle(history[3:], cycle, None, marker)
    with pytest.raises(ValueError):
        cycle_replacements(plan_cycle(history[:2]), None, marker)
    # messages appended after planning keep their place
    late = talk.msg()
    out = apply_cycle(history + [late], cycle, None, marker)
    assert out[0] is marker and out[-1] is late and len(out) == 6


def test_bad_windows_raise():
    with pytest.raises(ValueError):
        plan_cycle([], immediate_window=-1)
    with pytest.raises(ValueError):
        plan_cycle([], recent_window=0)
