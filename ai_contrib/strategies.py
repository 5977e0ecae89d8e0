"""
Compaction strategies: how an NPC keeps its runtime history inside its token budget, chosen per
NPC with ``script.db.compact_strategy`` (default ``AI_COMPACT_STRATEGY``, ``"summary"``).

``summary``
    The default (``docs/design.md``, "Summary compaction"): the messages before the preserve window
    become one ``[CONTEXT SUMMARY]`` marker at the sleep (70 %) and emergency (80 %) thresholds;
    the orchestration is :func:`ai_contrib.rag_memory.compact_conversation_history`.
``mask``
    Observation masking only (JetBrains, NeurIPS 2025; ``docs/design.md``, "Observation masking"):
    tool outputs older than the last ``mask_window`` turns (default 10) become
    ``[TOOL OUTPUT ARCHIVED - seq N] <tool>: <status>``; no LLM call, no summary. Runs after every
    turn and whenever compaction is triggered. Since masking alone cannot bound an endless
    conversation, at the emergency threshold the oldest messages then leave the context for the
    archive, first in first out (MemGPT's queue eviction), down to 90 % of the threshold.
``hybrid``
    Masking after every turn plus summary compaction at the thresholds (the JetBrains hybrid):
    a triggered compaction masks first, then summarises if the history is still over the
    threshold.
``cascade``
    Three tiers (:mod:`ai_contrib.core.cascade`; ``docs/design.md``, "Cascade summaries"): an
    immediate window verbatim (``cascade_immediate_window``, 64), a short-term summary of the next
    ``cascade_recent_window`` (64) messages, and a long-term summary the short-term one waterfalls
    into at each cycle (first at 129 messages, then every 64). Cycles run after a turn when due,
    and at the sleep and emergency thresholds; each short-term summary goes into the journal with
    its archive range (``memory_range_start``/``memory_range_end``) for the memory layer. A cycle
    that token pressure runs before it is due shrinks the immediate window so that the window and
    the summaries in context hold about ``cascade_pressure_window`` (0.4) of the token budget, so a
    small budget gets one cycle per many messages, not per message.
``replace_all``
    At the thresholds the whole runtime history becomes one structured summary, with no raw tail
    (only speech still waiting for an answer stays).

Everything any strategy removes from the context stays in the NPC's append-only archive
(``docs/design.md``, "The archive": lossy in runtime, lossless in persistence), and every change is
an archive record first, so a crash replays to the same state (``core/replay.py``).
Micro-compaction (masking) never blocks the conversation: a failure leaves the messages as they
were (``docs/design.md``, "Observation masking").

Result dicts are those of ``compact_conversation_history`` plus ``"strategy"`` and, per
strategy: ``masked_messages``/``masked_ids`` (mask, hybrid); ``cycle``, ``waterfall``,
``short_term_marker_id``, ``long_term_marker_id`` (cascade). Tokens are model tokens.
"""

from datetime import datetime, timezone

from evennia.utils import logger
from twisted.internet import defer

from . import rag_memory
from .core import cascade as cascade_core
from .core.cuts import eviction_ids, plan_compaction
from .core.fidelity import extractive_summary, score_summary, source_text, speakers_of
from .core.masking import masked_count, plan_masks
from .core.messages import is_marker
from .core.replay import apply_record
from .core.structured import (
    BASE_SUMMARY_INSTRUCTION,
    build_base_summary_request,
    normalise_summary,
    plan_replace_all,
)
from .core.summary import (
    benefit_decision,
    check_summary,
    clean_summary,
    estimate_summary_tokens,
    make_marker,
)
from .core.tokens import count_message_tokens, count_tokens
from .llm.client import LLMError, LLMResponseError
from .memory.archive import ArchiveError
from .memory.importance import heuristic_importance
from .settings import get_setting

__all__ = [
    "STRATEGIES",
    "after_turn",
    "apply_cascade",
    "apply_masks_to_runtime",
    "benefit_skip_result",
    "check_benefit",
    "describe_benefit",
    "describe_strategy",
    "format_result",
    "micro_compact",
    "resolve_strategy",
    "run_strategy",
    "summarise",
]

STRATEGIES = ("summary", "mask", "hybrid", "cascade", "replace_all")
DEFAULT_STRATEGY = "summary"
PROMPT_STYLES = ("chat", "base")


def _now():
    return datetime.now(timezone.utc).isoformat()


# -- choosing --------------------------------------------------------------------------------


def resolve_strategy(script, name=None):
    """
    The strategy to use: ``name`` if given, else the NPC's ``compact_strategy`` (Attribute or
    ``AI_COMPACT_STRATEGY``).

    Raises:
        ValueError: if ``name`` is given and is not one of :data:`STRATEGIES`. A bad configured
        value does not raise: it is logged once and ``"summary"`` is used, so a typo in
        settings never stops an NPC from compacting.
    """
    if name is not None:
        value = str(name).strip().lower()
        if value not in STRATEGIES:
            raise ValueError(
                f"unknown compaction strategy {name!r}; choose one of {', '.join(STRATEGIES)}"
            )
        return value
    value = str(script.cfg("compact_strategy") or DEFAULT_STRATEGY).strip().lower()
    if value in STRATEGIES:
        return value
    if script.ndb.bad_strategy_warned != value:
        script.ndb.bad_strategy_warned = value
        logger.log_warn(
            f"AI {script.obj}: unknown compact_strategy {value!r}; using {DEFAULT_STRATEGY!r}"
        )
    return DEFAULT_STRATEGY


