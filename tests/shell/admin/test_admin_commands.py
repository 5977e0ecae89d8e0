"""
Admin tools for many NPCs: lookup of game subclasses, ``ailist``, ``aiconfig``, ``aireset``,
one item in full, the sleep report, and what deleting an NPC does with its memory.
"""

import inspect
import os
from unittest import mock

from django.test import override_settings
from evennia.objects.objects import DefaultCharacter
from evennia.utils import create

from ai_contrib import rag_memory
from ai_contrib.admin.admin_commands import CmdAIConfig, CmdAIList, CmdAIReset
from ai_contrib.commands import (
    AIContribCmdSet,
    CmdAIHistory,
    CmdAIMemory,
    CmdAISleep,
    CmdAIWake,
    CmdCompact,
)
from ai_contrib.core.summary import make_marker
from ai_contrib.memory.journal import add_entry, ensure_journal
from ai_contrib.npc.erase import archive_files
from ai_contrib.typeclasses import SCRIPT_KEY, AssistantCharacter, AssistantScript

from tests.support.admin_fixtures import FORGED, AdminCase, FakeStore
from tests.support.llm_double import reply
from tests.support.twisted_util import stored, wait_for, wait_until


class TavernKeeper(AssistantCharacter, DefaultCharacter):
    """An AI NPC the way a game defines one: its own subclass."""


class TestLookup(AdminCase):
    def setUp(self):
        super().setUp()
        self.brom = create.create_object(TavernKeeper, key="Brom", location=self.room1)

    def test_a_game_subclass_is_found_by_every_admin_command(self):
        self.assertIn("AI history of Brom", self.call(CmdAIHistory(), "Brom"))
        self.assertIn("Compaction of Brom skipped", self.call(CmdCompact(), "Brom"))
        self.assertIn("Brom dozes off.", self.call(CmdAISleep(), "Brom"))
        self.assertEqual(self.brom.assistant.db.operating_mode, "sleep")
        self.assertIn("Brom wakes up.", self.call(CmdAIWake(), "Brom"))
        self.assertEqual(self.brom.assistant.db.operating_mode, "awake")

    def test_any_object_with_an_assistant_script_is_an_ai_npc(self):
        self.obj1.scripts.add(AssistantScript, key=SCRIPT_KEY, autostart=False)
        self.assertIn("AI history of Obj", self.call(CmdAIHistory(), "Obj"))

    def test_a_character_that_is_not_an_ai_npc_is_named_so(self):
        self.call(CmdAIHistory(), "Char2", "Char2 is not an AI NPC.")
        self.call(CmdAIHistory(), "Nobody", "Could not find 'Nobody'")

    def test_an_ai_npc_wins_over_a_namesake_that_is_not_one(self):
        create.create_object(DefaultCharacter, key="Brom", location=self.room2)
        self.assertIn("AI history of Brom", self.call(CmdAIHistory(), "Brom"))


class TestAIList(AdminCase):
    def test_lists_every_ai_npc_subclasses_included_and_nothing_else(self):
        brom = create.create_object(TavernKeeper, key="Brom", location=self.room2)
        self.fill(4)
        self.script.ndb.last_reply = {"seconds": 1.25, "prompt": {
            "prompt_tokens": 812, "cached_tokens": 700, "generated_tokens": 20}}
        self.script.db.reply_failures = 2
        out = self.call(CmdAIList(), "")
        self.assertIn("AI NPCs: 2", out)
        self.assertIn(f"Marta {self.npc.dbref}", out)
        self.assertIn(f"Brom {brom.dbref}", out)
        self.assertNotIn("Char2", out)
        tokens, budget = self.script.token_count(), self.script.budget()
        self.assertIn(f"{tokens}/{budget}", out)
        self.assertIn("1.2s 812t", out)
        self.assertIn("2/0", out)
        self.assertIn("summary", out)
        self.assertIn("Room2", out)
        self.assertTrue(all(len(line) <= 80 for line in out.splitlines()), out)


