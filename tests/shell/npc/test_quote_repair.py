"""
The quote repair (ai_contrib.npc.quote_repair): a summary and journal entries stored with a
quote nobody said, as older code stored them, lose that quote; what is true stays.
"""

from unittest import mock

from django.test import override_settings

from ai_contrib import rag_memory
from ai_contrib.core.messages import is_marker
from ai_contrib.core.quotes import QuoteCheck
from ai_contrib.memory.journal import add_entry, ensure_journal
from ai_contrib.npc.quote_repair import repair_quotes

from demo.replay import invented_quotes_from_log
from tests.support.conversations import tavern_talk
from tests.support.llm_double import reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for

INVENTED = "Wren said: \"My son is coming from the coast; he asks for Marta by name.\""
REAL = "Marta said: \"The east room is free: four silver a night, stabling one more.\""
SUMMARY = f"Wren booked the east room for three nights.\n- {INVENTED}\n- {REAL}"


class StoredQuotes(NPCTestCase):
    """A summary, its synthesis and three journal facts stored without the quote check."""

    def setUp(self):
        super().setUp()
        self.before_storing()
        self.char1.key, self.char2.key = "Wren", "Tamsin"
        tavern_talk(self.script)
        # stored as code without the quote check stored it: the summary and its synthesis
        self.llm.enqueue(reply(SUMMARY))
        with mock.patch("ai_contrib.npc.compaction_runner.check_quotes",
                        return_value=QuoteCheck()):
            result = stored(wait_for(rag_memory.compact_conversation_history(
                self.script, self.npc, force=True)))
        self.assertTrue(result["success"], result)
        self.assertFalse(result["fidelity_replaced"])
        journal = ensure_journal(self.npc.db.journal)
        self.fact = add_entry(journal, INVENTED, importance=7)["id"]
        self.true_fact = add_entry(journal, "Marta said: Two casks left.", importance=7)["id"]
        self.plain = add_entry(journal, "Wren stays three nights.", importance=5)["id"]
        self.npc.db.journal = journal

    def before_storing(self):
        """What a test case does before the texts are stored."""

    def entries(self):
        return {e["id"]: e for e in ensure_journal(self.npc.db.journal)["entries"]}


