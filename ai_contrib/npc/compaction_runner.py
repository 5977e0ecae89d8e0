"""
Compaction strategies: how an NPC keeps its runtime history inside its token budget, chosen per
NPC with ``script.db.compact_strategy`` (default ``AI_COMPACT_STRATEGY``, ``"summary"``).

``summary``
    The default (``docs/design.md``, "Summary compaction"): the messages before the preserve window
    become one ``[CONTEXT SUMMARY]`` marker at the sleep (70 %) and emergency (80 %) thresholds;
    the plan is :func:`ai_contrib.core.compaction.plan_summary`.
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

What each strategy is (whether it summarises, its per-turn step, its plan, its wording) is its
record in :data:`ai_contrib.core.compaction.REGISTRY`; this module is the shell around the pure
engine (``docs/design.md``, "One compaction engine"): it reads the NPC into a
:class:`~ai_contrib.core.compaction.Snapshot`, runs the LLM step, applies the markers (archive
record first) and does the bookkeeping, with one generic runner, :func:`run_strategy`.

Results (:class:`~ai_contrib.core.compaction.CompactionResult`, stored as the dicts of
``compact_conversation_history``) carry ``"strategy"`` and, per strategy:
``masked_messages``/``masked_ids`` (mask, hybrid); ``evicted_messages`` (mask at the emergency
threshold); ``cycle``, ``waterfall``, ``short_term_marker_id``, ``long_term_marker_id``
(cascade). Tokens are model tokens.
"""

from __future__ import annotations

from typing import Any

from evennia.utils import logger
from twisted.internet import defer

from ..core import cascade as cascade_core
from ..core import compaction
from ..core.compaction import (
    DEFAULT_STRATEGY,
    NO_TALK_SUMMARY,
    STRATEGIES,
    CompactionResult,
    Snapshot,
    benefit_skipped,
    build_markers,
    combine_masked,
    evicted_result,
    eviction_target,
    get_strategy,
    masked_result,
    summarised_result,
)
from ..core.fidelity import extractive_summary, score_summary, source_text, speakers_of
from ..core.grounding import check_summary, source_lines
from ..core.masking import plan_masks
from ..core.quotes import check_quotes, speaker_lines
from ..core.messages import is_marker
from ..core.replay import apply_record
from ..core.structured import BASE_SUMMARY_INSTRUCTION
from ..core.summary import (
    DEFAULT_COMPACTION_PROMPT,
    BenefitDecision,
    benefit_decision,
    estimate_summary_tokens,
)
from ..core.tick import reaches
from ..llm import summariser
from ..llm.client import LLMError, LLMResponseError, LLMTimeoutError
from ..memory.archive import ArchiveError
from ..memory.compaction_log import (
    log_event,
    note_compaction_applied,
    now_iso,
    record_failure,
    record_success,
)
from ..memory.importance import heuristic_importance
from ..settings import get_setting
from . import hurry
from .eviction import evict_oldest
from .summary_writer import summary_record, summary_writer

__all__ = [
    "STRATEGIES",
    "after_turn",
    "apply_cascade",
    "apply_masks_to_runtime",
    "apply_plan",
    "planned_span",
    "check_benefit",
    "micro_compact",
    "resolve_strategy",
    "run_strategy",
    "snapshot",
    "summarise",
]

PROMPT_STYLES = ("chat", "base")


# -- choosing --------------------------------------------------------------------------------


def resolve_strategy(script, name=None) -> str:
    """
    The strategy to use: ``name`` if given, else the NPC's ``compact_strategy`` (Attribute or
    ``AI_COMPACT_STRATEGY``).

    Raises:
        ValueError: if ``name`` is given and is not one of :data:`STRATEGIES`. A bad configured
        value does not raise: it is logged once and ``"summary"`` is used, so a typo in
        settings never stops an NPC from compacting.
    """
    if name is not None:
        return get_strategy(str(name).strip().lower()).name
    value = str(script.cfg("compact_strategy") or DEFAULT_STRATEGY).strip().lower()
    if value in STRATEGIES:
        return value
    if script.ndb.bad_strategy_warned != value:
        script.ndb.bad_strategy_warned = value
        logger.log_warn(
            f"AI {script.obj}: unknown compact_strategy {value!r}; using {DEFAULT_STRATEGY!r}"
        )
    return DEFAULT_STRATEGY


