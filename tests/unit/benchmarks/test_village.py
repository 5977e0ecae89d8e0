"""
The pure parts of ``benchmarks/village.py``: which NPCs a fact can reach, the double's fact
extraction, and the analysis that must count a leaked private fact, a wrong provenance and a
fact outside its network whenever there is one.
"""

import importlib.util
import json

from tests.support.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "bench_village", ROOT / "benchmarks" / "village.py")
village = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(village)


def test_the_hermitage_is_outside_and_tags_and_the_peddler_join_the_rest():
    reached = village.reach(max_hops=3, days=3)
    assert reached["Marta"] >= {"Hilda", "Bram", "Garrow", "Edda", "Nell"}
    assert not reached["Marta"] & {"Sable", "Rook", "Fen"}
    assert reached["Sable"] == {"Rook", "Fen"}
    # one hop only: the mill is reached through the guild Tag or the peddler, not the zone
    one = village.reach(max_hops=1, days=1)
    assert "Garrow" in one["Hilda"] and "Edda" not in one["Hilda"]
    assert "Edda" not in one["Marta"]
    # the peddler holds the mill's zone once she walked there (day 3)
    assert "Edda" in village.reach(max_hops=1, days=3)["Nell"]
    assert "Edda" not in village.reach(max_hops=1, days=2)["Nell"]


def test_facts_are_unique_and_spread_over_days_and_npcs():
    facts = village.assign_facts(village.make_facts(40, 40), tell_days=2)
    assert len({f["tag"] for f in facts}) == len({f["text"] for f in facts}) == 80
    assert sum(f["private"] for f in facts) == 40
    assert {f["day"] for f in facts} == {1, 2}
    assert {f["npc"] for f in facts} == set(village.all_npcs()) - {village.PEDDLER[0]}
    assert all(village.TAG_RE.search(f["text"]).group(1) == f["tag"] for f in facts)


def test_the_double_journals_each_told_line_citing_it_and_nothing_else():
    model = village.VillageModel()
    body = {"tools": [{"type": "function"}], "messages": [
        {"role": "system", "content": "You are Hilda. Record facts. add_journal_entry"},
        {"role": "user", "content": "[7] Ann: Did you hear? The Osprey-04 bell cracked."},
        {"role": "user", "content": "[8] Ann: Hilda, what have you heard about Osprey-04?"},
        {"role": "user", "content": "[9] Ann: Keep it quiet: The Umber-45 well turned bitter."},
    ]}
    behaviour = model(body)
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for c in behaviour.params["calls"]]
    assert calls == [
        ("add_journal_entry", {"content": "The Osprey-04 bell cracked.", "importance": 7,
                               "source": [7]}),
        ("add_journal_entry", {"content": "The Umber-45 well turned bitter.", "importance": 7,
                               "source": [9]}),
    ]
    assert village.npc_of(body) == "Hilda"


def _raw(journals, asks, present):
    stores = {npc: {"journal": entries, "mem0": []} for npc, entries in journals.items()}
    return {"days": [{"day": 1, "stores": stores, "asks": asks}], "present": present,
            "night_requests": [], "sleep_s": []}


def test_the_analysis_counts_leaks_wrong_provenance_and_diffusion():
    facts = village.make_facts(1, 1)
    public, private = facts
    public.update(npc="Marta", day=1)
    private.update(npc="Marta", day=1)
    present = {public["tag"]: ["Marta", "Hilda", "Pip", "Tomas"]}
    heard = {"content": public["text"], "heard_from": "Hilda", "origin_speaker": "Ann",
             "chain": ["Hilda"], "hops": 1}
    asks = [("Bram", public["tag"], f"you heard from Hilda that {public['text']}"),
            ("Edda", public["tag"], "nothing"),
            ("Sable", public["tag"], "nothing"),
            ("Bram", private["tag"], "nothing")]
    clean = village.analyse(_raw({"Bram": [heard]}, asks, present), facts, 3, 1)["days"][0]
    assert clean["inside"] == (1, 2)  # Bram's prompt had it, Edda's did not
    assert clean["gossip_only"] == (1, 2)
    assert clean["inside_memory"] == (1, 2)
    assert clean["outside"] == (0, 1)
    assert clean["private_others"] == (0, 1)
    assert (clean["store_leaks"], clean["provenance_errors"]) == ([], [])
    # the same night with a leaked private fact, a chain that did not start with a first-hand
    # hearer, and the fact in the hermitage's prompt: each is counted
    leaked = {"content": private["text"], "heard_from": "Marta", "origin_speaker": "Ann",
              "chain": ["Marta"], "hops": 1}
    forged = dict(heard, chain=["Bram"], heard_from="Bram", origin_speaker="Bo")
    asks[2] = ("Sable", public["tag"], public["text"])
    bad = village.analyse(_raw({"Bram": [heard, leaked], "Edda": [forged]}, asks, present),
                          facts, 3, 1)["days"][0]
    assert bad["store_leaks"] == [("Bram", "journal", private["tag"])]
    assert [e[0] for e in bad["provenance_errors"]] == ["Edda"]
    assert bad["outside"] == (1, 1)
