"""
The one outcome shape of memory work (ai_contrib/core/outcome.py): a compaction, a fact
extraction and a Mem0 consolidation that decline to run all say so as ``skipped`` with a
``reason``, and each becomes its documented dict only through ``as_dict``.
"""

from ai_contrib.core.compaction import CompactionResult
from ai_contrib.core.outcome import (
    FAILED,
    SKIPPED,
    SUCCESS,
    ConsolidationResult,
    ExtractionResult,
    SleepResults,
    StepResult,
)


def test_every_kind_of_result_declines_the_same_way():
    declined = [CompactionResult.skip("compaction disabled", "sleep"),
                ExtractionResult.skip("disabled"),
                ConsolidationResult(SKIPPED, reason="Mem0 off")]
    assert [(r.skipped, r.success, r.failed) for r in declined] == [(True, False, False)] * 3
    assert [r.reason for r in declined] == ["compaction disabled", "disabled", "Mem0 off"]
    ran = [CompactionResult.done("sleep", "summary"), ExtractionResult(SUCCESS),
           ConsolidationResult(SUCCESS, added=2)]
    assert [(r.skipped, r.success, r.failed) for r in ran] == [(False, True, False)] * 3
    broke = [CompactionResult.fail("boom", "sleep"), ExtractionResult(FAILED, error="boom"),
             ConsolidationResult(FAILED, error="boom")]
    assert [(r.skipped, r.failed, r.error) for r in broke] == [(False, True, "boom")] * 3


def test_extraction_results_keep_their_documented_dicts():
    assert ExtractionResult.skip("already running").as_dict() == {
        "success": True, "skipped": True, "reason": "already running", "facts_recorded": 0,
        "iterations": 0, "stopped_by": None}
    ran = ExtractionResult(SUCCESS, read_ids=["a", "b"], facts_recorded=1,
                           observations_recorded=2, iterations=3, stopped_by="noop",
                           entry_ids=["j1"], modes=["structured"], facts_replaced=1)
    assert ran.as_dict() == {
        "success": True, "read_ids": ["a", "b"], "facts_recorded": 1,
        "observations_recorded": 2, "iterations": 3, "stopped_by": "noop",
        "entry_ids": ["j1"], "modes": ["structured"], "facts_replaced": 1,
        "facts_rejected": 0}
    failed = ExtractionResult(FAILED, error="LLMError: down", facts_recorded=1, iterations=2,
                              stopped_by="error", entry_ids=["j1"], facts_rejected=2)
    assert failed.as_dict() == {
        "success": False, "error": "LLMError: down", "facts_recorded": 1,
        "observations_recorded": 0, "iterations": 2, "stopped_by": "error",
        "entry_ids": ["j1"], "facts_replaced": 0, "facts_rejected": 2}


def test_consolidation_results_keep_their_documented_dicts():
    assert ConsolidationResult(SKIPPED, reason="Mem0 off").as_dict() == {
        "success": True, "added": 0, "skipped": 0, "disabled": True}
    assert ConsolidationResult(SUCCESS, added=2, already_stored=1).as_dict() == {
        "success": True, "added": 2, "skipped": 1}
    assert ConsolidationResult(FAILED, error="locked").as_dict() == {
        "success": False, "added": 0, "skipped": 0, "error": "locked"}


def test_a_sleep_phase_lists_the_steps_it_ran_as_dicts():
    results = SleepResults(
        entity_consolidation=StepResult.of({"merged": 0}),
        episodic_prune=StepResult.of({"pruned": 1}),
        context_compaction=CompactionResult.skip("below threshold", "sleep"),
        memory_consolidation=ConsolidationResult(SUCCESS, added=1),
    )
    stored = results.as_dict()
    # the extraction did not run: no key for it (the steps run keep their order)
    assert list(stored) == ["entity_consolidation", "episodic_prune", "context_compaction",
                            "memory_consolidation"]
    assert stored["context_compaction"] == {"skipped": True, "reason": "below threshold",
                                            "trigger": "sleep"}
    assert stored["memory_consolidation"] == {"success": True, "added": 1, "skipped": 0}
    assert stored["episodic_prune"] == {"pruned": 1}


def test_a_housekeeping_step_reads_as_one_record_whatever_its_function_returned():
    ran = StepResult.of({"success": True, "received": 2, "peers": 1, "networks": ["inn"]})
    assert ran.success and not ran.skipped and ran.count("received") == 2
    assert ran.count("absent") == 0
    assert ran.as_dict() == {"received": 2, "peers": 1, "networks": ["inn"]}
    declined = StepResult.of({"success": True, "skipped": True, "reason": "gossip is off"})
    assert declined.skipped and not declined.success and declined.reason == "gossip is off"
    assert declined.as_dict() == {"success": True, "skipped": True, "reason": "gossip is off"}
    broke = StepResult.of({"success": False, "error": "locked"})
    assert broke.failed and broke.error == "locked" and not broke.skipped
    assert broke.as_dict() == {"success": False, "error": "locked"}
    assert StepResult.fail(ValueError("bad")).error == "bad"
    assert StepResult.of(3).count("embedded") == 3  # archived lines given vectors
    assert StepResult.of(ran) is ran and StepResult.of(None).figures == {}
    # a count of things a step skipped is one of its figures, not a skip
    counted = StepResult.of({"added": 1, "skipped": 2})
    assert counted.success and counted.count("skipped") == 2
