"""
The NPC's world in its reply prompt (``docs/design.md``, "The NPC's world"): pins and constant
lore as standing sections of the system message, triggered lore, a player's pins and the scene
as anchored world notes before the turn that needs them (:mod:`ai_contrib.core.world_notes`).

Where each part goes is chosen for the model server's prefix cache: what changes only when staff
edit it (the NPC's pins, the lore it always knows) extends the system message and is cached once;
what a turn brings (a lore entry its words triggered, the scene when someone arrives) is shown
before that turn's first line and stays there, so it is evaluated once, in the same reply as
the turn that needed it. Everything is for the listeners of the reply: an NPC never gets a lore
entry its condition excludes (:func:`ai_contrib.lore.lore_for_npc`), and a player's pins enter
only while that player listens. A note shown earlier is checked against its source on every
reply (:func:`standing_notes`): an entry staff deleted, edited or whose condition no longer
holds for the NPC (it walked out of a ``location:`` clause), a pin removed, leaves the prompt
on the next reply.

Shapes: a *section* is a :class:`ai_contrib.core.world_notes.Section`; world notes as in
:mod:`ai_contrib.core.world_notes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from ..core.lore import format_lore, npc_scopes, withdrawn_reason
from ..core.prompts import PINS_HEADING
from ..core.scene import SCENE_MAX_TOKENS, render_scene
from ..core.text import normalise_player_text
from ..core.tokens import count_tokens
from ..core.world_notes import Section, WorldNote, plan_world_notes, shown_world_notes
from ..lore import lore_for_npc, lore_index, lore_texts, npc_facts
from .actions import actions_reserve, actions_section
from .pins import get_pins
from .scene import scene_for



def _count(script):
    model = script.cfg("llm_model")
    return lambda text: count_tokens(text, model)


def _pin_lines(pins):
    return "\n".join(f"- {pin['text']}" for pin in pins)


def standing_sections(script, character) -> list[Section]:
    """
    The sections of the system message: the NPC's own pins (staff-written, never summarised,
    never cut: ``docs/design.md``, "Lore and pins"), the constant lore entries it may know,
    within its lore budget, and the actions it may take (:func:`ai_contrib.npc.actions.
    actions_section`).

    Returns:
        list[Section]: possibly empty; the same list while staff
        change nothing, so the system message stays in the server's cache.
    """
    count = _count(script)
    sections = []
    own = [pin for pin in get_pins(character) if not pin.get("player")]
    if own:
        text = f"{PINS_HEADING}\n{_pin_lines(own)}"
        sections.append({"part": "pins", "key": "pins", "text": text, "tokens": count(text),
                         "detail": {"pins": [pin.get("id") for pin in own]}})
    constant = lore_for_npc(character, [], count=count)["chosen"]
    if constant:
        text = format_lore(constant)
        sections.append({"part": "lore", "key": "lore:constant", "text": text,
                         "tokens": count(text),
                         "detail": {"entries": [{"id": e["id"], "key": None} for e in constant]}})
    acting = actions_section(script, count)
    if acting:
        sections.append(acting)
    return sections


def turn_sections(script, character, lines, earlier, listeners) -> tuple:
    """
    What this turn brings into the prompt: the lore entries its words (and the last few lines
    before it) trigger, the pins about players who listen, and the scene.

    Args:
        lines (list[dict]): the turn's lines (history messages).
        earlier (list[dict]): history messages before the turn, oldest first (only the last
            ``LORE_SCAN_LINES`` user lines are read).
        listeners (dict): ``{dbref: name}`` of who will hear the reply.

    Returns:
        tuple: ``(sections, lore)``: ``sections`` in the order to show them (lore, pins,
        scene); ``lore`` :func:`ai_contrib.lore.lore_for_npc`'s result for the turn, for the
        receipt.
    """
    count = _count(script)
    said = [m.get("content") or "" for m in lines]
    before = [m.get("content") or "" for m in earlier[-40:] if m.get("role") == "user"]
    # the whole budget: the choice ranks the constant entries too, as standing_sections did,
    # and charges them once (taking their tokens off first charged them twice)
    lore = lore_for_npc(character, lore_texts(character, said, before),
                        budget_tokens=int(script.cfg("lore_token_budget") or 0), count=count)
    sections = []
    for entry in lore["chosen"]:
        if entry.get("constant"):
            continue
        text = format_lore([entry])
        sections.append({"part": "lore", "key": f"lore:{entry['id']}", "text": text,
                         "tokens": count(text),
                         "detail": {"entries": [{"id": entry["id"], "key": entry.get("key")}]}})
    for pin in get_pins(character):
        player = pin.get("player")
        if player and player in listeners:
            # the name is the player's choice: data, cleaned like everything players write
            text = f"About {normalise_player_text(listeners[player], 40)}: {pin['text']}"
            sections.append({"part": "pins", "key": f"pins:{pin.get('id')}", "text": text,
                             "tokens": count(text), "detail": {"pins": [pin.get("id")]},
                             "requires": [player]})
    # one look at the room and the people records, rendered once
    place, present, clock = scene_for(character, listeners)
    text = render_scene(place, present, clock)
    if text:
        # a new scene note when the place, who is present, whom of them the NPC has met or
        # the time of day changes, not when only "you last spoke 3 minutes ago" does: a note
        # saying "you have not met" someone who is speaking to it misleads the NPC
        signature = ((place or {}).get("name"),
                     tuple((p["dbref"], bool(p.get("known"))) for p in present),
                     tuple(sorted((clock or {}).items())))
        # written for these listeners (what the NPC recalls of each of them included): a later
        # prompt shows it only to them, not to someone who left and came back meanwhile
        sections.append({"part": "scene", "key": "scene", "text": text, "tokens": count(text),
                         "signature": signature, "audience": sorted(listeners)})
    return sections, lore


def world_budgets(script) -> dict[str, int]:
    """``{part: tokens}`` the shown world notes of each part may take together."""
    return {"lore": int(script.cfg("lore_token_budget") or 0), "scene": SCENE_MAX_TOKENS,
            "pins": int(script.cfg("pins_token_budget") or 0)}


def world_reserve(script) -> int:
    """
    Tokens the NPC's world may take in a reply prompt, reserved from its history budget
    (``docs/design.md``, "The budget fits the model"): the lore budget, the scene's cap and
    the tokens of the NPC's pins (counted once per change of its pins) and of its actions
    (:func:`ai_contrib.npc.actions.actions_reserve`). O(pins).
    """
    budgets = world_budgets(script)
    character = script.obj
    pins = [pin.get("text") or "" for pin in get_pins(character)] if character else []
    cached = script.ndb.pin_tokens
    if cached is None or cached[0] != pins:
        count = _count(script)
        cached = (pins, sum(count(f"- {text}") for text in pins) + (16 if pins else 0))
        script.ndb.pin_tokens = cached
    return (budgets["lore"] + budgets["scene"] + min(budgets["pins"], cached[1])
            + actions_reserve(script, _count(script)))


def _note_reason(note, character, found):
    """
    Why world note ``note`` no longer stands (:func:`standing_notes`), or None. ``found``
    caches what is read once per call: the lore index, the NPC's scopes, its pins.
    """
    kind, _colon, ref = note["key"].partition(":")
    if kind == "lore" and ref != "constant":
        if "index" not in found:
            found["index"] = lore_index()
            found["scopes"] = npc_scopes(npc_facts(character))
        key = next(iter((note.get("detail") or {}).get("entries") or ()), {}).get("key")
        return withdrawn_reason(found["index"], found["scopes"], ref, note["text"], key)
    if kind == "pins" and ref:
        if "pins" not in found:
            found["pins"] = {str(pin.get("id")): pin for pin in get_pins(character)}
        pin = found["pins"].get(ref)
        if pin is None or not pin.get("text") or not note["text"].endswith(pin["text"]):
            return "removed"
    return None


class Withdrawal(TypedDict):
    """A world note withdrawn from the prompt because its source changed (for the receipt)."""

    key: str  #: the note's key (``"lore:<entry id>"``, ``"pins:<dbref>"``)
    part: str | None  #: the receipt part
    reason: str  #: ``"deleted"``, ``"edited"``, ``"condition"`` or ``"removed"``


def standing_notes(character, notes) -> tuple[list[WorldNote], list[Withdrawal]]:
    """
    The world notes that still stand against their source, and those that do not: a lore
    entry deleted, edited (text, keys) or whose condition no longer holds for the NPC (it
    moved out of a ``location:``/``zone:`` clause, a Tag was taken away), a pin removed
    (``docs/design.md``, "The NPC's world"). Checked on every reply: one read of the lore
    index (kept in memory, rebuilt after a change) and of the NPC's Tags and room, O(notes).

    Returns:
        tuple: ``(kept, withdrawn)``: the notes that stand, in order, and a
        :class:`Withdrawal` for each of the others, for the receipt.
    """
    found, kept, withdrawn = {}, [], []
    for note in notes:
        reason = _note_reason(note, character, found)
        if reason is None:
            kept.append(note)
        else:
            withdrawn.append({"key": note["key"], "part": note.get("part"), "reason": reason})
    return kept, withdrawn


@dataclass(frozen=True)
class TurnWorld:
    """
    The world part of one reply prompt (:func:`plan_world`).

    Attributes:
        standing (list[dict]): the standing sections of the system message.
        notes (list[dict]): the world notes to show, in order, each a world note
            (:mod:`ai_contrib.core.world_notes`) with ``"new": bool`` (first shown now).
        skipped (list[dict]): ``{"key", "part", "reason"}`` of what was left out (reasons:
            ``"budget"``, and those of :func:`standing_notes`).
    """

    standing: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    skipped: list = field(default_factory=list)


def plan_world(script, character, lines, earlier, listeners, anchor, shown_ids,
               visible_ids=None) -> TurnWorld:
    """
    The world part of one reply prompt: standing sections and the world notes to show, with
    this turn's new ones added to ``script.ndb.world_notes`` (a reload starts afresh), and the
    notes staff withdrew since they were shown let go (:func:`standing_notes`).

    Args:
        lines, earlier, listeners: as :func:`turn_sections`.
        anchor (str): id of the turn's first line.
        shown_ids (set[str]): ids of the history messages of the prompt's window.
        visible_ids (set[str], optional): those of them the prompt shows these listeners
            (:func:`ai_contrib.core.world_notes.plan_world_notes`; None: ``shown_ids``).

    Returns:
        TurnWorld: the sections and notes to show, and what was left out.
    """
    standing = standing_sections(script, character)
    sections, lore = turn_sections(script, character, lines, earlier, listeners)
    budgets = world_budgets(script)
    budgets["lore"] = max(0, budgets["lore"] - sum(
        s["tokens"] for s in standing if s["part"] == "lore"))
    notes, withdrawn = standing_notes(character, script.ndb.world_notes or [])
    result = plan_world_notes(notes, sections, anchor, shown_ids, listeners=list(listeners),
                              budgets=budgets, visible_ids=visible_ids)
    script.ndb.world_notes = result.notes
    fresh = {id(note) for note in result.new}
    skipped = withdrawn + list(result.skipped) + [
        {"key": f"lore:{entry['id']}", "part": "lore", "reason": entry.get("reason", "budget")}
        for entry in lore["skipped"]]
    return TurnWorld(standing=standing,
                     notes=[dict(note, new=id(note) in fresh) for note in result.shown],
                     skipped=skipped)


def shown_world(script, character, listeners, history_ids) -> tuple:
    """
    The world part of the prompt a cache warm-up sends: the standing sections and the world
    notes already shown, nothing new (no turn yet).

    Returns:
        tuple: ``(standing, notes)``.
    """
    notes, _withdrawn = standing_notes(
        character, [n for n in script.ndb.world_notes or [] if n["anchor"] in history_ids])
    notes = shown_world_notes(notes, history_ids, list(listeners))
    return standing_sections(script, character), notes