def prompt_style(script) -> str:
    """``"chat"`` or ``"base"`` from ``summary_prompt_style`` (unknown values mean chat)."""
    value = str(script.cfg("summary_prompt_style") or "chat").strip().lower()
    return value if value in PROMPT_STYLES else "chat"


def summarises(script, strategy=None) -> bool:
    """Whether the NPC's strategy (or ``strategy``, run once instead) writes summaries
    (``mask`` does not, so pre-compaction fact extraction has nothing to protect then).
    Raises ValueError for an unknown ``strategy``."""
    return get_strategy(resolve_strategy(script, strategy)).summarises


def snapshot(script, force=False, trigger="sleep", hold_from=None) -> Snapshot:
    """
    The :class:`~ai_contrib.core.compaction.Snapshot` of ``script``'s history and compaction
    options now, which the pure plans read. ``hold_from`` (a message id) joins the ids no plan
    compacts, with everything after them (:func:`ai_contrib.core.cuts.hold_cut`): the first
    message the fact extraction before an emergency compaction did not read.
    """
    history = list(script.history)
    options = {
        name: script.cfg(name)
        for name in ("compact_sleep_threshold", "compact_emergency_threshold",
                     "compact_preserve_window", "compact_preserve_max_fraction",
                     "cascade_immediate_window",
                     "cascade_recent_window", "cascade_pressure_window")
    }
    options["preserve_fraction"] = get_setting("COMPACT_PRESERVE_FRACTION")
    options["keep_ids"] = script.hearing.awaiting_answer_ids() + ([hold_from] if hold_from else [])
    return Snapshot(
        history, script.runtime.token_counts(history), script.conversation.token_count(),
        script.budgeting.tokens(), trigger, force, options,
    )


def planned_span(script, trigger="emergency", force=True, strategy=None) -> tuple | None:
    """
    What the NPC's next compaction would replace if it were planned now (forced unless
    ``force`` is False; with ``strategy`` run once instead of the NPC's): the span the fact
    extraction before a compaction reads (``docs/design.md``, "Pre-compaction fact
    extraction"), and where the compaction after it must stop, so that it replaces nothing the
    extraction did not read (lines said meanwhile move the preserve window on).

    Returns:
        tuple | None: ``(ids, hold_from)``: the ids of the messages the plan's spans hold (a
        set), and the id of the first message after them (None when they end the history);
        None when the strategy writes no summary or the plan is skipped.
    """
    record = get_strategy(resolve_strategy(script, strategy))
    if record.plan is None:
        return None
    shot = snapshot(script, force, trigger)
    plan = compaction.plan(record, shot)
    if plan.skipped:
        return None
    ids = {m["id"] for span in plan.spans for m in span.messages}
    last = max(i for i, m in enumerate(shot.history) if m["id"] in ids)
    after = shot.history[last + 1]["id"] if last + 1 < len(shot.history) else None
    return ids, after


# -- the benefit guard -------------------------------------------------------------------------


def check_benefit(script, trigger, current_tokens, force=False) -> BenefitDecision:
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
        BenefitDecision: :func:`ai_contrib.core.summary.benefit_decision` plus ``at`` (ISO-8601
        UTC),
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
    decision.update(at=now_iso(), trigger=trigger, bypassed=bypassed)
    if bypassed:
        decision["run"] = True
    script.db.compact_benefit = decision
    verdict = "compact" if decision["run"] else "skip"
    logger.log_info(
        f"AI {script.obj}: benefit guard [{trigger}]: estimated saving {decision['reason']} "
        f"-> {verdict}{' (forced)' if bypassed else ''}"
    )
    return decision


