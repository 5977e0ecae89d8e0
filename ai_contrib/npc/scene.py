"""
What the NPC sees and whom it has met: the Evennia shell around :mod:`ai_contrib.core.scene`
(``docs/design.md``, "Scene, events and people").

- :func:`scene_for` and :func:`scene_text`: the NPC's room, the characters present and the
  game's clock, as the dicts :func:`ai_contrib.core.scene.render_scene` takes and as its text;
- people records: one Attribute per person on the NPC's script (category
  :data:`PEOPLE_CATEGORY`, key the person's dbref), updated by :func:`note_exchange` when a
  line passes between them (O(1) per line: only that person's Attribute is written), and by
  :func:`note_actions` when the NPC acts on their words, read by :func:`people_for` and
  :func:`all_people`; :func:`update_impressions` refreshes the impressions from the journal
  during the sleep phase.

A people record is a plain dict, its fields declared by :class:`PersonRecord`.

Event records (what the NPC saw) are written by
:meth:`ai_contrib.typeclasses.AssistantScript.observe`.
"""

from __future__ import annotations

import time
from typing import NotRequired, TypedDict

from django.conf import settings
from evennia.objects.objects import DefaultCharacter
from evennia.utils import logger
from evennia.utils.dbserialize import deserialize

from ..core.audience import describe_audience, heard_by
from ..core.outcome import StepResult
from ..core.scene import (
    GameClock,
    clock_from_game_seconds,
    impression_from_facts,
    relative_time,
    render_scene,
)

#: category of the people records' Attributes on the NPC's script
PEOPLE_CATEGORY = "ai_people"
#: key of the NPC's AssistantScript (``ai_contrib.typeclasses.SCRIPT_KEY``, which imports this
#: module)
SCRIPT_KEY = "assistant_script"


def game_seconds() -> float | None:
    """
    The game's time now, seconds since its epoch (``gametime.gametime(absolute=True)``), or
    None when the game's clock cannot be read (no server epoch yet, a broken setting).
    """
    try:
        from evennia.utils import gametime

        return float(gametime.gametime(absolute=True))
    except Exception:  # the clock is a nicety: a game without one still answers
        return None


def game_clock() -> GameClock:
    """
    The game's clock in words (:func:`ai_contrib.core.scene.clock_from_game_seconds`): the
    custom calendar of the game's ``TIME_UNITS`` setting when it defines one, else the real
    calendar read from the game time (Evennia's default, ``TIME_FACTOR`` and
    ``TIME_GAME_EPOCH`` applied by ``gametime``).

    Returns:
        GameClock: any part missing; ``{}`` without a clock.
    """
    return clock_at(game_seconds())


def clock_at(seconds) -> GameClock:
    """
    The game's clock at ``seconds`` of game time (as :func:`game_clock`; ``{}`` for None).
    """
    if seconds is None:
        return {}
    units = getattr(settings, "TIME_UNITS", None)
    try:
        return clock_from_game_seconds(seconds, units if isinstance(units, dict) else None)
    except (ValueError, OverflowError, ZeroDivisionError) as err:
        logger.log_warn(f"AI scene: cannot read the game's calendar: {err}")
        return {}


# -- people ---------------------------------------------------------------------------------------


class PersonRecord(TypedDict):
    """
    What the NPC knows of one person it has met (``docs/design.md``, "Scene, events and
    people"): one Attribute of the script's (category :data:`PEOPLE_CATEGORY`, keyed by the
    dbref), a plain dict as stored.
    """

    dbref: str  #: the person's character
    name: str  #: their name when last seen
    first_met: float  #: Unix seconds
    first_met_game: float | None  #: game seconds, None without a game clock
    last_spoke: float | None  #: Unix seconds of the last line between them
    last_spoke_game: float | None  #: game seconds of that line
    lines: int  #: lines passed between them
    impression: str  #: made from the journal's facts by the sleep; ``""`` before
    #: dbrefs who may read the impression (the audience of its facts); None: anyone
    impression_audience: list[str] | None
    #: what the NPC did on their words, the newest last:
    #: ``[{"action": str, "at": float (Unix seconds), "audience": list[str]}]``
    actions: NotRequired[list[dict]]


