"""
Whose words a fact may be and who writes the facts (``ai_contrib.core.fact_policy``;
``docs/design.md``, "Facts players said").
"""

from hypothesis import given
from hypothesis import strategies as st

from ai_contrib.core.fact_policy import (
    GROUNDING_MIN_FACTS,
    GROUNDING_WINDOW,
    MAX_UNGROUNDED_SHARE,
    NPC_LINE_MAX_IMPORTANCE,
    capped_importance,
    choose_extractor,
    said_by_npc,
    said_by_player,
    ungrounded_share,
)

REPLY = {"role": "assistant", "name": "Marta", "content": "Awesome night!"}
HEARD_NPC = {"role": "user", "name": "Fenwick", "content": "Ha!", "metadata": {"npc": True}}
PLAYER = {"role": "user", "name": "Bob", "content": "I owe you 3 silver."}
SUMMARY = {"role": "system", "content": "[CONTEXT SUMMARY] Bob owes 3 silver."}


def test_lines_are_told_apart_by_who_said_them():
    assert [said_by_npc(m) for m in (REPLY, HEARD_NPC, PLAYER, SUMMARY)] == [
        True, True, False, False]
    assert [said_by_player(m) for m in (REPLY, HEARD_NPC, PLAYER, SUMMARY)] == [
        False, False, True, False]


@given(st.integers(min_value=1, max_value=10))
def test_importance_is_capped_where_only_npc_lines_stand_behind_an_entry(importance):
    assert capped_importance(importance, [REPLY, HEARD_NPC]) == min(
        importance, NPC_LINE_MAX_IMPORTANCE)
    # positive controls: a player's line among the sources, or no NPC line (a summary)
    assert capped_importance(importance, [REPLY, PLAYER]) == importance
    assert capped_importance(importance, [SUMMARY]) == importance


def test_auto_asks_the_model_until_its_facts_fail_above_the_share():
    failing = [False] * GROUNDING_MIN_FACTS
    assert choose_extractor("auto", failing[:-1]) == "model"  # too few to judge
    assert ungrounded_share(failing[:-1]) is None
    assert choose_extractor("auto", failing) == "rule"
    # a share at the bound is not above it; good facts keep the model (controls)
    half = int(GROUNDING_WINDOW * MAX_UNGROUNDED_SHARE)
    at_bound = [False] * half + [True] * (GROUNDING_WINDOW - half)
    assert ungrounded_share(at_bound) == MAX_UNGROUNDED_SHARE
    assert choose_extractor("auto", at_bound) == "model"
    assert choose_extractor("auto", [True] * GROUNDING_WINDOW) == "model"
    # only the newest outcomes count: a model that got better is asked again
    assert choose_extractor("auto", failing + [True] * GROUNDING_WINDOW) == "model"


def test_the_setting_forces_either_way():
    assert choose_extractor("rule", [True] * GROUNDING_WINDOW) == "rule"
    assert choose_extractor("model", [False] * GROUNDING_WINDOW) == "model"
    assert choose_extractor("Auto ", [False] * GROUNDING_WINDOW) == "rule"


def test_summaries_are_written_by_the_model_until_most_of_its_recent_ones_were_replaced():
    from ai_contrib.core.fidelity import (
        MAX_REPLACED_SHARE,
        SUMMARY_MIN,
        SUMMARY_PROBE_EVERY,
        SUMMARY_WINDOW,
        choose_summary_writer,
    )

    replaced = [False] * SUMMARY_MIN
    assert choose_summary_writer("auto", replaced[:-1]) == "model"  # too few to judge
    assert choose_summary_writer("auto", replaced) == "extract"
    half = int(SUMMARY_WINDOW * MAX_REPLACED_SHARE)
    at_bound = [False] * half + [True] * (SUMMARY_WINDOW - half)
    assert choose_summary_writer("auto", at_bound) == "model"  # at the bound, not above it
    assert choose_summary_writer(None, replaced) == "extract"  # unset reads as auto
    assert choose_summary_writer("model", replaced) == "model"
    assert choose_summary_writer("extract", [True] * SUMMARY_WINDOW) == "extract"
    # only the newest count: a model whose summaries pass again is asked again
    assert choose_summary_writer("auto", replaced + [True] * SUMMARY_WINDOW) == "model"
    # a failing model is still asked for every fifth summary
    assert [choose_summary_writer("auto", replaced, skipped)
            for skipped in range(SUMMARY_PROBE_EVERY)] == ["extract"] * 4 + ["model"]
    assert choose_summary_writer("extract", replaced, SUMMARY_PROBE_EVERY) == "extract"
