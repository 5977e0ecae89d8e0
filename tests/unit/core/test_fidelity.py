"""The pure summary-fidelity scorer and the extractive summary (ai_contrib.core.fidelity)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.core.fidelity import (
    MAX_UNSUPPORTED,
    extractive_summary,
    fact_problem,
    same_fact,
    score_summary,
    source_text,
    speakers_of,
    unsupported_share,
)
from ai_contrib.core.summary import make_marker
from ai_contrib.memory.importance import heuristic_importance
from tests.support.conversations import TAVERN

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


def test_a_number_written_as_a_word_is_checked_like_one_in_figures():
    # the source says 10 silver: "twenty" is as unsupported as "20", "ten" as supported as "10"
    assert fact_problem("Bob pays Marta twenty silver now.", SOURCE) == fact_problem(
        "Bob pays Marta 20 silver now.", SOURCE) != ""
    assert "20" in fact_problem("Bob pays Marta twenty silver now.", SOURCE)
    assert fact_problem("Bob pays Marta ten silver now.", SOURCE) == ""
    assert not score("Bob wants a room for twelve nights.").passed
    assert score("Bob wants a room for three nights.").passed


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


def test_an_extract_leaves_out_markup_lines_while_the_span_has_others():
    # the embedded model's replies can be markup; an extract taking one (a promise and a
    # number rank it first) beside a few plain lines failed its own junk check, and the
    # compaction with it
    junk = "<pre>| Tom | promised | 3 silver | Friday |</pre>"
    plain = ["Tell me about the old grey mare, Marta.",
             "Tom lost his grey mare Pepper last winter.",
             "The north road was closed by snow for a week.", "Wren paints herons by the river.",
             "The brewer brings ale on market day.", "The east room has a leaking roof."]
    messages = [{"role": "user", "name": "Wren", "content": plain[0]},
                {"role": "assistant", "name": "Marta", "content": junk}]
    messages += [{"role": "user", "name": "Wren", "content": line} for line in plain[1:]]
    source, speakers = source_text(messages), speakers_of(messages)
    text = extractive_summary(messages, 30, heuristic_importance)
    assert text and "<pre>" not in text
    assert score_summary(text, source, speakers).passed
    # positive controls: the junk line beside the extract's best line fails as markup; and a
    # span of nothing else still gives the junk line rather than nothing
    with_junk = f"- Marta said: {junk}\n{text.splitlines()[0]}"  # the extract before
    assert "markup" in score_summary(with_junk, source, speakers).reason
    assert "<pre>" in extractive_summary(messages[1:2], 200, heuristic_importance)


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


TAVERN_MESSAGES = [{"role": r, "name": n, "content": c} for r, n, c in TAVERN]


def tavern_score(text):
    return score_summary(text, source_text(TAVERN_MESSAGES), speakers_of(TAVERN_MESSAGES))


def test_a_summary_that_shares_nothing_with_its_source_fails_without_names_or_numbers():
    unrelated = "Everyone enjoyed pleasant music, dancing and laughter throughout evening."
    assert len(unrelated.split()) == 9
    result = tavern_score(unrelated)
    assert not result.passed
    assert result.unsupported == ()  # no name or number to fail on: its words fail it
    assert "occur in the source" in result.reason and result.score < 0.2
    for other in ("The dragon slept peacefully while knights celebrated victory feast.",
                  "Prices of grain rose sharply after poor harvests across distant kingdoms."):
        assert not tavern_score(other).passed, other
    # with nothing to check at all, a summary whose words are not in the source fails too
    assert "not one of its words" in tavern_score("Yes, yes, oh, ah, hm, um, eh.").reason


def test_faithful_summaries_long_and_short_pass():
    for faithful in (
        "Wren booked a room; Tamsin wants mead.",
        "Wren stays three nights. Tamsin's knife needs sharpening tomorrow.",
        "## Who I Spoke With\n- Wren: rented the east room for three nights, stabling for her "
        "mare; pays twelve silver now, rest on Friday.\n- Tamsin: reserved honey mead for the "
        "harvest feast.\n## Confirmed Facts\n- The Riverton bridge is out; the detour by the "
        "mill takes two days.",
    ):
        result = tavern_score(faithful)
        assert result.passed, (result, faithful)
        assert result.score >= 0.8


def test_the_same_fact_in_other_words_is_one_fact_and_a_different_one_is_not():
    assert same_fact("The Kings road is flooded again.", "The Kings road has been flooded again")
    assert same_fact("the kings road  is flooded again", "The Kings road is still flooded.")
    assert same_fact("Bob owes Marta five silver.", "Bob owes Marta 5 silver")
    # other numbers, a negation, another thing: other facts
    assert not same_fact("Bob owes Marta 5 silver.", "Bob owes Marta 7 silver.")
    assert not same_fact("Bob is married.", "Bob is not married.")
    assert not same_fact("Bob isn't married.", "Bob is married.")
    assert not same_fact("Bob likes ale.", "Bob likes mead.")
    assert not same_fact("Elena lives in Riverwood.", "Bob's sister Elena lives in Riverwood.")
    # the same words, the other way round: the other debt
    assert not same_fact("Bob owes Marta 3 silver.", "Marta owes Bob 3 silver.")
    assert same_fact("Bob owes Marta 3 silver.", "Bob still owes Marta 3 silver.")


_FACT_WORDS = st.sampled_from(
    "Bob Marta Elena road mill ford silver ale stew east room flooded burned owes likes lives "
    "not never 5 7 twelve the is has been again".split())


@settings(max_examples=300, deadline=None)
@given(st.lists(_FACT_WORDS, min_size=1, max_size=10).map(" ".join),
       st.lists(_FACT_WORDS, min_size=1, max_size=10).map(" ".join))
def test_same_fact_is_symmetric_reflexive_and_never_joins_other_numbers(a, b):
    assert same_fact(a, a)
    assert same_fact(a, b) == same_fact(b, a)
    numbers = lambda text: {w for w in text.split() if w in ("5", "7", "twelve")}  # noqa: E731
    if numbers(a) != numbers(b):
        assert not same_fact(a, b)
