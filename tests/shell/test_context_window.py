"""
The model's context window, as the LLM client learns it: a setting, the embedded model's own
window, llama.cpp's ``/props``, vLLM's ``/v1/models``, or nothing; what such servers answer when a
request does not fit it; and the NPC's budget cut to it.
"""

import json
import socket
import time

from django.test import override_settings
from twisted.internet import defer
from twisted.trial import unittest

from ai_contrib.llm.client import LLMClient, LLMContextOverflowError

from tests.support.llm_double import LLMDouble
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for
from tests.support.waiting import HANG_GUARD


class DoubleClientTestCase(unittest.TestCase):
    """A trial test case whose LLM clients talk to an LLM double, both stopped after the test."""

    def _client(self, double):
        double.start()
        self.addCleanup(double.stop)
        # a one-letter key would be masked wherever that letter appears in an error body
        client = LLMClient(base_url=double.base_url, api_key="double-key", timeout=HANG_GUARD)
        self.addCleanup(client.close)
        # the double answers at once: its limits are hang guards, which no busy machine reaches
        client.WINDOW_TIMEOUT = HANG_GUARD
        return client


class TestDiscovery(DoubleClientTestCase):

    @defer.inlineCallbacks
    def test_llama_cpp_props_once_for_many_calls(self):
        double = LLMDouble(n_ctx=8192)
        client = self._client(double)
        self.assertIsNone(client.known_context_window)
        self.assertEqual((yield client.context_window()), 8192)
        self.assertEqual((yield client.context_window()), 8192)
        self.assertEqual(client.known_context_window, 8192)
        self.assertEqual(client.context_window_source, "llama.cpp /props")
        gets = double.gets
        self.assertEqual(len(gets), 1)

    @defer.inlineCallbacks
    def test_vllm_models_entry(self):
        client = self._client(LLMDouble(n_ctx=32768, style="vllm"))
        self.assertEqual((yield client.context_window()), 32768)
        self.assertEqual(client.context_window_source, "/v1/models")

    @defer.inlineCallbacks
    def test_a_server_that_says_nothing_gives_none_and_is_not_asked_again_at_once(self):
        double = LLMDouble()
        client = self._client(double)
        self.assertIsNone((yield client.context_window()))
        asked = len(double.gets)
        self.assertIsNone((yield client.context_window()))
        self.assertEqual(len(double.gets), asked)

    @defer.inlineCallbacks
    def test_the_setting_wins_and_the_embedded_window_is_known_at_once(self):
        double = LLMDouble(n_ctx=8192)
        client = self._client(double)
        with override_settings(AI_LLM_CONTEXT_WINDOW=4096):
            self.assertEqual(client.known_context_window, 4096)
            self.assertEqual((yield client.context_window()), 4096)
        self.assertEqual(double.gets, [])
        embedded = LLMClient(base_url="", timeout=HANG_GUARD)
        self.addCleanup(embedded.close)
        with override_settings(AI_EMBEDDED_N_CTX=8192, AI_LLM_CONTEXT_WINDOW=None):
            self.assertEqual(embedded.known_context_window, 8192)

    @defer.inlineCallbacks
    def test_callers_during_a_discovery_share_its_one_request(self):
        double = LLMDouble(n_ctx=8192)
        client = self._client(double)
        first, second = client.context_window(), client.context_window()
        self.assertEqual((yield defer.gatherResults([first, second])), [8192, 8192])
        self.assertEqual(double.gets, ["/props"])

    @defer.inlineCallbacks
    def test_a_failed_discovery_is_tried_again_after_the_retry_delay(self):
        double = LLMDouble()
        client = self._client(double)
        client.WINDOW_RETRY_SECONDS = 0  # the delay has passed
        self.assertIsNone((yield client.context_window()))
        double.n_ctx = 4096  # the server now reports one
        self.assertEqual((yield client.context_window()), 4096)
        self.assertEqual(client.known_context_window, 4096)

    @defer.inlineCallbacks
    def test_a_base_url_without_v1_finds_props_at_its_root(self):
        double = LLMDouble(n_ctx=2048)
        double.start()
        self.addCleanup(double.stop)
        client = LLMClient(base_url=f"http://127.0.0.1:{double.port}", timeout=HANG_GUARD)
        self.addCleanup(client.close)
        client.WINDOW_TIMEOUT = HANG_GUARD
        self.assertEqual((yield client.context_window()), 2048)
        self.assertEqual(double.gets, ["/props"])

    @defer.inlineCallbacks
    def test_a_server_that_never_answers_gives_none_within_the_discovery_timeout(self):
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the backlog; nothing is ever read or answered
        self.addCleanup(silent.close)
        # the client's own timeout is the hang guard: only the discovery timeout can end this
        client = LLMClient(base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
                           timeout=HANG_GUARD)
        self.addCleanup(client.close)
        client.WINDOW_TIMEOUT = 0.3
        started = time.monotonic()
        self.assertIsNone((yield client.context_window()))
        self.assertLess(time.monotonic() - started, HANG_GUARD)
        self.assertIsNone(client.known_context_window)


