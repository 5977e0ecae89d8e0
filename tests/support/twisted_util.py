"""
Driving Deferreds to completion inside Evennia's (Django) test cases.

Evennia's test harness is built on Django's TestCase, which does not run the Twisted reactor.
``wait_for`` iterates the reactor by hand until a Deferred fires, so the real treq client can
talk to a real HTTP server on 127.0.0.1 from inside such a test; ``wait_until`` until a
condition holds. Both wait on the event, however long a busy machine takes, and give up only at
:data:`tests.support.waiting.HANG_GUARD` (a hang guard, not a limit a test checks).
"""

import time

from twisted.internet import reactor

from ai_contrib.web.bridge import wait_for_deferred
from tests.support.waiting import HANG_GUARD


def wait_for(d, timeout=HANG_GUARD):
    """
    Iterate the reactor until Deferred ``d`` fires; return its result or raise its error
    (:func:`ai_contrib.web.bridge.wait_for_deferred`). ``timeout``: a hang guard; tests leave
    it at :data:`HANG_GUARD`, only the real model's (``tests/model/``), whose one call may take
    minutes on 2 cores, and the benchmarks, which run outside the tests, give their own.

    Raises:
        TimeoutError: ``d`` has not fired after ``timeout`` seconds (it never will).
    """
    return wait_for_deferred(d, timeout=timeout)


def wait_until(condition, step=0.01):
    """
    Iterate the reactor (``step`` seconds at a time) until ``condition()`` returns something
    true, and return that.

    Raises:
        TimeoutError: ``condition()`` still false after :data:`HANG_GUARD` seconds.
    """
    deadline = time.monotonic() + HANG_GUARD
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{getattr(condition, '__name__', condition)} still false "
                               f"after {HANG_GUARD} s")
        reactor.iterate(step)


def call_when(condition, action, step=0.01):
    """
    Run ``action()`` in the reactor's thread as soon as ``condition()`` is true, checking every
    ``step`` seconds while the reactor turns (for what a test does in the middle of the code
    it waits on: a player walking in once the reply's request is out). Returns the
    ``DelayedCall`` of the next check; the check stops after :data:`HANG_GUARD` seconds.
    """
    deadline = time.monotonic() + HANG_GUARD

    def check():
        if condition():
            action()
        elif time.monotonic() < deadline:
            reactor.callLater(step, check)

    return reactor.callLater(0, check)


def spin(seconds):
    """Iterate the reactor for ``seconds`` (lets callLater'd work run). Only for a short turn
    before a negative check, with a positive control in the same test; to wait for something,
    use :func:`wait_until`."""
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
