"""
The pure parts of ``benchmarks/defaults.py``: the server log read as events, the statistics
per window of replies, and the count of replies repeated word for word.
"""

import importlib.util
import json

import pytest

from ai_contrib.npc.replies import describe_reply
from tests.support.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "bench_defaults", ROOT / "benchmarks" / "defaults.py")
defaults = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(defaults)


def reply_line(seconds, prompt, cached, generated=20, waited=0.0, npc="Marta", at="10:00:00"):
    stats = {"seconds": seconds, "waited": waited,
             "prompt": {"prompt_tokens": prompt, "cached_tokens": cached,
                        "generated_tokens": generated}}
    return f"2026-11-23 {at} [..] AI reply {npc}: {describe_reply(stats)}"


def test_a_reply_line_gives_generated_tokens_and_the_wait_for_a_warm_up():
    log = "\n".join([
        reply_line(1.21, 812, 770, generated=42),
        reply_line(2.5, 760, 700, generated=1, waited=0.8),
        "2026-11-23 10:00:01 [..] AI reply Marta: 1.50 s",  # a server without cache figures
        "2026-11-23 10:00:02 [..] AI reply Marta: 3.00 s, 0.50 s of it waiting for the cache "
        "warm-up",
        reply_line(9.0, 100, 0, npc="Other"),
    ])
    replies = [e for e in defaults.parse_log(log) if e["kind"] == "reply"]
    assert [(r["seconds"], r["prompt"], r["cached"], r["generated"], r["waited"])
            for r in replies] == [
        (1.21, 812, 770, 42, 0.0),
        (2.5, 760, 700, 1, 0.8),
        (1.5, None, None, None, 0.0),
        (3.0, None, None, None, 0.5),
    ]
    assert replies[0]["time"] is not None and replies[3]["time"] - replies[0]["time"] == 2


def test_the_demo_reads_the_same_extended_reply_line():
    from demo.__main__ import Stats, replies_from_log

    replies = replies_from_log(reply_line(2.5, 760, 700, generated=7, waited=0.8), Stats())
    assert (replies[0]["generated"], replies[0]["waited"], replies[0]["cached"]) == (7, 0.8, 700)


def test_memory_work_is_read_in_order_with_the_seconds_from_trigger_to_compaction():
    log = "\n".join([
        reply_line(1.0, 800, 0, at="10:00:00"),
        "2026-11-23 10:00:05 [..] AI Marta: emergency compaction triggered: 81.2% context usage",
        "2026-11-23 10:00:17 [..] AI compaction [emergency, summary] Marta: 30 messages, "
        "3300 -> 900 tokens (73% reduction); context 3400 -> 1000 tokens",
        "2026-11-23 10:00:30 [..] AI cache warm-up Marta: "
        + describe_reply({"seconds": 9.5, "prompt": {"prompt_tokens": 700, "cached_tokens": 90,
                                                     "generated_tokens": 1}}),
        "2026-11-23 10:00:40 [..] AI compaction [sleep, summary] Marta: 5 messages, "
        "500 -> 200 tokens (60% reduction)",
        "2026-11-23 10:00:41 [..] AI compaction [emergency, summary] Marta failed: timeout",
        "2026-11-23 10:00:50 [..] AI reply Marta: on the prompt the server holds while the next "
        "is warmed (41 messages)",
        "2026-11-23 10:00:52 [..] AI cache warm-up Marta: evaluated by the memory server, 1700 "
        "tokens handed to the reply server",
        "2026-11-23 10:00:53 [..] AI cache warm-up Bram: evaluated by the memory server, 900 "
        "tokens handed to the reply server",
    ])
    events = defaults.parse_log(log)
    assert [e["kind"] for e in events] == [
        "reply", "emergency", "compaction", "warm-up", "compaction", "compaction-failed",
        "held", "handover"]  # Bram's is not Marta's
    assert events[-1]["tokens"] == 1700
    assert events[2]["before"] == 3300 and events[2]["after"] == 900
    assert events[1]["usage"] == 81.2
    # 12 s from the trigger; the sleep compaction had no trigger line; nor had the failure
    assert defaults.compaction_seconds(events) == [12, None, None]


