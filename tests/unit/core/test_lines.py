"""
A line to answer (``ai_contrib.core.lines``): speech with a speaker and events with an actor
addressed to the NPC are lines; an overheard line is one not to answer; an event without an
actor, or one only seen, is none; ``core.turns`` reads the same definition.
"""

import time

from ai_contrib.core.lines import EVENT, SPEECH, is_line_to_answer, line_to_answer, speaker_of
from ai_contrib.core.messages import make_message
from ai_contrib.core.turns import unanswered_lines


def event(actor, addressed, kind="give"):
    return make_message("system", "(Wren gives you a key.)", metadata={
        "kind": "event", "event": kind, "actor": actor, "audience": ["#1"],
        "addressed": addressed})


def test_speech_and_a_gift_are_lines_an_unaddressed_event_or_no_actor_is_not():
    said = make_message("user", "Marta, hello.", name="Wren",
                        metadata={"speaker": "#1", "audience": ["#1"], "npc": True})
    line = line_to_answer(said)
    assert (line.kind, line.speaker, line.name, line.text, line.audience, line.from_npc) == (
        SPEECH, "#1", "Wren", "Marta, hello.", ("#1",), True)
    gift = line_to_answer(event("#1", True))
    assert (gift.kind, gift.speaker, gift.event, gift.name) == (EVENT, "#1", "give", None)
    assert is_line_to_answer(said) and is_line_to_answer(event("#1", True))
    assert speaker_of(event("#1", True)) == "#1"
    # not lines: an event without an actor, one only seen, a reply, a user line with no speaker
    for msg in (event(None, True), event("#1", False, "pose"),
                make_message("assistant", "Hello."), make_message("user", "hi")):
        assert line_to_answer(msg) is None and not is_line_to_answer(msg)
        assert speaker_of(msg) is None


def test_an_overheard_line_is_a_line_not_to_answer():
    overheard = make_message("user", "Nice day.", name="Wren",
                             metadata={"speaker": "#1", "addressed": False})
    assert line_to_answer(overheard).addressed is False
    assert not is_line_to_answer(overheard)


def test_turns_queue_a_gift_and_not_an_event_without_an_actor():
    gift, bell = event("#1", True), event(None, True, "bell")
    todo, _ = unanswered_lines([bell, gift], time.time())
    assert [m["id"] for m in todo] == [gift["id"]]
    answer = make_message("assistant", "Thank you.", metadata={"reply_to": [gift["id"]]})
    assert unanswered_lines([bell, gift, answer], time.time()) == ([], [])