class TestAIConfig(AdminCase):
    def test_shows_each_value_with_its_source_and_the_script_id(self):
        self.script.attributes.remove("compact_preserve_window")
        self.script.db.mask_window = 4
        # an NPC created by an earlier version holds copies of the settings as Attributes
        self.script.db.compact_sleep_threshold = 0.7
        with override_settings(AI_COMPACT_PRESERVE_WINDOW=12):
            out = self.call(CmdAIConfig(), "Marta")
        self.assertIn(f"#{self.script.id}", out)
        rows = {cells[0]: cells[1:] for cells in (
            [c.strip() for c in line.strip("|").split("|")] for line in out.splitlines()
            if line.startswith("|"))}
        self.assertEqual(rows["compact_preserve_window"], ["12", "game"])
        self.assertEqual(rows["mask_window"], ["4", "NPC"])
        self.assertEqual(rows["compact_min_saving_tokens"], ["1", "default"])
        self.assertEqual(rows["compact_sleep_threshold"], ["0.7", "NPC (= game)"])
        self.assertEqual(rows["compact_model"], ["None", "default"])
        self.assertTrue(all(len(line) <= 80 for line in out.splitlines()), out)

    def test_sets_typed_values_and_refuses_bad_ones(self):
        self.call(CmdAIConfig(), "Marta/compact_sleep_threshold=65%",
                  "Marta: compact_sleep_threshold = 0.65 for this NPC")
        self.assertEqual(self.script.cfg("compact_sleep_threshold"), 0.65)
        self.call(CmdAIConfig(), "Marta/compact_enabled=no")
        self.assertIs(self.script.cfg("compact_enabled"), False)
        self.call(CmdAIConfig(), "Marta/max_context_tokens=4000")
        self.assertEqual(self.script.cfg("max_context_tokens"), 4000)
        self.call(CmdAIConfig(), "Marta/compact_strategy=Cascade")
        self.assertEqual(self.script.cfg("compact_strategy"), "cascade")
        self.call(CmdAIConfig(), "Marta/max_context_tokens=lots",
                  "max_context_tokens takes a whole number (got 'lots').")
        self.call(CmdAIConfig(), "Marta/compact_sleep_threshold=2",
                  "compact_sleep_threshold is a fraction of the token budget")
        self.call(CmdAIConfig(), "Marta/compact_enabled=maybe", "compact_enabled is a switch")
        self.call(CmdAIConfig(), "Marta/compact_strategy=magic", "compact_strategy is one of")
        self.call(CmdAIConfig(), "Marta/llm_api_key=sk-123", "Unknown option 'llm_api_key'")
        self.assertEqual(self.script.cfg("max_context_tokens"), 4000)

    def test_an_empty_value_or_reset_goes_back_to_the_game_setting(self):
        self.script.db.mask_window = 3
        self.call(CmdAIConfig(), "Marta/mask_window=",
                  "Marta: mask_window follows the game again: 10 (from default).")
        self.assertFalse(self.script.attributes.has("mask_window"))
        self.script.db.compact_strategy = "mask"
        with override_settings(AI_COMPACT_STRATEGY="hybrid"):
            self.call(CmdAIConfig(), "/reset Marta/compact_strategy",
                      "Marta: compact_strategy follows the game again: 'hybrid' "
                      "(from AI_COMPACT_STRATEGY).")
            self.assertEqual(self.script.cfg("compact_strategy"), "hybrid")


