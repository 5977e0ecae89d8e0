"""The one-line fact check and the language check (ai_contrib.core.grounding, core.language)."""

from ai_contrib.core.fidelity import fact_problem, source_text
from ai_contrib.core.grounding import (
    SourceLine,
    MIN_LINE_SUPPORT,
    attributed_line,
    check_fact,
    check_summary,
    fact_support,
    line_entity,
    source_lines,
)
from ai_contrib.core.language import guess_language, language_problem

# a conversation written for these tests, in the manner of the ones the failures came from
TALK = [
    ("Caroline", "I went to a support group yesterday and it was so powerful."),
    ("Melanie", "Wow, that's cool, Caroline! You'd be a great counselor, you know."),
    ("Caroline", "Thanks! I'm keen on counseling or working in mental health."),
    ("Melanie", "Yep, Caroline. Taking care of ourselves is vital. I'm off to go swimming "
                "with the kids."),
    ("Caroline", "Have fun! You're so lucky to have them, they love you."),
    ("Melanie", "I'm so grateful for them. The projector at school broke, room 34."),
]
MESSAGES = [{"role": "user", "name": n, "content": c} for n, c in TALK]
LINES = source_lines(MESSAGES)


def test_the_measured_failures_pass_the_word_check_but_not_the_line_check():
    failures = ("Caroline is a hero! She's taking care of herself and her kids.",
                "You're so lucky to have them! They'll be your secret love.",
                "El nombre del proyector es el 34 y la escuela es muy grande.")
    for fact in failures[:2]:
        assert fact_problem(fact, source_text(MESSAGES)) == "", fact  # the old check let it by
    for fact in failures:
        assert not check_fact(fact, LINES).passed, fact
    assert "names no one" in check_fact(failures[1], LINES).reason
    assert "one line" in check_fact(failures[0], LINES).reason
    # control: what one line says passes, in other words and about the addressee too
    for fact in ("Caroline went to a support group yesterday.",
                 "Caroline is keen on counseling or mental health.",
                 "Melanie thinks Caroline would be a great counselor.",
                 "The projector at school broke in room 34."):
        verdict = check_fact(fact, LINES)
        assert verdict.passed, (fact, verdict)
        assert verdict.support >= MIN_LINE_SUPPORT


def test_the_subject_must_be_in_the_line_that_says_it():
    assert check_fact("Melanie goes swimming with the kids.", LINES).passed
    swapped = check_fact("Caroline is so grateful for them.", LINES)  # Melanie said it
    assert not swapped.passed and swapped.support < MIN_LINE_SUPPORT


def test_invented_names_and_numbers_fail_and_every_sentence_counts():
    assert "does not mention" in check_fact("Gandalf went to the support group.", LINES).reason
    assert "does not mention" in check_fact("The projector broke in room 35.", LINES).reason
    # a name the conversation never said opens a later sentence, a clause or an observation
    for invented in ("Caroline went to a support group. Gandalf went too.",
                     "Caroline went to a support group; Gandalf went too.",
                     "Caroline: Gandalf went to a support group."):
        assert "gandalf" in check_fact(invented, LINES).reason, invented
    assert check_fact("Caroline went to a support group.", LINES).passed  # control
    one, _ = fact_support("Caroline went to a support group.", LINES)
    two, _ = fact_support("Caroline went to a support group. She is a hero.", LINES)
    assert one == 1.0 and two < MIN_LINE_SUPPORT


def test_the_best_line_is_quoted_attributed():
    verdict = check_fact("Caroline is a hero! She is keen on mental health.", LINES)
    assert not verdict.passed and verdict.line is not None
    assert attributed_line(LINES[verdict.line]).startswith("Caroline said: ")
    assert LINES[verdict.line].index == verdict.line  # one line per message here


def test_language():
    assert guess_language("El nombre del proyector es el 34 y la escuela es muy grande.") == "es"
    assert guess_language(source_text(MESSAGES)) == "en"
    assert guess_language("Bob owes Marta.") is None  # too short to tell
    assert language_problem("El nombre del proyector es el 34 y la escuela es grande.",
                            source_text(MESSAGES)).startswith("written in es")
    assert language_problem("The projector broke and it was in room 34 at the school.",
                            source_text(MESSAGES)) == ""


def test_a_summary_must_say_what_its_lines_say():
    kept = check_summary("Caroline went to a support group. Melanie went swimming with the kids.",
                         LINES)
    assert kept.passed and kept.support == 1.0
    for bad in ("I'm so grateful to be your amazing friend, Caroline.",
                "El nombre del proyector es el 34 y la escuela es muy grande."):
        assert not check_summary(bad, LINES).passed, bad


def test_a_summary_names_and_numbers_only_what_was_said_headings_included():
    said = "- Caroline went to a support group.\n- Melanie went swimming with the kids."
    assert check_summary("## Confirmed Facts\n" + said, LINES).passed  # a section heading
    for invented in ("## 10:35 AM\n" + said, "## Caroline and Dora\n" + said,
                     said + "\n- The projector broke in room 35."):
        verdict = check_summary(invented, LINES)
        assert not verdict.passed, invented
        assert "does not mention" in verdict.reason, verdict.reason
    assert check_summary(said + "\n- The projector broke in room 34.", LINES).passed


def test_words_given_as_someone_s_must_be_theirs():
    line = "I went to a support group yesterday and it was so powerful."
    assert check_summary(f"- Caroline said: {line}", LINES).passed
    verdict = check_summary(f"- Melanie said: {line}", LINES)
    assert not verdict.passed and verdict.support == 0.0, verdict
    # "I" (the NPC) names no one: any line may support it
    assert check_summary(f"- I said: {line}", LINES).passed
    # a line of the game's (no speaker's name) is read as the game's
    game = source_lines([{"role": "system", "content": "(Melanie arrives to the tavern.)"}])
    assert check_summary("- The game noted: (Melanie arrives to the tavern.)", game).passed
    assert not check_summary("- Caroline said: Melanie arrives to the tavern.", game).passed


def test_an_observation_is_filed_under_a_name_its_line_uses_or_its_speaker():
    line = SourceLine("Bob", "I think the Sleeping Stag is fine. The mead is good.")
    assert line_entity("Sleeping Stag", line) == "Sleeping Stag"
    assert line_entity("Bob", line) == "Bob"
    for not_a_name in ("I", "The", "I am grateful to have her in my life. I", "Carol", ""):
        assert line_entity(not_a_name, line) == "Bob", not_a_name
    # a name opening the line is a name all the same
    assert line_entity("Carol", SourceLine("Bob", "Carol keeps the keys.")) == "Carol"
