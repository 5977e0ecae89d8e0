"""
The end of a sleep phase, kept and told (``docs/design.md``, "Sleep phase"): the line about it
in ``script.db.last_sleep`` (``{"at": ISO-8601 UTC str, "summary": str}``, kept across reloads,
``aihistory``'s "Last sleep" row) and in the Deferreds :func:`watch_sleep` handed out (the
admins who ran ``aisleep``). The line's wording is the script's
(``AssistantScript.describe_sleep``, :mod:`ai_contrib.admin.sleep_report`'s by default).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from twisted.internet import defer
from twisted.python.failure import Failure

from evennia.utils import logger

if TYPE_CHECKING:
    from ..core.outcome import SleepResults

__all__ = ["sleep_finished", "watch_sleep"]


def watch_sleep(script) -> defer.Deferred:
    """
    A Deferred that fires with the line of the next sleep phase of ``script`` to end
    (``script.describe_sleep``), or when the NPC wakes before its sleep work started. It never
    errbacks. Held in ``script.ndb`` only: a reload drops the watch, not the sleep.
    """
    d = defer.Deferred()
    watchers = list(script.ndb.sleep_watchers or [])
    watchers.append(d)
    script.ndb.sleep_watchers = watchers
    return d


def sleep_finished(result, script, woken=None) -> SleepResults | Failure | None:
    """
    Record and report the end of a sleep phase (a Deferred callback: returns ``result``).

    Args:
        result (SleepResults | Failure | None): the sleep phase's results; a Failure when it
            broke off; None when the NPC woke before its sleep work started.
        script: the ``AssistantScript``; its ``describe_sleep(result, woken)`` words the line.
        woken (str, optional): why the NPC woke, when ``result`` is None.
    """
    watchers, script.ndb.sleep_watchers = script.ndb.sleep_watchers or [], []
    try:
        line = script.describe_sleep(result, woken)
        if result is not None:
            at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            script.db.last_sleep = {"at": at, "summary": line}
    except Exception as err:  # reporting must never break the sleep phase's chain
        logger.log_warn(f"AI {script.obj}: sleep report failed: {err}")
        # the admins who wait still hear that this sleep ended, never the next one's line
        line = f"sleep ended; its report failed ({err})"
    for d in watchers:
        d.callback(line)
    return result