class TestAIReset(AdminCase):
    def setUp(self):
        super().setUp()
        self.fill(6)
        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, "Bob rented the east room", importance=7)
        journal["consolidated_entry_ids"].append(journal["entries"][0]["id"])
        self.npc.db.journal = journal
        self.npc.db.entity_profiles = {"Bob": ["rents the east room"]}
        self.script.db.compaction_count = 2
        self.script.db.compaction_log = [{"at": "2025-01-01", "success": True}]
        self.script.db.reply_failures = 1
        from ai_contrib.npc.scene import note_exchange

        note_exchange(self.script, {self.char1.dbref: "Bob", "#9999": "Hilda"})
        self.path = self.script.archive_path()

    def test_without_confirm_nothing_is_removed(self):
        out = self.call(CmdAIReset(), "Marta")
        self.assertIn("This removes from Marta", out)
        self.assertIn("6 messages in context", out)
        self.assertIn("1 journal entries", out)
        self.assertIn("2 people records (whom it met: ", out)
        self.assertIn("Hilda", out)
        from ai_contrib.npc.scene import all_people

        self.assertEqual(len(all_people(self.script)), 2)
        self.assertIn("aireset/confirm Marta", out)
        self.assertEqual(len(self.script.history), 6)
        self.assertTrue(os.path.exists(self.path))
        self.assertNotIn("still refuses", out)  # nothing refused yet: nothing said to stay

    def test_what_staff_made_it_refuse_stays_and_the_preview_says_so(self):
        from ai_contrib.npc.erase import erased_facts, mark_erased

        self.npc.db.forgotten_players = ["Wren"]
        mark_erased(self.npc, ["The back door password is heron-gate."])
        out = self.call(CmdAIReset(), "Marta")
        self.assertIn("still refuses the gossip of the 1 players it was made to forget and the "
                      "1 facts erased from it (they stay)", out)
        self.said(CmdAIReset(), "/confirm Marta", "Reset Marta")
        self.assertEqual(self.script.history, [])  # the control: the memory went
        self.assertEqual(self.npc.db.forgotten_players, ["Wren"])
        self.assertEqual(erased_facts(self.npc), ["The back door password is heron-gate."])

    def test_confirm_wipes_every_store_and_says_what_went(self):
        store = self.use_store(FakeStore(memories=4))
        self.script.archive  # noqa: B018 (the index file too)
        open(self.path + ".fts.sqlite3", "w").close()
        out = self.said(CmdAIReset(), "/confirm Marta", "Reset Marta")
        self.assertIn("removed 6 messages in context (0 summaries)", out)
        self.assertIn("6 records", out)
        self.assertIn(os.path.basename(self.path), out)
        self.assertIn("1 journal entries; 1 entity profiles; 2 people records (whom it met: Bob, "
                      "Hilda); 1 compaction events", out)
        self.assertIn("Mem0: 4 memories deleted", out)
        self.assertIn(("delete_agent", f"npc-{self.npc.id}", False), store.calls)
        self.assertEqual(archive_files(self.path), [])
        self.assertEqual(self.script.history, [])
        self.assertEqual(self.npc.db.journal["entries"], [])
        self.assertEqual(self.npc.db.entity_profiles, {})
        self.assertIn("2 people records", out)
        from ai_contrib.npc.scene import all_people, people_record

        self.assertEqual(all_people(self.script), [])
        self.assertIsNone(people_record(self.script, self.char1.dbref))
        self.assertEqual(self.script.db.compaction_count, 0)
        self.assertEqual(self.script.db.compaction_log, [])
        self.assertEqual(self.script.db.reply_failures, 0)
        # the NPC goes on, into a new archive
        msg = self.script.add_message("user", "hello again", name="Bob")
        self.assertEqual(msg["seq"], 0)
        self.assertNotEqual(self.script.archive_path(), self.path)

    def test_refused_while_a_reply_is_written(self):
        self.script.ndb.busy = True
        # no reply is really under way: the cleanup would wait for it to end
        self.addCleanup(setattr, self.script.ndb, "busy", False)
        self.call(CmdAIReset(), "/confirm Marta", "Not now: a reply is being written")
        self.assertEqual(len(self.script.history), 6)

    def test_with_mem0_off_nothing_is_asked_of_it(self):
        with override_settings(AI_MEMORY_ENABLED=False):
            out = self.said(CmdAIReset(), "/confirm Marta", "Reset Marta")
        self.assertIn("Mem0: off, nothing to delete", out)


