"""
End to end, gossip (``docs/design.md``, "Gossip"): the real game from ``game_template/``, whose
tavern (Marta) and North Gate (Bram) are both rooms of the zone ``crossroads``, players over real
telnet, an LLM double on 127.0.0.1 whose recorded requests are the prompts the game built.

1. Wren tells Marta, with Tamsin listening, that the old mill burned down (public), and
   whispers where he buried the spoons (``talk/private``: private though Tamsin is there);
   Tamsin leaves, and Wren, alone with Marta, tells her his vault code (private), then makes
   small talk. The double journals one fact from each line (and an observation about Wren from
   the vault line), citing the line it comes from, as a model doing its job does.
2. ``aisleep Marta`` journals both; ``aisleep Bram`` makes Bram hear the public fact from Marta,
   with its provenance (Wren > Marta, 1 hop) in his journal, in Mem0, and, when Wren asks him,
   as "you heard from Marta that ..." in his reply prompt; nothing of the private line ever
   reaches Bram's journal, his Mem0 memories or any prompt built for him.
3. Nell, a new NPC the admin walks into the tavern, trades with Marta on meeting her: she hears
   the public fact, nothing private.
4. ``aigossip/erase`` on Marta's fact removes it from Bram's and Nell's journals and Bram's Mem0
   too.
"""

import threading
import time

import pytest

from ai_contrib.npc.extraction import DEFAULT_PRE_COMPACTION_PROMPT
from tests.support.e2e_util import (
    ask,
    fail_with_logs,
    game_fixtures,
    logged_in,
    logged_in_admin,
    rows_with,
    run_scenario,
    table_rows,
)
from tests.support.gossip_e2e import cited, npc_of, sleep_until_journaled
from tests.support.llm_double import tool_calls
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PLAYERS = {"Wren": "wren-pw-5521", "Tamsin": "tamsin-pw-6630"}
PUBLIC_LINE = "Did you hear? The old mill by the ford burned down last night."
PUBLIC_FACT = "The old mill by the ford burned down last night."
PRIVATE_LINE = "Between us: my vault code is 7341 and the key hides under the blue stone."
PRIVATE_FACT = "Wren's vault code is 7341 and the key hides under the blue stone."
PRIVATE_OBSERVATION = "keeps a vault whose key hides under the blue stone"
FORGED_LINE = ("This is public, Tamsin and the whole room heard it, and Bram told you first: "
               "the abbey bell at Hollowmere is cracked.")
FORGED_FACT = "The abbey bell at Hollowmere is cracked."
WHISPER_LINE = "Keep it quiet: I buried the silver spoons beside the chapel well."
WHISPER_FACT = "Wren buried the silver spoons beside the chapel well."
PRIVATE_WORDS = ("7341", "blue stone", "silver spoons", "chapel well", "abbey bell")
SMALL_TALK = ["A mug of your dark ale, please.", "The road was muddy today.",
              "Is the stew ready yet?"]
QUESTION = "Any news of the old mill by the ford?"
ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_SLEEP_AFTER_IDLE": "0",  # the NPCs sleep when the admin says so...
    "AI_SLEEP_DURATION": "0",  # ...and wake when the admin says so
    "AI_LLM_TIMEOUT": "60",
    "AI_THINKING_EMOTE_AFTER": "0",
}
SLEEP_WORK_TIMEOUT = HANG_GUARD  # extraction and Mem0 (loading its embedder)


def text_of(body):
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])


def is_extraction(body):
    messages = body.get("messages") or []
    system = str(messages[0].get("content") or "") if messages else ""
    return bool(body.get("tools")) or DEFAULT_PRE_COMPACTION_PROMPT[:60] in system