def test_windows_split_replies_and_count_memory_work_in_the_window_of_the_next_reply():
    events = []
    for i in range(5):
        events.append({"kind": "reply", "time": None, "seconds": float(i + 1),
                       "prompt": 1000, "cached": 900 if i else 0,
                       "generated": 10 * (i + 1), "waited": 0.0})
        if i == 1:  # after reply 2: counts in the window of reply 3
            events += [
                {"kind": "emergency", "time": 100.0, "usage": 80.0},
                {"kind": "compaction", "time": 104.0, "trigger": "emergency",
                 "strategy": "summary", "messages": 9, "before": 3000, "after": 800},
                {"kind": "warm-up", "time": 110.0, "seconds": 6.0, "prompt": 900,
                 "cached": 0},
            ]
    events[-1] = {**events[-1], "waited": 2.5}  # reply 5 waited for a warm-up
    events.append({"kind": "compaction", "time": None, "trigger": "sleep",
                   "strategy": "summary", "messages": 3, "before": 500, "after": 200})
    first, second, third = defaults.window_stats(events, size=2)
    assert (first["first"], first["last"], first["replies"]) == (1, 2, 2)
    assert first["median_s"] == 1.5 and first["compactions"] == 0
    assert first["median_evaluated"] == 550  # 1000 and 100
    assert second["compactions"] == 1 and second["compaction_s"] == [4.0]
    assert (second["tokens_before"], second["tokens_after"]) == (3000, 800)
    assert second["emergencies"] == 1 and second["warmups"] == 1
    assert second["median_s"] == 3.5 and second["ratio"] == pytest.approx(3.5 / 1.5)
    assert second["median_reused_share"] == pytest.approx(0.9)
    assert second["waited"] == 0
    # the last window: one reply, and the compaction after it
    assert (third["first"], third["last"], third["replies"]) == (5, 5, 1)
    assert third["waited"] == 1 and third["max_wait_s"] == 2.5
    assert third["compactions"] == 1 and third["compaction_s"] == [None]
    assert third["p95_s"] == 5.0 and third["median_generated"] == 50
    # reply 1 evaluated its whole prompt; the others reused 90 %
    assert first["misses"] == 1 and first["median_cached_s"] == 2.0
    assert second["misses"] == 0 and second["median_cached_s"] == 3.5


def test_each_wait_for_a_warm_up_is_set_beside_that_warm_up():
    def reply(seconds, waited, prompt=1000, cached=950):
        return {"kind": "reply", "time": None, "seconds": seconds, "prompt": prompt,
                "cached": cached, "generated": 50, "waited": waited}

    events = [
        {"kind": "warm-up", "time": None, "seconds": 12.0, "prompt": 1900, "cached": 900},
        reply(3.0, 0.0),  # came after the warm-up ended: did not wait
        {"kind": "warm-up", "time": None, "seconds": 20.0, "prompt": 2000, "cached": 400},
        reply(9.5, 7.0, prompt=2050, cached=2000),
        reply(2.0, 0.0),
        reply(4.0, 1.5),  # a wait with no warm-up line before it since the last reply
    ]
    assert defaults.warmup_waits(events) == [
        {"waited": 7.0, "warmup_s": 20.0, "warmup_evaluated": 1600, "reply_evaluated": 50,
         "reply_s": 9.5},
        {"waited": 1.5, "warmup_s": None, "warmup_evaluated": None, "reply_evaluated": 50,
         "reply_s": 4.0},
    ]


def test_p95_is_nearest_rank():
    assert defaults.p95(list(range(1, 101))) == 95
    assert defaults.p95([3.0, 1.0]) == 3.0
    assert defaults.p95([]) is None


def test_repeated_replies_are_counted_from_the_archive(tmp_path):
    records = [
        {"seq": 0, "kind": "message", "msg": {"role": "user", "content": "Hi", "name": "Bo"}},
        {"seq": 1, "kind": "message", "msg": {"role": "assistant", "content": "Welcome!"}},
        {"seq": 2, "kind": "message", "msg": {"role": "user", "content": "Welcome!"}},
        {"seq": 3, "kind": "message", "msg": {"role": "assistant", "content": "Ale?"}},
        {"seq": 4, "kind": "message", "msg": {"role": "assistant", "content": " Welcome! "}},
        {"seq": 5, "kind": "message", "msg": {"role": "assistant", "content": ""}},
        {"seq": 6, "kind": "compaction", "marker": {"role": "system", "content": "Welcome!"}},
        {"seq": 7, "kind": "message", "msg": {"role": "assistant", "content": "welcome!"}},
        {"seq": 8, "kind": "message", "msg": {"role": "assistant", "content": "Welcome!"}},
    ]
    (tmp_path / "npc_5.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    texts = defaults.archive_replies(tmp_path)["npc_5.jsonl"]
    assert texts == ["Welcome!", "Ale?", " Welcome! ", "welcome!", "Welcome!"]
    count, repeated = defaults.duplicate_replies(texts)
    assert count == 2 and repeated == ["Welcome!"]  # case counts: "welcome!" is another


def test_long_lines_are_cut_at_a_word():
    assert defaults.cap_text("one two three", 9) == "one two"
    assert defaults.cap_text("short", 9) == "short"
    assert len(defaults.cap_text("x" * 50, 20)) == 20


def test_every_summary_made_of_the_span_s_lines_counts_as_an_extract():
    log = "\n".join([
        "2026-11-23 10:00:01 [..] AI summary of 24 messages failed the fidelity check (a line "
        "reads as Ysolde's words); replaced by an extract of the span",
        "2026-11-23 10:00:02 [..] AI summary of 64 messages was not written in time; replaced "
        "by an extract of the span",
        "2026-11-23 10:00:03 [..] AI summary of 19 messages written as an extract of the span "
        "(not asked: 3 of the model's last 4 summaries failed the fidelity check)",
        # control: a kept summary's compaction line is no extract
        "2026-11-23 10:00:04 [..] AI compaction [emergency, summary] Marta: 30 messages, "
        "3300 -> 900 tokens (73% reduction)",
    ])
    events = defaults.parse_log(log)
    assert [(e["kind"], e.get("messages")) for e in events] == [
        ("extract", 24), ("extract", 64), ("extract", 19), ("compaction", 30)]
