"""
Answer only when addressed: several AI NPCs in one room answer only the lines meant for them
(named, ``talk``-ed to, or continuing a conversation), hear and store the rest, and a lone NPC
answers everything. The pure rule (``core.addressing``) is tested directly; the rest through
NPCs in Evennia's test world against the real HTTP LLM double.
"""

import time
from datetime import datetime, timedelta, timezone

from django.test import override_settings
from evennia.utils import create

from ai_contrib.commands import CmdTalk
from ai_contrib.core.addressing import conversation_partner, decide, mentions
from ai_contrib.core.messages import make_message
from ai_contrib.core.prompts import render_for_chat
from ai_contrib.core.turns import unanswered_lines
from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import cancel_pending_ticks, spin, wait_for


def line(text, speaker="#1", ago=0.0, **meta):
    when = (datetime.now(timezone.utc) - timedelta(seconds=ago)).isoformat()
    return make_message("user", text, name=f"P{speaker}", timestamp=when,
                        metadata={"speaker": speaker, "audience": [speaker], **meta})


def answer(ago=0.0):
    when = (datetime.now(timezone.utc) - timedelta(seconds=ago)).isoformat()
    return make_message("assistant", "Aye.", timestamp=when)


# -- core.addressing ------------------------------------------------------------------------------

def test_a_name_counts_only_as_a_whole_word_in_any_case():
    assert mentions("Marta, an ale", ["Marta"]) and mentions("thanks marta!", ["Marta"])
    assert mentions("is old tom here?", ["Tom the Smith", "old tom"])
    assert not mentions("Martha, an ale", ["Marta"]) and not mentions("tomato soup", ["Tom"])
    assert not mentions("hello", []) and not mentions("hello", [""])


def test_decide_answers_named_talked_to_lone_and_conversing_npcs_only():
    ask = dict(own_names=["Marta"], other_npc_names=["Tom", "Ada"])
    assert decide("Marta, an ale", "#1", **ask) == "name"
    assert decide("an ale please", "#1", **ask) is None
    assert decide("Tom, a pie", "#1", **ask, partner="#1") is None  # for Tom, mid-conversation
    assert decide("and some bread", "#1", **ask, partner="#1") == "conversation"
    assert decide("and some bread", "#2", **ask, partner="#1") is None
    assert decide("hello", "#1", **ask, to_me=True) == "talk"
    assert decide("Marta, hello", "#1", **ask, to_me=False) is None
    assert decide("an ale please", "#1", own_names=["Marta"]) == "only"
    assert decide("an ale please", "#1", **ask, policy="always") == "always"


def test_a_conversation_stays_open_for_the_window_after_the_last_exchange():
    now = time.time()
    bob_asks = line("Marta, an ale", "#1", ago=100)
    # Bob spoke to her 100 s ago and she answered 10 s ago: still talking with Bob
    assert conversation_partner([bob_asks, answer(ago=10)], now, 120) == "#1"
    # overheard lines of others in between do not end it
    chatter = line("nice weather", "#2", ago=5, addressed=False)
    assert conversation_partner([bob_asks, answer(ago=10), chatter], now, 120) == "#1"
    # the last line said to her was Alice's
    alice = line("Marta, hello", "#2", ago=5)
    assert conversation_partner([bob_asks, answer(ago=10), alice], now, 120) == "#2"
    # too long ago, or the window is off
    assert conversation_partner([bob_asks, answer(ago=300)], now, 120) is None
    assert conversation_partner([line("hi", "#1", ago=500)], now, 120) is None
    assert conversation_partner([bob_asks, answer(ago=10)], now, 0) is None


def test_overheard_lines_are_never_pending_and_read_as_overheard():
    said, heard = line("Marta, an ale"), line("Tom, a pie", addressed=False)
    todo, _ = unanswered_lines([said, heard], time.time())
    assert [m["id"] for m in todo] == [said["id"]]
    assert render_for_chat(heard)["content"] == "P#1 (overheard): Tom, a pie"
    assert render_for_chat(said)["content"] == "P#1: Marta, an ale"


# -- NPCs sharing a room ----------------------------------------------------------------------

