"""
The pure parts of ``benchmarks/evening.py``: the walks between the village's places, an NPC's
answer as a player reads it, and one NPC's figures from a server log, the players' outcomes
and the usage polls.
"""

import importlib.util
import re

from ai_contrib.npc.replies import describe_reply
from tests.support.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "bench_evening", ROOT / "benchmarks" / "evening.py")
evening = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(evening)


def test_every_place_is_reached_from_every_other_through_the_crossroads():
    # the exits walked exist: the template's (game_template/world/tavern.py) and the one dug
    template = (ROOT / "game_template" / "world" / "tavern.py").read_text(encoding="utf-8")
    exits = set(re.findall(r'_exit\("\w+", "([^"]+)"', template))
    assert {"tavern", "gate", "out", "crossroads"} <= exits
    dug = next(line for line in evening.BUILD if line.startswith("dig "))
    assert "= guildhall;" in dug and ", out;" in dug
    assert set(evening.EXIT_TO_CROSSROADS) == set(evening.PLACES)
    for here in evening.PLACES:
        assert evening.route(here, here) == []
        for there in set(evening.PLACES) - {here}:
            steps = evening.route(here, there)
            assert steps == [evening.EXIT_TO_CROSSROADS[here], there]
    # each NPC stands in one place
    assert sorted(evening.NPCS) == sorted({"Marta", "Fenwick", "Bram", "Oswin"})


def test_an_answer_is_the_npcs_say_line_a_murmur_to_the_player_or_its_fallback():
    marta = evening.answer_re("Marta", "Wren")
    assert marta.search('Marta says, "Welcome back."')["reply"]
    assert marta.search('Marta says to Wren, "Your room is ready."')["reply"]
    assert marta.search('Marta leans in and murmurs to Hollis and Wren: "Hush."')["reply"]
    assert marta.search("Marta seems lost in thought.")["fallback"]
    # a murmur to others, what the others see of it, and other NPCs' lines are not
    assert marta.search('Marta leans in and murmurs to Hollis: "Hush."') is None
    assert marta.search('Marta leans in and murmurs to Wrenna: "Hush."') is None
    assert marta.search("Marta leans in and murmurs something to Hollis.") is None
    assert marta.search('Fenwick says, "A song?"') is None
    assert marta.search("Fenwick seems lost in thought.") is None


def reply_line(npc, seconds, waited=0.0):
    stats = {"seconds": seconds, "waited": waited,
             "prompt": {"prompt_tokens": 900, "cached_tokens": 850, "generated_tokens": 20}}
    return f"2026-12-05 10:00:00 [..] AI reply {npc}: {describe_reply(stats)}"


def test_one_npcs_figures_count_its_own_replies_failures_and_usage_only():
    log = "\n".join([
        *(reply_line("Marta", s) for s in (2.0, 3.0, 4.0, 30.0)),
        reply_line("Marta", 5.0, waited=1.5),
        reply_line("Fenwick", 99.0),
        "2026-12-05 10:00:01 [..] AI Marta: could not answer (timed out); players see ...",
        "2026-12-05 10:00:02 [..] AI Marta: reply failed (2 in a row): timed out",
        "2026-12-05 10:00:03 [..] AI Fenwick: could not answer (timed out); players see ...",
        "2026-12-05 10:00:04 [..] AI Marta: fact extraction failed: timed out",
        "2026-12-05 10:00:04 [..] pre-compaction extraction failed: timed out",
        "2026-12-05 10:00:05 [..] AI cache warm-up Marta by the memory server failed: 400",
        "2026-12-05 10:00:06 [..] AI cache warm-up Fenwick failed: timed out",
    ])
    outcomes = evening.Outcomes()
    outcomes.add("Marta", "reply", 2.2)
    outcomes.add("Marta", "timeout", 180)
    outcomes.add("Fenwick", "fallback", 60)
    samples = [(0, {"Marta": 0.5, "Fenwick": 0.9}, 1.0), (30, {"Marta": 1.1}, 2.0),
               (None, {"Marta": 0.6}, 1.5)]
    marta = evening.npc_figures(log, "Marta", outcomes, samples)
    assert (marta["replies"], marta["median_s"], marta["max_s"]) == (5, 4.0, 30.0)
    assert marta["p95_s"] == 30.0 and marta["p95_over_median"] == 7.5
    assert (marta["fallbacks"], marta["heard_fallbacks"], marta["timeouts"]) == (2, 0, 1)
    assert (marta["extraction_failures"], marta["warmup_failures"]) == (1, 1)
    assert (marta["peak_usage"], marta["final_usage"]) == (1.1, 0.6)
    assert (marta["waited"], marta["max_wait_s"]) == (1, 1.5)
    fenwick = evening.npc_figures(log, "Fenwick", outcomes, samples)
    assert (fenwick["replies"], fenwick["fallbacks"], fenwick["heard_fallbacks"]) == (1, 1, 1)
    assert (fenwick["extraction_failures"], fenwick["warmup_failures"]) == (0, 1)
    assert fenwick["peak_usage"] == fenwick["final_usage"] == 0.9
    rows = {"Marta": marta, "Fenwick": fenwick}
    everyone = evening.totals(rows, log, outcomes, samples)
    assert (everyone["replies"], everyone["fallbacks"], everyone["max_s"]) == (6, 3, 99.0)
    assert everyone["extraction_failures"] == 2  # Marta's and the one that names no NPC
    assert everyone["peak_usage"] == 1.1 and everyone["lines"] == 3
