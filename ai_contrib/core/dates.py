"""
Relative dates in remembered lines, resolved against the time the line was said
(``docs/design.md``, "Recall notes").

A line retrieved from weeks ago that says "I went to the support group yesterday" no longer tells
the model when that was: "yesterday" now means another day. So a remembered line carries the
date its relative expressions meant when it was said, in brackets after each one::

    "I went yesterday"           -> "I went yesterday (7 May 2023)"
    "we moved last week"          -> "we moved last week (the week before 8 May 2023)"
    "last Friday was fun"         -> "last Friday (5 May 2023) was fun"
    "two years ago"               -> "two years ago (2021)"

Only expressions whose meaning is certain are resolved ("yesterday", "last"/"next" with a day,
week, weekend, month or year, "<n> days/weeks/months/years ago"); vague ones ("recently", "the
other day") stay as they are. Pure functions; times are :class:`datetime.datetime` or ISO 8601
strings (what a message's ``timestamp`` holds).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3,
}
_COUNT = r"(\d{1,2}|a couple of|a few|an|a|one|two|three|four|five|six|seven|eight|nine|ten)"
_PATTERN = re.compile(
    r"\b(?:"
    r"(?P<before>the day before yesterday)"
    r"|(?P<yesterday>yesterday)"
    r"|(?P<lastnight>last night)"
    r"|(?P<tomorrow>tomorrow)"
    r"|(?:last|this past) (?P<pastunit>weekend|week|month|year)"
    r"|next (?P<nextunit>weekend|week|month|year)"
    r"|(?:last|this past) (?P<pastday>" + "|".join(WEEKDAYS) + r")"
    r"|next (?P<nextday>" + "|".join(WEEKDAYS) + r")"
    r"|(?P<count>" + _COUNT + r") (?P<agounit>day|week|month|year)s? ago"
    r")\b(?! \()",
    re.IGNORECASE,
)


def as_datetime(when) -> datetime | None:
    """``when`` as a :class:`datetime.datetime`, or None when it is missing or unreadable."""
    if isinstance(when, datetime):
        return when
    if not when:
        return None
    try:
        return datetime.fromisoformat(str(when).replace("Z", "+00:00"))
    except ValueError:
        return None


def aware_datetime(when) -> datetime | None:
    """``when`` (a :class:`datetime.datetime` or ISO 8601 text) as a timezone-aware datetime, a
    naive one read as UTC; None when it is missing or unreadable."""
    moment = as_datetime(when)
    if moment is None or moment.tzinfo:
        return moment
    return moment.replace(tzinfo=timezone.utc)


def epoch_seconds(when) -> float | None:
    """``when`` (see :func:`aware_datetime`) in seconds since the Unix epoch, or None."""
    moment = aware_datetime(when)
    return moment.timestamp() if moment else None


def short_time(timestamp) -> str:
    """``2026-11-20T14:02:11.5+00:00`` -> ``2026-11-20 14:02``; other strings unchanged, "" for
    none: the server time a prompt shows beside a remembered or resumed line."""
    if not timestamp:
        return ""
    text = str(timestamp)
    match = re.match(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})", text)
    return f"{match.group(1)} {match.group(2)}" if match else text


def day_text(day) -> str:
    """``datetime(2023, 5, 7)`` -> ``"7 May 2023"``."""
    return f"{day.day} {day.strftime('%B')} {day.year}"


def _month_text(when, months):
    index = when.year * 12 + when.month - 1 + months
    return f"{datetime(index // 12, index % 12 + 1, 1).strftime('%B')} {index // 12}"


def _count(text):
    text = text.lower()
    return int(text) if text.isdigit() else _NUMBERS[text]


def _meaning(match, when):
    """The bracketed meaning of one matched expression said at ``when``."""
    groups = match.groupdict()
    said = day_text(when)
    if groups["before"]:
        return day_text(when - timedelta(days=2))
    if groups["yesterday"] or groups["lastnight"]:
        return day_text(when - timedelta(days=1))
    if groups["tomorrow"]:
        return day_text(when + timedelta(days=1))
    unit = (groups["pastunit"] or groups["nextunit"] or "").lower()
    if unit:
        step = -1 if groups["pastunit"] else 1
        if unit in ("week", "weekend"):
            return f"the {unit} {'before' if step < 0 else 'after'} {said}"
        if unit == "month":
            return _month_text(when, step)
        return str(when.year + step)
    weekday = (groups["pastday"] or groups["nextday"] or "").lower()
    if weekday:
        target = WEEKDAYS.index(weekday)
        if groups["pastday"]:
            back = (when.weekday() - target) % 7 or 7
            return day_text(when - timedelta(days=back))
        ahead = (target - when.weekday()) % 7 or 7
        return day_text(when + timedelta(days=ahead))
    count, unit = _count(groups["count"]), groups["agounit"].lower()
    if unit == "day":
        return day_text(when - timedelta(days=count))
    if unit == "week":
        return f"the week of {day_text(when - timedelta(weeks=count))}"
    if unit == "month":
        return _month_text(when, -count)
    return str(when.year - count)


def resolve_relative_dates(text, when) -> str:
    """
    ``text`` with the date each relative expression meant at ``when`` in brackets after it.

    Args:
        text (str): a line as it was said.
        when (datetime | str | None): when it was said (a message's ``timestamp``).

    Returns:
        str: the annotated text; ``text`` unchanged when ``when`` is unknown or nothing in it is
        relative. An expression already followed by a bracket is left alone, so annotating
        twice changes nothing.
    """
    when = as_datetime(when)
    if when is None or not text:
        return text
    return _PATTERN.sub(lambda m: f"{m.group(0)} ({_meaning(m, when)})", text)
