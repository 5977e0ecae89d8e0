"""
The sleep-phase step "journal -> Mem0" (``docs/design.md``, "Overview"): an NPC's new journal
entries stored in its Mem0 collection and marked consolidated in the journal.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..core.outcome import FAILED, SKIPPED, SUCCESS, ConsolidationResult
from ..settings import get_setting
from .mem0_payload import npc_agent_id, plain_entry
from .mem0_store import get_store

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

__all__ = ["consolidate_journal"]

logger = logging.getLogger(__name__)


def consolidate_journal(character, agent_id=None, store=None) -> Deferred:
    """
    Store a character's unconsolidated journal entries in Mem0 and mark them consolidated.

    The sleep-phase step "journal -> Mem0" (``docs/design.md``, "Overview"). Entries go to the
    store's thread; when it answers, the journal is read again (it may have grown meanwhile)
    and the stored ids, plus ids Mem0 already held, are appended to ``consolidated_entry_ids``.
    On failure nothing is marked, so the next sleep retries (Mem0Store skips what did get
    stored).

    Args:
        character: the NPC (``db.journal`` as in :mod:`ai_contrib.memory.journal`).
        agent_id (str, optional): default :func:`npc_agent_id`.
        store (Mem0Store, optional): default
            :func:`~ai_contrib.memory.mem0_store.get_store`.

    Returns:
        Deferred[ConsolidationResult]: never errbacks
        (:class:`~ai_contrib.core.outcome.ConsolidationResult`; skipped when Mem0 is off).
    """
    from twisted.internet import defer

    from .journal import ensure_journal, unconsolidated

    try:
        if not get_setting("MEMORY_ENABLED"):
            return defer.succeed(ConsolidationResult(SKIPPED, reason="Mem0 off"))
        journal = ensure_journal(plain_entry(character.db.journal or {}))
        entries = unconsolidated(journal)
        if not entries:
            return defer.succeed(ConsolidationResult(SUCCESS))
        store = store or get_store()
        d = store.add_entries(agent_id or npc_agent_id(character), entries)
    except Exception as err:
        logger.warning("memory consolidation could not start: %s", err)
        return defer.succeed(ConsolidationResult(FAILED, error=str(err)))

    def _mark(result):
        done = [jid for jid in result["added"] + result["skipped"] if jid]
        fresh = ensure_journal(plain_entry(character.db.journal or {}))
        known = set(fresh["consolidated_entry_ids"])
        fresh["consolidated_entry_ids"].extend(jid for jid in dict.fromkeys(done)
                                               if jid not in known)
        character.db.journal = fresh
        return ConsolidationResult(SUCCESS, added=len(result["added"]),
                                   already_stored=len(result["skipped"]))

    def _failed(failure):
        logger.warning("memory consolidation failed: %s", failure.getErrorMessage())
        return ConsolidationResult(FAILED, error=failure.getErrorMessage())

    return d.addCallbacks(_mark, _failed)
