"""
The LoCoMo benchmark's typist (``benchmarks/locomo.py --typing-wpm``): how long a player still
types a line after the NPC's reply, the pause during which the NPC's warm-ups run.
"""

from benchmarks.locomo import typing_left

LINE = "Do you remember where the silver key is"  # 8 words: 6 s at 80 words a minute


def test_a_line_takes_its_words_at_the_typists_pace_less_the_time_gone():
    assert typing_left(LINE, 80, since=100.0, now=100.0) == 6.0
    assert typing_left(LINE, 80, since=100.0, now=102.5) == 3.5
    assert typing_left(LINE, 40, since=100.0, now=100.0) == 12.0  # an ordinary typist


def test_no_pause_once_the_line_is_typed_at_zero_wpm_or_before_any_reply():
    # the turn's memory work outlasted the typing: the line comes at once, never "negative"
    assert typing_left(LINE, 80, since=100.0, now=110.0) == 0.0
    assert typing_left(LINE, 0, since=100.0, now=100.0) == 0.0  # --typing-wpm 0: at once
    assert typing_left(LINE, 80, since=None, now=100.0) == 0.0  # the first line of the replay
    # positive control: the same line with time left is a pause
    assert typing_left(LINE, 80, since=100.0, now=105.0) == 1.0
