"""
A room of NPCs in Evennia's test world against the real HTTP LLM double (``docs/design.md``,
"A room of NPCs"): AI NPCs hear each other and can recall it, answer another NPC only when
named and only within ``AI_NPC_REPLY_DEPTH`` and ``AI_NPC_REPLY_COOLDOWN``, a player's turn goes
before NPCs' lines, turning to another NPC ends the first conversation, and a line to everyone
is answered by exactly one NPC.
"""

import itertools
import random
import threading
from unittest import mock

from django.test import override_settings
from evennia.utils import create

from ai_contrib.npc import replies as reply_module
from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

from tests.support.llm_double import hold, reply, sleep
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import cancel_pending_ticks, spin, wait_until

HILDA = "You are Hilda, the blacksmith. You work the forge and shoe horses."
OSWALD = "You are Oswald, a guard of the town watch. You keep the gate and the curfew."


class VillageModel:
    """
    Answers a reply request by the NPC whose persona opens its system message: ``lines[name]``
    (a format string with ``{n}``, the count of replies so far), else ``"<name> nods (n)."``.
    ``slow`` (a set of names) makes that NPC's next request wait until ``release`` is set (at
    the end of the test: it is given up long before); ``delay`` (``{name: seconds}``) makes its
    next request wait that long (an order of replies, not a limit).
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.count = itertools.count(1)
        self.lines = {}
        self.slow = set()
        self.delay = {}
        self.gates = {}  # {name: threading.Event}: its next request answers once set
        self.asked = []  # names, in the order their requests came
        self.release = threading.Event()

    def __call__(self, body):
        system = str(body["messages"][0].get("content") or "")
        name = system.split(",")[0].removeprefix("You are ").strip()
        with self.lock:
            n = next(self.count)
            self.asked.append(name)
            text = self.lines.get(name, "{name} nods ({n}).").format(name=name, n=n)
            if name in self.slow:
                self.slow.discard(name)
                return hold(self.release, then=reply(text))
            if name in self.gates:
                return hold(self.gates.pop(name), then=reply(text))
            if name in self.delay:
                return sleep(self.delay.pop(name), then=reply(text))
        return text


class VillageTestCase(NPCTestCase):
    def setUp(self):
        self.model = VillageModel()
        self.llm_default = self.model
        super().setUp()
        self.hilda = create.create_object(AssistantCharacter, key="Hilda", location=self.room1,
                                          aliases=["the smith"])
        self.hilda.db.persona = HILDA
        self.oswald = create.create_object(AssistantCharacter, key="Oswald",
                                           location=self.room1)
        self.oswald.db.persona = OSWALD
        self.npcs = {"Marta": self.npc, "Hilda": self.hilda, "Oswald": self.oswald}
        self.scripts = {key: get_assistant_script(npc) for key, npc in self.npcs.items()}
        self.addCleanup(cancel_pending_ticks)
        self.addCleanup(self.model.release.set)  # a held request ends with the test

    def pending(self):
        return {key: len(script.pending_ids()) for key, script in self.scripts.items()}

    def settle(self):
        """Let the reactor run until no NPC has had a line queued or a reply being written for
        six turns of 50 ms in a row."""
        quiet = [0]

        def fell_quiet():
            busy = any(s.ndb.busy or s.pending_ids() for s in self.scripts.values())
            quiet[0] = 0 if busy else quiet[0] + 1
            return quiet[0] >= 6

        wait_until(fell_quiet, step=0.05)

    def replies(self, key):
        return [m for m in self.scripts[key].history if m["role"] == "assistant"]

    def heard_from_npcs(self, key):
        return [m for m in self.scripts[key].history
                if m["role"] == "user" and m["metadata"].get("npc")]

    def reply_requests(self, name):
        return [b for b in self.llm.requests
                if str(b["messages"][0]["content"]).startswith(f"You are {name}")]


class TestNPCsHearEachOther(VillageTestCase):
    def test_an_npc_stores_another_npcs_reply_with_its_audience_and_recalls_it(self):
        self.model.lines["Marta"] = "The east room is two silver a night ({n})."
        self.char1.at_say("Marta, how much is a room?")
        self.settle()
        said = self.replies("Marta")[-1]["content"]
        for key, other in (("Hilda", "Oswald"), ("Oswald", "Hilda")):
            heard = self.heard_from_npcs(key)
            self.assertEqual([m["content"] for m in heard], [said])
            meta = heard[0]["metadata"]
            self.assertEqual(meta["speaker"], self.npc.dbref)
            self.assertEqual(heard[0]["name"], "Marta")
            # the audience Marta built the reply for (the players and the other NPC), and
            # Marta: never the NPC that stores it
            self.assertEqual(meta["audience"], sorted([self.char1.dbref, self.char2.dbref,
                                                       self.npc.dbref, self.npcs[other].dbref]))
            self.assertEqual(meta["depth"], 1)
            self.assertIs(meta["addressed"], False)  # Marta named nobody: nobody answers her
        self.assertEqual(len(self.llm.requests), 1)
        # Hilda recalls what she overheard: Marta's line is in the prompt of Hilda's reply
        self.char1.at_say("Hilda, did you hear the price of a room?")
        self.settle()
        asked = self.reply_requests("Hilda")
        self.assertEqual(len(asked), 1)
        prompt = "\n".join(str(m["content"]) for m in asked[0]["messages"])
        self.assertIn(f"Marta (overheard): {said}", prompt)
        self.assertIn("did you hear the price of a room", prompt)
        self.assertEqual(self.reply_requests("Oswald"), [])

    def test_a_murmured_reply_is_not_overheard_by_another_npc(self):
        self.char1.at_say("Marta, how much is a room?")
        self.settle()
        self.assertEqual(len(self.heard_from_npcs("Hilda")), 1)  # said aloud: heard
        # a reply murmured to one player is not said aloud: no NPC hears it
        from ai_contrib.npc.replies import murmur

        murmur(self.npc, "A secret price for you.", {self.char1.dbref: self.char1.key})
        self.assertEqual(len(self.heard_from_npcs("Hilda")), 1)
        self.assertEqual(len(self.heard_from_npcs("Oswald")), 1)


class TestNPCExchangesAreBounded(VillageTestCase):
    def setUp(self):
        super().setUp()
        self.model.lines["Marta"] = "Hilda, what do you say to that? ({n})"
        self.model.lines["Hilda"] = "Marta, I say aye. ({n})"

    def start_exchange(self):
        self.char1.at_say("Marta, who shoes horses around here?")
        self.settle()

    @override_settings(AI_NPC_REPLY_COOLDOWN=0)
    def test_two_npcs_naming_each_other_stop_at_the_depth_limit(self):
        for depth in (0, 2, 5):
            with self.subTest(depth=depth), override_settings(AI_NPC_REPLY_DEPTH=depth):
                before = len(self.llm.requests)
                self.start_exchange()
                # the player's answer, then one NPC reply per level of depth
                self.assertEqual(len(self.llm.requests) - before, 1 + depth)
                deepest = max(m["metadata"]["depth"] for key in ("Marta", "Hilda")
                              for m in self.heard_from_npcs(key))
                self.assertEqual(deepest, depth + 1)
                unanswered = [m for key in ("Marta", "Hilda") for m in self.heard_from_npcs(key)
                              if m["metadata"]["depth"] == depth + 1]
                self.assertTrue(unanswered)
                self.assertTrue(all(m["metadata"]["addressed"] is False for m in unanswered))
                self.assertEqual(self.reply_requests("Oswald"), [])  # never named
                for script in self.scripts.values():  # the next round starts afresh
                    script.ndb.npc_answered_at = None

    @override_settings(AI_NPC_REPLY_COOLDOWN=0, AI_NPC_REPLY_DEPTH=1)
    def test_npcs_that_spoke_with_each_other_are_in_each_others_people_records(self):
        from ai_contrib.npc.scene import people_record

        self.model.lines["Hilda"] = "Aye, I shoe horses. ({n})"  # she names nobody back
        self.start_exchange()  # Marta answers Perrin and asks Hilda; Hilda answers Marta
        self.assertEqual(self.model.asked, ["Marta", "Hilda"])
        marta, hilda, oswald = (self.scripts[key] for key in ("Marta", "Hilda", "Oswald"))
        self.assertEqual(people_record(hilda, self.npc.dbref)["name"], "Marta")
        self.assertEqual(people_record(marta, self.hilda.dbref)["name"], "Hilda")
        # Oswald overheard them both and spoke with neither; the player is in Marta's records
        self.assertIsNone(people_record(oswald, self.npc.dbref))
        self.assertIsNone(people_record(oswald, self.hilda.dbref))
        self.assertIsNotNone(people_record(marta, self.char1.dbref))
        # the scene of Hilda's next prompt knows Marta, and still not Oswald
        self.char1.at_say("Hilda, is the forge hot?")
        self.settle()
        prompt = "\n".join(str(m["content"]) for m in self.reply_requests("Hilda")[-1]["messages"])
        self.assertNotIn("Marta (you have not met)", prompt)
        self.assertIn("Oswald (you have not met)", prompt)

    @override_settings(AI_NPC_REPLY_COOLDOWN=0, AI_NPC_REPLY_DEPTH=2)
    def test_a_line_said_to_two_npcs_costs_no_more_replies_than_the_bound(self):
        self.char1.at_say("Marta and Hilda, who shoes horses around here?")
        self.settle()
        # both answer the player, and each names the other: the exchange stops at
        # 1 + AI_NPC_REPLY_DEPTH = 3 replies in all
        self.assertEqual(len(self.llm.requests), 3)
        self.assertEqual(sum(len(self.replies(key)) for key in ("Marta", "Hilda")), 3)
        threads = {m["metadata"].get("thread") for key in ("Marta", "Hilda")
                   for m in self.replies(key)}
        self.assertEqual(len(threads), 1)  # all of them count against the player's line
        # the control: a line within the depth limit was refused for the bound alone
        refused = [m for key in ("Marta", "Hilda") for m in self.heard_from_npcs(key)
                   if m["metadata"]["depth"] <= 2 and m["metadata"]["addressed"] is False]
        self.assertTrue(refused)
        # and the next player's line starts a thread of its own
        self.char1.at_say("Marta, who shoes horses around here?")
        self.settle()
        self.assertEqual(len(self.llm.requests), 6)

    @override_settings(AI_NPC_REPLY_DEPTH=5, AI_NPC_REPLY_COOLDOWN=3600)
    def test_the_cooldown_stops_an_exchange_the_depth_would_allow(self):
        self.start_exchange()
        # Marta to the player, Hilda to Marta, Marta to Hilda; Hilda's next answer falls in
        # her cooldown (the depth, 5, would allow three more)
        self.assertEqual(len(self.llm.requests), 3)
        blocked = [m for m in self.heard_from_npcs("Hilda") if m["metadata"]["depth"] == 3]
        self.assertEqual(len(blocked), 1)
        self.assertIs(blocked[0]["metadata"]["addressed"], False)
        answered = [m for m in self.heard_from_npcs("Hilda") if m["metadata"]["depth"] == 1]
        self.assertIs(answered[0]["metadata"]["addressed"], True)

    def test_a_player_line_goes_before_an_npc_line_heard_earlier(self):
        self.model.lines.clear()  # nobody names anybody back
        hilda, oswald = self.scripts["Hilda"], self.scripts["Oswald"]
        # Hilda is named by Marta, then Oswald by a player, before any tick ran
        hilda.receive_speech(self.npc, "Hilda, a horseshoe for the traveller?")
        oswald.receive_speech(self.char1, "Oswald, is the gate shut?")
        self.assertEqual(self.pending(), {"Marta": 0, "Hilda": 1, "Oswald": 1})
        self.assertTrue(hilda.players_first())
        self.assertFalse(oswald.players_first())
        self.settle()
        self.assertEqual(self.model.asked[:2], ["Oswald", "Hilda"])
        self.assertEqual(len(self.replies("Hilda")), 1)

    def player_line_waits(self, character):
        """Whether another NPC of the room has a player's line queued or is answering one."""
        for other in self.npcs.values():
            mind = other.assistant
            if other == character or mind is None:
                continue
            npc_lines = mind.ndb.npc_line_ids or set()
            if mind.ndb.turn_kind == "player" or any(
                    line not in npc_lines for line in (mind.ndb.pending or ())):
                return True
        return False

    @override_settings(AI_NPC_REPLY_COOLDOWN=0, AI_NPC_REPLY_DEPTH=5)
    def test_no_reply_to_npcs_is_asked_for_while_a_players_line_waits(self):
        self.model.lines.update({"Marta": "Hilda, what say you? ({n})",
                                 "Hilda": "Oswald, and you? ({n})",
                                 "Oswald": "Marta, aye. ({n})"})
        asked = []  # (npc, its turn answers NPCs only, a player's line waits), as each is sent
        real_ask = reply_module._ask

        def ask(script, character, prompt, shown):
            npc_lines = script.ndb.npc_line_ids or set()
            turn = script.ndb.answering or []
            asked.append((character.key, bool(turn) and all(line in npc_lines for line in turn),
                          self.player_line_waits(character)))
            return real_ask(script, character, prompt, shown)

        rng = random.Random(4)
        with mock.patch.object(reply_module, "_ask", ask):
            for i in range(25):  # two players keep talking to the three NPCs
                self.model.delay[rng.choice(list(self.npcs))] = rng.uniform(0.1, 0.8)
                rng.choice([self.char1, self.char2]).at_say(
                    f"{rng.choice(list(self.npcs))}, question {i}?")
                spin(rng.uniform(0.05, 0.6))
            self.settle()
        self.assertEqual([a for a in asked if a[1] and a[2]], [])
        # the controls: NPCs did answer NPCs (once the players were answered), and player
        # lines did wait while other replies were asked for
        self.assertTrue(any(npc_only for _, npc_only, _ in asked))
        self.assertTrue(any(waits for _, npc_only, waits in asked if not npc_only))

    def test_a_player_line_makes_an_npc_give_up_a_reply_to_an_npc(self):
        self.model.lines.clear()  # nobody names anybody back
        hilda = self.scripts["Hilda"]
        self.model.slow.add("Hilda")
        heard = hilda.receive_speech(self.npc, "Hilda, a horseshoe for the traveller?")
        wait_until(lambda: self.reply_requests("Hilda"))
        self.assertEqual(len(self.reply_requests("Hilda")), 1)  # her reply is being written
        self.assertEqual(hilda.ndb.turn_kind, "npc")
        self.char1.at_say("Oswald, is the gate shut?")
        spin(0.2)
        self.settle()
        # her reply was given up for Oswald's answer to the player, then written again
        self.assertEqual(self.model.asked, ["Hilda", "Oswald", "Hilda"])
        replies = self.replies("Hilda")
        self.assertEqual([m["content"] for m in replies], ["Hilda nods (3)."])  # not (1)
        self.assertEqual(replies[0]["metadata"]["reply_to"], [heard["id"]])
        self.assertEqual(replies[0]["metadata"]["depth"], 2)