class TestSeveralNPCs(NPCTestCase):
    llm_default = staticmethod(lambda body: "Aye.")

    def setUp(self):
        super().setUp()
        self.tom = create.create_object(AssistantCharacter, key="Tom", location=self.room1)
        self.ada = create.create_object(AssistantCharacter, key="Ada", location=self.room1,
                                        aliases=["the bard"])
        self.scripts = {npc.key: get_assistant_script(npc)
                        for npc in (self.npc, self.tom, self.ada)}
        # lines left pending here must not be answered by a tick that fires in a later test
        self.addCleanup(cancel_pending_ticks)

    def tick_all(self):
        for script in self.scripts.values():
            wait_for(script.run_tick())
        spin(0.05)

    def pending(self):
        return {key: len(script.pending_ids()) for key, script in self.scripts.items()}

    def last_line(self, key):
        """The last line a player said that ``key`` heard (NPCs' replies are heard too)."""
        return [m for m in self.scripts[key].history
                if m["role"] == "user" and not m["metadata"].get("npc")][-1]

    def test_only_the_named_npc_answers_and_the_others_store_the_line(self):
        self.char1.at_say("Marta, an ale please")
        self.assertEqual(self.pending(), {"Marta": 1, "Tom": 0, "Ada": 0})
        self.tick_all()
        self.assertEqual(len(self.llm.requests), 1)
        for key in ("Tom", "Ada"):
            heard = self.last_line(key)
            self.assertEqual(heard["content"], "Marta, an ale please")
            self.assertIs(heard["metadata"]["addressed"], False)
            self.assertIn(self.char1.dbref, heard["metadata"]["audience"])
        self.assertIs(self.last_line("Marta")["metadata"]["addressed"], True)
        # an alias addresses too
        self.char2.at_say("Play us a song, the bard!")
        self.assertEqual(self.pending(), {"Marta": 0, "Tom": 0, "Ada": 1})

    def test_a_line_naming_nobody_is_answered_by_nobody_unless_it_continues_a_conversation(self):
        self.char1.at_say("Nice weather today.")
        self.assertEqual(self.pending(), {"Marta": 0, "Tom": 0, "Ada": 0})
        self.char1.at_say("Marta, an ale please")
        self.tick_all()
        self.char1.at_say("And some bread.")  # Bob goes on talking to Marta
        self.assertEqual(self.pending(), {"Marta": 1, "Tom": 0, "Ada": 0})
        self.tick_all()
        self.char2.at_say("And for me?")  # someone else: not the same conversation
        self.assertEqual(self.pending(), {"Marta": 0, "Tom": 0, "Ada": 0})
        self.char1.at_say("Tom, a pie.")  # Bob turns to Tom
        self.assertEqual(self.pending(), {"Marta": 0, "Tom": 1, "Ada": 0})

    def test_talk_addresses_its_target_and_the_others_overhear(self):
        self.call(CmdTalk(), "Tom = Is the forge hot?")
        self.assertEqual(self.pending(), {"Marta": 0, "Tom": 1, "Ada": 0})
        self.assertIs(self.last_line("Marta")["metadata"]["addressed"], False)
        self.assertEqual(self.last_line("Ada")["content"], "Is the forge hot?")

    def test_always_answers_every_line_game_wide_or_per_npc(self):
        self.scripts["Tom"].db.answer_when = "always"
        self.char1.at_say("Evening, all.")
        self.assertEqual(self.pending(), {"Marta": 0, "Tom": 1, "Ada": 0})
        with override_settings(AI_ANSWER_WHEN="always"):
            self.char1.at_say("Another round!")
        self.assertEqual(self.pending(), {"Marta": 1, "Tom": 2, "Ada": 1})

    def test_an_overheard_line_does_not_wake_a_sleeping_npc(self):
        self.scripts["Tom"].sleep(reason="test")
        self.char1.at_say("Marta, an ale please")
        self.assertEqual(self.scripts["Tom"].db.operating_mode, "sleep")
        self.char1.at_say("Tom, wake up!")
        self.assertEqual(self.scripts["Tom"].db.operating_mode, "awake")

    def test_a_lone_npc_answers_every_line(self):
        self.tom.location = self.room2
        self.ada.location = self.room2
        self.char1.at_say("An ale please.")
        self.assertEqual(self.pending()["Marta"], 1)
