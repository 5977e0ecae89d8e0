"""
The pure lore core (``ai_contrib.core.lore``; ``docs/design.md``, "Lore and pins"): whole-word
case-insensitive keys and phrases, constant entries, conditions that never leak, the budget,
the ranking, and entries refused with a clear message.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai_contrib.core.lore import (
    build_index,
    format_lore,
    key_found,
    match_lore,
    may_know,
    npc_scopes,
    parse_entry,
    parse_keys,
    withdrawn_reason,
    words,
)


def count(text):
    """One token per word: tests can size the budget by eye."""
    return len(text.split())


def entry(entry_id, text, keys=(), condition=None, priority=0, constant=False):
    return parse_entry({"id": entry_id, "text": text, "keys": list(keys), "condition": condition,
                        "priority": priority, "constant": constant}, "tests.lore")


MARTA = {"name": "Marta", "dbref": "#5", "tags": [("innkeeper", "staff")],
         "location": "The Sleeping Stag", "location_dbref": "#4", "zones": ["crossroads"]}
GUARD = {"name": "Bram", "dbref": "#9", "tags": [("watch", "faction"), ("armed", None)],
         "location": "Gate", "location_dbref": "#2", "zones": ["crossroads"]}


def ids(result, part="chosen"):
    return [item["id"] for item in result[part]]


def match(entries, facts, texts, budget=1000):
    return match_lore(build_index(entries), facts, texts, budget, count)


class TestKeys:
    def test_whole_words_in_any_case(self):
        ale = entry("ale", "Ale is 2 copper.", ["ale"])
        assert ids(match([ale], MARTA, ["Some ALE, please!"])) == ["ale"]
        assert ids(match([ale], MARTA, ["ale"])) == ["ale"]
        # inside other words: not a match
        assert ids(match([ale], MARTA, ["a sale of aleph wines, stale"])) == []

    def test_phrases_need_their_words_in_a_row(self):
        east = entry("east", "The east room has a hearth.", ["east room"])
        assert ids(match([east], MARTA, ["Is the East   room free?"])) == ["east"]
        assert ids(match([east], MARTA, ["the room to the east"])) == []
        assert ids(match([east], MARTA, ["east-room"])) == ["east"]  # punctuation separates
        assert match([east], MARTA, ["the east room"])["chosen"][0]["key"] == "east room"

    @pytest.mark.parametrize("key", ["(a+)+$", "^griffin$", "a{1,99999}", "a.b", "x|y",
                                     "[abc]", "gr*ffin", "griffin?", "back\\slash"])
    def test_a_key_that_looks_like_a_pattern_is_refused_never_rewritten(self, key):
        with pytest.raises(ValueError, match="not a plain word or phrase"):
            parse_keys([key])
        with pytest.raises(ValueError, match="never patterns"):
            entry("p", "Patterned.", [key])
        # positive control: the same entry with a plain key is stored as written
        assert entry("p", "Plain.", ["griffin"])["keys"] == ["griffin"]

    def test_plain_words_and_phrases_are_accepted(self):
        keys = parse_keys(["Griffin", "east  room", "ale-house", "Marta's ale", "room 12",
                           "snake_eyes", "Ælfric"])
        assert keys == ["griffin", "east room", "ale house", "marta s ale", "room 12",
                        "snake_eyes", "ælfric"]
        # a comma separates keys in a string: "a{1,99999}" is two keys, the first refused
        with pytest.raises(ValueError, match="'a\\{1' is not a plain word"):
            parse_keys("a{1,99999}")

    def test_matching_a_plain_key_is_linear_whatever_the_text(self):
        star = entry("star", "Starry.", ["x y"])
        assert ids(match([star], MARTA, ["x" * 5000 + "z"])) == []
        assert ids(match([star], MARTA, ["(x) y"])) == ["star"]

    def test_the_trigger_is_the_first_key_found(self):
        drinks = entry("drinks", "Cider is 3 copper.", ["cider", "ale"])
        chosen = match([drinks], MARTA, ["ale or cider?"])["chosen"]
        assert [(c["id"], c["key"]) for c in chosen] == [("drinks", "ale")]

    def test_every_text_is_scanned(self):
        ale = entry("ale", "Ale is 2 copper.", ["ale"])
        assert ids(match([ale], MARTA, ["hello", "the ale was good"])) == ["ale"]
        assert ids(match([ale], MARTA, ["hello", "goodbye"])) == []

    def test_words(self):
        assert words("Hello, Marta's ALE-house!") == ["hello", "marta", "s", "ale", "house"]
        assert key_found(entry("a", "t", ["ale house"]), ["an Ale house"]) == "ale house"
        assert key_found(entry("a", "t", ["ale house"]), ["a house of ale"]) is None


class TestWithdrawn:
    """A keyed entry shown earlier, checked against the store as it is now."""

    def test_an_entry_stands_while_the_store_gives_it_to_that_npc(self):
        griffin = entry("griffin", "A griffin nests on the bell tower.", ["griffin"])
        shown = format_lore([griffin])
        scopes = npc_scopes(MARTA)
        index = build_index([griffin])
        assert withdrawn_reason(index, scopes, "griffin", shown, "griffin") is None
        assert withdrawn_reason(build_index([]), scopes, "griffin", shown, "griffin") == "deleted"
        edited = dict(griffin, text="The griffin flew away.")
        assert withdrawn_reason(build_index([edited]), scopes, "griffin", shown, "griffin") \
            == "edited"
        rekeyed = dict(griffin, keys=["tower"])
        assert withdrawn_reason(build_index([rekeyed]), scopes, "griffin", shown, "griffin") \
            == "edited"
        petra = dict(griffin, condition=["npc:petra"])
        assert withdrawn_reason(build_index([petra]), scopes, "griffin", shown, "griffin") \
            == "condition"
        # an NPC that walked out of the room its entry is scoped to
        room = dict(griffin, condition=["location:the goat"])
        inside = npc_scopes(dict(MARTA, location="The Goat"))
        assert withdrawn_reason(build_index([room]), inside, "griffin", shown, "griffin") is None
        outside = npc_scopes(dict(MARTA, location="The Square"))
        assert withdrawn_reason(build_index([room]), outside, "griffin", shown, "griffin") \
            == "condition"


class TestConstant:
    def test_constant_entries_come_without_keys_and_rank_first(self):
        town = entry("town", "This is Hollin.", constant=True)
        ale = entry("ale", "Ale is 2 copper.", ["ale"])
        result = match([ale, town], MARTA, ["ale"])
        assert ids(result) == ["town", "ale"]
        assert result["chosen"][0]["key"] is None and result["chosen"][0]["constant"] is True
        assert ids(match([ale, town], MARTA, ["nothing here"])) == ["town"]


class TestConditions:
    def test_an_excluded_npc_never_gets_the_entry(self):
        curfew = entry("curfew", "The gate closes at ten.", ["curfew"], ["faction:watch"])
        order = entry("order", "The captain's order.", constant=True, condition="faction:watch")
        said = ["when is the curfew?"]
        assert ids(match([curfew, order], GUARD, said)) == ["order", "curfew"]
        assert ids(match([curfew, order], MARTA, said)) == []
        assert match([curfew, order], MARTA, said)["skipped"] == []

    def test_each_kind_of_clause(self):
        said = ["secret"]
        for clause, knows, does_not in (
            ("all", MARTA, None),
            ("npc:marta", MARTA, GUARD),
            ("npc:#9", GUARD, MARTA),
            ("location:the sleeping stag", MARTA, GUARD),
            ("location:#2", GUARD, MARTA),
            ("zone:Crossroads", MARTA, {"name": "Hermit", "zones": ["forest"]}),
            ("tag:armed", GUARD, MARTA),
            ("faction:watch", GUARD, MARTA),
            ("staff:innkeeper", MARTA, GUARD),
        ):
            secret = entry("s", "A secret.", ["secret"], [clause])
            assert ids(match([secret], knows, said)) == ["s"], clause
            if does_not is not None:
                assert ids(match([secret], does_not, said)) == [], clause

    def test_a_tag_with_a_category_is_not_the_bare_tag(self):
        bare = entry("bare", "Bare.", ["x"], ["tag:watch"])
        assert ids(match([bare], GUARD, ["x"])) == []  # Bram's watch Tag has a category
        assert ids(match([bare], {"tags": [("watch", None)]}, ["x"])) == ["bare"]

    def test_any_one_clause_is_enough(self):
        both = entry("both", "Known to two.", ["x"], ["npc:marta", "faction:watch"])
        assert ids(match([both], MARTA, ["x"])) == ["both"]
        assert ids(match([both], GUARD, ["x"])) == ["both"]
        assert ids(match([both], {"name": "Hermit"}, ["x"])) == []
        # chosen once although indexed under two clauses
        assert ids(match([both], {"name": "Marta", "tags": [("watch", "faction")]}, ["x x"])) \
            == ["both"]

    def test_scopes_and_may_know(self):
        scopes = npc_scopes(GUARD)
        assert {"all", "npc:bram", "npc:#9", "location:gate", "location:#2", "zone:crossroads",
                "faction:watch", "tag:armed"} == scopes
        assert may_know(entry("s", "t", ["x"], ["faction:watch"]), GUARD)
        assert not may_know(entry("s", "t", ["x"], ["faction:watch"]), MARTA)


class TestBudgetAndRanking:
    def test_what_does_not_fit_is_skipped_with_the_reason(self):
        long = entry("long", "one two three four five six", ["ale"], priority=5)
        short = entry("short", "one two", ["ale"], priority=1)
        result = match([long, short], MARTA, ["ale"], budget=4)
        assert ids(result) == ["short"]
        assert result["skipped"] == [{"id": "long", "reason": "budget", "tokens": 6,
                                      "key": "ale", "constant": False, "priority": 5}]
        assert ids(match([long, short], MARTA, ["ale"], budget=8)) == ["long", "short"]
        assert ids(match([long, short], MARTA, ["ale"], budget=0), "skipped") == ["long", "short"]

    def test_priority_then_position(self):
        first = entry("first", "a", ["ale"], priority=0)
        later = entry("later", "b", ["stew"], priority=0)
        high = entry("high", "c", ["bread"], priority=3)
        said = ["ale and stew and bread"]
        assert ids(match([later, high, first], MARTA, said)) == ["high", "first", "later"]
        # the turn (first text) before older lines
        assert ids(match([first, later], MARTA, ["stew", "ale"])) == ["later", "first"]

    def test_the_tokens_are_reported(self):
        result = match([entry("a", "one two three", ["x"])], MARTA, ["x"])
        assert result["chosen"] == [{"id": "a", "text": "one two three", "tokens": 3,
                                     "key": "x", "constant": False, "priority": 0}]
        assert format_lore(result["chosen"]) == "WHAT YOU KNOW:\n- one two three"
        assert format_lore([]) == ""


class TestCostDoesNotGrowWithEntries:
    def test_entries_an_npc_may_not_know_are_never_looked_at(self):
        counted = []

        def counting(text):
            counted.append(text)
            return 1

        mine = entry("mine", "mine", ["ale"], ["npc:marta"])
        others = [entry(f"o{i}", f"other {i}", ["ale"], [f"npc:other{i}"]) for i in range(500)]
        index = build_index(others + [mine])
        result = match_lore(index, MARTA, ["ale"], 10, counting)
        assert ids(result) == ["mine"]
        assert counted == ["mine"]  # only the candidate was counted
        partitions = [index.partitions[s] for s in npc_scopes(MARTA) if s in index.partitions]
        assert sum(len(v) for p in partitions for v in p["first"].values()) == 1


class TestRefused:
    @pytest.mark.parametrize("raw, message", [
        ({"id": "a", "text": "t", "keys": [""]}, "empty key"),
        ({"id": "a", "text": "t", "keys": ["  ?!  "]}, "empty key"),
        ({"id": "a", "text": "t", "keys": "ale,,beer"}, "empty key"),
        ({"id": "a", "text": "t"}, "give keys"),
        ({"id": "a", "text": "t", "keys": ["x"], "constant": True}, "constant entry has no keys"),
        ({"id": "a", "text": "  ", "keys": ["x"]}, "text is empty"),
        ({"id": "a", "text": "t" * 2001, "keys": ["x"]}, "at most 2000"),
        ({"id": "a", "text": "t", "keys": ["x"], "condition": ["watch"]}, "expected 'all'"),
        ({"id": "a", "text": "t", "keys": ["x"], "condition": ["npc:"]}, "expected 'all'"),
        ({"id": "a", "text": "t", "keys": ["x"], "priority": "high"}, "whole number"),
        ({"id": "a", "text": "t", "keys": ["x"], "priority": 1.5}, "whole number"),
        ({"id": "a", "text": "t", "keys": ["one two three four five six seven eight nine"]},
         "at most 8"),
        ({"id": "a", "text": "t", "keys": ["x"], "colour": "red"}, "unknown field(s) colour"),
        ({"id": "a", "text": "t", "keys": ["^griffin"]}, "is not a plain word or phrase"),
        ({"id": "9", "text": "t", "keys": ["x"]}, "starting with a letter"),
        ({"text": "t", "keys": ["x"]}, "the id must be"),
        ("not a dict", "must be a dict"),
    ])
    def test_bad_entries_are_refused_with_a_clear_message(self, raw, message):
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_entry(raw, "tests.lore")

    def test_good_entries_are_normalised(self):
        good = parse_entry({"id": "Ale", "text": " Ale. ", "keys": "ALE, East  Room, ale",
                            "condition": "Faction: Watch, npc:Marta", "priority": "4"},
                           "tests.lore")
        assert good == {"id": "ale", "text": "Ale.", "keys": ["ale", "east room"],
                        "constant": False, "condition": ["faction:watch", "npc:marta"],
                        "priority": 4, "source": "tests.lore", "by": None, "at": None}
        assert parse_entry({"id": "b", "text": "t", "constant": True}, "m")["condition"] \
            == ["all"]
        assert parse_entry({"id": "12", "text": "t", "keys": "x"}, "game")["id"] == "12"
        with pytest.raises(ValueError, match="must be a number"):
            parse_entry({"id": "x12", "text": "t", "keys": "x"}, "game")


# -- property: a condition that excludes the NPC is never crossed ---------------------------

VOCAB = ["ale", "curfew", "gate", "bridge", "watch", "marta", "room", "the", "tenth bell"]
CLAUSES = ["all", "npc:marta", "npc:bram", "faction:watch", "tag:armed", "zone:crossroads",
           "zone:forest", "location:gate", "location:#4", "staff:innkeeper"]
NPCS = [MARTA, GUARD, {"name": "Hermit", "zones": ["forest"]}, {}]

entries_strategy = st.lists(
    st.tuples(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=3),
              st.lists(st.sampled_from(CLAUSES), min_size=1, max_size=3),
              st.integers(-3, 3), st.booleans()),
    min_size=1, max_size=12)
said_strategy = st.lists(
    st.one_of(st.text(max_size=80),
              st.lists(st.sampled_from(VOCAB + ["Ale!", "CURFEW?", "x"]), max_size=12)
              .map(" ".join)),
    max_size=4)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries_strategy, said_strategy, st.sampled_from(NPCS), st.integers(0, 40))
def test_no_excluded_entry_is_ever_chosen_or_skipped(raw, said, facts, budget):
    entries = [entry(f"e{i}", f"text {i} " + " ".join(keys), [] if const else keys, clauses,
                     prio, const)
               for i, (keys, clauses, prio, const) in enumerate(raw)]
    result = match(entries, facts, said, budget)
    scopes = npc_scopes(facts)
    by_id = {e["id"]: e for e in entries}
    given_ids = ids(result) + ids(result, "skipped")
    for entry_id in given_ids:
        assert set(by_id[entry_id]["condition"]) & scopes, (entry_id, facts)
    # the oracle, written without the index: every entry the NPC may know and that a key of
    # (or constancy) brings up is either chosen or skipped for the budget, once
    expected = {e["id"] for e in entries if set(e["condition"]) & scopes
                and (e["constant"] or key_found(e, said))}
    assert sorted(given_ids) == sorted(expected)
    assert sum(item["tokens"] for item in result["chosen"]) <= budget
