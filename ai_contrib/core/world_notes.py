"""
The NPC's world in its reply prompt as anchored notes (``docs/design.md``, "The NPC's world").

Lore triggered by a turn and the scene the NPC stands in (place, time, who is present) are shown
in the same reply as the turn that needs them, right before that turn's first line, and stay
there, unchanged, on later replies: like recall notes (:mod:`ai_contrib.core.recall_notes`),
what was shown once becomes part of the prefix the model server caches. A section is added again
only when its text has changed (a new arrival changes the scene) or its note left the history
with a compaction, or the listeners of this reply cannot see the line it is anchored at (a prompt
shows only what all its listeners heard: lore is world knowledge, shown to whoever listens).
Pure functions.

A world note is a plain dict (:class:`WorldNote`): a section (:class:`Section`) anchored at the
id of a history message, with the audience it may be shown to and who must be listening.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from .recall_notes import visible_notes


class Section(TypedDict):
    """
    A part of the NPC's world in its reply prompt, before it is placed: a standing section of
    the system message (the NPC's pins, constant lore, its actions) or a turn's section that
    becomes a world note (triggered lore, a player's pins, the scene).
    """

    part: str  #: the receipt part: ``"pins"``, ``"lore"``, ``"scene"``, ``"actions"``
    key: str  #: what it is about: ``"pins"``, ``"lore:constant"``, ``"lore:<entry id>"``, ...
    text: str  #: what the prompt shows
    tokens: int  #: ``text``'s tokens
    detail: dict[str, Any] | None  #: for the receipt (the pins' ids, the lore entries)
    signature: NotRequired[Any]  #: what the text was made from, to see it change


class WorldNote(Section):
    """A world note (module docstring): a :class:`Section` placed at a line of the history."""

    anchor: str  #: id of the history message it is shown before
    audience: list[str] | None  #: dbrefs it may be shown to together (None: anyone)
    requires: list[str] | None  #: dbrefs who must all be listening (a player's pins)


def shown_world_notes(notes, history_ids, listeners=None) -> list[WorldNote]:
    """
    The world notes a prompt may show: those :func:`~ai_contrib.core.recall_notes.
    visible_notes` shows, less those whose ``requires`` names someone not listening (a pin
    about a player is for that player's presence only), and less a note that says what the
    shown note of its key before it says (the same signature: an entry noted again for other
    listeners, at a line both audiences see). ``listeners`` None: no filter.
    """
    shown = visible_notes(notes, history_ids, listeners)
    if listeners is not None:
        present = frozenset(listeners)
        shown = [note for note in shown if frozenset(note.get("requires") or ()) <= present]
    last, out = {}, []
    for note in shown:
        mark = note.get("signature", note["text"])
        if note["key"] in last and last[note["key"]] == mark:
            continue
        last[note["key"]] = mark
        out.append(note)
    return out


@dataclass(frozen=True)
class WorldNotesPlan:
    """
    The world notes after a turn (:func:`plan_world_notes`).

    Attributes:
        notes (list[dict]): the new state, oldest first (module docstring).
        shown (list[dict]): the notes to show, in order.
        new (list[dict]): the notes added for this turn.
        skipped (list[dict]): ``{"key", "part", "reason": "budget"}`` of the sections that
            found no room.
        dropped (int): earlier notes of a section let go for its newer text.
    """

    notes: list
    shown: list
    new: list
    skipped: list
    dropped: int


def plan_world_notes(notes, sections, anchor, history_ids, listeners=None, budgets=None,
                     visible_ids=None) -> WorldNotesPlan:
    """
    The world notes after a turn.

    A section is added as a new note unless the newest shown note of its key says the same (the
    same ``signature`` where the section gives one, else the same text). A section that does not
    fit its part's budget gives up shown notes of its own key, newest first (the newest has the
    least of the prompt after it to evaluate again), and is skipped when that is not enough.

    Args:
        notes (list[dict]): the NPC's world notes so far, oldest first (module docstring).
        sections (list[dict]): what this turn's prompt should show, each ``{"key", "part",
            "text", "tokens", "audience" (optional), "requires" (optional), "detail"
            (optional), "signature" (optional: what must change for the section to be shown
            again)}``, in order.
        anchor (str): id of the first line of the turn being answered.
        history_ids (set[str]): ids of the messages of the prompt's window: a note anchored
            elsewhere is let go.
        listeners (iterable[str], optional): dbrefs of who will hear the reply; a note whose
            ``audience`` does not hold all of them, or who ``requires`` someone else, is not
            shown (None: no filter, :func:`shown_world_notes`).
        budgets (dict, optional): ``{part: tokens}``: the shown notes of a part may take at
            most that many tokens together.
        visible_ids (set[str], optional): ids of the messages of ``history_ids`` the prompt
            shows these listeners (what they all heard, and the turn); a note anchored at
            another is kept for the listeners who see its line but not counted as shown, so a
            section it holds is noted again here (None: ``history_ids``).

    Returns:
        WorldNotesPlan: the new state and what the prompt shows.
    """
    alive = [note for note in notes if note["anchor"] in history_ids]
    shown = shown_world_notes(alive, history_ids if visible_ids is None else visible_ids,
                              listeners)
    gone = set()
    new, skipped = [], []

    def latest(key):
        return next((n for n in reversed(shown + new) if n["key"] == key and id(n) not in gone),
                    None)

    def used(part):
        return sum(int(n["tokens"]) for n in shown + new if n["part"] == part
                   and id(n) not in gone)

    for section in sections:
        before = latest(section["key"])
        mark = section.get("signature", section["text"])
        if before is not None and before.get("signature", before["text"]) == mark:
            continue
        part = section["part"]
        tokens = int(section.get("tokens") or 0)
        limit = (budgets or {}).get(part)
        while limit is not None and used(part) + tokens > limit and latest(section["key"]):
            gone.add(id(latest(section["key"])))
        if limit is not None and used(part) + tokens > limit:
            skipped.append({"key": section["key"], "part": part, "reason": "budget"})
            continue
        new.append({"anchor": anchor, "key": section["key"], "part": part,
                    "text": section["text"], "tokens": tokens,
                    "audience": section.get("audience"), "requires": section.get("requires"),
                    "detail": section.get("detail"),
                    "signature": mark})
    state = [n for n in alive if id(n) not in gone] + new
    return WorldNotesPlan(notes=state, shown=[n for n in shown if id(n) not in gone] + new,
                          new=new, skipped=skipped, dropped=len(gone))