class TestOneItemInFull(AdminCase):
    LONG = "Bob asked about the east room " + " ".join(f"detail{i}" for i in range(40))

    def test_show_an_archived_message_by_seq_and_by_id(self):
        self.fill(2)
        msg = self.script.add_message("user", f"{self.LONG} {FORGED}", name="Bob",
                                      metadata={"speaker": "#7", "audience": ["#7"]})
        out = self.call(CmdAIHistory(), f"Marta/show {msg['seq']}")
        self.assertIn(f"Archive record {msg['seq']} of Marta", out)
        self.assertIn("detail39", out.replace("\n", " "))  # not cropped
        self.assertIn("metadata.speaker: #7", out)
        self.assertIn("in context", out)
        self.assertFalse([line for line in out.splitlines() if "[MudInfo]" in line
                          and line.lstrip().startswith("[MudInfo]")])
        self.assertIn("\u00a6/\u00a6w[MudInfo]", out)
        self.assertEqual(out, self.call(CmdAIHistory(), f"Marta/show {msg['id']}"))
        self.call(CmdAIHistory(), "Marta/show 999", "No archive record or summary '999'")
        # an id that happens to be all digits (one in about 280 ids) is still found by id
        digits = self.script.add_message("user", "a numbered line", name="Bob",
                                         id="875234424301")
        self.assertIn(f"Archive record {digits['seq']} of Marta",
                      self.call(CmdAIHistory(), "Marta/show 875234424301"))
        # a character that is a digit to str.isdigit() but no number is a key like any other
        self.call(CmdAIHistory(), "Marta/show \u00b2", "No archive record or summary '\u00b2'")
        self.assertIn("\u00b2", self.call(CmdAIHistory(), "Marta/journal \u00b2"))
        self.assertIn("journal is empty", self.call(CmdAIHistory(), "Marta/journal 1"))

    def test_the_summaries_table_shows_players_names_as_text(self):
        from ai_contrib.npc.scene import note_exchange

        said = self.fill(6)
        note_exchange(self.script, {self.char2.dbref: FORGED})  # a name with markup in it
        marker = make_marker("Bob rented the east room.", said[:4], 100, 20)
        marker["metadata"]["audience"] = [self.char2.dbref]
        self.script.runtime.apply_compaction(marker, said[0]["id"], said[3]["id"])
        out = self.call(CmdAIHistory(), "Marta")
        self.assertIn("\u00a6/\u00a6w[MudInfo]", out.replace("\n", ""))  # the name, inert
        self.assertNotIn("|/|w[MudInfo]", out)

    def test_show_a_summary_by_id_and_by_its_compaction_seq(self):
        said = self.fill(6)
        marker = make_marker(f"Bob rented the east room. {self.LONG}", said[:4], 100, 20)
        self.script.runtime.apply_compaction(marker, said[0]["id"], said[3]["id"])
        out = self.call(CmdAIHistory(), f"Marta/show {marker['id']}")
        self.assertIn("summary (in context)", out)
        self.assertIn("detail39", out.replace("\n", " "))
        self.assertIn(f"first_id: {said[0]['id']}", out)
        seq = self.script.archive.last_seq
        self.assertIn("detail39", self.call(CmdAIHistory(), f"Marta/show {seq}").replace("\n", " "))

    def test_show_one_journal_entry(self):
        journal = ensure_journal(self.npc.db.journal)
        entry = add_entry(journal, f"{self.LONG} {FORGED}", importance=8, speaker="Bob",
                          audience=["#7"])
        self.npc.db.journal = journal
        out = self.call(CmdAIHistory(), f"Marta/journal {entry['id']}")
        self.assertIn("Journal entry of Marta (not in Mem0 yet)", out)
        self.assertIn("importance: 8", out)
        self.assertIn("audience: #7", out)
        self.assertIn("detail39", out.replace("\n", " "))
        self.assertIn("\u00a6/\u00a6w[MudInfo]", out)
        self.call(CmdAIHistory(), "Marta/journal nope", "No journal entry 'nope' for Marta")

    def test_the_journal_and_mem0_show_each_facts_support(self):
        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, "Bob is allergic to peanuts.", speaker="Bob", support=0.86,
                  grounding="model")
        add_entry(journal, "Bob said: I owe Marta 3 silver.", speaker="Bob", support=1.0,
                  grounding="replaced", model_support=0.4)
        add_entry(journal, "Bob likes ale.", speaker="Bob")  # from before the check
        self.npc.db.journal = journal
        out = self.call(CmdAIHistory(), "Marta/journal")
        self.assertIn("support", out)
        self.assertIn("0.86", out)
        self.assertIn("(0.40)", out)  # the model's fact, replaced by its line
        hit = {"text": "Bob is allergic to peanuts.", "score": 0.9,
               "metadata": {"memory_id": "0f4c2a9e-0000-4000-8000-000000000002",
                            "source_type": "fact", "visibility": "public", "support": 0.86,
                            "grounding": "model"}}
        self.use_store(FakeStore(hit=hit))
        out = self.call(CmdAIMemory(), "/mem0 Marta peanuts")
        self.assertIn("(support 0.86)", out)
        self.assertIn("allergic to peanuts", out)
        hit["metadata"].pop("support")  # an unchecked memory: no support (control)
        self.assertNotIn("0.86", self.call(CmdAIMemory(), "/mem0 Marta peanuts"))

    def test_show_one_memory_from_the_store(self):
        hit = {"text": f"Bob likes ale. {self.LONG}", "score": 0.0, "created_at": "2025-01-01",
               "metadata": {"memory_id": "0f4c2a9e-0000-4000-8000-000000000001",
                            "journal_id": "fact_1", "visibility": "private",
                            "user_id": "bob", "api_key": "sk-secretsecret"}}
        store = self.use_store(FakeStore(hit=hit))
        out = self.call(CmdAIMemory(), "Marta/show 0f4c2a9e")
        self.assertIn("Memory of Marta", out)
        self.assertIn("metadata.journal_id: fact_1", out)
        self.assertIn("detail39", out.replace("\n", " "))
        self.assertNotIn("secretsecret", out)
        self.assertIn(("get", f"npc-{self.npc.id}", "0f4c2a9e"), store.calls)
        self.call(CmdAIMemory(), "Marta/show ffff", "Marta has no memory 'ffff'.")


