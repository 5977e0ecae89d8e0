"""
A bounded series of an NPC's context usage over time, for the staff web page's chart
(``docs/design.md``, "Seeing the NPC's mind").

The compaction log records tokens before and after each compaction, not how the context grew
between them; this series does: one point per answered turn, in ``script.db.usage_log``, the
last :data:`USAGE_LOG_SIZE` kept (a few KB re-pickled per turn).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TypedDict

USAGE_LOG_SIZE = 200  # points; at one per turn, a long evening of conversation


class UsagePoint(TypedDict):
    """One point of ``script.db.usage_log``."""

    at: str  #: when (ISO-8601 UTC, seconds)
    tokens: int  #: tokens in the runtime history then
    budget: int  #: the effective history budget then (tokens)


def record_usage(script) -> UsagePoint:
    """
    Append a :class:`UsagePoint` of now (and return it) to ``script.db.usage_log``, keeping the last
    :data:`USAGE_LOG_SIZE` points. Call it in the reactor thread.
    """
    point = {
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tokens": int(script.conversation.token_count()),
        "budget": int(script.budgeting.tokens()),
    }
    log = list(script.db.usage_log or [])
    log.append(point)
    script.db.usage_log = log[-USAGE_LOG_SIZE:]
    return point


def usage_series(script) -> list[UsagePoint]:
    """The recorded points, oldest first (copies, as :func:`record_usage` writes them)."""
    return [dict(point) for point in (script.db.usage_log or [])]
