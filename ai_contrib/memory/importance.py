"""
Importance of a journal entry on the 1-10 scale the journal uses (1 = trivia, 10 = must never
be forgotten).

Two scorers (``docs/design.md``, "Journal and Mem0"); the ``AI_IMPORTANCE_SCORING`` setting says
when fact extraction uses them (``"model"``: only where the extraction call gives no number;
``"heuristic"``, ``"llm"``: for every fact, that scorer):

- :func:`heuristic_importance`: instant, offline; rewards what NPCs most regret forgetting:
  names (capitalised words), numbers and dates, promises and debts ("I will", "promise",
  "owe"), strong preferences and dangers, and first mentions of someone new.
- :func:`llm_importance`: asks the chat model for one number (Deferred); falls back to the
  heuristic when the reply has no usable number or the call fails.

:func:`score_importance` picks one by the setting and always returns a Deferred.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

_CAPITALISED_RE = re.compile(r"\b([A-Z][a-z][\w'-]*)")
_NUMBER_RE = re.compile(
    r"\b\d+(?:[.,]\d+)?\b|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|"
    r"eleven|twelve|twenty|thirty|forty|fifty|hundred|thousand|dozen)\b",
    re.I,
)
_DATE_RE = re.compile(
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|yesterday|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"next (?:week|month|year)|dawn|dusk|midnight|noon|o'clock|\d{1,2}(?:st|nd|rd|th)|"
    r"\d{1,2}:\d{2}|\d{4}-\d{2}-\d{2})\b",
    re.I,
)
_PROMISE_RE = re.compile(
    r"\b(?:i will|i'll|we will|we'll|promise[sd]?|swear|swore|owe[sd]?|debt|vow(?:ed)?|"
    r"agreed? to|deadline|must|deal|pay(?:s|ing)? (?:back|you)|in exchange)\b",
    re.I,
)
_SALIENT_RE = re.compile(
    r"\b(?:allerg\w*|afraid|fear\w*|hate[sd]?|love[sd]?|favou?rite|never|always|secret\w*|"
    r"danger\w*|died|dead|kill\w*|stole\w*|stolen|married|born|sister|brother|mother|father|"
    r"daughter|son|wife|husband|name is|lives? in|quest|treasure|password|key)\b",
    re.I,
)
_TRIVIAL_RE = re.compile(
    r"^\W*(?:hi|hello|hey|greetings|thanks|thank you|ok|okay|bye|goodbye|yes|no)\b", re.I
)

# Capitalised words that do not name anyone (compared case-folded)
_NOT_NAMES = frozenset(
    word.casefold()
    for word in """I I'm I'll I've I'd The A An This That These Those He She It We They You My Your
    His Her Our Their Its Me Him Them Us Mr Mrs Ms Sir Lady Lord Monday Tuesday Wednesday Thursday
    Friday Saturday Sunday January February March April May June July August September October
    November December Yes No Oh Hello Hi Hey Thanks Okay Ok Well When If After Before Then There
    Here What Who Whom Why How Where Which Please Today Tomorrow Tonight Yesterday Someone Everyone
    Nobody Anyone But And Or So Also Maybe Perhaps Just Not Do Does Did Can Could Would Should
    Will Shall Let Remember Note Be Is Are Was Were Has Have Had Some All Every Each Any One
    Once Now Soon Later Never Always Still Even""".split()
)


def names_in(text) -> list[str]:
    """
    Capitalised words that look like names (not pronouns, articles, weekdays, months or common
    sentence openers), in order of appearance, without duplicates; ``"Bob's"`` gives ``"Bob"``.
    """
    found = []
    for match in _CAPITALISED_RE.finditer(text or ""):
        word = match.group(1)
        if word.endswith("'s"):
            word = word[:-2]
        if word.casefold() in _NOT_NAMES or word in found:
            continue
        found.append(word)
    return found


def heuristic_importance(text, known_names=()) -> int:
    """
    Score a fact 1-10 from its wording alone.

    Scoring (base 3): +1 per name up to +2; +1 for a number; +1 for a date or time; +2 for a
    promise, debt or deadline; +1 for a salient topic (allergy, fear, family, secret, quest);
    +1 if it names someone not in ``known_names`` (a first mention); -2 for a greeting or
    thanks, -1 under four words. Clamped to 1-10.

    Args:
        text (str): the fact.
        known_names (iterable[str] | None): names the NPC already knows (entity profile keys,
            earlier journal entries), compared case-insensitively; ``None`` = unknown, no
            first-mention bonus.

    Returns:
        int: 1-10.
    """
    text = (text or "").strip()
    if not text:
        return 1
    score = 3
    names = names_in(text)
    score += min(len(names), 2)
    if _NUMBER_RE.search(text):
        score += 1
    if _DATE_RE.search(text):
        score += 1
    if _PROMISE_RE.search(text):
        score += 2
    if _SALIENT_RE.search(text):
        score += 1
    if known_names is not None and names:
        known = {str(name).casefold() for name in known_names}
        if any(name.casefold() not in known for name in names):
            score += 1
    if _TRIVIAL_RE.match(text):
        score -= 2
    if len(text.split()) < 4:
        score -= 1
    return max(1, min(10, score))


LLM_IMPORTANCE_PROMPT = (
    "Rate how important it is for a character in a story to remember the following fact, "
    "on a scale from 1 (trivial small talk) to 10 (must never be forgotten: promises, debts, "
    "dangers, names of loved ones). Answer with the number only.\n\nFact: {text}\nImportance:"
)


def parse_importance(reply) -> int | None:
    """The first integer 1-10 in a model's reply (``"8/10"`` -> 8), or None."""
    match = re.search(r"\b(10|[1-9])\b", reply or "")
    return int(match.group(1)) if match else None


