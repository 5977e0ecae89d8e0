"""
Who writes a compaction's summary (``ai_contrib.npc.summary_writer``; ``docs/design.md``,
"Summary fidelity"), with a real AssistantScript, the real client and the HTTP LLM double: a
summariser whose summaries keep failing the fidelity check is asked only for every fifth
summary, and the extract of the span is written at once for the rest;
``AI_COMPACT_SUMMARY_WRITER`` "model" asks it still.
"""

from ai_contrib import rag_memory
from ai_contrib.core.fidelity import SUMMARY_MIN, SUMMARY_PROBE_EVERY
from ai_contrib.core.messages import is_marker

from tests.support.llm_double import reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for

#: what the embedded model once wrote for an 860-token span
JUNK = "Conversation log: --- 10/27 /3984 | #56-[...]"
#: a summary that says what the filler lines say
FAITHFUL = "Bob asked about rooms; Marta offered the east room for two silver."


class TestSummaryWriter(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.script.db.max_context_tokens = 1500
        self.script.db.pre_compact_extraction_enabled = False

    def compact(self, summary=None):
        """Forty more lines, then a forced compaction (``summary``: the double's answer, if
        one is asked for); returns the result and how many requests went out."""
        self.fill(40)
        if summary is not None:
            self.llm.enqueue(reply(summary))
        sent = len(self.llm.requests)
        result = stored(wait_for(rag_memory.compact_conversation_history(
            self.script, self.npc, force=True)))
        self.assertTrue(result.get("success"), result)
        return result, len(self.llm.requests) - sent

    def test_a_summariser_that_keeps_failing_is_not_asked_and_the_extract_is_written(self):
        # a kept summary counts for the model (control: the record starts with a success)
        result, asked = self.compact(FAITHFUL)
        self.assertEqual((asked, result["fidelity_replaced"]), (1, False))
        for _ in range(SUMMARY_MIN - 1):
            result, asked = self.compact(JUNK)
            self.assertEqual((asked, result["fidelity_replaced"]), (1, True))
        # three of the last four were replaced: the next is an extract, no request sent
        result, asked = self.compact()
        self.assertEqual(asked, 0)
        self.assertTrue(result["fidelity_replaced"])
        self.assertEqual(result["fidelity_reason"],
                         f"not asked: {SUMMARY_MIN - 1} of the model's last {SUMMARY_MIN} "
                         f"summaries failed the fidelity check")
        marker = next(m for m in self.script.history if is_marker(m))
        self.assertIn(" said: ", marker["content"])
        self.assertNotIn("3984", marker["content"])
        for _ in range(SUMMARY_PROBE_EVERY - 2):
            self.assertEqual(self.compact()[1], 0)
        # every fifth summary asks the model again, and learns from its answer
        result, asked = self.compact(FAITHFUL)
        self.assertEqual((asked, result["fidelity_replaced"]), (1, False))
        self.assertEqual(self.compact()[1], 0)  # three of the last five replaced: still over half
        # the NPC's own setting asks the model still
        self.script.db.compact_summary_writer = "model"
        result, asked = self.compact(FAITHFUL)
        self.assertEqual((asked, result["fidelity_replaced"]), (1, False))

    def test_extract_asks_no_model_from_the_first_compaction(self):
        self.script.db.compact_summary_writer = "extract"
        result, asked = self.compact()
        self.assertEqual(asked, 0)
        self.assertEqual(result["fidelity_reason"],
                         'not asked (AI_COMPACT_SUMMARY_WRITER is "extract")')
        # control: auto asks a model it has not judged yet
        self.script.db.compact_summary_writer = "auto"
        result, asked = self.compact(FAITHFUL)
        self.assertEqual(asked, 1)
