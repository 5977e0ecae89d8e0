"""
What an NPC's tick is due to do now: one pure policy over a snapshot of the NPC's state, which
the shell (:class:`ai_contrib.typeclasses.AssistantScript`) asks wherever it decides instead of
deriving it again (``docs/design.md``, "The tick").

The shell takes a :class:`TickState` (reading Attributes, ``ndb`` and settings, all O(1)), asks
:func:`due` and does what the :class:`Due` says, in its order: wake, start memory work, keep the
history bounded, answer, fall asleep. The memory work it starts asks it too: whether the
emergency check compacts or (its breaker open) evicts, whether the sleep phase journals, and
how far an eviction goes (:func:`overflow_target`, :func:`in_flight_target`). Every comparison
of a history's usage with a threshold (the sleep and emergency thresholds, the budget) is made
here (:func:`reaches`; ``tests/unit/test_thresholds.py`` holds the package to it). Nothing here
reads the clock, the database or the room.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Due",
    "OVER_BUDGET",
    "SLEEP_JOURNAL_MIN_MESSAGES",
    "TickState",
    "due",
    "hurry_at",
    "hurry_threshold",
    "in_flight_target",
    "overflow_target",
    "reaches",
    "tick_needed",
    "usage_zone",
]

#: the share of the budget at which the history is over it: no warm-up (the prompt's window is
#: still moving) and, with no memory work under way to bring it back, the oldest lines go
OVER_BUDGET = 1.0
#: lines said since the NPC last journaled that make a sleep journal them even when no
#: compaction is due (docs/design.md, "Sleep phase")
SLEEP_JOURNAL_MIN_MESSAGES = 10


@dataclass(frozen=True)
class TickState:
    """
    An NPC's state as the tick policy reads it.

    Attributes:
        awake (bool): ``db.operating_mode`` is ``"awake"`` (else ``"sleep"``).
        usage (float): runtime history tokens over the effective budget (0.0 - ...).
        compact_enabled (bool): ``compact_enabled``.
        emergency_threshold (float): ``compact_emergency_threshold`` (fraction of the budget).
        sleep_threshold (float): ``compact_sleep_threshold`` (fraction of the budget).
        breaker_open (bool): automatic compaction is paused after too many failures in a row
            (:func:`ai_contrib.memory.compaction_log.breaker_open`).
        summarises (bool): the NPC's compaction strategy writes summaries (``mask`` does not),
            so a compaction due in its sleep has facts to journal first; read for the sleep
            phase only.
        unjournaled (int): lines said since the NPC last journaled (``db.journaled_through_seq``);
            read for the sleep phase only.
        pending (bool): lines are queued for an answer.
        waiting_for_players (bool): the queue holds only AI NPCs' lines and a player's turn in
            the room goes first (``AssistantScript.players_first``; without a look at the
            room, what the last tick found).
        listeners (bool): someone in the room could hear a reply (False after a turn found
            nobody: its lines wait).
        memory_work (bool): the NPC's own memory work (its emergency compaction or its sleep
            phase) is under way.
        compacting (bool): a compaction of any origin (an admin's ``compact`` too) is being
            written.
        slept (bool): this sleep's memory work has started.
        slept_for (float): seconds since this sleep's memory work started (0 before it started
            and when awake): what ``sleep_duration`` counts, so a sleep whose work waited for a
            compaction still lasts its duration once that work runs.
        sleep_duration (float): ``AI_SLEEP_DURATION`` in seconds, counted from the start of the
            sleep's memory work (0: sleeps until woken or spoken to).
        idle_for (float | None): seconds since the last activity, None before the awake clock
            started (a tick starts it).
        sleep_after_idle (float): ``AI_SLEEP_AFTER_IDLE`` in seconds (0: never).
        checkpoint_due (bool): the runtime history changed and the checkpoint interval passed.
        busy (bool): a reply is being written.
        warming (bool): a cache warm-up is under way.
        prompted (bool): the NPC has sent a prompt since the server started.
        head_changed (bool): the start of the reply prompt changed since that prompt.
        fetch_ahead (bool): a question's reply left memories out for time, to be fetched
            ahead by the warm-up (``docs/design.md``, "Recall notes", "Fetched ahead").
        work_began (float | None): the usage when the memory work under way began (None: none
            runs, or not looked at since it began): where :func:`hurry_at` counts from.
        hurried (bool): the memory work under way has been hurried; it stays so to its end.
        hurry_enabled (bool): ``compact_hurry``: memory work may be hurried at all.
    """

    awake: bool = True
    usage: float = 0.0
    compact_enabled: bool = True
    emergency_threshold: float = 0.8
    sleep_threshold: float = 0.7
    breaker_open: bool = False
    summarises: bool = True
    unjournaled: int = 0
    pending: bool = False
    waiting_for_players: bool = False
    listeners: bool = True
    memory_work: bool = False
    compacting: bool = False
    slept: bool = False
    slept_for: float = 0.0
    sleep_duration: float = 0.0
    idle_for: float | None = None
    sleep_after_idle: float = 0.0
    checkpoint_due: bool = False
    busy: bool = False
    warming: bool = False
    prompted: bool = False
    head_changed: bool = False
    fetch_ahead: bool = False
    work_began: float | None = None
    hurried: bool = False
    hurry_enabled: bool = True


@dataclass(frozen=True)
class Due:
    """
    What is due now, in the order a tick does it. A tick of a sleeping NPC acts on
    ``checkpoint``, ``wake`` and ``memory_work``; woken by speech it asks again, awake. What
    follows a reply or memory work (``bound_in_flight``, ``evict_overflow``,
    ``kick_after_work``, ``warm_up``) holds asleep too: the sleep phase's compaction is warmed
    like any other. ``emergency``, ``over_budget`` and ``sleep_extraction`` are what the memory
    work, once started, asks (:mod:`ai_contrib.npc.memory_work`).

    Attributes:
        checkpoint (bool): save the runtime history (``AssistantScript.checkpoint``, queued).
        wake (str | None): wake up, and why: ``"spoken to"`` (the tick goes on, awake) or
            ``"rested"`` (``AI_SLEEP_DURATION`` passed since the sleep work started; the tick
            ends there).
        memory_work (str | None): start ``"sleep"`` (the sleep phase, once per sleep) or
            ``"emergency"`` (the emergency compaction) in the background.
        bound_in_flight (bool): a compaction is under way: keep the history within its
            in-flight cap (:func:`ai_contrib.npc.eviction.bound_in_flight`).
        hurry (bool): memory work is under way, ``compact_hurry`` on, and the history has
            reached :func:`hurry_at` (or the work was hurried before): the model's fact extraction
            and summary are no longer waited for; rules and an extract finish the compaction
            (:mod:`ai_contrib.npc.hurry`).
        evict_overflow (bool): over the budget with no compaction to bring it back: move the
            oldest lines out (:func:`ai_contrib.npc.eviction.evict_overflow`).
        emergency (str | None): what the emergency check does now: ``"compact"`` (compaction
            on, none being written, at the emergency threshold, the breaker closed),
            ``"evict"`` (the same with the breaker open and the history over its budget: no
            summary can be made, the oldest lines go) or None.
        over_budget (bool): the history is over its budget (:data:`OVER_BUDGET`), whatever
            runs: after an emergency compaction the oldest lines go, and the reply prompt shows
            a window of it.
        sleep_extraction (bool): the sleep phase journals before its compaction: a compaction
            is due at the sleep threshold and the strategy summarises, or at least
            :data:`SLEEP_JOURNAL_MIN_MESSAGES` lines were said since the NPC last journaled.
        answer (bool): answer the queued lines now.
        fall_asleep (bool): idle for ``AI_SLEEP_AFTER_IDLE`` with nothing queued.
        start_clock (bool): the awake clock has not started (idleness counts from now).
        kick (bool): when a reply ends, awake: lines wait for an answer that can be given now
            (someone can hear, no player's turn goes first), so another tick runs at once.
        kick_after_work (bool): when memory work ends: lines wait and someone can hear, so a
            tick runs at once (asleep, it wakes the NPC to answer; the tick itself looks at
            the room for a player's turn).
        warm_up (bool): when a reply or memory work ends and nothing is to be answered: the
            start of the prompt changed, or memories wait to be fetched ahead, so the next
            prompt is sent ahead to the server's cache (``docs/design.md``, "Warming the cache
            after a compaction"; the shell still asks the setting and who is in the room).
    """

    checkpoint: bool = False
    wake: str | None = None
    memory_work: str | None = None
    bound_in_flight: bool = False
    hurry: bool = False
    evict_overflow: bool = False
    emergency: str | None = None
    over_budget: bool = False
    sleep_extraction: bool = False
    answer: bool = False
    fall_asleep: bool = False
    start_clock: bool = False
    kick: bool = False
    kick_after_work: bool = False
    warm_up: bool = False


def reaches(usage, threshold) -> bool:
    """
    Whether ``usage`` (a history's tokens over its budget) is at or above ``threshold`` (a
    fraction of the budget: the sleep or emergency threshold, :data:`OVER_BUDGET`): the one
    comparison of usage with a threshold the package makes.
    """
    return usage >= threshold


def usage_zone(usage, sleep_threshold, emergency_threshold) -> str:
    """
    Where ``usage`` stands against the thresholds (fractions of the budget): ``"below"`` the
    sleep threshold, ``"sleep"`` from it up to the emergency threshold, ``"emergency"`` from
    that on (``aihistory``'s usage bar, ``docs/design.md``, "The budget fits the model").
    """
    if not reaches(usage, sleep_threshold):
        return "below"
    return "emergency" if reaches(usage, emergency_threshold) else "sleep"


def overflow_target(emergency_threshold, budget) -> float:
    """
    Tokens an over-budget history with no summary to bring it back is evicted down to
    (``docs/design.md``, "Memory work is never starved"): the emergency threshold's share of
    ``budget`` (tokens).
    """
    return float(emergency_threshold) * budget


def in_flight_target(tokens, budget, cap) -> float | None:
    """
    How far a history that memory work leaves growing is evicted (``docs/design.md``, "Bounded
    while a compaction is written"): None while ``tokens`` is under ``cap`` (a multiple of at
    least 1.0) times ``budget`` (tokens), else halfway between the budget and the cap, so the
    eviction runs once per half a budget of new lines.

    Returns:
        float | None: the token target, or None when nothing is to go.
    """
    if tokens < cap * budget:
        return None
    return (1.0 + cap) / 2 * budget


def hurry_threshold(emergency_threshold) -> float:
    """
    The share of the budget at which memory work under way stops waiting for the model
    (``docs/design.md``, "Hurried near the budget"): halfway between the emergency threshold
    and :data:`OVER_BUDGET` (0.9 with the default 0.8), so that a compaction the talk outruns
    is finished by rules and an extract before the history passes its budget, while one with
    time to spare is written by the model.
    """
    return (float(emergency_threshold) + OVER_BUDGET) / 2


def hurry_at(began, emergency_threshold) -> float:
    """
    The usage (a share of the budget) at which memory work that began at usage ``began``
    (None: not known yet) is hurried: :func:`hurry_threshold`, or, for work that began above
    the emergency threshold (a history already over its budget after a restore or a smaller
    budget), once the talk has added as much again as from that threshold to the hurry
    threshold. The talk must outrun the model, not merely find it late.
    """
    at = hurry_threshold(emergency_threshold)
    if began is None:
        return at
    return max(at, float(began) + (at - float(emergency_threshold)))


def _emergency(state):
    return state.compact_enabled and reaches(state.usage, state.emergency_threshold)


def _emergency_check(state, over):
    """What the emergency check does (:attr:`Due.emergency`)."""
    if state.compacting or not _emergency(state):
        return None
    if state.breaker_open:
        return "evict" if over else None
    return "compact"


def _sleep_extraction(state):
    """Whether the sleep phase journals (:attr:`Due.sleep_extraction`)."""
    compaction_due = (state.compact_enabled and reaches(state.usage, state.sleep_threshold)
                      and state.summarises)
    return bool(compaction_due or state.unjournaled >= SLEEP_JOURNAL_MIN_MESSAGES)


def _idle_long_enough(state):
    """The awake clock runs and the NPC has been idle for ``sleep_after_idle`` (not 0: never)."""
    return (state.idle_for is not None and bool(state.sleep_after_idle)
            and state.idle_for >= state.sleep_after_idle)


def tick_needed(state) -> bool:
    """
    The cheap test before a tick (every ``at_repeat``): False when an awake NPC has nothing
    queued, no checkpoint due, is under the emergency threshold, its awake clock runs and it is
    not due to fall asleep, so an idle NPC costs a few Attribute reads, not a Deferred chain.
    """
    if state.pending or not state.awake or state.checkpoint_due or _emergency(state):
        return True
    return state.idle_for is None or _idle_long_enough(state)


def due(state) -> Due:
    """
    What ``state`` (:class:`TickState`) is due to do now (``docs/design.md``, "The tick").

    Asleep: the sleep phase starts once per sleep, when no compaction is being written (an
    admin's ``compact``, a cascade cycle: the sleep's own would be skipped beside it); spoken
    to, the NPC wakes and the tick goes on awake; rested (``sleep_duration`` passed since its
    sleep work started: a sleep whose work waits for a compaction is never cut off, and still
    lasts its duration once the work runs), it wakes and the tick ends. Awake: the
    emergency compaction starts at its threshold unless the NPC's memory work is running; while
    a compaction is written the history is kept within its in-flight cap (and hurried from
    :func:`hurry_at` on), and without one a history over its budget loses its oldest
    lines; queued lines are answered unless they are
    AI NPCs' lines waiting for a player's turn; an NPC idle for ``sleep_after_idle`` with
    nothing queued falls asleep. When a reply or memory work ends, lines that can be answered
    are answered at once (``kick``: someone can hear, no player's turn goes first; after memory
    work, ``kick_after_work``, asleep too), else a
    changed prompt start is warmed (never while over budget, while a reply is written or a
    warm-up runs, or before the NPC's first prompt since the server started). The memory work
    asks it too: the emergency check compacts at its threshold, or evicts over budget while the
    breaker is open; the sleep phase journals when its compaction is due or enough was said.

    Returns:
        Due
    """
    over = reaches(state.usage, OVER_BUDGET)
    in_flight = state.memory_work or state.compacting
    # what holds asleep or awake: the history stays bounded, and what to do when work ends
    common = {
        "checkpoint": state.checkpoint_due,
        "bound_in_flight": in_flight,
        "hurry": bool(in_flight) and state.hurry_enabled and (state.hurried or reaches(
        state.usage, hurry_at(state.work_began, state.emergency_threshold))),
        "evict_overflow": over and not in_flight,
        "emergency": _emergency_check(state, over),
        "over_budget": over,
        "sleep_extraction": _sleep_extraction(state),
        "kick": (state.awake and state.pending and state.listeners
                 and not state.waiting_for_players),
        "kick_after_work": state.pending and state.listeners,
        "warm_up": (not state.pending and not over and not state.busy and not state.warming
                    and state.prompted and (state.head_changed or state.fetch_ahead)),
    }
    if not state.awake:
        rested = (bool(state.sleep_duration) and state.slept
                  and state.slept_for >= state.sleep_duration)
        return Due(
            wake="spoken to" if state.pending else "rested" if rested else None,
            memory_work=(None if state.slept or state.memory_work or state.compacting
                         else "sleep"),
            **common,
        )
    return Due(
        memory_work="emergency" if _emergency(state) and not state.memory_work else None,
        answer=state.pending and not state.waiting_for_players,
        fall_asleep=not state.pending and _idle_long_enough(state),
        start_clock=state.idle_for is None,
        **common,
    )
