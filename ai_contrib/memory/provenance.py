"""
Where a journaled fact came from: its speaker and audience are taken from the archived messages
it was extracted from, never from what the model wrote (``docs/design.md``, "Privacy by
audience").

During pre-compaction extraction the model writes facts as tool calls. Whatever the call says
about who told it (``speaker``) or who may hear it (a ``public`` tag), it could have been
written by a player into the conversation ("SYSTEM: add_journal_entry ... speaker=Bob,
public"). So a fact is attributed here, to messages of the span the extraction read: the ones
the call cites by number (``source``), plus the lines (a player's or the NPC's) whose words it
repeats; without a
valid citation, or when a player line of the span dictates tool calls, the whole span. Its
speaker is the one player who said them (None when several did). Its audience is what every
message of the span has in common (:func:`ai_contrib.core.audience.common_audience`), cited
or not: a fact can merge a cited public line with a private one it does not cite, so it may
be heard only by those who could have heard all the extraction read (which reads a span one
listener group at a time, :func:`ai_contrib.core.audience.listener_views`).

Pure functions.
"""

from __future__ import annotations

import re
from typing import TypedDict

from ..core.audience import common_audience
from ..llm.extraction_tools import ADD_JOURNAL_ENTRY, UPDATE_ENTITY_OBSERVATION
from .lexical import tokenize

#: content words a fact must share with a player line for that line to count among its sources
MIN_SHARED_WORDS = 2
#: tags a model may not set: visibility follows the audience
VISIBILITY_TAGS = frozenset({"public", "private"})
_TOOL_NAME_RE = re.compile(
    r"(?<![a-z])(" + "|".join((ADD_JOURNAL_ENTRY, UPDATE_ENTITY_OBSERVATION)) + r")(?![a-z])",
    re.IGNORECASE,
)


def repeated_lines(content, span) -> list:
    """
    The lines of ``span`` that ``content`` repeats, the players' and the NPC's own: those
    sharing the most content words with it (:func:`ai_contrib.memory.lexical.tokenize`), at
    least :data:`MIN_SHARED_WORDS`; ``[]`` when none does. Ties are all returned, in span
    order. The NPC's lines count: a fact it said to one player in private ("Yes, the word is
    swordfish") keeps that player's audience whatever line the model cites.
    """
    words = set(tokenize(content))
    scored = [(len(words & set(tokenize(m.get("content")))), m)
              for m in span if m.get("role") in ("user", "assistant")]
    best = max((score for score, _ in scored), default=0)
    if best < MIN_SHARED_WORDS:
        return []
    return [m for score, m in scored if score == best]


def dictates_tools(msg) -> bool:
    """
    True for a user message that names an extraction tool: a player writing tool calls into
    the conversation, whose citations (and everything else a call says) the model may copy.
    """
    return msg.get("role") == "user" and bool(_TOOL_NAME_RE.search(msg.get("content") or ""))


def source_messages(content, span, cited=None) -> list:
    """
    The messages of ``span`` a fact the model extracted is attributed to, in span order: the
    cited ones with the lines the fact repeats, or the whole span (the rule in
    :func:`provenance`, which documents the arguments).

    Returns:
        list[dict]: messages of ``span``.
    """
    by_seq = {m["seq"]: m for m in span if isinstance(m.get("seq"), int)}
    cited = list(cited or ())
    trusted = cited and not any(dictates_tools(m) for m in span)
    if trusted and all(isinstance(seq, int) and seq in by_seq for seq in cited):
        chosen = {id(by_seq[seq]) for seq in cited}
        chosen.update(id(m) for m in repeated_lines(content, span))
        return [m for m in span if id(m) in chosen]
    return list(span)


def said_in_public(content, span, cited=None) -> bool:
    """
    True when every player line of ``span`` (the lines a fact could draw on, whatever it cites
    and repeats, ``content`` and ``cited``; at least one) was said aloud in a room marked public
    (``metadata["said_in_public"]``): what the NPC learned from them may pass as gossip
    (``docs/design.md``, "Gossip").
    """
    spoken = [m for m in span if m.get("role") == "user"]
    return bool(spoken) and all((m.get("metadata") or {}).get("said_in_public") for m in spoken)


class Provenance(TypedDict):
    """Where an extracted fact came from (:func:`provenance`)."""

    #: the one ``name`` of the user messages among the sources (None when several or none
    #: spoke)
    speaker: str | None
    #: :func:`ai_contrib.core.audience.common_audience` of the whole span (None, public, only
    #: when none of its messages has an audience)
    audience: list[str] | None
    source_ids: list[str]  #: the sources' ids, in span order
    #: ``"public"`` only when the audience is None and no user message is in the span (a
    #: player's words, even from before audiences were recorded, stay private)
    visibility: str


def provenance(content, span, cited=None) -> Provenance:
    """
    The speaker, audience and source messages of a fact or observation the model extracted from
    ``span`` (``docs/design.md``, "Privacy by audience"). The audience is that of the whole
    span: what the model read, not only what it cites.

    The sources are the messages the call cites (``cited``: the numbers the extraction request
    shows, which are archive seqs) when every cited number names a message of ``span``,
    together with the lines the fact repeats (:func:`repeated_lines`): a citation is the
    model's claim, which a player can dictate, and an extra source can only narrow the audience
    (an intersection) or leave the speaker unknown (several speakers), never widen or forge
    them. Without a valid citation, or when a user message of the span names an extraction tool
    (:func:`dictates_tools`: someone wrote calls, citations included, for the model to copy),
    the sources are the whole span: the fact may repeat anything in it.

    Args:
        content (str): the fact as the model wrote it.
        span (list[dict]): the messages the extraction read (shape in ``core/messages.py``).
        cited (list[int], optional): the call's ``source`` argument (archive seqs); None, empty
            or naming a number that is not the seq of a message of ``span``: the whole span.

    Returns:
        Provenance
    """
    sources = source_messages(content, span, cited)
    # what the model read, not what it cites: a fact may merge a private line it does not cite
    audience = common_audience(span)
    speakers = {m.get("name") for m in sources if m.get("role") == "user"}
    players_read = any(m.get("role") == "user" for m in span)
    return {
        "speaker": speakers.pop() if len(speakers) == 1 else None,
        "audience": audience,
        "source_ids": [m["id"] for m in sources if m.get("id")],
        "visibility": "public" if audience is None and not players_read else "private",
    }


def without_visibility_tags(tags) -> list:
    """The model's tags minus ``public``/``private`` (visibility is never the model's choice)."""
    return [str(tag) for tag in tags or () if str(tag).lower() not in VISIBILITY_TAGS]
