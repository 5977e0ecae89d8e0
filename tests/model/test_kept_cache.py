"""
The reply server's slot caches kept over a restart (``docs/design.md``, "Keeping the cache over
a restart"), on the REAL SmolLM2 GGUF served by xllamacpp: saved before the server stops,
restored into the next one, and the prompt they hold then costs a reply only its new tokens.
"""

import os
import tempfile
from unittest import mock

from django.test import override_settings
from twisted.internet import defer
from twisted.trial import unittest

from ai_contrib.llm.client import get_client, reset_client
from ai_contrib.llm.embedded import slot_directory, start_embedded_server, stop_embedded_server
from ai_contrib.llm.kept_slots import cache_layout, restore_reply_slots, save_reply_slots

MARTA = [{"role": "system", "content": "You are Marta, the innkeeper. " + " ".join(
    f"Guest {i} asked for a room and paid two silver." for i in range(60))}]
FENWICK = [{"role": "system", "content": "You are Fenwick, the smith. " + " ".join(
    f"Customer {i} asked for a nail and paid one copper." for i in range(60))}]
TURN = [{"role": "user", "content": "Marta, is there stew tonight?", "name": "Bob"}]
LATER = [{"role": "user", "content": "And a room for the night?", "name": "Bob"}]


class TestKeptSlots(unittest.TestCase):
    def setUp(self):
        self.kept_dir = tempfile.mkdtemp(prefix="kept-cache-test-")
        override = override_settings(AI_LLM_BASE_URL=None, AI_LLM_API_KEY=None,
                                     AI_EMBEDDED_CACHE_DIR=self.kept_dir, AI_LLM_TIMEOUT=120)
        override.enable()
        self.addCleanup(override.disable)
        self.addCleanup(reset_client)
        self.addCleanup(stop_embedded_server)

    @defer.inlineCallbacks
    def test_a_prompt_cached_before_a_stop_is_cached_after_the_next_start(self):
        yield reset_client()
        client = get_client()
        before = (yield client.chat(MARTA + TURN, max_tokens=1, purpose="reply")).prompt_stats()
        kept = yield save_reply_slots()
        # the slot that answered holds the prompt; an empty slot is not kept
        self.assertEqual(len(kept), 1, kept)
        self.assertGreaterEqual(kept[0]["tokens"], before["prompt_tokens"])
        self.assertEqual(os.listdir(self.kept_dir), [kept[0]["file"]])
        self.assertNotIn(kept[0]["file"], os.listdir(slot_directory()))

        yield stop_embedded_server()
        yield start_embedded_server()
        restored = yield restore_reply_slots(kept)
        self.assertEqual(restored, kept[0]["tokens"])
        self.assertEqual(os.listdir(self.kept_dir), [])  # tried once: the file is gone
        self.assertNotIn(kept[0]["file"], os.listdir(slot_directory()))

        again = (yield client.chat(MARTA + TURN + LATER, max_tokens=4,
                                   purpose="reply")).prompt_stats()
        # positive control: a prompt of the same size that no slot holds
        cold = (yield client.chat(FENWICK + LATER, max_tokens=4, purpose="reply")).prompt_stats()
        self.assertGreater(cold["evaluated_tokens"], 500)
        # the new server evaluated only what followed the kept prompt
        self.assertGreaterEqual(again["cached_tokens"], before["prompt_tokens"] - 8)
        self.assertLess(again["evaluated_tokens"], 40)

    @defer.inlineCallbacks
    def test_no_server_nothing_kept_and_the_layout_names_the_model_and_the_slots(self):
        yield reset_client()
        self.assertEqual((yield save_reply_slots()), [])  # no reply server has started
        layout = cache_layout()
        with override_settings(AI_EMBEDDED_SLOTS=3):
            self.assertNotEqual(cache_layout(), layout)
        with override_settings(AI_EMBEDDED_N_CTX=2048):
            self.assertNotEqual(cache_layout(), layout)
        self.assertEqual(cache_layout(), layout)
        self.assertTrue(os.path.isfile(layout["model"]))


class TestShutdownHold(unittest.TestCase):
    """``startup._held``: what a stopping game's reactor waits for (``startup.KEEP_HOLD``)."""

    @defer.inlineCallbacks
    def test_the_hold_ends_with_the_work_or_at_its_limit(self):
        from twisted.internet import reactor, task

        from ai_contrib.startup import _held

        work = defer.Deferred()
        held = _held(work, 60)
        self.assertFalse(held.called)
        reactor.callLater(0, work.callback, "kept")
        self.assertIsNone((yield held))
        self.assertEqual((yield work), "kept")  # the work's result is its own callbacks'

        clock = task.Clock()
        with mock.patch("twisted.internet.reactor", clock):
            never = defer.Deferred()
            held = _held(never, 1.0)
            clock.advance(0.9)
            self.assertFalse(held.called)
            clock.advance(0.2)  # a save that hangs is given up
            self.assertTrue(held.called)
        never.callback(None)
