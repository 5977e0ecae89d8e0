"""
``aisleep`` and ``compact`` while a compaction runs (``ai_contrib.npc.memory_wait``,
``ai_contrib.core.tick``; ``docs/design.md``, "Memory work is never starved"): the admin is told
at once what runs and what will happen, ``compact`` runs after it instead of beside it, and the
sleep duration never cuts off sleep work that has not started. A real AssistantScript in
Evennia's test DB; the LLM a real HTTP double on 127.0.0.1 that holds the emergency compaction's
summary open until the test lets it go.
"""

import threading
import time
from unittest import mock

from django.test import override_settings

from ai_contrib.commands import CmdAISleep, CmdCompact

from tests.support.llm_double import request_kind
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import spin, wait_for
from tests.support.waiting import HANG_GUARD

SUMMARY = "Bob asked about rooms; Marta offered the east room for two silver."

#: seconds the clock the tests hold is moved on: far past any sleep duration they set
TEN_MINUTES = 600


class HeldSummaries:
    """The double's answers: summaries wait for :attr:`release` (the hang guard at most), and say
    :data:`SUMMARY`; replies say "Aye."; :attr:`asked` counts the summaries asked for."""

    def __init__(self):
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.asked = 0

    def __call__(self, body):
        if request_kind(body) != "summary":
            return "Aye."
        with self.lock:
            self.asked += 1
        self.release.wait(HANG_GUARD)
        return SUMMARY


class AdminWatchCase(NPCTestCase):
    """An NPC test that waits on what an admin is told."""

    def until(self, condition, why, timeout=HANG_GUARD):
        """Turn the reactor until ``condition()`` holds (fails with ``why`` when it never
        does: ``timeout`` s is a hang guard, not a limit)."""
        deadline = time.monotonic() + timeout
        while not condition():
            self.assertLess(time.monotonic(), deadline, why)
            spin(0.02)

    def told(self, msg):
        return "\n".join(str(c.args[0] if c.args else c.kwargs.get("text"))
                         for c in msg.call_args_list)


@override_settings(AI_SLEEP_DURATION=60)
class TestCommandsDuringACompaction(AdminWatchCase):
    def setUp(self):
        self.model = HeldSummaries()
        self.llm_default = self.model
        super().setUp()
        self.addCleanup(self.model.release.set)  # before settle_turns waits for the work
        self.script.db.pre_compact_extraction_enabled = False
        self.fill(44)
        budget = 4000
        while self.script.token_usage() < 0.9 and budget > 200:
            budget -= 20
            self.script.db.max_context_tokens = budget
        self.emergency = self.script.start_memory_work()
        self.assertIsNotNone(self.emergency, "no emergency compaction started")
        self.until(lambda: self.model.asked == 1, "the summary was never asked for")

    def test_aisleep_says_at_once_the_sleep_work_waits_and_its_duration_counts_from_it(self):
        with mock.patch.object(self.char1, "msg") as msg:
            out = self.call(CmdAISleep(), "Marta")
            self.assertIn("Marta's emergency compaction is under way: the sleep work starts "
                          "when it ends, and Marta sleeps 60 s from then.", out)
            # ten minutes pass while the summary is held: the NPC sleeps on
            later = time.time() + TEN_MINUTES
            with mock.patch("time.time", return_value=later):
                wait_for(self.script.run_tick())
            self.assertEqual(self.script.db.operating_mode, "sleep")
            self.assertFalse(self.script.ndb.slept)
            self.assertNotIn("woke before the sleep work started", self.told(msg))
            # the summary comes: the compaction lands; the next tick starts the sleep work,
            # and the NPC sleeps on: its duration counts from now, not from the aisleep
            self.model.release.set()
            self.assertTrue(wait_for(self.emergency).success)
            with mock.patch("time.time", return_value=later):
                wait_for(self.script.run_tick())
                self.assertTrue(self.script.ndb.slept)
                self.until(lambda: "Marta's sleep:" in self.told(msg),
                           "the sleep work never reported")
                wait_for(self.script.run_tick())
            self.assertEqual(self.script.db.operating_mode, "sleep")
            # positive control: 60 s after the sleep work started, the NPC wakes by itself
            with mock.patch("time.time", return_value=later + 61):
                wait_for(self.script.run_tick())
            self.assertEqual(self.script.db.operating_mode, "awake")
            report = self.told(msg)
        self.assertIn("Marta's sleep: compaction skipped (below threshold", report)
        self.assertNotIn("woke before the sleep work started", report)

    def test_spoken_to_while_its_sleep_work_waits_the_report_says_why_it_woke(self):
        with mock.patch.object(self.char1, "msg") as msg:
            self.call(CmdAISleep(), "Marta")
            with mock.patch("time.time", return_value=time.time() + TEN_MINUTES):
                wait_for(self.script.run_tick())
            self.assertNotIn("Marta's sleep:", self.told(msg))  # the duration did not wake it
            self.script.receive_speech(self.char1, "Marta, are you awake?")
            self.assertEqual(self.script.db.operating_mode, "awake")
            report = self.told(msg)
        self.assertIn(f"Marta's sleep: woke before the sleep work started ({self.char1.key} "
                      "speaks): nothing done", report)

    def test_compact_says_at_once_it_waits_and_runs_after_the_running_compaction(self):
        with mock.patch.object(self.char1, "msg") as msg:
            out = self.call(CmdCompact(), "Marta")
            self.assertIn("Marta's emergency compaction is under way: compacting when it "
                          "ends...", out)
            self.assertNotIn("Compacting Marta's history", out)
            self.model.release.set()
            self.assertTrue(wait_for(self.emergency).success)
            self.until(lambda: "Compaction of Marta" in self.told(msg),
                       "compact never reported")
            report = self.told(msg)
        # it ran after the emergency compaction, which brought the history under threshold:
        # beside it, it would have asked for a summary of its own; the admin is told what
        # the emergency compaction did first, so the skip reads as what it is
        waited = report.index("Marta's emergency compaction ended. Compacted Marta: ")
        self.assertLess(waited, report.index("Compaction of Marta skipped: below threshold"))
        self.assertNotIn("failed", report)
        self.assertEqual(self.model.asked, 1)
        # positive control: with nothing running, compact/force compacts at once
        with mock.patch.object(self.char1, "msg") as msg:
            self.fill(30)
            out = self.call(CmdCompact(), "/force Marta")
            self.assertIn("Compacting Marta's history (forced)...", out)
            self.until(lambda: "Compacted Marta" in self.told(msg), "compact/force never "
                       "reported")
        self.assertEqual(self.model.asked, 2)


