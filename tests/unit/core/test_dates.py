"""
Relative dates in remembered lines (``ai_contrib.core.dates``): a line retrieved weeks after it
was said carries the date its "yesterday" or "last week" meant then.
"""

import re
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ai_contrib.core.dates import aware_datetime, epoch_seconds, resolve_relative_dates
from ai_contrib.memory.retrieval import format_memory_line

SAID = "2023-05-08T13:56:00+00:00"  # a Monday


@pytest.mark.parametrize("text, expected", [
    ("I went to the group yesterday.", "I went to the group yesterday (7 May 2023)."),
    ("Last night was loud", "Last night (7 May 2023) was loud"),
    ("the day before yesterday", "the day before yesterday (6 May 2023)"),
    ("see you tomorrow", "see you tomorrow (9 May 2023)"),
    ("we moved last week", "we moved last week (the week before 8 May 2023)"),
    ("this past weekend we hiked",
     "this past weekend (the weekend before 8 May 2023) we hiked"),
    ("last Friday was fun", "last Friday (5 May 2023) was fun"),
    ("last Monday", "last Monday (1 May 2023)"),
    ("next Monday", "next Monday (15 May 2023)"),
    ("last month I ran", "last month (April 2023) I ran"),
    ("next month", "next month (June 2023)"),
    ("Last year", "Last year (2022)"),
    ("two years ago", "two years ago (2021)"),
    ("a couple of days ago", "a couple of days ago (6 May 2023)"),
    ("3 weeks ago", "3 weeks ago (the week of 17 April 2023)"),
    ("14 months ago", "14 months ago (March 2022)"),
    ("recently, the other day, today", "recently, the other day, today"),
])
def test_relative_dates_get_the_date_they_meant_when_said(text, expected):
    assert resolve_relative_dates(text, SAID) == expected


def test_a_line_without_a_known_time_is_left_as_it_is():
    assert resolve_relative_dates("I went yesterday", None) == "I went yesterday"
    assert resolve_relative_dates("I went yesterday", "sometime") == "I went yesterday"


_WORDS = st.sampled_from(["I", "went", "yesterday", "last", "week", "Friday", "month", "ago",
                          "two", "days", "next", "year", "the", "weekend", "a"])


@given(st.lists(_WORDS, max_size=14).map(" ".join),
       st.datetimes(min_value=datetime(1900, 3, 1), max_value=datetime(2999, 10, 1)))
def test_only_brackets_are_added_and_twice_is_once(text, when):
    """Any line: the annotation adds bracketed dates and nothing else, and is idempotent."""
    once = resolve_relative_dates(text, when)
    assert resolve_relative_dates(once, when) == once
    # taking the added brackets out gives the line back word for word
    assert re.sub(r" \([\w ]+\)", "", once) == text


def test_a_remembered_line_carries_the_date_it_meant():
    candidate = {"kind": "message", "text": "I went to the support group yesterday.",
                 "metadata": {"name": "Caroline", "timestamp": SAID}}
    assert format_memory_line(candidate) == (
        '- [2023-05-08 13:56] Caroline: "I went to the support group yesterday (7 May 2023)."')
    # a time typed in front of the text is the player's words: the server's time still leads,
    # and relative dates are read from when it was said
    dated = dict(candidate, text="[7 May, 2021] I went yesterday.")
    assert format_memory_line(dated) == (
        '- [2023-05-08 13:56] Caroline: "[7 May, 2021] I went yesterday (7 May 2023)."')


def test_the_dates_added_never_cut_off_what_was_said():
    said = ("We talked for hours about the shelter. " * 9
            + "Oh, and then I went there again yesterday.")
    assert 390 < len(said) < 400  # under the old 400 characters, not with its date
    candidate = {"kind": "message", "text": said,
                 "metadata": {"name": "Caroline", "timestamp": SAID}}
    line = format_memory_line(candidate)
    # the whole line, its date added: before, the date took room the line's end needed
    assert line.endswith('I went there again yesterday (7 May 2023)."')
    assert resolve_relative_dates(said, SAID) in line
    # a line too long for a note is still clipped, and says so
    long = dict(candidate, text="word " * 200)
    clipped = format_memory_line(long)
    assert clipped.endswith('\u2026"') and len(clipped) < 560


def test_stored_times_read_as_aware_datetimes_and_epoch_seconds():
    aware = "2026-05-07T10:00:00+02:00"
    assert aware_datetime(aware) == datetime(2026, 5, 7, 8, tzinfo=timezone.utc)
    # a naive time (an older record) is read as UTC, not as the server's local time
    assert aware_datetime("2026-05-07T08:00:00") == aware_datetime(aware)
    assert aware_datetime("2026-05-07T08:00:00Z") == aware_datetime(aware)
    assert epoch_seconds(aware) == datetime(2026, 5, 7, 8, tzinfo=timezone.utc).timestamp()
    moment = datetime(2026, 5, 7, tzinfo=timezone(timedelta(hours=-5)))
    assert aware_datetime(moment) is moment
    for unreadable in (None, "", "yesterday", 12):
        assert aware_datetime(unreadable) is None
        assert epoch_seconds(unreadable) is None