# -- masking (micro-compaction) ---------------------------------------------------------------


def apply_masks_to_runtime(runtime, replacements, **info) -> list[str]:
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


def micro_compact(script, trigger="turn", strategy="mask") -> CompactionResult:
    """
    Mask old tool outputs now (micro-compaction, ``docs/design.md``, "Observation masking"): no
    LLM call, O(n) in the history.

    Uses ``mask_window`` (turns) and ``mask_min_tokens``. Never raises: any failure is logged
    and the messages stay as they were, so it cannot block a reply.

    Returns:
        CompactionResult: a success with ``masked_messages``, ``masked_ids``,
        ``compacted_messages``, ``original_tokens``, ``new_tokens``, ``reduction_pct``; a skip
        when nothing qualifies; a failure.
    """
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
        return CompactionResult.fail(f"masking failed: {err}", trigger, strategy)
    if not ids:
        return CompactionResult.skip("no old tool output to mask", trigger, strategy)
    after = runtime.tokens
    result = masked_result(trigger, strategy, ids, before, after)
    logged = {k: v for k, v in result.as_dict().items() if k != "masked_ids"}
    log_event(script, {"at": now_iso(), **logged})
    logger.log_info(
        f"AI masking [{trigger}] {script.obj}: {len(ids)} old tool outputs archived, "
        f"{before} -> {after} tokens"
    )
    return result


def evict_for_emergency(script, character, masked, trigger, strategy="mask") -> CompactionResult:
    """
    Masking alone cannot bound a conversation that goes on for ever: at the emergency threshold
    the oldest messages leave the context first-in first-out (MemGPT's queue eviction), to the
    archive, so ``mask`` never needs a summariser (``docs/design.md``, "Observation masking").

    Args:
        masked (CompactionResult): the masking's result, returned as it is when nothing is
            evicted.

    Returns:
        CompactionResult: the result of masking and eviction together.
    """
    threshold = float(script.cfg("compact_emergency_threshold"))
    if not reaches(script.budgeting.usage(), threshold):
        return masked
    before = masked.get("original_tokens", script.conversation.token_count())
    try:
        ids = evict_oldest(
            script, character, eviction_target(threshold, script.budgeting.tokens()),
            reason="mask strategy: oldest messages moved out of context at the emergency "
                   "threshold",
            stop_ids=frozenset(script.hearing.awaiting_answer_ids()),  # kept to be answered
        )
        if ids:
            script.runtime.drop_extraction_traffic()
    except ArchiveError as err:
        logger.log_err(f"AI {character}: could not evict the oldest messages: {err}")
        ids = []
    if not ids:
        return masked
    script.checkpoint()
    after = script.conversation.token_count()
    result = evicted_result(trigger, strategy, masked.masked_messages, len(ids), before, after)
    log_event(script, result)
    logger.log_info(
        f"AI compaction [{trigger}, {strategy}] {character}: {len(ids)} messages, {before} -> "
        f"{after} tokens ({result.reduction_pct:.0f}% reduction): the oldest moved to the "
        "archive"
    )
    return result


# -- summarising ---------------------------------------------------------------------------------


def _summariser_model(script):
    return script.cfg("compact_model") or script.cfg("llm_model")


