"""
Orchestration of the NPC's memory work: compaction, the sleep tick, the emergency check.

This module sequences Deferreds and records results; the algorithms live in
:mod:`ai_contrib.core` (cuts, splice, summary requests) and the I/O in :mod:`ai_contrib.llm` and
:mod:`ai_contrib.memory`. Design: ``docs/design.md``, "Summary compaction" (sleep-triggered
compaction at 70 %, emergency compaction at 80 %, ``compact_conversation_history``,
``generate_context_summary``, result dicts) and "Pre-compaction fact extraction", hardened
so that a message arriving during compaction survives it (compaction replaces an id range) and
a failed summary leaves the history as it was.

Result dicts of :func:`compact_conversation_history` (``docs/design.md``, "Summary compaction"):

* skipped: ``{"skipped": True, "reason": str, ...}``
* failed: ``{"success": False, "error": str, "trigger": str}``
* done: ``{"success": True, "compacted_messages": int, "preserved_messages": int,
  "original_tokens": int, "new_tokens": int, "reduction_pct": float, "summary_tokens": int,
  "trigger": str, "marker_id": str}`` (tokens are model tokens, see ``core/tokens.py``)
"""

from datetime import datetime, timezone

from evennia.utils import logger
from twisted.internet import defer

from .core.cascade import TIER_LONG, TIER_SHORT, summary_text_of
from .core.cuts import eviction_ids
from .core.summary import (
    DEFAULT_COMPACTION_PROMPT,
    build_summary_request,
    clean_summary,
    plan_summary_chunks,
)
from .core.tokens import count_tokens
from .llm.client import LLMContextOverflowError, LLMError, LLMResponseError, get_client
from .memory.archive import ArchiveError
from .memory.journal import add_entry, ensure_journal, find_entry
from .notify import notify_admins
from .settings import get_setting

AUTOMATIC_TRIGGERS = ("sleep", "emergency", "turn")  # "turn": a cascade cycle after a reply
STALL_FRACTION = 0.05  # a compaction cutting less than this share of the tokens is a stall
COMPACTION_LOG_SIZE = 20
# tokens kept free in every summary request besides prompt and output: chat-template overhead
SUMMARY_HEADROOM_TOKENS = 256
DEFAULT_SUMMARIZER_CONTEXT = 8192  # tokens, when neither a setting nor the server tells
SUMMARY_MIN_OUTPUT_TOKENS = 32  # the least a summary request may ask the model to write
# the smallest transcript budget worth a request: below it the window is misconfigured
MIN_SUMMARY_INPUT_TOKENS = 64

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "compact_conversation_history",
    "generate_context_summary",
    "run_pre_compaction_extraction",
    "run_sleep_tick",
    "check_emergency_compaction",
    "after_turn_compaction",
]


def _now():
    return datetime.now(timezone.utc)


def summary_input_budget(prompt, max_output_tokens, summarizer_context):
    """
    Tokens of transcript one summary request may carry so that prompt, transcript, previous
    summary and the generated summary always fit the summariser's context window (a full
    context must never deadlock compaction, as it does in Claude Code).

    Args:
        prompt (str): the system prompt of the summary requests.
        max_output_tokens (int): ``max_tokens`` of each request; a running summary brought into
            the next request is at most this long too.
        summarizer_context (int): the summariser's context window, in tokens.

    Returns:
        int: tokens left for the transcript: the window minus the prompt, one previous summary,
        the reply and :data:`SUMMARY_HEADROOM_TOKENS` of framing; ``0`` or less when those alone
        fill the window (then no request can fit, see
        :data:`MIN_SUMMARY_INPUT_TOKENS`).
    """
    reserved = count_tokens(prompt) + 2 * max_output_tokens + SUMMARY_HEADROOM_TOKENS
    return summarizer_context - reserved


def summarizer_context():
    """
    Tokens one summary or extraction request may fill: ``AI_COMPACT_SUMMARIZER_CONTEXT``, else
    the model's context window as the LLM client knows it, else 8,192.
    """
    configured = get_setting("COMPACT_SUMMARIZER_CONTEXT")
    if configured:
        return int(configured)
    return int(getattr(get_client(), "known_context_window", None) or DEFAULT_SUMMARIZER_CONTEXT)


