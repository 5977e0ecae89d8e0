"""
The tick policy (``ai_contrib.core.tick``): what an NPC's tick is due to do, as properties over
every state hypothesis draws, and the cases that decide an NPC's day.
"""

from hypothesis import given
from hypothesis import strategies as st

from ai_contrib.core.tick import (
    OVER_BUDGET,
    SLEEP_JOURNAL_MIN_MESSAGES,
    Due,
    TickState,
    due,
    hurry_at,
    hurry_threshold,
    in_flight_target,
    overflow_target,
    reaches,
    tick_needed,
    usage_zone,
)

seconds = st.floats(min_value=0, max_value=10_000, allow_nan=False)
states = st.builds(
    TickState,
    awake=st.booleans(),
    usage=st.floats(min_value=0, max_value=3, allow_nan=False),
    compact_enabled=st.booleans(),
    emergency_threshold=st.floats(min_value=0.1, max_value=1.0, allow_nan=False),
    sleep_threshold=st.floats(min_value=0.1, max_value=1.0, allow_nan=False),
    breaker_open=st.booleans(),
    summarises=st.booleans(),
    unjournaled=st.integers(min_value=0, max_value=3 * SLEEP_JOURNAL_MIN_MESSAGES),
    pending=st.booleans(),
    waiting_for_players=st.booleans(),
    listeners=st.booleans(),
    memory_work=st.booleans(),
    compacting=st.booleans(),
    slept=st.booleans(),
    slept_for=seconds,
    sleep_duration=st.sampled_from([0.0, 60.0, 3600.0]),
    idle_for=st.none() | seconds,
    sleep_after_idle=st.sampled_from([0.0, 60.0, 900.0]),
    checkpoint_due=st.booleans(),
    busy=st.booleans(),
    warming=st.booleans(),
    prompted=st.booleans(),
    head_changed=st.booleans(),
    fetch_ahead=st.booleans(),
    work_began=st.none() | st.floats(min_value=0, max_value=3, allow_nan=False),
    hurried=st.booleans(),
    hurry_enabled=st.booleans(),
)


@given(states)
def test_the_cheap_test_never_skips_a_tick_with_work(state):
    now = due(state)
    if not tick_needed(state):
        assert not (now.checkpoint or now.wake or now.memory_work or now.answer
                    or now.fall_asleep or now.start_clock)


@given(states)
def test_asleep_or_awake_each_does_only_its_own_work(state):
    now = due(state)
    if state.awake:
        assert now.wake is None and now.memory_work in (None, "emergency")
    else:
        assert not (now.answer or now.fall_asleep or now.start_clock)
        assert now.memory_work in (None, "sleep")
        assert (now.wake == "spoken to") == state.pending


@given(states)
def test_memory_work_starts_only_when_none_runs_and_once_per_sleep(state):
    now = due(state)
    if state.memory_work:
        assert now.memory_work is None
    if not state.awake and state.slept:
        assert now.memory_work is None
    emergency = (state.awake and state.compact_enabled and not state.memory_work
                 and state.usage >= state.emergency_threshold)
    assert (now.memory_work == "emergency") == emergency


@given(states)
def test_sleep_work_waits_for_a_compaction_and_is_never_cut_off_before_it_starts(state):
    now = due(state)
    if not state.awake and state.compacting:
        assert now.memory_work is None  # its own compaction would be skipped beside that one
    if not state.awake and not state.slept:
        assert now.wake != "rested"  # AI_SLEEP_DURATION counts once the sleep work started
    if not state.awake and state.slept_for < state.sleep_duration:
        assert now.wake != "rested"  # ... and from when it started
    # positive control: started and past its duration, a sleeping NPC wakes by itself
    if not state.awake and state.slept and not state.pending and state.sleep_duration \
            and state.slept_for >= state.sleep_duration:
        assert now.wake == "rested"


@given(states)
def test_the_history_is_bounded_by_whatever_is_running(state):
    now = due(state)
    in_flight = state.memory_work or state.compacting
    assert now.bound_in_flight == in_flight
    assert now.evict_overflow == (state.usage >= OVER_BUDGET and not in_flight)
    assert not (now.bound_in_flight and now.evict_overflow)


@given(states)
def test_memory_work_is_hurried_once_the_talk_outruns_it(state):
    now = due(state)
    in_flight = state.memory_work or state.compacting
    at = hurry_at(state.work_began, state.emergency_threshold)
    threshold = hurry_threshold(state.emergency_threshold)
    assert state.emergency_threshold <= threshold <= OVER_BUDGET
    assert at >= threshold
    if state.work_began is not None:  # the talk must add as much as to the threshold
        assert at - state.work_began >= threshold - state.emergency_threshold - 1e-9
    assert now.hurry == bool(in_flight and state.hurry_enabled
                             and (state.hurried or state.usage >= at))
    assert not now.hurry or now.bound_in_flight  # only memory work under way is hurried


