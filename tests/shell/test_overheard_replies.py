"""
A whisper never leaves through an AI NPC that overhears the reply (``docs/design.md``, "Privacy
by audience", "Gossip"): Marta and Tobin, both AI NPCs, in the tavern with Wren, the only player.
Wren whispers a password to Marta and the model repeats it: the reply is murmured to Wren (Tobin
counts as present and did not hear the whisper), so Tobin's history, what his extraction reads
and what gossip carries to Bram never hold it. A reply Marta says aloud is stored by Tobin with
the audience she built it for; an AI NPC never counts towards "public", and gossip never brings
a fact back to an NPC it came from. Real NPCs in Evennia's test world, real HTTP LLM double.
"""

from unittest import mock

from django.test import override_settings
from evennia.utils import create

from ai_contrib.commands import CmdTalk
from ai_contrib.memory.journal import add_entry, ensure_journal
from ai_contrib.npc.gossip import receive_gossip
from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

from tests.support.llm_double import reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for

SECRET = "the back door password is heron-gate"
ANSWER = "Heron-gate, you say: the back door password is heron-gate. I will remember."
PUBLIC_ANSWER = "The east room costs two silver a night."


class OverheardCase(NPCTestCase):
    """Marta (``self.npc``) and Tobin in room1 with Wren; Ann waits in room2; Bram, another AI
    NPC, is in room2 too, in the same gossip zone, and was never in the tavern."""

    def setUp(self):
        super().setUp()
        override = override_settings(AI_MEMORY_ENABLED=False)
        override.enable()
        self.addCleanup(override.disable)
        self.char1.key, self.char2.key = "Wren", "Ann"
        self.wren, self.ann = self.char1, self.char2
        self.ann.location = self.room2
        for room in (self.room1, self.room2):
            room.tags.add("crossroads", category="zone")
        self.tobin = create.create_object(AssistantCharacter, key="Tobin", location=self.room1)
        self.tobin.db.persona = "You are Tobin, a travelling tinker."
        self.bram = create.create_object(AssistantCharacter, key="Bram", location=self.room2)
        self.tobin_script = get_assistant_script(self.tobin)

    def answer(self, text):
        """Marta's next turn answers with ``text``; returns what Wren and Ann were sent."""
        got = {"Wren": [], "Ann": []}
        self.llm.enqueue(reply(text))
        with mock.patch.object(self.wren, "msg",
                               side_effect=lambda *a, **k: got["Wren"].append(str(a or k))), \
                mock.patch.object(self.ann, "msg",
                                  side_effect=lambda *a, **k: got["Ann"].append(str(a or k))):
            wait_for(self.script.run_tick())
        return {key: " ".join(lines) for key, lines in got.items()}

    def tobin_heard(self):
        return [m for m in self.tobin_script.history if m["role"] == "user"]

    def journal(self, npc):
        return ensure_journal(npc.db.journal)["entries"]

    def journal_heard(self, npc, line):
        """Journal a fact from ``line`` of ``npc``'s history, with its speaker and audience, as
        an extraction that read only that line would (``memory/provenance.py``)."""
        journal = ensure_journal(npc.db.journal)
        entry = add_entry(journal, line["content"], 7, speaker=line["name"],
                          audience=line["metadata"]["audience"], source_ids=[line["id"]])
        npc.db.journal = journal
        return entry