def summarise(script, messages, prompt=None, instruction=None, structured=True) -> defer.Deferred:
    """
    Summarise ``messages`` with the NPC's summariser options: its prompt style
    (``summary_prompt_style``), ``compact_prompt``, ``compact_model`` or ``llm_model``
    (:func:`ai_contrib.llm.summariser.summarise_messages`).

    Args:
        script (AssistantScript): the NPC's script.
        messages (list[dict]): the messages to summarise (markers among them are folded in).
        prompt (str, optional): chat system prompt; default ``compact_prompt`` or
            :data:`~ai_contrib.core.summary.DEFAULT_COMPACTION_PROMPT`.
        instruction (str, optional): the base prompt's instruction line; default
            ``compact_prompt`` or :data:`~ai_contrib.core.structured.BASE_SUMMARY_INSTRUCTION`.
        structured (bool): normalise the section headings (:mod:`ai_contrib.core.structured`).

    Returns:
        Deferred firing the cleaned summary text; errbacks with LLMError (the request failed,
        or the summary came back empty).
    """
    style = prompt_style(script)
    configured = script.cfg("compact_prompt")
    if style == "base":
        fixed = instruction or configured or BASE_SUMMARY_INSTRUCTION
    else:
        fixed = prompt or configured or DEFAULT_COMPACTION_PROMPT
    counts = script.runtime.token_counts(messages)
    return summariser.summarise_messages(
        messages, counts, fixed, style=style, structured=structured,
        model=_summariser_model(script), max_output=summariser.summary_output_tokens(sum(counts)),
        label=str(script.obj),
    )


def guard_summary(script, messages, text) -> tuple[str, dict[str, Any]]:
    """
    The fidelity guard (``docs/design.md``, "Summary fidelity"): score ``text`` against
    ``messages`` (:func:`ai_contrib.core.fidelity.score_summary`, then sentence by sentence
    against single lines, :func:`ai_contrib.core.grounding.check_summary`, and every quote
    against its speaker's lines, :func:`ai_contrib.core.quotes.check_quotes`); a summary that
    fails is replaced by an extractive one (:func:`ai_contrib.core.fidelity.extractive_summary`: the
    span's highest-importance lines by the journal's heuristic, within the summary's token
    target), which must pass in turn.

    Args:
        script (AssistantScript): the NPC's script.
        messages (list[dict]): the summarised span. text (str): the model's cleaned summary.

    Returns:
        tuple: ``(text, fidelity)``: the summary to use and ``{"score": float,
        "unsupported_share": float, "unsupported": [str], "verdict": "pass" | "fail",
        "reason": str, "words": int, "source_words": int, "replaced": bool}`` of the text
        used (``"line_support"``: its share of sentences one line supports, when kept); when
        replaced, ``"model_score"``, ``"model_reason"``, ``"model_line_support"`` and
        ``"model_quote_failures"`` (quotes that are not their speaker's words) tell
        about the model's.

    Raises:
        LLMResponseError: the summary failed and no extractive summary passes either (the
        compaction then fails like any failed summary: history unchanged).
    """
    source = source_text(messages)
    speakers = speakers_of(messages)
    verdict = score_summary(text, source, speakers)
    # and sentence by sentence: a summary's words can all be the source's while its claims
    # are no one's (docs/design.md, "Facts you can trust")
    lines = check_summary(text, source_lines(messages))
    # and quote by quote: a line given as someone's words must be theirs, verbatim
    said = speaker_lines(messages)
    quotes = check_quotes(text, said)
    if verdict.passed and lines.passed and quotes.passed:
        return text, dict(verdict.as_dict(), replaced=False, line_support=lines.support)
    reason = verdict.reason or lines.reason or quotes.reason
    extract, fidelity = extract_instead(
        script, messages, f"the summary failed the fidelity check ({reason})")
    # the count stands apart from the reason, which names only the first check that failed
    misquoted = (f"; {len(quotes.failures)} quote(s) not their speaker's words"
                 if quotes.failures else "")
    logger.log_info(
        f"AI summary of {len(messages)} messages failed the fidelity check "
        f"({reason}){misquoted}; replaced by an extract of the span"
    )
    return extract, dict(fidelity, model_score=verdict.score, model_reason=reason,
                         model_line_support=lines.support,
                         model_quote_failures=len(quotes.failures))


