"""
A line to answer: what the NPC was said or shown that its next turn answers, speech and events
alike (``docs/design.md``, "Turns, not one call per line" and "Scene, events and people").

Hearing decides which lines are addressed to the NPC, :mod:`ai_contrib.core.turns` finds the
ones no reply answered, and the reply checks that their speakers are still there: all three read
a stored message through :func:`line_to_answer`, the one definition. A line to answer is either

- *speech*: a user message whose ``metadata["speaker"]`` names who said it, or
- an *event* with an actor addressed to the NPC: an event record (``metadata["kind"]``
  ``"event"``, :mod:`ai_contrib.core.scene`) whose ``metadata["actor"]`` names who did it and
  whose ``metadata["addressed"]`` is True (a gift handed to the NPC). An event without an actor,
  or one the NPC only saw (a pose, an arrival), is never a line to answer.

A line stored with ``metadata["addressed"] = False`` (overheard, :mod:`ai_contrib.core.addressing`)
is a line, but not one to answer. Messages stay dicts (they are persisted); this is a view of
one. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from .scene import EVENT_KIND

#: :attr:`LineToAnswer.kind` of a line said
SPEECH = "speech"
#: :attr:`LineToAnswer.kind` of an event addressed to the NPC
EVENT = "event"


@dataclass(frozen=True)
class LineToAnswer:
    """
    A stored line seen as one to answer (:func:`line_to_answer`).

    Attributes:
        id (str): the message's id.
        speaker (str): dbref of who said it, or of the event's actor.
        name (str | None): the speaker's name as stored (None for an event, which names its
            actor in its text).
        text (str): the stored words, or the event's line (``"(Bob gives you a key.)"``).
        kind (str): :data:`SPEECH` or :data:`EVENT`.
        event (str | None): the event's kind (``"give"``), None for speech.
        audience (tuple[str, ...] | None): dbrefs of who heard or saw it (None: no record).
        addressed (bool): False for a line overheard, not said to the NPC: never answered.
        from_npc (bool): said by another AI NPC (``metadata["npc"]``).
    """

    id: str
    speaker: str
    name: str | None
    text: str
    kind: str
    event: str | None = None
    audience: tuple[str, ...] | None = None
    addressed: bool = True
    from_npc: bool = False


def line_to_answer(msg) -> LineToAnswer | None:
    """
    The line ``msg`` (a stored message dict, :mod:`ai_contrib.core.messages`) is, or None when
    it is none: not speech with a speaker, nor an event with an actor addressed to the NPC (see
    the module's docstring). A speech line overheard comes back with ``addressed`` False.
    """
    meta = msg.get("metadata") or {}
    audience = meta.get("audience")
    audience = None if audience is None else tuple(audience)
    if meta.get("kind") == EVENT_KIND:
        if not meta.get("actor") or meta.get("addressed") is not True:
            return None
        return LineToAnswer(id=msg.get("id"), speaker=meta["actor"], name=None,
                            text=msg.get("content") or "", kind=EVENT, event=meta.get("event"),
                            audience=audience)
    if msg.get("role") != "user" or not meta.get("speaker"):
        return None
    return LineToAnswer(id=msg.get("id"), speaker=meta["speaker"], name=msg.get("name"),
                        text=msg.get("content") or "", kind=SPEECH, audience=audience,
                        addressed=meta.get("addressed") is not False,
                        from_npc=bool(meta.get("npc")))


def is_line_to_answer(msg) -> bool:
    """True when ``msg`` is a line the NPC is to answer (:func:`line_to_answer`, addressed)."""
    line = line_to_answer(msg)
    return line is not None and line.addressed


def speaker_of(msg) -> str | None:
    """The dbref of who said ``msg`` or did it, when it is a line (:func:`line_to_answer`);
    else None."""
    line = line_to_answer(msg)
    return None if line is None else line.speaker
