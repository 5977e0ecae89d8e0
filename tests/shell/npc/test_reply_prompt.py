"""
The reply prompt's one builder (``ai_contrib.npc.reply_prompt.ReplyPrompt``, ``docs/design.md``,
"Warming the cache after a compaction"): the reply and the cache warm-up build their messages
with it, and for the same listeners they build the same messages, for a few NPC states: the
warm-up's prompt and a turn's, with a recall note, a private line, a standing section and a
prompt ending with two replies. A real AssistantScript in Evennia's test DB.
"""

import json

from tests.support.npc_fixtures import NPCTestCase


class TestOneBuilder(NPCTestCase):
    def add(self, role, text, minute, **fields):
        """Store a message said at 10:<minute> on a fixed day: the prompt shows time stamps."""
        return self.script.add_message(role, text, timestamp=f"2026-03-02T10:{minute:02d}:00+00:00",
                                       **fields)

    def state(self):
        """A short conversation: Bob's lines and Marta's replies, a line only Bob heard, a pause
        long enough for a time stamp, a recall note anchored at the last line. Returns the last
        line."""
        bob = {"speaker": self.char1.dbref}
        first = self.add("user", "Marta, a room for the night?", 0, name="Bob", metadata=bob)
        self.add("assistant", "The east room, two silver.", 1, name="Marta",
                 metadata={"reply_to": [first["id"]]})
        self.add("user", "Keep this between us: I owe the smith.", 2, name="Bob",
                 metadata={"speaker": self.char1.dbref, "audience": [self.char1.dbref]})
        said = self.script.add_message("user", "Marta, what is for supper?", name="Bob",
                                       timestamp="2026-03-02T13:00:00+00:00", metadata=bob)
        self.script.ndb.recall_notes = [{"anchor": said["id"], "text": "Bob likes stew.",
                                         "tokens": 5, "audience": None}]
        return said

    def warm_up(self, listeners):
        from ai_contrib.npc.warmup import warmup_messages

        return warmup_messages(self.script, self.npc, listeners)

    def turn(self, said, listeners, budget=None, standing=()):
        from ai_contrib.npc.reply_prompt import ReplyPrompt

        notes = list(self.script.ndb.recall_notes)
        prompt = ReplyPrompt(self.script, self.npc, [said["id"]], listeners, notes,
                             list(standing))
        return prompt(budget or self.script.budget())

    def test_the_warm_up_and_the_turn_build_the_same_prompt_for_the_same_listeners(self):
        said = self.state()
        out = {
            "warm_one": self.warm_up([self.char1.dbref]),
            "warm_two": self.warm_up([self.char1.dbref, self.char2.dbref]),
            "turn_one": self.turn(said, {self.char1.dbref: "Bob"}),
            "turn_two_small": self.turn(said, {self.char1.dbref: "Bob", self.char2.dbref: "x"},
                                        budget=60),
            "turn_standing": self.turn(said, {self.char1.dbref: "Bob"}, standing=[
                {"part": "pins", "text": "The east room is let.", "tokens": 6}]),
        }
        self.script.add_message("assistant", "Stew.", name="Marta",
                                metadata={"reply_to": [said["id"]]})
        self.script.add_message("assistant", "And bread.", name="Marta",
                                metadata={"reply_to": [said["id"]]})
        out["warm_two_replies"] = self.warm_up([self.char1.dbref])
        # the warm-up warms exactly the prompt the turn then sends to the same listeners (the
        # turn's line is the history's last), message for message
        self.assertEqual(out["warm_one"], out["turn_one"])
        self.assertNotEqual(out["warm_two"], out["turn_one"])  # control: other listeners
        # the states differ where they should: a line only Bob heard is shown to him alone, a
        # standing section extends the system message, a small budget keeps less
        self.assertIn("I owe the smith", json.dumps(out["warm_one"]))
        self.assertNotIn("I owe the smith", json.dumps(out["warm_two"]))
        self.assertIn("The east room is let.", out["turn_standing"][0]["content"])
        self.assertLess(len(out["turn_two_small"]), len(out["turn_one"]))
        self.assertEqual(out["warm_two_replies"][-1]["content"], "Stew.")
