"""
The NPC's memory work under its documented names (``docs/design.md``, "Summary compaction",
"Pre-compaction fact extraction", "Sleep phase", "Memory work is never starved"): the work itself
is the script's ``memory`` handler and its siblings in ``npc/``, and this module only re-exports
what games, tools and the docs call here.

- :func:`compact_conversation_history`, :func:`compact_after_extraction`,
  :func:`extract_before_compaction`, :func:`run_pre_compaction_extraction`: a compaction and the
  fact extraction before it (:mod:`ai_contrib.npc.compacting`, whose docstring gives the result
  dicts);
- :func:`check_emergency_compaction`, :func:`after_turn_compaction`: the emergency check and the
  work after a turn (:mod:`ai_contrib.npc.memory_work`);
- :func:`run_sleep_tick`: the sleep phase (:mod:`ai_contrib.npc.sleep_phase`);
- :func:`evict_overflow`, :func:`bound_in_flight`, :func:`inflight_cap`: the history moved out
  of context (:mod:`ai_contrib.npc.eviction`);
- :func:`breaker_open`, :func:`recover_after_replay` and the compaction log's helpers
  (:mod:`ai_contrib.memory.compaction_log`).

A name read here is the function itself, so patching it here does not reach the callers in
``npc/``: patch it where it is defined.
"""

from .core.compaction import AUTOMATIC_TRIGGERS, STALL_FRACTION, CompactionResult  # noqa: F401
from .core.summary import DEFAULT_COMPACTION_PROMPT
from .core.tick import SLEEP_JOURNAL_MIN_MESSAGES  # noqa: F401
from .llm.summariser import summary_input_budget  # noqa: F401
from .memory.compaction_log import (  # noqa: F401
    breaker_open,
    log_event,
    note_compaction_applied,
    now_iso,
    record_synthesis,
    recover_after_replay,
)
from .npc.compacting import (
    compact_after_extraction,
    compact_conversation_history,
    extract_before_compaction,
    run_pre_compaction_extraction,
)
from .npc.eviction import bound_in_flight, evict_overflow, inflight_cap  # noqa: F401
from .npc.memory_work import after_turn_compaction, check_emergency_compaction
from .npc.sleep_phase import consolidate_into_mem0 as _consolidate_into_mem0  # noqa: F401
from .npc.sleep_phase import run_sleep_tick

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "after_turn_compaction",
    "breaker_open",
    "check_emergency_compaction",
    "compact_after_extraction",
    "compact_conversation_history",
    "evict_overflow",
    "extract_before_compaction",
    "recover_after_replay",
    "run_pre_compaction_extraction",
    "run_sleep_tick",
]

#: the old private name of the journal synthesis step, used by the storage benchmark
_record_synthesis = record_synthesis