def send_summary_request(request, completion=False, **options):
    """
    Send one summary request: ``request`` (chat messages) to ``/chat/completions``, or with
    ``completion`` its last message's text alone to ``/completions``, with no chat template
    around it (the base-model prompt ending in ``SUMMARY:``, ``docs/design.md``, "Structured
    summaries").

    Args:
        request (list[dict]): ``{"role", "content"}`` messages.
        completion (bool): send as a text completion.
        **options: ``model``, ``max_tokens``, ``temperature`` (see ``LLMClient.chat``).

    Returns:
        Deferred[ChatResult]; errbacks with LLMError.
    """
    client = get_client()
    # background work over long transcripts: more time than a reply gets
    options.setdefault("timeout", float(get_setting("COMPACT_TIMEOUT")))
    options.setdefault("purpose", "summary")
    if completion:
        return client.complete(request[-1]["content"], **options)
    return client.chat(request, **options)


def summary_output_tokens(script, messages):
    """
    The token target of a summary of ``messages``: ``AI_COMPACT_SUMMARY_MAX_TOKENS``, but at
    most half of what it replaces (small models otherwise write "summaries" longer than a short
    stretch of talk, which the saving check must then refuse), and at least
    :data:`SUMMARY_MIN_OUTPUT_TOKENS`. Returns int (tokens).
    """
    replaced = sum(script.runtime.token_counts(messages))
    return max(
        SUMMARY_MIN_OUTPUT_TOKENS,
        min(int(get_setting("COMPACT_SUMMARY_MAX_TOKENS")), replaced // 2),
    )


@defer.inlineCallbacks
def generate_context_summary(script, messages, prompt=None, build_request=None, completion=False):
    """
    Summarise ``messages`` with the LLM (``docs/design.md``, "Summary compaction").

    Uses ``prompt``, else ``script.cfg("compact_prompt")`` or :data:`DEFAULT_COMPACTION_PROMPT`,
    and ``compact_model`` or the NPC's ``llm_model``. When the transcript is larger than one
    request can carry (:func:`summary_input_budget` of ``AI_COMPACT_SUMMARIZER_CONTEXT``), it is
    summarised in chunks, each request folding in the summary so far (a running summary); an
    earlier ``[CONTEXT SUMMARY]`` among ``messages`` is folded in the same way. If the server
    still answers that a request exceeds its context window (its tokenizer counts more tokens
    than ours), the messages not yet summarised are chunked again with half the budget, once
    (OpenCode retries with less input; Codex CLI drops input instead, which loses it).

    Args:
        script (AssistantScript): the NPC's script.
        messages (list[dict]): the messages to summarise (shape in ``core/messages.py``).
        prompt (str, optional): the fixed text of every request (the system prompt, or a base
            model's instruction line), counted against the window.
        build_request (callable, optional): ``build_request(chunk, previous_summary)`` returning
            the chat messages of one request (e.g. the completion-style prompt); default
            :func:`~ai_contrib.core.summary.build_summary_request` with ``prompt``. Its framing
            besides ``prompt``, the previous summary and the transcript must stay within
            :data:`SUMMARY_HEADROOM_TOKENS`.
        completion (bool): send each request's last message as a plain text completion
            (``LLMClient.complete``, ``/completions``) instead of a chat request: for base
            models without a chat template (``docs/design.md``, "Structured summaries").

    Returns:
        Deferred firing the summary text (str, without the ``[CONTEXT SUMMARY]`` prefix).

    Raises (through the Deferred):
        LLMError: the request failed (``LLMContextOverflowError`` when even half the budget did
        not fit), the summary came back empty (``LLMResponseError``), or the window cannot
        hold a request at all (prompt, summaries and reply leave less than
        :data:`MIN_SUMMARY_INPUT_TOKENS`): no request is sent then.
    """
    prompt = prompt or script.cfg("compact_prompt") or DEFAULT_COMPACTION_PROMPT
    if build_request is None:

        def build_request(chunk, previous_summary):
            return build_summary_request(chunk, prompt=prompt, previous_summary=previous_summary)

    model = script.cfg("compact_model") or script.cfg("llm_model")
    max_output = summary_output_tokens(script, messages)
    context = summarizer_context()
    budget = summary_input_budget(prompt, max_output, context)
    if budget < MIN_SUMMARY_INPUT_TOKENS:
        raise LLMError(
            f"a summary request cannot fit the summariser's context window: "
            f"AI_COMPACT_SUMMARIZER_CONTEXT={context} tokens leaves {max(0, budget)} for the "
            f"transcript after the prompt ({count_tokens(prompt)}), the previous and the new "
            f"summary (2 x AI_COMPACT_SUMMARY_MAX_TOKENS={max_output}) and "
            f"{SUMMARY_HEADROOM_TOKENS} of framing; raise the one or lower the other"
        )
    remaining = list(messages)
    summary = None
    halved = False
    while remaining:
        try:
            chunks = plan_summary_chunks(remaining, script.runtime.token_counts(remaining), budget)
        except ValueError as err:  # one message's line cannot be cut down to the budget
            raise LLMError(f"a summary request cannot fit: {err}") from None
        try:
            for chunk in chunks:
                request = build_request(chunk, summary)
                result = yield send_summary_request(
                    request, completion, model=model, max_tokens=max_output, temperature=0.2
                )
                text = clean_summary(result.content)
                if not text:
                    raise LLMResponseError("the summariser returned an empty summary")
                summary = text
                # chunks hold the messages in order, one entry each (some truncated copies)
                remaining = remaining[len(chunk) :]
        except LLMContextOverflowError as err:
            if halved:
                raise
            halved = True
            budget //= 2
            logger.log_warn(
                f"AI {script.obj}: the summariser said a request was too long ({err}); "
                f"retrying the {len(remaining)} messages left with {budget}-token chunks"
            )
    return summary


def _log_event(script, event):
    log = list(script.db.compaction_log or [])
    log.append(event)
    script.db.compaction_log = log[-COMPACTION_LOG_SIZE:]


def breaker_open(script):
    """True when automatic compaction is paused after too many consecutive failures."""
    return (script.db.compact_failures or 0) >= int(get_setting("COMPACT_FAILURE_LIMIT"))


def _record_failure(script, trigger, error, strategy="summary"):
    event = {"at": _now().isoformat(), "trigger": trigger, "success": False, "error": error,
             "strategy": strategy}
    _log_event(script, event)
    script.db.compact_last_error = error
    if trigger in AUTOMATIC_TRIGGERS:
        script.db.compact_failures = (script.db.compact_failures or 0) + 1
        if breaker_open(script):
            logger.log_warn(
                f"AI {script.obj}: automatic compaction paused after "
                f"{script.db.compact_failures} consecutive failures (last: {error}); "
                "an admin can still run `compact`"
            )
    logger.log_warn(f"AI compaction [{trigger}, {strategy}] {script.obj} failed: {error}")
    return {"success": False, "error": error, "trigger": trigger, "strategy": strategy}


@defer.inlineCallbacks
def compact_conversation_history(script, character, force=False, trigger=None, strategy=None):
    """
    Compact the NPC's history with its compaction strategy. The ``summary`` strategy (the
    default) summarises the messages before the preserve window and replaces them with one
    ``[CONTEXT SUMMARY]`` system message (``docs/design.md``, "Summary compaction"); the others
    (``mask``, ``hybrid``, ``cascade``, ``replace_all``) are run by
    :func:`ai_contrib.strategies.run_strategy` after the shared checks below.

    Args:
        script (AssistantScript): the NPC's script (history, config Attributes).
        character (AssistantCharacter): the NPC (journal).
        force (bool): ignore the threshold (never the preserve window) and ``compact_enabled``.
        trigger (str, optional): ``"sleep"``, ``"emergency"``, ``"turn"`` (after a reply) or
            ``"manual"``; defaults to ``"emergency"`` when forced, else ``"sleep"``. Automatic
            triggers respect the circuit breaker; ``"manual"`` always runs.
        strategy (str, optional): run this strategy once instead of the NPC's
            ``compact_strategy`` (``compact <npc>/strategy=<name>``).

    Returns:
        Deferred firing one of the result dicts in the module docstring (other strategies add
        ``"strategy"`` and their own fields, see :mod:`ai_contrib.strategies`). Never errbacks
        for LLM, archive or summary-validation failures: those give ``success: False`` and
        leave the history exactly as it was. An unknown ``strategy`` gives ``success: False``.
    """
    from . import strategies

    trigger = trigger or ("emergency" if force else "sleep")
    if script.ndb.compacting:
        return {"skipped": True, "reason": "already compacting", "trigger": trigger}
    if not script.cfg("compact_enabled") and not force:
        return {"skipped": True, "reason": "compaction disabled", "trigger": trigger}
    if trigger in AUTOMATIC_TRIGGERS and breaker_open(script):
        return {
            "skipped": True,
            "reason": f"automatic compaction paused after {script.db.compact_failures} "
            f"failures (last: {script.db.compact_last_error})",
            "trigger": trigger,
        }
    try:
        strategy = strategies.resolve_strategy(script, strategy)
    except ValueError as err:
        return {"success": False, "error": str(err), "trigger": trigger}
    result = yield strategies.run_strategy(script, character, strategy, force, trigger)
    return result


def note_compaction_applied(script, character, marker):
    """
    The bookkeeping that follows every applied compaction, right after its archive record:
    the journal synthesis entry and the compaction count. Both are idempotent (keyed by marker id
    and archive seq), so :func:`recover_after_replay` can redo them after a crash.
    """
    _record_synthesis(character, marker)
    _count_compaction(script, marker, script.runtime.archive.last_seq)


def _count_compaction(script, marker, seq):
    """Count the compaction recorded at archive ``seq`` once; True if it was counted now."""
    counted = script.db.compaction_counted_seq
    if counted is not None and seq <= counted:
        return False
    script.db.compaction_count = (script.db.compaction_count or 0) + 1
    script.db.compaction_counted_seq = seq
    script.db.last_compaction = (marker.get("metadata") or {}).get("compacted_at")
    return True


def _record_synthesis(character, marker):
    """
    Archive the summary as a synthesis entry in the journal (``docs/design.md``, "Journal and
    Mem0"), once per marker. A cascade short-term summary becomes a ``["compaction",
    "short_term"]`` entry with ``memory_range_start``/``memory_range_end`` (``docs/design.md``,
    "Cascade summaries"); a cascade long-term summary is not journaled (it folds short-term
    summaries that already are).
    """
    meta = marker.get("metadata") or {}
    tier = meta.get("tier")
    if tier == TIER_LONG:
        return None
    journal = ensure_journal(character.db.journal)
    if find_entry(journal, marker_id=marker["id"]):
        return None
    short = tier == TIER_SHORT
    entry = add_entry(
        journal,
        summary_text_of(marker) if short
        else "[CONTEXT SYNTHESIS]\n" + marker["content"].split("\n", 1)[-1],
        importance=6 if short else 7,
        source_type="compaction",
        tags=["compaction", "short_term"] if short else ["compaction", "synthesis"],
        marker_id=marker["id"],
        archive_range=[meta.get("first_seq"), meta.get("last_seq")],
        memory_range_start=meta.get("memory_range_start") if short else None,
        memory_range_end=meta.get("memory_range_end") if short else None,
        # a synthesis repeats what its summary replaced (docs/design.md, "Privacy by audience")
        audience=meta.get("audience"),
        visibility="public" if meta.get("audience") is None else "private",
    )
    character.db.journal = journal
    return entry


def recover_after_replay(script, records):
    """
    Finish work a crash interrupted: every compaction replayed from the archive gets its
    journal synthesis entry and is counted, once (see :func:`note_compaction_applied`). A
    cascade cycle writes two records (long-term fold, then short-term summary) and counts once.
    """
    character = script.obj
    if character is None:
        return
    for record in records:
        marker = record.get("marker")
        if record.get("kind") != "compaction" or not marker:
            continue
        _record_synthesis(character, marker)
        meta = marker.get("metadata") or {}
        if meta.get("tier") != TIER_LONG and _count_compaction(script, marker, record["seq"]):
            _log_event(script, {
                "at": meta.get("compacted_at"), "trigger": record.get("trigger") or "recovered",
                "success": True, "recovered": True,
                "compacted_messages": meta.get("compacted_count"),
                "original_tokens": meta.get("original_token_count"),
                "new_tokens": meta.get("summary_token_count"),
                "reduction_pct": 0.0,
            })


def run_pre_compaction_extraction(script, character, max_iterations=None):
    """
    Let the NPC journal the facts it must not lose before compaction (``docs/design.md``,
    "Pre-compaction fact extraction").

    Returns:
        Deferred firing ``{"success", "facts_recorded", "iterations", ...}``; never errbacks.
    """
    try:
        from .memory.extraction import run_pre_compaction_extraction as run
    except ImportError:
        return defer.succeed({"success": False, "skipped": True, "reason": "not available"})
    d = defer.maybeDeferred(run, script, character, max_iterations=max_iterations)

    def _failed(failure):
        logger.log_warn(f"AI {character}: fact extraction failed: {failure.getErrorMessage()}")
        return {"success": False, "error": failure.getErrorMessage()}

    return d.addErrback(_failed)


@defer.inlineCallbacks
def check_emergency_compaction(script, character):
    """
    The emergency check at the start of an awake tick (``docs/design.md``, "Summary compaction"):
    at or above ``compact_emergency_threshold`` of the budget, extract facts (3 iterations) and
    compact with ``force=True``. O(1) when nothing needs doing: it reads the running token total.

    Returns:
        Deferred firing the compaction result dict, or None when no compaction was needed.
    """
    if not script.cfg("compact_enabled") or script.ndb.compacting:
        return None
    usage = script.token_usage()
    if usage < script.cfg("compact_emergency_threshold"):
        return None
    if breaker_open(script):
        if usage >= 1.0:
            evict_overflow(script, character)
        return None
    logger.log_warn(f"AI {character}: emergency compaction triggered: {usage:.1%} context usage")
    from .strategies import summarises

    if summarises(script):
        yield run_pre_compaction_extraction(
            script, character, max_iterations=int(get_setting("PRE_COMPACT_EMERGENCY_ITERATIONS"))
        )
    result = yield compact_conversation_history(script, character, force=True, trigger="emergency")
    # masking alone (or a cascade cycle over a few huge messages) can leave it over budget
    if script.token_usage() >= 1.0:
        evict_overflow(script, character)
    return result


def evict_overflow(script, character):
    """
    Last resort when the context is full and no summary can be made (summariser down, breaker
    open): move the oldest messages out of the runtime context so the NPC keeps answering. They
    stay in the archive (``aihistory <npc>/raw``), so nothing is lost, and admins are told.

    Evicts from the oldest non-summary message up to a safe cut (tool calls stay with their
    results) until the history is back under the emergency threshold. Does nothing while a
    compaction is being written: it will bring the context back, and taking messages out of the
    range it replaces would make its splice fail.

    Returns:
        int: the number of messages evicted.
    """
    if script.ndb.compacting:
        return 0
    history = script.history
    target = float(script.cfg("compact_emergency_threshold")) * script.budget()
    ids = eviction_ids(history, script.runtime.token_counts(history), target)
    if not ids:
        return 0
    try:
        script.runtime.evict(ids, reason="context full and no summary could be made")
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not evict overflowing messages: {err}")
        return 0
    script.checkpoint()
    _log_event(script, {"at": _now().isoformat(), "trigger": "overflow", "success": False,
                        "error": f"evicted {len(ids)} oldest messages to the archive"})
    why = (f"compaction failing: {script.db.compact_last_error}" if script.db.compact_last_error
           else "more was said while it was compacted than the compaction saved")
    notify_admins(
        f"AI {character}: context over its budget ({why}); "
        f"moved the {len(ids)} oldest messages out of context into the archive "
        f"(aihistory {character.key}/raw). Check the summariser, then `compact {character.key}`."
    )
    return len(ids)


def _consolidate_entities(character):
    from .memory.housekeeping import consolidate_entities
    from .memory.mem0_store import memory_setting

    profiles, stats = consolidate_entities(
        dict(character.db.entity_profiles or {}),
        int(memory_setting("MEMORY_ENTITY_MAX_OBSERVATIONS") or 0),
    )
    character.db.entity_profiles = profiles
    return stats


def _prune_episodic(character):
    from .memory.housekeeping import prune_episodic

    journal = ensure_journal(character.db.journal)
    removed = prune_episodic(
        journal,
        max_importance=int(get_setting("JOURNAL_PRUNE_IMPORTANCE")),
        min_age_seconds=float(get_setting("JOURNAL_PRUNE_AGE")),
    )
    if removed:
        character.db.journal = journal
    return {"pruned": len(removed)}


def _consolidate_into_mem0(character):
    from .memory.mem0_store import consolidate_journal

    return consolidate_journal(character)


#: lines said since the NPC last journaled that make a sleep journal them even when no
#: compaction is due (docs/design.md, "Sleep phase")
SLEEP_JOURNAL_MIN_MESSAGES = 10


@defer.inlineCallbacks
def run_sleep_tick(script, character):
    """
    The sleep phase (``docs/design.md``, "Journal and Mem0", "Sleep phase"): memory work while
    no one is waiting for an answer.

    Steps, in order: entity consolidation (merge and de-duplicate ``db.entity_profiles``),
    episodic prune (low-importance journal entries Mem0 already holds), fact extraction (when
    compaction is due and the strategy summarises, or when at least
    :data:`SLEEP_JOURNAL_MIN_MESSAGES` lines were said since the NPC last journaled,
    ``db.journaled_through_seq``), compaction at
    ``compact_sleep_threshold``, and journal -> Mem0 consolidation (so facts and syntheses made
    in this sleep are stored in the same sleep). There are no memory-link steps: Mem0's vector
    index is the only link structure, so there is no link graph to build or clean.
    A failing step is logged and recorded; the next steps still run.

    Returns:
        Deferred firing ``{step_name: result}`` for each step run.
    """
    from .strategies import summarises

    results = {}
    for name, step in (("entity_consolidation", _consolidate_entities),
                       ("episodic_prune", _prune_episodic)):
        try:
            results[name] = step(character)
        except Exception as err:  # housekeeping must never stop the sleep phase
            logger.log_trace(f"AI {character}: sleep step {name} failed")
            results[name] = {"success": False, "error": str(err)}
    usage = script.token_usage()
    compaction_due = (script.cfg("compact_enabled")
                      and usage >= script.cfg("compact_sleep_threshold") and summarises(script))
    said = [m.get("seq") for m in script.history
            if m.get("role") in ("user", "assistant") and not m.get("tool_calls")
            and m.get("seq") is not None]
    unjournaled = [seq for seq in said if seq > (script.db.journaled_through_seq or -1)]
    # a conversation that never reaches the compaction threshold still reaches long-term memory:
    # the NPC journals it while it sleeps (docs/design.md, "Sleep phase")
    if compaction_due or len(unjournaled) >= SLEEP_JOURNAL_MIN_MESSAGES:
        results["pre_compaction_extraction"] = yield run_pre_compaction_extraction(
            script, character, max_iterations=int(script.cfg("pre_compact_max_iterations"))
        )
        if said and (results["pre_compaction_extraction"] or {}).get("success"):
            script.db.journaled_through_seq = max(said)
    results["context_compaction"] = yield compact_conversation_history(
        script, character, trigger="sleep"
    )
    results["memory_consolidation"] = yield _consolidate_into_mem0(character)
    return results


def after_turn_compaction(script, character):
    """
    The micro-compaction hook, called by the ``AssistantScript`` after each turn in which the NPC
    replied (micro-compaction, ``docs/design.md``, "Observation masking"): masks old tool outputs
    under the ``mask`` and ``hybrid`` strategies, starts a due cascade cycle under ``cascade``
    (:func:`ai_contrib.strategies.after_turn`).

    Returns:
        Deferred firing the result dict or None; never errbacks, never blocks a reply.
    """
    from .strategies import after_turn

    return after_turn(script, character)
