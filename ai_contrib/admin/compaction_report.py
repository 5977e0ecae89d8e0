"""
An admin's line for a compaction result, in each strategy's own wording (the ``done`` template
of its record in :data:`ai_contrib.core.compaction.REGISTRY`): the ``compact`` command's answer
(:mod:`ai_contrib.commands`) and the compaction part of the sleep report
(:mod:`ai_contrib.admin.sleep_report`).
"""

from __future__ import annotations

from ..core.compaction import REGISTRY, context_change, get_strategy
from ..core.text import inert_markup

__all__ = ["describe_result", "format_result"]


def _tokens(result):
    return (
        f"{result.original_tokens} -> {result.new_tokens} tokens "
        f"({result.reduction_pct:.1f}% reduction)"
        + context_change(result)
    )


def format_result(npc_key, result) -> str | None:
    """
    A line for an admin describing ``result`` (a
    :class:`~ai_contrib.core.compaction.CompactionResult`) of a strategy with its own wording,
    or None to let the caller use its summary wording (the ``summary`` strategy, and results of
    the shared checks, which name no strategy).
    """
    name = result.strategy
    record = REGISTRY.get(name)
    if record is None or record.done is None:
        return None
    # a reason or an error may quote a server's answer: data, never markup on a screen
    if result.skipped:
        return f"Compaction of {npc_key} ({name}) skipped: {inert_markup(result.reason)}."
    if result.failed:
        return (f"Compaction of {npc_key} ({name}) failed: {inert_markup(result.error)}. "
                "History unchanged.")
    if record.masks_first and result.get("marker_id") is None:
        record = get_strategy("mask")  # it masked but wrote no summary
    evicted = result.get("evicted_messages")
    values = {  # the wording templates name the figures of the stored dict
        "masked_messages": 0,
        **result.as_dict(),
        "npc": npc_key,
        "tokens": _tokens(result),
        "moved": f" and moved the {evicted} oldest messages out of context" if evicted else "",
        "what": "waterfall into the long-term summary, " if result.get("waterfall") else "",
    }
    return record.done.format(**values)


def describe_result(npc_key, result, *, skipped, failed, done, own=lambda line: line) -> str:
    """
    An admin's line for any compaction result (a
    :class:`~ai_contrib.core.compaction.CompactionResult`): :func:`format_result`'s wording
    (passed through ``own``) for a strategy with its own, else the caller's
    ``skipped(result)``, ``failed(result)`` or ``done(result)`` (the ``summary`` strategy's and
    the shared checks').
    """
    line = format_result(npc_key, result)
    if line:
        return own(line)
    if result.skipped:
        return skipped(result)
    if result.failed:
        return failed(result)
    return done(result)