@override_settings(AI_MEMORY_ENABLED=False)  # the journal and the history are what it reads
class TestQuoteRepair(StoredQuotes):

    def test_invented_quotes_are_removed_and_real_ones_kept(self):
        marker = self.script.history[0]
        self.assertTrue(is_marker(marker))
        self.assertIn("My son", marker["content"])
        with mock.patch("ai_contrib.npc.quote_repair.logger.log_info") as log:
            report = stored(wait_for(repair_quotes(self.script, self.npc)))
        # the summary, its synthesis and the fact: one invented quote each
        self.assertEqual((report["quotes_removed"], report["summaries"], report["entries"]),
                         (3, 1, 2), report)
        self.assertEqual(report["checked"], 4)  # the marker and the three entries with quotes
        marker = self.script.history[0]
        self.assertTrue(is_marker(marker))
        self.assertNotIn("My son", marker["content"])
        self.assertIn("Wren booked the east room", marker["content"])  # the rest stays
        self.assertIn("The east room is free", marker["content"])  # and the real quote
        self.assertEqual(marker["metadata"]["quotes_removed"], 1)
        entries = self.entries()
        self.assertNotIn(self.fact, entries)  # nothing left of it: removed
        synthesis = [e for e in entries.values() if e["source_type"] == "compaction"]
        self.assertEqual(len(synthesis), 1)
        self.assertNotIn("My son", synthesis[0]["content"])
        self.assertIn("The east room is free", synthesis[0]["content"])
        # controls: a true quote and an entry without one are left as they were
        self.assertEqual(entries[self.true_fact]["content"], "Marta said: Two casks left.")
        self.assertEqual(entries[self.plain]["content"], "Wren stays three nights.")
        self.assertTrue(all(e.get("quotes_checked") for e in entries.values()))
        # the repair is an archive record: a crash before the checkpoint replays it
        [record] = list(self.script.runtime.archive.records(kinds=["mask"]))
        self.assertEqual(record["replacements"][0]["id"], marker["id"])
        self.assertNotIn("My son", record["replacements"][0]["content"])
        # the server's line gives the count, as the demo reads it
        [line] = [str(call.args[0]) for call in log.call_args_list]
        self.assertEqual(invented_quotes_from_log(line, npc=self.npc.key)["repaired"], 3, line)
        # and what was checked is not checked again, with no line
        with mock.patch("ai_contrib.npc.quote_repair.logger.log_info") as log:
            again = stored(wait_for(repair_quotes(self.script, self.npc)))
        self.assertEqual((again["checked"], again["quotes_removed"]), (0, 0))
        self.assertFalse(log.called)

    def test_a_sleep_checks_a_bounded_number_and_reports_the_count(self):
        report = stored(wait_for(repair_quotes(self.script, self.npc, limit=1)))
        self.assertEqual((report["checked"], report["quotes_removed"]), (1, 1))
        self.assertNotIn("My son", self.script.history[0]["content"])
        self.assertIn(self.fact, self.entries())  # the next sleep's work
        from ai_contrib.core.outcome import SleepResults, StepResult
        from ai_contrib.admin.sleep_report import describe_sleep

        line = describe_sleep(SleepResults(quote_repair=StepResult.of(report)))
        self.assertIn("1 quote(s) no one said removed (1 summaries, 0 journal entries)", line)
        report = stored(wait_for(repair_quotes(self.script, self.npc, limit=10)))
        self.assertEqual((report["checked"], report["quotes_removed"]), (3, 2))
        self.assertNotIn(self.fact, self.entries())

    def test_the_sleep_runs_the_repair_and_its_report_gives_the_count(self):
        from ai_contrib.admin.sleep_report import describe_sleep

        self.script.db.pre_compact_extraction_enabled = False
        results = wait_for(rag_memory.run_sleep_tick(self.script, self.npc))
        self.assertEqual(results.quote_repair.count("quotes_removed"), 3, results.quote_repair)
        self.assertIn("3 quote(s) no one said removed (1 summaries, 2 journal entries)",
                      describe_sleep(results, "Marta"))
        self.assertNotIn(self.fact, self.entries())
        self.assertIn(self.true_fact, self.entries())  # control
        # the next sleep finds nothing left to check, and its line says nothing of quotes
        results = wait_for(rag_memory.run_sleep_tick(self.script, self.npc))
        self.assertEqual(results.quote_repair.count("checked"), 0)
        self.assertNotIn("quote", describe_sleep(results, "Marta"))


class TestQuoteRepairInMem0(StoredQuotes):
    def before_storing(self):
        from ai_contrib.memory.mem0_payload import npc_agent_id
        from ai_contrib.memory.mem0_store import get_store

        # database ids repeat across tests; the process-wide store does not
        wait_for(get_store().delete_agent(npc_agent_id(self.npc)))

    def memories(self):
        from ai_contrib.memory.mem0_payload import npc_agent_id
        from ai_contrib.memory.mem0_store import get_store

        return [h["text"] for h in wait_for(get_store().list(npc_agent_id(self.npc)))]

    def test_the_memories_of_a_repaired_entry_go_and_what_is_left_comes_back(self):
        wait_for(rag_memory._consolidate_into_mem0(self.npc))
        journal = ensure_journal(self.npc.db.journal)
        self.assertEqual(len(journal["consolidated_entry_ids"]), 4)  # synthesis, three facts
        self.assertTrue(any("My son" in text for text in self.memories()))
        report = stored(wait_for(repair_quotes(self.script, self.npc)))
        self.assertEqual(report["entries"], 2, report)
        self.assertGreaterEqual(report["memories"], 2)
        memories = self.memories()
        self.assertFalse(any("My son" in text for text in memories), memories)
        self.assertTrue(any("Two casks left" in text for text in memories))  # control
        # the repaired synthesis is stored again, as it now reads
        again = stored(wait_for(rag_memory._consolidate_into_mem0(self.npc)))
        self.assertEqual(again["added"], 1, again)
        self.assertTrue(any("The east room is free" in text for text in self.memories()))