def prompt_style(script):
    """``"chat"`` or ``"base"`` from ``summary_prompt_style`` (unknown values mean chat)."""
    value = str(script.cfg("summary_prompt_style") or "chat").strip().lower()
    return value if value in PROMPT_STYLES else "chat"


def summarises(script):
    """False for the ``mask`` strategy, which never writes a summary (so pre-compaction fact
    extraction has nothing to protect)."""
    return resolve_strategy(script) != "mask"


# -- the benefit guard -------------------------------------------------------------------------


def check_benefit(script, trigger, current_tokens, force=False):
    """
    The benefit guard (``docs/design.md``, "Summary compaction"), logged and kept for
    ``aihistory``: a summary runs only when
    ``current_tokens - estimated_summary_tokens >= compact_min_saving_tokens``.

    Args:
        script (AssistantScript): the NPC's script.
        trigger (str): what asked for the compaction.
        current_tokens (int): tokens the summary would replace.
        force (bool): with ``trigger == "manual"``, an admin's ``compact/force`` runs anyway
            (the decision is still recorded, with ``bypassed: True``).

    Returns:
        dict: :func:`ai_contrib.core.summary.benefit_decision` plus ``at`` (ISO-8601 UTC),
        ``trigger`` and ``bypassed``; also stored in ``script.db.compact_benefit``.
    """
    estimate = estimate_summary_tokens(
        current_tokens,
        int(get_setting("COMPACT_SUMMARY_MAX_TOKENS")),
        float(script.cfg("compact_summary_ratio")),
    )
    minimum = int(script.cfg("compact_min_saving_tokens"))
    decision = benefit_decision(current_tokens, estimate, minimum)
    bypassed = trigger == "manual" and force and not decision["run"]
    decision.update(at=_now(), trigger=trigger, bypassed=bypassed)
    if bypassed:
        decision["run"] = True
    script.db.compact_benefit = decision
    verdict = "compact" if decision["run"] else "skip"
    logger.log_info(
        f"AI {script.obj}: benefit guard [{trigger}]: estimated saving {decision['reason']} "
        f"-> {verdict}{' (forced)' if bypassed else ''}"
    )
    return decision


def benefit_skip_result(decision, trigger, strategy):
    """The ``skipped`` result dict of a compaction the benefit guard stopped."""
    return {
        "skipped": True,
        "reason": f"benefit guard: estimated saving {decision['reason']}",
        "trigger": trigger,
        "strategy": strategy,
        "benefit": decision,
    }


# -- masking (micro-compaction) ---------------------------------------------------------------


def apply_masks_to_runtime(runtime, replacements, **info):
    """
    Swap placeholders (from :func:`ai_contrib.core.masking.plan_masks`) into a
    :class:`~ai_contrib.memory.runtime.RuntimeHistory`.

    The archive record ``{"kind": "mask", "ids": [...], "replacements": [...], **info}`` is the
    commit point: written first, so a crash before the next checkpoint replays the masking, and
    if it cannot be written nothing changes. The token ledger drops the originals' counts and
    counts the placeholders (same ids).

    Returns:
        list[str]: the ids masked (empty when none of ``replacements`` is in the history).

    Raises:
        ArchiveError: the record could not be written (history unchanged).
    """
    present = {m["id"] for m in runtime.messages}
    replacements = [r for r in replacements if r.get("id") in present]
    if not replacements:
        return []
    ids = [r["id"] for r in replacements]
    record = {"kind": "mask", "ids": ids, "replacements": replacements}
    new_messages, changed = apply_record(runtime.messages, record)
    if not changed:
        return []
    runtime.archive.append("mask", ids=ids, replacements=replacements, **info)
    runtime.messages = new_messages
    runtime.ledger.remove_ids(ids)
    for msg in replacements:
        runtime.ledger.add(msg)
    runtime.dirty = True
    return ids