class TestAWhisperedSecretStaysWithTheWhisperer(OverheardCase):
    def test_the_reply_is_murmured_and_the_other_npc_stores_nothing_of_it(self):
        self.call(CmdTalk(), f"/private Marta = {SECRET}", caller=self.wren)
        self.assertEqual(self.tobin_heard(), [])  # Tobin does not hear the whisper
        got = self.answer(ANSWER)
        said = self.script.history[-1]
        self.assertEqual(said["content"], ANSWER)
        # Tobin is in the room and did not hear the whisper: the reply is murmured to Wren
        self.assertTrue(said["metadata"]["murmured"])
        self.assertEqual(said["metadata"]["audience"], [self.wren.dbref])
        self.assertIn("heron-gate", got["Wren"])
        # nothing of it reached Tobin: not his history, so not what his extraction reads
        self.assertFalse(any("heron-gate" in m["content"] for m in self.tobin_script.history))
        self.assertEqual(self.tobin_heard(), [])
        # nor, by gossip, Bram, who does hear what Tobin learned in front of two players
        told = {"id": "x", "role": "user", "name": "Ann", "content": "The mill burned down.",
                "metadata": {"audience": sorted([self.wren.dbref, self.ann.dbref])}}
        self.journal_heard(self.tobin, told)
        receive_gossip(get_assistant_script(self.bram), self.bram)
        self.assertEqual([e["content"] for e in self.journal(self.bram)],
                         ["The mill burned down."])
        self.assertFalse(any("heron-gate" in e["content"] for e in self.journal(self.bram)))

        # the control: a line Wren says aloud is answered aloud, and Tobin stores the reply
        # with the audience Marta built it for: Wren, himself left out, and Marta who said it
        self.call(CmdTalk(), "Marta = how much is a room?", caller=self.wren)
        self.answer(PUBLIC_ANSWER)
        said = self.script.history[-1]
        self.assertNotIn("murmured", said["metadata"])
        self.assertEqual(said["metadata"]["audience"],
                         sorted([self.wren.dbref, self.tobin.dbref]))
        overheard = self.tobin_heard()[-1]
        self.assertEqual(overheard["content"], PUBLIC_ANSWER)
        self.assertEqual(overheard["metadata"]["speaker"], self.npc.dbref)
        self.assertEqual(overheard["metadata"]["audience"],
                         sorted([self.wren.dbref, self.npc.dbref]))
        # the line Wren said aloud reached Tobin with him not listed and Marta listed
        asked = self.tobin_heard()[-2]
        self.assertEqual(asked["metadata"]["audience"], sorted([self.wren.dbref,
                                                               self.npc.dbref]))

    def test_a_turn_with_a_whisper_and_a_public_line_is_murmured(self):
        # a reply built from a public line and a whisper carries the whisper's audience
        self.call(CmdTalk(), "Marta = a fine evening", caller=self.wren)
        self.call(CmdTalk(), f"/private Marta = {SECRET}", caller=self.wren)
        self.answer(ANSWER)
        self.assertTrue(self.script.history[-1]["metadata"]["murmured"])
        self.assertFalse(any("heron-gate" in m["content"] for m in self.tobin_script.history))
        # control: Tobin heard the public line itself
        self.assertEqual([m["content"] for m in self.tobin_heard()], ["a fine evening"])


class TestAnNPCNeverMakesALinePublic(OverheardCase):
    def test_a_reply_to_one_player_overheard_by_an_npc_does_not_travel(self):
        self.call(CmdTalk(), "Marta = how much is a room?", caller=self.wren)
        self.answer(PUBLIC_ANSWER)
        alone = self.journal_heard(self.tobin, self.tobin_heard()[-1])
        # Wren, Marta: one player heard it, and an NPC (the speaker) is not a second hearer
        self.assertEqual(alone["audience"], sorted([self.wren.dbref, self.npc.dbref]))
        receive_gossip(get_assistant_script(self.bram), self.bram)
        self.assertEqual(self.journal(self.bram), [])

        # the control: with a second player in the room the same kind of reply travels
        self.ann.location = self.room1
        self.call(CmdTalk(), "Marta = and breakfast?", caller=self.wren)
        self.answer("Breakfast is one copper, bread and eggs.")
        heard = self.tobin_heard()[-1]
        self.assertEqual(heard["metadata"]["audience"],
                         sorted([self.wren.dbref, self.ann.dbref, self.npc.dbref]))
        shared = self.journal_heard(self.tobin, heard)
        self.bram.location = self.room2
        result = receive_gossip(get_assistant_script(self.bram), self.bram)
        self.assertEqual(result.count("received"), 1, result)
        [copy] = self.journal(self.bram)
        self.assertEqual(copy["content"], shared["content"])
        self.assertEqual(copy["heard_from"], "Tobin")
        self.assertEqual(copy["chain_ids"], [self.tobin.dbref])

        # ...and never back to Marta, who said it first, however she meets Tobin
        self.npc.location = self.room2
        result = receive_gossip(self.script, self.npc)
        self.assertFalse(any(e.get("heard_from") for e in self.journal(self.npc)), result)
        # nor to Tobin, from Bram, whom he told
        receive_gossip(self.tobin_script, self.tobin)
        self.assertFalse(any(e.get("heard_from") == "Bram" for e in self.journal(self.tobin)))
