"""
Recall notes on the real embedded SmolLM2-135M: an NPC in Evennia's test harness, in a
conversation under way, answered by the model itself at its own prompt speed (150 tokens/s until
measured, then as measured). Small talk may evaluate only ``AI_MEMORY_NOTE_SECONDS`` of new
memories, a question about the past up to ``AI_MEMORY_QUESTION_SECONDS`` of them, and a bare
follow-up asks about the subject in hand (``docs/design.md``, "Recall notes").
"""

from django.test import override_settings

from ai_contrib.llm.client import LLMClient, reset_client, use_client
from ai_contrib.llm.embedded import EmbeddedServerProcess
from ai_contrib.settings import get_setting
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for
from tests.support.waiting import HANG_GUARD

#: what Bob told Marta long ago, archived out of the prompt: several lines about Wren's painting
#: by the river, for a question's note to fill, among lines about other things
ARCHIVED = (
    "The silver key lies under the old mill stone by the weir.",
    "My sister Wren paints herons by the river every spring.",
    "The brewer delivers twelve barrels of dark ale every market day.",
    "Wren sells her river paintings at the harvest fair for two coins.",
    "Old Tom lost his grey mare Pepper on the north road last winter.",
    "Wren paints with reed brushes she cuts herself on the river bank.",
    "The east room has a leaking roof that nobody has mended yet.",
    "Last summer Wren painted the old stone bridge over the river at dawn.",
    "A tinker named Hobb sold me a copper kettle with a crooked spout.",
    "Wren mixes her paints from river clay, crushed berries and soot.",
    "The weather turned cold early this year and the wells froze.",
    "The miller bought a painting of Wren's that shows the river in flood.",
    "Guards from the keep drink here on the first night of each month.",
    "Wren says the light on the river is best an hour before sunset, so she paints then.",
    "The baker's boy owes the inn three coins for a broken window.",
    "When it rains Wren paints the inn's regulars by the fire instead of the river.",
    "Alice makes the best mutton stew in the valley, with barley and thyme.",
    "Wren keeps her finished river paintings in a dry loft above the stable.",
    "A storm last autumn blew half the thatch off the stable roof.",
    "Wren once painted a kingfisher on the river so well that a cat pounced at it.",
    "Travellers say wolves have been seen near the southern pass.",
    "The cellar door sticks in wet weather, so kick it low on the left.",
    "Bram the smith shoes horses for a copper each on quiet days.",
    "The mayor wants the inn's sign repainted before the harvest fair.",
)

#: tokens a question's new note holds at least (and more than small talk may add) at the
#: embedded model's published speed; a busy machine measures less and so allows less
#: (``floor_for``)
QUESTION_NOTE_TOKENS = 100


def floor_for(allowance):
    """The least a question's new note must hold, given the ``allowance`` (tokens) the machine's
    measured speed gave it: :data:`QUESTION_NOTE_TOKENS`, or half the allowance where load made
    that smaller (the note is whole items, so it may not fill its allowance to the token)."""
    return min(QUESTION_NOTE_TOKENS, allowance // 2)


def new_note_tokens(receipt):
    """Tokens of the memories a reply showed for the first time (its new recall notes)."""
    return sum(part["tokens"] for part in receipt["parts"]
               if part["part"] == "memories" and part["new"])


class AQuestionGetsTimeOnTheEmbeddedModel(NPCTestCase):
    """The recall allowances with the real model's replies and prompt speed, the settings that
    turn them into tokens left at their defaults."""

    def setUp(self):
        super().setUp()
        # the subprocess form: the test iterates the reactor by hand, which reaps no child
        process = EmbeddedServerProcess()
        server = process.__enter__()
        self.addCleanup(process.__exit__, None, None, None)
        # runs before the server stops: a cache warm-up still under way ends against it
        self.addCleanup(self.settle_turns, HANG_GUARD)
        override = override_settings(AI_LLM_BASE_URL=server.base_url,
                                     AI_LLM_API_KEY=server.api_key)
        override.enable()
        self.addCleanup(override.disable)
        wait_for(reset_client())
        # the client knows the embedded model's prompt speed (150 tokens/s until measured)
        use_client(LLMClient(base_url=server.base_url, api_key=server.api_key,
                             timeout=HANG_GUARD, embedded=True))
        old = [self.script.add_message("user", text, name="Bob") for text in ARCHIVED]
        self.fill(4, words=6)
        self.script.runtime.evict([m["id"] for m in old], reason="test")

    def ask(self, text):
        """Say ``text`` to Marta, wait for the model's reply; its receipt and what was said."""
        kept = len(self.script.db.reply_receipts or [])
        self.script.receive_speech(self.char1, text)
        wait_for(self.script.run_tick(), timeout=HANG_GUARD)
        # a reply that failed (the fallback line) keeps no receipt
        self.assertEqual(len(self.script.db.reply_receipts), kept + 1,
                         self.script.db.last_reply_error)
        said = [m for m in self.script.history if m["role"] == "assistant"][-1]["content"]
        receipt = self.script.db.reply_receipts[-1]
        print(f"{text!r}: recall {receipt['recall']}, new note {new_note_tokens(receipt)} "
              f"tokens, prompt {receipt.get('prompt_tokens')} (cached "
              f"{receipt.get('cached_tokens')}); Marta: {said!r}")
        return receipt, said

    def test_small_talk_stays_fast_a_question_gets_its_note_and_a_follow_up_follows(self):
        with override_settings(AI_MEMORY_ENABLED=False, AI_LLM_SEED=1,
                               AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT=0,
                               AI_MEMORY_RETRIEVAL_SESSION_WEIGHT=0):
            first, _ = self.ask("Do you remember where the silver key is, Marta?")
            self.assertTrue([m for m in first["memories"]
                             if m["new"] and "silver key" in m["text"]], first["memories"])
            self.ask("The stew smells good tonight.")
            small, _ = self.ask("Nice weather, how are you keeping?")
            asked, reply = self.ask("Do you remember what Wren paints by the river?")
            more, _ = self.ask("Anything else?")

        self.assertIsNone(small["recall"]["asks"], small["recall"])
        allowance = small["recall"]["allowance"]
        self.assertIsNotNone(allowance)
        self.assertLessEqual(new_note_tokens(small), allowance, small["parts"])
        # the allowance had work to do: the weather lines were candidates, shown or left out
        self.assertTrue(small["recall"]["left_out"] or new_note_tokens(small), small["recall"])

        self.assertIsNotNone(asked["recall"]["asks"], asked["recall"])
        self.assertGreater(asked["recall"]["allowance"], allowance)
        tokens = new_note_tokens(asked)
        self.assertGreaterEqual(tokens, floor_for(asked["recall"]["allowance"]), asked["parts"])
        self.assertGreater(tokens, allowance, asked["parts"])
        new = [m["text"] for m in asked["memories"] if m["new"]]
        self.assertTrue([t for t in new if "paints herons" in t], asked["memories"])
        # the model answered: words of its own, not the fallback line
        self.assertTrue(reply.strip())
        self.assertNotEqual(reply, get_setting("FALLBACK_REPLY").format(name="Marta"))

        self.assertTrue(more["recall"]["follows"], more["recall"])