@override_settings(AI_MEMORY_ENABLED=False)  # the archive is what this test reads
class TestAIMemoryRecall(AdminCase):
    def test_it_recalls_what_a_reply_would_and_for_a_listener_only_what_they_heard(self):
        bob, alice = self.char1, self.char2
        self.script.receive_speech(bob, "The bluefinch password is hollyhock.",
                                   audience=[])  # Bob alone heard it
        self.script.receive_speech(alice, "The bluefinch cart leaves at dawn.")
        self.llm.enqueue(reply("Aye."))
        wait_for(self.script.run_tick())  # answered: no longer held in the context
        self.fill(50)
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(reply("Guests talked about rooms, stew and the weather."))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc,
                                                                  trigger="manual")))
        self.assertTrue(result.get("success"), result)
        self.assertNotIn("hollyhock", " ".join(m["content"] for m in self.script.history))
        # no audience filter: both lines, from the archive, as a reply would read them
        out = self.said(CmdAIMemory(), "Marta bluefinch password", "would recall")
        self.assertIn("What Marta would recall for 'bluefinch password'", out)
        self.assertIn("no audience filter", out)
        self.assertIn("hollyhock", out)
        self.assertIn("leaves at dawn", out)
        self.assertIn("archive", out)
        # heard by Alice: her own line, and never what Bob said to Marta alone
        out = self.said(CmdAIMemory(), f"/for Marta, {alice.key} = bluefinch password",
                        "would recall")
        self.assertIn(f"heard by {alice.key}", out)
        self.assertIn("leaves at dawn", out)
        self.assertNotIn("hollyhock", out)
        out = self.said(CmdAIMemory(), "Marta zzyzx quorble", "would recall")
        self.assertIn("Marta would recall nothing for 'zzyzx quorble'", out)
        self.call(CmdAIMemory(), "/for Marta = bluefinch",
                  "Usage: aimemory/for <npc>, <player> = <query>")


