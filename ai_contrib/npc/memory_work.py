"""
The NPC's memory work, as a handler of its ``AssistantScript`` (``script.memory``): the
emergency compaction, the sleep phase, the eviction of an over-budget history, the hurry near
the budget and the work after each turn (``docs/design.md``, "Summary compaction", "Sleep
phase", "Memory work is never starved", "Hurried near the budget", "Observation masking").

The tick (:mod:`ai_contrib.npc.ticking`) decides when memory work starts and this handler runs
it; what each piece does is asked of :func:`ai_contrib.core.tick.due` too (whether the
emergency check compacts or evicts, whether the sleep phase journals, how far an eviction
goes). The work itself lives in small siblings: :mod:`ai_contrib.npc.compacting` (a compaction
and the fact extraction before it), :mod:`ai_contrib.npc.sleep_phase` (the sleep's steps) and
:mod:`ai_contrib.npc.eviction` (the history moved out of context). The handler holds nothing
of its own: its state is the script's ``ndb.compacting`` and the compaction Attributes.
"""

from evennia.utils import logger
from twisted.internet import defer

from ..core.tick import due
from . import compaction_runner, compacting, eviction, hurry, sleep_phase

__all__ = ["MemoryHandler", "after_turn_compaction", "check_emergency_compaction"]


class MemoryHandler:
    """
    The NPC's memory work (``script.memory``; ``docs/design.md``, "The script's handlers").
    Each method runs one piece for the script's NPC (``script.obj``).

    Args:
        script (AssistantScript): the NPC's script (``self.obj``).
    """

    def __init__(self, script):
        self.obj = script

    def emergency(self) -> defer.Deferred:
        """The emergency check (:func:`check_emergency_compaction`).

        Returns:
            Deferred firing the ``CompactionResult`` or None."""
        return check_emergency_compaction(self.obj, self.obj.obj)

    def sleep_phase(self) -> defer.Deferred:
        """The sleep phase (:func:`ai_contrib.npc.sleep_phase.run_sleep_tick`).

        Returns:
            Deferred firing the :class:`~ai_contrib.core.outcome.SleepResults`."""
        return sleep_phase.run_sleep_tick(self.obj, self.obj.obj)

    def evict_overflow(self) -> int:
        """Move the oldest lines of an over-budget history out of context
        (:func:`ai_contrib.npc.eviction.evict_overflow`).

        Returns:
            int: the number of messages evicted."""
        return eviction.evict_overflow(self.obj, self.obj.obj)

    def bound_in_flight(self) -> int:
        """Keep the history within its in-flight cap while memory work runs
        (:func:`ai_contrib.npc.eviction.bound_in_flight`).

        Returns:
            int: the number of messages moved out."""
        return eviction.bound_in_flight(self.obj, self.obj.obj)

    def hurry(self) -> int:
        """Stop waiting for the model's memory work near the budget
        (:func:`ai_contrib.npc.hurry.hurry`).

        Returns:
            int: the model's requests cancelled."""
        return hurry.hurry(self.obj)

    def after_turn(self) -> defer.Deferred:
        """The work after a turn in which the NPC replied (:func:`after_turn_compaction`).

        Returns:
            Deferred firing the result or None; never errbacks."""
        return after_turn_compaction(self.obj, self.obj.obj)


@defer.inlineCallbacks
def check_emergency_compaction(script, character) -> defer.Deferred:
    """
    The emergency check at the start of an awake tick (``docs/design.md``, "Summary compaction"):
    when :func:`ai_contrib.core.tick.due` says ``emergency`` is ``"compact"`` (at or above
    ``compact_emergency_threshold`` of the budget, the breaker closed), plan the compaction,
    extract facts from what it will replace (3 iterations), compact with ``force=True`` no
    further than the extraction read
    (:func:`ai_contrib.npc.compacting.compact_after_extraction`), then consolidate the journal
    into Mem0 (``docs/design.md``, "Journal and Mem0": a busy NPC does not wait for a sleep); at
    ``"evict"`` (the breaker open, over budget) move the oldest lines out instead. O(1) when
    nothing needs doing: it reads the running token total.

    Returns:
        Deferred firing the :class:`~ai_contrib.core.compaction.CompactionResult`, or None
        when no compaction was needed.
    """
    what = due(script.ticking.state()).emergency
    if what == "evict":
        eviction.evict_overflow(script, character)
    if what != "compact":
        return None
    usage = script.budgeting.usage()
    logger.log_warn(f"AI {character}: emergency compaction triggered: {usage:.1%} context usage")
    result = yield compacting.compact_after_extraction(script, character, force=True,
                                                       trigger="emergency")
    # masking alone (or a cascade cycle over a few huge messages) can leave it over budget
    if due(script.ticking.state()).over_budget:
        eviction.evict_overflow(script, character)
    # a busy NPC may not sleep for days: what this compaction journaled (its facts, its
    # synthesis) reaches long-term memory now, on the store's thread, as a sleep would store it
    consolidation = yield sleep_phase.consolidate_into_mem0(character)
    if consolidation.added:
        logger.log_info(f"AI {character}: {consolidation.added} journal entries "
                        "consolidated into Mem0 after an emergency compaction")
    return result


def after_turn_compaction(script, character) -> defer.Deferred:
    """
    The micro-compaction hook, run after each turn in which the NPC replied (micro-compaction,
    ``docs/design.md``, "Observation masking"): masks old tool outputs under the ``mask`` and
    ``hybrid`` strategies, starts a due cascade cycle under ``cascade``
    (:func:`ai_contrib.npc.compaction_runner.after_turn`).

    Returns:
        Deferred firing the result or None; never errbacks, never blocks a reply.
    """
    return compaction_runner.after_turn(script, character, compacting.compact_conversation_history)