def llm_importance(text, client=None, known_names=()) -> Deferred:
    """
    Ask the chat model to score a fact.

    Args:
        text (str): the fact.
        client (LLMClient, optional): default ``ai_contrib.llm.client.get_client()``.
        known_names (iterable[str]): passed to the heuristic fallback.

    Returns:
        Deferred[int]: 1-10; the heuristic's score if the call fails or the reply has no number
        (never errbacks).
    """
    from twisted.internet import defer

    fallback = heuristic_importance(text, known_names)
    try:
        if client is None:
            from ai_contrib.llm.client import get_client

            client = get_client()
        d = client.chat(
            [{"role": "user", "content": LLM_IMPORTANCE_PROMPT.format(text=text)}],
            max_tokens=4,
            temperature=0.0,
            purpose="importance",
        )
    except Exception as err:
        logger.warning("importance scoring by LLM unavailable: %s", err)
        return defer.succeed(fallback)

    def _score(result):
        value = parse_importance(getattr(result, "content", "") or "")
        return value if value is not None else fallback

    def _failed(failure):
        logger.warning("importance scoring by LLM failed: %s", failure.getErrorMessage())
        return fallback

    return d.addCallbacks(_score, _failed)


def score_importance(text, method=None, client=None, known_names=()) -> Deferred:
    """
    Score a fact with the configured scorer.

    Args:
        text (str): the fact.
        method (str, optional): ``"llm"``, else the heuristic (``"heuristic"``, and
            ``"model"``, whose own number is used before this is called); default
            ``AI_IMPORTANCE_SCORING``.
        client (LLMClient, optional): for ``"llm"``.
        known_names (iterable[str]): names already known (first-mention bonus).

    Returns:
        Deferred[int]: 1-10.
    """
    from twisted.internet import defer

    if method is None:
        from ..settings import get_setting

        method = get_setting("IMPORTANCE_SCORING")
    if str(method).lower() == "llm":
        return llm_importance(text, client=client, known_names=known_names)
    return defer.succeed(heuristic_importance(text, known_names))
