"""
The sleep phase (``docs/design.md``, "Journal and Mem0", "Sleep phase"): the memory work an NPC
does while no one waits for an answer: a registry of housekeeping steps (:class:`SleepStep`)
around the journaling and the compaction, each step's failure logged and recorded without
stopping the next. Whether it journals is :func:`ai_contrib.core.tick.due`'s
``sleep_extraction``; the compaction and the fact extraction are
:mod:`ai_contrib.npc.compacting`'s.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace

from evennia.utils import logger
from twisted.internet import defer

from ..core.outcome import SleepResults, StepResult
from ..core.tick import SLEEP_JOURNAL_MIN_MESSAGES, due
from ..memory.archive import ArchiveError
from ..memory.housekeeping import consolidate_entities, prune_episodic
from ..memory.journal import ensure_journal
from ..settings import get_setting
from . import compaction_runner, compacting
from .gossip import receive_gossip
from .quote_repair import repair_quotes
from .recall import embed_archive
from .scene import update_impressions

__all__ = [
    "AFTER_COMPACTION",
    "BEFORE_COMPACTION",
    "SLEEP_JOURNAL_MIN_MESSAGES",
    "SleepStep",
    "consolidate_into_mem0",
    "run_sleep_tick",
]


def _consolidate_entities(character):
    from ..memory.mem0_config import memory_setting

    profiles, stats = consolidate_entities(
        dict(character.db.entity_profiles or {}),
        int(memory_setting("MEMORY_ENTITY_MAX_OBSERVATIONS") or 0),
    )
    character.db.entity_profiles = profiles
    return stats


def _prune_episodic(character):
    journal = ensure_journal(character.db.journal)
    removed = prune_episodic(
        journal,
        max_importance=int(get_setting("JOURNAL_PRUNE_IMPORTANCE")),
        min_age_seconds=float(get_setting("JOURNAL_PRUNE_AGE")),
    )
    if removed:
        character.db.journal = journal
    return {"pruned": len(removed)}


def consolidate_into_mem0(character) -> defer.Deferred:
    """Store the journal's new entries in Mem0, on the store's thread
    (:func:`ai_contrib.memory.consolidation.consolidate_journal`)."""
    from ..memory.consolidation import consolidate_journal

    return consolidate_journal(character)


@dataclass(frozen=True)
class SleepStep:
    """
    One housekeeping step of the sleep phase (``docs/design.md``, "Sleep phase").

    Attributes:
        name (str): the :class:`~ai_contrib.core.outcome.SleepResults` field its result goes to.
        run (callable): ``(script, character) ->`` its result, or a Deferred firing it; a
            guarded step's is made a :class:`~ai_contrib.core.outcome.StepResult`
            (:meth:`StepResult.of <ai_contrib.core.outcome.StepResult.of>`).
        guarded (bool): a failure (raised or errback) is logged and recorded as a failed
            :class:`~ai_contrib.core.outcome.StepResult` and the sleep goes on; an unguarded
            step reports its own failures in its own result record.
    """

    name: str
    run: Callable
    guarded: bool = True


#: the steps before the journaling and the compaction, in order
BEFORE_COMPACTION = (
    SleepStep("entity_consolidation", lambda script, character: _consolidate_entities(character)),
    SleepStep("episodic_prune", lambda script, character: _prune_episodic(character)),
)
#: the steps after it, in order: gossip and the quote repair before the consolidation, so what
#: the NPC heard and what the repair leaves of an entry reach Mem0 in this sleep; the archived
#: lines said since the last sleep get their vectors; the impressions come after the
#: extraction, so this sleep's facts count (docs/design.md, "Scene, events and people")
AFTER_COMPACTION = (
    SleepStep("gossip", lambda script, character: receive_gossip(script, character)),
    SleepStep("quote_repair", lambda script, character: repair_quotes(script, character)),
    SleepStep("memory_consolidation",
              lambda script, character: consolidate_into_mem0(character), guarded=False),
    SleepStep("archive_vectors", lambda script, character: embed_archive(script, character)),
    SleepStep("people_impressions",
              lambda script, character: update_impressions(script, character)),
)


@defer.inlineCallbacks
def run_sleep_tick(script, character) -> defer.Deferred:
    """
    The sleep phase (``docs/design.md``, "Journal and Mem0", "Sleep phase"): memory work while
    no one is waiting for an answer.

    Steps, in order: entity consolidation (merge and de-duplicate ``db.entity_profiles``),
    episodic prune (low-importance journal entries Mem0 already holds), fact extraction (when
    :func:`ai_contrib.core.tick.due` says so: compaction is due and the strategy summarises, or
    at least :data:`~ai_contrib.core.tick.SLEEP_JOURNAL_MIN_MESSAGES` lines were said since the
    NPC last journaled, ``db.journaled_through_seq``), compaction at
    ``compact_sleep_threshold``, gossip (the NPC hears what the NPCs of its gossip networks
    learned in public, :func:`ai_contrib.npc.gossip.receive_gossip`; no LLM call), the quote
    repair (stored summaries and journal entries that quote a line nobody said lose that line,
    :func:`ai_contrib.npc.quote_repair.repair_quotes`; bounded per sleep), and journal ->
    Mem0 consolidation (so facts, syntheses and gossip taken in this sleep are stored in the
    same sleep), vectors for the archived lines that have none yet
    (:func:`ai_contrib.npc.recall.embed_archive`; ``docs/design.md``, "Archived lines'
    vectors"), then the impressions of the people the NPC
    has met, made from the journal's facts (:func:`ai_contrib.npc.scene.update_impressions`; no LLM
    call). There are no memory-link steps: Mem0's vector
    index is the only link structure, so there is no link graph to build or clean.
    The steps are :data:`BEFORE_COMPACTION`, the journaling and compaction, then
    :data:`AFTER_COMPACTION`; a failing housekeeping step is logged and recorded as a failed
    :class:`~ai_contrib.core.outcome.StepResult`, and the next steps still run.

    Returns:
        Deferred firing a :class:`~ai_contrib.core.outcome.SleepResults`: what each step run
        did.
    """
    results = SleepResults()
    yield _run_steps(BEFORE_COMPACTION, script, character, results)
    yield _journal_and_compact(script, character, results)
    yield _run_steps(AFTER_COMPACTION, script, character, results)
    return results


@defer.inlineCallbacks
def _run_steps(steps, script, character, results):
    """Run ``steps`` in order, each result into its field of ``results``."""
    for step in steps:
        if not step.guarded:
            setattr(results, step.name, (yield step.run(script, character)))
            continue
        try:
            outcome = StepResult.of((yield defer.maybeDeferred(step.run, script, character)))
        except Exception as err:  # housekeeping must never stop the sleep phase
            logger.log_trace(f"AI {character}: sleep step {step.name} failed")
            outcome = StepResult.fail(err)
        setattr(results, step.name, outcome)


@defer.inlineCallbacks
def _journal_and_compact(script, character, results):
    """
    The sleep's fact extraction, when :func:`ai_contrib.core.tick.due` says it journals, then
    its compaction (``results.pre_compaction_extraction``, ``results.context_compaction``).
    """
    said = [m.get("seq") for m in script.history
            if m.get("role") in ("user", "assistant") and not m.get("tool_calls")
            and m.get("seq") is not None]
    unjournaled = [seq for seq in said if seq > (script.db.journaled_through_seq or -1)]
    state = replace(script.ticking.state(), summarises=compaction_runner.summarises(script),
                    unjournaled=len(unjournaled))
    # a conversation that never reaches the compaction threshold still reaches long-term memory:
    # the NPC journals it while it sleeps (docs/design.md, "Sleep phase")
    if due(state).sleep_extraction:
        results.pre_compaction_extraction = yield compacting.run_pre_compaction_extraction(
            script, character, max_iterations=int(script.cfg("pre_compact_max_iterations"))
        )
        if said and not results.pre_compaction_extraction.failed:
            script.db.journaled_through_seq = max(said)
    results.context_compaction = yield compacting.compact_conversation_history(
        script, character, trigger="sleep"
    )
    if results.pre_compaction_extraction is not None:
        _drop_journaling(script, character)


def _drop_journaling(script, character):
    """
    Move the sleep's fact-extraction traffic (its tool calls and results) out of the runtime
    history when no compaction took it (journaling without a compaction due, or a compaction
    that failed): its facts are in the journal, and a history of tool messages must not stand
    where the conversation was (``docs/design.md``, "Preserve window and cuts"). The messages
    stay in the archive; an archive that cannot record it leaves them (logged).
    """
    try:
        if script.runtime.drop_extraction_traffic():
            script.checkpoint()
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not move the journaling out of context: {err}")
