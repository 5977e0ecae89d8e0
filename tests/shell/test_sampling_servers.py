"""
The whole LLM path of an NPC (a reply, a fact extraction, a compaction summary) against a server
that refuses every request field OpenAI's API does not know, as OpenAI's API does, and against a
llama.cpp server that takes them (``docs/design.md``, "Sampling per server and model"). Real NPC,
real HTTP LLM double (strict or lenient).
"""

from unittest import mock

from django.test import override_settings

from ai_contrib import rag_memory
from ai_contrib.core.messages import is_marker
from ai_contrib.npc.extraction import run_pre_compaction_extraction

from tests.support.llm_double import (
    OPENAI_CHAT_FIELDS,
    OPENAI_COMPLETION_FIELDS,
    reply,
    request_kind,
    tool_calls,
)
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for

SMOLLM2_FILE = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
ANSWER = "Welcome, Wren. The east room is free."


class WholePath:
    """The three kinds of request an NPC makes, each asserted to reach the model's answer."""

    def reply_path(self):
        """Wren speaks; the NPC says the model's reply (not its fallback). -> the last reply
        request."""
        self.char1.key = "Wren"
        self.llm.enqueue(reply(ANSWER))
        self.script.receive_speech(self.char1, "Marta, have you a room for the night?")
        with mock.patch.object(self.char1, "msg") as msg:
            wait_for(self.script.run_tick())
        stored_reply = self.script.history[-1]
        self.assertEqual((stored_reply["role"], stored_reply["content"]), ("assistant", ANSWER))
        self.assertIn(ANSWER, " ".join(str(c) for c in msg.call_args_list))
        return [b for b in self.llm.requests if request_kind(b) == "reply"][-1]

    def extraction_path(self):
        """A fact the model journals through a tool call is in the journal. -> the requests."""
        self.char1.key = "Bob"
        self.fill(6, words=6)
        said = self.script.add_message(
            "user", "Between us: I am allergic to peanuts.", name="Bob",
            metadata={"speaker": self.char1.dbref, "audience": [self.char1.dbref]})
        fact = {"content": "Bob is allergic to peanuts.", "importance": 8,
                "source": [said["seq"]]}
        self.llm.enqueue(tool_calls([("add_journal_entry", fact)]), tool_calls([("noop", {})]))
        wait_for(run_pre_compaction_extraction(self.script, self.npc))
        facts = [e["content"] for e in self.npc.db.journal["entries"]
                 if e["source_type"] == "fact"]
        self.assertEqual(facts, ["Bob is allergic to peanuts."])
        return [b for b in self.llm.requests if request_kind(b) == "extraction"]

    def summary_path(self):
        """A compaction stores the model's own summary. -> the summary request."""
        self.fill(50)
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(reply("- Bob said line 0 word1 word2 word3 to Marta, then line 2.\n"
                               "- Marta said line 1 word4 word5 and line 3 word6 word7.\n"
                               "- Bob said line 4 word8 word9 and line 6 word10 word11."))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        self.assertFalse(result["fidelity_replaced"], result)  # the model's own summary
        marker = next(m for m in self.script.history if is_marker(m))
        self.assertIn("Bob said line 0 word1", marker["content"])
        [body] = [b for b in self.llm.requests if request_kind(b) == "summary"]
        return body

    def assert_standard(self, bodies):
        """Every request the double received holds only OpenAI's fields."""
        for call in self.llm.calls:
            known = (OPENAI_COMPLETION_FIELDS if call.path.endswith("/v1/completions")
                     else OPENAI_CHAT_FIELDS)
            self.assertLessEqual(set(call.body), known, call.body)
        self.assertTrue(bodies)


class AStrictServer(WholePath, NPCTestCase):
    """A server that refuses unknown fields (OpenAI's API): the defaults send none of them."""

    llm_options = {"strict": True}

    def test_a_reply_is_answered(self):
        self.assert_standard([self.reply_path()])

    def test_a_fact_is_extracted(self):
        self.assert_standard(self.extraction_path())

    def test_a_summary_is_written(self):
        self.assert_standard([self.summary_path()])

    def test_a_field_the_admin_set_is_refused_once_and_the_npc_still_answers(self):
        with override_settings(AI_LLM_REPEAT_PENALTY=1.1):
            body = self.reply_path()  # the second try, without the field
            summary = self.summary_path()
        refused, retried = [b for b in self.llm.requests if request_kind(b) == "reply"]
        self.assertEqual(refused["repeat_penalty"], 1.1)  # sent once, refused with HTTP 400
        self.assertEqual(retried["messages"], refused["messages"])  # the same reply, again
        self.assertNotIn("repeat_penalty", body)
        self.assertNotIn("repeat_penalty", summary)  # remembered for this server
        self.assertEqual(sum("repeat_penalty" in b for b in self.llm.requests), 1)


class ALlamaCppServer(WholePath, NPCTestCase):
    """The positive control: a lenient llama.cpp server whose model has a measured profile
    gets that profile's fields on the same path."""

    llm_options = {"model_path": SMOLLM2_FILE}

    def test_a_reply_carries_the_repeat_penalty_and_dry(self):
        body = self.reply_path()
        self.assertEqual((body["repeat_penalty"], body["dry_multiplier"]), (1.25, 0.8))
        self.assertIn("/props", self.llm.gets)

    def test_a_fact_extraction_carries_the_repeat_penalty_only(self):
        for body in self.extraction_path():
            self.assertEqual(body["repeat_penalty"], 1.25)
            self.assertNotIn("dry_multiplier", body)

    def test_a_summary_carries_the_repeat_penalty_only(self):
        body = self.summary_path()
        self.assertEqual(body["repeat_penalty"], 1.25)
        self.assertNotIn("dry_multiplier", body)


class ALlamaCppServerOfAnotherModel(WholePath, NPCTestCase):
    """The profile follows the model the server reports, not the one the game asks for: a
    llama.cpp server serving a model no profile names gets only OpenAI's fields, though
    ``AI_LLM_MODEL`` names the embedded model (whose profile :class:`ALlamaCppServer` gets)."""

    llm_options = {"model_path": "/models/qwen2.5-1.5b-instruct-q4_k_m.gguf"}

    @override_settings(AI_LLM_MODEL="SmolLM2-135M-Instruct.Q4_1.gguf")
    def test_a_reply_carries_no_profile_of_another_model(self):
        body = self.reply_path()
        self.assertIn("/props", self.llm.gets)  # the server was asked what it serves
        self.assertEqual(body["model"], "SmolLM2-135M-Instruct.Q4_1.gguf")
        self.assertNotIn("repeat_penalty", body)
        self.assertNotIn("dry_multiplier", body)
        self.assert_standard([body])
