"""
The audience is checked when a reply is spoken, not only when its prompt is built
(``docs/design.md``, "Privacy by audience"): Wren tells Marta a secret alone; Tamsin walks in
while the answer is being written, or after the line but before the turn answering it starts.
The answer, built from Wren's line, is not said aloud: Marta murmurs it to Wren, Tamsin sees
only that she murmurs, and the stored reply's audience is Wren alone. Real NPC in Evennia's test
world, real HTTP LLM double.
"""

import threading
from unittest import mock

from ai_contrib.core.audience import may_hear

from tests.support.llm_double import hold, reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import call_when, wait_for

SECRET = "Marta, a secret: the ledger is hidden behind the blue barrel."
ANSWER = "You told me the ledger is hidden behind the blue barrel; it stays with me."


def test_may_hear_keeps_only_those_who_heard_every_item():
    wren, tamsin = "#1", "#2"
    alone = {"content": "secret", "metadata": {"audience": [wren]}}
    both = {"content": "hi", "metadata": {"audience": [wren, tamsin]}}
    note = {"text": "memories", "audience": [wren]}
    public = {"content": "the game"}
    present = {wren: "Wren", tamsin: "Tamsin"}
    assert may_hear([both, public], present) == present
    assert may_hear([both, alone], present) == {wren: "Wren"}
    assert may_hear([both, note], present) == {wren: "Wren"}
    assert may_hear([alone], [tamsin]) == []


class AudienceAtSpeakTime(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.char1.key, self.char2.key = "Wren", "Tamsin"
        self.wren, self.tamsin = self.char1.dbref, self.char2.dbref
        self.char2.location = self.room2  # Wren is alone with Marta

    def tick(self):
        """One turn, with every message the two players get recorded."""
        got = {self.wren: [], self.tamsin: []}
        with mock.patch.object(self.char1, "msg",
                               side_effect=lambda *a, **k: got[self.wren].append(str(a or k))), \
                mock.patch.object(self.char2, "msg",
                                  side_effect=lambda *a, **k: got[self.tamsin].append(str(a or k))):
            wait_for(self.script.run_tick())
        return got

    def assert_murmured_to_wren(self, got):
        answer = self.script.history[-1]
        self.assertEqual(answer["role"], "assistant")
        self.assertEqual(answer["content"], ANSWER)
        self.assertEqual(answer["metadata"]["audience"], [self.wren])
        self.assertTrue(answer["metadata"]["murmured"])
        wren, tamsin = " ".join(got[self.wren]), " ".join(got[self.tamsin])
        self.assertIn("blue barrel", wren)
        self.assertIn("murmurs to Wren", wren)
        self.assertNotIn("blue barrel", tamsin)
        self.assertNotIn("ledger", tamsin)
        self.assertIn("murmurs something to Wren", tamsin)
        # later replies with Tamsin listening are built without the murmured answer
        self.llm.enqueue(reply("Welcome, Tamsin."))
        self.script.receive_speech(self.char2, "Evening, Marta!")
        got = self.tick()
        prompt = "\n".join(m["content"] for m in self.llm.requests[-1]["messages"])
        self.assertNotIn("blue barrel", prompt)
        self.assertIn("Welcome, Tamsin.", " ".join(got[self.tamsin]))
        self.assertEqual(self.script.history[-1]["metadata"]["audience"],
                         sorted([self.wren, self.tamsin]))
        self.assertNotIn("murmured", self.script.history[-1]["metadata"])

    def while_written(self, change):
        """Queue :data:`ANSWER`, held by the double until ``change()`` has run in the reactor
        once the reply's request is out (while the model is writing the answer)."""
        gate = threading.Event()
        self.llm.enqueue(hold(gate, reply(ANSWER)))

        def then():
            change()
            gate.set()

        call_when(lambda: self.llm.requests, then)

    def test_a_listener_who_walks_in_while_the_reply_is_written_does_not_hear_it(self):
        self.script.receive_speech(self.char1, SECRET)
        # Tamsin comes in while the model is writing the answer
        self.while_written(lambda: setattr(self.char2, "location", self.room1))
        got = self.tick()
        self.assertEqual(self.char2.location, self.room1)
        # the prompt was built for Wren alone, and held the secret
        prompt = "\n".join(m["content"] for m in self.llm.requests[0]["messages"])
        self.assertIn("blue barrel", prompt)
        self.assert_murmured_to_wren(got)

    def test_a_line_said_before_someone_walked_in_is_answered_to_its_hearers_only(self):
        self.llm.enqueue(reply(ANSWER))
        self.script.receive_speech(self.char1, SECRET)
        self.char2.location = self.room1  # before the turn answering the line starts
        got = self.tick()
        self.assert_murmured_to_wren(got)

    def test_with_nobody_new_the_reply_is_said_aloud(self):
        # the control: the same exchange in front of both is said to the room
        self.char2.location = self.room1
        self.llm.enqueue(reply(ANSWER))
        self.script.receive_speech(self.char1, SECRET)
        got = self.tick()
        answer = self.script.history[-1]
        self.assertEqual(answer["metadata"]["audience"], sorted([self.wren, self.tamsin]))
        self.assertNotIn("murmured", answer["metadata"])
        self.assertIn("blue barrel", " ".join(got[self.tamsin]))
        self.assertNotIn("murmur", " ".join(got[self.tamsin]))

    def test_when_everyone_it_was_built_for_left_it_is_not_said(self):
        self.script.receive_speech(self.char1, SECRET)

        def swap():
            self.char1.location = self.room2
            self.char2.location = self.room1

        self.while_written(swap)
        got = self.tick()
        self.assertNotIn("blue barrel", " ".join(got[self.tamsin]))
        self.assertNotEqual(self.script.history[-1]["role"], "assistant")


class MurmurToAnNPC(NPCTestCase):
    """Marta murmurs to Bram, an AI NPC: he hears it in the thread of the player's line it
    answers, so a murmured exchange between NPCs counts against the same reply bound
    (``docs/design.md``, "A room of NPCs") as a spoken one."""

    def test_a_murmured_reply_carries_its_thread_to_the_npc_who_hears_it(self):
        from evennia.utils import create

        from ai_contrib.npc import hearing, replies
        from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

        bram = create.create_object(AssistantCharacter, key="Bram", location=self.room1)
        brams = get_assistant_script(bram)
        thread = hearing.start_thread(self.room1, 1)
        replies.murmur(self.npc, "Bram, the ledger is yours to guard.",
                       {bram.dbref: "Bram"}, depth=2, thread=thread)
        heard = brams.history[-1]
        self.assertEqual(heard["content"], "Bram, the ledger is yours to guard.")
        self.assertEqual(heard["metadata"]["thread"], thread)
        self.assertEqual(heard["metadata"]["depth"], 2)
        self.assertEqual(heard["metadata"]["audience"], [self.npc.dbref])
        # control: said aloud, the same reply reaches him in the same thread
        replies._say_aloud(self.npc, "Bram, and the gate too.", 2, {bram.dbref: "Bram"}, thread)
        self.assertEqual(brams.history[-1]["metadata"]["thread"], thread)