def micro_compact(script, trigger="turn", strategy="mask"):
    """
    Mask old tool outputs now (micro-compaction, ``docs/design.md``, "Observation masking"): no
    LLM call, O(n) in the history.

    Uses ``mask_window`` (turns) and ``mask_min_tokens``. Never raises: any failure is logged
    and the messages stay as they were, so it cannot block a reply.

    Returns:
        dict: ``{"success": True, "strategy", "trigger", "masked_messages", "masked_ids",
        "compacted_messages", "original_tokens", "new_tokens", "reduction_pct"}``,
        ``{"skipped": True, "reason", ...}`` when nothing qualifies, or
        ``{"success": False, "error", ...}``.
    """
    base = {"trigger": trigger, "strategy": strategy}
    try:
        runtime = script.runtime
        history = runtime.messages
        before = runtime.tokens
        replacements = plan_masks(
            history,
            runtime.token_counts(history),
            window=int(script.cfg("mask_window")),
            min_tokens=int(script.cfg("mask_min_tokens")),
            model=runtime.ledger.model,
        )
        ids = apply_masks_to_runtime(runtime, replacements, trigger=trigger) if replacements else []
    except Exception as err:  # micro compaction must never block the conversation
        logger.log_warn(f"AI {script.obj}: masking old tool outputs failed: {err}")
        return {"success": False, "error": f"masking failed: {err}", **base}
    if not ids:
        return {"skipped": True, "reason": "no old tool output to mask", **base}
    after = runtime.tokens
    result = {
        "success": True,
        **base,
        "masked_messages": len(ids),
        "masked_ids": ids,
        "compacted_messages": len(ids),
        "original_tokens": before,
        "new_tokens": after,
        "reduction_pct": (1 - after / before) * 100 if before else 0.0,
    }
    rag_memory._log_event(script, {"at": _now(), **{k: v for k, v in result.items()
                                                    if k != "masked_ids"}})
    logger.log_info(
        f"AI masking [{trigger}] {script.obj}: {len(ids)} old tool outputs archived, "
        f"{before} -> {after} tokens"
    )
    return result


# -- summarising ---------------------------------------------------------------------------------


@defer.inlineCallbacks
def summarise(script, messages, prompt=None, instruction=None, structured=True):
    """
    Summarise ``messages`` in the NPC's prompt style (``summary_prompt_style``).

    ``chat`` with the default prompt goes through
    :func:`ai_contrib.rag_memory.generate_context_summary`; a given ``prompt`` (cascade tiers) or
    the ``base`` style (``docs/design.md``, "Structured summaries": one completion-style prompt
    ending in ``SUMMARY:``, sent to the ``/completions`` endpoint with no chat template) is handled
    here, in chunks with a running summary when the transcript is larger than one request can
    carry.

    Args:
        script (AssistantScript): the NPC's script.
        messages (list[dict]): the messages to summarise (markers among them are folded in).
        prompt (str, optional): chat system prompt; default ``compact_prompt`` or
            :data:`~ai_contrib.core.summary.DEFAULT_COMPACTION_PROMPT`.
        instruction (str, optional): the base prompt's instruction line; default
            ``compact_prompt`` or :data:`~ai_contrib.core.structured.BASE_SUMMARY_INSTRUCTION`.
        structured (bool): normalise the section headings (:mod:`ai_contrib.core.structured`).

    Returns:
        Deferred firing the cleaned summary text.

    Raises (through the Deferred):
        LLMError: the request failed, or the summary came back empty.
    """
    base = prompt_style(script) == "base"
    if base:
        fixed = instruction or script.cfg("compact_prompt") or BASE_SUMMARY_INSTRUCTION

        def build(chunk, previous):
            return build_base_summary_request(chunk, fixed, previous_summary=previous)

    else:
        fixed, build = prompt, None
    # one chunking loop for every style: budget, running summary, overflow retry
    text = yield rag_memory.generate_context_summary(
        script, messages, prompt=fixed, build_request=build, completion=base
    )
    return normalise_summary(text) if structured else text


@defer.inlineCallbacks
def fold_summaries(script, fold):
    """
    Waterfall: merge the long-term and short-term summaries in ``fold`` (markers) into one
    (``docs/design.md``, "Cascade summaries"). Returns a Deferred firing the cleaned text; errbacks
    with LLMError.
    """
    style = prompt_style(script)
    request = cascade_core.build_fold_request(fold, style=style)
    model = script.cfg("compact_model") or script.cfg("llm_model")
    result = yield rag_memory.send_summary_request(
        request, style == "base", model=model,
        max_tokens=int(get_setting("COMPACT_SUMMARY_MAX_TOKENS")), temperature=0.2,
    )
    text = clean_summary(result.content)
    if not text:
        raise LLMResponseError("the summariser returned an empty long-term summary")
    return text


def guard_summary(script, messages, text):
    """
    The fidelity guard (``docs/design.md``, "Summary fidelity"): score ``text`` against
    ``messages`` (:func:`ai_contrib.core.fidelity.score_summary`); a summary that fails is
    replaced by an extractive one (:func:`ai_contrib.core.fidelity.extractive_summary`: the
    span's highest-importance lines by the journal's heuristic, within the summary's token
    target), which must pass in turn.

    Args:
        script (AssistantScript): the NPC's script.
        messages (list[dict]): the summarised span. text (str): the model's cleaned summary.

    Returns:
        tuple: ``(text, fidelity)``: the summary to use and ``{"score": float,
        "unsupported_share": float, "unsupported": [str], "verdict": "pass" | "fail",
        "reason": str, "words": int, "source_words": int, "replaced": bool}`` of the text
        used; when replaced, ``"model_score"`` and ``"model_reason"`` tell about the model's.

    Raises:
        LLMResponseError: the summary failed and no extractive summary passes either (the
        compaction then fails like any failed summary: history unchanged).
    """
    source = source_text(messages)
    speakers = speakers_of(messages)
    verdict = score_summary(text, source, speakers)
    if verdict.passed:
        return text, dict(verdict.as_dict(), replaced=False)
    model = script.runtime.ledger.model
    extract = extractive_summary(
        messages, rag_memory.summary_output_tokens(script, messages), heuristic_importance,
        model=model,
    )
    replacement = score_summary(extract, source, speakers)
    if not extract or not replacement.passed:
        raise LLMResponseError(
            f"the summary failed the fidelity check ({verdict.reason}) and no extractive "
            f"summary could replace it ({replacement.reason or 'no line to take'})"
        )
    logger.log_info(
        f"AI summary of {len(messages)} messages failed the fidelity check "
        f"({verdict.reason}); replaced by an extract of the span"
    )
    return extract, dict(replacement.as_dict(), replaced=True, model_score=verdict.score,
                         model_reason=verdict.reason)