def people_record(script, dbref) -> PersonRecord | None:
    """The people record of ``dbref`` on ``script`` (a plain dict), or None."""
    value = script.attributes.get(str(dbref), category=PEOPLE_CATEGORY)
    return deserialize(value) if value else None


def _new_record(dbref, name, now, game_now) -> PersonRecord:
    return {"dbref": dbref, "name": name, "first_met": now, "first_met_game": game_now,
            "last_spoke": None, "last_spoke_game": None, "lines": 0, "impression": "",
            "impression_audience": None}


def note_exchange(script, people, lines=1, now=None) -> list[PersonRecord]:
    """
    A line passed between the NPC and each of ``people`` (``docs/design.md``, "Scene, events
    and people"): their records are created when new (first met now), ``lines`` is added to
    their line count and they last spoke now. One Attribute written per person, whatever the
    number of people the NPC has met.

    Args:
        script (AssistantScript): the NPC's script.
        people (dict): ``{dbref: name}``.
        lines (int): lines to count for each.
        now (float, optional): Unix seconds (default the clock).

    Returns:
        list[PersonRecord]: the updated records.
    """
    now = time.time() if now is None else float(now)
    game_now = game_seconds()
    updated = []
    for dbref, name in (people or {}).items():
        if not dbref:
            continue
        record = people_record(script, dbref) or _new_record(dbref, name, now, game_now)
        record.update(name=name or record.get("name"), last_spoke=now,
                      last_spoke_game=game_now, lines=int(record.get("lines") or 0) + lines)
        script.attributes.add(str(dbref), record, category=PEOPLE_CATEGORY)
        updated.append(record)
    return updated


def people_for(script, dbrefs) -> dict[str, PersonRecord]:
    """
    The records of ``dbrefs`` (those the NPC has met; ``docs/design.md``, "Scene, events and
    people"). One Attribute read per dbref.

    Returns:
        dict[str, PersonRecord]: ``{dbref: record}``; a dbref without a record is absent.
    """
    found = {}
    for dbref in dbrefs or ():
        record = people_record(script, dbref)
        if record:
            found[dbref] = record
    return found


def audience_label(script, audience) -> str:
    """
    Who may read something with ``audience`` (a list of dbrefs, or None: public), named from
    the NPC's people records (:func:`ai_contrib.core.audience.describe_audience`): e.g.
    ``"Wren (#12), Tamsin (#13)"``, ``"everyone"``, ``"nobody"``. One Attribute read per
    member.
    """
    names = {dbref: record.get("name") for dbref, record in people_for(script, audience).items()}
    return describe_audience(audience, names)


#: actions a people record keeps (the newest): for staff's views, never a prompt
ACTIONS_KEPT = 5


def note_actions(script, dbrefs, outcomes, now=None) -> list[PersonRecord]:
    """
    What the NPC did in a turn on the words of each of ``dbrefs`` (the people whose lines it
    answered; ``docs/design.md``, "Actions"): each action the game ran added to their people
    records' ``actions`` (``{"action": "give lantern to Wren", "at": Unix seconds, "audience":
    the dbrefs who saw it}``, the newest :data:`ACTIONS_KEPT`), which ``aihistory <npc>/people``
    and the staff web page show. Only people met have records (:func:`note_exchange` made them
    when their line was heard); one Attribute written per person.

    Args:
        script (AssistantScript): the NPC's script.
        dbrefs (iterable[str]): who spoke in the turn.
        outcomes (list[dict]): the turn's actions that ran (``{"call": ActionCall, "audience":
            [dbref]}``, :func:`ai_contrib.npc.actions.run_action`).
        now (float, optional): Unix seconds (default the clock).

    Returns:
        list[PersonRecord]: the updated records.
    """
    if not outcomes:
        return []
    now = time.time() if now is None else float(now)
    done = [{"action": f"{o['call'].name} {o['call'].args}".strip(), "at": now,
             "audience": list(o.get("audience") or [])} for o in outcomes]
    updated = []
    for dbref in dict.fromkeys(d for d in dbrefs or () if d):
        record = people_record(script, dbref)
        if not record:
            continue
        record["actions"] = (list(record.get("actions") or []) + done)[-ACTIONS_KEPT:]
        script.attributes.add(str(dbref), record, category=PEOPLE_CATEGORY)
        updated.append(record)
    return updated


