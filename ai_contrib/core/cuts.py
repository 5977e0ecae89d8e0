"""
Where to cut a history for compaction: the preserve window and safe cut points.

A *cut* is an index ``i`` with ``0 <= i <= len(history)``: ``history[:i]`` is compacted into a
summary, ``history[i:]`` is kept verbatim. Sources:

- ``docs/design.md``, "Preserve window and cuts": keep the last N messages or 20 % of
  ``max_context_tokens``, whichever keeps more;
- Letta: cut only at assistant boundaries, so a tool call and its results stay together;
- OpenAI chat APIs reject a ``tool`` message whose call is not in the request, so the kept part
  must never start with an orphaned tool result.

Messages are dicts as in :mod:`ai_contrib.core.messages`; ``token_counts[i]`` is the token count
of ``history[i]`` (see :func:`ai_contrib.core.tokens.count_message_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .messages import is_marker, tool_call_ids

__all__ = [
    "CompactionPlan",
    "EXTRACTION_TYPE",
    "hold_cut",
    "is_extraction_traffic",
    "is_safe_cut",
    "plan_compaction",
    "preserve_start",
    "safe_cut",
]

SKIP_WITHIN_WINDOW = "history within preserve window"
SKIP_NOTHING = "nothing to compact"

#: share of the budget above which the summary markers at the head of the history are folded
#: into a new summary alone, whatever the preserve window keeps (``docs/design.md``, "Preserve
#: window and cuts": a summary larger than a budget an admin lowered)
MARKER_FOLD_SHARE = 0.5

#: ``metadata["type"]`` of the tool calls and results that pre-compaction fact extraction
#: writes into the history (``ai_contrib.npc.extraction``)
EXTRACTION_TYPE = "pre_compaction"


def is_extraction_traffic(msg) -> bool:
    """True for a message of the fact-extraction loop (its tool calls and their results): talk
    with the journal, not with anyone in the room, so it never counts toward the preserve
    window."""
    return (msg.get("metadata") or {}).get("type") == EXTRACTION_TYPE


def _safe_flags(history):
    """
    Return ``flags`` of length ``len(history) + 1``: ``flags[i]`` is True when cutting at ``i``
    separates nothing. O(n).

    Unsafe: any ``i`` with ``call < i <= result`` for an assistant message at ``call`` and a tool
    result answering it at ``result`` (the messages in between go with them); any ``i`` where
    ``history[i]`` is a tool message; and, while the history ends in a tool-call group still
    waiting for results, every ``i`` after that call (the results will be appended later).
    A call never answered but followed by other conversation is abandoned and blocks nothing,
    so one failed tool cannot stop compaction for good. ``0`` is always safe (nothing cut).
    """
    n = len(history)
    flags = [True] * (n + 1)
    blocked_until = [-1] * (n + 1)  # blocked_until[start] = last blocked position from start
    latest_call = {}
    for index, msg in enumerate(history):
        if msg.get("role") == "assistant":
            for call_id in tool_call_ids(msg):
                latest_call[call_id] = index
        elif msg.get("role") == "tool":
            flags[index] = False
            call = latest_call.get(msg.get("tool_call_id"))
            if call is not None:
                blocked_until[call + 1] = max(blocked_until[call + 1], index)
    pending = _pending_call_index(history)
    if pending is not None:
        blocked_until[pending + 1] = n
    reach = -1
    for i in range(n + 1):
        reach = max(reach, blocked_until[i])
        if i <= reach:
            flags[i] = False
    flags[0] = True
    return flags


def _pending_call_index(history):
    """Index of a trailing assistant tool-call message some of whose results have not arrived
    (only tool messages follow it), else None."""
    index = len(history) - 1
    answered = set()
    while index >= 0 and history[index].get("role") == "tool":
        answered.add(history[index].get("tool_call_id"))
        index -= 1
    if index < 0:
        return None
    calls = set(tool_call_ids(history[index]))
    if calls and not calls <= answered:
        return index
    return None


def is_safe_cut(history, i) -> bool:
    """
    True if cutting ``history`` (list of message dicts) at index ``i`` separates no tool call
    from its results and leaves no tool result first in the kept part. ``0`` is always safe,
    ``len(history)`` is safe unless a tool call at the end still awaits results; an ``i``
    outside ``0..len(history)`` is not a cut (False).
    """
    if not 0 <= i <= len(history):
        return False
    return _safe_flags(history)[i]


def safe_cut(history, i) -> int:
    """
    Return the largest safe cut index ``<= i`` (an ``i`` past the end counts as the end).

    Raises:
        ValueError: if ``i`` is negative.
    """
    if i < 0:
        raise ValueError(f"cut index must be >= 0, got {i}")
    flags = _safe_flags(history)
    i = min(i, len(history))
    while not flags[i]:
        i -= 1
    return i


def hold_cut(history, cut, keep_ids=()) -> int:
    """
    Move ``cut`` earlier so that no message whose id is in ``keep_ids`` is compacted: the
    largest safe cut ``<=`` both ``cut`` and the index of the first such message.

    A player line still waiting for its answer must stay verbatim in the context: the reply is
    built from the context, and after a restart the lines to answer are found in it
    (``docs/design.md``, "Turns, not one call per line").

    Args:
        history (list[dict]): messages, oldest first.
        cut (int): the planned cut, ``0 <= cut``.
        keep_ids (iterable[str]): ids of the messages to keep (e.g. lines awaiting an answer).

    Raises:
        ValueError: if ``cut`` is negative.
    """
    keep = set(keep_ids)
    if keep:
        first = next((i for i, msg in enumerate(history) if msg.get("id") in keep), None)
        if first is not None:
            cut = min(cut, first)
    return safe_cut(history, cut)


def _check_counts(history, token_counts):
    if len(token_counts) != len(history):
        raise ValueError(
            f"token_counts has {len(token_counts)} entries for {len(history)} messages"
        )


def preserve_start(history, token_counts, preserve_window, min_preserve_tokens,
                   max_preserve_tokens=None) -> int:
    """
    Return the index ``i`` such that ``history[i:]`` is kept verbatim.

    The kept part holds at least the last ``preserve_window`` messages AND at least
    ``min_preserve_tokens`` tokens (or everything, if the history is smaller), whichever keeps
    more, but no more than ``max_preserve_tokens`` tokens when that is given and the message
    count would keep more: long lines under a small budget would otherwise keep so much that a
    compaction leaves the history at its threshold, and the next line sets off another
    (``docs/design.md``, "Preserve window and cuts"). ``i`` is then moved earlier to a safe cut.

    Messages and tokens count only for the conversation: fact extraction's tool calls and
    results (:func:`is_extraction_traffic`), written at the end of the history just before a
    compaction, are kept with what follows them but never fill the window in place of the lines
    people said.

    Args:
        history (list[dict]): messages, oldest first.
        token_counts (list[int]): tokens of each message, same length as ``history``.
        preserve_window (int): messages to keep, >= 0.
        min_preserve_tokens (int): tokens to keep, >= 0.
        max_preserve_tokens (int, optional): tokens the message count may keep at most (never
            below ``min_preserve_tokens``, never fewer than the newest message).

    Raises:
        ValueError: on mismatched lengths or negative limits.
    """
    _check_counts(history, token_counts)
    if preserve_window < 0 or min_preserve_tokens < 0:
        raise ValueError("preserve_window and min_preserve_tokens must be >= 0")
    n = len(history)
    talk = [0 if is_extraction_traffic(msg) else 1 for msg in history]
    weight = [count * tokens for count, tokens in zip(talk, token_counts)]
    by_count, seen = n, 0
    while by_count > 0 and seen < preserve_window:
        by_count -= 1
        seen += talk[by_count]
    by_tokens = n
    kept = 0
    while by_tokens > 0 and kept < min_preserve_tokens:
        by_tokens -= 1
        kept += weight[by_tokens]
    start = min(by_count, by_tokens)
    if max_preserve_tokens is not None and start < by_tokens:
        kept = sum(weight[start:])
        while start < by_tokens and start < n - 1 and kept > max_preserve_tokens:
            kept -= weight[start]
            start += 1
    return safe_cut(history, start)


@dataclass(frozen=True)
class CompactionPlan:
    """
    What to compact: ``history[:cut]`` (``to_compact``) becomes a summary, ``history[cut:]``
    (``to_preserve``) stays. ``reason`` is None for a plan to act on, else why nothing should be
    compacted (``cut == 0``, ``to_compact == []``). Token fields are sums of the caller's
    ``token_counts``. Existing ``[CONTEXT SUMMARY]`` markers at the head are part of
    ``to_compact``, to be folded into the new summary (Letta's running summary).
    """

    cut: int
    to_compact: list = field(repr=False)
    to_preserve: list = field(repr=False)
    compact_tokens: int = 0
    preserve_tokens: int = 0
    reason: str | None = None

    @property
    def skipped(self) -> bool:
        """True when there is nothing to compact (see ``reason``)."""
        return self.reason is not None


def plan_compaction(
    history, token_counts, max_context_tokens, preserve_window, preserve_fraction=0.2,
    keep_ids=(), max_preserve_fraction=None,
) -> CompactionPlan:
    """
    Choose what to compact (``docs/design.md``, "Preserve window and cuts" and "Summary
    compaction").

    Args:
        history (list[dict]): messages, oldest first (a snapshot: the plan holds the same dicts).
        token_counts (list[int]): tokens of each message.
        max_context_tokens (int): the NPC's token budget.
        preserve_window (int): at least this many recent messages are kept.
        preserve_fraction (float): at least this fraction of ``max_context_tokens`` is kept,
            in tokens (0..1).
        keep_ids (iterable[str]): ids of messages that must stay verbatim, with everything
            after them: the lines still awaiting an answer (:func:`hold_cut`).
        max_preserve_fraction (float, optional): at most this fraction of
            ``max_context_tokens`` is kept by the message count (:func:`preserve_start`).

    Returns:
        CompactionPlan: skipped with reason ``"history within preserve window"`` when
        ``len(history) <= preserve_window``, or ``"nothing to compact"`` when the safe cut
        leaves nothing but earlier summary markers before it; except that the summary markers
        at the head, when they hold more than :data:`MARKER_FOLD_SHARE` of
        ``max_context_tokens``, are then compacted alone (a summary of the summary), the rest
        kept whatever the window.

    Raises:
        ValueError: on mismatched lengths or out-of-range limits.
    """
    _check_counts(history, token_counts)
    if max_context_tokens < 0 or not 0 <= preserve_fraction <= 1:
        raise ValueError("need max_context_tokens >= 0 and 0 <= preserve_fraction <= 1")

    def skip_or_fold(reason):
        # nothing but markers to compact: skipped, unless the markers alone are too big
        head = _marker_head(history)
        if sum(token_counts[:head]) > max_context_tokens * MARKER_FOLD_SHARE:
            return CompactionPlan(head, list(history[:head]), list(history[head:]),
                                  sum(token_counts[:head]), sum(token_counts[head:]))
        return CompactionPlan(0, [], list(history), 0, sum(token_counts), reason)

    if sum(1 for msg in history if not is_extraction_traffic(msg)) <= preserve_window:
        return skip_or_fold(SKIP_WITHIN_WINDOW)
    min_tokens = int(max_context_tokens * preserve_fraction)
    max_tokens = None if max_preserve_fraction is None \
        else max(min_tokens, int(max_context_tokens * max_preserve_fraction))
    cut = hold_cut(history, preserve_start(history, token_counts, preserve_window, min_tokens,
                                           max_tokens), keep_ids)
    if all(is_marker(msg) for msg in history[:cut]):
        return skip_or_fold(SKIP_NOTHING)
    return CompactionPlan(
        cut,
        list(history[:cut]),
        list(history[cut:]),
        sum(token_counts[:cut]),
        sum(token_counts[cut:]),
    )


def _marker_head(history) -> int:
    """How many summary markers open ``history`` (before its first other message)."""
    head = 0
    while head < len(history) and is_marker(history[head]):
        head += 1
    return head


def eviction_ids(history, token_counts, target_tokens, keep_ids=frozenset(),
                 stop_ids=frozenset()) -> list:
    """
    The ids of the oldest messages to move out of context so that at most ``target_tokens``
    remain, ending at a safe cut (a tool call keeps its results). Summary markers are never
    chosen: they are small and stand for everything before them.

    While a compaction is being written (``docs/design.md``, "Bounded while a compaction is
    written") the messages it replaces are ``keep_ids``: never chosen, and its id-range splice
    finds them all when it lands; the oldest messages outside them go instead (still counting
    the kept ones' tokens). ``stop_ids`` (the lines awaiting an answer) end the choice: neither
    the first of them nor anything after it goes.

    Args:
        history (list[dict]): messages, oldest first.
        token_counts (list[int]): tokens of each message.
        target_tokens (int | float): what may remain (of the whole history, kept ids included).
        keep_ids (set[str]): ids never chosen; a contiguous range ending at a safe cut (a
            compaction's span), so the messages outside it pair their tool calls among
            themselves.
        stop_ids (set[str]): ids at and after the first of which nothing is chosen.

    Returns:
        list[str]: ids, oldest first (empty when nothing needs to go; fewer than needed when the
        kept ids and the lines from the first stop id on are over the target by themselves).
    """
    _check_counts(history, token_counts)
    remaining = sum(token_counts)
    if keep_ids:
        pairs = [(m, c) for m, c in zip(history, token_counts) if m["id"] not in keep_ids]
        history, token_counts = [m for m, _ in pairs], [c for _, c in pairs]
    stop = next((i for i, m in enumerate(history) if m["id"] in stop_ids), None)
    limit = len(history) - 1 if stop is None else min(stop, len(history) - 1)
    bound = len(history) if stop is None else stop  # the furthest cut allowed
    cut = 0
    while cut < limit and remaining > target_tokens:
        if not is_marker(history[cut]):
            remaining -= token_counts[cut]
        cut += 1
    flags = _safe_flags(history)
    end = cut
    while end < bound and not flags[end]:
        end += 1
    if not flags[end]:  # no safe cut before the stop: the nearest one before instead
        end = safe_cut(history, cut)
    return [m["id"] for m in history[:end] if not is_marker(m)]
