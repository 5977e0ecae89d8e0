"""
The demo's prompt-cache summary, from server log text as ai_contrib writes it.
"""

from ai_contrib.npc.replies import describe_reply
from demo.__main__ import Stats, cache_summary, replies_from_log


def _reply_line(seconds, prompt, cached):
    stats = {"seconds": seconds, "prompt": {"prompt_tokens": prompt, "cached_tokens": cached,
                                            "generated_tokens": 20}}
    return f"2026-11-23 10:00:00 [..] AI reply Marta: {describe_reply(stats)}"


COMPACTION = ("2026-11-23 10:00:00 [..] AI compaction [emergency, summary] Marta: 13 messages "
              "-> summary, 1207 -> 542 tokens")


def test_replies_are_split_at_the_first_compaction_and_reuse_skips_the_reply_after_one():
    log = "\n".join([
        _reply_line(2.0, 800, 0),       # first reply: nothing cached yet, follows nothing
        _reply_line(2.2, 850, 800),
        _reply_line(2.4, 900, 850),
        COMPACTION,
        _reply_line(6.0, 600, 100),     # right after the compaction: not a steady-state reply
        _reply_line(3.0, 650, 600),
        "2026-11-23 10:00:00 [..] AI reply Other: 9.00 s",
    ])
    stats = Stats()
    replies = replies_from_log(log, stats)
    assert [r["after_compaction"] for r in replies] == [False] * 3 + [True] * 2
    assert [r["follows_reply"] for r in replies] == [False, True, True, False, True]
    summary = cache_summary(replies)
    assert summary["median_before"] == 2.2 and summary["median_after"] == 6.0
    assert summary["reused"] == (800 + 850 + 600) / (850 + 900 + 650)
    assert summary["reused_replies"] == 3
    # tokens evaluated: 800, 50, 50 before; 500, 50 after (of two, the upper one)
    assert (summary["evaluated_before"], summary["evaluated_after"]) == (50, 500)


def test_a_server_without_cache_figures_still_gives_reply_times():
    stats = Stats()
    replies = replies_from_log("x AI reply Marta: 1.50 s\n", stats)
    assert replies[0]["prompt"] is None
    assert cache_summary(replies)["reused"] is None


def test_cache_warm_ups_are_counted_apart_and_the_next_reply_still_follows_a_compaction():
    warmup = ("2026-11-23 10:00:00 [..] AI cache warm-up Marta: "
              + describe_reply({"seconds": 9.5, "prompt": {"prompt_tokens": 700,
                                                           "cached_tokens": 90,
                                                           "generated_tokens": 1}}))
    waited = ("2026-11-23 10:00:00 [..] AI reply Marta: "
              + describe_reply({"seconds": 2.5, "waited": 0.8,
                                "prompt": {"prompt_tokens": 760, "cached_tokens": 700,
                                           "generated_tokens": 20}}))
    assert waited.endswith("0.80 s of it waiting for the cache warm-up")
    log = "\n".join([
        _reply_line(2.0, 800, 0),
        COMPACTION,
        warmup,
        waited,  # the warm-up's prompt is this reply's prefix; it waited for the warm-up
        _reply_line(2.6, 820, 760),
    ])
    from ai_contrib.npc.warmup import describe_warm_up

    stepped = ("2026-11-23 10:00:00 [..] AI cache warm-up Marta: "
               + describe_warm_up({"seconds": 4.0, "prompt": {"prompt_tokens": 820,
                                                              "cached_tokens": 700,
                                                              "generated_tokens": 3}}, 3))
    assert " s in 3 steps, prompt 820 tokens" in stepped
    stats = Stats()
    replies = replies_from_log(log + "\n" + stepped, stats)
    assert len(replies) == 3
    assert (replies[1]["seconds"], replies[1]["prompt"], replies[1]["cached"]) == (2.5, 760, 700)
    # a warm-up sent in steps is read like one sent whole
    assert stats.warmups == [{"seconds": 9.5, "prompt": 700, "cached": 90},
                             {"seconds": 4.0, "prompt": 820, "cached": 700}]
    assert [r["follows_reply"] for r in replies] == [False, False, True]
    assert cache_summary(replies)["reused_replies"] == 1
