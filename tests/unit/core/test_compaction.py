"""
The compaction engine's pure part (ai_contrib/core/compaction.py): the strategy records, plans,
the markers' judge, result dicts and the bookkeeping decisions, without an AssistantScript.
The strategies on a real script are in tests/shell/npc/test_compaction_runner.py; every strategy on
a real
runtime history in tests/unit/npc/test_compaction_runner_properties.py.
"""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.core import cascade
from ai_contrib.core.compaction import (
    NO_TALK_SUMMARY,
    REGISTRY,
    STALL_FRACTION,
    STRATEGIES,
    CompactionResult,
    Snapshot,
    appended_log,
    benefit_skipped,
    breaker_tripped,
    build_markers,
    combine_masked,
    get_strategy,
    masked_result,
    plan,
    Span,
    reduction_pct,
    summarised_result,
    synthesis_entry,
)
from ai_contrib.core.cuts import EXTRACTION_TYPE
from ai_contrib.core.messages import make_message
from ai_contrib.core.summary import make_marker
from ai_contrib.admin.compaction_report import format_result

OPTIONS = {
    "compact_sleep_threshold": 0.7, "compact_emergency_threshold": 0.8,
    "compact_preserve_window": 4, "preserve_fraction": 0.0, "cascade_immediate_window": 4,
    "cascade_recent_window": 4, "cascade_pressure_window": 0.4, "keep_ids": (),
}


def talk(sizes):
    return [make_message("user" if i % 2 == 0 else "assistant", "word " * size, name="Bob")
            for i, size in enumerate(sizes)]


def snap(history, budget=100, force=False, trigger="sleep", **options):
    counts = [len(m["content"].split()) + 4 for m in history]
    return Snapshot(history, counts, sum(counts), budget, trigger, force,
                    dict(OPTIONS, **options))


# -- the records -------------------------------------------------------------------------------


def test_one_record_per_strategy_says_what_it_is():
    assert STRATEGIES == ("summary", "mask", "hybrid", "cascade", "replace_all")
    assert [name for name in STRATEGIES if not REGISTRY[name].summarises] == ["mask"]
    for record in REGISTRY.values():
        assert record.summarises == (record.plan is not None)
        assert record.per_turn in (None, "mask", "compact") and record.description
    assert {n for n in STRATEGIES if REGISTRY[n].per_turn == "mask"} == {"mask", "hybrid"}
    assert REGISTRY["cascade"].per_turn == "compact"
    with pytest.raises(ValueError, match="unknown compaction strategy"):
        get_strategy("compress")
    with pytest.raises(ValueError):
        plan(get_strategy("mask"), snap([]))


# -- results -----------------------------------------------------------------------------------


def test_result_dicts_keep_their_documented_shapes():
    assert CompactionResult.skip("no history", "sleep").as_dict() == {
        "skipped": True, "reason": "no history", "trigger": "sleep"}
    assert CompactionResult.fail("boom", "manual", "cascade").as_dict() == {
        "success": False, "error": "boom", "trigger": "manual", "strategy": "cascade"}
    done = masked_result("turn", "mask", ["a", "b"], 200, 50).as_dict()
    assert done["success"] and done["masked_messages"] == done["compacted_messages"] == 2
    assert done["reduction_pct"] == 75.0 and reduction_pct(0, 5) == 0.0
    decision = {"run": False, "reason": "10 < 50"}
    assert benefit_skipped(decision, "sleep", "summary").as_dict()["benefit"] is decision


def test_results_travel_as_objects_and_stored_dicts_read_back():
    # the compaction log (an Attribute) holds dicts: one written by an older version still
    # reads as the same result, and a result's dict reads back to an equal result
    stored = [
        {"skipped": True, "reason": "below threshold (12.0% < 70%)", "trigger": "sleep",
         "token_usage": 0.12},
        {"success": False, "error": "summary failed: timeout", "trigger": "sleep",
         "strategy": "summary"},
        {"success": True, "trigger": "manual", "strategy": "mask", "masked_messages": 2,
         "compacted_messages": 2, "original_tokens": 200, "new_tokens": 50,
         "reduction_pct": 75.0},
    ]
    results = [CompactionResult.from_dict(d) for d in stored]
    assert [(r.skipped, r.failed, r.success) for r in results] == [
        (True, False, False), (False, True, False), (False, False, True)]
    assert results[0].reason.startswith("below threshold") and results[0].strategy is None
    assert results[1].error == "summary failed: timeout"
    assert (results[2].compacted_messages, results[2].reduction_pct) == (2, 75.0)
    assert [r.as_dict() for r in results] == stored
    done = masked_result("turn", "mask", ["a", "b"], 200, 50)
    assert CompactionResult.from_dict(done.as_dict()) == done


