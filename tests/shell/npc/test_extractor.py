"""
Who writes the journal's facts (``ai_contrib.npc.extractor``; ``docs/design.md``, "Facts players
said"), with a real AssistantScript, the real client and the HTTP LLM double: a model whose
facts are junk gives way to rules over what players said, and an NPC's own line is no fact
unless a player said it too.
"""

from django.test import override_settings
from evennia.utils import create

from ai_contrib.core.fact_policy import GROUNDING_MIN_FACTS
from ai_contrib.llm.client import reset_client
from ai_contrib.npc.extraction import run_pre_compaction_extraction
from ai_contrib.typeclasses import AssistantCharacter

from tests.support.llm_double import structured
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for

#: what the embedded model journaled from a tavern's talk (the prompt's example with its
#: names, and the NPC's own small talk)
JUNK = ["Alice is allergic to peanuts.", "Bob promised to bring 3 iron ingots by Friday.",
        "I'm not sure about that.", "How have you been feeling lately?"]


class ExtractorTestCase(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.char1.key, self.char2.key = "Carol", "Dave"
        self.player("Carol", "Good evening, Marta!")
        self.npc_says("I'm not sure about that.")
        self.carol = self.player("Carol", "I'm Carol, a weaver from Eastwick.")
        self.npc_says("How have you been feeling lately?")
        self.sister = self.player("Carol", "Well, my sister Anwen is coming.")
        self.npc_says("Awesome night you did, ha!")

    def player(self, name, text, who=None):
        who = who or self.char1
        return self.script.add_message(
            "user", text, name=name,
            metadata={"speaker": who.dbref, "audience": [who.dbref]})

    def npc_says(self, text):
        return self.script.add_message("assistant", text, name=self.npc.key)

    def extract(self):
        return stored(wait_for(run_pre_compaction_extraction(self.script, self.npc)))

    def facts(self):
        return [e for e in (self.npc.db.journal or {}).get("entries", [])
                if e["source_type"] == "fact"]

    def junk_replies(self, seqs):
        """Structured replies of three junk facts each, enough to judge the model, then noop."""
        calls = [("add_journal_entry", {"content": text, "importance": 10,
                                        "source": seqs[:1]})
                 for text in JUNK * GROUNDING_MIN_FACTS][:GROUNDING_MIN_FACTS + 1]
        return [structured(*calls[i:i + 3]) for i in range(0, len(calls), 3)]


class TestJunkGivesWayToRules(ExtractorTestCase):
    def test_a_model_that_journals_junk_is_replaced_by_the_players_facts(self):
        seqs = [m["seq"] for m in self.script.history if m["role"] == "assistant"]
        self.llm.enqueue(*self.junk_replies(seqs), structured(("noop", {})))
        result = self.extract()
        self.assertTrue(result["success"], result)
        # the model was asked, none of its junk was stored, and the rules journaled what Carol
        # said, each citing her line
        self.assertGreater(len(self.llm.requests), 0)
        # (each listener group's view is read apart: its lines may bring more refusals)
        self.assertGreaterEqual(result["facts_rejected"], GROUNDING_MIN_FACTS + 1, result)
        self.assertEqual(result["modes"][-1], "rule")
        facts = self.facts()
        self.assertEqual([e["content"] for e in facts], [
            "Carol is a weaver from Eastwick.", "Carol's sister Anwen is coming."])
        self.assertFalse([e for e in facts if any(j.rstrip(".") in e["content"] for j in JUNK)])
        self.assertEqual([(e["speaker"], e["source_ids"], e["audience"], e["grounding"])
                          for e in facts[:1]],
                         [("Carol", [self.carol["id"]], [self.char1.dbref], "rule")])
        self.assertEqual(result["facts_recorded"], 2)

        # the model is judged now: the next extraction asks it nothing and goes by rule
        asked = len(self.llm.requests)
        self.player("Dave", "I owe you 3 silver, Marta.", who=self.char2)
        result = self.extract()
        self.assertEqual((result["stopped_by"], result["modes"]), ("rule", ["rule"]))
        self.assertEqual(len(self.llm.requests), asked)
        self.assertEqual(self.facts()[-1]["content"], "Dave owes Marta 3 silver.")

        # control: a new client judges the model afresh, and asks it
        wait_for(reset_client())
        self.llm.enqueue(structured(("noop", {})))
        result = self.extract()
        # (one request a listener group at least)
        self.assertGreater(len(self.llm.requests), asked)
        self.assertNotIn("rule", result["modes"])

    def test_the_setting_forces_the_model_or_the_rules(self):
        seqs = [m["seq"] for m in self.script.history if m["role"] == "assistant"]
        with override_settings(AI_PRE_COMPACT_EXTRACTOR="model"):
            self.llm.enqueue(*self.junk_replies(seqs), structured(("noop", {})))
            result = self.extract()
        self.assertNotIn("rule", result["modes"])
        self.assertEqual(self.facts(), [])  # the junk refused, and no rule asked
        with override_settings(AI_PRE_COMPACT_EXTRACTOR="rule"):
            asked = len(self.llm.requests)
            result = self.extract()
        self.assertEqual(len(self.llm.requests), asked)  # no model asked
        self.assertEqual(len(self.facts()), 2, self.facts())


class TestNPCLines(ExtractorTestCase):
    ROAD = "The north road is flooded past the old mill."

    def cite(self, msg):
        self.llm.enqueue(structured(("add_journal_entry", {
            "content": self.ROAD, "importance": 9, "source": [msg["seq"]]})),
            structured(("noop", {})))
        return self.extract()

    def test_a_fact_citing_only_the_npc_s_own_line_is_refused(self):
        said = self.npc_says(self.ROAD)
        result = self.cite(said)
        self.assertEqual((result["facts_recorded"], result["facts_rejected"]), (0, 1), result)
        self.assertEqual(self.facts(), [])
        # positive control: the same words said by a player are journaled, as that player's
        told = self.player("Carol", self.ROAD)
        result = self.cite(told)
        self.assertEqual(result["facts_recorded"], 1, result)
        (entry,) = self.facts()
        self.assertEqual((entry["content"], entry["speaker"]), (self.ROAD, "Carol"))
        self.assertIn(told["id"], entry["source_ids"])

    def test_an_npc_s_line_a_player_confirmed_is_the_player_s_fact(self):
        told = self.player("Carol", self.ROAD)
        said = self.npc_says(self.ROAD)
        result = self.cite(said)  # the model cites the NPC's line only
        self.assertEqual(result["facts_recorded"], 1, result)
        (entry,) = self.facts()
        # the player's line stands behind it: it is cited, its speaker and audience are hers
        self.assertIn(told["id"], entry["source_ids"])
        self.assertEqual((entry["speaker"], entry["audience"]), ("Carol", [self.char1.dbref]))
        self.assertEqual(entry["importance"], 9)  # a player's fact: not capped

    def test_a_fact_only_the_npc_s_line_and_a_summary_stand_behind_is_capped(self):
        from ai_contrib.core.fact_policy import NPC_LINE_MAX_IMPORTANCE
        from ai_contrib.core.messages import MARKER_TYPE, SUMMARY_PREFIX

        # what a summary says passes the players' check (no NPC said it in a line of its own),
        # but no player's line stands behind the fact: the NPC's line it cites is its source
        self.script.add_message("system", f"{SUMMARY_PREFIX}\n- {self.ROAD}",
                                metadata={"type": MARKER_TYPE})
        said = self.npc_says(self.ROAD)
        result = self.cite(said)
        self.assertEqual(result["facts_recorded"], 1, result)
        (entry,) = self.facts()
        self.assertEqual(entry["source_ids"], [said["id"]])
        self.assertLess(NPC_LINE_MAX_IMPORTANCE, 9)
        self.assertEqual(entry["importance"], NPC_LINE_MAX_IMPORTANCE)  # 9 asked, capped

    def summarised(self, speaker):
        """A line of an earlier summary giving ``speaker``'s words: the road fact."""
        from ai_contrib.core.messages import MARKER_TYPE, SUMMARY_PREFIX

        self.script.add_message("system", f"{SUMMARY_PREFIX}\n- {speaker} said: {self.ROAD}",
                                metadata={"type": MARKER_TYPE})

    def assert_an_npc_s_summarised_words_are_no_fact(self, npc, player):
        """The road fact that only ``npc``'s summarised words stand behind is refused; the same
        line giving ``player``'s words is journaled (the positive control)."""
        self.summarised(npc)
        said = self.npc_says("The weather turns tomorrow.")
        result = self.cite(said)
        self.assertEqual((result["facts_recorded"], result["facts_rejected"]), (0, 1), result)
        self.assertEqual(self.facts(), [])
        self.summarised(player)
        result = self.cite(said)
        self.assertEqual(result["facts_recorded"], 1, result)
        self.assertEqual([e["content"] for e in self.facts()], [self.ROAD])

    def test_an_npc_s_words_in_a_summary_are_still_the_npc_s(self):
        # an extract quotes the NPC's reply as her words: they pass no more than her line does
        self.assert_an_npc_s_summarised_words_are_no_fact(self.npc.key, "Carol")

    def test_a_summary_quoting_an_npc_who_has_left_is_still_an_npc_s_words(self):
        # Fenwick, another AI NPC, spoke here once; his lines are summarised and he is away
        create.create_object(AssistantCharacter, key="Fenwick", location=self.room2)
        self.assertFalse([m for m in self.script.history if m.get("name") == "Fenwick"])
        # Hobb is no AI NPC: his summarised words are a player's
        self.assert_an_npc_s_summarised_words_are_no_fact("Fenwick", "Hobb")


class TestReplacedByAQuestion(ExtractorTestCase):
    #: every word is in the talk (the word-level check passes), no line holds 70 % of them
    GLUED = "Carol's sister Anwen is coming for the good mutton stew tonight."

    def journal_glued(self):
        self.llm.enqueue(structured(("add_journal_entry", {
            "content": self.GLUED, "importance": 6})), structured(("noop", {})))
        return self.extract()

    def test_a_fact_is_not_replaced_by_a_line_that_only_asks(self):
        self.player("Carol", "Is the mutton stew tonight any good?")
        result = self.journal_glued()
        # its best line is the question: quoting it would journal nothing said
        self.assertEqual((result["facts_recorded"], result["facts_rejected"]), (0, 1), result)
        self.assertEqual(self.facts(), [])
        # positive control: a line that states it, and the fact is journaled
        self.player("Carol", "Anwen is coming, and the mutton stew tonight is good.")
        result = self.journal_glued()
        self.assertEqual(result["facts_recorded"], 1, result)
        self.assertEqual([e["content"] for e in self.facts()], [self.GLUED])
