"""
A randomized privacy probe (``docs/design.md``, "Privacy by audience", "Gossip"): five AI NPCs
in the two rooms of one gossip zone, three players who say things aloud, whisper
(``talk/private``), ask for news and walk between the rooms, NPCs that overhear each other's
replies and meet, and at the end of each of three days every NPC journals what it heard (the
pre-compaction extraction) and then hears gossip. The LLM double is the worst model for
privacy: a reply repeats every token its prompt holds (history, recall notes, scene), merged
into one line, and an extraction journals each line it is shown plus one fact merging every
token the request held, citing the first line only.

Mem0 is on: each sleep consolidates the journals into it, and replies recall from it (a
recall note in a prompt is repeated by the reply, so it is on a player's screen if it leaks).
After each day: no NPC holds, in its journal, its Mem0 memories or what it heard, and no
player is shown, a token said out of their hearing, unless it was said aloud in front of two
players (public, and free to travel). The positive controls: every journaled token is in
Mem0; by day 3 the public tokens are in the journals of most of the NPCs, by hearing or by
gossip; the NPCs keep the secrets they were told. Seeded, so a failure replays.
"""

import random
import re
import threading
import time
from unittest import mock

from django.test import override_settings
from evennia.utils import create

from ai_contrib.commands import CmdTalk
from ai_contrib.memory.journal import ensure_journal
from ai_contrib.memory.mem0_payload import npc_agent_id
from ai_contrib.memory.consolidation import consolidate_journal
from ai_contrib.memory.mem0_store import get_store
from ai_contrib.npc.extraction import run_pre_compaction_extraction
from ai_contrib.npc.gossip import receive_gossip
from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

from tests.support.llm_double import prompt_text, request_kind, tool_calls
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import cancel_pending_ticks, spin, stored, wait_for
from tests.support.waiting import HANG_GUARD

TOKEN = re.compile(r"\b(?:pub|sec)word\d+\b")
NUMBERED = re.compile(r"^\[(\d+)\] (?:[^:\n]+: )?(.*)$", re.MULTILINE)
STEPS_PER_DAY = 14
DAYS = 3


class LeakyModel:
    """The double's model: replies repeat every token of their prompt; an extraction journals
    each numbered line holding a token (citing it) and one fact merging all the tokens of the
    request, citing the first such line."""

    def __init__(self):
        self.lock = threading.Lock()
        self.repeated = 0  # replies that repeated a token

    def __call__(self, body):
        kind = request_kind(body)
        text = prompt_text(body)
        if kind == "extraction":
            return self.extract(body, text)
        tokens = sorted(set(TOKEN.findall(text)))
        if kind == "summary":
            return "They talked of " + ", ".join(tokens or ["the weather"]) + "."
        if not tokens:
            return "Aye, the weather."
        with self.lock:
            self.repeated += 1
        return "I hear " + " and ".join(tokens) + "."

    @staticmethod
    def extract(body, text):
        if any(m.get("role") == "tool" for m in body.get("messages") or []):
            return tool_calls([("noop", {})])
        calls, first = [], None
        for seq, line in NUMBERED.findall(text):
            if TOKEN.search(line):
                first = first or int(seq)
                calls.append(("add_journal_entry",
                              {"content": line.strip(), "importance": 7, "source": [int(seq)]}))
        tokens = sorted(set(TOKEN.findall(text)))
        if first is not None and len(tokens) > 1:
            calls.append(("add_journal_entry", {
                "content": "News of " + ", ".join(tokens) + ".", "importance": 8,
                "source": [first]}))
        return tool_calls(calls or [("noop", {})])


