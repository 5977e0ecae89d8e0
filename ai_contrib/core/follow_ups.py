"""
Follow-ups: a turn that asks the NPC to go on about the subject already in hand ("Can you tell
me more about that?", "What else comes to mind?", "Anything else?") rather than naming one
(``docs/design.md``, "Recall notes": a follow-up keeps its subject).

Such a sentence says nothing about *what* to remember; its words only pull retrieval toward
archived lines that happen to share them ("mind", "else", "more"), so a question asked again
with "What else comes to mind?" in front ranks other memories than the same question did a
turn before, and the notes of the subject look like another subject's. Retrieval is therefore
asked the rest of the turn, or, for a bare follow-up, the subject of the listeners' last
question about the past. The test is a closed list of discourse forms, like a stop list: it
reads the words of the turn only. Pure module: no Evennia, Twisted or Django imports.
"""

from __future__ import annotations

import re
from collections.abc import Hashable

#: sentences that ask to go on with the subject in hand; the forms are whole phrases, so a
#: sentence that names a subject ("What else did Wren buy?") is not one
_FOLLOW_UP = re.compile(
    r"^(?:(?:and|so|ok|okay|well|oh|hm+|please)[,!]?\s+)*(?:"
    r"(?:can|could|would|will) you (?:tell|say) (?:me |us )?(?:a (?:bit|little) )?more"
    r"(?: about (?:that|this|it|him|her|them))?(?:,? please)?|"
    r"(?:tell|say) (?:me |us )?(?:a (?:bit|little) )?more(?: about (?:that|this|it|him|her|them))?"
    r"(?:,? please)?|"
    r"what else(?: (?:comes|come|springs) to mind| do you (?:remember|recall|know))?|"
    r"(?:is there )?anything (?:else|more)(?: (?:comes|come|springs) to mind)?|"
    r"what more(?: do you (?:remember|recall|know))?|"
    r"(?:please )?go on|keep going|and then|then what|what happened (?:next|then|after that)|"
    r"like what|such as|for example|what about (?:that|it)|how so|anything to add"
    r")(?:,? please)?[\s.!?…]*$",
    re.IGNORECASE,
)
#: where a sentence ends: after ".", "!" or "?" (and any closing quote) before a space
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"')\]]*\s+")


def sentences(text) -> list[str]:
    """The sentences of ``text``, whitespace collapsed, empty ones left out."""
    text = " ".join(str(text or "").split())
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def follow_up_rest(text) -> str | None:
    """
    The turn's words less its follow-up sentences, when it has any.

    Args:
        text (str): the turn's words (:func:`ai_contrib.core.turns.turn_query`).

    Returns:
        str | None: None when no sentence of ``text`` is a follow-up (the turn names its own
        subject); else the other sentences joined by a space (``""`` for a bare follow-up,
        which asks about the subject in hand).
    """
    parts = sentences(text)
    rest = [part for part in parts if not _FOLLOW_UP.match(part)]
    if len(rest) == len(parts):
        return None
    return " ".join(rest)


#: audiences whose last subject an NPC keeps at most (the newest)
SUBJECTS_KEPT = 16


def turn_subject(text, subjects, audience_key) -> tuple[str, bool]:
    """
    What a turn's retrieval should ask (module docstring).

    Args:
        text (str): the turn's words.
        subjects (dict): ``{audience key: query}``, the listeners' last question about the past
            (:func:`remember_subject`).
        audience_key: hashable key of who will hear the reply.

    Returns:
        tuple: ``(query, follows)``: the words to retrieve for, and whether the turn is a
        follow-up that retrieval asks about something (the rest of the turn, or the subject
        in hand when it named none). A bare follow-up with no subject in hand follows nothing:
        it is asked as it is, and ``follows`` is False, so the receipt does not claim a subject.
    """
    rest = follow_up_rest(text)
    if rest is None:
        return text, False
    query = rest or subjects.get(audience_key)
    return (query, True) if query else (text, False)


def remember_subject(subjects, audience_key, query) -> dict[Hashable, str]:
    """
    ``subjects`` with ``query`` as the last subject of ``audience_key`` (the newest last, at
    most :data:`SUBJECTS_KEPT` audiences): a new dict.
    """
    kept = {key: value for key, value in (subjects or {}).items() if key != audience_key}
    kept[audience_key] = query
    return dict(list(kept.items())[-SUBJECTS_KEPT:])
