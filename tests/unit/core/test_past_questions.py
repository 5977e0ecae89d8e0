"""
A question about the past (``ai_contrib.core.past_questions``, ``docs/design.md``, "Recall
notes"): the words of a turn decide whether its reply may take longer for memories.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_contrib.core.past_questions import REASONS, note_seconds, past_question


@pytest.mark.parametrize("text, reason", [
    ("Do you remember where I'm from?", "remember"),
    ("Marta, you told me about a bear last week.", "remember"),
    ("I forgot what you said about the gate.", "remember"),
    ("When did Caroline go to the support group?", "past"),
    ("What did Wren say about the gate?", "past"),
    ("did you see the heron?", "past"),
    ("Who was at the fair", "past"),
    ("What is Caroline's identity?", "name"),
    ("Would Melanie enjoy the song?", "name"),
])
def test_a_question_about_the_past_is_seen(text, reason):
    assert past_question(text) == reason


@pytest.mark.parametrize("text", [
    "How are you today?",
    "Is there a room for tonight?",
    "What do you sell?",
    "Marta, what's on the menu?",  # the NPC's own name asks about nobody
    "Hello Marta!",
    "I would like an ale.",
    "The weather is fine on the north road.",
    "",
])
def test_small_talk_keeps_the_fast_path(text):
    assert past_question(text, own_name="Marta") is None


@pytest.mark.parametrize("text, reason", [
    ("What is Marta's favourite song?", "name"),
    ("When is Marta hosting the harvest feast?", "name"),
    ("How is marta's inn doing?", "name"),
    ("Marta, how are you?", None),
    ("How are you, Marta?", None),
    ("Hey Marta! What's on the menu?", None),
    ("Well, Marta, is there a room?", None),
])
def test_the_npc_named_as_the_subject_of_a_question_is_asked_about(text, reason):
    # the same name, called by (vocative) or asked about: only the second asks about the past
    assert past_question(text, own_name="Marta") == reason


def test_a_name_the_npc_knows_counts_typed_in_lower_case():
    # positive control first: the same question with a known name
    assert past_question("is bram well?", known_names=["Bram"]) == "name"
    assert past_question("is bram well?", known_names=["Wren"]) is None
    assert past_question("is bramble jam sweet?", known_names=["Bram"]) is None  # a whole word


def test_the_question_allowance_is_never_below_the_fast_one():
    assert note_seconds(None, 0.3, 3.0) == 0.3
    assert note_seconds("past", 0.3, 3.0) == 3.0
    assert note_seconds("name", 0.5, 0.1) == 0.5
    assert note_seconds("remember", 0.3, None) is None
    assert note_seconds(None, None, 3.0) is None


@given(st.text(max_size=200), st.lists(st.text(max_size=12), max_size=4))
def test_any_text_gets_a_known_reason_or_none(text, names):
    assert past_question(text, names, "Marta") in REASONS + (None,)