class TestOverflowFromTheServer(DoubleClientTestCase):
    """The double refuses what does not fit its window with the real servers' bodies, and the
    client turns that into LLMContextOverflowError."""

    @staticmethod
    def _user(chars):
        # the double counts len // 4 + 1 per message content, plus 4 per message
        return [{"role": "user", "content": "x" * chars}]

    @defer.inlineCallbacks
    def test_llama_cpp_refuses_a_prompt_that_reaches_n_ctx(self):
        double = LLMDouble(n_ctx=64)
        client = self._client(double)
        double.enqueue("it fits")
        err = None
        try:
            yield client.chat(self._user(236), max_tokens=16)  # 59 + 1 + 4 = 64 prompt tokens
        except LLMContextOverflowError as caught:
            err = caught
        self.assertIsNotNone(err, "a prompt of n_ctx tokens was accepted")
        self.assertEqual(err.status, 400)
        body = json.loads(err.body)["error"]
        self.assertEqual(body["type"], "exceed_context_size_error")
        self.assertEqual((body["n_prompt_tokens"], body["n_ctx"]), (64, 64))
        self.assertIn("exceeds the available context size", str(err))
        self.assertEqual(double.pending, 1)  # the refusal used up no queued answer
        # one token less fits, whatever max_tokens asks: llama.cpp counts the prompt only
        result = yield client.chat(self._user(232), max_tokens=1000)
        self.assertEqual(result.content, "it fits")

    @defer.inlineCallbacks
    def test_vllm_refuses_when_prompt_and_reply_exceed_max_model_len(self):
        double = LLMDouble(n_ctx=100, style="vllm")
        client = self._client(double)
        messages = self._user(76)  # 20 + 4 = 24 prompt tokens
        err = None
        try:
            yield client.chat(messages, max_tokens=77)
        except LLMContextOverflowError as caught:
            err = caught
        self.assertIsNotNone(err, "prompt + max_tokens over max_model_len was accepted")
        self.assertIn("maximum context length is 100 tokens", str(err))
        self.assertIn("requested 101 tokens", str(err))
        result = yield client.chat(messages, max_tokens=76)
        self.assertTrue(result.content.startswith("echo:"))

    @defer.inlineCallbacks
    def test_without_n_ctx_any_length_is_answered(self):
        client = self._client(LLMDouble())
        result = yield client.chat(self._user(400_000), max_tokens=16)
        self.assertTrue(result.content.startswith("echo:"))


class TestBudgetFromTheServer(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.llm.n_ctx = 2048

    def test_the_npc_budget_follows_the_window_the_server_reports(self):
        self.script.db.max_context_tokens = 100_000
        first = self.script.budget_info()  # starts the discovery; the setting applies meanwhile
        self.assertEqual(first.tokens, 100_000)
        from ai_contrib.llm.client import get_client

        wait_for(get_client().context_window())
        info = self.script.budget_info()
        self.assertEqual(info.window, 2048)
        self.assertLess(info.tokens, 2048)
        self.assertIn("llama.cpp /props", info.source)
