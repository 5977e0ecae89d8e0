"""
Memory work hurried near the budget (``docs/design.md``, "Hurried near the budget"): a real
``AssistantScript`` whose emergency compaction is started by its own tick, the model's requests
held open by the HTTP double on 127.0.0.1, and the tick that stops waiting for them once the
talk brings the history to the hurry threshold.
"""

import threading

from ai_contrib.core.messages import is_marker
from ai_contrib.core.tick import hurry_at, hurry_threshold
from ai_contrib.llm.client import get_client
from ai_contrib.npc.extractor import grounding_record
from ai_contrib.npc.hurry import HURRIED
from ai_contrib.npc.summary_writer import summary_record

from tests.support.llm_double import hold, reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for, wait_until

FACT_LINE = "I saw a black bear on the north road."


class TestHurriedNearTheBudget(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.gate = threading.Event()
        self.addCleanup(self.gate.set)
        self.script.db.compact_preserve_max_fraction = 0.3

    def start(self, lines=50):
        """Fill the history past the emergency threshold, under the hurry threshold, and let
        the tick start the emergency compaction; its first request is held."""
        self.script.add_message("user", FACT_LINE, name="Wren")
        self.fill(lines)
        self.script.db.max_context_tokens = int(self.script.token_count() / 0.83)
        usage = self.script.token_usage()
        self.assertGreaterEqual(usage, 0.8)
        self.assertLess(usage, hurry_threshold(0.8))
        work = self.script.ticking.start_memory_work()
        self.assertIsNotNone(work)
        wait_until(lambda: self.llm.requests)
        return work

    def hurry_at(self):
        """Where the work that began is hurried: the talk must add a tenth of the budget."""
        began = self.script.ndb.work_began
        self.assertGreaterEqual(began, 0.8)
        self.assertGreater(hurry_at(began, 0.8), 0.9)
        return hurry_at(began, 0.8)

    def talk_to(self, share):
        """Lines said while the model writes, until the history holds ``share`` of its budget."""
        said = []
        while self.script.token_usage() < share:
            said.append(self.script.add_message(
                "user", f"later line {len(said)} about the stables and the mill", name="Bob"))
        return said

    def test_an_extraction_the_talk_outruns_is_finished_by_rules_and_an_extract(self):
        record = grounding_record(get_client(), self.script.cfg("llm_model"))
        outcomes = list(record)
        self.llm.enqueue(hold(self.gate, then=reply("ok")))
        work = self.start()
        # control: under the threshold the tick leaves the model's extraction running
        self.talk_to(0.85)
        wait_for(self.script.run_tick())
        self.assertFalse(work.called)
        self.assertEqual(len(self.llm.requests), 1)
        # the talk reaches the threshold: the next tick stops waiting for the model
        later = self.talk_to(self.hurry_at())
        wait_for(self.script.run_tick())
        result = stored(wait_for(work))
        self.assertTrue(result["success"], result)
        self.assertEqual(len(self.llm.requests), 1)  # no summary was asked for either
        marker = self.script.history[0]
        self.assertTrue(is_marker(marker))
        self.assertEqual(marker["metadata"]["fidelity"]["model_reason"], HURRIED)
        # what players said in the span was journaled by rule before it was replaced
        journal = [e["content"] for e in self.npc.db.journal["entries"]]
        self.assertIn("Wren saw a black bear on the north road.", journal)
        # the model's cancelled run counts as one failed fact: the extractor learns from it
        self.assertEqual(list(record), outcomes + [False])
        # the lines said meanwhile stay, and the history is back under its budget
        kept = {m["id"] for m in self.script.history}
        self.assertTrue(all(m["id"] in kept for m in later))
        self.assertLess(self.script.token_usage(), 1.0)

    def test_a_summary_the_talk_outruns_is_an_extract_and_counts_as_not_kept(self):
        self.script.db.pre_compact_extractor = "rule"  # the summary is the first request
        record = summary_record(self.script.cfg("compact_model") or self.script.cfg("llm_model"))
        outcomes = list(record.outcomes)
        self.llm.enqueue(hold(self.gate, then=reply("Bob asked about the stables.")))
        work = self.start()
        self.assertIn("write my notes now", str(self.llm.requests[0]["messages"]).lower())
        # control: under the threshold the summary is still waited for
        self.talk_to(0.85)
        wait_for(self.script.run_tick())
        self.assertFalse(work.called)
        self.talk_to(self.hurry_at())
        wait_for(self.script.run_tick())
        result = stored(wait_for(work))
        self.assertTrue(result["success"], result)
        fidelity = self.script.history[0]["metadata"]["fidelity"]
        self.assertTrue(fidelity["replaced"])
        self.assertEqual(fidelity["model_reason"], HURRIED)
        self.assertNotIn("Bob asked about the stables.", self.script.history[0]["content"])
        self.assertIn(" said: ", self.script.history[0]["content"])
        # a summary that came too late counts as one not kept: the writer learns from it
        self.assertEqual((list(record.outcomes), record.skipped), (outcomes + [False], 0))
        self.assertLess(self.script.token_usage(), 1.0)

    def test_the_timer_hurries_the_work_while_a_tick_is_writing_a_reply(self):
        self.llm.enqueue(hold(self.gate, then=reply("ok")))
        work = self.start()
        # a reply is being written: no tick runs, the timer fires as Evennia's does
        self.script.ndb.busy = True
        self.addCleanup(setattr, self.script.ndb, "busy", False)
        self.talk_to(0.85)
        self.script.at_repeat()  # control: under the hurry point the model is waited for
        self.assertFalse(work.called)
        self.talk_to(self.hurry_at())
        self.script.at_repeat()
        result = stored(wait_for(work))
        self.assertTrue(result["success"], result)
        self.assertEqual(self.script.history[0]["metadata"]["fidelity"]["model_reason"],
                         HURRIED)
        self.assertLess(self.script.token_usage(), 1.0)
