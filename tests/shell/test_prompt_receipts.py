"""
``aihistory <npc>/prompt [n]`` and ``/prompt/full``: the receipt of a reply and its exact
prompt, escaped and within 80 columns; a reply without a receipt says so. The receipt records
are archived the way the reply writer archives them (``tests/support/receipt_fixtures.py``).
"""

from ai_contrib.admin.history_command import usage_bar
from ai_contrib.commands import CmdAIHistory

from tests.support.admin_fixtures import too_wide
from tests.support.npc_fixtures import NPCTestCase
from tests.support.receipt_fixtures import add_reply, receipt

PROMPT = [
    {"role": "system", "content": "You are Marta, the innkeeper.\n\nSpeak briefly."},
    {"role": "user", "content": "Bob: where is my |rsister|n? " + "word " * 40},
]


class TestPromptReceipt(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.session.protocol_flags["SCREENWIDTH"] = {0: 80}
        self.addCleanup(self.session.protocol_flags.pop, "SCREENWIDTH", None)
        self.script.add_message("user", "Where is my sister?", name="Bob")
        self.first = add_reply(self.script, "In Riverwood, you told me.", prompt=PROMPT)
        self.script.add_message("user", "Thanks!", name="Bob")
        self.second = add_reply(self.script, "You are welcome.", receipt_dict=False)

    def test_the_last_reply_without_a_receipt_says_so(self):
        out = self.call(CmdAIHistory(), "Marta/prompt")
        self.assertIn(f"reply #{self.second['seq']}", out)
        self.assertIn("no receipt", out)

    def test_the_second_last_reply_shows_parts_memories_and_cost(self):
        out = self.call(CmdAIHistory(), "Marta/prompt 2")
        self.assertIn(f"reply #{self.first['seq']}", out)
        for text in ("persona and instructions", "summary #0-#40",
                     "history #41-#60, 20 messages", "retrieved memories (new)",
                     "1f2e3d4c", "archive #12", "0.167",
                     "prompt 812 tokens (42 evaluated, 770 reused)", "generated",
                     "1.23 s", "model smollm2-135m", "heard by Bob"):
            self.assertIn(text, out)
        self.assertEqual(too_wide(out), [], out)

    def test_stored_markup_is_shown_inert(self):
        out = self.call(CmdAIHistory(), "Marta/prompt 2")
        self.assertIn("\u00a6rElena\u00a6n", out)  # the memory's colour codes, made inert

    def test_full_shows_the_exact_prompt_escaped_and_wrapped(self):
        out = self.call(CmdAIHistory(), "Marta/prompt/full 2")
        self.assertIn("You are Marta, the innkeeper.", out)
        self.assertIn("Speak briefly.", out)
        self.assertIn("--- 2. user ---", out)
        self.assertEqual(too_wide(out), [], out)
        self.assertIn("\u00a6rsister\u00a6n", out)

    def test_a_prompt_no_longer_kept_and_a_reply_too_far_back(self):
        self.assertIn("no longer kept", self.call(CmdAIHistory(), "Marta/prompt/full"))
        self.assertIn("none is 9 back", self.call(CmdAIHistory(), "Marta/prompt 9"))

    def test_the_usage_bar_marks_both_thresholds_until_it_reaches_them(self):
        bar = usage_bar(self.script, 0.5)
        self.assertEqual(bar, "[|g##########|n....|y:|n.|r!|n...]")
        self.assertIn("|r!|n", usage_bar(self.script, 0.75))
        self.assertNotIn(":", usage_bar(self.script, 0.75))
        self.assertEqual(receipt()["parts"][0]["part"], "system")
