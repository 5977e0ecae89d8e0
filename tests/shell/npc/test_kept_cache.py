"""
The record of the prompt cache kept over a restart (``ai_contrib.npc.kept_cache``): read once,
restored only into a server of the layout it was saved under, never for an external server.
The whole round trip through ``evennia reboot`` is ``tests/e2e/test_restart.py``; the slots'
save and restore on the real model, ``tests/model/test_kept_cache.py``.
"""

import os
import tempfile

from django.test import override_settings
from evennia.server.models import ServerConfig

from ai_contrib.llm.client import reset_client
from ai_contrib.llm.kept_slots import cache_layout
from ai_contrib.npc.kept_cache import KEY, keep_on_stop, keeping, restore_on_start
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for

PROMPT = [{"role": "system", "content": "You are Marta, the innkeeper."}]


class TestKeptCacheRecord(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.kept_dir = tempfile.mkdtemp(prefix="kept-record-")
        self.script.ndb.server_prompt = PROMPT

    def embedded(self):
        """Settings for a client on the embedded servers (none is started: no request is
        made), the kept files in this test's directory."""
        override = override_settings(AI_LLM_BASE_URL=None, AI_LLM_API_KEY=None,
                                     AI_EMBEDDED_CACHE_DIR=self.kept_dir)
        override.enable()
        self.addCleanup(override.disable)
        wait_for(reset_client())

    def kept_file(self):
        name = "kept-0-abc.bin"
        with open(os.path.join(self.kept_dir, name), "wb") as f:
            f.write(b"\0" * 64)
        return [{"slot": 0, "file": name, "tokens": 500}]

    def test_an_external_server_keeps_its_own_cache(self):
        self.assertFalse(keeping())  # the double is AI_LLM_BASE_URL
        self.assertEqual(wait_for(keep_on_stop([(self.npc, self.script)])), [])
        self.assertIsNone(ServerConfig.objects.conf(KEY, default=None))
        self.embedded()
        self.assertTrue(keeping())  # positive control: the embedded servers keep it
        with override_settings(AI_PROMPT_CACHE_KEEP=False):
            self.assertFalse(keeping())

    def test_a_record_of_another_layout_is_removed_with_its_files_and_restores_nothing(self):
        self.embedded()
        layout = cache_layout()
        ServerConfig.objects.conf(KEY, value={
            "layout": {**layout, "slots": layout["slots"] + 1}, "slots": self.kept_file(),
            "prompts": {self.npc.id: {"messages": PROMPT, "head": ("m1",)}}, "speed": 90.0})
        self.script.ndb.server_prompt = None

        def find(ids):
            return [(self.npc, self.script)] if self.npc.id in ids else []

        self.assertEqual(wait_for(restore_on_start(find)), set())
        self.assertIsNone(ServerConfig.objects.conf(KEY, default=None))  # tried once
        self.assertEqual(os.listdir(self.kept_dir), [])
        self.assertIsNone(self.script.ndb.server_prompt)
        # nothing kept: nothing to do
        self.assertEqual(wait_for(restore_on_start(find)), set())
