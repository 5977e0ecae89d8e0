"""
Facts by rule from players' lines (``ai_contrib.core.rule_facts``; ``docs/design.md``, "Facts
players said"): what players state about themselves and the world, first person rewritten to
the speaker, grounded in their own line; questions, greetings, small talk and NPCs' lines give
nothing.
"""

from hypothesis import given
from hypothesis import strategies as st

from ai_contrib.core.grounding import SourceLine, check_fact
from ai_contrib.core.rule_facts import RuleFact, line_facts, rule_facts, states_nothing

NAMES = st.sampled_from(["Carol", "Dave", "Bob", "Wren", "Anwen", "Wilfred", "Tamsin", "Hal"])
PLACES = st.sampled_from(["Eastwick", "Hollowmere", "Greyford", "Oakvale", "Stonebridge"])
RELATIVES = st.sampled_from(["sister", "brother", "cousin", "uncle", "daughter", "friend"])
TRADES = st.sampled_from(["blacksmith", "weaver", "drover", "miller", "tanner", "baker"])


def test_the_statements_players_made_in_a_village_become_facts_in_their_words():
    said = [
        ("Carol", "I'm Carol, a weaver from Eastwick", "Carol is a weaver from Eastwick."),
        ("Carol", "my sister Anwen is coming", "Carol's sister Anwen is coming."),
        ("Dave", "I'm Dave, a drover", "Dave is a drover."),
        ("Bob", "my cousin Wilfred is a blacksmith in Hollowmere",
         "Bob's cousin Wilfred is a blacksmith in Hollowmere."),
        ("Bob", "I saw a black bear on the north road",
         "Bob saw a black bear on the north road."),
        ("Dave", "I owe you 3 silver", "Dave owes Marta 3 silver."),
        ("Dave", "I'll bring the iron on Friday", "Dave will bring the iron on Friday."),
        ("Carol", "I live in Hollowmere and I have two daughters.",
         "Carol lives in Hollowmere and Carol has two daughters."),
        ("Dave", "There's a bear on the north road!", "There's a bear on the north road."),
    ]
    for speaker, line, fact in said:
        assert line_facts(line, speaker, "Marta") == [fact], line
        # grounded by construction: the one-line check passes on the line it came from
        assert check_fact(fact, [SourceLine(speaker, line, "Marta")]).passed


def test_small_talk_questions_and_greetings_give_nothing_beside_a_statement_that_does():
    chatter = ["I'm not sure about that.", "How have you been feeling lately?",
               "Hello Marta!", "Thanks, Marta. The stew was lovely.", "I'm a bit tired.",
               "I'm in a hurry.", "I want to see you.", "Give me a room for 2 nights.",
               "You make the best stew in Eastwick.", "Maybe it will rain.",
               "Nice to meet you, I'm Dave."]
    for line in chatter:
        assert line_facts(line, "Dave", "Marta") == [], line
    # positive control: the same small talk around a statement keeps the statement
    mixed = " ".join(chatter[:4]) + " I'm Dave, a drover from Greyford."
    assert line_facts(mixed, "Dave", "Marta") == ["Dave is a drover from Greyford."]


def test_you_and_we_are_left_out_where_the_line_does_not_say_whom_they_mean():
    assert line_facts("I owe you 3 silver.", "Dave") == []  # said to no one known
    assert line_facts("We saw a bear on the north road.", "Dave", "Marta") == []
    # "you" said to more than the listener: not the listener's alone
    for plural in ("you two are", "you both are", "you guys are", "y'all are"):
        assert line_facts(f"It is great that {plural} building a barn for Scout.", "Dave",
                          "Marta") == [], plural
    assert line_facts("It is great that you are building a barn for Scout.", "Dave",
                      "Marta") == ["It is great that Marta is building a barn for Scout."]
    # positive controls: the listener known; the speaker alone
    assert line_facts("I owe you 3 silver.", "Dave", "Marta") == ["Dave owes Marta 3 silver."]
    assert line_facts("I saw a bear on the north road.", "Dave", "Marta") == [
        "Dave saw a bear on the north road."]


@given(NAMES, NAMES, RELATIVES, TRADES, PLACES)
def test_a_relative_stated_is_a_fact_about_the_speaker_and_asked_is_none(
        speaker, name, relative, trade, place):
    line = f"my {relative} {name} is a {trade} in {place}"
    fact = f"{speaker}'s {relative} {name} is a {trade} in {place}."
    assert line_facts(line, speaker, "Marta") == [fact]
    assert check_fact(fact, [SourceLine(speaker, line)]).passed
    # the same words asked are no fact
    assert line_facts(f"Is my {relative} {name} a {trade} in {place}?", speaker, "Marta") == []


@given(NAMES, TRADES, PLACES, st.sampled_from(["I'm", "I am", "My name is"]))
def test_an_introduction_names_the_one_introduced(speaker, trade, place, opening):
    name = "Carol" if speaker != "Carol" else "Hal"
    assert line_facts(f"{opening} {name}, a {trade} from {place}.", speaker, "Marta") == [
        f"{name} is a {trade} from {place}."]
    # one's own name alone says nothing new; another name does (control)
    assert line_facts(f"{opening} {speaker}.", speaker, "Marta") == []
    assert line_facts(f"{opening} {name}.", speaker, "Marta") == [f"{speaker} is {name}."]


@given(NAMES, st.integers(min_value=2, max_value=999),
       st.sampled_from(["silver", "gold", "iron ingots", "coins"]),
       st.sampled_from(["owe", "carry", "need", "have"]))
def test_a_number_in_the_first_person_agrees_with_the_speaker(speaker, n, what, verb):
    line = f"I {verb} {n} {what}."
    verb3 = {"carry": "carries", "have": "has"}.get(verb, verb + "s")
    assert line_facts(line, speaker, "Marta") == [f"{speaker} {verb3} {n} {what}."]
    assert line_facts(f"Do I {verb} {n} {what}?", speaker, "Marta") == []


def test_only_players_lines_are_read_and_each_fact_cites_its_line():
    line = "I saw a black bear on the north road."
    messages = [
        {"role": "assistant", "name": "Marta", "content": line},  # the NPC's own reply
        {"role": "user", "name": "Fenwick", "content": line, "metadata": {"npc": True}},
        {"role": "system", "content": "(Bob sits down.)"},
        {"role": "user", "name": "Bob", "content": "Hello! " + line},
        {"role": "user", "name": "Carol", "content": "I owe you 3 silver.",
         "metadata": {"addressed": False}},  # said to someone else: whom "you" means is unknown
        {"role": "user", "name": "Carol", "content": "I owe you 4 silver."},
    ]
    assert rule_facts(messages, listener="Marta") == [
        RuleFact("Bob saw a black bear on the north road.", 3, 1.0),
        RuleFact("Carol owes Marta 4 silver.", 5, 1.0),
    ]


def test_a_line_that_only_asks_or_greets_states_nothing():
    for line in ("How's the stew tonight?", "Good evening, Marta!", "Thanks!",
                 "Do you have a room? Is the north road safe?"):
        assert states_nothing(line), line
    # positive controls: a statement, alone or after a question
    for line in ("Between us: I am allergic to peanuts.",
                 "Is the east room free? The storm last week kept me away."):
        assert not states_nothing(line), line
