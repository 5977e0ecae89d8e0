"""
The pure gossip rules (``ai_contrib/core/gossip.py``; ``docs/design.md``, "Gossip"): by example,
and as properties over random journals and chains of NPCs: a private fact never passes, hops
never decrease, an audience never widens, a fact reaches an NPC once.
"""

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai_contrib.core.gossip import (
    chain_text,
    gossip_copy,
    heard_from_text,
    learned_in_public,
    may_pass,
    networks,
    select_gossip,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
WREN, TAMSIN, PERRIN = "#10", "#11", "#12"
MAIN = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fact(fid, content, audience, source_type="fact", days=0, **extra):
    entry = {"id": fid, "content": content, "importance": 6, "source_type": source_type,
             "timestamp": (NOW - timedelta(days=days)).isoformat(), "tags": []}
    if audience is not None:
        entry["audience"] = list(audience)
    entry.update(extra)
    return entry


def test_an_npc_never_counts_towards_public():
    marta, tobin = "#5", "#7"
    # Tobin overheard Marta's reply to Wren: Wren and Marta heard it, one of them an NPC
    overheard = fact("f1", "The back door password is heron-gate.", [WREN, marta],
                     speaker="Marta")
    assert learned_in_public(overheard)  # counted as two hearers were it not for the NPC...
    assert not learned_in_public(overheard, npcs={marta, tobin})  # ...it is not public
    assert not may_pass(overheard, NOW, 3, 7, npcs={marta})
    # control: two players and the NPC heard it
    shared = fact("f2", "Breakfast is one copper.", [WREN, TAMSIN, marta], speaker="Marta")
    assert learned_in_public(shared, npcs={marta, tobin})
    assert may_pass(shared, NOW, 3, 7, npcs={marta})


def test_a_fact_never_returns_to_an_npc_it_came_from():
    marta, tobin, bram, hilda = "#5", "#7", "#8", "#9"
    said = fact("f1", "Breakfast is one copper.", [WREN, TAMSIN, marta], speaker="Marta")
    # Tobin journaled Marta's line: never back to Marta, who said it; Bram hears it
    assert select_gossip([said], "Tobin", tobin, [], marta, NOW, 3, 7,
                         receiver_name="Marta") == []
    [copy] = select_gossip([said], "Tobin", tobin, [], bram, NOW, 3, 7, receiver_name="Bram")
    assert copy["chain_ids"] == [tobin] and copy["origin"] == f"{tobin}/f1"
    # a copy Bram passes on: never back to Tobin (its origin) nor to an NPC it went through
    relayed = dict(copy, id="g1", chain_ids=[hilda, tobin])
    for receiver, name in ((tobin, "Tobin"), (hilda, "Hilda")):
        assert select_gossip([relayed], "Bram", bram, [], receiver, NOW, 3, 7,
                             receiver_name=name) == []
    assert len(select_gossip([relayed], "Bram", bram, [], "#20", NOW, 3, 7,
                             receiver_name="Perrin")) == 1


def test_what_was_learned_in_public_by_example():
    public = fact("f1", "The mill burned down.", [WREN, TAMSIN], speaker="Wren")
    alone = fact("f2", "My vault code is 7341.", [WREN], speaker="Wren")
    room = fact("f3", "The fair is on Sunday.", [WREN], speaker="Wren", said_in_public=True)
    assert learned_in_public(public) and learned_in_public(room)
    assert not learned_in_public(alone)
    # derived items and items nobody says who heard never pass
    assert not learned_in_public(fact("s", "Patrons talked.", [WREN, TAMSIN], "compaction"))
    assert not learned_in_public(fact("o", "Wren: tall.", [WREN, TAMSIN], "observation"))
    assert not learned_in_public(fact("a", "The inn opens at dawn.", None))
    assert not learned_in_public(fact("e", "Nobody heard.", []))


def test_a_copy_keeps_the_audience_counts_a_hop_and_names_its_chain():
    source = fact("f1", "The mill burned down.", [TAMSIN, WREN], speaker="Wren", days=1)
    first = gossip_copy(source, "Marta", "#5", NOW)
    assert first["audience"] == [WREN, TAMSIN] and first["hops"] == 1
    assert first["origin"] == "#5/f1" and first["origin_speaker"] == "Wren"
    assert first["heard_from"] == "Marta" and first["chain"] == ["Marta"]
    assert first["said_at"] == source["timestamp"]
    second = gossip_copy(dict(first, id="fact_x"), "Bram", "#6", NOW)
    assert second["origin"] == "#5/f1" and second["hops"] == 2
    assert second["chain"] == ["Marta", "Bram"] and second["origin_speaker"] == "Wren"
    text = heard_from_text("The mill burned down.", second)
    assert text.startswith("you heard from Bram that The mill burned down.")
    assert "Wren said it first, 2026-11-24" in text and "2 hops: Marta, Bram" in text
    assert chain_text(second) == "Wren > Marta > Bram (2 hops)"
    # a first-hand fact is shown as it is
    assert heard_from_text("The mill burned down.", source) == "The mill burned down."
    assert chain_text(source) == ""


def test_hops_and_age_limit_travel():
    source = fact("f1", "The mill burned down.", [TAMSIN, WREN], days=2)
    assert may_pass(source, NOW, max_hops=1, max_age_days=3)
    assert not may_pass(source, NOW, max_hops=1, max_age_days=1)  # too old
    assert not may_pass(dict(source, hops=1), NOW, max_hops=1, max_age_days=3)  # hops spent
    assert not may_pass(source, NOW, max_hops=0, max_age_days=3)
    assert not may_pass(dict(source, timestamp="yesterday"), NOW, 3, 3)  # no readable time


def test_select_gossip_skips_what_the_receiver_holds_or_started():
    public = fact("f1", "The mill burned down.", [TAMSIN, WREN])
    private = fact("f2", "My vault code is 7341.", [WREN])
    back = dict(fact("f3", "Bram's own news.", [TAMSIN, WREN]), origin="#6/f9", hops=1,
                heard_from="Bram", chain=["Bram"])
    copies = select_gossip([public, private, back], "Marta", "#5", [], "#6", NOW, 3, 7)
    # the public fact passes; the private one never; Bram's own fact does not come back to him
    assert [c["content"] for c in copies] == ["The mill burned down."]
    held = [dict(copies[0], id="fact_1")]
    assert select_gossip([public], "Marta", "#5", held, "#6", NOW, 3, 7) == []
    assert len(select_gossip([public, dict(public, id="f4", content="Another.")], "Marta",
                             "#5", [], "#7", NOW, 3, 7, limit=1)) == 1


def test_a_fact_the_receiver_journaled_itself_does_not_come_back_as_gossip():
    # Bram overheard the line Marta was told and journaled it under his own origin
    marta = fact("f1", "The mill burned down.", [TAMSIN, WREN])
    other = fact("f2", "The ferry rope snapped.", [TAMSIN, WREN])
    own = fact("b1", "the mill  burned down", [TAMSIN, WREN])
    copies = select_gossip([marta, other], "Marta", "#5", [own], "#6", NOW, 3, 7)
    assert [c["content"] for c in copies] == ["The ferry rope snapped."]
    # control: without his own entry he hears both; two senders' copies of one line, once
    assert len(select_gossip([marta, other], "Marta", "#5", [], "#6", NOW, 3, 7)) == 2
    twice = dict(marta, id="f3", origin="#7/h1", hops=1, heard_from="Hilda", chain=["Hilda"])
    assert len(select_gossip([marta, twice], "Marta", "#5", [], "#6", NOW, 3, 7)) == 1


def test_networks_from_tags_zone_and_room():
    assert networks(["Guild"], zone="Crossroads", location="#2") == {"tag:guild",
                                                                     "zone:crossroads"}
    assert networks([], zone=None, location="#2") == {"place:#2"}
    assert networks([], zone="crossroads", location="#2", default="location") == {"place:#2"}
    assert networks(["guild"], zone="crossroads", location="#2", default="none") == {"tag:guild"}
    with pytest.raises(ValueError):
        networks([], default="everywhere")


# -- properties ---------------------------------------------------------------------------------

members = st.sampled_from([WREN, TAMSIN, PERRIN, "#13"])
audiences = st.one_of(st.none(), st.lists(members, max_size=4, unique=True))
entries = st.builds(
    lambda i, audience, kind, days, in_public, hops: {
        **fact(f"f{i}", f"fact number {i}", audience, kind, days),
        **({"said_in_public": True} if in_public else {}),
        **({"hops": hops, "origin": f"#9/o{i}", "heard_from": "Oswald", "chain": ["Oswald"]}
           if hops else {}),
    },
    st.integers(0, 10_000), audiences, st.sampled_from(["fact", "compaction", "observation"]),
    st.integers(0, 12), st.booleans(), st.integers(0, 4),
)
journals = st.lists(entries, max_size=12, unique_by=lambda e: e["id"])


def private(entry):
    """The oracle: derived (not a fact), nobody recorded as hearing it (no audience, or an
    empty one: nobody heard all of its lines), or said to the NPC by the speaker alone outside a
    public room."""
    audience = set(entry.get("audience") or ())
    return (entry["source_type"] != "fact" or not audience
            or (len(audience) == 1 and not entry.get("said_in_public")))


@MAIN
@given(journals, st.integers(0, 5), st.integers(0, 10))
def test_private_never_passes_hops_rise_audience_never_widens(journal, max_hops, max_days):
    copies = select_gossip(journal, "Marta", "#5", [], "#6", NOW, max_hops, max_days)
    by_content = {e["content"]: e for e in journal}
    for copy in copies:
        source = by_content[copy["content"]]
        assert not private(source), source
        assert copy["hops"] == int(source.get("hops") or 0) + 1 <= max_hops
        assert copy["audience"] == sorted(source["audience"])  # never wider, never narrower
        assert copy.get("said_in_public", False) == bool(source.get("said_in_public"))
    # every fact that may pass did pass (the rule is not vacuous)
    passable = [e for e in journal if not private(e) and int(e.get("hops") or 0) < max_hops
                and (NOW - datetime.fromisoformat(e["timestamp"])).days <= max_days]
    assert len(copies) == len(passable)


@MAIN
@given(journals, st.integers(1, 6))
def test_a_chain_of_npcs_keeps_every_rule(journal, length):
    """The facts travel Marta -> N1 -> N2 ...: at each step nothing private appears, hops grow
    by one, the audience stays the origin's, and no NPC holds a fact twice."""
    origin = {e["id"]: e for e in journal}
    held = journal
    for step in range(length):
        dbref = f"#{20 + step}"
        copies = select_gossip(held, f"N{step}", f"#{19 + step}" if step else "#5",
                               [], dbref, NOW, 10, 30)
        for copy in copies:
            source_id = copy["origin"].split("/", 1)[1]
            first = origin.get(source_id) or next(
                e for e in journal if e.get("origin") == copy["origin"])
            assert not private(first)
            assert copy["audience"] == sorted(first["audience"])
            assert copy["hops"] == int(first.get("hops") or 0) + step + 1
        again = select_gossip(held, f"N{step}", "#5", copies, dbref, NOW, 10, 30)
        assert again == []  # once held, a fact never arrives twice
        held = [dict(c, id=f"g{i}") for i, c in enumerate(copies)]