def extract_instead(script, messages, why) -> tuple[str, dict[str, Any]]:
    """
    The summary that needs no model (``docs/design.md``, "Summary fidelity"): an extract of
    ``messages`` (:func:`ai_contrib.core.fidelity.extractive_summary`, within the summary's
    token target), checked as a model's summary is (support and quotes).

    Args:
        script (AssistantScript): the NPC's script.
        messages (list[dict]): the summarised span. why (str): why the model's summary is not
            used, for the error below and the fidelity's ``"model_reason"``.

    Returns:
        tuple: ``(extract, fidelity)``, the fidelity as :func:`guard_summary` gives it for a
        replaced summary (``"replaced": True``, ``"model_reason": why``).

    Raises:
        LLMResponseError: no extract could be built, or it fails the checks too (a span too
        short for its target).
    """
    source = source_text(messages)
    model = script.runtime.ledger.model
    target = summariser.summary_output_tokens(sum(script.runtime.token_counts(messages)))
    extract = extractive_summary(messages, target, heuristic_importance, model=model)
    replacement = score_summary(extract, source, speakers_of(messages))
    problem = replacement.reason or check_quotes(extract, speaker_lines(messages)).reason
    if not extract or problem:
        raise LLMResponseError(
            f"{why} and no extractive summary could replace it ({problem or 'no line to take'})"
        )
    return extract, dict(replacement.as_dict(), replaced=True, model_reason=why)


@defer.inlineCallbacks
def _write_summaries(script, plan):
    """The LLM step: one summary text per span of ``plan``, in order (a promoted cascade tier
    takes its summary's text unchanged), and the fidelity of each text already judged (None
    for the rest). A summary the server did not finish within ``AI_COMPACT_TIMEOUT`` is an
    extract of its span (:func:`extract_instead`): a slow server still compacts, while one
    that fails outright leaves the history as it was; so is a summary the model is not asked
    for (:func:`ai_contrib.npc.summary_writer.summary_writer`; ``docs/design.md``, "Summary
    fidelity"); so is one the talk outran (:mod:`ai_contrib.npc.hurry`: the history reached
    the hurry threshold before or while it was written). Errbacks with LLMError."""
    texts, judged = [], [None] * len(plan.spans)
    for i, span in enumerate(plan.spans):
        # only the lines one listener group heard go into a summary (docs/design.md,
        # "Summaries by audience"); the span is still replaced whole
        if span.promote:
            texts.append(cascade_core.summary_text_of(span.messages[0]))
            continue
        if not span.has_talk:
            texts.append(NO_TALK_SUMMARY)
            continue
        writer, why = summary_writer(script, _summariser_model(script))
        skipped = writer == "extract"  # hurried is no judgement of the model's summaries
        if writer == "model" and hurry.hurried(script):
            writer, why = "extract", hurry.HURRIED
        if writer == "extract":
            text, judged[i] = extract_instead(script, span.shared, why)
            if skipped:
                summary_record(_summariser_model(script)).not_asked()
            logger.log_info(f"AI summary of {len(span.shared)} messages written as an extract "
                            f"of the span ({why})")
            texts.append(text)
            continue
        if span.tier == cascade_core.TIER_LONG:
            pending = summariser.fold_summaries(
                span.shared, style=prompt_style(script), model=_summariser_model(script))
        else:
            pending = summarise(script, span.shared, prompt=span.prompt,
                                instruction=span.instruction, structured=span.structured)
        try:
            texts.append((yield hurry.unless_hurried(script, pending)))
        except (LLMTimeoutError, hurry.Hurried) as err:
            why = (hurry.HURRIED if isinstance(err, hurry.Hurried)
                   else f"the summary was not written in time ({err})")
            text, judged[i] = extract_instead(script, span.shared, why)
            # a summary that comes too late is of no more use than one that fails the check:
            # the writer learns to write the extract at once rather than keep the memory
            # server busy with summaries that are cancelled
            summary_record(_summariser_model(script)).asked(False)
            logger.log_info(f"AI summary of {len(span.shared)} messages was not written in "
                            f"time ({why}); replaced by an extract of the span")
            texts.append(text)
    return texts, judged


