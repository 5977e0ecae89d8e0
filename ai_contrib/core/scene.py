"""
Situational awareness: what the NPC sees around it and whom it has met (``docs/design.md``,
"Scene, events and people").

- :func:`render_scene` turns the NPC's place, the characters present and the game's clock into
  one short ``[SCENE]`` system text, capped in tokens;
- :func:`event_text` is the one-line form of something the NPC saw (an arrival, a pose, a
  gift), stored as an event record and shown in reply prompts in parentheses;
- :func:`relative_time` and :func:`describe_acquaintance` say how long ago the NPC last spoke
  with someone; :func:`impression_from_facts` makes a short impression of a person from the
  journal facts about them;
- :func:`clock_from_game_seconds` reads a time of day, a day and a season from the game's clock.

Everything a player chose (names, descriptions, pose text) is data: it goes through
:func:`ai_contrib.core.text.normalise_player_text` (one line, no control characters, chat
template special tokens broken up) before it is rendered.

Pure functions: no Evennia, Twisted or Django.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TypedDict

from .audience import common_audience
from .text import normalise_player_text

SCENE_PREFIX = "[SCENE]"
#: tokens the scene text may take at most (names cut to fit, then descriptions, then people)
SCENE_MAX_TOKENS = 120
#: characters of the place's description kept (its first sentence, at most this long)
PLACE_DESC_CHARS = 160
#: characters of a present character's description kept (its first sentence)
PERSON_DESC_CHARS = 60
#: characters of a name kept
NAME_CHARS = 40
#: people listed at most; the rest are counted ("and 3 others")
MAX_PRESENT = 12
#: characters an event's text may take (names and pose text included)
EVENT_MAX_CHARS = 300
#: characters an impression may take
IMPRESSION_CHARS = 120
#: journal facts an impression is made of at most (the newest)
IMPRESSION_FACTS = 3

#: events an NPC records in any 60 seconds at most (a flood of emotes is not recorded)
EVENTS_PER_MINUTE = 12
#: metadata["kind"] of an event record (docs/design.md, "Scene, events and people")
EVENT_KIND = "event"

_SEASONS = ("winter", "spring", "summer", "autumn")
_UNITS = (("year", 365 * 86400), ("month", 30 * 86400), ("week", 7 * 86400),
          ("day", 86400), ("hour", 3600), ("minute", 60))


def clean(text, max_chars) -> str:
    """
    Player-chosen text (a name, a description) as one safe line of at most ``max_chars``
    characters (:func:`ai_contrib.core.text.normalise_player_text`).

    Returns:
        str: possibly ``""``.
    """
    return normalise_player_text(text or "", max_chars)


def first_sentence(text, max_chars) -> str:
    """
    The first sentence of ``text`` (normalised to one line), at most ``max_chars`` characters
    (cut at a word with ``"..."`` when longer).

    Returns:
        str: possibly ``""``.
    """
    text = str(text or "")
    text = clean(text, 2 * len(text) + 1)  # uncapped: breaking up special tokens adds spaces
    for i, char in enumerate(text):
        if char in ".!?" and (i + 1 == len(text) or text[i + 1] == " "):
            text = text[: i + 1]
            break
    return clean(text, max_chars)


def is_event(msg) -> bool:
    """True for an event record (``metadata["kind"] == "event"``): seen, not said."""
    return (msg.get("metadata") or {}).get("kind") == EVENT_KIND


def event_text(text, max_chars=EVENT_MAX_CHARS) -> str:
    """
    What the NPC saw, as stored in an event record (``docs/design.md``, "Scene, events and
    people"): one normalised line in parentheses,
    ``"(Wren arrives from the north.)"``. Parentheses keep it apart from speech in a prompt and
    mean its text never starts like a summary marker (``[CONTEXT SUMMARY]``).

    Args:
        text (str): the game's line (markup already stripped), e.g. ``"Wren smiles."``.
        max_chars (int): characters of ``text`` kept.

    Returns:
        str: ``""`` when nothing is left.
    """
    text = clean(text, max_chars).strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    return f"({text})" if text else ""


def relative_time(seconds) -> str:
    """
    ``seconds`` ago in words: ``"just now"`` (under a minute), ``"5 minutes ago"``,
    ``"an hour ago"``, ``"3 days ago"``, ``"2 months ago"``, ``"a year ago"`` (a month is 30
    days, a year 365). A negative duration (a clock set back) reads ``"just now"``.

    Args:
        seconds (float): the duration in seconds.

    Returns:
        str
    """
    seconds = float(seconds or 0)
    if seconds < 60:
        return "just now"
    for unit, size in _UNITS:
        if seconds >= size:
            count = int(seconds // size)
            if count == 1:
                return f"{'an' if unit == 'hour' else 'a'} {unit} ago"
            return f"{count} {unit}s ago"
    return "just now"  # not reached: a minute is the smallest unit


def describe_acquaintance(record, now) -> str:
    """
    One phrase about the NPC and a person, from their people record: ``"you last spoke with
    Wren 3 days ago"``, ``"you met Wren 2 hours ago but have not spoken"``, or ``"you have not
    met Wren"`` for None.

    Args:
        record (dict | None): a people record (``docs/design.md``, "Scene, events and people":
            ``{"name", "first_met", "last_spoke", "lines", ...}``, times in Unix seconds).
        now (float): the current time, Unix seconds.

    Returns:
        str
    """
    if not record:
        return "you have not met them"
    name = clean(record.get("name"), NAME_CHARS) or "them"
    if record.get("last_spoke") is not None:
        return f"you last spoke with {name} {relative_time(now - record['last_spoke'])}"
    if record.get("first_met") is not None:
        return f"you met {name} {relative_time(now - record['first_met'])} but have not spoken"
    return f"you have not met {name}"


def _season(month, months_per_year=12):
    """The season of a month (0-based) in a year of ``months_per_year`` months, four equal."""
    return _SEASONS[int(((month + 1) % months_per_year) * 4 // months_per_year)]


def time_of_day(hour) -> str:
    """``"night"`` (21-5), ``"morning"`` (5-12), ``"afternoon"`` (12-17) or ``"evening"``."""
    hour = int(hour) % 24
    if 5 <= hour < 12:
        return "morning"
    if 12 <= hour < 17:
        return "afternoon"
    if 17 <= hour < 21:
        return "evening"
    return "night"


class GameClock(TypedDict, total=False):
    """The game's clock in words (:func:`clock_from_game_seconds`); a part the calendar cannot
    give is left out, possibly all (``{}``)."""

    time_of_day: str  #: ``"morning"``, ``"afternoon"``, ``"evening"`` or ``"night"``
    day: int  #: the day of the season, from 1
    season: str  #: ``"spring"``, ``"summer"``, ``"autumn"`` or ``"winter"``


def clock_from_game_seconds(seconds, units=None) -> GameClock:
    """
    The game's clock in words.

    Args:
        seconds (float): the game time, seconds since the game's epoch (Evennia's
            ``gametime.gametime(absolute=True)``).
        units (dict, optional): a custom calendar, seconds per ``"hour"``, ``"day"``,
            ``"month"`` and ``"year"`` (Evennia's ``TIME_UNITS`` of the custom game time
            contrib). None: the real calendar (the game time read as a UTC date, seasons of the
            northern hemisphere: spring from March).

    Returns:
        GameClock: with a custom calendar lacking ``"hour"`` or ``"day"`` (or with nonsense
        units) the parts it cannot give are left out, possibly all (``{}``).
    """
    seconds = float(seconds)
    if units is None:
        date = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds)
        season = _season(date.month - 1)
        # the season started on the first of the month of its first month
        start_month = {"winter": 12, "spring": 3, "summer": 6, "autumn": 9}[season]
        start_year = date.year - 1 if start_month == 12 and date.month < 12 else date.year
        start = datetime(start_year, start_month, 1, tzinfo=timezone.utc)
        return {"time_of_day": time_of_day(date.hour), "day": (date - start).days + 1,
                "season": season}
    clock = {}
    try:
        hour, day = float(units.get("hour") or 0), float(units.get("day") or 0)
        month, year = float(units.get("month") or 0), float(units.get("year") or 0)
    except (TypeError, ValueError, AttributeError):
        return clock
    if hour > 0 and day >= hour:
        clock["time_of_day"] = time_of_day((seconds % day) // hour * 24 // max(1, day // hour))
    if day > 0 and month >= day and year >= month:
        into_year = seconds % year
        months = max(1, int(round(year / month)))
        current = int(into_year // month)
        clock["season"] = _season(current, months)
        # the first month of this season: walk back while the season is the same
        first = current
        for _ in range(months):
            if _season((first - 1) % months, months) != clock["season"]:
                break
            first -= 1
        clock["day"] = int((into_year - first * month) // day) + 1
    return clock


def impression_from_facts(entries, name, dbref=None, max_chars=IMPRESSION_CHARS,
                          limit=IMPRESSION_FACTS) -> tuple:
    """
    A short impression of a person from the NPC's journal: the newest facts about them
    (entries of source ``"fact"`` or ``"observation"`` whose ``speaker`` or ``entity`` is the
    person, or whose text names them as a whole word; private entries without an audience
    are skipped), newest first, joined with ``"; "`` and
    cut to ``max_chars`` characters.

    Args:
        entries (list[dict]): journal entries, oldest first (shape in
            :mod:`ai_contrib.memory.journal`).
        name (str): the person's name (compared without case).
        dbref (str, optional): the person's dbref (``"#12"``), compared with ``speaker``.
        max_chars (int): characters of the impression at most.
        limit (int): facts used at most.

    Returns:
        tuple: ``(impression, audience)``: ``impression`` a str (``""`` when no fact names
        the person); ``audience`` :func:`ai_contrib.core.audience.common_audience` of the
        facts used (None: public), so the impression is shown only to those who heard all of
        them (``docs/design.md``, "Privacy by audience").
    """
    wanted = (name or "").strip().lower()
    if not wanted:
        return "", None
    chosen = []
    for entry in reversed(entries or ()):
        if entry.get("source_type") not in ("fact", "observation"):
            continue
        if entry.get("audience") is None and entry.get("visibility") == "private":
            continue  # a player's words from before audiences were recorded: not repeated
        who = {str(entry.get("speaker") or "").lower(), str(entry.get("entity") or "").lower()}
        text = str(entry.get("content") or "")
        words = {word.strip(".,;:!?'\"()").lower() for word in text.split()}
        if wanted in who or (dbref and dbref.lower() in who) or wanted in words \
                or (" " in wanted and wanted in text.lower()):
            chosen.append(entry)
            if len(chosen) >= limit:
                break
    if not chosen:
        return "", None
    text = "; ".join(clean(entry.get("content"), max_chars).rstrip(".") for entry in chosen)
    audience = common_audience(chosen)
    return clean(text, max_chars), audience


def clock_phrase(clock) -> str:
    """
    A clock (:func:`clock_from_game_seconds`) in words: ``"evening, day 3 of spring"``;
    ``""`` for an empty one.
    """
    clock = clock or {}
    parts = []
    if clock.get("time_of_day"):
        parts.append(clean(clock["time_of_day"], 20))
    day, season = clock.get("day"), clock.get("season")
    if day and season:
        parts.append(f"day {int(day)} of {clean(season, 20)}")
    elif season:
        parts.append(clean(season, 20))
    elif day:
        parts.append(f"day {int(day)}")
    return ", ".join(parts)


def _describe_clock(clock):
    phrase = clock_phrase(clock)
    return f"It is {phrase}." if phrase else ""


def _describe_person(person, detail=True):
    name = clean(person.get("name"), NAME_CHARS) or "someone"
    if not detail:
        return name
    bits = []
    desc = first_sentence(person.get("desc"), PERSON_DESC_CHARS).rstrip(".")
    if desc:
        bits.append(desc)
    if person.get("known"):
        ago = clean(person.get("last_spoke_ago"), 30)
        bits.append(f"you last spoke {ago}" if ago else "you have met")
        impression = clean(person.get("impression"), IMPRESSION_CHARS)
        if impression:
            bits.append(f"you recall: {impression}")
    else:
        bits.append("you have not met")
    return f"{name} ({'; '.join(bits)})"


def render_scene(place, present, clock=None, max_tokens=SCENE_MAX_TOKENS, count=None) -> str:
    """
    The NPC's surroundings as one short system text (``docs/design.md``, "Scene, events and
    people")::

        [SCENE] You are in The Sleeping Stag: a low-beamed inn. It is evening, day 3 of
        spring. Present: Wren (a tall ranger; you last spoke 3 days ago), Tamsin (you have
        not met).

    Names, descriptions and impressions are normalised player text (one line, special tokens
    broken up) and cut: a name to :data:`NAME_CHARS` characters, the place's description to
    its first sentence and :data:`PLACE_DESC_CHARS` characters, a person's to its first
    sentence and :data:`PERSON_DESC_CHARS`. At most :data:`MAX_PRESENT` people are listed
    (the rest are counted). When the text is still over ``max_tokens`` the people lose their
    details from the last one up, then are counted instead of listed, then the place loses its
    description.

    Args:
        place (dict | None): ``{"name": str, "desc": str}`` (either may be missing).
        present (list[dict]): the characters the NPC sees, in order, each ``{"dbref": str,
            "name": str, "desc": str | None, "known": bool, "last_spoke_ago": str | None
            (e.g. ``"3 days ago"``), "impression": str | None}``.
        clock (dict, optional): ``{"time_of_day": str, "day": int, "season": str}``, any part
            optional (:func:`clock_from_game_seconds`).
        max_tokens (int): the most tokens the text may take (as ``count`` counts them).
        count (callable, optional): ``str -> int`` tokens (default
            :func:`ai_contrib.core.tokens.count_tokens`).

    Returns:
        str: the text; never empty (at least ``"[SCENE] You are somewhere."``). It may exceed
        ``max_tokens`` only when its bare minimum (prefix, place name and clock) does.
    """
    if count is None:
        from .tokens import count_tokens as count
    place = place or {}
    name = clean(place.get("name"), NAME_CHARS)
    desc = first_sentence(place.get("desc"), PLACE_DESC_CHARS)
    when = _describe_clock(clock)
    people = list(present or ())
    shown = people[:MAX_PRESENT]
    extra = len(people) - len(shown)
    detailed = len(shown)

    def text(with_desc=True):
        where = f"You are in {name}" if name else "You are somewhere"
        where += f": {desc}" if with_desc and desc else "."
        if not where.endswith((".", "!", "?")):
            where += "."
        parts = [SCENE_PREFIX, where]
        if when:
            parts.append(when)
        if shown or extra:
            listed = [_describe_person(p, i < detailed) for i, p in enumerate(shown)]
            if extra:
                listed.append(f"and {extra} other{'s' if extra != 1 else ''}")
            parts.append("Present: " + ", ".join(listed) + ".")
        else:
            parts.append("No one else is here.")
        return " ".join(parts)

    out = text()
    while count(out) > max_tokens:
        if detailed > 0:
            detailed -= 1
        elif shown:
            shown.pop()
            extra += 1
        else:
            return text(with_desc=False)
        out = text()
    return out