@override_settings(AI_MEMORY_ENABLED=True, AI_THINKING_EMOTE_AFTER=0)
class TestPrivacyProbe(NPCTestCase):
    def setUp(self):
        self.model = LeakyModel()
        self.llm_default = self.model
        super().setUp()
        self.addCleanup(cancel_pending_ticks)
        for room in (self.room1, self.room2):
            room.tags.add("crossroads", category="zone")
        self.npcs = {"Marta": self.npc}
        for key, room in (("Tobin", self.room1), ("Hilda", self.room1), ("Bram", self.room2),
                          ("Nell", self.room2)):
            npc = create.create_object(AssistantCharacter, key=key, location=room)
            npc.db.persona = f"You are {key}, who lives at the crossroads."
            self.npcs[key] = npc
        self.scripts = {key: get_assistant_script(npc) for key, npc in self.npcs.items()}
        for npc in self.npcs.values():
            # database ids repeat across tests; the process-wide store does not
            wait_for(get_store().delete_agent(npc_agent_id(npc)))
        self.char1.key, self.char2.key = "Wren", "Ann"
        cole = create.create_object("evennia.objects.objects.DefaultCharacter", key="Cole",
                                    location=self.room1, home=self.room1)
        self.players = {"Wren": self.char1, "Ann": self.char2, "Cole": cole}
        for player in self.players.values():
            player.location = self.room1
        # what each player is shown, whatever the route (say, murmur, reply)
        self.shown = {key: [] for key in self.players}
        for key, player in self.players.items():
            patch = mock.patch.object(
                player, "msg",
                side_effect=lambda *a, _key=key, **k: self.shown[_key].append(str((a, k))))
            patch.start()
            self.addCleanup(patch.stop)
        # token -> the names of who heard it said; None: said aloud in front of two players
        self.heard = {}
        self.count = 0

    # --- the world -------------------------------------------------------------------------

    def present(self, room):
        return ([key for key, obj in self.players.items() if obj.location == room],
                [key for key, obj in self.npcs.items() if obj.location == room])

    def settle(self, timeout=HANG_GUARD):
        """Let the reactor run until no NPC has a line queued or a reply being written
        (``timeout`` s: a hang guard, not a limit)."""
        deadline = time.monotonic() + timeout
        quiet = 0
        while time.monotonic() < deadline:
            spin(0.02)
            busy = any(s.ndb.busy or s.pending_ids() for s in self.scripts.values())
            quiet = 0 if busy else quiet + 1
            if quiet >= 5:
                return
        self.fail("the NPCs never fell quiet")

    def token(self, kind):
        self.count += 1
        return f"{kind}word{self.count}"

    def say_news(self, rng):
        room = rng.choice([self.room1, self.room2])
        players, npcs = self.present(room)
        if not players or not npcs:
            return
        speaker, npc = rng.choice(players), rng.choice(npcs)
        public = len(players) >= 2
        token = self.token("pub" if public else "sec")
        self.heard[token] = None if public else set(players) | set(npcs)
        self.players[speaker].at_say(f"{npc}, did you hear? The {token} stands by the ford.")

    def whisper(self, rng):
        speaker = rng.choice(sorted(self.players))
        players, npcs = self.present(self.players[speaker].location)
        if not npcs:
            return
        npc = rng.choice(npcs)
        token = self.token("sec")
        self.heard[token] = {speaker, npc}
        self.call(CmdTalk(), f"/private {npc} = Between us: my {token} hides under the stone.",
                  caller=self.players[speaker])

    def ask_news(self, rng):
        speaker = rng.choice(sorted(self.players))
        _players, npcs = self.present(self.players[speaker].location)
        if npcs:
            self.players[speaker].at_say(f"{rng.choice(npcs)}, any news from the ford?")

    def walk(self, rng):
        player = self.players[rng.choice(sorted(self.players))]
        player.move_to(self.room2 if player.location == self.room1 else self.room1, quiet=True)

    def sleep(self):
        """Every NPC journals what it heard, then every NPC hears gossip."""
        for key, npc in self.npcs.items():
            wait_for(run_pre_compaction_extraction(self.scripts[key], npc))
        for key, npc in self.npcs.items():
            receive_gossip(self.scripts[key], npc)
        for npc in self.npcs.values():
            stored(wait_for(consolidate_journal(npc)))

    # --- what is known ---------------------------------------------------------------------

    def may_know(self, name):
        return {token for token, who in self.heard.items() if who is None or name in who}

    def journal_tokens(self, key):
        entries = ensure_journal(self.npcs[key].db.journal)["entries"]
        return set(TOKEN.findall(" ".join(str(e.get("content")) for e in entries)))

    def check(self, day):
        for key in self.npcs:
            heard = set(TOKEN.findall(" ".join(
                str(m.get("content")) for m in self.scripts[key].history)))
            journal = self.journal_tokens(key)
            memories = set(TOKEN.findall(" ".join(
                hit["text"] for hit in get_store().list_sync(npc_agent_id(self.npcs[key]),
                                                              limit=500))))
            allowed = self.may_know(key)
            self.assertEqual(heard - allowed, set(), f"day {day}: {key} heard")
            self.assertEqual(journal - allowed, set(), f"day {day}: {key} journaled")
            self.assertEqual(memories - allowed, set(), f"day {day}: {key} remembers")
            self.assertEqual(journal - memories, set(), f"day {day}: {key} consolidated")
        for key in self.players:
            shown = set(TOKEN.findall(" ".join(self.shown[key])))
            self.assertEqual(shown - self.may_know(key), set(), f"day {day}: {key} was shown")

    # --- the probe -------------------------------------------------------------------------

    def run_village(self, seed):
        rng = random.Random(seed)
        steps = (self.say_news, self.say_news, self.whisper, self.whisper, self.ask_news,
                 self.walk)
        for day in range(1, DAYS + 1):
            if day == 2:  # Nell walks into the tavern and trades news with the NPCs there
                self.npcs["Nell"].move_to(self.room1, quiet=True)
            for _ in range(STEPS_PER_DAY):
                rng.choice(steps)(rng)
                self.settle()
            self.sleep()
            self.check(day)
        public = [token for token, who in self.heard.items() if who is None]
        private = [token for token, who in self.heard.items() if who is not None]
        return public, private

    def probe(self, seed):
        public, private = self.run_village(seed)
        # the probe said both kinds, and the model repeated what it was told
        self.assertTrue(public and private, self.heard)
        self.assertGreater(self.model.repeated, 0)
        # the control: public news is in most NPCs' journals by day 3, by hearing or gossip
        known = sum(token in self.journal_tokens(key) for token in public for key in self.npcs)
        share = known / (len(public) * len(self.npcs))
        self.assertGreater(share, 0.8, f"public news in {share:.0%} of the journals")
        # and the NPCs journaled the secrets they were told (kept, only not passed on)
        told = sum(token in self.journal_tokens(key) for token in private
                   for key in self.npcs if key in self.heard[token])
        self.assertGreater(told, 0, "no NPC journaled a secret it was told")

    def test_village_seed_7(self):
        self.probe(7)

    def test_village_seed_31(self):
        self.probe(31)