def fidelity_fields(fidelity):
    """The compaction-log fields of a guard's result: ``{"fidelity": float,
    "fidelity_replaced": bool}`` (``{}`` for None)."""
    if not fidelity:
        return {}
    return {"fidelity": fidelity["score"], "fidelity_replaced": bool(fidelity["replaced"])}


# -- shared bookkeeping --------------------------------------------------------------------------


def _usage_check(script, trigger, force):
    """``(usage, threshold, over)`` as the summary path decides it."""
    usage = script.token_usage()
    threshold = float(script.cfg(
        "compact_emergency_threshold" if force else "compact_sleep_threshold"))
    return usage, threshold, force or usage >= threshold


def _below(usage, threshold, trigger, strategy=None):
    result = {
        "skipped": True,
        "reason": f"below threshold ({usage:.1%} < {threshold:.0%})",
        "token_usage": usage,
        "trigger": trigger,
    }
    if strategy:
        result["strategy"] = strategy
    return result


def _failed(script, trigger, strategy, error):
    return rag_memory._record_failure(script, trigger, error, strategy)


def log_success(script, character, result):
    """Bookkeeping of a successful compaction: reset the circuit breaker, add ``result`` to the
    compaction log (``aihistory``) and log one server line; returns ``result``."""
    script.db.compact_failures = 0
    script.db.compact_last_error = None
    rag_memory._log_event(script, {"at": script.db.last_compaction, **result})
    logger.log_info(
        f"AI compaction [{result['trigger']}, {result['strategy']}] {character}: "
        f"{result['compacted_messages']} messages, {result['original_tokens']} -> "
        f"{result['new_tokens']} tokens ({result['reduction_pct']:.0f}% reduction)"
        + (f"; context {result['context_before']} -> {result['context_after']} tokens"
           if "context_after" in result else "")
    )
    return result


@defer.inlineCallbacks
def summarise_and_apply(script, character, to_compact, replaced_tokens, total_tokens, trigger,
                        strategy):
    """
    The step every one-marker compaction shares (``summary``, ``hybrid``'s summary,
    ``replace_all``): summarise ``to_compact`` (:func:`summarise`), build the marker, judge it
    by what it costs in context (:func:`ai_contrib.core.summary.check_summary`, plus the stall
    rule: it must cut at least ``rag_memory.STALL_FRACTION`` of ``total_tokens``), then replace
    the id range with it (archive record first), journal it and checkpoint. While it runs
    ``script.ndb.compacting`` is set.

    Args:
        to_compact (list[dict]): contiguous messages of the runtime history, oldest first.
        replaced_tokens (int): their tokens. total_tokens (int): the history's tokens now.
        trigger (str): ``sleep``, ``emergency``, ``manual`` ... strategy (str): the strategy.

    Returns:
        Deferred firing ``(marker, marker_tokens, error)``: on success the stored marker and
        its tokens with ``error`` None; else ``(None, 0, reason)`` and the history is exactly as
        it was. Never errbacks for LLM, validation or archive failures.
    """
    script.ndb.compacting = True
    try:
        model = script.runtime.ledger.model

        def measured(summary, fidelity=None):
            """(marker, its tokens, problem): judged by what the stored marker costs in
            context, not by the bare summary text."""
            marker = make_marker(
                summary, to_compact, original_token_count=replaced_tokens,
                summary_token_count=count_tokens(summary, model), trigger=trigger,
                strategy=strategy, **({"fidelity": fidelity} if fidelity else {}),
            )
            marker_tokens = count_message_tokens(marker, model)
            problem = check_summary(
                summary, marker_tokens, replaced_tokens,
                int(script.cfg("compact_min_saving_tokens")),
            )
            if problem is None and (replaced_tokens - marker_tokens) < (
                rag_memory.STALL_FRACTION * total_tokens
            ):
                problem = (
                    f"stall: the summary would cut only {replaced_tokens - marker_tokens} of "
                    f"{total_tokens} tokens (< {rag_memory.STALL_FRACTION:.0%})"
                )
            return marker, marker_tokens, problem

        try:
            summary = yield summarise(script, to_compact)
            # what the model's summary would cost decides first (the failure policy), then
            # what it says (the fidelity guard, which may put an extract in its place)
            _marker, _tokens, problem = measured(summary)
            if problem:
                return None, 0, problem
            summary, fidelity = guard_summary(script, to_compact, summary)
        except LLMError as err:
            return None, 0, f"summary failed: {err}"
        marker, marker_tokens, problem = measured(summary, fidelity)
        if problem:
            return None, 0, problem
        try:
            script.runtime.apply_compaction(
                marker, to_compact[0]["id"], to_compact[-1]["id"], trigger=trigger,
                strategy=strategy,
            )
        except (ArchiveError, ValueError) as err:
            return None, 0, f"could not apply the compaction: {err}"
        rag_memory.note_compaction_applied(script, character, marker)
        script.checkpoint()
    finally:
        script.ndb.compacting = False
    return marker, marker_tokens, None