def test_work_begun_at_the_emergency_threshold_is_hurried_halfway_to_the_budget():
    assert hurry_threshold(0.8) == 0.9
    assert due(TickState(usage=0.9, compacting=True, work_began=0.8)).hurry
    # control: the talk has not caught up yet
    assert not due(TickState(usage=0.89, compacting=True, work_began=0.8)).hurry
    # work begun over the budget (a restore, a smaller budget) has the same distance to go
    assert not due(TickState(usage=1.6, compacting=True, work_began=1.55)).hurry
    assert due(TickState(usage=1.65, compacting=True, work_began=1.55)).hurry
    # ... unless the game waits for the model whatever the talk does
    assert not due(TickState(usage=0.9, compacting=True, work_began=0.8,
                             hurry_enabled=False)).hurry
    # once hurried, to its end
    assert due(TickState(usage=0.5, compacting=True, work_began=0.8, hurried=True)).hurry
    # nothing to hurry: with no work under way an over-budget history is evicted instead
    assert not due(TickState(usage=1.5)).hurry
    assert due(TickState(usage=1.5)).evict_overflow


@given(states)
def test_a_reply_comes_before_a_warm_up_and_a_warm_up_only_for_a_changed_idle_prompt(state):
    now = due(state)
    assert not (now.kick and now.warm_up)
    if now.warm_up:
        assert state.prompted and (state.head_changed or state.fetch_ahead)
        assert not state.pending
        assert state.usage < OVER_BUDGET and not state.busy and not state.warming
    if now.kick:
        assert state.awake and state.pending and state.listeners
        assert not state.waiting_for_players
    assert not (now.kick_after_work and now.warm_up)
    assert now.kick_after_work == (state.pending and state.listeners)
    assert now.kick <= now.kick_after_work  # what a reply's end kicks, memory work's end does
    if state.awake:
        assert now.answer == (state.pending and not state.waiting_for_players)


@given(states)
def test_an_npc_falls_asleep_only_idle_with_nothing_queued(state):
    now = due(state)
    if now.fall_asleep:
        assert state.awake and not state.pending and state.sleep_after_idle
        assert state.idle_for is not None and state.idle_for >= state.sleep_after_idle


def test_a_day_of_an_npc():
    # spoken to while asleep: wakes and the tick goes on (awake, it answers)
    asleep = TickState(awake=False, pending=True, slept=True, slept_for=5)
    assert due(asleep).wake == "spoken to"
    assert due(TickState(pending=True, idle_for=0)).answer
    # rested: wakes, nothing else; not yet: its sleep phase starts once
    assert due(TickState(awake=False, slept_for=61, sleep_duration=60, slept=True)) == Due(
        wake="rested")
    assert due(TickState(awake=False, sleep_duration=60)).memory_work == "sleep"
    # an emergency compaction still running: the sleep work has not started, so the NPC
    # sleeps on whatever the time, and once it starts the duration counts from then
    waits = due(TickState(awake=False, sleep_duration=60, memory_work=True))
    assert waits.wake is None and waits.memory_work is None
    after = due(TickState(awake=False, sleep_duration=60))
    assert after.wake is None and after.memory_work == "sleep"
    started = TickState(awake=False, sleep_duration=60, slept=True, memory_work=True,
                        slept_for=10)
    assert due(started).wake is None
    assert due(TickState(awake=False, sleep_duration=60, slept=True, memory_work=True,
                         slept_for=60)).wake == "rested"  # the work goes on, awake
    # at the emergency threshold with a compaction running: no second one, the history bounded
    busy = due(TickState(usage=0.85, memory_work=True, idle_for=1))
    assert busy.memory_work is None and busy.bound_in_flight
    assert due(TickState(usage=0.85, idle_for=1)).memory_work == "emergency"
    assert due(TickState(usage=0.85, compact_enabled=False, idle_for=1)).memory_work is None
    # an NPC's line waits for a player's turn: not answered, not kicked
    waiting = due(TickState(pending=True, waiting_for_players=True, idle_for=1))
    assert not waiting.answer and not waiting.kick
    # a compaction landed while the NPC was idle: its next prompt is warmed
    idle = TickState(idle_for=1, prompted=True, head_changed=True)
    assert due(idle).warm_up
    assert not due(TickState(idle_for=1, prompted=False, head_changed=True)).warm_up
    assert not due(TickState(idle_for=1, prompted=True, head_changed=True, usage=1.2)).warm_up
    # a question's reply left memories out for time: they are fetched ahead the same way
    assert not due(TickState(idle_for=1, prompted=True)).warm_up
    assert due(TickState(idle_for=1, prompted=True, fetch_ahead=True)).warm_up
    assert not due(TickState(idle_for=1, prompted=True, fetch_ahead=True, pending=True)).warm_up
    # idle long enough, nothing queued: falls asleep
    assert due(TickState(idle_for=901, sleep_after_idle=900)).fall_asleep
    assert not due(TickState(idle_for=901, sleep_after_idle=900, pending=True)).fall_asleep
    assert not tick_needed(TickState(idle_for=10, sleep_after_idle=900))


