"""
The admin's line about a sleep phase (ai_contrib/admin/sleep_report.py), read from the typed results
of its steps: the same words whatever the steps ran, declined or failed.
"""

from ai_contrib.core.compaction import CompactionResult
from ai_contrib.core.outcome import FAILED, SKIPPED, SUCCESS
from ai_contrib.core.outcome import (ConsolidationResult, ExtractionResult, SleepResults,
                                     StepResult)
from ai_contrib.admin.sleep_report import describe_sleep


def test_a_quiet_sleep_says_what_each_step_declined():
    line = describe_sleep(SleepResults(
        entity_consolidation=StepResult(), episodic_prune=StepResult(figures={"pruned": 0}),
        pre_compaction_extraction=ExtractionResult.skip("disabled"),
        context_compaction=CompactionResult.skip("below threshold (12.0% < 70%)", "sleep"),
        memory_consolidation=ConsolidationResult(SKIPPED, reason="Mem0 off"),
    ))
    assert line == ("compaction skipped (below threshold (12.0% < 70%)); "
                    "no fact extraction (disabled); Mem0 off")


def test_a_busy_sleep_gives_its_figures_and_failures():
    line = describe_sleep(SleepResults(
        entity_consolidation=StepResult.fail("bad profile"),
        episodic_prune=StepResult(figures={"pruned": 2}),
        pre_compaction_extraction=ExtractionResult(FAILED, error="LLMError: down",
                                                   facts_recorded=2, observations_recorded=1),
        context_compaction=CompactionResult.done(
            "sleep", "summary", compacted_messages=30, original_tokens=900, new_tokens=120,
            reduction_pct=86.666),
        memory_consolidation=ConsolidationResult(SUCCESS, added=3, already_stored=1),
    ), "Marta")
    assert line == (
        "compacted 30 messages, 900 -> 120 tokens (86.7% reduction); "
        "2 fact(s) journaled, 1 observation(s) (extraction failed: LLMError: down); "
        "3 journal entries consolidated into Mem0 (1 already there); "
        "2 journal entries pruned; entity consolidation failed (bad profile)")
    # below the sleep threshold no extraction runs, and a failed consolidation says so
    line = describe_sleep(SleepResults(
        context_compaction=CompactionResult.fail("summary failed: timeout", "sleep"),
        memory_consolidation=ConsolidationResult(FAILED, error="locked"),
    ))
    assert line == ("compaction failed (summary failed: timeout); "
                    "no fact extraction (below the sleep threshold); "
                    "consolidation into Mem0 failed (locked)")


def test_a_refused_summary_and_removed_quotes_are_said():
    refused = CompactionResult.done(
        "sleep", "summary", compacted_messages=30, original_tokens=900, new_tokens=120,
        reduction_pct=86.666, fidelity=0.9, fidelity_replaced=True, model_fidelity=0.4,
        fidelity_reason='quotes that are not their speaker\'s words: "My son" (wren): no one said it')
    line = describe_sleep(SleepResults(
        context_compaction=refused,
        quote_repair=StepResult.of(
            {"checked": 4, "quotes_removed": 3, "summaries": 1, "entries": 2})))
    assert line.startswith(
        "compacted 30 messages, 900 -> 120 tokens (86.7% reduction), the model's summary "
        "refused (quotes that are not their speaker's words: \"My son\" (wren): no one said it)"
        " and an extract used; ")
    assert line.endswith("3 quote(s) no one said removed (1 summaries, 2 journal entries)")
    # control: a summary kept and nothing to repair say nothing of either
    kept = CompactionResult.done("sleep", "summary", compacted_messages=30, original_tokens=900,
                                 new_tokens=120, reduction_pct=86.666, fidelity=0.9,
                                 fidelity_replaced=False)
    line = describe_sleep(SleepResults(context_compaction=kept,
                                       quote_repair=StepResult.of(
                                           {"checked": 0, "quotes_removed": 0})))
    assert "refused" not in line and "quote" not in line
    # a summary the server did not write in time has no score of its own: not used, not refused
    late = CompactionResult.done(
        "sleep", "summary", compacted_messages=30, original_tokens=900, new_tokens=120,
        reduction_pct=86.666, fidelity=0.9, fidelity_replaced=True, model_fidelity=None,
        fidelity_reason="the summary was not written in time (no response within 300 s)")
    line = describe_sleep(SleepResults(context_compaction=late))
    assert ("the model's summary not used (the summary was not written in time (no response "
            "within 300 s)) and an extract used") in line
    assert "refused" not in line


def test_a_sleep_cut_short_before_its_work_says_what_woke_the_npc():
    assert describe_sleep(None) == "woke before the sleep work started: nothing done"
    line = describe_sleep(None, "Marta", woken="B|rob speaks")
    assert line == "woke before the sleep work started (B\u00a6rob speaks): nothing done"
