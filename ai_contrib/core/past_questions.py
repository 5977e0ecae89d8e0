"""
Whether a turn asks about the past: the one test that decides how long a reply may spend
evaluating memories it shows for the first time (``docs/design.md``, "Recall notes": a question
about the past gets the time it needs).

Small talk ("How are you?", "A room for tonight?") keeps the fast path, a recall note of at most
``AI_MEMORY_NOTE_SECONDS`` of prompt evaluation; a line that asks about a past event ("What did
Wren say about the gate?"), that says "remember", or that asks about someone by name (the NPC
itself included, named as the subject of the question rather than called by it: "What is Gina's
favourite dance?" asked of Gina, but not "Gina, how are you?") gets
``AI_MEMORY_QUESTION_SECONDS``. The test reads the words of the turn only, so its cost does not
grow with the history or the archive. Pure module: no Evennia, Twisted or Django imports.
"""

from __future__ import annotations

import re

#: words that ask the NPC to remember, whatever the tense ("remember", "you told me")
_REMEMBER = re.compile(
    r"\b(remember\w*|recall\w*|remind\w*|forg[eo]t\w*|memor(?:y|ies)|"
    r"last (?:time|night|week|month|year|summer|winter|spring|autumn|fall)|"
    r"(?:you|i|we|they|he|she) (?:told|said|mentioned|talked|spoke|promised)|"
    r"yesterday|ago|earlier|back then|used to|the other day)\b",
    re.IGNORECASE,
)
#: a question in the past tense: an auxiliary of the past opening the question or a clause
#: ("Did you ...", "When did she ...", "Who was ...", "Have you ever ...")
_PAST_QUESTION = re.compile(
    r"(?:^|[,;:]\s*|\b(?:who|what|when|where|why|how|which)(?:'s)?\s+(?:\w+\s+){0,3})"
    r"(did|was|were|had|have you ever|has \w+ ever|happened)\b",
    re.IGNORECASE,
)
#: question words that open a question without a question mark
_QUESTION_START = re.compile(
    r"^\s*(?:who|what|when|where|why|how|which|whose|did|do|does|is|are|was|were|have|has|can|"
    r"could|would|will|tell me)\b", re.IGNORECASE)
#: a capitalised word: a name when it does not open a sentence
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+(?:'s)?\b")
#: capitalised words that are not names of anyone the NPC could remember
_NOT_NAMES = frozenset({
    "I", "I'm", "I'll", "I've", "I'd", "Mr", "Mrs", "Ms", "Sir", "Madam", "Lady", "Lord", "God",
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "Hello",
    "Hi", "Hey", "Yes", "No", "Please", "Thanks", "Thank", "Oh", "Well", "Ok", "Okay",
})

#: words that may stand before a name the speaker calls someone by ("Hey Gina, ...")
_CALLING = frozenset({"hi", "hey", "hello", "oh", "dear", "ok", "okay", "well", "so", "and",
                      "thanks", "thank you", "good morning", "good evening", "yes", "no"})

#: :func:`past_question`'s reasons, strongest first
REASONS = ("remember", "past", "name")


def _is_question(text):
    return "?" in text or bool(_QUESTION_START.match(text))


def _names_in(text):
    """Capitalised words of ``text`` that do not open a sentence (possessive "'s" dropped)."""
    names = []
    for match in _CAPITALISED.finditer(text):
        before = text[:match.start()].rstrip()
        if not before or before[-1] in ".!?\"'(":
            continue  # opens a sentence: capitalised whatever it is
        word = match.group(0)
        word = word[:-2] if word.endswith("'s") else word
        if word not in _NOT_NAMES:
            names.append(word)
    return names


def _calls(text, start, end):
    """
    Whether the word at ``text[start:end]`` is a vocative: the name the speaker calls the
    listener by ("Gina, how are you?", "How are you, Gina?", "Hey Gina!"), not a name the
    question is about ("What is Gina's dance?", "When is Gina coming?").
    """
    after = text[end:].lstrip()
    if after[:1] not in ("", ",", ":", "!", "?", ".", ";"):
        return False  # a word follows ("Gina's", "Gina hosting"): part of the question
    before = text[:start].rstrip()
    if not before or before[-1] in ",.!?;:(\"'":
        return True
    last = " ".join(before.casefold().split()[-2:])
    return last in _CALLING or last.split()[-1] in _CALLING


def _names_self(text, own_name):
    """Whether ``text`` names the NPC (``own_name``) other than by calling it (:func:`_calls`)."""
    own = " ".join(str(own_name or "").split())
    if not own:
        return False
    for match in re.finditer(rf"(?<!\w){re.escape(own)}(?!\w)", text, re.IGNORECASE):
        if not _calls(text, match.start(), match.end()):
            return True
    return False


def past_question(text, known_names=(), own_name=None) -> str | None:
    """
    Whether the turn ``text`` asks about the past, and why.

    Args:
        text (str): the turn's words (:func:`ai_contrib.core.turns.turn_query`).
        known_names (iterable[str]): names the NPC has observed (its entity profiles), matched
            as whole words, any case: a question naming one asks about them even typed in
            lower case.
        own_name (str, optional): the NPC's name: a question that calls the NPC by it
            (:func:`_calls`) asks about no one, one that names it otherwise asks about the NPC.

    Returns:
        str | None: ``"remember"`` (the turn asks the NPC to remember, or cites what was said),
        ``"past"`` (a question in the past tense), ``"name"`` (a question about someone by
        name), or None for small talk.
    """
    text = " ".join(str(text or "").split())
    if not text:
        return None
    if _REMEMBER.search(text):
        return "remember"
    if not _is_question(text):
        return None
    if _PAST_QUESTION.search(text):
        return "past"
    own = (own_name or "").casefold()
    if any(name.casefold() != own for name in _names_in(text)) or _names_self(text, own_name):
        return "name"
    grams = _word_grams(text)
    for name in known_names or ():
        key = " ".join(_WORD.findall(str(name or "").casefold()))
        if key and key != own and key in grams:
            return "name"
    return None


#: a word of a name or a turn (letters, digits, apostrophes inside)
_WORD = re.compile(r"\w+(?:'\w+)*")
#: the longest name, in words, that :func:`_word_grams` can match
_NAME_WORDS = 4


def _word_grams(text):
    """The runs of 1 to :data:`_NAME_WORDS` words of ``text``, case-folded and joined by one
    space (a possessive "'s" also without it): a known name is then one set lookup, whatever
    the number of names the NPC knows."""
    words = [w[:-2] if w.endswith("'s") else w for w in _WORD.findall(text.casefold())]
    return {" ".join(words[i:i + n]) for n in range(1, _NAME_WORDS + 1)
            for i in range(len(words) - n + 1)}


def note_seconds(reason, fast_seconds, question_seconds) -> float | None:
    """
    Seconds of prompt evaluation a reply may spend on a new recall note: ``question_seconds``
    (``AI_MEMORY_QUESTION_SECONDS``) for a turn :func:`past_question` gave a ``reason`` for,
    else ``fast_seconds`` (``AI_MEMORY_NOTE_SECONDS``); None (no limit) passes through.

    Returns:
        float | None: seconds, or None for no limit.
    """
    if reason is None:
        return fast_seconds
    if question_seconds is None or fast_seconds is None:
        return None
    return max(float(fast_seconds), float(question_seconds))
