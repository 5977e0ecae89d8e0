"""
Pins: facts an NPC must never lose (``docs/design.md``, "Lore and pins"), written by staff with
``aipin`` (:mod:`ai_contrib.admin.lore_commands`).

They are an Attribute of the NPC character, ``db.ai_pins``, a list of plain dicts whose fields
:class:`Pin` declares.

Pins live on the character, not in the conversation history, so compaction never sees them:
no summary can drop or distort them, and ``aireset`` keeps them (``aireset/pins`` clears them).
A pin about a player is given only while that player is among the listeners (``docs/design.md``,
"Privacy by audience"). The reply path calls :func:`pins_for` and puts the result in the system
part of the prompt: pins change only when staff edit them, so they stay in the cached prefix.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TypedDict

#: the Attribute of the NPC character that holds its pins
PINS_ATTRIBUTE = "ai_pins"
#: characters of one pin at most
MAX_PIN_CHARS = 500


class Pin(TypedDict):
    """One pin as stored in ``db.ai_pins`` (module docstring)."""

    id: int  #: 1, 2, ...: never reused for this NPC
    text: str  #: the fact, as the admin wrote it
    player: str | None  #: dbref of the player character it concerns, None for the NPC's own
    by: str | None  #: who pinned it
    at: str  #: when (ISO 8601, UTC)


def get_pins(npc) -> list[Pin]:
    """The NPC's pins, oldest first, as plain dicts (copies of the stored ones)."""
    return [dict(pin) for pin in (npc.attributes.get(PINS_ATTRIBUTE) or [])]


def add_pin(npc, text, player=None, by=None, budget_tokens=None, count=None) -> Pin:
    """
    Pin a fact on ``npc``.

    Args:
        npc: the NPC character.
        text (str): the fact (one line; inner line breaks are joined with a space).
        player (str | None): the dbref (``"#12"``) of the player character it concerns; None:
            a fact of the NPC's own, given whoever listens.
        by (str | None): who pinned it.
        budget_tokens (int | None): refuse the pin when the NPC's own pins plus that player's
            (all of them, this one included) would take more tokens than this, so that pins
            are bounded when written and never cut when read. None: no check.
        count (callable | None): ``str -> int`` tokens (needed with ``budget_tokens``).

    Returns:
        Pin: the new pin.

    Raises:
        ValueError: empty text, text over :data:`MAX_PIN_CHARS` characters, a ``player``
            that is not a dbref, or over the budget (the message gives the tokens).
    """
    text = " ".join(str(text or "").split())
    if not text:
        raise ValueError("a pin needs text")
    if len(text) > MAX_PIN_CHARS:
        raise ValueError(f"a pin has at most {MAX_PIN_CHARS} characters (this one {len(text)})")
    if player is not None and not (str(player).startswith("#") and str(player)[1:].isdigit()):
        raise ValueError(f"player must be a dbref such as #12, not {player!r}")
    pins = get_pins(npc)
    if budget_tokens is not None:
        group = [p["text"] for p in pins if p.get("player") in (None, player)] + [text]
        used = sum(int(count(t)) for t in group)
        if used > budget_tokens:
            raise ValueError(f"the pins would take {used} tokens, over the pin budget of "
                             f"{budget_tokens} (PINS_TOKEN_BUDGET): remove or shorten one first")
    pin = {"id": max((p["id"] for p in pins), default=0) + 1, "text": text,
           "player": player, "by": by,
           "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    pins.append(pin)
    npc.attributes.add(PINS_ATTRIBUTE, pins)
    return pin


def remove_pin(npc, pin_id) -> Pin | None:
    """
    Remove pin ``pin_id`` (its number) from ``npc``.

    Returns:
        Pin | None: the removed pin, None when there was none of that number.
    """
    pins = get_pins(npc)
    kept = [pin for pin in pins if str(pin["id"]) != str(pin_id).strip()]
    if len(kept) == len(pins):
        return None
    npc.attributes.add(PINS_ATTRIBUTE, kept)
    return next(pin for pin in pins if pin not in kept)


def remove_player_pins(npc, dbref) -> list[Pin]:
    """
    Remove every pin of ``npc`` about the player ``dbref`` (forgetting a player,
    ``docs/design.md``, "Forgetting a player").

    Returns:
        list[dict]: the removed pins.
    """
    pins = get_pins(npc)
    removed = [pin for pin in pins if pin.get("player") == str(dbref)]
    if removed:
        npc.attributes.add(PINS_ATTRIBUTE, [pin for pin in pins if pin not in removed])
    return removed


def clear_pins(npc) -> int:
    """Remove every pin of ``npc``; returns how many there were."""
    count = len(get_pins(npc))
    npc.attributes.remove(PINS_ATTRIBUTE)
    return count


def pins_for(npc, listeners) -> list[str]:
    """
    The pin texts for a prompt (``docs/design.md``, "Lore and pins"): the NPC's own pins, then
    the pins about players among the listeners, each group oldest first. A pin about a player
    reads ``"About <name>: <text>"``, with the name the listeners give.

    Cost: O(pins of the NPC). Nothing is cut here: the bound is applied when a pin is written
    (:func:`add_pin`, ``PINS_TOKEN_BUDGET`` tokens for the NPC's own pins plus one player's).

    Args:
        npc: the NPC character.
        listeners (dict): ``{dbref: name}`` of who hears the reply
            (:func:`ai_contrib.typeclasses.room_listeners`).

    Returns:
        list[str]
    """
    listeners = listeners or {}
    pins = get_pins(npc)
    own = [pin["text"] for pin in pins if pin.get("player") is None]
    about = [f"About {listeners[pin['player']]}: {pin['text']}" for pin in pins
             if pin.get("player") is not None and pin["player"] in listeners]
    return own + about