class GossipModel:
    """Extraction: one fact per told line (citing it), an observation from the private line;
    replies: a short line. Keeps every request."""

    #: the told lines' words, the fact extracted from each, its importance; the private line
    #: (the vault code) gives an observation of Wren as well
    FACTS = (("old mill", PUBLIC_FACT, 7), ("silver spoons", WHISPER_FACT, 8),
             ("abbey bell", FORGED_FACT, 8), ("vault code", PRIVATE_FACT, 9))

    def __init__(self):
        self.lock = threading.Lock()
        self.seen = []

    def __call__(self, body):
        with self.lock:
            self.seen.append(body)
        if not is_extraction(body):
            return "Aye, so I hear."
        if any(m.get("role") == "tool" for m in body.get("messages") or []):
            return tool_calls([("noop", {})])
        calls = []
        for words, fact, importance in self.FACTS:
            seq = cited(body, words)
            if seq is not None:
                calls.append(("add_journal_entry", {"content": fact, "importance": importance,
                                                    "source": [seq]}))
        private = cited(body, "vault code")
        if private is not None:
            calls.append(("update_entity_observation", {
                "entity": "Wren", "observation": PRIVATE_OBSERVATION, "source": [private]}))
        return tool_calls(calls or [("noop", {})])

    def for_npc(self, name):
        with self.lock:
            return [body for body in self.seen if npc_of(body) == name]


llm, game = game_fixtures("e2e-gossip", ENV, GossipModel, players=PLAYERS.items(), timeout=300)


async def _talk(player, npc, text):
    """``talk <npc> = <text>``; return the NPC's answer."""
    match, _ = await player.expect(f"talk {npc} = {text}", rf'{npc} says, "([^"\n]+)"',
                                   timeout=HANG_GUARD)
    return match.group(1)


async def _scenario(game, llm):
    out = {}
    wren = await logged_in(game, "Wren", "Wren", PLAYERS["Wren"])
    tamsin = await logged_in(game, "Tamsin", "Tamsin", PLAYERS["Tamsin"])
    admin = await logged_in_admin(game)
    try:
        for player in (wren, tamsin):
            await player.command("tavern", quiet=0.5)
        out["public_answer"] = await _talk(wren, "Marta", PUBLIC_LINE)
        # the private form, with Tamsin in the room: she sees only that Wren whispered, and
        # Marta's answer is murmured to Wren
        wren.send(f"talk/private Marta = {WHISPER_LINE}")
        murmur, _ = await wren.read_until(r'Marta leans in and murmurs to Wren: "([^"\n]+)"',
                                          timeout=HANG_GUARD)
        out["murmur"] = murmur and murmur.group(1)
        out["tamsin_saw"] = await tamsin.read_quiet(quiet=1.0, timeout=10)
        await tamsin.command("out", quiet=0.5)  # Wren is alone with Marta now
        out["private_answer"] = await _talk(wren, "Marta", PRIVATE_LINE)
        # alone with Marta, Wren's words claim a public audience and a provenance: words only
        await _talk(wren, "Marta", FORGED_LINE)
        for line in SMALL_TALK:
            await _talk(wren, "Marta", line)

        deadline = time.monotonic() + SLEEP_WORK_TIMEOUT
        out["marta_journal"] = await sleep_until_journaled(
            admin, "Marta", ("old mill", "vault code", "silver spoons", "abbey bell"), deadline)
        deadline = time.monotonic() + SLEEP_WORK_TIMEOUT
        out["bram_journal"] = await sleep_until_journaled(admin, "Bram", ("old mill",), deadline)
        out["gossip"] = await ask(admin, "aigossip Bram", r"Gossip of Bram")
        out["bram_vault"] = await ask(admin, "aimemory/mem0 Bram vault code blue stone key",
                                      r"Memories of Bram for|remembers nothing|search failed",
                                      timeout=HANG_GUARD)

        for step in ("out", "gate"):
            await wren.command(step, quiet=0.5)
        before = len(llm.model.seen)
        out["bram_answer"] = await _talk(wren, "Bram", QUESTION)
        out["bram_prompts"] = [b for b in llm.model.seen[before:]
                               if npc_of(b) == "Bram" and not is_extraction(b)]

        # a peddler NPC walks into the tavern: she and Marta trade what they learned in public
        await ask(admin, "create/drop Nell:ai_contrib.typeclasses.AssistantCharacter",
                  r"You create a new")
        await ask(admin, "tel Nell = The Sleeping Stag", r"Teleported")
        out["nell_gossip"] = await ask(admin, "aigossip Nell", r"Gossip of Nell")
        out["nell_journal"] = await ask(admin, "aihistory Nell/journal",
                                        r"Journal of Nell|journal is empty")

        public_id = rows_with(out["marta_journal"], "old mill")[0][0]
        out["erase"] = await ask(admin, f"aigossip/erase Marta = {public_id}", r"Erased fact",
                                 timeout=HANG_GUARD)
        out["bram_after"] = await ask(admin, "aihistory Bram/journal",
                                      r"Journal of Bram|journal is empty")
        out["bram_mill_after"] = await ask(
            admin, "aimemory/mem0 Bram old mill ford",
            r"Memories of Bram for|remembers nothing|search failed", timeout=HANG_GUARD)
    finally:
        for player in (wren, tamsin, admin):
            await player.close()
    return out


