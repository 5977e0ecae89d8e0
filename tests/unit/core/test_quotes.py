"""Quotes checked against what their speaker said (ai_contrib.core.quotes)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.core.fidelity import extractive_summary
from ai_contrib.core.quotes import (
    MAX_REPEATS,
    QuoteCheck,
    QuoteFailure,
    check_quotes,
    find_quotes,
    quote_words,
    speaker_lines,
    without_failed_quotes,
)

TALK = [
    ("user", "Bob", "I'll pay you on Friday, I promise."),
    ("assistant", "Marta", "Friday it is. Don't be late!"),
    ("user", "Caroline", "My son got hurt in the car accident last week."),
    ("user", "Bob", "The Kings road is flooded again, take the hill path."),
]
MESSAGES = [{"role": r, "name": n, "content": c} for r, n, c in TALK]
LINES = speaker_lines(MESSAGES)


def test_a_quote_of_a_real_line_passes_in_every_form():
    texts = [
        "- Bob said: I'll pay you on Friday, I promise.",
        "Bob said: \"I'll pay you on Friday, I promise.\"",
        'Bob said "take the hill path" when asked.',
        "Caroline told Marta, \u201cMy son got hurt in the car accident last week.\u201d",
        "Caroline: \"my son got hurt   in the car accident\"",  # case, spacing, part of it
        '"Friday it is," Marta said.',
        '"Don\'t be late!" said Marta.',
        "I said: Friday it is.",  # the NPC's own line
        "Later Bob said: the Kings road is flooded again.",
        "Bob said: \"I'll pay you ... I promise\"",  # an ellipsis joins parts of one line
    ]
    for text in texts:
        check = check_quotes(text, LINES)
        assert len(check.quotes) == 1, text
        assert check.quotes[0].speaker is not None, text
        assert check.passed, (text, check.reason)


def test_an_invented_quote_fails_and_says_why():
    check = check_quotes("Caroline said: \"My brother got hurt in the car accident.\"", LINES)
    assert not check.passed
    assert isinstance(check, QuoteCheck) and isinstance(check.failures[0], QuoteFailure)
    assert check.failures[0].reason == "no one said it"
    assert "My brother got hurt" in check.reason
    # control: the line as she said it passes
    assert check_quotes("Caroline said: \"My son got hurt in the car accident.\"", LINES).passed


def test_a_quote_given_to_the_wrong_speaker_fails():
    check = check_quotes('Bob told Marta, "Don\'t be late!"', LINES)
    assert [f.reason for f in check.failures] == ["Marta's words, not Bob's"]
    assert check_quotes('Marta told Bob, "Don\'t be late!"', LINES).passed  # control


def test_a_paraphrase_in_quote_form_is_not_a_quote():
    assert not check_quotes("- Bob said: I will pay you on Friday, I promise.", LINES).passed
    assert not check_quotes('He said: "the Kings road is closed again"', LINES).passed
    assert check_quotes('He said: "the Kings road is flooded again"', LINES).passed  # control


def test_a_repeated_passage_fails_once_with_its_count():
    line = "- Bob said: \"I'll pay you on Friday\""
    check = check_quotes("\n".join([line] * MAX_REPEATS), LINES)
    assert [f.reason for f in check.failures] == [f"repeated {MAX_REPEATS} times"]
    assert check_quotes("\n".join([line] * (MAX_REPEATS - 1)), LINES).passed  # control


def test_unattributed_quotes_and_labels_that_are_no_speaker_are_not_checked():
    text = 'The inn is called "The Drowned Rat". Note: "bring silver".'
    check = check_quotes(text, LINES)
    assert len(check.quotes) == 2 and check.passed
    # control: the same label form with a speaker of the source is checked
    assert not check_quotes('Bob: "bring silver"', LINES).passed


def test_the_extract_passes_its_own_check():
    extract = extractive_summary(MESSAGES, 500, lambda text: len(text))
    check = check_quotes(extract, LINES)
    assert len(check.quotes) == len(MESSAGES) and check.passed, check.reason


def test_a_transcript_label_echoed_by_the_model_is_its_unnamed_speaker():
    lines = speaker_lines([{"role": "user", "content": "Is the ferry running today?"}])
    assert check_quotes("Player said: Is the ferry running today?", lines).passed
    assert not check_quotes("Player said: Is the ferry late today?", lines).passed  # control


def test_quotes_in_an_earlier_summary_count_as_their_speakers_lines():
    marker = {"role": "system", "content": "[CONTEXT SUMMARY]\n- Gil said: The mill burned.",
              "metadata": {"type": "compaction"}}
    lines = speaker_lines([marker] + MESSAGES)
    assert check_quotes("Gil said: the mill burned", lines).passed
    assert not check_quotes("Gil said: the mill flooded", lines).passed  # control


def test_the_repair_keeps_the_lines_without_a_failed_quote():
    text = ("## Confirmed Facts\n- Bob owes Marta.\n- Caroline said: my brother was hurt.\n"
            "- Bob said: take the hill path.")
    check = check_quotes(text, LINES)
    assert len(check.failures) == 1
    assert without_failed_quotes(text, check) == (
        "## Confirmed Facts\n- Bob owes Marta.\n- Bob said: take the hill path.")
    assert without_failed_quotes("Caroline said: my brother was hurt.", check_quotes(
        "Caroline said: my brother was hurt.", LINES)) == ""


_WORDS = st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=6), min_size=2,
                  max_size=12)


@settings(max_examples=200, deadline=None)
@given(words=_WORDS, data=st.data())
def test_any_contiguous_part_of_a_line_passes_and_a_changed_word_fails(words, data):
    line = " ".join(words).capitalize() + "."
    lines = {"bob": [line]}
    start = data.draw(st.integers(0, len(words) - 1))
    end = data.draw(st.integers(start + 1, len(words)))
    part = " ".join(words[start:end])
    assert check_quotes(f'Bob said: "{part}"', lines).passed
    assert check_quotes(f"- Bob said: {part.upper()}", lines).passed  # case is not a word
    # a word changed to one the line never uses is not what Bob said
    changed = list(words[start:end])
    changed[data.draw(st.integers(0, len(changed) - 1))] = "zzz"
    check = check_quotes(f'Bob said: "{" ".join(changed)}"', lines)
    assert [f.reason for f in check.failures] == ["no one said it"]


def test_find_quotes_reads_offsets_and_words():
    text = 'Intro.\nBob said: "Hi there", then left.'
    [quote] = find_quotes(text)
    assert text[quote.start:quote.end] == '"Hi there"' and quote.speaker == "bob"
    assert quote_words("I'm  HERE, you\u2019re late!") == ("im", "here", "youre", "late")


def test_the_extract_of_lines_that_quote_someone_passes_and_quotes_put_in_a_line_fail():
    messages = [
        {"role": "user", "name": "Wren", "content": '"Hi" Gil said "bye" and left.'},
        {"role": "assistant", "name": "Marta", "content": 'You asked "The Night" to be played.'},
        {"role": "user", "name": "Bob",
         "content": '"Yes." Gil said Mara killed the king, I think.'},
        {"role": "user", "name": "Bob", "content": "Mara told me she killed the king."},
    ]
    lines = speaker_lines(messages)
    extract = extractive_summary(messages, 500, lambda text: len(text))
    # the lines' own quotes are double primes in the extract: Marta's words, not a quote of
    # "you"
    assert "- Marta said: You asked \u2033The Night\u2033 to be played." in extract
    assert check_quotes(extract, lines).passed, check_quotes(extract, lines).reason
    # quote marks put into a real line make quotes no one said: each is checked on its own
    for text, reason in [
        ('- Bob said: "Yes." Gil said "Mara killed the king"', "Bob's words, not Gil's"),
        ('- Bob said: Mara told me "she killed the king"', "Bob's words, not Mara's"),
        ('- Marta said: You asked "The Night" to be played.', "Marta's words, not You's"),
    ]:
        check = check_quotes(text, lines)
        assert reason in [f.reason for f in check.failures], (text, check.reason)


def test_a_passage_repeats_for_its_speaker_however_the_speaker_is_written():
    lines = {"mara": ["I am innocent"], "gil": ["I am innocent"]}
    text = ('Mara said "I am innocent". Then Mara said "I am innocent". '
            'Gil said "I am innocent". Mara said: "I am innocent"')
    assert [f.reason for f in check_quotes(text, lines).failures] == ["repeated 3 times"]
    # control: three speakers who each said it are three claims
    lines["bob"] = ["I am innocent"]
    text = 'Mara said "I am innocent". Gil said "I am innocent". Bob said "I am innocent".'
    assert check_quotes(text, lines).passed


_TOKENS = st.sampled_from([
    "the", "mill", "burned", "You", "said", "told", "Marta", "Gil", "asked", ":", '"', ",",
    ".", "...", "I", "he", "Note", "\u201c", "\u201d", "'", "Bob's", "-", "*", "(", ")",
    "Someone", "The", "Game", '"The Night"', "1", '"Yes"', "\u674e"])
_NAMES = st.one_of(
    st.sampled_from(["Wren", "Marta", "Gil Stone", "", "wren", "The Game", "old tom",
                     "\u00c9lan", "3po", "the innkeeper", "\u674e", ".", "a:"]),
    st.lists(st.text(alphabet="abcz\u00e9\u00c9\u00df.:'", min_size=1, max_size=5),
             min_size=1, max_size=3).map(" ".join))
# words joined with or without a space: players leave them out around quotes ('said"stop"')
_TEXT = st.lists(st.tuples(_TOKENS, st.sampled_from([" ", " ", ""])), min_size=1,
                 max_size=14).map(lambda parts: "".join(word + gap for word, gap in parts))
_LINES = st.lists(st.tuples(st.sampled_from(["user", "assistant", "system"]), _NAMES, _TEXT),
                  min_size=1, max_size=6)


def _messages(talk):
    return [{"role": r, "content": c, **({"name": n} if n else {})} for r, n, c in talk]


@settings(max_examples=300, deadline=None)
@given(earlier=_LINES, talk=_LINES)
def test_the_extract_of_any_talk_passes_its_own_check(earlier, talk):
    # the extract is the span's own lines: whatever the lines quote, it must pass, or a
    # compaction whose model summary failed cannot fall back on it; and so must the extract
    # of a span that starts with an earlier extract (the next compaction)
    messages = _messages(talk)
    extract = extractive_summary(messages, 2000, lambda text: len(text))
    check = check_quotes(extract, speaker_lines(messages))
    assert extract and check.passed, (extract, check.reason)
    marker = {"role": "system", "content": "[CONTEXT SUMMARY]\n" + extractive_summary(
        _messages(earlier), 2000, lambda text: len(text)), "metadata": {"type": "compaction"}}
    span = [marker] + messages
    again = extractive_summary(span, 4000, lambda text: len(text))
    check = check_quotes(again, speaker_lines(span))
    assert check.passed, (again, check.reason)


def test_an_actions_fact_is_not_a_quote_of_the_game_and_the_extracts_game_lines_are():
    # an action's fact tells what the game answered a command: not a line of the talk
    fact = "Marta did: give lantern to Wren. The game said: You give lantern to Wren."
    lines = speaker_lines([{"role": "user", "name": "Wren", "content": "A lantern, please."}])
    assert check_quotes(fact, lines).passed
    # control: the extract's own label of the game's lines is read, and checked
    game = speaker_lines([{"role": "system", "content": "(Wren arrives.)"}])
    assert check_quotes("- The game noted: (Wren arrives.)", game).passed
    assert not check_quotes("- The game noted: (Wren leaves.)", game).passed