class TestSleepReport(AdminCase):
    def test_aisleep_reports_what_the_sleep_did_and_aihistory_shows_it(self):
        self.fill(4)
        out = self.said(CmdAISleep(), "Marta", "Marta's sleep:")
        self.assertIn("Marta dozes off.", out)
        self.assertIn("Marta's sleep: compaction skipped (below threshold", out)
        self.assertIn("no fact extraction", out)
        self.assertIn("0 journal entries consolidated into Mem0", out)
        overview = self.call(CmdAIHistory(), "Marta")
        self.assertIn("Last sleep", overview)
        self.assertIn("compaction skipped", overview)

    def test_a_games_wording_of_the_sleep_reaches_aisleep_and_aihistory(self):
        # the line is the script's (AssistantScript.describe_sleep): a subclass words it
        def own_words(script, result, woken=None):
            return f"{script.obj.key} slept; compaction {result.context_compaction.outcome}"

        self.fill(4)
        with mock.patch.object(type(self.script), "describe_sleep", own_words):
            out = self.said(CmdAISleep(), "Marta", "Marta's sleep:")
        self.assertIn("Marta's sleep: Marta slept; compaction skipped", out)
        self.assertNotIn("no fact extraction", out)  # the default wording is not used
        overview = self.call(CmdAIHistory(), "Marta")
        self.assertIn("Marta slept; compaction skipped", overview)

    def test_a_wording_that_breaks_still_tells_the_admin_who_waits_that_the_sleep_ended(self):
        def broken(script, result, woken=None):
            raise ValueError("no words")

        self.fill(4)
        with mock.patch.object(type(self.script), "describe_sleep", broken):
            out = self.said(CmdAISleep(), "Marta", "Marta's sleep:")
        self.assertIn("Marta's sleep: sleep ended; its report failed (no words)", out)
        self.assertEqual(self.script.ndb.sleep_watchers, [])  # not left for the next sleep
        # control: the next sleep's admin hears the next sleep's own line
        self.script.wake(reason="test")
        out = self.said(CmdAISleep(), "Marta", "Marta's sleep:")
        self.assertIn("Marta's sleep: compaction skipped", out)

    def test_woken_before_the_sleep_work_started(self):
        with mock.patch.object(self.char1, "msg") as msg:
            self.call(CmdAISleep(), "Marta")
            self.script.wake(reason="test")
            said = " ".join(str(c) for c in msg.call_args_list)
        self.assertIn("Marta's sleep: woke before the sleep work started", said)

    def test_aihistory_shows_the_last_reply_error_after_recovery(self):
        self.script.db.reply_failures = 0
        self.script.db.last_reply_error = "HTTP 500: boom"
        out = self.call(CmdAIHistory(), "Marta")
        self.assertIn("HTTP 500: boom", out)