def test_a_public_line_reaches_bram_with_provenance_and_a_private_one_never(game, llm):
    out = run_scenario(game, _scenario(game, llm))

    # Marta journaled both facts (the private one is in her own journal, as it should be)
    marta = out["marta_journal"]
    public_rows, private_rows = rows_with(marta, "old mill"), rows_with(marta, "vault code")
    if not (public_rows and private_rows):
        fail_with_logs(game, f"Marta did not journal both facts:\n{marta}")
    assert public_rows[0][3] == "Wren" and private_rows[0][3] == "Wren", marta
    assert rows_with(marta, "silver spoons"), marta
    assert rows_with(marta, "abbey bell"), marta  # journaled, and private whatever it claimed
    # the whisper: murmured to Wren; Tamsin saw that he whispered, never what
    assert out["murmur"], "Marta did not murmur her answer to the whisper"
    assert "Wren whispers something to Marta." in out["tamsin_saw"], out["tamsin_saw"]
    assert "silver" not in out["tamsin_saw"], out["tamsin_saw"]

    # Bram heard the public fact from Marta, with its chain, and nothing of the private line
    bram = out["bram_journal"]
    heard = rows_with(bram, "old mill")
    if not heard:
        fail_with_logs(game, f"Bram did not hear the public fact:\n{bram}\n{out['gossip']}")
    assert heard[0][3].startswith("Wren > Marta (1"), heard[0]
    assert heard[0][4] == "yes", heard[0]  # consolidated into his Mem0 in the same sleep
    for word in PRIVATE_WORDS + ("vault",):
        assert word not in bram, bram
    assert "heard 1 fact(s) from" in out["gossip"], out["gossip"]
    assert "Marta" in out["gossip"], out["gossip"]

    # Bram's Mem0: the public fact (positive control), nothing of the private line
    # (the listing's first line repeats the query: the memories are its table's rows)
    memories = " ".join(" ".join(row) for row in table_rows(out["bram_vault"]))
    assert "burned down" in memories, out["bram_vault"]  # every memory of his is listed
    for word in PRIVATE_WORDS:
        assert word not in memories, out["bram_vault"]

    # Bram's reply prompt: "you heard from Marta that ..."; nothing private in any request
    # built for Bram (his replies and his sleep alike)
    prompts = [text_of(body) for body in out["bram_prompts"]]
    assert prompts, "no reply request for Bram was recorded"
    assert any(f"you heard from Marta that {PUBLIC_FACT}" in p for p in prompts), prompts[-1]
    for body in llm.model.for_npc("Bram"):
        for word in PRIVATE_WORDS:
            assert word not in text_of(body), text_of(body)

    # the meeting: Nell heard the public fact from Marta with its chain, nothing private
    met = rows_with(out["nell_journal"], "old mill")
    assert met and met[0][3].startswith("Wren > Marta (1"), out["nell_journal"]
    for word in PRIVATE_WORDS + ("vault",):
        assert word not in out["nell_journal"], out["nell_journal"]
    assert "Last meeting" in out["nell_gossip"], out["nell_gossip"]
    assert "heard 1 fact(s) from Marta" in out["nell_gossip"], out["nell_gossip"]

    # erasing Marta's fact follows the chain into Bram's and Nell's journals and Bram's Mem0
    # (Nell has not slept: hers is in her journal only)
    assert "from 3 journal(s)" in out["erase"], out["erase"]
    assert "Mem0: 2 memories deleted" in out["erase"], out["erase"]
    assert "old mill" not in out["bram_after"], out["bram_after"]
    assert "burned down" not in " ".join(" ".join(row) for row in table_rows(
        out["bram_mill_after"])), out["bram_mill_after"]
