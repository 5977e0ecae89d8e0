"""
Follow-ups (``ai_contrib.core.follow_ups``, ``docs/design.md``, "Recall notes"): a sentence
that asks to go on with the subject in hand is not what retrieval should look for.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_contrib.core.follow_ups import (
    SUBJECTS_KEPT, follow_up_rest, remember_subject, sentences, turn_subject)


@pytest.mark.parametrize("text", [
    "Can you tell me more about that?", "Tell me more.", "What else comes to mind?",
    "Anything else?", "Go on!", "And then?", "What happened next?", "Like what?",
    "Could you tell me a bit more about her, please?", "So, what else do you remember?",
    "Is there anything more?",
])
def test_a_bare_follow_up_leaves_nothing_to_look_for(text):
    assert follow_up_rest(text) == ""


@pytest.mark.parametrize("text, rest", [
    ("What else comes to mind? When did Wren buy the horse?", "When did Wren buy the horse?"),
    ("When did Wren buy the horse? Tell me more.", "When did Wren buy the horse?"),
    ("Go on. Was it the grey one?", "Was it the grey one?"),
])
def test_a_follow_up_beside_a_question_leaves_the_question(text, rest):
    assert follow_up_rest(text) == rest


@pytest.mark.parametrize("text", [
    "What else did Wren buy?", "Tell me more about the gate.", "Anything else for the horse?",
    "Where did you go on the road?", "How are you?", "",
])
def test_a_sentence_that_names_its_subject_is_not_a_follow_up(text):
    # these name what they ask about: retrieval reads them whole
    assert follow_up_rest(text) is None


def test_a_bare_follow_up_asks_about_the_listeners_last_subject():
    subjects = remember_subject({}, ("#3",), "When did Wren buy the horse?")
    assert turn_subject("Anything else?", subjects, ("#3",)) == \
        ("When did Wren buy the horse?", True)
    # another audience has no subject in hand: its own words are all there is
    # (and the turn follows nothing: the receipt names no subject in hand)
    assert turn_subject("Anything else?", subjects, ("#4",)) == ("Anything else?", False)
    # a line that names its subject is asked as it is
    assert turn_subject("Who shod the horse?", subjects, ("#3",)) == \
        ("Who shod the horse?", False)


def test_subjects_keep_the_newest_audiences():
    subjects = {}
    for n in range(SUBJECTS_KEPT + 5):
        subjects = remember_subject(subjects, (f"#{n}",), f"q{n}")
    assert len(subjects) == SUBJECTS_KEPT
    assert ("#4",) not in subjects and subjects[(f"#{SUBJECTS_KEPT + 4}",)] == \
        f"q{SUBJECTS_KEPT + 4}"
    # the same audience again moves to the newest end instead of taking a second place
    again = remember_subject(subjects, ("#10",), "again")
    assert list(again)[-1] == ("#10",) and len(again) == SUBJECTS_KEPT


@given(st.text(max_size=200))
def test_the_rest_is_made_of_the_turns_own_sentences(text):
    rest = follow_up_rest(text)
    if rest is not None:
        assert set(sentences(rest)) <= set(sentences(text))
