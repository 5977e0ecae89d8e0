"""
The memory worker thread's queue (``ai_contrib/memory/worker.py``): a turn's read goes before
the background work queued ahead of it, never before an ordered job, and every job still runs.
Driven by events: a background job holds the thread until the test has queued the rest.
"""

import threading
from types import SimpleNamespace

import pytest
from twisted.internet import defer
from twisted.trial import unittest as trial

from ai_contrib.memory.worker import (
    BACKGROUND,
    FIRST,
    IDLE,
    ORDERED,
    WorkerThread,
    next_job,
    turn_ended,
    turn_started,
)

from tests.support.waiting import HANG_GUARD


def kinds(*names):
    return [SimpleNamespace(kind=name) for name in names]


@pytest.mark.parametrize("queue, expected", [
    ([ORDERED], 0),
    ([BACKGROUND, BACKGROUND, FIRST], 2),             # a read overtakes background work
    ([BACKGROUND, FIRST, FIRST], 1),                  # reads keep their order
    ([BACKGROUND, ORDERED, FIRST], 0),                # never an ordered job
    ([ORDERED, FIRST], 0),
    ([BACKGROUND, ORDERED, BACKGROUND], 0),           # the rest in the order queued
    ([FIRST, BACKGROUND], 0),
])
def test_the_next_job_is_the_oldest_read_not_behind_an_ordered_job(queue, expected):
    assert next_job(kinds(*queue)) == expected


@pytest.mark.parametrize("queue, expected", [
    ([IDLE, BACKGROUND], 1),                          # held while a turn is under way
    ([IDLE, IDLE], None),                             # nothing else to run
    ([IDLE, FIRST], 1),
    ([IDLE, ORDERED, BACKGROUND], 0),                 # never held ahead of an ordered job
    ([BACKGROUND, IDLE], 0),
])
def test_while_a_turn_is_under_way_idle_jobs_wait(queue, expected):
    assert next_job(kinds(*queue), hold_idle=True) == expected
    assert next_job(kinds(*queue)) in (0, 1)  # control: with no turn, they run in order


def test_an_empty_queue_has_no_next_job():
    with pytest.raises(IndexError):
        next_job([])


class WorkerQueueTest(trial.TestCase):
    """A real worker thread: the order in which its jobs ran, recorded on that thread."""

    def setUp(self):
        self.worker = WorkerThread("ai-memory-test")
        self.addCleanup(self.worker.stop)
        self.ran = []  # appended on the worker thread only
        self.gate = threading.Event()
        self.holding = threading.Event()
        self.addCleanup(self.gate.set)  # before the worker stops: a failed test frees it

    def hold(self):
        """Queue a background job that holds the thread until the gate opens; return once it
        runs, so every job queued after it waits in the queue."""
        def held():
            self.holding.set()
            self.gate.wait(HANG_GUARD)
            self.ran.append("held")

        d = self.worker.run_background(held)
        self.assertTrue(self.holding.wait(HANG_GUARD))
        return d

    def job(self, name):
        return lambda: self.ran.append(name) or name

    @defer.inlineCallbacks
    def test_a_retrieval_queued_behind_a_background_batch_runs_before_the_rest_of_it(self):
        held = self.hold()
        batch = [self.worker.run_background(self.job(f"embed {i}")) for i in range(4)]
        turn = self.worker.run_first(self.job("retrieval"))
        self.gate.set()
        self.assertEqual((yield turn), "retrieval")
        results = yield defer.gatherResults([held] + batch)
        # it waited for the job running when it came, not for the batch behind it
        self.assertEqual(self.ran, ["held", "retrieval"] + [f"embed {i}" for i in range(4)])
        # every background job still ran, in its order (control)
        self.assertEqual(results[1:], [f"embed {i}" for i in range(4)])

    @defer.inlineCallbacks
    def test_a_retrieval_never_overtakes_an_ordered_job(self):
        held = self.hold()
        jobs = [self.worker.run_background(self.job("embed a")),
                self.worker.run(self.job("forget")),
                self.worker.run_background(self.job("embed b")),
                self.worker.run_first(self.job("retrieval")),
                self.worker.run(self.job("erase"))]
        self.gate.set()
        yield defer.gatherResults([held] + jobs)
        # the forget queued before the retrieval runs before it, and so does the background
        # job queued before the forget; the background job after the forget is overtaken, and
        # the ordered job queued after the retrieval runs after it
        self.assertEqual(self.ran, ["held", "embed a", "forget", "retrieval", "embed b", "erase"])

    @defer.inlineCallbacks
    def test_a_failing_job_errbacks_its_own_deferred_and_the_queue_goes_on(self):
        held = self.hold()

        def broken():
            raise ValueError("disk gone")

        failing = self.worker.run_background(broken)
        turn = self.worker.run_first(self.job("retrieval"))
        after = self.worker.run(self.job("after"))
        self.gate.set()
        yield held
        with self.assertRaises(ValueError):
            yield failing
        self.assertEqual((yield turn), "retrieval")
        self.assertEqual((yield after), "after")
        self.assertEqual(self.ran, ["held", "retrieval", "after"])

    @defer.inlineCallbacks
    def test_an_idle_job_waits_for_the_turns_of_the_process_then_runs(self):
        turn_started()
        try:
            idle = self.worker.run_idle(self.job("embed the reply's lines"))
            self.assertEqual((yield self.worker.run_first(self.job("retrieval"))), "retrieval")
            yield self.worker.run_background(self.job("consolidate"))
            # queued first, it waited for the turn while the work after it ran
            self.assertEqual(self.ran, ["retrieval", "consolidate"])
            self.assertFalse(idle.called)
        finally:
            turn_ended()
        # control: once no turn has been under way for IDLE_AFTER seconds, it runs
        self.assertEqual((yield idle), "embed the reply's lines")
        self.assertEqual(self.ran[-1], "embed the reply's lines")

    @defer.inlineCallbacks
    def test_an_idle_job_never_lets_an_ordered_job_overtake_it(self):
        turn_started()
        try:
            idle = self.worker.run_idle(self.job("embed"))
            erase = self.worker.run(self.job("erase"))
            yield defer.gatherResults([idle, erase])
            self.assertEqual(self.ran, ["embed", "erase"])
        finally:
            turn_ended()
        # and the next idle job waits for the release, which leaves no timer behind
        self.assertEqual((yield self.worker.run_idle(self.job("later"))), "later")
