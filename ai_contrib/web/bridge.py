"""
Reading NPCs from a web request: Evennia runs Django views in a thread pool, while an NPC's
runtime history and Attributes are changed in the reactor thread. Everything a page shows is
therefore gathered in the reactor thread by :func:`in_reactor`, one short call per request.
"""

import time

from twisted.internet import defer, reactor
from twisted.internet.threads import blockingCallFromThread
from twisted.python import threadable
from twisted.python.failure import Failure


def in_reactor(fn, *args, timeout=30.0, **kwargs):
    """
    Call ``fn(*args, **kwargs)`` in the reactor thread and return its result, waiting for it
    when it is a Deferred.

    From a web thread of a running server this is
    :func:`twisted.internet.threads.blockingCallFromThread`. Where no reactor runs (Django's
    test client, a management command), ``fn`` runs at once in the calling thread and a
    Deferred it returns is waited for by iterating the reactor.

    Raises:
        whatever ``fn`` raises; TimeoutError: a Deferred not fired within ``timeout`` seconds
        (only where the reactor is iterated here).
    """
    if reactor.running and not threadable.isInIOThread():
        return blockingCallFromThread(reactor, fn, *args, **kwargs)
    result = fn(*args, **kwargs)
    if not isinstance(result, defer.Deferred):
        return result
    if reactor.running:  # never block the reactor's own thread
        raise RuntimeError("in_reactor() cannot wait for a Deferred in the running reactor")
    box = []
    result.addBoth(box.append)
    deadline = time.monotonic() + timeout
    while not box:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer within {timeout} s")
        reactor.iterate(0.01)
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]
