"""
The embedded model server: the REAL SmolLM2 GGUF served by xllamacpp in a child process, driven
through LLMClient; its failure modes; the subprocess variant for scripts; the server hooks.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from unittest import mock

import pytest
from django.test import override_settings
from twisted.internet import defer
from twisted.trial import unittest

from ai_contrib import startup
from ai_contrib.llm import embedded
from ai_contrib.llm.client import LLMClient, LLMHTTPError
from ai_contrib.llm.handover import warm_and_hand_over
from ai_contrib.llm.embedded import (
    EmbeddedServerError,
    EmbeddedServerStopped,
    EmbeddedServerProcess,
    running_server,
    start_embedded_server,
    stop_embedded_server,
)
from tests.support.paths import ROOT

PROMPT = [
    {"role": "system", "content": "You are Bob, a friendly innkeeper."},
    {"role": "user", "content": "Hello! What is your name?", "name": "Old Tom"},
]


def process_gone(pid):
    """True if ``pid`` no longer runs (absent, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pid, limit=15.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.05)
    return False



def _niceness(pid):
    """The scheduling niceness of process ``pid`` (field 19 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])

class TestEmbeddedServer(unittest.TestCase):
    def tearDown(self):
        return stop_embedded_server()

    @defer.inlineCallbacks
    def test_real_model_answers_through_the_client_and_stops(self):
        first, second = start_embedded_server(), start_embedded_server()  # one shared start
        server = yield first
        self.assertIs((yield second), server)
        self.assertIs((yield start_embedded_server()), server)
        self.assertIs(running_server(), server)
        self.assertTrue(server.base_url.startswith("http://127.0.0.1:"))
        self.assertTrue(server.base_url.endswith("/v1"))
        self.assertNotIn(server.api_key, repr(server))
        self.assertFalse(process_gone(server.pid))

        client = LLMClient(base_url=server.base_url, api_key=server.api_key, timeout=60)
        self.addCleanup(client.close)
        result = yield client.chat(PROMPT, max_tokens=24)
        self.assertTrue(result.content.strip())
        self.assertIn(result.finish_reason, ("stop", "length"))
        self.assertGreater(result.usage["prompt_tokens"], 0)
        self.assertLessEqual(result.usage["completion_tokens"], 24)

        # base-model prompts go to /completions with no chat template (docs/design.md,
        # "Structured summaries")
        result = yield client.complete(
            "Summarize these memories in 2-3 sentences:\nBob: my horse is called Pepper.\n\n"
            "SUMMARY:\n", max_tokens=16, temperature=0.0,
        )
        self.assertTrue(result.content.strip())
        self.assertLessEqual(result.usage["completion_tokens"], 16)

        # the random key is enforced
        stranger = LLMClient(base_url=server.base_url, api_key="wrong", timeout=60)
        self.addCleanup(stranger.close)
        err = yield self.assertFailure(stranger.chat(PROMPT, max_tokens=4), LLMHTTPError)
        self.assertEqual(err.status, 401)

        yield stop_embedded_server()
        self.assertTrue(process_gone(server.pid))
        self.assertIsNone(running_server())
        yield stop_embedded_server()  # twice is fine

    @defer.inlineCallbacks
    def test_memory_work_has_a_server_process_of_its_own(self):
        with override_settings(AI_LLM_BASE_URL=None, AI_LLM_API_KEY=None,
                               AI_EMBEDDED_MEMORY_SERVER=True):
            client = LLMClient(timeout=60)
            self.addCleanup(client.close)
            reply = yield client.chat(PROMPT, max_tokens=8, purpose="reply")
            summary = yield client.chat(PROMPT, max_tokens=8, purpose="summary")
            replies, memory = running_server(), running_server("memory")
        self.assertTrue(reply.content.strip() and summary.content.strip())
        self.assertNotEqual(replies.pid, memory.pid)
        with open(f"/proc/{memory.pid}/cmdline", "rb") as f:
            config = json.loads(f.read().split(b"\0")[2])
        with open(f"/proc/{replies.pid}/cmdline", "rb") as f:
            reply_config = json.loads(f.read().split(b"\0")[2])
        # one thread; as many slots as the reply server, whose slots take its saved caches
        self.assertEqual((config["threads"], config["batch_threads"]), (1, 1))
        self.assertEqual((config["slots"], config["n_ctx"]),
                         (reply_config["slots"], reply_config["n_ctx"]))
        # the memory server yields the cores to replies: its process runs at a higher niceness
        self.assertEqual(_niceness(memory.pid) - _niceness(replies.pid),
                         embedded.MEMORY_SERVER_NICE)
        yield stop_embedded_server()
        self.assertTrue(wait_gone(replies.pid) and wait_gone(memory.pid))

        with override_settings(AI_EMBEDDED_MEMORY_SERVER=False):
            yield client.chat(PROMPT, max_tokens=4, purpose="extraction")
            self.assertIs(running_server("memory"), running_server())
        self.assertEqual(list(embedded._children), ["reply"])

    @defer.inlineCallbacks
    def test_a_warm_up_the_memory_server_evaluates_is_handed_to_the_reply_server(self):
        # docs/design.md, "Warm-ups handed over": llama.cpp's slot save and restore between
        # the two processes
        start = [{"role": "system", "content": "You are Marta, the innkeeper. " + " ".join(
            f"Guest {i} asked for a room and paid two silver." for i in range(60))}]
        other = [{"role": "system", "content": "You are Fenwick, the smith. " + " ".join(
            f"Customer {i} asked for a nail and paid one copper." for i in range(60))}]
        turn = [{"role": "user", "content": "Marta, is there stew tonight?", "name": "Bob"}]
        with override_settings(AI_LLM_BASE_URL=None, AI_LLM_API_KEY=None,
                               AI_EMBEDDED_MEMORY_SERVER=True):
            client = LLMClient(timeout=120)
            self.addCleanup(client.close)
            with mock.patch("ai_contrib.llm.handover.get_client", return_value=client):
                warm, restored = yield warm_and_hand_over(start, timeout=120)
            evaluated = warm.prompt_stats()
            self.assertGreater(evaluated["prompt_tokens"], 500)
            # the cache ends before the chat template's opening of the reply to come
            self.assertGreaterEqual(restored, evaluated["prompt_tokens"] - 4)
            self.assertEqual(os.listdir(embedded.slot_directory()), [])  # the file is gone
            reply = (yield client.chat(start + turn, max_tokens=4, purpose="reply")).prompt_stats()
            # positive control: a prompt of the same size that no slot holds
            cold = (yield client.chat(other + turn, max_tokens=4, purpose="reply")).prompt_stats()
        # the reply server evaluated the turn only: the rest came from the memory server
        self.assertGreaterEqual(reply["cached_tokens"], evaluated["prompt_tokens"] - 8)
        self.assertLess(reply["evaluated_tokens"], 40)
        self.assertGreater(cold["evaluated_tokens"], 500)

    @defer.inlineCallbacks
    def test_client_without_base_url_starts_the_embedded_server(self):
        with override_settings(AI_LLM_BASE_URL=None, AI_LLM_API_KEY=None):
            client = LLMClient(timeout=60)
        self.addCleanup(client.close)
        self.assertTrue(client.embedded)
        self.assertIsNone(running_server())
        result = yield client.chat(PROMPT, max_tokens=8)
        self.assertTrue(result.content.strip())
        server = running_server()
        self.assertIsNotNone(server)
        # a crashed child is replaced on the next request
        os.kill(server.pid, 9)
        yield self.until(lambda: running_server() is None)
        result = yield client.chat(PROMPT, max_tokens=8)
        self.assertTrue(result.content.strip())
        self.assertNotEqual(running_server().pid, server.pid)

    @defer.inlineCallbacks
    def test_stop_while_starting(self):
        d = start_embedded_server()
        pid = embedded._children["reply"].transport.pid
        yield stop_embedded_server()
        self.assertTrue(process_gone(pid))
        err = yield self.assertFailure(d, EmbeddedServerStopped)
        self.assertIn("stopped before it was ready", str(err))

    @defer.inlineCallbacks
    def test_missing_model_file(self):
        with override_settings(AI_EMBEDDED_MODEL_PATH="/nonexistent/model.gguf"):
            d = start_embedded_server()
        err = yield self.assertFailure(d, EmbeddedServerError)
        self.assertIn("/nonexistent/model.gguf", str(err))
        self.assertEqual(embedded._children, {})

    @defer.inlineCallbacks
    def test_child_dying_before_ready_reports_its_stderr(self):
        fd, bogus = tempfile.mkstemp(suffix=".gguf")  # trial's mktemp writes into the cwd
        self.addCleanup(os.remove, bogus)
        with os.fdopen(fd, "wb") as f:
            f.write(b"this is not a GGUF model" * 10)
        with override_settings(AI_EMBEDDED_MODEL_PATH=bogus):
            d = start_embedded_server()
        err = yield self.assertFailure(d, EmbeddedServerError)
        self.assertIn("exited before it was ready", str(err))
        self.assertIn("failed to start", str(err))  # from the child's stderr
        self.assertIsNone(running_server())

    @defer.inlineCallbacks
    def test_server_hooks(self):
        with override_settings(AI_LLM_BASE_URL="http://127.0.0.1:9/v1"):
            result = yield startup.at_server_start()
        self.assertIsNone(result)
        self.assertEqual(embedded._children, {})  # an external server: nothing started

        with override_settings(AI_LLM_BASE_URL=None):
            server = yield startup.at_server_start()
            again = yield startup.at_server_start()
        self.assertIs(server, again)
        yield startup.at_server_stop()
        yield startup.at_server_stop()
        self.assertTrue(process_gone(server.pid))

    @defer.inlineCallbacks
    def until(self, predicate, limit=15.0):
        from twisted.internet import reactor, task

        deadline = time.monotonic() + limit
        while not predicate():
            if time.monotonic() > deadline:
                self.fail("condition not reached")
            yield task.deferLater(reactor, 0.05, lambda: None)


# ---- the subprocess variant for scripts -------------------------------------------------------


def _chat(server, key, max_tokens=8):
    req = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps({"messages": PROMPT[1:], "max_tokens": max_tokens}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_embedded_server_process_context_manager():
    with EmbeddedServerProcess() as server:
        data = _chat(server, server.api_key)
        assert data["choices"][0]["message"]["content"].strip()
        with pytest.raises(urllib.error.HTTPError) as info:
            _chat(server, "wrong")
        assert info.value.code == 401
        pid = server.pid
    assert process_gone(pid)


def test_embedded_server_process_bad_model(tmp_path):
    bogus = tmp_path / "bad.gguf"
    bogus.write_bytes(b"nope" * 100)
    with override_settings(AI_EMBEDDED_MODEL_PATH=str(bogus)):
        with pytest.raises(EmbeddedServerError, match="failed to start"):
            EmbeddedServerProcess().start()


def test_child_dies_with_a_killed_parent():
    """kill -9 of the game process must not orphan the model server (it would keep its port)."""
    script = (
        "from ai_contrib.llm.embedded import EmbeddedServerProcess\n"
        "s = EmbeddedServerProcess().start()\n"
        "print(s.pid, flush=True)\n"
        "import time; time.sleep(120)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    try:
        child_pid = int(parent.stdout.readline())
        assert not process_gone(child_pid)
        parent.kill()
        parent.wait()
        assert wait_gone(child_pid), "the model server outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()


def test_prompt_evaluation_threads_apart_from_generation_threads():
    """Generation keeps AI_EMBEDDED_THREADS; prompt evaluation gets the CPUs less one (1 to 4) or
    the AI_EMBEDDED_BATCH_THREADS setting."""
    def config():
        argv, _env = embedded.child_invocation("key")
        return json.loads(argv[2])

    with override_settings(AI_EMBEDDED_THREADS=1, AI_EMBEDDED_BATCH_THREADS=None):
        cfg = config()
        assert cfg["threads"] == 1
        assert cfg["batch_threads"] == max(1, min(4, (os.cpu_count() or 1) - 1))
    with override_settings(AI_EMBEDDED_BATCH_THREADS=3):
        assert config()["batch_threads"] == 3


def test_the_client_weighs_cancels_against_the_step_the_child_is_given():
    """The embedded server's evaluation step is set, not left to llama.cpp, and it is the one
    the client counts on when it weighs cancelling a warm-up; another server's is unknown."""
    from ai_contrib.llm.client import LLMClient

    argv, _env = embedded.child_invocation("key")
    step = json.loads(argv[2])["n_batch"]
    assert step == embedded.EVALUATION_STEP_TOKENS
    assert LLMClient(base_url="http://127.0.0.1:9/v1", embedded=True).evaluation_step == step
    assert LLMClient(base_url="http://127.0.0.1:9/v1").evaluation_step is None


