"""
Pre-compaction extraction on the real embedded SmolLM2-135M: an AssistantScript in Evennia's test
harness whose facts the model extracts with the structured-output schema.
"""

from django.test import override_settings

from ai_contrib.core.fidelity import fact_problem, source_text
from ai_contrib.npc.extraction import run_pre_compaction_extraction
from tests.support.conversations import BOOKING
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for


class TestEmbeddedModel(NPCTestCase):
    """The real embedded SmolLM2-135M, asked with the structured-output schema."""

    CONVERSATION = BOOKING

    def setUp(self):
        super().setUp()
        from ai_contrib.llm.client import LLMClient
        from ai_contrib.llm.embedded import EmbeddedServerProcess

        self.added = [self.script.add_message(role, text, name=name)
                      for role, name, text in self.CONVERSATION]
        # the subprocess form: this test iterates the reactor by hand, which reaps no child
        process = EmbeddedServerProcess()
        server = process.__enter__()
        self.addCleanup(process.__exit__, None, None, None)
        self.client = LLMClient(base_url=server.base_url, api_key=server.api_key, timeout=300)
        self.addCleanup(lambda: wait_for(self.client.close()))

    def test_extraction_journals_valid_facts(self):
        # three sleep phases' extractions (five rounds each, pre_compact_max_iterations); a
        # single one journals something in about three runs of five, so each is seeded
        # (AI_LLM_SEED, which llama.cpp honours) to make the test repeatable
        results = []
        for seed in (1, 2, 3):
            # the model's own extraction, whatever its record (AI_PRE_COMPACT_EXTRACTOR "auto"
            # would go by rule once the model's facts failed: tests/shell/npc/test_extractor.py)
            with override_settings(AI_LLM_SEED=seed, AI_PRE_COMPACT_EXTRACTOR="model"):
                results.append(stored(wait_for(
                    run_pre_compaction_extraction(self.script, self.npc, max_iterations=5,
                                                  client=self.client),
                    timeout=600,
                )))
        for result in results:
            self.assertTrue(result["success"], result)
            self.assertIn("structured", result["modes"])
        recorded = sum(r["facts_recorded"] + r["observations_recorded"] for r in results)
        self.assertGreaterEqual(recorded, 1, results)
        facts = [e for e in self.npc.db.journal["entries"]
                 if e["source_type"] in ("fact", "observation")]
        self.assertEqual(len(facts), recorded)
        source = source_text(self.added)
        ids = {m["id"] for m in self.added}
        for entry in facts:
            self.assertTrue(entry["content"].strip())
            self.assertTrue(1 <= entry["importance"] <= 10)
            # provenance from the cited (or shown) messages, never from the model
            self.assertTrue(set(entry["source_ids"]) <= ids, entry)
            self.assertIn(entry.get("speaker"), ("Bob", "Marta", None))
            # grounded in what was said, and not the prompt's example
            self.assertEqual(fact_problem(entry["content"], source), "", entry)
            self.assertNotIn("peanuts", entry["content"])
            print("journaled:", entry["content"], entry["importance"], entry.get("speaker"))