def all_people(script) -> list[PersonRecord]:
    """Every record on ``script``, the most recently spoken to first."""
    records = [deserialize(attr.value) for attr in script.attributes.all(category=PEOPLE_CATEGORY)]
    records = [r for r in records if isinstance(r, dict)]
    return sorted(records, key=lambda r: -(r.get("last_spoke") or r.get("first_met") or 0))


def update_impressions(script, character) -> StepResult:
    """
    The sleep phase's step (``docs/design.md``, "Scene, events and people"): each person's
    impression made again from the newest journal facts
    about them (:func:`ai_contrib.core.scene.impression_from_facts`; no LLM call), with the
    audience of those facts. Only records whose impression changed are written.

    Cost: people met x journal entries, once per sleep.

    Returns:
        StepResult: figures ``{"people": int (records read), "updated": int}``.
    """
    entries = list((deserialize(character.db.journal) or {}).get("entries") or ())
    updated = 0
    records = all_people(script)
    for record in records:
        impression, audience = impression_from_facts(entries, record.get("name"),
                                                     record.get("dbref"))
        if impression == (record.get("impression") or "") and \
                audience == record.get("impression_audience"):
            continue
        record.update(impression=impression, impression_audience=audience)
        script.attributes.add(str(record["dbref"]), record, category=PEOPLE_CATEGORY)
        updated += 1
    return StepResult(figures={"people": len(records), "updated": updated})


# -- the scene ------------------------------------------------------------------------------------


def scene_for(npc, listeners, now=None) -> tuple:
    """
    What ``npc`` sees now, as :func:`ai_contrib.core.scene.render_scene` takes it
    (``docs/design.md``, "Scene, events and people").

    Args:
        npc (AssistantCharacter): the NPC (its script holds the people records).
        listeners (dict | iterable[str]): ``{dbref: name}`` (or dbrefs) of who will hear the
            reply: an impression is shown only when every one of them heard all the facts it
            was made of (``docs/design.md``, "Privacy by audience").
        now (float, optional): Unix seconds (default the clock).

    Returns:
        tuple: ``(place, present, clock)``: ``place`` ``{"name": room key, "desc": room's
        db.desc}`` (None without a room); ``present`` the characters in the room but the NPC,
        in room order, each ``{"dbref", "name", "desc", "known", "last_spoke_ago",
        "impression"}``; ``clock`` :func:`game_clock`.
    """
    now = time.time() if now is None else float(now)
    room = getattr(npc, "location", None)
    clock = game_clock()
    if room is None:
        return None, [], clock
    place = {"name": room.key, "desc": room.db.desc or ""}
    # the NPC's AssistantScript, found by its key: this module stays below the typeclasses
    script = next(iter(npc.scripts.get(SCRIPT_KEY)), None)
    others = [obj for obj in room.contents if obj != npc and isinstance(obj, DefaultCharacter)]
    records = people_for(script, [obj.dbref for obj in others]) if script else {}
    hearers = list(listeners or ())
    present = []
    for obj in others:
        record = records.get(obj.dbref)
        impression = None
        if record and record.get("impression") and heard_by(
                {"audience": record.get("impression_audience")}, hearers):
            impression = record["impression"]
        present.append({
            "dbref": obj.dbref,
            "name": obj.key,
            "desc": obj.db.desc or "",
            "known": bool(record),
            "last_spoke_ago": relative_time(now - record["last_spoke"])
            if record and record.get("last_spoke") is not None else None,
            "impression": impression,
        })
    return place, present, clock


def scene_text(npc, listeners, now=None, max_tokens=None) -> str:
    """
    The ``[SCENE]`` system text for a reply heard by ``listeners`` (:func:`scene_for` rendered
    by :func:`ai_contrib.core.scene.render_scene`; ``max_tokens`` default
    :data:`ai_contrib.core.scene.SCENE_MAX_TOKENS`, in tokens).

    Returns:
        str
    """
    from ..core.scene import SCENE_MAX_TOKENS

    place, present, clock = scene_for(npc, listeners, now=now)
    return render_scene(place, present, clock,
                        max_tokens=SCENE_MAX_TOKENS if max_tokens is None else max_tokens)
