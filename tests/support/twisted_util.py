"""
Driving Deferreds to completion inside Evennia's (Django) test cases.

Evennia's test harness is built on Django's TestCase, which does not run the Twisted reactor.
``wait_for`` iterates the reactor by hand until a Deferred fires, so the real treq client can
talk to a real HTTP server on 127.0.0.1 from inside such a test.
"""

import time

from twisted.internet import reactor

from ai_contrib.web.bridge import wait_for_deferred


def wait_for(d, timeout=20.0):
    """
    Iterate the reactor until Deferred ``d`` fires; return its result or raise its error
    (:func:`ai_contrib.web.bridge.wait_for_deferred`).

    Raises:
        TimeoutError: if ``d`` has not fired after ``timeout`` seconds.
    """
    return wait_for_deferred(d, timeout=timeout)


def spin(seconds):
    """Iterate the reactor for ``seconds`` (lets callLater'd work run)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reactor.iterate(0.01)


def cancel_pending_ticks():
    """Cancel every scheduled ``run_tick`` call: lines a test left pending must not be answered
    by a tick that fires in a later test."""
    from twisted.internet import reactor

    from ai_contrib.npc.ticking import TickHandler

    for call in reactor.getDelayedCalls():
        # script.run_tick is the script's tick handler's run (npc.delegation), unless a test
        # put a function of that name in its place
        func = call.func
        if call.active() and (getattr(func, "__func__", None) is TickHandler.run
                              or getattr(func, "__name__", "") == "run_tick"):
            call.cancel()


def stored(result):
    """
    A memory-work result (a compaction's, a fact extraction's, a sleep phase's) as the dict it
    is stored and documented as (its ``as_dict()``), for tests that read that format; None and
    plain values as they are.
    """
    return result.as_dict() if hasattr(result, "as_dict") else result