@given(states)
def test_the_emergency_check_compacts_at_its_threshold_and_evicts_only_behind_the_breaker(state):
    now = due(state)
    at = (state.compact_enabled and not state.compacting
          and state.usage >= state.emergency_threshold)
    assert (now.emergency is not None) <= at  # nothing below the threshold or beside a compaction
    assert (now.emergency == "compact") == (at and not state.breaker_open)
    assert (now.emergency == "evict") == (at and state.breaker_open and now.over_budget)
    assert now.over_budget == (state.usage >= OVER_BUDGET)
    # the check it starts is the emergency memory work's: due awake at the same threshold
    if now.memory_work == "emergency" and not state.compacting and not state.breaker_open:
        assert now.emergency == "compact"


@given(states)
def test_the_sleep_phase_journals_when_its_compaction_is_due_or_enough_was_said(state):
    now = due(state)
    compaction_due = (state.compact_enabled and state.summarises
                      and state.usage >= state.sleep_threshold)
    enough = state.unjournaled >= SLEEP_JOURNAL_MIN_MESSAGES
    assert now.sleep_extraction == (compaction_due or enough)


@given(st.floats(min_value=0, max_value=3, allow_nan=False),
       st.floats(min_value=0.1, max_value=1.0, allow_nan=False),
       st.floats(min_value=0.1, max_value=1.0, allow_nan=False))
def test_the_usage_bar_zones_follow_the_thresholds(usage, sleep_at, emergency_at):
    zone = usage_zone(usage, sleep_at, emergency_at)
    assert (zone == "below") == (usage < sleep_at)
    if zone == "emergency":
        assert usage >= emergency_at and reaches(usage, emergency_at)
    if zone == "sleep":
        assert sleep_at <= usage < emergency_at


@given(st.integers(min_value=0, max_value=100_000), st.integers(min_value=1, max_value=50_000),
       st.floats(min_value=1.0, max_value=4.0, allow_nan=False),
       st.floats(min_value=0.1, max_value=1.0, allow_nan=False))
def test_evictions_go_below_what_set_them_off(tokens, budget, cap, threshold):
    target = in_flight_target(tokens, budget, cap)
    if tokens < cap * budget:
        assert target is None  # under the cap nothing goes
    else:
        # halfway between the budget and the cap: under the cap, never under the budget
        assert budget <= target <= cap * budget
    assert overflow_target(threshold, budget) == threshold * budget <= budget


def test_memory_work_in_an_npcs_day():
    # at the emergency threshold: compact; behind an open breaker: evict only over budget
    assert due(TickState(usage=0.85)).emergency == "compact"
    assert due(TickState(usage=0.85, breaker_open=True)).emergency is None
    assert due(TickState(usage=1.2, breaker_open=True)).emergency == "evict"
    assert due(TickState(usage=0.85, compacting=True)).emergency is None
    assert due(TickState(usage=0.5)).emergency is None
    # asleep at 75 %: the summary compaction is due, so the sleep journals first; mask writes no
    # summary, so only ten lines said since the last journaling make it journal
    assert due(TickState(awake=False, usage=0.75)).sleep_extraction
    assert not due(TickState(awake=False, usage=0.75, summarises=False)).sleep_extraction
    assert due(TickState(awake=False, usage=0.1, unjournaled=10)).sleep_extraction
    assert not due(TickState(awake=False, usage=0.1, unjournaled=9)).sleep_extraction
    # lines waiting when memory work ends wake a sleeping NPC; a reply's end kicks only awake
    asleep = due(TickState(awake=False, pending=True))
    assert asleep.kick_after_work and not asleep.kick
    assert due(TickState(pending=True, idle_for=1)).kick
