"""
The sleep phase (``docs/design.md``, "Journal and Mem0", "Sleep phase"): the memory work an NPC
does while no one waits for an answer, step by step, each step's failure logged and recorded
without stopping the next. Whether it journals is :func:`ai_contrib.core.tick.due`'s
``sleep_extraction``; the compaction and the fact extraction are
:mod:`ai_contrib.npc.compacting`'s.
"""

from dataclasses import replace

from evennia.utils import logger
from twisted.internet import defer

from ..core.outcome import SleepResults
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

__all__ = ["SLEEP_JOURNAL_MIN_MESSAGES", "consolidate_into_mem0", "run_sleep_tick"]


def _consolidate_entities(character):
    from ..memory.mem0_store import memory_setting

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
    (:func:`ai_contrib.memory.mem0_store.consolidate_journal`)."""
    from ..memory.mem0_store import consolidate_journal

    return consolidate_journal(character)


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
    A failing step is logged and recorded; the next steps still run.

    Returns:
        Deferred firing a :class:`~ai_contrib.core.outcome.SleepResults`: what each step run
        did.
    """
    results = SleepResults()
    for name, step in (("entity_consolidation", _consolidate_entities),
                       ("episodic_prune", _prune_episodic)):
        try:
            setattr(results, name, step(character))
        except Exception as err:  # housekeeping must never stop the sleep phase
            logger.log_trace(f"AI {character}: sleep step {name} failed")
            setattr(results, name, {"success": False, "error": str(err)})
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
    try:  # before consolidation, so what it heard reaches Mem0 in this sleep
        results.gossip = receive_gossip(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step gossip failed")
        results.gossip = {"success": False, "error": str(err)}
    try:  # before consolidation, so what it leaves of an entry reaches Mem0 in this sleep
        results.quote_repair = yield repair_quotes(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step quote_repair failed")
        results.quote_repair = {"success": False, "error": str(err)}
    results.memory_consolidation = yield consolidate_into_mem0(character)
    try:  # the lines said since the last sleep get their vectors (docs/design.md)
        results.archive_vectors = yield embed_archive(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step archive_vectors failed")
        results.archive_vectors = {"success": False, "error": str(err)}
    try:  # after extraction, so this sleep's facts count (docs/design.md, "Scene, events and people")
        results.people_impressions = update_impressions(script, character)
    except Exception as err:  # housekeeping must never stop the sleep phase
        logger.log_trace(f"AI {character}: sleep step people_impressions failed")
        results.people_impressions = {"success": False, "error": str(err)}
    return results


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
