"""
The compaction engine's pure part (``docs/design.md``, "One compaction engine"): what each
strategy is, what one compaction plans, how its summaries are judged and what it reports.

A compaction is a pure plan, one LLM step and a pure result, in the shape of LangMem's
``summarize_messages`` (messages and token counts in, a running summary and the messages to
keep out):

1. :func:`plan` reads a :class:`Snapshot` (the history, its token counts, the NPC's options)
   and returns a :class:`Plan`: the spans to summarise, or why nothing is to be done;
2. the shell (:func:`ai_contrib.npc.compaction_runner.run_strategy`) writes a summary of each span
   (:mod:`ai_contrib.llm.summariser`) and applies the markers;
3. :func:`build_markers` turns the texts into markers and judges them (the failure policy:
   not empty, cheaper than what they replace, no stall), and :func:`summarised_result` makes
   the :class:`CompactionResult`.

Everything a strategy is lives in its :class:`Strategy` record in :data:`REGISTRY`; the shell
looks strategies up by name and never branches on one.

Messages are the dicts of ``core/messages.py`` (``id``, ``seq``, ``role``, ``content``,
``metadata`` ...). Tokens are model tokens (``core/tokens.py``). Nothing here imports Evennia,
Twisted or Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypedDict

from . import cascade
from .audience import shared_part
from .cuts import is_extraction_traffic, plan_compaction
from .fidelity import message_texts
from .messages import Message
from .outcome import FAILED, SKIPPED, SUCCESS, Outcome
from .structured import plan_replace_all
from .summary import check_summary, make_marker
from .tick import reaches
from .tokens import count_message_tokens, count_tokens

#: a compaction cutting less than this share of the history's tokens is a stall
#: (``docs/design.md``, "Summary compaction": OpenCode treats too small a reduction as one)
STALL_FRACTION = 0.05
#: triggers that count towards the circuit breaker and that it pauses; ``"manual"`` is not one
AUTOMATIC_TRIGGERS = ("sleep", "emergency", "turn")  # "turn": a cascade cycle after a reply
COMPACTION_LOG_SIZE = 20  # events kept for ``aihistory``
#: the mask strategy's emergency eviction goes down to this share of the emergency threshold,
#: so the next few messages do not trigger it again
EVICTION_HEADROOM = 0.9

DEFAULT_STRATEGY = "summary"


def reduction_pct(before, after) -> float:
    """Percent of ``before`` tokens that ``after`` saves (0.0 when ``before`` is 0)."""
    return (1 - after / before) * 100 if before else 0.0


# -- results -------------------------------------------------------------------------------------


@dataclass
class CompactionResult(Outcome):
    """
    What one compaction did (``docs/design.md``, "Summary compaction", result dicts); it
    travels as this object and becomes the documented dict (:meth:`as_dict`) only where it is
    stored (the compaction log) or sent.

    ``outcome`` is ``"success"``, ``"skipped"`` or ``"failed"`` (:mod:`ai_contrib.core.outcome`:
    ``result.success``, ``result.skipped``, ``result.failed``); ``reason`` says why a skipped
    one did nothing, ``error`` why a failed one left the history as it was. ``strategy`` is None
    only in the default strategy's early skips and the shared checks, whose documented dicts
    carry no strategy name. ``fields`` holds the rest (``compacted_messages``,
    ``original_tokens``, ``new_tokens``, ``reduction_pct`` ... tokens are model tokens), read
    with :meth:`get` or the properties below.
    """

    outcome: str
    trigger: str
    strategy: str | None = None
    reason: str | None = None
    error: str | None = None
    fields: dict = field(default_factory=dict)

    @classmethod
    def skip(cls, reason, trigger, strategy=None, **fields) -> CompactionResult:
        """A compaction that declined to run, because of ``reason`` (str)."""
        return cls(SKIPPED, trigger, strategy, reason=reason, fields=fields)

    @classmethod
    def fail(cls, error, trigger, strategy=None) -> CompactionResult:
        """A compaction that failed with ``error`` (str) and left the history as it was."""
        return cls(FAILED, trigger, strategy, error=error)

    @classmethod
    def done(cls, trigger, strategy, **fields) -> CompactionResult:
        """A compaction that was applied; ``fields`` are its figures."""
        return cls(SUCCESS, trigger, strategy, fields=fields)

    @classmethod
    def from_dict(cls, data) -> CompactionResult:
        """The result a stored dict (:meth:`as_dict`, as written by any version) describes."""
        data = dict(data)
        outcome = (SKIPPED if data.pop("skipped", False) else
                   SUCCESS if data.pop("success", False) else FAILED)
        data.pop("success", None)
        return cls(outcome, data.pop("trigger", None), data.pop("strategy", None),
                   reason=data.pop("reason", None) if outcome == SKIPPED else None,
                   error=data.pop("error", None) if outcome == FAILED else None, fields=data)

    def get(self, name, default=None) -> Any:
        """The figure ``name`` of :attr:`fields` (``"masked_ids"``, ``"cycle"`` ...), else
        ``default``."""
        return self.fields.get(name, default)

    def with_fields(self, **fields) -> CompactionResult:
        """A copy with ``fields`` added to (or replacing some of) :attr:`fields`."""
        return replace(self, fields={**self.fields, **fields})

    @property
    def compacted_messages(self) -> int:
        """Messages taken out of the context (0 unless it succeeded)."""
        return self.fields.get("compacted_messages", 0)

    @property
    def masked_messages(self) -> int:
        """Tool outputs masked (0 for a strategy that does not mask)."""
        return self.fields.get("masked_messages", 0)

    @property
    def original_tokens(self) -> int | None:
        """Tokens of what it replaced (None unless it succeeded)."""
        return self.fields.get("original_tokens")

    @property
    def new_tokens(self) -> int | None:
        """Tokens of what replaced it (None unless it succeeded)."""
        return self.fields.get("new_tokens")

    @property
    def reduction_pct(self) -> float:
        """Percent of :attr:`original_tokens` saved (0.0 unless it succeeded)."""
        return self.fields.get("reduction_pct", 0.0)

    def as_dict(self) -> dict[str, Any]:
        """
        The stored dict: ``{"skipped": True, "reason", "trigger", ...}``,
        ``{"success": False, "error", "trigger", ...}`` or ``{"success": True, "trigger", ...}``,
        with ``"strategy"`` when it is set and then ``fields``.
        """
        if self.skipped:
            out = {"skipped": True, "reason": self.reason}
        elif self.failed:
            out = {"success": False, "error": self.error}
        else:
            out = {"success": True}
        out["trigger"] = self.trigger
        if self.strategy is not None:
            out["strategy"] = self.strategy
        out.update(self.fields)
        return out


def benefit_skipped(decision, trigger, strategy) -> CompactionResult:
    """The result of a compaction the benefit guard stopped (``decision``: the guard's dict,
    :func:`ai_contrib.core.summary.benefit_decision` plus ``at``, ``trigger``, ``bypassed``)."""
    return CompactionResult.skip(
        f"benefit guard: estimated saving {decision['reason']}", trigger, strategy,
        benefit=decision,
    )


def masked_result(trigger, strategy, ids, before, after) -> CompactionResult:
    """The result of masking ``ids`` (old tool outputs), ``before`` -> ``after`` tokens."""
    return CompactionResult.done(
        trigger, strategy, masked_messages=len(ids), masked_ids=ids,
        compacted_messages=len(ids), original_tokens=before, new_tokens=after,
        reduction_pct=reduction_pct(before, after),
    )


def evicted_result(trigger, strategy, masked, evicted, before, after) -> CompactionResult:
    """The result of masking ``masked`` outputs and then evicting ``evicted`` messages (the
    mask strategy at the emergency threshold, ``docs/design.md``, "Observation masking")."""
    return CompactionResult.done(
        trigger, strategy, masked_messages=masked, evicted_messages=evicted,
        compacted_messages=masked + evicted, original_tokens=before, new_tokens=after,
        reduction_pct=reduction_pct(before, after),
    )


def combine_masked(masked, summary, strategy) -> CompactionResult:
    """
    The result of a strategy that masks first, then summarises (``hybrid``), from the two
    results (:class:`CompactionResult`): the summary's when it succeeded or failed (with
    ``masked_messages``, and the context before the masking as ``context_before``), else the
    masking's (with the summary's skip reason as ``summary``), else one skip naming both
    reasons.
    """
    count = masked.masked_messages
    if not summary.skipped:
        result = replace(summary, strategy=strategy).with_fields(masked_messages=count)
        if count and summary.success:  # the context before the masking, too
            result = result.with_fields(context_before=masked.original_tokens)
        return result
    if count:
        return masked.with_fields(summary=summary.reason)
    return CompactionResult.skip(
        f"{masked.reason or masked.error}; summary: {summary.reason}",
        summary.trigger or masked.trigger, strategy,
    )


class FidelityFields(TypedDict, total=False):
    """The compaction-log fields of a fidelity verdict (:func:`fidelity_fields`)."""

    fidelity: float  #: the kept summary's score
    fidelity_replaced: bool  #: the model's summary failed and an extract replaced it
    fidelity_reason: str  #: why it failed (a replaced one only)
    model_fidelity: float | None  #: the model's summary's score (a replaced one only)


def fidelity_fields(fidelity) -> FidelityFields:
    """The compaction-log fields of a fidelity verdict, ``{}`` for None (``docs/design.md``,
    "Summary fidelity")."""
    if not fidelity:
        return {}
    fields = {"fidelity": fidelity["score"], "fidelity_replaced": bool(fidelity["replaced"])}
    if fidelity.get("replaced"):
        fields["fidelity_reason"] = fidelity.get("model_reason") or ""
        fields["model_fidelity"] = fidelity.get("model_score")
    return fields


# -- planning ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """
    What a plan reads of an NPC, taken at one moment (a summary is written while the NPC keeps
    talking, so a plan never looks at the live history again).

    Attributes:
        history (list[dict]): the runtime history, oldest first.
        counts (list[int]): tokens of each message of ``history``.
        total_tokens (int): tokens of the history (the running total).
        budget (int): the NPC's effective token budget.
        trigger (str): ``"sleep"``, ``"emergency"``, ``"turn"``, ``"manual"``.
        force (bool): ignore the threshold (an admin's ``compact/force``, the emergency check).
        options (dict): the NPC's settings by their Attribute names
            (``compact_sleep_threshold``, ``compact_emergency_threshold``,
            ``compact_preserve_window``, ``cascade_immediate_window``, ``cascade_recent_window``,
            ``cascade_pressure_window``, ``compact_preserve_max_fraction``), plus
            ``preserve_fraction``
            (``AI_COMPACT_PRESERVE_FRACTION``) and ``keep_ids`` (ids of the lines still
            awaiting an answer: no plan compacts them or anything after them,
            :func:`ai_contrib.core.cuts.hold_cut`).
    """

    history: list
    counts: list
    total_tokens: int
    budget: int
    trigger: str
    force: bool = False
    options: dict = field(default_factory=dict)

    @property
    def usage(self) -> float:
        """Share of the budget in use (0..)."""
        return self.total_tokens / max(1, self.budget)

    def tokens_of(self, messages) -> int:
        """Tokens of ``messages`` (a sub-list of ``history``)."""
        by_id = dict(zip((m["id"] for m in self.history), self.counts))
        return sum(by_id[m["id"]] for m in messages)

    def threshold(self) -> float:
        """The threshold this compaction is held to: emergency when forced, else sleep."""
        name = "compact_emergency_threshold" if self.force else "compact_sleep_threshold"
        return float(self.options[name])

    def over_threshold(self) -> bool:
        """Forced, or at the threshold (:func:`ai_contrib.core.tick.reaches`)."""
        return self.force or reaches(self.usage, self.threshold())


#: the summary of a span in which no one spoke (tool calls and their results only): written
#: without a model, as there is nothing to summarise and nothing to check it against
NO_TALK_SUMMARY = "No one spoke here: only tool calls and their results, kept in the archive."


@dataclass(frozen=True)
class Span:
    """
    One summary a plan asks for: ``messages`` (contiguous, oldest first) and their ``tokens``.
    ``tier`` is None for a one-marker compaction, else the cascade tier
    (:data:`~ai_contrib.core.cascade.TIER_SHORT` or ``TIER_LONG``). A long-term span either
    folds its summaries with the LLM or, with ``promote``, takes the first one's text
    unchanged. ``prompt``/``instruction`` are the chat system prompt and base-prompt instruction
    line (None: the NPC's ``compact_prompt`` or the default); ``structured`` normalises the
    section headings (``docs/design.md``, "Structured summaries").

    The whole of ``messages`` is replaced, but the summary is written from :attr:`shared`
    only: the lines one listener group heard (``docs/design.md``, "Summaries by audience").
    """

    messages: list
    tokens: int
    tier: str | None = None
    promote: bool = False
    prompt: str | None = None
    instruction: str | None = None
    structured: bool = True

    @cached_property
    def _parts(self):
        # fact extraction's tool traffic is no one's talk: its facts are in the journal already
        # (journaled with their own audience), and a compaction that failed after it can leave
        # it among older lines, where its audience would otherwise choose the listener group
        return shared_part([msg for msg in self.messages if not is_extraction_traffic(msg)])

    @property
    def shared(self) -> list[Message]:
        """The messages the summary is written from
        (:func:`ai_contrib.core.audience.shared_part`), in order; fact extraction's tool
        traffic is never among them."""
        return self._parts[0]

    @property
    def has_talk(self) -> bool:
        """True when :attr:`shared` holds a line someone said or an earlier summary's line
        (:func:`ai_contrib.core.fidelity.message_texts`); False for a span of tool traffic
        alone, which gets :data:`NO_TALK_SUMMARY` and no model call."""
        return next(message_texts(self.shared), None) is not None

    @property
    def left_out(self) -> list[Message]:
        """The messages of the span left out of its summary (heard by a narrower group; they
        stay in the archive), in order."""
        return self._parts[1]


@dataclass(frozen=True)
class Plan:
    """
    What one compaction will do. ``reason`` is None for a plan to act on, else why nothing is
    to be done (then ``fields`` go into the skipped result, e.g. ``token_usage``). ``spans``
    are summarised in order; ``cycle`` is the cascade cycle
    (:class:`~ai_contrib.core.cascade.CascadeCycle`) when the spans are its two tiers.
    ``named`` is False for skips whose result carries no strategy name.
    """

    strategy: str
    trigger: str
    spans: tuple = ()
    cycle: object = None
    total_tokens: int = 0
    reason: str | None = None
    named: bool = True
    fields: dict = field(default_factory=dict)

    @property
    def skipped(self) -> bool:
        return self.reason is not None

    @property
    def benefit_tokens(self) -> int:
        """Tokens the benefit guard weighs: those of the first span (the new summary's
        source; a cascade's fold replaces summaries, which the guard does not count)."""
        return self.spans[0].tokens

    @property
    def replaced_tokens(self) -> int:
        """Tokens of every span a marker replaces (a promoted long tier replaces the previous
        short-term marker, which counts too)."""
        return sum(span.tokens for span in self.spans)

    def skip_result(self) -> CompactionResult:
        return CompactionResult.skip(
            self.reason, self.trigger, self.strategy if self.named else None, **self.fields
        )


def _skip(snapshot, strategy, reason, named=True, **fields):
    return Plan(strategy, snapshot.trigger, reason=reason, named=named, fields=fields)


def _below(snapshot, strategy, named=True):
    return _skip(
        snapshot, strategy,
        f"below threshold ({snapshot.usage:.1%} < {snapshot.threshold():.0%})", named,
        token_usage=snapshot.usage,
    )


def plan_summary(snapshot, strategy="summary") -> Plan:
    """
    The ``summary`` plan (``docs/design.md``, "Summary compaction", "Preserve window and
    cuts"): at the threshold (or forced), the messages before the preserve window become one
    marker. Its early skips carry no strategy name: they are the documented skipped dicts of
    ``compact_conversation_history``.
    """
    if not snapshot.history:
        return _skip(snapshot, strategy, "no history", named=False)
    if not snapshot.over_threshold():
        return _below(snapshot, strategy, named=False)
    options = snapshot.options
    cut = plan_compaction(
        snapshot.history, snapshot.counts,
        max_context_tokens=max(1, snapshot.budget),
        preserve_window=int(options["compact_preserve_window"]),
        preserve_fraction=float(options["preserve_fraction"]),
        keep_ids=options.get("keep_ids") or (),
        max_preserve_fraction=options.get("compact_preserve_max_fraction"),
    )
    if cut.skipped:
        return _skip(snapshot, strategy, cut.reason, named=False)
    return Plan(strategy, snapshot.trigger, (Span(cut.to_compact, cut.compact_tokens),),
                total_tokens=snapshot.total_tokens)


def plan_whole(snapshot, strategy="replace_all") -> Plan:
    """
    The ``replace_all`` plan (``docs/design.md``, "Structured summaries"): at the threshold the
    whole history becomes one structured summary; speech still awaiting an answer
    (``options["keep_ids"]``) stays verbatim, with everything after it, so the reply can see it.
    """
    history = snapshot.history
    if not history:
        return _skip(snapshot, strategy, "no history")
    if not snapshot.over_threshold():
        return _below(snapshot, strategy)
    to_compact, _kept, reason = plan_replace_all(
        list(history), keep_ids=snapshot.options.get("keep_ids") or ())
    if reason:
        return _skip(snapshot, strategy, reason)
    return Plan(strategy, snapshot.trigger,
                (Span(to_compact, snapshot.tokens_of(to_compact)),),
                total_tokens=snapshot.total_tokens)


def plan_cascade(snapshot, strategy="cascade") -> Plan:
    """
    The ``cascade`` plan (``docs/design.md``, "Cascade summaries"): a cycle when one is due, or
    when token pressure (or ``force``) asks for one early; then the immediate window shrinks so
    that it and the summaries hold about ``cascade_pressure_window`` of the budget. The spans
    are the short-term summary's source, then the long-term fold (when there is one).
    """
    history = snapshot.history
    if not history:
        return _skip(snapshot, strategy, "no history")
    options = snapshot.options
    pressure = snapshot.force
    if snapshot.trigger != "turn" and not pressure:
        pressure = snapshot.over_threshold()
    window = int(options["cascade_immediate_window"])
    recent = int(options["cascade_recent_window"])
    if pressure and not cascade.cascade_status(history, window, recent)["due"]:
        share = float(options["cascade_pressure_window"]) * snapshot.budget
        window = cascade.fitted_window(history, snapshot.counts, window, int(share))
    cycle = cascade.plan_cycle(history, window, recent, force=pressure,
                               keep_ids=options.get("keep_ids") or ())
    if cycle.skipped:
        return _skip(snapshot, strategy, cycle.reason)
    spans = [Span(cycle.to_summarise, snapshot.tokens_of(cycle.to_summarise), cascade.TIER_SHORT,
                  prompt=cascade.SHORT_TERM_PROMPT, instruction=cascade.SHORT_TERM_INSTRUCTION,
                  structured=False)]
    if cycle.fold:
        spans.append(Span(cycle.fold, snapshot.tokens_of(cycle.fold), cascade.TIER_LONG,
                          promote=cycle.promote, structured=False))
    return Plan(strategy, snapshot.trigger, tuple(spans), cycle=cycle,
                total_tokens=snapshot.total_tokens)


# -- judging -------------------------------------------------------------------------------------


def _with_fidelity(fidelity):
    return {"fidelity": fidelity} if fidelity else {}


def build_markers(plan, texts, *, model=None, min_saving_tokens=1, fidelities=()) -> tuple:
    """
    The markers of ``plan`` for ``texts`` (one cleaned summary per span, in order), judged by
    what the stored markers cost in context, not by the bare texts (``docs/design.md``,
    "Summary compaction" step 3; "Cascade summaries").

    A one-marker plan must pass :func:`~ai_contrib.core.summary.check_summary` and cut at least
    :data:`STALL_FRACTION` of ``plan.total_tokens``; a cascade cycle must pass
    :func:`~ai_contrib.core.cascade.check_cycle`.

    Args:
        plan (Plan): a plan to act on.
        texts (list[str]): the summaries, one per span.
        model (str, optional): the tokenizer's model name.
        min_saving_tokens (int): ``compact_min_saving_tokens``.
        fidelities (list[dict | None]): the fidelity verdict of each text, kept in its marker's
            metadata (``docs/design.md``, "Summary fidelity").

    Returns:
        tuple: ``(markers, marker_tokens, problem)``: one marker dict per span (shape in
        ``core/summary.py``), the tokens of each, and None or why the summaries are refused.
    """
    fidelities = list(fidelities) + [None] * (len(texts) - len(fidelities))
    markers = []
    for span, text, fidelity in zip(plan.spans, texts, fidelities):
        if span.tier is None:
            marker = make_marker(
                text, span.messages, original_token_count=span.tokens,
                summary_token_count=count_tokens(text, model), trigger=plan.trigger,
                strategy=plan.strategy, source=span.shared, **_with_fidelity(fidelity),
            )
        else:
            marker = cascade.make_tier_marker(
                span.tier, text, span.messages, span.tokens, count_tokens(text, model),
                plan.cycle.cycle, trigger=plan.trigger, source=span.shared,
                **_with_fidelity(fidelity),
            )
        markers.append(marker)
    tokens = [count_message_tokens(marker, model) for marker in markers]
    first = plan.spans[0]
    if plan.cycle is not None:
        problem = cascade.check_cycle(
            texts[0], tokens[0], first.tokens, min_saving_tokens,
            long_text=texts[1] if len(texts) > 1 else None,
            long_marker_tokens=tokens[1] if len(tokens) > 1 else 0,
            fold_tokens=plan.spans[1].tokens if len(plan.spans) > 1 else 0,
        )
        return markers, tokens, problem
    problem = check_summary(texts[0], tokens[0], first.tokens, min_saving_tokens)
    saving = first.tokens - tokens[0]
    if problem is None and saving < STALL_FRACTION * plan.total_tokens:
        problem = (
            f"stall: the summary would cut only {saving} of {plan.total_tokens} tokens "
            f"(< {STALL_FRACTION:.0%})"
        )
    return markers, tokens, problem


def context_change(result) -> str:
    """
    The context part of an admin's or the log's line for a compaction ``result`` (a
    :class:`CompactionResult`, or its stored dict):
    ``"; context 286 -> 410 tokens"``, and when lines were said while it was written, how many
    tokens they brought and how many of the oldest lines outside the summarised range left for
    the archive meanwhile (``"; context 286 -> 410 tokens (+1371 said while it was written,
    1120 moved to the archive)"``), so a context that grew across a compaction does not read as
    grown by it. Empty when ``result`` has no ``context_after``.

    Returns:
        str
    """
    if result.get("context_after") is None:
        return ""
    line = f"; context {result.get('context_before')} -> {result.get('context_after')} tokens"
    said, evicted = result.get("context_said", 0), result.get("context_evicted", 0)
    if said or evicted:
        line += f" (+{said} said while it was written" + (
            f", {evicted} moved to the archive)" if evicted else ")")
    return line


def summarised_result(plan, markers, marker_tokens, context_after, preserved,
                      evicted_tokens=0) -> CompactionResult:
    """
    The result of an applied summarising compaction (``docs/design.md``, "Summary compaction":
    result dicts).

    ``original_tokens`` -> ``new_tokens`` (and ``reduction_pct``) are the compaction's own
    effect: the tokens of what it replaced and of what replaced it. The context before and after
    are reported apart (``context_before``, ``context_after``): players may speak while the
    summary is written, so the context can grow across a compaction that shrank what it touched.

    Args:
        plan (Plan): the plan applied. markers (list[dict]): its markers, one per span.
        marker_tokens (list[int]): their tokens.
        context_after (int): the history's tokens now. preserved (int): raw messages kept.
        evicted_tokens (int): tokens of the lines outside the summarised range that left for
            the archive while it was written (``docs/design.md``, "Bounded while a compaction
            is written"); with ``context_after`` they give ``context_said``, the tokens said
            meanwhile, and both are in the result when not 0.

    Returns:
        CompactionResult: a success; a cascade cycle adds ``cycle``, ``waterfall``,
        ``short_term_marker_id`` and ``long_term_marker_id``.
    """
    first = markers[0]
    replaced = plan.replaced_tokens
    new_tokens = sum(marker_tokens)
    fields = {
        "compacted_messages": len(plan.spans[0].messages),
        "preserved_messages": preserved,
        "original_tokens": replaced,
        "new_tokens": new_tokens,
        "reduction_pct": reduction_pct(replaced, new_tokens),
        "context_before": plan.total_tokens,
        "context_after": context_after,
        "summary_tokens": new_tokens,
        "marker_id": first["id"],
        **fidelity_fields((first.get("metadata") or {}).get("fidelity")),
    }
    # what the context would be had nobody spoken meanwhile, against what it is
    said = context_after + evicted_tokens - (plan.total_tokens - replaced + new_tokens)
    if said > 0:
        fields["context_said"] = said
    if evicted_tokens:
        fields["context_evicted"] = evicted_tokens
    if plan.cycle is not None:
        fields.update(
            cycle=plan.cycle.cycle,
            waterfall=plan.cycle.waterfall,
            short_term_marker_id=first["id"],
            long_term_marker_id=markers[1]["id"] if len(markers) > 1 else None,
        )
    return CompactionResult.done(plan.trigger, plan.strategy, **fields)


# -- bookkeeping ---------------------------------------------------------------------------------


def appended_log(log, event, size=COMPACTION_LOG_SIZE) -> list[dict[str, Any]]:
    """The compaction log (list of event dicts, oldest first) with ``event`` added, at most
    ``size`` long."""
    return (list(log or []) + [event])[-size:]


def breaker_tripped(failures, limit) -> bool:
    """True when ``failures`` consecutive automatic failures reach ``limit``
    (``AI_COMPACT_FAILURE_LIMIT``): automatic compaction then pauses."""
    return (failures or 0) >= int(limit)


def failure_event(at, trigger, error, strategy) -> dict[str, Any]:
    """The compaction-log event of a failed compaction (``at``: ISO-8601 UTC): a
    :class:`CompactionResult`'s stored dict (:meth:`CompactionResult.as_dict`) with ``at``."""
    return {"at": at, "trigger": trigger, "success": False, "error": error, "strategy": strategy}


def recovered_event(record) -> dict[str, Any]:
    """The compaction-log event of a compaction replayed from archive ``record`` (a
    ``compaction`` record with its ``marker``) after a crash: a :class:`CompactionResult`'s
    stored dict with ``at`` and ``recovered``."""
    meta = record["marker"].get("metadata") or {}
    return {
        "at": meta.get("compacted_at"), "trigger": record.get("trigger") or "recovered",
        "success": True, "recovered": True,
        "compacted_messages": meta.get("compacted_count"),
        "original_tokens": meta.get("original_token_count"),
        "new_tokens": meta.get("summary_token_count"),
        "reduction_pct": 0.0,
    }


class SynthesisFields(TypedDict):
    """A summary marker's journal entry (:func:`synthesis_entry`): keyword arguments of
    :func:`ai_contrib.memory.journal.add_entry`, ``text`` its content."""

    text: str  #: ``[CONTEXT SYNTHESIS]`` and the summary, or a short-term summary's text
    importance: int  #: 7, or 6 for a cascade short-term summary
    source_type: str  #: ``"compaction"``
    tags: list[str]
    marker_id: str  #: the marker's id: recording the same marker twice adds nothing
    archive_range: list[int | None]  #: the marker's first and last seq
    memory_range_start: Any  #: a short-term summary's range of long-term memory, else None
    memory_range_end: Any
    audience: list[str] | None  #: the marker's: a synthesis repeats what it replaced
    visibility: str  #: ``"public"`` without an audience, else ``"private"``
    left_out_seqs: list[int] | None  #: the lines of its range it was not written from


def synthesis_entry(marker) -> SynthesisFields | None:
    """
    The journal entry a summary marker becomes (``docs/design.md``, "Journal and Mem0",
    "Cascade summaries"), as keyword arguments of :func:`ai_contrib.memory.journal.add_entry`
    (``text`` first), or None for a cascade long-term summary, which folds short-term summaries
    already journaled.
    """
    meta = marker.get("metadata") or {}
    tier = meta.get("tier")
    if tier == cascade.TIER_LONG:
        return None
    short = tier == cascade.TIER_SHORT
    return {
        "text": cascade.summary_text_of(marker) if short
        else "[CONTEXT SYNTHESIS]\n" + marker["content"].split("\n", 1)[-1],
        "importance": 6 if short else 7,
        "source_type": "compaction",
        "tags": ["compaction", "short_term"] if short else ["compaction", "synthesis"],
        "marker_id": marker["id"],
        "archive_range": [meta.get("first_seq"), meta.get("last_seq")],
        "memory_range_start": meta.get("memory_range_start") if short else None,
        "memory_range_end": meta.get("memory_range_end") if short else None,
        # a synthesis repeats what its summary replaced (docs/design.md, "Privacy by audience")
        "audience": meta.get("audience"),
        "visibility": "public" if meta.get("audience") is None else "private",
        # the lines of its range it was not written from (forgetting a player who said only
        # those keeps it: docs/design.md, "Forgetting a player")
        "left_out_seqs": meta.get("left_out_seqs"),
    }


def counts_once(marker) -> bool:
    """True for a marker whose compaction is counted: a cascade cycle writes two records
    (long-term fold, then short-term summary) and counts once."""
    return (marker.get("metadata") or {}).get("tier") != cascade.TIER_LONG


def eviction_target(threshold, budget) -> int:
    """Tokens the mask strategy's emergency eviction leaves (:data:`EVICTION_HEADROOM` of the
    emergency ``threshold`` share of ``budget``)."""
    return int(threshold * max(1, budget) * EVICTION_HEADROOM)


# -- the strategies ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Strategy:
    """
    Everything one compaction strategy is.

    Attributes:
        name (str): what ``compact_strategy`` names.
        summarises (bool): writes summaries (so pre-compaction fact extraction has something
            to protect, ``docs/design.md``, "Pre-compaction fact extraction").
        per_turn (str | None): the step after each turn in which the NPC replied: ``"mask"``
            (micro-compaction), ``"compact"`` (a compaction with trigger ``"turn"``, which the
            plan skips unless due) or None.
        masks_first (bool): a triggered compaction masks old tool outputs first.
        plan (callable | None): ``plan(snapshot, strategy) -> Plan``; None for masking only.
        evicts (bool): at the emergency threshold the oldest messages leave the context for
            the archive (MemGPT's queue eviction), since masking alone cannot bound a
            conversation.
        description (str): one line for the ``compact`` help.
        status (str): ``aihistory``'s detail line, a format string over the values
            ``ai_contrib.commands.describe_strategy`` gathers.
        done (str): an admin's line for a success, a format string over the result's fields
            plus ``npc``, ``tokens``, ``moved``, ``what`` (None: the caller's summary wording).
    """

    name: str
    summarises: bool
    per_turn: str | None
    masks_first: bool
    plan: object
    evicts: bool
    description: str
    status: str
    done: str | None


_MASK_STATUS = ("mask window {mask_window} turns, outputs >= {mask_min_tokens} tokens, "
                "{masked} masked in context")
_MASK_DONE = ("Masked {masked_messages} old tool output(s) of {npc}{moved}: {tokens}; the "
              "originals stay in the archive (aihistory <npc>/raw).")

#: the strategies, the default first (``docs/design.md``: "Summary compaction", "Observation
#: masking", "Cascade summaries", "Structured summaries")
REGISTRY = {
    record.name: record
    for record in (
        Strategy(
            "summary", True, None, False, plan_summary, False,
            "the messages before the preserve window -> one summary",
            "preserve window {compact_preserve_window} messages", None,
        ),
        Strategy(
            "mask", False, "mask", True, None, True,
            "old tool outputs -> [TOOL OUTPUT ARCHIVED - seq N] (no LLM call)",
            _MASK_STATUS, _MASK_DONE,
        ),
        Strategy(
            "hybrid", True, "mask", True, plan_summary, False,
            "mask, then summary if still over the threshold",
            _MASK_STATUS + "; summary at the thresholds",
            "Compacted {npc} (hybrid): masked {masked_messages} old tool output(s), then "
            "{compacted_messages} messages -> summary, {tokens}, {preserved_messages} kept.",
        ),
        Strategy(
            "cascade", True, "compact", False, plan_cascade, False,
            "one cycle: short-term summary of what left the immediate window, the previous "
            "short-term summary folded into the long-term one",
            "immediate {cascade_immediate_window}, recent {cascade_recent_window} messages; "
            "{raw} raw in context, {cycles} cycle(s) so far, next at {due_at} raw",
            "Cascade cycle {cycle} for {npc}: {what}{compacted_messages} messages -> short-term "
            "summary, {tokens}, {preserved_messages} kept verbatim.",
        ),
        Strategy(
            "replace_all", True, None, False, plan_whole, False,
            "the whole history -> one structured summary",
            "whole history -> one structured summary at the thresholds",
            "Replaced {npc}'s whole history ({compacted_messages} messages) with one "
            "structured summary: {tokens}.",
        ),
    )
}

STRATEGIES = tuple(REGISTRY)


def get_strategy(name) -> Strategy:
    """
    The :class:`Strategy` called ``name``.

    Raises:
        ValueError: ``name`` is not one of :data:`STRATEGIES`.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown compaction strategy {name!r}; choose one of {', '.join(STRATEGIES)}"
        ) from None


def plan(record, snapshot) -> Plan:
    """``record``'s plan for ``snapshot`` (:class:`Plan`). Raises ValueError for a strategy
    that does not summarise (it has no plan)."""
    if record.plan is None:
        raise ValueError(f"strategy {record.name!r} does not summarise")
    return record.plan(snapshot, record.name)


__all__ = [
    "AUTOMATIC_TRIGGERS", "COMPACTION_LOG_SIZE", "CompactionResult", "DEFAULT_STRATEGY", "Plan",
    "REGISTRY", "STALL_FRACTION", "STRATEGIES", "Snapshot", "Span", "Strategy", "build_markers",
    "context_change", "get_strategy", "plan", "plan_cascade", "plan_summary",
    "plan_whole", "summarised_result",
]
