"""
The NPC in Evennia's test world: hearing players, answering through a real HTTP LLM double,
the reply prompt, the queue, the fallback line, sleep and wake.
"""

import threading
from unittest import mock

from evennia.utils import create

from ai_contrib.commands import CmdTalk
from ai_contrib.core.dates import short_time
from ai_contrib.core.messages import is_marker
from ai_contrib.typeclasses import AssistantCharacter, AssistantScript, get_assistant_script

from tests.support.llm_double import hold, http_error, reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for, wait_until


class TestConfiguration(NPCTestCase):
    def test_documented_options_and_state_at_creation(self):
        cfg, db = self.script.cfg, self.script.db
        self.assertIs(cfg("compact_enabled"), True)
        self.assertEqual(cfg("compact_sleep_threshold"), 0.7)
        self.assertEqual(cfg("compact_emergency_threshold"), 0.8)
        self.assertEqual(cfg("compact_preserve_window"), 20)
        self.assertIsNone(cfg("compact_model"))
        self.assertIsNone(cfg("compact_prompt"))
        self.assertIsNone(db.last_compaction)
        self.assertIs(cfg("pre_compact_extraction_enabled"), True)
        self.assertEqual(cfg("pre_compact_max_iterations"), 5)
        self.assertEqual(db.operating_mode, "awake")
        self.assertEqual(self.npc.db.journal, {"entries": [], "consolidated_entry_ids": []})
        self.assertIsInstance(self.script, AssistantScript)

    def test_npc_attribute_overrides_setting_and_none_follows_it(self):
        from django.test import override_settings

        with override_settings(AI_MAX_CONTEXT_TOKENS=1234):
            self.script.db.max_context_tokens = None
            self.assertEqual(self.script.cfg("max_context_tokens"), 1234)
            self.script.db.max_context_tokens = 999
            self.assertEqual(self.script.cfg("max_context_tokens"), 999)

    def test_add_message_returns_stored_dict_with_unique_id(self):
        a = self.script.add_message("user", "Hello", name="Bob")
        b = self.script.add_message("user", "Hello", name="Bob")
        self.assertNotEqual(a["id"], b["id"])
        self.assertIs(self.script.history[-1], b)
        self.assertEqual(a["seq"] + 1, b["seq"])
        self.assertEqual(self.script.archive.messages(a["seq"], a["seq"])[0]["content"], "Hello")