def test_hybrid_results_combine_the_masking_and_the_summary():
    masked = masked_result("sleep", "hybrid", ["t1"], 300, 250)
    summary = CompactionResult.from_dict({"success": True, "trigger": "sleep",
                                          "compacted_messages": 5, "context_before": 250})
    both = combine_masked(masked, summary, "hybrid").as_dict()
    assert both["masked_messages"] == 1 and both["context_before"] == 300
    only_masked = combine_masked(
        masked, CompactionResult.from_dict({"skipped": True, "reason": "below"}), "hybrid"
    ).as_dict()
    assert only_masked["summary"] == "below" and only_masked["masked_ids"] == ["t1"]
    none = combine_masked(
        CompactionResult.from_dict({"skipped": True, "reason": "no output", "trigger": "sleep"}),
        CompactionResult.from_dict({"skipped": True, "reason": "below", "trigger": "sleep"}),
        "hybrid").as_dict()
    assert none == {"skipped": True, "reason": "no output; summary: below",
                    "trigger": "sleep", "strategy": "hybrid"}


# -- plans -------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 30), max_size=30), st.integers(10, 400), st.booleans(),
       st.integers(0, 8))
def test_summary_plan_takes_a_prefix_before_the_preserve_window(sizes, budget, force, window):
    history = talk(sizes)
    s = snap(history, budget, force, compact_preserve_window=window)
    p = plan(get_strategy("summary"), s)
    if not history:
        assert p.reason == "no history"
    elif not force and s.usage < 0.7:
        assert p.reason.startswith("below threshold") and p.fields["token_usage"] == s.usage
    if p.skipped:
        assert p.skip_result().as_dict().get("strategy") is None  # the documented shape
        return
    (span,) = p.spans
    assert span.messages == history[: len(span.messages)]
    assert len(history) - len(span.messages) >= window
    assert span.tokens == s.tokens_of(span.messages) and p.total_tokens == s.total_tokens


def test_replace_all_keeps_speech_still_waiting_for_an_answer():
    history = talk([5, 5, 5]) + [make_message("user", "and the map?", name="Bob")]
    whole = plan(get_strategy("replace_all"), snap(history, force=True))
    assert whole.spans[0].messages == history
    waiting = plan(get_strategy("replace_all"), snap(history, force=True,
                                                        keep_ids=[history[-1]["id"]]))
    assert waiting.spans[0].messages == history[:3]
    below = plan(get_strategy("replace_all"), snap(history, budget=10**6))
    assert below.skip_result().as_dict()["strategy"] == "replace_all"


def test_cascade_plan_has_a_short_tier_then_the_fold():
    history = talk([3] * 13)
    first = plan(get_strategy("cascade"), snap(history, trigger="turn"))
    assert [s.tier for s in first.spans] == [cascade.TIER_SHORT] and first.cycle.cycle == 1
    not_due = plan(get_strategy("cascade"), snap(talk([3] * 5), trigger="turn"))
    assert not_due.skipped


# -- judging and results -------------------------------------------------------------------------


def test_markers_are_judged_by_their_cost_and_the_stall_rule():
    history = talk([40] * 10)
    p = plan(get_strategy("summary"), snap(history, budget=100, force=True,
                                           compact_preserve_window=2))
    markers, tokens, problem = build_markers(p, ["Bob asked about words."])
    assert problem is None and tokens[0] < p.spans[0].tokens
    assert markers[0]["metadata"]["strategy"] == "summary"
    # the source again and then some: it costs more than what it would replace
    too_long = " ".join(m["content"] for m in p.spans[0].messages) + " and more words" * 20
    assert build_markers(p, [too_long])[2] is not None
    # a saving under STALL_FRACTION of the whole history is a stall
    stalled = p.__class__(p.strategy, p.trigger, p.spans, total_tokens=10**6)
    assert "stall" in build_markers(stalled, ["Bob asked about words."])[2]
    assert STALL_FRACTION == 0.05
    result = summarised_result(p, markers, tokens, 99, 2).as_dict()
    assert result["original_tokens"] == p.spans[0].tokens and result["new_tokens"] == tokens[0]
    assert result["marker_id"] == markers[0]["id"] and result["context_after"] == 99


