"""
Who of the AI NPCs in a room answers a line (``ai_contrib.core.room_talk``; ``docs/design.md``,
"A room of NPCs"): the pure decision, by example and by property.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.core.room_talk import (
    answerers,
    content_words,
    partner,
    role_overlap,
    to_everyone,
)

MARTA = {"id": "#5", "names": ["Marta"],
         "persona": "You are Marta, the innkeeper. You serve ale, cider and stew."}
HILDA = {"id": "#7", "names": ["Hilda", "the smith"],
         "persona": "You are Hilda, the blacksmith. You work the forge, shoe horses, mend tools."}
OSWALD = {"id": "#12", "names": ["Oswald"],
          "persona": "You are Oswald, a guard of the town watch. You know the gate and curfew."}
ROOM = [MARTA, HILDA, OSWALD]
NOW = 10_000.0


def ask(text, speaker="#1", **kw):
    kw.setdefault("now", NOW)
    return answerers(text, speaker, ROOM, **kw)


def test_lines_to_everyone_are_told_from_lines_that_merely_use_all():
    for line in ("Good evening, everyone!", "hello all", "Evening, all.", "Thanks all!",
                 "Hi everybody", "How are you all?", "Drinks are on me, all!", "Morning folks"):
        assert to_everyone(line), line
    for line in ("Is that all?", "I spent all my gold", "Marta, an ale", "allow me",
                 "Evening.", "tall tales"):
        assert not to_everyone(line), line


def test_role_words_ignore_greetings_and_function_words():
    assert content_words("Good evening, everyone! Is the forge hot?") == {"forge", "hot"}
    assert role_overlap("Is the forge hot?", HILDA["persona"]) == 1
    assert role_overlap("Is the forge hot?", MARTA["persona"]) == 0


def test_a_named_npc_answers_and_a_talk_goes_to_its_target_alone():
    assert ask("Marta, an ale please") == (("#5",), "name")
    assert ask("Play us a tune, the smith") == (("#7",), "name")
    assert ask("Marta and Hilda, a word") == (("#5", "#7"), "name")
    # talk overrides names and conversations
    assert ask("Hilda is slow today", to="#5",
               exchanges={"#7": NOW - 5}) == (("#5",), "talk")
    assert ask("hello", to="#99") == ((), None)  # talked to someone who is no AI NPC here


def test_the_npc_spoken_to_answers_and_one_only_mentioned_does_not():
    # said to Marta, mentioning Hilda: one answer, Marta's
    assert ask("Marta, is Hilda always this quiet?") == (("#5",), "name")
    assert ask("Is Hilda always this quiet, Marta?") == (("#5",), "name")
    # positive control: the same line said to both is answered by both
    assert ask("Marta and Hilda, is Oswald always this quiet?") == (("#5", "#7"), "name")
    # only mentioned: the open conversation goes on with its partner...
    assert ask("Is Hilda always this quiet?", exchanges={"#5": NOW - 5}) == (("#5",),
                                                                              "conversation")
    # ...and with none open, the NPC mentioned answers
    assert ask("Is Hilda always this quiet?") == (("#7",), "name")
    # an NPC's line is answered only by the NPC it speaks to
    assert answerers("Oswald, Hilda shoes horses", "#5", ROOM, from_npc=True) == (("#12",),
                                                                                "name")
    assert answerers("Hilda shoes horses, you know.", "#5", ROOM, from_npc=True) == ((), None)


def test_turning_to_another_npc_ends_the_first_conversation():
    # carol asked Marta, then named Hilda: the record's newest exchange is Hilda's
    exchanges = {"#5": NOW - 30, "#7": NOW - 10}
    assert ask("And how much would that cost?", exchanges=exchanges) == (("#7",),
                                                                         "conversation")
    # the conversation closes after the window; without a name nobody answers
    assert ask("And how much would that cost?", exchanges=exchanges, window=5) == ((), None)
    # another speaker's exchanges are not this one's
    assert ask("And how much would that cost?", speaker="#2") == ((), None)


def test_a_line_to_everyone_gets_exactly_one_fitting_answer():
    # the NPC the speaker spoke to most recently, however long ago
    assert ask("Good evening, everyone!", exchanges={"#12": NOW - 9000, "#5": NOW - 8000},
               window=120) == (("#5",), "everyone")
    # else the one whose role fits the words
    assert ask("Evening all, is the forge still hot?") == (("#7",), "everyone")
    assert ask("Hello everyone, is the gate shut for the curfew?") == (("#12",), "everyone")
    # else the first by dbref
    assert ask("Good evening, everyone!") == (("#5",), "everyone")
    # and never for a line that is not to everyone
    assert ask("Nice weather today.") == ((), None)


def test_an_npc_line_is_answered_only_by_the_npcs_it_names():
    assert answerers("Hilda, he wants a horseshoe", "#5", ROOM, from_npc=True) == (("#7",),
                                                                                   "name")
    # no name: no answer, even to everyone, in a conversation, or for an "always" NPC
    always = [dict(n, always=True) for n in ROOM]
    for line in ("Good evening, everyone!", "And the stew is hot."):
        assert answerers(line, "#5", always, from_npc=True,
                         exchanges={"#7": NOW}, now=NOW) == ((), None)
    # the speaker never answers itself
    assert answerers("Marta, I am Marta", "#5", ROOM, from_npc=True) == ((), None)


def test_a_lone_npc_and_always_npcs():
    assert answerers("An ale please.", "#1", [MARTA]) == (("#5",), "only")
    room = [MARTA, dict(HILDA, always=True), OSWALD]
    assert answerers("Evening, all.", "#1", room) == (("#7",), "always")
    assert answerers("Marta, an ale", "#1", room) == (("#5", "#7"), "name")


def test_partner_is_the_newest_exchange_within_the_window():
    assert partner({}) == ()
    assert partner({"#5": 1.0, "#7": 3.0}) == ("#7",)
    assert partner({"#5": 3.0, "#7": 3.0}) == ("#5", "#7")
    assert partner({"#5": 3.0}, now=100.0, window=50) == ()
    assert partner({"#5": 60.0}, now=100.0, window=50) == ("#5",)
    assert partner({"#5": 100.0}, now=100.0, window=0) == ()


# -- properties ------------------------------------------------------------------------------

NAMES = ["Marta", "Hilda", "Oswald", "Bram", "Wren"]
npc_sets = st.lists(st.sampled_from(range(len(NAMES))), min_size=1, max_size=5, unique=True)
words = st.lists(st.sampled_from(["ale", "forge", "gate", "hello", "everyone", "all", "and",
                                  "evening", "cost", "?", ",", "Marta", "Hilda", "Oswald",
                                  "Bram", "Wren", "smith"]), max_size=8)


def _room(indices, always=()):
    return [{"id": f"#{10 + i}", "names": [NAMES[i]], "persona": f"You are {NAMES[i]}.",
             "always": i in always} for i in indices]


@settings(max_examples=200, deadline=None)
@given(npc_sets, words, st.dictionaries(st.sampled_from(range(5)), st.floats(0, NOW)),
       st.booleans())
def test_the_decision_is_deterministic_and_only_ever_names_npcs_of_the_room(
        indices, line, seen, from_npc):
    room = _room(indices)
    text = " ".join(line)
    exchanges = {f"#{10 + i}": at for i, at in seen.items()}
    first = answerers(text, "#1", room, exchanges=exchanges, now=NOW, from_npc=from_npc)
    again = answerers(text, "#1", list(reversed(room)), exchanges=dict(exchanges), now=NOW,
                      from_npc=from_npc)
    assert first == again  # the same for every NPC, whatever order it sees the room in
    chosen, reason = first
    assert set(chosen) <= {n["id"] for n in room}
    assert (reason is None) == (not chosen)
    if from_npc:
        assert reason in (None, "name")


@settings(max_examples=200, deadline=None)
@given(npc_sets, words, st.dictionaries(st.sampled_from(range(5)), st.floats(0, NOW)))
def test_a_line_to_everyone_is_answered_by_exactly_one_when_nobody_is_named(
        indices, line, seen):
    room = _room(indices)
    text = "Good evening, everyone! " + " ".join(w for w in line if w not in NAMES)
    exchanges = {f"#{10 + i}": at for i, at in seen.items()}
    chosen, reason = answerers(text, "#1", room, exchanges=exchanges, now=NOW, window=120)
    assert len(chosen) >= 1
    if reason == "everyone":
        assert len(chosen) == 1
    else:  # an open conversation (several NPCs named in the last line) or a lone NPC
        assert reason in ("conversation", "only")


@settings(max_examples=200, deadline=None)
@given(npc_sets, st.sampled_from(range(5)), words)
def test_a_named_npc_always_answers_a_player_and_an_unnamed_npc_in_a_crowd_never_does(
        indices, named, line):
    room = _room(indices)
    text = " ".join(w for w in line if w not in NAMES and w != "smith")
    said = f"{NAMES[named]}, {text}"
    chosen, _ = answerers(said, "#1", room, now=NOW)
    if f"#{10 + named}" in {n["id"] for n in room}:
        assert chosen == (f"#{10 + named}",)
    elif len(room) > 1 and not to_everyone(said):
        assert chosen == ()  # named someone not here, not everyone: nobody in particular