class TestConversation(NPCTestCase):
    def heard_answer(self, line):
        """Say ``line`` to the NPC as ``char1`` and run a tick; returns what ``char1`` was sent."""
        with mock.patch.object(self.char1, "msg") as seen:
            self.script.receive_speech(self.char1, line)
            wait_for(self.script.run_tick())
        return " ".join(str(c) for c in seen.call_args_list)

    def test_say_in_room_is_heard_and_answered(self):
        self.llm.enqueue(reply("Welcome to the Prancing Goat, traveller!"))
        with mock.patch.object(self.char1, "msg") as seen:
            self.char1.at_say("Good evening, is there a room free?")
            wait_for(self.script.run_tick())
        user = [m for m in self.script.history if m["role"] == "user"]
        self.assertEqual(user[-1]["content"], "Good evening, is there a room free?")
        self.assertEqual(user[-1]["name"], self.char1.key)
        self.assertEqual(self.script.history[-1]["role"], "assistant")
        self.assertEqual(self.script.history[-1]["content"], "Welcome to the Prancing Goat, traveller!")
        heard = " ".join(str(c) for c in seen.call_args_list)
        self.assertIn("Welcome to the Prancing Goat", heard)
        # the prompt: persona first, the player's line with the speaker's name last, with the
        # time it was said (the first line a prompt shows)
        sent = self.llm.requests[0]["messages"]
        self.assertEqual(sent[0]["role"], "system")
        self.assertIn("innkeeper of the Prancing Goat", sent[0]["content"])
        stamp = short_time(user[-1]["timestamp"])
        self.assertTrue(stamp)
        self.assertEqual(sent[-1], {"role": "user", "content": (
            f"[{stamp}] {self.char1.key}: Good evening, is there a room free?")})

    def test_talk_parses_both_forms(self):
        for args in (" Marta = Do you have ale?", " Marta Do you have ale?"):
            cmd = CmdTalk()
            cmd.caller, cmd.args, cmd.cmdstring, cmd.switches = self.char1, args, "talk", []
            cmd.raw_string = "talk" + args
            cmd.parse()
            self.assertEqual((cmd.target_name, cmd.speech), ("Marta", "Do you have ale?"))

    def test_talk_command_reaches_npc(self):
        self.llm.enqueue(reply("Aye, the best ale in town."))
        self.call(CmdTalk(), "Marta = Do you have ale?", "You say to Marta")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-2]["content"], "Do you have ale?")
        self.assertEqual(self.script.history[-1]["content"], "Aye, the best ale in town.")

    def test_speech_during_pending_reply_is_queued_and_answered(self):
        gate = threading.Event()
        self.llm.enqueue(hold(gate, then=reply("One moment, Bob.")),
                         reply("Hello to you too, Alice."))
        self.script.receive_speech(self.char1, "Hi Marta")
        d = self.script.run_tick()
        wait_until(lambda: self.llm.requests)  # the first reply is being written
        self.assertIsNone(self.script.run_tick())  # guarded: a tick is running
        self.script.receive_speech(self.char2, "Hello!")
        gate.set()
        wait_for(d)

        def replies():
            return [m["content"] for m in self.script.history if m["role"] == "assistant"]

        wait_until(lambda: len(replies()) == 2)
        self.assertEqual(replies(), ["One moment, Bob.", "Hello to you too, Alice."])
        self.assertEqual(len(self.llm.requests), 2)
        # the second reply saw the line said while the first was being written
        second = [m["content"] for m in self.llm.requests[1]["messages"]]
        self.assertIn(f"{self.char2.key}: Hello!", second)

    def test_llm_failure_gives_in_character_line_and_no_traceback(self):
        self.llm.enqueue(http_error(500))
        heard = self.heard_answer("Hello?")
        self.assertIn("Marta seems lost in thought.", heard)
        self.assertNotIn("Traceback", heard)
        self.assertEqual(self.script.history[-1]["role"], "user")

    def test_an_answer_with_no_usable_text_is_asked_again_once_before_the_fallback(self):
        # a completion that is only another speaker's turn leaves nothing to say
        stray = f"[2026-11-20 14:05] {self.char2.key}: and then I said no."
        self.llm.enqueue(reply(stray), reply("Evening, love. The stew is on."))
        heard = self.heard_answer("Hello?")
        self.assertIn("The stew is on.", heard)
        self.assertNotIn("lost in thought", heard)
        self.assertEqual(len(self.llm.requests), 2)
        self.assertEqual(self.llm.requests[1]["messages"], self.llm.requests[0]["messages"])
        self.assertEqual(self.script.history[-1]["content"], "Evening, love. The stew is on.")
        # twice with nothing to say: the fallback line, and no third request
        self.llm.enqueue(reply(stray), reply(stray))
        self.assertIn("Marta seems lost in thought.", self.heard_answer("Hello again?"))
        self.assertEqual(len(self.llm.requests), 4)

    def test_npcs_hear_each_other_and_answer_only_when_named(self):
        # docs/design.md, "A room of NPCs" (issue 28): an NPC's speech is stored like a player's
        other = create.create_object(AssistantCharacter, key="Gorm", location=self.room1)
        other.at_say("Fine weather for the harvest.")
        other.at_say("Marta, more ale!")
        heard = self.script.history
        self.assertEqual([m["content"] for m in heard],
                         ["Fine weather for the harvest.", "Marta, more ale!"])
        for msg in heard:
            self.assertEqual(msg["metadata"]["speaker"], other.dbref)
            self.assertTrue(msg["metadata"]["npc"])
        self.assertEqual([m["metadata"]["addressed"] for m in heard], [False, True])
        self.assertEqual(self.script.pending_ids(), [heard[1]["id"]])
        # Gorm never hears himself
        self.assertEqual([m["role"] for m in get_assistant_script(other).history], [])

    def test_summaries_come_after_persona_in_prompt(self):
        self.script.add_message("user", "old line", name="Bob")
        marker = {"id": "m1", "seq": None, "role": "system", "timestamp": "",
                  "content": "[CONTEXT SUMMARY]\nBob rented the east room.",
                  "metadata": {"type": "compaction"}}
        self.script.runtime.messages.insert(0, marker)
        self.script.runtime.ledger.add(marker)
        # the prompt a reply sends
        self.llm.enqueue(reply("Aye."))
        self.script.receive_speech(self.char1, "Marta, a room?")
        wait_for(self.script.run_tick())
        prompt = self.llm.requests[-1]["messages"]
        self.assertIn("innkeeper", prompt[0]["content"])
        self.assertTrue(prompt[1]["content"].startswith("[CONTEXT SUMMARY]"))
        old = next(m for m in self.script.history if m.get("content") == "old line")
        self.assertEqual(prompt[2]["content"], f"[{short_time(old['timestamp'])}] Bob: old line")
        self.assertTrue(is_marker(self.script.history[0]))


class TestSleepWake(NPCTestCase):
    def test_a_subclass_that_wraps_sleep_sees_the_idle_sleep_of_the_tick(self):
        seen = []
        original = AssistantScript.sleep

        def wrapped(script, reason="admin"):
            seen.append(reason)
            return original(script, reason=reason)

        self.script.db.sleep_after_idle = 5
        self.script.ndb.awake_since = self.script.ndb.last_activity = 0  # idle for ages
        with mock.patch.object(AssistantScript, "sleep", wrapped):
            wait_for(self.script.run_tick())
        self.assertEqual(seen, ["idle"])
        self.assertEqual(self.script.db.operating_mode, "sleep")

    def test_sleep_runs_sleep_tick_and_speech_wakes(self):
        self.assertTrue(self.script.sleep())
        self.assertEqual(self.script.db.operating_mode, "sleep")
        wait_for(self.script.run_tick())
        self.assertIn("context_compaction", stored(self.script.ndb.last_sleep_result))
        self.llm.enqueue(reply("Mm? Oh, hello."))
        self.script.receive_speech(self.char1, "Wake up!")
        self.assertEqual(self.script.db.operating_mode, "awake")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-1]["content"], "Mm? Oh, hello.")