def apply_plan(runtime, plan, markers, **info) -> None:
    """
    Replace each span of ``plan`` (:class:`~ai_contrib.core.compaction.Plan`) in a
    :class:`~ai_contrib.memory.runtime.RuntimeHistory` with its marker (from
    :func:`~ai_contrib.core.compaction.build_markers`), archive record first; ``info`` goes
    into the records.

    Raises:
        ArchiveError: a record could not be written. ValueError (``SpliceError``): a planned
        range is no longer in the history. Either way the history is consistent (see
        :func:`apply_cascade`).
    """
    if plan.cycle is not None:
        long_marker = markers[1] if len(markers) > 1 else None
        apply_cascade(runtime, plan.cycle, long_marker, markers[0], **info)
    else:
        span = plan.spans[0]
        runtime.apply_compaction(
            markers[0], span.messages[0]["id"], span.messages[-1]["id"], strategy=plan.strategy,
            **info,
        )
    # the fact extraction that prepared it has done its work (docs/design.md, "Preserve
    # window and cuts")
    runtime.drop_extraction_traffic()


@defer.inlineCallbacks
def _summarise_plan(script, character, plan):
    """
    Write, judge and apply the summaries of ``plan`` (the benefit guard has passed): the
    model's summaries are judged by what their markers would cost first (the failure policy,
    :func:`ai_contrib.core.compaction.build_markers`), then by what they say (the fidelity
    guard, which may put an extract in their place), then applied, journaled and checkpointed.
    While it runs ``script.ndb.compacting`` is set.

    Returns:
        Deferred firing a :class:`~ai_contrib.core.compaction.CompactionResult`; its failures
        leave the history exactly as it was. Never errbacks for LLM, validation or archive
        failures.
    """
    model = script.runtime.ledger.model
    minimum = int(script.cfg("compact_min_saving_tokens"))
    script.ndb.compacting = True
    # what the splice will replace: lines outside it may leave for the archive meanwhile
    # (npc.eviction.bound_in_flight); their tokens are counted for the result's report
    script.ndb.compacting_ids = frozenset(m["id"] for span in plan.spans for m in span.messages)
    script.ndb.compacting_evicted = 0
    try:
        try:
            texts, judged = yield _write_summaries(script, plan)
        except LLMError as err:
            return f"summary failed: {err}"
        problem = build_markers(plan, texts, model=model, min_saving_tokens=minimum)[2]
        if problem:
            return problem
        fidelities = []
        try:
            for i, span in enumerate(plan.spans):
                if span.promote or not span.has_talk or judged[i]:  # judged when written
                    fidelities.append(judged[i])
                    continue
                texts[i], fidelity = guard_summary(script, span.shared, texts[i])
                summary_record(_summariser_model(script)).asked(not fidelity["replaced"])
                fidelities.append(fidelity)
        except LLMError as err:
            return f"summary failed: {err}"
        markers, tokens, problem = build_markers(
            plan, texts, model=model, min_saving_tokens=minimum, fidelities=fidelities
        )
        if problem:
            return problem
        try:
            apply_plan(script.runtime, plan, markers, trigger=plan.trigger)
        except (ArchiveError, ValueError) as err:
            unit = "cycle" if plan.cycle is not None else "compaction"
            return f"could not apply the {unit}: {err}"
        note_compaction_applied(script, character, markers[0])
        script.checkpoint()
    finally:
        script.ndb.compacting = False
        script.ndb.compacting_ids = None
        evicted, script.ndb.compacting_evicted = script.ndb.compacting_evicted or 0, 0
    preserved = sum(1 for m in script.history if not is_marker(m))
    return summarised_result(plan, markers, tokens, script.conversation.token_count(), preserved,
                             evicted_tokens=evicted)