def test_flash_attention_setting_reaches_the_child():
    """AI_EMBEDDED_FLASH_ATTENTION is off by default (slower generation on a CPU), and True,
    "auto" and environment strings map to the child's flash_attn; anything else is refused."""
    def flash():
        argv, _env = embedded.child_invocation("key")
        return json.loads(argv[2])["flash_attn"]

    assert flash() == "off"
    for value, expected in ((True, "on"), (False, "off"), ("auto", "auto"), (" AUTO ", "auto"),
                            ("true", "on"), ("off", "off"), ("1", "on")):
        with override_settings(AI_EMBEDDED_FLASH_ATTENTION=value):
            assert flash() == expected, value
    with override_settings(AI_EMBEDDED_FLASH_ATTENTION="sometimes"):
        with pytest.raises(ValueError, match="AI_EMBEDDED_FLASH_ATTENTION"):
            flash()


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_the_real_model_answers_with_each_flash_attention_mode(mode):
    """The child hands each mode to llama.cpp and the model still answers (the default, off, is
    served by every other test here)."""
    with override_settings(AI_EMBEDDED_FLASH_ATTENTION=mode):
        with EmbeddedServerProcess() as server:
            data = _chat(server, server.api_key)
    assert data["choices"][0]["message"]["content"].strip()
