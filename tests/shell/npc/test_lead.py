"""
Marta shows a guest up to the east room and comes back (``game_template``'s ``commands.lead`` and
``typeclasses.innkeeper``; ``docs/design.md``, "Actions"): ``lead`` is a game's command in the
action cmdset that takes her, then the guest, through the exit by the exit's own command, her
hook leads only a guest who asked, and her typeclass walks her back to her counter. Real NPC in
Evennia's test world, real HTTP LLM double issuing tool calls.
"""

import sys

from django.test import override_settings
from evennia.server.signals import SIGNAL_EXIT_TRAVERSED
from evennia.utils import create

from ai_contrib.npc import actions as npc_actions
from ai_contrib.typeclasses import get_assistant_script

from tests.support.llm_double import reply, tool_calls
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for, wait_until

TAVERN_CMDSET = "commands.lead.TavernActionCmdSet"


class TestShowingAGuestUp(NPCTestCase):
    """room1 is the tavern (Marta's home), room2 the east room behind the template's east door;
    Wren (char1) and Tamsin (char2) are in the tavern."""

    def setUp(self):
        super().setUp()
        sys.path.insert(0, "game_template")
        self.addCleanup(sys.path.remove, "game_template")
        from typeclasses.innkeeper import EAST_DOOR_LOCK, KEY_NAME, Innkeeper

        self.npc.delete()
        self.npc = create.create_object(Innkeeper, key="Marta", location=self.room1,
                                        home=self.room1, tags=[("innkeeper", "ai_tavern")])
        self.npc.db.back_after = 0.05
        self.script = get_assistant_script(self.npc)
        self.script.db.actions = ["lead", "look"]
        self.script.db.action_cooldown = 0
        self.char1.key, self.char2.key = "Wren", "Tamsin"
        self.char2.location = self.room1
        self.door = create.create_object("evennia.objects.objects.DefaultExit", key="east",
                                         location=self.room1, destination=self.room2)
        self.door.locks.add(EAST_DOOR_LOCK)
        self.door.db.err_traverse = "The east room's door is locked; Marta has the key."
        self.down = create.create_object("evennia.objects.objects.DefaultExit", key="down",
                                         location=self.room2, destination=self.room1)
        self.key = create.create_object("evennia.objects.objects.DefaultObject", key=KEY_NAME,
                                        location=self.npc)
        self.walks = []

        def walked(sender, traverser, **kwargs):
            self.walks.append((sender.key, traverser.key))

        SIGNAL_EXIT_TRAVERSED.connect(walked)
        self.addCleanup(SIGNAL_EXIT_TRAVERSED.disconnect, walked)
        npc_actions._TOOLS_REFUSED.clear()

    def lead(self, line, speaker, args="Wren = east"):
        with override_settings(AI_ACTION_CMDSET=TAVERN_CMDSET):
            self.llm.enqueue(tool_calls([("lead", {"args": args})]), reply("This way."))
            self.script.receive_speech(speaker, line)
            wait_for(self.script.run_tick())
        return [m["content"] for m in self.llm.requests[-1]["messages"] if m["role"] == "tool"]

    def test_she_shows_a_guest_with_the_key_up_and_comes_back(self):
        # without the key Wren cannot pass the door: nobody moves, and the model is told why
        told = self.lead("Marta, show me up to the east room.", self.char1)
        self.assertIn("lead Wren = east: done. Wren cannot go east: The east room's door is "
                      "locked", told[0])
        self.assertEqual((self.npc.location, self.char1.location), (self.room1, self.room1))
        self.assertEqual(self.walks, [])
        # positive control: holding the key (she gave it on payment), Wren follows her up
        self.key.location = self.char1
        told = self.lead("Marta, I have the key now: show me up, please.", self.char1)
        self.assertIn("lead Wren = east: done.", told[0])
        self.assertEqual(self.char1.location, self.room2)
        self.assertEqual(self.walks[:2], [("east", "Marta"), ("east", "Wren")])
        # she walks back to her counter by the east room's own exit; Wren stays in her room
        wait_until(lambda: self.npc.location == self.room1)
        self.assertEqual(self.walks, [("east", "Marta"), ("east", "Wren"), ("down", "Marta")])
        self.assertEqual(self.char1.location, self.room2)
        self.assertEqual(self.npc.location, self.room1)

    def test_she_leads_only_a_guest_who_asked(self):
        self.key.location = self.char2
        told = self.lead("Marta, a quiet night, isn't it?", self.char1, args="Tamsin = east")
        self.assertIn("lead Tamsin = east: refused. only a guest who asked", told[0])
        self.assertEqual(self.char2.location, self.room1)
        self.assertEqual(self.walks, [])
        # positive control: Tamsin asking herself, the same call leads her up
        told = self.lead("Marta, show me my room.", self.char2, args="Tamsin = east")
        self.assertIn("lead Tamsin = east: done.", told[0])
        self.assertEqual(self.char2.location, self.room2)
        wait_until(lambda: self.npc.location == self.room1)
