"""The pure summary-fidelity scorer and the extractive summary (ai_contrib.core.fidelity)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.core.fidelity import (
    MAX_UNSUPPORTED,
    extractive_summary,
    fact_problem,
    score_summary,
    source_text,
    speakers_of,
    unsupported_share,
)
from ai_contrib.core.summary import make_marker
from ai_contrib.memory.importance import heuristic_importance

MESSAGES = [
    {"role": "user", "name": "Bob", "content": "I need a room for three nights."},
    {"role": "assistant", "name": "Marta", "content": "A room at the Prancing Goat is 4 silver."},
    {"role": "user", "name": "Bob", "content": "I will pay 10 silver now and 2 on Friday."},
    {"role": "assistant", "name": "Marta", "content": "Lena the cook will bring your stew."},
] * 8
SOURCE = source_text(MESSAGES)
SPEAKERS = speakers_of(MESSAGES)


def score(text):
    return score_summary(text, SOURCE, SPEAKERS)


def test_a_faithful_structured_summary_passes():
    result = score("## Who I Spoke With\n- Bob wants a room for three nights; he pays 10 silver "
                   "now and 2 on Friday.\n- Lena the cook brings his stew.")
    assert result.passed, result
    assert result.unsupported == () and result.unsupported_share == 0.0
    assert result.score > 0.8


def test_the_demo_junk_fails_with_its_unsupported_numbers():
    result = score("Conversation log: --- 10/27 /3984 | #56-[...]")
    assert result.verdict == "fail"
    assert {"27", "3984", "56"} <= set(result.unsupported)
    assert result.unsupported_share > MAX_UNSUPPORTED


def test_invented_names_and_numbers_fail():
    result = score("Bob promised Gandalf 300 gold in Mordor, and he told Marta about it.")
    assert not result.passed
    assert "not in the source" in result.reason
    assert set(result.unsupported) == {"Gandalf", "Mordor", "300"}


def test_number_words_in_the_source_support_digits():
    assert score("Bob wants a room for 3 nights and pays 10 silver.").passed


def test_a_line_in_a_speakers_voice_fails_but_a_bullet_about_them_passes():
    assert "Bob's words" in score("Bob: I need a room for three nights.").reason
    assert "User's words" in score("User: I need a room.").reason
    assert score("- Bob: wants a room for three nights.").passed


def test_markup_junk_fails():
    assert "markup" in score("<tr><td>Bob</td><td>room</td></tr> {{silver}} ||| ====").reason


def test_longer_than_the_source_fails_and_empty_fails():
    short_source = source_text(MESSAGES[:1])
    long = "Bob needs a room for three nights. " * 5
    assert "longer than its source" in score_summary(long, short_source).reason
    assert score("").reason == "empty summary"


def test_absurdly_short_for_a_long_span_fails():
    assert "too short" in score("Room.").reason


def test_unsupported_share_and_fact_problem():
    assert unsupported_share("Bob pays 10 silver.", SOURCE) == (0.0, [])
    share, missing = unsupported_share("Marta owes Gandalf 300 gold.", SOURCE)
    assert share == 1.0 and missing == ["Gandalf", "300"]
    assert fact_problem("Bob will pay 2 silver on Friday.", SOURCE) == ""
    assert "Gandalf" in fact_problem("Marta owes Gandalf 300 gold.", SOURCE)
    assert fact_problem("I am going to have a party tonight with dancing.", SOURCE)
    assert fact_problem("<who did or said what>", SOURCE) == "nothing the conversation says"
    assert fact_problem("{4}", SOURCE)  # a lone number: 4 is in the source, but says nothing


def test_extractive_summary_takes_the_most_important_lines_in_order_within_the_target():
    messages = [
        {"role": "user", "name": "Bob", "content": "Hello there."},
        {"role": "user", "name": "Bob", "content": "I promised Tom 3 silver by Friday."},
        {"role": "assistant", "name": "Marta", "content": "Nice weather."},
        {"role": "user", "name": "Bob", "content": "Lena is allergic to fish, remember that."},
    ]
    text = extractive_summary(messages, 30, heuristic_importance)
    assert text.splitlines() == ["- Bob said: I promised Tom 3 silver by Friday.",
                                 "- Bob said: Lena is allergic to fish, remember that."]
    assert score_summary(text, source_text(messages), speakers_of(messages)).passed
    # a target too small for any whole line: the best line cut at a word
    assert extractive_summary(messages, 6, heuristic_importance).startswith("- Bob said: I")
    assert extractive_summary([], 100, heuristic_importance) == ""


def test_extractive_summary_reads_earlier_summaries_line_by_line():
    marker = make_marker("## Confirmed Facts\n- Bob owes Marta 2 silver.", MESSAGES[:2], 50, 10)
    text = extractive_summary([marker] + MESSAGES[:2], 100, heuristic_importance)
    assert "- Bob owes Marta 2 silver." in text.splitlines()
    assert "Confirmed Facts" not in text


NAMES = st.sampled_from(["Bob", "Marta", "Lena", "Tom", "Old Tom", "Elsa"])
WORDS = st.lists(
    st.one_of(
        st.sampled_from(["room", "silver", "stew", "gate", "wolf", "promise", "tomorrow",
                         "Riverton", "Prancing", "Goat", "allergic", "fish", "the", "and"]),
        st.integers(0, 5000).map(str),
    ),
    min_size=1, max_size=25,
)
MESSAGE = st.builds(
    lambda role, name, words: {"role": role, "name": name, "content": " ".join(words) + "."},
    st.sampled_from(["user", "assistant"]), NAMES, WORDS,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(MESSAGE, min_size=1, max_size=40), st.integers(20, 400))
def test_an_extract_of_the_source_always_passes(messages, target):
    text = extractive_summary(messages, target, heuristic_importance)
    result = score_summary(text, source_text(messages), speakers_of(messages))
    assert result.passed, (result, text)
    assert result.unsupported_share == 0.0


@settings(max_examples=100, deadline=None)
@given(st.lists(MESSAGE, min_size=1, max_size=20), st.text(max_size=300))
def test_the_verdict_is_consistent_and_never_raises(messages, summary):
    result = score_summary(summary, source_text(messages), speakers_of(messages))
    assert 0.0 <= result.score <= 1.0 and 0.0 <= result.unsupported_share <= 1.0
    assert result.passed == (result.reason == "")
    if result.passed:
        assert result.unsupported_share <= MAX_UNSUPPORTED


def test_inline_section_headings_are_not_names():
    result = score("Who I Spoke With: Bob. Confirmed Facts: Bob wants a room.")
    assert result.passed and result.unsupported == (), result