class TestARoomOfNPCs(VillageTestCase):
    def test_turning_to_another_npc_ends_the_conversation_with_the_first(self):
        self.char1.at_say("Marta, how much is a room?")
        self.settle()
        self.char1.at_say("Hilda, can you shoe my horse?")
        self.assertEqual(self.pending(), {"Marta": 0, "Hilda": 1, "Oswald": 0})
        self.settle()
        self.char1.at_say("And how much would that cost?")
        self.assertEqual(self.pending(), {"Marta": 0, "Hilda": 1, "Oswald": 0})
        self.settle()
        self.assertEqual(self.model.asked, ["Marta", "Hilda", "Hilda"])
        # every NPC stored the line, answered or not
        for key in ("Marta", "Oswald"):
            self.assertIn("And how much would that cost?",
                          [m["content"] for m in self.scripts[key].history])

    def test_the_partner_is_who_was_named_last_whatever_order_the_replies_arrive_in(self):
        gate = threading.Event()  # Marta's reply is held until Hilda's is stored
        self.addCleanup(gate.set)
        self.model.gates["Marta"] = gate
        self.char1.at_say("Marta, how much is a room?")
        wait_until(lambda: self.reply_requests("Marta"))
        self.char1.at_say("Hilda, can you shoe my horse?")
        wait_until(lambda: self.replies("Hilda"))
        gate.set()
        self.settle()
        marta, hilda = self.replies("Marta")[-1], self.replies("Hilda")[-1]
        # the race this test is about: Marta's reply was stored after Hilda's
        self.assertGreater(marta["timestamp"], hilda["timestamp"])
        self.char1.at_say("And how much would that cost?")
        self.assertEqual(self.pending(), {"Marta": 0, "Hilda": 1, "Oswald": 0})
        self.settle()
        self.assertEqual(self.model.asked, ["Marta", "Hilda", "Hilda"])
        # positive control: with Marta named last, her reply keeps her the partner
        self.char1.at_say("Marta, and breakfast?")
        self.settle()
        self.char1.at_say("And how much would that cost?")
        self.assertEqual(self.pending(), {"Marta": 1, "Hilda": 0, "Oswald": 0})

    def test_the_npc_spoken_to_answers_and_the_one_mentioned_does_not(self):
        self.char1.at_say("Marta, is Hilda always this talkative?")
        self.assertEqual(self.pending(), {"Marta": 1, "Hilda": 0, "Oswald": 0})
        self.settle()
        self.assertEqual(self.model.asked, ["Marta"])
        self.assertIn("Marta, is Hilda always this talkative?",
                      [m["content"] for m in self.scripts["Hilda"].history])  # she heard it
        # positive control: said to both, both answer
        self.char1.at_say("Marta and Hilda, is Oswald always this quiet?")
        self.assertEqual(self.pending(), {"Marta": 1, "Hilda": 1, "Oswald": 0})
        self.settle()
        self.assertEqual(sorted(self.model.asked[1:]), ["Hilda", "Marta"])

    def test_a_line_to_everyone_gets_exactly_one_fitting_answer(self):
        # nobody spoken to yet, no role fits: one NPC, the same whoever decides
        self.char2.at_say("Good evening, everyone!")
        self.assertEqual(sum(self.pending().values()), 1)
        self.settle()
        # a role fits: the blacksmith answers the forge
        self.char1.at_say("Evening all, is the forge still hot?")
        self.assertEqual(self.pending(), {"Marta": 0, "Hilda": 1, "Oswald": 0})
        self.settle()
        # the NPC the speaker spoke with most recently, once the conversation is over
        self.char1.at_say("Oswald, is the gate shut?")
        self.settle()
        seen = self.npc.location.ndb.ai_exchanges[self.char1.dbref]
        for npc in seen:  # ten minutes pass
            seen[npc] -= 600
        self.char1.at_say("And the road?")  # the conversation is over: nobody
        self.assertEqual(sum(self.pending().values()), 0)
        self.char1.at_say("Good evening, everyone!")
        self.assertEqual(self.pending(), {"Marta": 0, "Hilda": 0, "Oswald": 1})