@defer.inlineCallbacks
def _run_plan(script, character, record, force, trigger, hold_from=None):
    """Plan, guard, summarise, record: the :class:`CompactionResult` of one summarising
    compaction (``hold_from``: :func:`snapshot`)."""
    plan = compaction.plan(record, snapshot(script, force, trigger, hold_from))
    if plan.skipped:
        return plan.skip_result()
    decision = check_benefit(script, trigger, plan.benefit_tokens, force)
    if not decision["run"]:
        return benefit_skipped(decision, trigger, plan.strategy)
    result = yield _summarise_plan(script, character, plan)
    if isinstance(result, str):
        return record_failure(script, trigger, result, plan.strategy)
    if plan.cycle is not None:
        logger.log_info(
            f"AI cascade {character}: cycle {plan.cycle.cycle} "
            f"({'waterfall' if plan.cycle.waterfall else 'first summary'}): "
            f"{result.compacted_messages} messages -> short-term summary"
        )
    return record_success(script, character, result)


@defer.inlineCallbacks
def run_strategy(script, character, strategy, force=False, trigger="sleep",
                 hold_from=None) -> defer.Deferred:
    """
    Run one compaction with ``strategy`` (one of :data:`STRATEGIES`), as its record in
    :data:`ai_contrib.core.compaction.REGISTRY` says: mask first, then the plan's summaries,
    or emergency eviction for a strategy that only masks. Called by
    :func:`ai_contrib.npc.compacting.compact_conversation_history` after its shared checks
    (already compacting, disabled, circuit breaker). ``hold_from``: :func:`snapshot`.

    Returns:
        Deferred firing a :class:`~ai_contrib.core.compaction.CompactionResult` (module
        docstring); never errbacks for LLM, archive or validation failures, which leave the
        history as it was. An unknown ``strategy`` errbacks with ValueError.
    """
    record = get_strategy(strategy)
    masked = micro_compact(script, trigger=trigger, strategy=record.name) if record.masks_first \
        else None
    if record.plan is None:
        if record.evicts and trigger == "emergency":
            return evict_for_emergency(script, character, masked, trigger, record.name)
        return masked
    result = yield _run_plan(script, character, record, force, trigger, hold_from)
    if masked is not None:
        result = combine_masked(masked, result, record.name)
    return result


def apply_cascade(runtime, cycle, long_marker, short_marker, **info) -> None:
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


# -- after each turn ---------------------------------------------------------------------------


def after_turn(script, character, compact) -> defer.Deferred:
    """
    The per-turn hook (``docs/design.md``: micro-compaction after each turn, "Observation masking";
    the cascade's cycle check on each new message, "Cascade summaries"): the strategy's
    ``per_turn`` step: ``"mask"`` masks old tool outputs at once, ``"compact"`` runs
    ``compact(script, character, trigger="turn")`` (the orchestrator's compaction, whose plan
    skips unless a cycle is due; its LLM calls run in the background: the returned Deferred
    fires when it is done). Other strategies, and NPCs with compaction disabled, do nothing.

    Returns:
        Deferred firing the :class:`~ai_contrib.core.compaction.CompactionResult`, or None when
        nothing was attempted. Never errbacks.
    """
    try:
        if not script.cfg("compact_enabled"):
            return defer.succeed(None)
        record = get_strategy(resolve_strategy(script))
        if record.per_turn == "mask":
            return defer.succeed(micro_compact(script, trigger="turn", strategy=record.name))
        if record.per_turn != "compact":
            return defer.succeed(None)
        d = compact(script, character, trigger="turn")
    except Exception as err:  # a hook failure must never cost the NPC its next reply
        logger.log_warn(f"AI {character}: after-turn compaction failed: {err}")
        return defer.succeed(None)

    def _failed_hook(failure):
        logger.log_warn(
            f"AI {character}: {record.name} compaction after the turn failed: "
            f"{failure.getErrorMessage()}"
        )
        return None

    return d.addErrback(_failed_hook)
