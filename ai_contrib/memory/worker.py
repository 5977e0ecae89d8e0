"""
The memory worker thread: one thread, fed through a Twisted ``ThreadPool``, on which every
Mem0 call, every archive-index query and write, and the embedding of archived lines run
(``docs/design.md``, "The memory thread").

One thread, because Mem0 and embedded Qdrant are not thread-safe and the archive's index has a
single writer. Its queue is not plain first in, first out: a turn's retrieval must not wait
behind work no player waits for. On the tavern benchmark (20 players, one NPC), a reply's
retrieval waited 1.0 s of a 1.57 s turn behind the archived lines embedded after the turn
before. So a job is one of four kinds:

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
  wait for the one that is running;
- **idle** (:meth:`WorkerThread.run_idle`): background work that is also held while any turn
  of the process is under way (:func:`turn_started`, :func:`turn_ended`) and until
  :data:`IDLE_AFTER` seconds after the last one ended: the vectors of the lines a reply has
  just archived. On a 2-core machine their embedding (70 ms a line, the CPU's and the
  interpreter's) slowed every reply of a busy room even once the retrieval stopped waiting for
  it; nothing waits for them (a line without its vector is still found by its words), and the
  sleep gives the rest theirs. An idle job is never held ahead of an ordered job queued after
  it: it runs first, so writes keep their order.

The rule is applied when the thread takes its next job, so a retrieval queued while a batch of
background jobs waits is the next to run.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

#: job kinds (module docstring)
ORDERED, FIRST, BACKGROUND, IDLE = "ordered", "first", "background", "idle"

#: seconds after the last turn of the process ended before idle jobs run: a busy room's next
#: turn starts within a few milliseconds of the one before, and must not find one running
IDLE_AFTER = 1.0

#: turns of the process under way (the reactor thread changes it; the workers read it)
_turns = 0
#: the workers that may hold idle jobs
_workers = weakref.WeakSet()
#: the pending call that releases the held idle jobs (the reactor thread's)
_release = None


@dataclass
class _Job:
    kind: str
    call: Any  # a functools.partial of the work
    deferred: Any = field(default=None)


def next_job(queue, hold_idle=False) -> int | None:
    """
    The position in ``queue`` (jobs with a ``kind``, oldest first) of the job to run next: the
    oldest *first* job not behind an *ordered* one, else the oldest job; with ``hold_idle``
    (a turn is under way), the oldest job that is not *idle*, unless an *ordered* job comes
    before any such (module docstring).

    Returns:
        int | None: the position, or None when only held idle jobs are queued.

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
    if not hold_idle:
        return 0
    for position, job in enumerate(queue):
        if job.kind == ORDERED:
            return 0  # the idle jobs before it run first: writes keep their order
        if job.kind != IDLE:
            return position
    return None


def turn_started() -> None:
    """A turn of the process (a reply being prepared and written) is under way: idle jobs
    wait (module docstring). Call from the reactor thread, with :func:`turn_ended` after."""
    global _turns
    _turns += 1


def turn_ended() -> None:
    """A turn started with :func:`turn_started` ended: once none has been under way for
    :data:`IDLE_AFTER` seconds, the held idle jobs run. Call from the reactor thread."""
    global _turns, _release
    from twisted.internet import reactor

    _turns = max(0, _turns - 1)
    if _turns == 0:
        if _release is not None and _release.active():
            _release.reset(IDLE_AFTER)
        else:
            _release = reactor.callLater(IDLE_AFTER, _release_idle)


def _idle_held() -> bool:
    """Whether idle jobs wait now: a turn is under way, or the last one ended less than
    :data:`IDLE_AFTER` seconds ago (its release is pending)."""
    return _turns > 0 or (_release is not None and _release.active())


def _release_idle():
    if _turns == 0:
        for worker in list(_workers):
            worker.release_idle()


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
        self._held = 0  # pool calls that found only held idle jobs (release_idle makes them)
        _workers.add(self)

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

    def run_idle(self, func, *args, **kwargs) -> Deferred:
        """Run ``func`` as an *idle* job: as a background job, held while a turn of the
        process is under way and for :data:`IDLE_AFTER` seconds after (module docstring).
        Returns a Deferred of its result, which may wait as long as the room stays busy."""
        return self._submit(IDLE, func, args, kwargs)

    def release_idle(self) -> None:
        """Run the idle jobs held while turns were under way (:func:`turn_ended` calls it,
        from the reactor thread)."""
        with self._lock:
            held, self._held = self._held, 0
            pool = self._pool
        for _ in range(held if pool is not None else 0):
            pool.callInThread(self._run_next)

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
            # idle jobs held meanwhile get their pool calls back now, should their release
            # have been cancelled (a reactor stopped, a test's cleanup)
            calls = 1
            if self._held and not _idle_held():
                calls, self._held = 1 + self._held, 0
        # one pool call per job: each takes whichever job is due when the thread gets to it
        for _ in range(calls):
            pool.callInThread(self._run_next)
        return job.deferred

    def _run_next(self):
        from twisted.internet import reactor
        from twisted.python.failure import Failure

        with self._lock:
            queue = self._queue
            # read here, not kept: the reactor thread counts the turns; the release comes
            # IDLE_AFTER seconds after the last turn ended, so a job released then runs
            hold = _idle_held()
            position = next_job(queue, hold_idle=hold)
            if position is None:
                self._held += 1
                return
            job = queue[position]
            del queue[position]
            # this call ran a job whose own call may be parked (an idle job run ahead of an
            # ordered one): a job that can run now gets a parked call back
            rearm = bool(self._held and queue and next_job(queue, hold_idle=hold) is not None)
            if rearm and self._pool is not None:
                self._held -= 1
                self._pool.callInThread(self._run_next)
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