class TestDeletingAnNPC(AdminCase):
    def test_archive_moves_to_deleted_and_mem0_memories_go(self):
        store = self.use_store(FakeStore())
        self.fill(3)
        path = self.script.archive_path()
        npc_id = self.npc.id
        self.npc.delete()
        kept = os.path.join(os.path.dirname(path), "deleted", os.path.basename(path))
        # the Mem0 deletion is a Deferred: wait for it to have run
        wait_until(lambda: os.path.exists(kept)
                   and ("delete_agent", f"npc-{npc_id}", True) in store.calls)
        self.assertFalse(os.path.exists(path))
        self.assertTrue(os.path.exists(kept))
        with open(kept) as fh:
            self.assertEqual(len(fh.readlines()), 3)
        self.assertIn(("delete_agent", f"npc-{npc_id}", True), store.calls)

    def test_mem0_is_not_opened_for_an_npc_that_never_used_it(self):
        store = self.use_store(FakeStore())
        store.is_open = False
        self.npc.delete()
        self.assertFalse([c for c in store.calls if c[0] == "delete_agent"])


class TestCmdSet(AdminCase):
    def test_the_new_commands_are_in_the_cmdset_and_need_builder(self):
        cmdset = AIContribCmdSet()
        cmdset.at_cmdset_creation()
        keys = {cmd.key for cmd in cmdset.commands}
        self.assertTrue({"ailist", "aiconfig", "aireset"} <= keys)
        self.char2.account.permissions.remove("Developer")
        self.char2.account.permissions.add("Player")
        for cmd in (CmdAIList(), CmdAIConfig(), CmdAIReset()):
            self.assertFalse(cmd.access(self.char2, "cmd"), cmd.key)
            self.assertTrue(cmd.access(self.char1, "cmd"), cmd.key)

    def test_help_texts_fit_80_columns(self):
        from ai_contrib import commands

        for cmd in (CmdAIList, CmdAIConfig, CmdAIReset, commands.CmdAIHistory,
                    commands.CmdAIMemory, commands.CmdAISleep):
            for line in inspect.cleandoc(cmd.__doc__ or "").splitlines():
                self.assertLessEqual(len(line), 80, f"{cmd.key}: {line}")


class TestAIConfigInEffect(AdminCase):
    """aiconfig shows what the NPC works with now: its budget and why, its persona."""

    def budget_line(self):
        out = " ".join(self.call(CmdAIConfig(), "Marta").split())
        return out.split("history budget: ")[1].split(" persona (")[0]

    def test_the_budget_is_shown_with_where_it_comes_from(self):
        self.script.attributes.remove("max_context_tokens")
        self.assertEqual(self.budget_line(), "100000 tokens, from default: max_context_tokens "
                         "100000, the contrib's default; the model's context window is not "
                         "known yet")
        with override_settings(AI_MAX_CONTEXT_TOKENS=9000):
            self.assertEqual(self.budget_line(), "9000 tokens, from game: max_context_tokens "
                             "9000, the game's AI_MAX_CONTEXT_TOKENS; the model's context "
                             "window is not known yet")
        self.script.db.max_context_tokens = 5000
        self.assertTrue(self.budget_line().startswith(
            "5000 tokens, from NPC: max_context_tokens 5000, this NPC's own"))
        # the server's window cuts it: the effective figure, the window's arithmetic, and
        # the option's row points at it
        with override_settings(AI_LLM_CONTEXT_WINDOW=2048):
            effective = self.script.budget()
            line = self.budget_line()
            out = self.call(CmdAIConfig(), "Marta")
        self.assertLess(effective, 5000)
        self.assertTrue(line.startswith(
            f"{effective} tokens, from model window: model context window 2048 "
            "(AI_LLM_CONTEXT_WINDOW) - "), line)
        self.assertIn("(max_context_tokens 5000 is this NPC's own", line)
        self.assertIn(f"(in effect: {effective})", out)
        self.assertTrue(all(len(row) <= 80 for row in out.splitlines()), out)

    def test_the_persona_is_shown_and_whether_it_is_the_default(self):
        out = " ".join(self.call(CmdAIConfig(), "Marta").split())
        self.assertIn("persona (NPC): You are Marta, the innkeeper of the Prancing Goat.", out)
        brom = create.create_object(TavernKeeper, key="Brom", location=self.room1)
        self.addCleanup(brom.delete)
        out = self.call(CmdAIConfig(), "Brom")
        self.assertIn("persona (default): You are Brom, a friendly", " ".join(out.split()))
        self.assertTrue(all(len(line) <= 80 for line in out.splitlines()), out)