def summary_result(script, trigger, strategy, compacted, total_before, summary_tokens, marker,
                   replaced_tokens=None):
    """
    The result dict of a successful summarising compaction (module docstring of
    :mod:`ai_contrib.rag_memory`), with ``strategy`` and the marker's id.

    ``original_tokens`` -> ``new_tokens`` (and ``reduction_pct``) are the compaction's own
    effect: the tokens of what it replaced and of what replaced it. The context before and after
    are reported apart (``context_before``, ``context_after``): players may speak while the
    summary is written, so the context can grow across a compaction that shrank what it touched.

    Args:
        summary_tokens (int): tokens of the marker(s) put in.
        replaced_tokens (int, optional): tokens taken out; default the marker's
            ``original_token_count``.
    """
    if replaced_tokens is None:
        replaced_tokens = (marker.get("metadata") or {}).get("original_token_count") or 0
    return {
        "success": True,
        "trigger": trigger,
        "strategy": strategy,
        "compacted_messages": compacted,
        "preserved_messages": sum(1 for m in script.history if not is_marker(m)),
        "original_tokens": replaced_tokens,
        "new_tokens": summary_tokens,
        "reduction_pct": (1 - summary_tokens / replaced_tokens) * 100 if replaced_tokens else 0.0,
        "context_before": total_before,
        "context_after": script.token_count(),
        "summary_tokens": summary_tokens,
        "marker_id": marker["id"],
        **fidelity_fields((marker.get("metadata") or {}).get("fidelity")),
    }


# -- the strategies --------------------------------------------------------------------------


def _evict_oldest(script, target_tokens):
    """
    Move the oldest raw messages out of the runtime context (they stay in the archive) until
    at most ``target_tokens`` remain, cutting only where no tool call loses its results.
    Returns the ids evicted. Raises ArchiveError when the eviction cannot be recorded.
    """
    history = script.history
    ids = eviction_ids(history, script.runtime.token_counts(history), target_tokens)
    if ids:
        script.runtime.evict(
            ids, reason="mask strategy: oldest messages moved out of context at the emergency "
            "threshold")
    return ids


def _run_mask(script, character, force, trigger):
    result = micro_compact(script, trigger=trigger, strategy="mask")
    if trigger != "emergency":
        return defer.succeed(result)
    # Masking alone cannot bound a conversation that goes on for ever: at the emergency
    # threshold the oldest messages leave the context first-in first-out (MemGPT's queue
    # eviction), to the archive, so mask never needs a summariser; down to 90 % of the
    # threshold so that the next few messages do not trigger it again.
    threshold = float(script.cfg("compact_emergency_threshold"))
    budget = max(1, script.budget())
    if script.token_usage() < threshold:
        return defer.succeed(result)
    before = result.get("original_tokens", script.token_count())
    try:
        ids = _evict_oldest(script, int(threshold * budget * 0.9))
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not evict the oldest messages: {err}")
        ids = []
    if not ids:
        return defer.succeed(result)
    script.checkpoint()
    after = script.token_count()
    masked = result.get("masked_messages", 0)
    result = {
        "success": True,
        "trigger": trigger,
        "strategy": "mask",
        "masked_messages": masked,
        "evicted_messages": len(ids),
        "compacted_messages": masked + len(ids),
        "original_tokens": before,
        "new_tokens": after,
        "reduction_pct": (1 - after / before) * 100 if before else 0.0,
    }
    rag_memory._log_event(script, {"at": _now(), **result})
    logger.log_info(
        f"AI compaction [{trigger}, mask] {character}: {len(ids)} messages, {before} -> {after} "
        f"tokens ({result['reduction_pct']:.0f}% reduction): the oldest moved to the archive"
    )
    return defer.succeed(result)