# -- bookkeeping -------------------------------------------------------------------------------


@given(st.lists(st.integers(), max_size=50), st.integers(1, 10))
def test_the_compaction_log_is_bounded_and_keeps_the_newest(events, size):
    log = []
    for event in events:
        log = appended_log(log, event, size)
    assert log == events[-size:]


def test_breaker_and_synthesis_entries():
    assert not breaker_tripped(None, 3) and breaker_tripped(3, "3")
    msgs = talk([3, 3])
    entry = synthesis_entry(make_marker("notes", msgs, 20, 2))
    assert entry["text"].startswith("[CONTEXT SYNTHESIS]") and entry["importance"] == 7
    long_marker = cascade.make_tier_marker(cascade.TIER_LONG, "old", msgs, 20, 2, 1)
    assert synthesis_entry(long_marker) is None


def test_result_wording_comes_from_the_records():
    masked = masked_result("manual", "mask", ["a"], 100, 60)
    assert format_result("Marta", masked).startswith("Masked 1 old tool output(s) of Marta")
    assert format_result("Marta", CompactionResult.done("manual", "summary")) is None
    hybrid = replace(masked, strategy="hybrid")  # masked but wrote no summary
    assert format_result("Marta", hybrid).startswith("Masked 1")
    skipped = CompactionResult.skip("no history", "sleep", "cascade")
    assert format_result("Marta", skipped) == "Compaction of Marta (cascade) skipped: no history."


def test_a_servers_error_in_a_result_is_shown_as_text():
    # an LLM server's error body is quoted in the result: on an admin's screen it is data
    forged = "HTTP 500: |/|w[MudInfo] Fake alert|n |lcquit|ltclick|le"
    for strategy in ("replace_all", "cascade", "hybrid", "mask"):
        failed = format_result("Marta", CompactionResult.fail(forged, "manual", strategy))
        assert failed.startswith(f"Compaction of Marta ({strategy}) failed: HTTP 500: ")
        assert "|" not in failed and "\u00a6/\u00a6w[MudInfo]" in failed
        skipped = format_result("Marta", CompactionResult.skip(forged, "manual", strategy))
        assert "|" not in skipped and "\u00a6lcquit" in skipped


def _extraction_round(audience):
    """One round of fact extraction as it stands in a history: a tool call, its result."""
    meta = {"type": EXTRACTION_TYPE, "audience": audience}
    call = {"id": "call_1", "type": "function",
            "function": {"name": "add_journal_entry", "arguments": "{}"}}
    return [make_message("assistant", "", name="Marta", tool_calls=[call], metadata=meta),
            make_message("tool", "ok: added to your journal.", tool_call_id="call_1",
                         metadata=meta)]


def test_a_summary_is_written_from_talk_never_from_extraction_traffic():
    # traffic a failed compaction left behind, read for two listeners, then a line one of
    # them heard alone: the traffic's audience must not choose the summary's listener group
    traffic = _extraction_round(["#3", "#11"]) + _extraction_round(["#3", "#11"])
    secret = make_message("user", "The key is under the mat.", name="Tamsin",
                          metadata={"audience": ["#3"]})
    span = Span(traffic + [secret], 40)
    assert span.shared == [secret]
    assert span.left_out == []
    assert span.has_talk
    # positive control: two lines for different groups, one is left out of the summary
    public = make_message("user", "Evening, all.", name="Wren", metadata={"audience": ["#3", "#11"]})
    both = Span(traffic + [public, secret], 50)
    assert both.shared == [public] and both.left_out == [secret]
    # a span of traffic alone has no talk: it is summarised without a model
    alone = Span(traffic, 30)
    assert alone.shared == [] and not alone.has_talk
    assert NO_TALK_SUMMARY and "No one spoke" in NO_TALK_SUMMARY