class TestDestroyTellsWhatBecameOfTheMemory(AdminCase):
    def test_destroy_says_where_the_archive_went_and_what_mem0_deleted(self):
        from ai_contrib.admin.destroy_command import CmdDestroy

        self.use_store(FakeStore(memories=12))
        self.fill(3)
        path = self.script.archive_path()
        out = self.said(CmdDestroy(), "/force Marta", until="Mem0:")
        kept = os.path.join(os.path.dirname(path), "deleted")
        self.assertIn("Marta was destroyed.", out)  # Evennia's own line
        self.assertIn("Marta: its archive was kept:", out)
        self.assertIn(f"moved to {kept} (", out)
        self.assertIn(os.path.basename(path), out)
        self.assertIn("Mem0: 12 memories deleted.", out)
        self.assertFalse(self.npc.pk)

    def test_an_object_that_is_not_an_npc_gets_evennia_s_line_alone(self):
        from ai_contrib.admin.destroy_command import CmdDestroy

        stone = create.create_object(DefaultCharacter, key="Stone", location=self.room1)
        out = self.said(CmdDestroy(), "/force Stone", until="destroyed")
        self.assertIn("Stone was destroyed.", out)
        self.assertNotIn("archive", out)
        self.assertFalse(stone.pk)

    def test_the_contrib_s_destroy_replaces_evennia_s_in_the_cmdset(self):
        from ai_contrib.admin.destroy_command import CmdDestroy

        cmdset = AIContribCmdSet()
        cmdset.at_cmdset_creation()
        [destroy] = [c for c in cmdset.commands if c.key == "@destroy"]
        self.assertIsInstance(destroy, CmdDestroy)


class TestJournalPagesAndReceiptLines(AdminCase):
    def test_the_journal_is_paged_newest_first(self):
        journal = ensure_journal(self.npc.db.journal)
        for i in range(25):
            add_entry(journal, f"fact number {i}", speaker="Bob", entry_id=f"fact_{i:02d}")
        self.npc.db.journal = journal
        first = self.call(CmdAIHistory(), "Marta/journal")
        self.assertIn("25 entries, 0 consolidated (page 1 of 2, newest first; older: "
                      "aihistory Marta/journal 2)", " ".join(first.split()))
        self.assertIn("fact_24", first)
        self.assertNotIn("fact_04", first)
        second = self.call(CmdAIHistory(), "Marta/journal 2")
        self.assertIn("fact_04", second)
        self.assertNotIn("fact_24", second)
        self.assertIn("fact number 4", self.call(CmdAIHistory(), "Marta/journal fact_04"))

    def test_a_receipt_shows_the_line_it_answered(self):
        from ai_contrib.npc.replies import keep_receipt

        from tests.support.receipt_fixtures import receipt

        line = self.script.add_message("user", "Where is the cellar key?", name="Bob")
        said = self.script.add_message("assistant", "Under the blue barrel.", name="Marta",
                                       metadata={"reply_to": [line["id"]]})
        keep_receipt(self.script, said, receipt(), None)
        out = self.call(CmdAIHistory(), "Marta/prompt")
        self.assertIn(f'answering #{line["seq"]} Bob: "Where is the cellar key?"', out)
        older = self.script.add_message("assistant", "A reply with no line.", name="Marta")
        keep_receipt(self.script, older, receipt(), None)
        out = self.call(CmdAIHistory(), "Marta/prompt")
        self.assertIn("A reply with no line.", out)
        self.assertNotIn("answering #", out)