@defer.inlineCallbacks
def _run_summary(script, character, force, trigger, strategy="summary"):
    """
    The ``summary`` strategy (``docs/design.md``, "Summary compaction"): at the threshold (or
    forced), the messages before the preserve window become one ``[CONTEXT SUMMARY]``. ``strategy``
    names the strategy that runs it (``"hybrid"`` runs it after masking) in the result, the
    compaction log, the archive record and the server log.
    """
    history = list(script.history)
    if not history:
        return {"skipped": True, "reason": "no history", "trigger": trigger}
    usage, threshold, over = _usage_check(script, trigger, force)
    if not over:
        return _below(usage, threshold, trigger)  # the documented skipped result dict
    total_tokens = script.token_count()
    plan = plan_compaction(
        history,
        script.runtime.token_counts(history),
        max_context_tokens=max(1, script.budget()),
        preserve_window=int(script.cfg("compact_preserve_window")),
        preserve_fraction=float(get_setting("COMPACT_PRESERVE_FRACTION")),
        keep_ids=script.awaiting_answer_ids(),
    )
    if plan.skipped:
        return {"skipped": True, "reason": plan.reason, "trigger": trigger}
    decision = check_benefit(script, trigger, plan.compact_tokens, force)
    if not decision["run"]:
        return benefit_skip_result(decision, trigger, strategy)
    marker, summary_tokens, error = yield summarise_and_apply(
        script, character, plan.to_compact, plan.compact_tokens, total_tokens, trigger, strategy
    )
    if error:
        return _failed(script, trigger, strategy, error)
    result = summary_result(
        script, trigger, strategy, len(plan.to_compact), total_tokens, summary_tokens, marker
    )
    return log_success(script, character, result)


@defer.inlineCallbacks
def _run_hybrid(script, character, force, trigger):
    masked = micro_compact(script, trigger=trigger, strategy="hybrid")
    count = masked.get("masked_messages", 0)
    summary = yield _run_summary(script, character, force, trigger, strategy="hybrid")
    if summary.get("success") or "error" in summary:
        result = dict(summary, strategy="hybrid", masked_messages=count)
        if count and summary.get("success"):
            result["context_before"] = masked["original_tokens"]  # before the masking, too
        return result
    if count:
        return dict(masked, summary=summary.get("reason"))
    return {
        "skipped": True,
        "reason": f"{masked.get('reason') or masked.get('error')}; summary: "
                  f"{summary.get('reason')}",
        "trigger": trigger,
        "strategy": "hybrid",
    }


@defer.inlineCallbacks
def _run_replace_all(script, character, force, trigger):
    strategy = "replace_all"
    history = list(script.history)
    if not history:
        return {"skipped": True, "reason": "no history", "trigger": trigger, "strategy": strategy}
    usage, threshold, over = _usage_check(script, trigger, force)
    if not over:
        return _below(usage, threshold, trigger, strategy)
    # speech still waiting for an answer stays verbatim so the reply can see it
    to_compact, _kept, reason = plan_replace_all(history, keep_ids=script.awaiting_answer_ids())
    if reason:
        return {"skipped": True, "reason": reason, "trigger": trigger, "strategy": strategy}
    runtime = script.runtime
    replaced_tokens = sum(runtime.token_counts(to_compact))
    total_before = script.token_count()
    decision = check_benefit(script, trigger, replaced_tokens, force)
    if not decision["run"]:
        return benefit_skip_result(decision, trigger, strategy)

    marker, marker_tokens, error = yield summarise_and_apply(
        script, character, to_compact, replaced_tokens, total_before, trigger, strategy
    )
    if error:
        return _failed(script, trigger, strategy, error)
    result = summary_result(
        script, trigger, strategy, len(to_compact), total_before, marker_tokens, marker
    )
    return log_success(script, character, result)


def apply_cascade(runtime, cycle, long_marker, short_marker, **info):
    """
    Apply a cascade cycle to a :class:`~ai_contrib.memory.runtime.RuntimeHistory`: one
    ``compaction`` archive record per tier (the fold range becomes ``long_marker``, then the
    summarised range ``short_marker``), so replay after a crash needs nothing new.

    Both ranges are checked before anything is written, so a cycle whose range changed while
    its summaries were written is refused whole.

    Raises:
        SpliceError: a planned range is no longer in the history (nothing changed).
        ArchiveError: a record could not be written (if it was the second, the long-term fold
            is applied and the short-term range is still verbatim: consistent, nothing lost).
    """
    cascade_core.apply_cycle(runtime.messages, cycle, long_marker, short_marker)  # dry run
    for first_id, last_id, marker in cascade_core.cycle_replacements(
        cycle, long_marker, short_marker
    ):
        runtime.apply_compaction(
            marker, first_id, last_id, strategy="cascade", tier=marker["metadata"]["tier"],
            **info,
        )