class TestCompactAfterAnotherCompaction(AdminWatchCase):
    def test_compact_waits_for_a_compaction_that_is_not_the_npcs_memory_work(self):
        self.script.db.pre_compact_extraction_enabled = False
        self.fill(44)
        self.script.db.max_context_tokens = 2000  # a window to preserve, the rest to compact
        self.llm.enqueue(SUMMARY)
        self.script.ndb.compacting = True  # another's compaction (a cascade cycle, a compact)
        with mock.patch.object(self.char1, "msg") as msg:
            out = self.call(CmdCompact(), "/force Marta")
            # not skipped at once as "already compacting": it waits, and says so
            self.assertIn("Marta's compaction is under way: compacting when it ends...", out)
            self.assertNotIn("skipped", out)
            self.script.ndb.compacting = False
            self.until(lambda: "Compacted Marta" in self.told(msg), "compact never ran")
        self.assertEqual(len(self.llm.requests), 1)


class HeldExtraction:
    """The double's answers: the fact extraction waits for :attr:`release` (the hang guard at
    most) and
    journals nothing; summaries say :data:`SUMMARY`; :attr:`asked` counts what each kind was
    asked."""

    def __init__(self):
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.asked = {"extraction": 0, "summary": 0, "reply": 0}

    def __call__(self, body):
        kind = request_kind(body)
        with self.lock:
            self.asked[kind] += 1
        if kind == "extraction":
            self.release.wait(HANG_GUARD)
            return "TOOL: noop {}"
        return SUMMARY if kind == "summary" else "Aye."


@override_settings(AI_SLEEP_DURATION=60)
class TestCommandsDuringACompactsExtraction(AdminWatchCase):
    """An admin's ``compact`` reads the facts first (``rag_memory.compact_after_extraction``):
    from the start of that extraction its compaction is under way."""

    def setUp(self):
        self.model = HeldExtraction()
        self.llm_default = self.model
        super().setUp()
        self.addCleanup(self.model.release.set)
        self.fill(44)
        self.script.db.max_context_tokens = 2000  # a window to preserve, the rest to compact

    def test_aisleep_and_compact_say_at_once_that_it_is_under_way(self):
        with mock.patch.object(self.char1, "msg") as msg:
            # the control: nothing runs yet, so compact/force starts at once
            out = self.call(CmdCompact(), "/force Marta")
            self.assertIn("Compacting Marta's history (forced)...", out)
            self.until(lambda: self.model.asked["extraction"] == 1,
                       "the fact extraction was never asked for")
            self.assertEqual(self.model.asked["summary"], 0)  # still extracting
            out = self.call(CmdAISleep(), "Marta")
            self.assertIn("Marta's compaction is under way: the sleep work starts when it "
                          "ends, and Marta sleeps 60 s from then.", out)
            out = self.call(CmdCompact(), "Marta")
            self.assertIn("Marta's compaction is under way: compacting when it ends...", out)
            self.assertNotIn("Compacting Marta's history", out)
            self.model.release.set()
            self.until(lambda: "Compacted Marta" in self.told(msg), "compact never compacted")
            self.until(lambda: "Compaction of Marta" in self.told(msg),
                       "the second compact never reported")
            report = self.told(msg)
        # the second ran after the first, which left it nothing to do: beside it, it would
        # have read the facts again and asked for a summary of its own
        self.assertIn("Compaction of Marta skipped", report)
        self.assertEqual(self.model.asked["summary"], 1)
        self.assertFalse(self.script.ndb.compacting)  # lowered once it is done
