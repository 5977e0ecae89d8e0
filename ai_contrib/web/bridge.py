"""
Reading NPCs from a web request: Evennia runs Django views in a thread pool, while an NPC's
runtime history and Attributes are changed in the reactor thread. Everything a page shows is
therefore gathered in the reactor thread by :func:`in_reactor`, one short call per request;
where no reactor runs, :func:`wait_for_deferred` iterates it by hand until a Deferred fires.
"""

from __future__ import annotations

import time
from typing import Any

from twisted.internet import defer, reactor
from twisted.internet.threads import blockingCallFromThread
from twisted.python import threadable
from twisted.python.failure import Failure


def in_reactor(fn, *args, timeout=30.0, **kwargs) -> Any:
    """
    Call ``fn(*args, **kwargs)`` in the reactor thread and return its result, waiting for it
    when it is a Deferred.

    From a web thread of a running server this is
    :func:`twisted.internet.threads.blockingCallFromThread`. Where no reactor runs (Django's
    test client, a management command), ``fn`` runs at once in the calling thread and a
    Deferred it returns is waited for by iterating the reactor (:func:`wait_for_deferred`).

    Raises:
        whatever ``fn`` raises; TimeoutError: a Deferred not fired within ``timeout`` seconds
        (only where the reactor is iterated here); RuntimeError: ``fn`` returned a Deferred in
        the running reactor's thread.
    """
    if reactor.running and not threadable.isInIOThread():
        return blockingCallFromThread(reactor, fn, *args, **kwargs)
    return wait_for_deferred(fn(*args, **kwargs), timeout=timeout)


def wait_for_deferred(d, timeout=30.0) -> Any:
    """
    Iterate the reactor by hand until Deferred ``d`` fires, outside a running reactor; return
    its result (``d`` itself when it is not a Deferred).

    For code that runs where no reactor runs: :func:`in_reactor` without a server (Django's test
    client, a management command) and tests in Evennia's harness, which is built on Django's
    TestCase. The reactor is iterated in steps of at most 10 ms.

    Raises:
        whatever ``d`` fails with; TimeoutError: ``d`` not fired within ``timeout`` seconds;
        RuntimeError: the reactor is running (waiting in its thread would block it).
    """
    if not isinstance(d, defer.Deferred):
        return d
    if reactor.running:  # never block the reactor's own thread
        raise RuntimeError("cannot wait for a Deferred while the reactor runs")
    box = []
    d.addBoth(box.append)
    deadline = time.monotonic() + timeout
    while not box:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Deferred did not fire within {timeout} s")
        reactor.iterate(0.01)
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]
