"""
The pure parts of ``benchmarks/retrieval_recall.py``'s placement report: where an evidence turn
ends up among the shipped ranking's candidates and note, and the shares by place.
"""

import importlib.util

from ai_contrib.memory.retrieval import RetrievalOptions
from tests.support.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "bench_retrieval_recall", ROOT / "benchmarks" / "retrieval_recall.py")
recall = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(recall)


def fused(*scores):
    """Message candidates ``D1:1``, ``D1:2``... with these fused scores, best first."""
    return [{"key": f"a:D1:{i}", "kind": "message", "score": score,
             "metadata": {"id": f"D1:{i}"}} for i, score in enumerate(scores, start=1)]


def test_a_turn_is_never_a_candidate_kept_or_cut_by_the_item_limit_first():
    ranked = fused(1.0, 0.9, 0.8, 0.2)
    options = RetrievalOptions(max_items=2, min_relative_score=0.3)
    chosen = {"a:D1:1", "a:D1:2"}
    assert recall.note_place(ranked, chosen, "D9:9", options) == ("never", None)
    assert recall.note_place(ranked, chosen, "D1:2", options) == ("kept", 2)
    # the note was full when these came: the item limit, even under the relative score
    assert recall.note_place(ranked, chosen, "D1:3", options) == ("items", 3)
    assert recall.note_place(ranked, chosen, "D1:4", options) == ("items", 4)


def test_a_turn_left_out_of_a_note_not_full_is_under_the_score_or_over_the_budget():
    ranked = fused(1.0, 0.9, 0.8, 0.2)
    options = RetrievalOptions(max_items=30, min_relative_score=0.3)
    chosen = {"a:D1:1", "a:D1:3"}  # D1:2 did not fit the tokens left
    assert recall.note_place(ranked, chosen, "D1:2", options) == ("budget", 2)
    assert recall.note_place(ranked, chosen, "D1:4", options) == ("score", 4)


def test_the_summary_gives_shares_of_turns_and_the_median_rank_of_those_cut():
    rows = [("never", None), ("items", 40), ("items", 50), ("items", 70), ("kept", 1)]
    summary = recall.placement_summary(rows)
    assert summary["turns"] == 5
    assert summary["never"] == 0.2 and summary["items"] == 0.6 and summary["kept"] == 0.2
    assert summary["score"] == summary["budget"] == 0.0
    assert summary["items_median_rank"] == 50
    assert recall.placement_summary([])["items_median_rank"] is None