@defer.inlineCallbacks
def _run_cascade(script, character, force, trigger):
    strategy = "cascade"
    history = list(script.history)
    if not history:
        return {"skipped": True, "reason": "no history", "trigger": trigger, "strategy": strategy}
    # token pressure (or an admin's /force) runs a cycle before its message count is due
    pressure = force
    if trigger != "turn" and not pressure:
        pressure = _usage_check(script, trigger, force)[2]
    runtime = script.runtime
    window = int(script.cfg("cascade_immediate_window"))
    recent = int(script.cfg("cascade_recent_window"))
    if pressure and not cascade_core.cascade_status(history, window, recent)["due"]:
        share = float(script.cfg("cascade_pressure_window")) * script.budget()
        window = cascade_core.fitted_window(
            history, runtime.token_counts(history), window, int(share)
        )
    cycle = cascade_core.plan_cycle(history, window, recent, force=pressure,
                                    keep_ids=script.awaiting_answer_ids())
    if cycle.skipped:
        return {"skipped": True, "reason": cycle.reason, "trigger": trigger, "strategy": strategy}
    replaced_tokens = sum(runtime.token_counts(cycle.to_summarise))
    fold_tokens = sum(runtime.token_counts(cycle.fold))
    total_before = script.token_count()
    decision = check_benefit(script, trigger, replaced_tokens, force)
    if not decision["run"]:
        return benefit_skip_result(decision, trigger, strategy)

    script.ndb.compacting = True
    try:
        try:
            short_text = yield summarise(
                script, cycle.to_summarise, prompt=cascade_core.SHORT_TERM_PROMPT,
                instruction=cascade_core.SHORT_TERM_INSTRUCTION, structured=False,
            )
            long_text = None
            if cycle.promote:
                long_text = cascade_core.summary_text_of(cycle.fold[0])
            elif cycle.fold:
                long_text = yield fold_summaries(script, cycle.fold)
        except LLMError as err:
            return _failed(script, trigger, strategy, f"summary failed: {err}")
        model = runtime.ledger.model

        def measured(short_text, long_text, fidelity=None, long_fidelity=None):
            """(short marker, long marker or None, their tokens, problem)."""
            short_marker = cascade_core.make_tier_marker(
                cascade_core.TIER_SHORT, short_text, cycle.to_summarise, replaced_tokens,
                count_tokens(short_text, model), cycle.cycle, trigger=trigger,
                **({"fidelity": fidelity} if fidelity else {}),
            )
            long_marker = None
            long_tokens = 0
            if cycle.fold:
                long_marker = cascade_core.make_tier_marker(
                    cascade_core.TIER_LONG, long_text, cycle.fold, fold_tokens,
                    count_tokens(long_text, model), cycle.cycle, trigger=trigger,
                    **({"fidelity": long_fidelity} if long_fidelity else {}),
                )
                long_tokens = count_message_tokens(long_marker, model)
            short_tokens = count_message_tokens(short_marker, model)
            problem = cascade_core.check_cycle(
                short_text, short_tokens, replaced_tokens,
                int(script.cfg("compact_min_saving_tokens")),
                long_text=long_text, long_marker_tokens=long_tokens, fold_tokens=fold_tokens,
            )
            return short_marker, long_marker, short_tokens, long_tokens, problem

        # the cost of the model's summaries decides first, then what they say (the guard)
        problem = measured(short_text, long_text)[-1]
        if problem:
            return _failed(script, trigger, strategy, problem)
        try:
            short_text, fidelity = guard_summary(script, cycle.to_summarise, short_text)
            long_fidelity = None
            if cycle.fold and not cycle.promote:
                long_text, long_fidelity = guard_summary(script, cycle.fold, long_text)
        except LLMError as err:
            return _failed(script, trigger, strategy, f"summary failed: {err}")
        short_marker, long_marker, short_tokens, long_tokens, problem = measured(
            short_text, long_text, fidelity, long_fidelity)
        if problem:
            return _failed(script, trigger, strategy, problem)
        try:
            apply_cascade(runtime, cycle, long_marker, short_marker, trigger=trigger)
        except (ArchiveError, ValueError) as err:
            return _failed(script, trigger, strategy, f"could not apply the cycle: {err}")
        rag_memory.note_compaction_applied(script, character, short_marker)
        script.checkpoint()
    finally:
        script.ndb.compacting = False
    result = summary_result(
        script, trigger, strategy, len(cycle.to_summarise), total_before,
        short_tokens + long_tokens, short_marker,
        replaced_tokens=replaced_tokens + (fold_tokens if long_marker else 0),
    )
    result.update(
        cycle=cycle.cycle,
        waterfall=cycle.waterfall,
        short_term_marker_id=short_marker["id"],
        long_term_marker_id=long_marker["id"] if long_marker else None,
    )
    logger.log_info(
        f"AI cascade {character}: cycle {cycle.cycle} "
        f"({'waterfall' if cycle.waterfall else 'first summary'}): "
        f"{len(cycle.to_summarise)} messages -> short-term summary ({len(short_text)} chars)"
        + (f", long-term summary {len(long_text)} chars" if long_text else "")
    )
    return log_success(script, character, result)


_RUNNERS = {
    "summary": _run_summary,
    "mask": _run_mask,
    "hybrid": _run_hybrid,
    "cascade": _run_cascade,
    "replace_all": _run_replace_all,
}


def run_strategy(script, character, strategy, force=False, trigger="sleep"):
    """
    Run one compaction with ``strategy`` (one of :data:`STRATEGIES`). Called by
    :func:`ai_contrib.rag_memory.compact_conversation_history` after its shared checks
    (already compacting, disabled, circuit breaker).

    Returns:
        Deferred firing a result dict (module docstring); never errbacks for LLM, archive or
        validation failures, which leave the history as it was.

    Raises:
        ValueError: for an unknown strategy.
    """
    runner = _RUNNERS.get(strategy)
    if runner is None:
        raise ValueError(f"no runner for strategy {strategy!r}")
    return runner(script, character, force, trigger)


# -- after each turn ---------------------------------------------------------------------------


