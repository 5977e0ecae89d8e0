"""
Cascading temporal summaries: three tiers of memory with a waterfall between them
(``docs/design.md``, "Cascade summaries").

1. **Immediate window** (``immediate_window`` messages, default 64): the newest messages,
   verbatim.
2. **Short-term summary**: a 2-3 sentence summary of the messages that aged out of the
   immediate window since the previous cycle (``recent_window`` of them, default 64).
3. **Long-term summary**: everything older, progressively compacted: at each cycle the previous
   short-term summary waterfalls into it.

A *cycle* runs when enough raw (non-summary) messages are in the runtime history: first at
``immediate_window + recent_window + 1`` (129) raw messages, when there is no short-term summary
yet; then whenever ``immediate_window + recent_window`` (128) raw messages sit behind the
short-term summary, which is every ``recent_window`` (64) new messages: 193, 257, 321 ... messages
in all. One cycle:

1. long-term <- fold(long-term, short-term) (the waterfall; with no long-term summary yet the
   short-term one is promoted unchanged, which needs no LLM call);
2. short-term <- summarise(raw messages outside the immediate window);
3. the immediate window stays as it is.

In the runtime history a cycle is two id-range splices (:func:`cycle_replacements`): the leading
summary markers become one long-term marker, and the messages leaving the immediate window become
one short-term marker, so the history reads ``[long-term] [short-term] [immediate window ...]``
and replays from the archive like any other compaction. Markers carry ``metadata["tier"]``
(:data:`TIER_LONG` or :data:`TIER_SHORT`) and ``metadata["cycle"]``; a short-term marker also
carries ``memory_range_start``/``memory_range_end``, the archive ``seq`` range it covers, which
the memory layer uses for its "RELATED PAST EXPERIENCES" (``docs/design.md``, "Cascade
summaries").
Summary markers made by other strategies (switching strategy on a live NPC) count as older
history: they stay in place, and fold into the long-term summary at the next waterfall.

Message shape: :mod:`ai_contrib.core.messages`; token counts come from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from .cuts import hold_cut, is_extraction_traffic
from .messages import SUMMARY_PREFIX, Message, is_marker
from .splice import splice
from .summary import check_summary, make_marker

__all__ = [
    "DEFAULT_IMMEDIATE_WINDOW",
    "DEFAULT_RECENT_WINDOW",
    "LONG_TERM_INSTRUCTION",
    "LONG_TERM_PROMPT",
    "SHORT_TERM_INSTRUCTION",
    "SHORT_TERM_PROMPT",
    "TIER_LONG",
    "TIER_SHORT",
    "CascadeCycle",
    "apply_cycle",
    "build_fold_request",
    "cascade_due",
    "cascade_status",
    "check_cycle",
    "cycle_replacements",
    "due_at",
    "fitted_window",
    "make_tier_marker",
    "plan_cycle",
    "raw_count",
    "summary_text_of",
    "tier_of",
]

DEFAULT_IMMEDIATE_WINDOW = 64  # messages (docs/design.md, "Cascade summaries")
DEFAULT_RECENT_WINDOW = 64  # messages (docs/design.md, "Cascade summaries")
TIER_SHORT = "short_term"
TIER_LONG = "long_term"
#: The heading each tier's marker text starts with (docs/design.md, "Cascade summaries").
TIER_HEADINGS = {
    TIER_LONG: "Older memories (summary):",
    TIER_SHORT: "Recent past (summary):",
}

SHORT_TERM_PROMPT = """\
You keep the memory of a character in a text-based multiplayer game (a MUD). Summarise the \
conversation log you are given in 2-3 sentences, in the first person, as the character's own \
memory of it ("Mara told me her brother is missing; I promised to look for him."). Attribute \
everything to whoever said or did it; keep names, places, promises and numbers; never write a \
line as a player's words. Write only the summary."""

LONG_TERM_PROMPT = """\
You keep the long-term memory of a character in a text-based multiplayer game (a MUD). You are \
given the character's older memories and a summary of what happened since. Merge them into one \
summary of at most 5 sentences, in the first person, oldest events first: keep what still \
matters (people, promises and whether they were kept, debts, names, places), compress routine \
detail, and never write a line as a player's words. Write only the summary."""

#: The base-model prompt ("Summarize these memories in 2-3 sentences:" ... "SUMMARY:"; see
#: docs/design.md, "Structured summaries", "Models without a chat template").
SHORT_TERM_INSTRUCTION = "Summarize these memories in 2-3 sentences:"
LONG_TERM_INSTRUCTION = (
    "Combine these summaries of my memories into one summary of at most 5 sentences, "
    "oldest first:"
)


def tier_of(msg) -> str | None:
    """The cascade tier of a summary marker (:data:`TIER_SHORT`, :data:`TIER_LONG`), else None."""
    if not is_marker(msg):
        return None
    return (msg.get("metadata") or {}).get("tier")


def _talk(msg) -> bool:
    """True for a raw message of the conversation: not a summary marker, and not fact
    extraction's tool traffic (talk with the journal, which never fills a window in place of
    what people said; :func:`ai_contrib.core.cuts.is_extraction_traffic`)."""
    return not is_marker(msg) and not is_extraction_traffic(msg)


def raw_count(history) -> int:
    """Number of raw messages of the conversation in ``history`` (summary markers and fact
    extraction's tool traffic not counted)."""
    return sum(1 for msg in history if _talk(msg))


def due_at(has_short_term, immediate_window, recent_window) -> int:
    """Raw messages at which the next cycle is due: ``I + R + 1`` before the first cycle (no
    short-term summary yet), ``I + R`` after it."""
    return immediate_window + recent_window + (0 if has_short_term else 1)


def cascade_due(raw_messages, has_short_term, immediate_window=DEFAULT_IMMEDIATE_WINDOW,
                recent_window=DEFAULT_RECENT_WINDOW) -> bool:
    """True when a cycle is due (see the module docstring for the trigger points)."""
    return raw_messages >= due_at(has_short_term, immediate_window, recent_window)


def fitted_window(history, token_counts, immediate_window, target_tokens) -> int:
    """
    The immediate window for a cycle forced by token pressure: ``immediate_window`` raw
    messages, or fewer, so that the window and the summary markers in ``history`` (which stay
    in context beside it) hold at most ``target_tokens``.

    The windows are sized in messages for a large context; under a small token budget a
    64-message window can hold most of the budget, and a forced cycle would then summarise a
    handful of messages and be due again a message later (one LLM call per message). Fitting
    what the cycle leaves to a share of the budget leaves room for many messages before the
    next one.

    Args:
        history (list[dict]): the runtime history, oldest first.
        token_counts (list[int]): tokens of each message of ``history`` (same order).
        immediate_window (int): the configured window, in raw messages (>= 0).
        target_tokens (int): tokens the window and the summaries may hold together.

    Returns:
        int: raw messages to keep, ``0 <= n <= immediate_window``.

    Raises:
        ValueError: if ``token_counts`` is not as long as ``history``.
    """
    if len(token_counts) != len(history):
        raise ValueError("token_counts must give one count per message")
    used = sum(n for msg, n in zip(history, token_counts) if is_marker(msg))
    kept = 0
    for msg, tokens in zip(reversed(history), reversed(token_counts)):
        if kept >= immediate_window:
            break
        if is_marker(msg):
            continue
        used += tokens
        if used > target_tokens:
            break
        kept += _talk(msg)
    return kept


class CascadeStatus(TypedDict):
    """Where a history stands in the cascade (:func:`cascade_status`)."""

    raw: int  #: raw messages (neither summary)
    short_term: bool  #: a short-term summary is in the history
    long_term: bool  #: a long-term summary is in the history
    cycles: int  #: the highest cycle number seen, 0 before the first
    due_at: int  #: raw messages at which the next cycle runs
    due: bool  #: ``raw >= due_at``


def cascade_status(history, immediate_window=DEFAULT_IMMEDIATE_WINDOW,
                   recent_window=DEFAULT_RECENT_WINDOW) -> CascadeStatus:
    """Where ``history`` stands in the cascade, for display."""
    raw = raw_count(history)
    tiers = [tier_of(msg) for msg in history]
    has_short = TIER_SHORT in tiers
    cycles = max(
        [(msg.get("metadata") or {}).get("cycle") or 0 for msg in history if tier_of(msg)],
        default=0,
    )
    threshold = due_at(has_short, immediate_window, recent_window)
    return {
        "raw": raw,
        "short_term": has_short,
        "long_term": TIER_LONG in tiers,
        "cycles": cycles,
        "due_at": threshold,
        "due": raw >= threshold,
    }


@dataclass(frozen=True)
class CascadeCycle:
    """
    One planned cycle. ``fold`` is the leading run of summary markers that waterfalls into the
    new long-term summary (empty when there is no short-term summary to fold yet);
    ``to_summarise`` the messages that become the new short-term summary (contiguous, right
    after the leading markers); ``keep`` the immediate window. ``cycle`` numbers cycles from 1.
    ``reason`` is None for a cycle to run, else why not (then the lists are empty).
    """

    fold: list = field(repr=False)
    to_summarise: list = field(repr=False)
    keep: list = field(repr=False)
    cycle: int = 1
    reason: str | None = None

    @property
    def skipped(self) -> bool:
        """True when no cycle should run (see ``reason``)."""
        return self.reason is not None

    @property
    def waterfall(self) -> bool:
        """True when a short-term summary folds into the long-term one in this cycle."""
        return bool(self.fold)

    @property
    def promote(self) -> bool:
        """True when the fold is a lone short-term summary: it becomes the long-term summary
        as it is, with no LLM call."""
        return len(self.fold) == 1 and tier_of(self.fold[0]) == TIER_SHORT


def plan_cycle(history, immediate_window=DEFAULT_IMMEDIATE_WINDOW,
               recent_window=DEFAULT_RECENT_WINDOW, force=False, keep_ids=()) -> CascadeCycle:
    """
    Plan the next cascade cycle over ``history`` (a snapshot; the plan holds the same dicts).

    Args:
        history (list[dict]): the runtime history, oldest first.
        immediate_window (int): raw messages kept verbatim (>= 0).
        recent_window (int): raw messages per short-term summary (>= 1).
        force (bool): run a cycle even when it is not due (manual compaction, token pressure),
            as long as something lies outside the immediate window.
        keep_ids (iterable[str]): ids of messages that must stay verbatim, with everything
            after them: the lines still awaiting an answer
            (:func:`ai_contrib.core.cuts.hold_cut`).

    Returns:
        CascadeCycle: skipped with a reason when not due (``"not due: ..."``), or when nothing
        lies outside the immediate window once the cut is moved to keep tool calls with their
        results (``"within immediate window"``).

    Raises:
        ValueError: for a negative window or a recent window below 1.
    """
    if immediate_window < 0 or recent_window < 1:
        raise ValueError("need immediate_window >= 0 and recent_window >= 1")
    status = cascade_status(history, immediate_window, recent_window)

    def skip(reason):
        return CascadeCycle([], [], list(history), status["cycles"] + 1, reason)

    if not history:
        return skip("no history")
    if not force and not status["due"]:
        return skip(
            f"not due: {status['raw']} raw messages, next cycle at {status['due_at']}"
        )
    lead = 0
    while lead < len(history) and is_marker(history[lead]):
        lead += 1
    start, seen = len(history), 0
    while start > lead and seen < immediate_window:
        start -= 1
        seen += _talk(history[start])
    cut = hold_cut(history, start, keep_ids)
    if cut <= lead or raw_count(history[lead:cut]) == 0:
        return skip("within immediate window")
    leading = list(history[:lead])
    fold = leading if any(tier_of(m) == TIER_SHORT for m in leading) else []
    return CascadeCycle(fold, list(history[lead:cut]), list(history[cut:]), status["cycles"] + 1)


def summary_text_of(marker) -> str:
    """A marker's summary text: without the ``[CONTEXT SUMMARY]`` line and the tier heading."""
    text = marker.get("content") or ""
    if text.startswith(SUMMARY_PREFIX):
        text = text[len(SUMMARY_PREFIX):]
    text = text.strip()
    for heading in TIER_HEADINGS.values():
        if text.startswith(heading):
            return text[len(heading):].strip()
    return text


def make_tier_marker(tier, text, replaced, original_tokens, summary_tokens, cycle, **meta
                     ) -> Message:
    """
    Build a cascade marker: a ``[CONTEXT SUMMARY]`` system message whose text starts with the
    tier's heading (:data:`TIER_HEADINGS`).

    Args:
        tier (str): :data:`TIER_SHORT` or :data:`TIER_LONG`.
        text (str): the summary (cleaned).
        replaced (list[dict]): the messages (or markers) it replaces, oldest first.
        original_tokens (int): tokens of ``replaced``.
        summary_tokens (int): tokens of ``text``.
        cycle (int): the cycle number.
        **meta: more metadata (``trigger``, ...).

    Returns:
        Message: the marker (see :func:`ai_contrib.core.summary.make_marker`), with metadata
        ``tier``, ``cycle``, ``strategy="cascade"`` and, for a short-term marker,
        ``memory_range_start``/``memory_range_end`` (archive seqs; None when unknown).

    Raises:
        ValueError: for an unknown tier or an empty ``replaced``.
    """
    if tier not in TIER_HEADINGS:
        raise ValueError(f"unknown tier {tier!r}")
    marker = make_marker(
        f"{TIER_HEADINGS[tier]}\n{text.strip()}",
        replaced,
        original_token_count=original_tokens,
        summary_token_count=summary_tokens,
        strategy="cascade",
        tier=tier,
        cycle=cycle,
        **meta,
    )
    if tier == TIER_SHORT:
        meta_out = marker["metadata"]
        meta_out["memory_range_start"] = meta_out.get("first_seq")
        meta_out["memory_range_end"] = meta_out.get("last_seq")
    return marker


def _fold_texts(fold):
    older = [summary_text_of(m) for m in fold if tier_of(m) != TIER_SHORT]
    recent = [summary_text_of(m) for m in fold if tier_of(m) == TIER_SHORT]
    return "\n\n".join(t for t in older if t), "\n\n".join(t for t in recent if t)


def build_fold_request(fold, prompt=None, style="chat", instruction=None) -> list:
    """
    The request that waterfalls the short-term summary into the long-term one.

    Args:
        fold (list[dict]): the markers to fold (``CascadeCycle.fold``).
        prompt (str, optional): chat system prompt; default :data:`LONG_TERM_PROMPT`.
        style (str): ``"chat"`` (system + user) or ``"base"`` (one user message ending in
            ``SUMMARY:``, the base-model prompt of ``docs/design.md``, "Structured summaries").
        instruction (str, optional): the base prompt's first line; default
            :data:`LONG_TERM_INSTRUCTION`.

    Returns:
        list[dict]: chat messages for ``/chat/completions``.

    Raises:
        ValueError: if ``fold`` holds no text.
    """
    older, recent = _fold_texts(fold)
    if not older and not recent:
        raise ValueError("nothing to fold")
    if style == "base":
        parts = [instruction or LONG_TERM_INSTRUCTION, ""]
        if older:
            parts += ["OLDER:", older, ""]
        if recent:
            parts += ["MORE RECENT:", recent, ""]
        return [{"role": "user", "content": "\n".join(parts) + "SUMMARY:\n"}]
    user = ""
    if older:
        user += f"My older memories:\n<older>\n{older}\n</older>\n\n"
    if recent:
        user += f"What happened since:\n<recent>\n{recent}\n</recent>\n\n"
    user += "Write the merged summary now."
    return [
        {"role": "system", "content": prompt or LONG_TERM_PROMPT},
        {"role": "user", "content": user},
    ]


def cycle_replacements(cycle, long_marker, short_marker) -> list[tuple]:
    """
    The splices that apply ``cycle``, in order: ``[(first_id, last_id, marker), ...]`` (the fold
    range becomes ``long_marker`` when there is a fold, then the summarised range becomes
    ``short_marker``).

    Raises:
        ValueError: if the cycle is skipped, or has a fold but no ``long_marker``.
    """
    if cycle.skipped:
        raise ValueError(f"cannot apply a skipped cycle ({cycle.reason})")
    out = []
    if cycle.fold:
        if long_marker is None:
            raise ValueError("a waterfall cycle needs a long-term marker")
        out.append((cycle.fold[0]["id"], cycle.fold[-1]["id"], long_marker))
    out.append((cycle.to_summarise[0]["id"], cycle.to_summarise[-1]["id"], short_marker))
    return out


def apply_cycle(history, cycle, long_marker, short_marker) -> list[Message]:
    """
    Return a NEW history with ``cycle`` applied through :func:`ai_contrib.core.splice.splice`
    (messages appended since the plan keep their place).

    Raises:
        SpliceError: if a planned range is no longer in ``history``.
        ValueError: see :func:`cycle_replacements`.
    """
    for first_id, last_id, marker in cycle_replacements(cycle, long_marker, short_marker):
        history = splice(history, first_id, last_id, [marker])
    return history


def check_cycle(short_text, short_marker_tokens, replaced_tokens, min_saving_tokens,
                long_text=None, long_marker_tokens=0, fold_tokens=0) -> str | None:
    """
    Validate a cycle's summaries before anything changes.

    Args:
        short_text (str): the new short-term summary.
        short_marker_tokens (int): tokens of its marker.
        replaced_tokens (int): tokens of the messages it replaces.
        min_saving_tokens (int): the least the short-term summary must save.
        long_text (str, optional): the new long-term summary (for a waterfall cycle).
        long_marker_tokens (int): tokens of its marker.
        fold_tokens (int): tokens of the markers it replaces.

    Returns:
        None if the cycle may be applied, else a one-line reason. A waterfall cycle must also
        leave the context smaller than before as a whole (so the token count never grows).
    """
    problem = check_summary(short_text, short_marker_tokens, replaced_tokens, min_saving_tokens)
    if problem:
        return f"short-term summary: {problem}"
    if fold_tokens:
        if not (long_text or "").strip():
            return "long-term summary: empty summary"
        before = replaced_tokens + fold_tokens
        after = short_marker_tokens + long_marker_tokens
        if after >= before:
            return f"the cycle would not shrink the context ({before} -> {after} tokens)"
    return None
