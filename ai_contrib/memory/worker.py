"""
The memory worker thread: one thread, fed through a Twisted ``ThreadPool``, on which every
Mem0 call, every archive-index query and write, and the embedding of archived lines run
(``docs/design.md``, "The memory thread").

One thread, because Mem0 and embedded Qdrant are not thread-safe and the archive's index has a
single writer. Its queue is not plain first in, first out: a turn's retrieval must not wait
behind work no player waits for. On the tavern benchmark (20 players, one NPC), a reply's
retrieval waited 1.0 s of a 1.57 s turn behind the archived lines embedded after the turn
before. So a job is one of three kinds:

- **ordered** (:meth:`WorkerThread.run`): runs after every job queued before it, and no job
  queued after it runs before it. Writes a reader must see (a forget's deletions, an erase's
  file moves, the store's opening) go here, and so does anything not said otherwise;
- **first** (:meth:`WorkerThread.run_first`): a turn's read. It runs before the *background*
  jobs queued ahead of it, never before an *ordered* one, and after the first jobs queued
  before it;
- **background** (:meth:`WorkerThread.run_background`): work no reply depends on (archived
  lines' vectors, journal -> Mem0 consolidation). It yields to every first job queued before
  it starts, and keeps its order among background and ordered jobs, so two writes never change
  places. A background job should be short (a few tenths of a second): a retrieval can still
  wait for the one that is running.

The rule is applied when the thread takes its next job, so a retrieval queued while a batch of
background jobs waits is the next to run.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

#: job kinds (module docstring)
ORDERED, FIRST, BACKGROUND = "ordered", "first", "background"


@dataclass
class _Job:
    kind: str
    call: Any  # a functools.partial of the work
    deferred: Any = field(default=None)


def next_job(queue) -> int:
    """
    The position in ``queue`` (jobs with a ``kind``, oldest first) of the job to run next: the
    oldest *first* job not behind an *ordered* one, else the oldest job (module docstring).

    Raises:
        IndexError: ``queue`` is empty.
    """
    if not queue:
        raise IndexError("no job queued")
    for position, job in enumerate(queue):
        if job.kind == FIRST:
            return position
        if job.kind == ORDERED:
            break
    return 0


class WorkerThread:
    """
    One worker thread fed through a Twisted ``ThreadPool``; results come back as Deferreds.

    Unlike ``deferToThread`` it does not depend on the reactor's shared pool, which only starts
    once the reactor runs (test harnesses that iterate the reactor by hand never start it). The
    thread is a daemon, so a worker nobody stopped cannot keep the interpreter alive; the
    reactor's shutdown stops it (after ``on_shutdown``) otherwise. Jobs are taken by
    :func:`next_job` (module docstring).

    Args:
        name (str): the thread's name.
        on_shutdown (callable, optional): run on the worker's thread before it stops at reactor
            shutdown (e.g. releasing a storage lock), as an ordered job.
    """

    def __init__(self, name, on_shutdown=None):
        self.name = name
        self.on_shutdown = on_shutdown
        self._pool = None
        self._trigger = None
        self._queue = deque()
        self._lock = threading.Lock()  # never held while work runs: the reactor thread takes it

    @property
    def started(self) -> bool:
        """True while the thread is running."""
        return self._pool is not None

    def run(self, func, *args, **kwargs) -> Deferred:
        """Run ``func(*args, **kwargs)`` on the worker as an *ordered* job: after every job
        queued before it, before every job queued after it. Returns a Deferred of its result."""
        return self._submit(ORDERED, func, args, kwargs)

    def run_first(self, func, *args, **kwargs) -> Deferred:
        """Run ``func`` as a *first* job (a turn's read): ahead of the background jobs queued
        before it, never ahead of an ordered one. Returns a Deferred of its result."""
        return self._submit(FIRST, func, args, kwargs)

    def run_background(self, func, *args, **kwargs) -> Deferred:
        """Run ``func`` as a *background* job: every first job queued before it starts runs
        before it; it keeps its place among the others. Returns a Deferred of its result."""
        return self._submit(BACKGROUND, func, args, kwargs)

    def _submit(self, kind, func, args, kwargs):
        from twisted.internet import defer, reactor
        from twisted.python.threadpool import ThreadPool

        job = _Job(kind, functools.partial(func, *args, **kwargs), defer.Deferred())
        with self._lock:
            if self._pool is None:
                pool = ThreadPool(minthreads=1, maxthreads=1, name=self.name)
                pool.threadFactory = functools.partial(threading.Thread, daemon=True)
                pool.start()
                self._pool = pool
                self._trigger = reactor.addSystemEventTrigger("before", "shutdown", self._shutdown)
            pool = self._pool
            self._queue.append(job)
        # one pool call per job: each takes whichever job is due when the thread gets to it
        pool.callInThread(self._run_next)
        return job.deferred

    def _run_next(self):
        from twisted.internet import reactor
        from twisted.python.failure import Failure

        with self._lock:
            queue = self._queue
            position = next_job(queue)
            job = queue[position]
            del queue[position]
        try:
            result = job.call()
        except BaseException:
            reactor.callFromThread(job.deferred.errback, Failure())
        else:
            reactor.callFromThread(job.deferred.callback, result)

    def _shutdown(self):
        if self._pool is not None and self.on_shutdown is not None:
            # runs after the work queued before it; stop() below waits for it
            self.run(self.on_shutdown).addErrback(
                lambda failure: logger.warning("%s: shutdown work failed: %s", self.name,
                                               failure.getErrorMessage()))
        self._trigger = None
        self.stop()

    def stop(self) -> None:
        """Stop the thread after the work already queued (blocks until then). Idempotent."""
        from twisted.internet import reactor

        with self._lock:
            pool, self._pool = self._pool, None
            trigger, self._trigger = self._trigger, None
        if trigger is not None:
            try:
                reactor.removeSystemEventTrigger(trigger)
            except (ValueError, KeyError, TypeError):
                pass
        if pool is not None:
            pool.stop()
