"""
Bram of the watch opens the town gate (``game_template``'s ``typeclasses.gatekeeper`` and
``commands.gate``; ``docs/design.md``, "Actions"): the gate is a real locked exit, ``unlock`` a
game's command in the action cmdset, and his hook lets it run only for the watchword after the
tenth bell, telling the model why otherwise. Real NPC in Evennia's test world, real HTTP LLM
double issuing tool calls; the game's clock is the one thing set by the test.
"""

import sys

from django.test import override_settings
from evennia.utils import create

from ai_contrib.npc import actions as npc_actions
from ai_contrib.typeclasses import get_assistant_script

from tests.support.llm_double import reply, tool_calls
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for

GATE_CMDSET = "commands.gate.GateActionCmdSet"


class TestTheTownGate(NPCTestCase):
    """Bram guards a barred gate from room1 to room2; Wren (char1) asks him to open it."""

    def setUp(self):
        super().setUp()
        sys.path.insert(0, "game_template")
        self.addCleanup(sys.path.remove, "game_template")
        from typeclasses.gatekeeper import Gatekeeper

        self.npc.delete()
        self.npc = create.create_object(Gatekeeper, key="Bram", location=self.room1,
                                        tags=[("watch", "faction")])
        self.script = get_assistant_script(self.npc)
        self.script.db.actions = ["unlock", "look"]
        self.script.db.action_cooldown = 0
        self.char1.key = "Wren"
        self.char2.location = self.room2
        self.gate = create.create_object("evennia.objects.objects.DefaultExit", key="town gate",
                                         location=self.room1, destination=self.room2)
        self.gate.locks.add("traverse:false();unlock:tag(watch, faction)")
        npc_actions._TOOLS_REFUSED.clear()
        self.hour = 23
        self.npc.game_hour = lambda: self.hour

    def ask(self, line):
        with override_settings(AI_ACTION_CMDSET=GATE_CMDSET):
            self.llm.enqueue(tool_calls([("unlock", {"args": "town gate"})]), reply("Well."))
            self.script.receive_speech(self.char1, line)
            wait_for(self.script.run_tick())
        return [m["content"] for m in self.llm.requests[-1]["messages"] if m["role"] == "tool"]

    def test_by_day_the_watchword_opens_nothing_and_the_model_is_told_why(self):
        self.hour = 12
        told = self.ask("Bram, juniper. Open the gate.")
        self.assertIn("unlock town gate: refused.", told[0])
        self.assertIn("only at night, after the tenth bell", told[0])
        self.assertFalse(self.gate.access(self.char1, "traverse"))
        # positive control: the same words after the tenth bell open it
        self.hour = 22
        told = self.ask("Bram, juniper. Open the gate.")
        self.assertIn("unlock town gate: done. You unbar the town gate.", told[0])
        self.assertTrue(self.gate.access(self.char1, "traverse"))

    def test_at_night_without_the_watchword_the_gate_stays_barred(self):
        told = self.ask("Bram, open the gate, I am in a hurry.")
        self.assertIn("nobody gave this week's watchword", told[0])
        self.assertFalse(self.gate.access(self.char1, "traverse"))
        told = self.ask("Bram: Juniper.")
        self.assertIn("done", told[0])
        self.assertTrue(self.gate.access(self.char1, "traverse"))

    def test_only_the_watch_may_unlock_the_gate(self):
        from commands.gate import CmdUnlock

        self.call(CmdUnlock(), "town gate", "You cannot unlock the town gate.", caller=self.char1)
        self.assertFalse(self.gate.access(self.char1, "traverse"))
        # positive control: Bram, of the watch, may
        self.call(CmdUnlock(), "town gate", "You unbar the town gate.", caller=self.npc)
        self.assertTrue(self.gate.access(self.char1, "traverse"))

    def test_the_games_clock_is_evennias_gametime(self):
        from typeclasses.gatekeeper import Gatekeeper

        hour = Gatekeeper.game_hour(self.npc)
        self.assertIn(hour, range(24))