def after_turn(script, character):
    """
    The per-turn hook (``docs/design.md``: micro-compaction after each turn, "Observation masking";
    the cascade's cycle check on each new message, "Cascade summaries"): ``mask`` and ``hybrid``
    mask old tool outputs at once; ``cascade`` runs a cycle when one is due (its LLM calls run in
    the background: the returned Deferred fires when it is done). Other strategies, and NPCs with
    compaction disabled, do nothing.

    Returns:
        Deferred firing the result dict, or None when nothing was attempted. Never errbacks.
    """
    try:
        if not script.cfg("compact_enabled"):
            return defer.succeed(None)
        strategy = resolve_strategy(script)
        if strategy in ("mask", "hybrid"):
            return defer.succeed(micro_compact(script, trigger="turn", strategy=strategy))
        if strategy != "cascade":
            return defer.succeed(None)
        d = rag_memory.compact_conversation_history(script, character, trigger="turn")
    except Exception as err:  # a hook failure must never cost the NPC its next reply
        logger.log_warn(f"AI {character}: after-turn compaction failed: {err}")
        return defer.succeed(None)

    def _failed_hook(failure):
        logger.log_warn(f"AI {character}: cascade cycle failed: {failure.getErrorMessage()}")
        return None

    return d.addErrback(_failed_hook)


# -- display ---------------------------------------------------------------------------------


def describe_strategy(script):
    """One line for ``aihistory``: the strategy and where it stands."""
    strategy = resolve_strategy(script)
    history = script.history
    style = prompt_style(script)
    configured = script.cfg("compact_strategy")
    shown = strategy if str(configured).lower() == strategy else (
        f"{strategy} (configured {configured!r} is unknown)")
    mask = (
        f"mask window {script.cfg('mask_window')} turns, outputs >= "
        f"{script.cfg('mask_min_tokens')} tokens, {masked_count(history)} masked in context"
    )
    if strategy == "mask":
        detail = mask
    elif strategy == "hybrid":
        detail = f"{mask}; summary at the thresholds"
    elif strategy == "cascade":
        status = cascade_core.cascade_status(
            history, int(script.cfg("cascade_immediate_window")),
            int(script.cfg("cascade_recent_window")),
        )
        detail = (
            f"immediate {script.cfg('cascade_immediate_window')}, recent "
            f"{script.cfg('cascade_recent_window')} messages; {status['raw']} raw in context, "
            f"{status['cycles']} cycle(s) so far, next at {status['due_at']} raw"
        )
    elif strategy == "replace_all":
        detail = "whole history -> one structured summary at the thresholds"
    else:
        detail = f"preserve window {script.cfg('compact_preserve_window')} messages"
    if strategy != "mask":
        detail += f"; {style} prompts"
    return f"{shown} ({detail})"


def describe_benefit(script):
    """One line for ``aihistory``: the last benefit-guard decision, or that none was made."""
    decision = script.db.compact_benefit
    if not decision:
        return "not evaluated yet"
    verdict = "compact" if decision.get("run") else "|yskip|n"
    forced = " (forced by admin)" if decision.get("bypassed") else ""
    return (
        f"{verdict}{forced}: {decision.get('reason')} "
        f"[{decision.get('trigger')}, {(decision.get('at') or '')[:19]}]"
    )


def format_result(npc_key, result):
    """
    A line for an admin describing a result of a strategy other than ``summary``, or None to
    let the caller use its summary wording.
    """
    strategy = result.get("strategy")
    if strategy not in ("mask", "hybrid", "cascade", "replace_all"):
        return None
    if result.get("skipped"):
        return f"Compaction of {npc_key} ({strategy}) skipped: {result['reason']}."
    if not result.get("success"):
        return (f"Compaction of {npc_key} ({strategy}) failed: {result.get('error')}. "
                "History unchanged.")
    tokens = (
        f"{result['original_tokens']} -> {result['new_tokens']} tokens "
        f"({result['reduction_pct']:.1f}% reduction)"
        + (f"; context {result['context_before']} -> {result['context_after']} tokens"
           if "context_after" in result else "")
    )
    masked = result.get("masked_messages", 0)
    if strategy == "mask" or (strategy == "hybrid" and "marker_id" not in result):
        evicted = result.get("evicted_messages")
        moved = f" and moved the {evicted} oldest messages out of context" if evicted else ""
        return (
            f"Masked {masked} old tool output(s) of {npc_key}{moved}: {tokens}; the originals "
            "stay in the archive (aihistory <npc>/raw)."
        )
    if strategy == "cascade":
        what = "waterfall into the long-term summary, " if result.get("waterfall") else ""
        return (
            f"Cascade cycle {result['cycle']} for {npc_key}: {what}"
            f"{result['compacted_messages']} messages -> short-term summary, {tokens}, "
            f"{result['preserved_messages']} kept verbatim."
        )
    if strategy == "replace_all":
        return (
            f"Replaced {npc_key}'s whole history ({result['compacted_messages']} messages) with "
            f"one structured summary: {tokens}."
        )
    return (
        f"Compacted {npc_key} (hybrid): masked {masked} old tool output(s), then "
        f"{result['compacted_messages']} messages -> summary, {tokens}, "
        f"{result['preserved_messages']} kept."
    )
