"""
One table of options and one resolver (``ai_contrib.settings``; ``docs/design.md``, "Per-NPC
Attributes"): the NPC's Attribute, else the game's ``AI_<NAME>`` setting, else the default,
read when the option is used.
"""

from dataclasses import asdict
from unittest import mock

from django.test import override_settings

from ai_contrib import settings as ai_settings
from ai_contrib.memory.mem0_config import MEMORY_DEFAULTS, memory_config
from ai_contrib.npc import recall
from ai_contrib.typeclasses import CONFIG_ATTRIBUTES

from tests.support.npc_fixtures import NPCTestCase


class TestOneTable:
    def test_memory_options_are_rows_of_the_one_table(self):
        assert set(MEMORY_DEFAULTS) == set(ai_settings.MEMORY_OPTIONS)
        assert set(MEMORY_DEFAULTS) < set(ai_settings.DEFAULTS)
        assert all(MEMORY_DEFAULTS[k] == ai_settings.DEFAULTS[k] for k in MEMORY_DEFAULTS)
        assert set(memory_config()) == set(MEMORY_DEFAULTS)

    def test_unknown_names_raise_naming_the_option(self):
        for call in (ai_settings.get_setting, ai_settings.option_value,
                     ai_settings.resolve_option):
            try:
                call("compact_sleep_treshold")
            except KeyError as err:
                assert "compact_sleep_treshold" in str(err)
            else:
                raise AssertionError(f"{call.__name__} accepted an unknown option")

    def test_game_setting_then_default_without_an_npc(self):
        with override_settings(AI_MEMORY_RRF_K=9):
            assert ai_settings.resolve_option("memory_rrf_k") == (9, "AI_MEMORY_RRF_K")
            assert ai_settings.get_setting("MEMORY_RRF_K") == 9
        assert ai_settings.resolve_option("MEMORY_RRF_K") == (
            ai_settings.DEFAULTS["MEMORY_RRF_K"], ai_settings.DEFAULT_SOURCE)


class TestResolvedPerNPC(NPCTestCase):
    def test_no_option_is_copied_into_attributes_at_creation(self):
        for name in CONFIG_ATTRIBUTES:
            self.assertFalse(self.script.attributes.has(name), name)

    def test_a_game_wide_change_reaches_an_existing_npc(self):
        self.assertEqual(self.script.cfg("compact_sleep_threshold"), 0.7)
        with override_settings(AI_COMPACT_SLEEP_THRESHOLD=0.55, AI_MAX_CONTEXT_TOKENS=4321):
            self.assertEqual(self.script.cfg("compact_sleep_threshold"), 0.55)
            self.assertEqual(self.script.budget_info().configured, 4321)
        self.assertEqual(self.script.cfg("compact_sleep_threshold"), 0.7)

    def test_the_npc_attribute_overrides_and_none_follows_the_game_again(self):
        with override_settings(AI_COMPACT_SLEEP_THRESHOLD=0.55):
            self.script.db.compact_sleep_threshold = 0.6
            self.assertEqual(self.script.cfg("compact_sleep_threshold"), 0.6)
            self.assertEqual(ai_settings.resolve_option("compact_sleep_threshold", self.script),
                             (0.6, ai_settings.NPC_SOURCE))
            self.script.db.compact_sleep_threshold = None
            self.assertEqual(self.script.cfg("compact_sleep_threshold"), 0.55)

    def test_a_memory_option_set_per_npc_is_used(self):
        self.assertEqual(self.script.cfg("memory_retrieval_max_items"),
                         MEMORY_DEFAULTS["MEMORY_RETRIEVAL_MAX_ITEMS"])
        self.script.db.memory_retrieval_max_items = 3
        self.script.db.memory_rrf_k = 11
        with mock.patch.object(recall, "retrieve_memory_context") as retrieve:
            recall.related_memory_context(self.script, self.npc, "the ale", listeners={})
        options = asdict(retrieve.call_args.kwargs["options"])
        self.assertEqual(options["max_items"], 3)
        self.assertEqual(options["k"], 11)
        self.assertEqual(options["budget_tokens"],
                         MEMORY_DEFAULTS["MEMORY_RETRIEVAL_TOKEN_BUDGET"])

    def test_the_memory_reserve_of_the_budget_is_the_npcs(self):
        with override_settings(AI_LLM_CONTEXT_WINDOW=8192, AI_MAX_CONTEXT_TOKENS=100_000):
            full = self.script.budget_info().tokens
            self.script.db.memory_retrieval_token_budget = 0
            self.assertEqual(self.script.budget_info().tokens,
                             full + MEMORY_DEFAULTS["MEMORY_RETRIEVAL_TOKEN_BUDGET"])

    def test_a_small_budget_keeps_most_of_it_for_the_conversation(self):
        # the notes take at most 40 % of max_context_tokens, however large their own setting
        with override_settings(AI_LLM_CONTEXT_WINDOW=8192, AI_MAX_CONTEXT_TOKENS=1000,
                               AI_MEMORY_RETRIEVAL_TOKEN_BUDGET=1200):
            self.assertEqual(self.script.memory_budget(), 400)
            with mock.patch.object(recall, "retrieve_memory_context") as retrieve:
                recall.related_memory_context(self.script, self.npc, "the ale", listeners={})
            self.assertEqual(retrieve.call_args.kwargs["options"].budget_tokens, 400)
            self.script.db.max_context_tokens = 5000
            self.assertEqual(self.script.memory_budget(), 1200)

    def test_an_unknown_name_raises_even_with_an_attribute_of_that_name(self):
        self.script.db.compact_sleep_treshold = 0.5
        with self.assertRaises(KeyError) as caught:
            self.script.cfg("compact_sleep_treshold")
        self.assertIn("compact_sleep_treshold", str(caught.exception))
