"""
End to end, on the defaults: a fresh game from ``game_template/`` with no ``AI_*`` setting at all,
so the embedded SmolLM2 model answers (a 4,096-token window per request) and the budget setting
is the shipped 100,000 tokens. A player floods Marta with 400 lines (about 12,800 tokens, three
times the model's window) in a few seconds. Before, every prompt then exceeded the window and
she said "seems lost in thought" for good; now her effective budget fits the model
(``docs/design.md``, "The budget fits the model"), her memory work brings the context back
beside her replies, and she answers the next question with the model's words.
"""

import asyncio
import re
import time

import pytest

from demo.telnet import TelnetPlayer
from tests.support.e2e_util import archive_records, fail_with_logs, started_game

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NPC = "Marta"
FALLBACK = f"{NPC} seems lost in thought."
REPLY_RE = re.compile(rf'^{NPC} says, "(?P<text>.+)"\s*$', re.M)
PLAYER = ("Wren", "wren-pw-4821")
TOPICS = [
    "the mill wheel on the river has creaked all week and the miller blames the frost",
    "my cousin from Riverbend sold three goats at the market for a silver piece each",
    "the road north to the mountain pass is closed after the landslide near the old bridge",
    "we are planning a harvest feast with roast pork, apple pies and a barrel of dark ale",
    "the blacksmith says the new plough blades will be ready before the first snowfall",
]


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    env = {"AI_LLM_BASE_URL": ""}  # empty = unset: the embedded model, every other default
    yield from started_game(tmp_path_factory, "e2e-defaults", env, timeout=300)


def _archive_lines(game):
    return [r["msg"] for r in archive_records(game) if r["kind"] == "message"]


def _memory_work_done(game):
    """True once a compaction or an eviction is in the archive."""
    return any(r["kind"] in ("compaction", "evict") for r in archive_records(game))


def test_an_npc_fed_more_than_its_model_window_keeps_answering(game):
    asyncio.run(_flood(game))


async def _flood(game):
    player = TelnetPlayer("player", game.ports.telnet, transcript=game.transcript)
    await player.connect()
    try:
        await player.login(*PLAYER, create=True)
        await player.command("tavern")
        for i in range(400):
            player.send(f"say Line {i}: {TOPICS[i % len(TOPICS)]}, or so they told me.")
            await asyncio.sleep(0.02)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stored = [m for m in _archive_lines(game) if m["role"] == "user"]
            if len(stored) >= 400:
                break
            await asyncio.sleep(0.5)
        assert len(stored) == 400, len(stored)
        # the flood is more than the whole window: memory work must bring the context back
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not _memory_work_done(game):
            await asyncio.sleep(2)
        if not _memory_work_done(game):
            fail_with_logs(game, "no compaction or eviction brought the flood back into budget")
        question = "Marta, what did I tell you about the road north?"
        heard_before = len(player.received)
        player.send(f"say {question}")
        answer = None
        deadline = time.monotonic() + 300
        while answer is None and time.monotonic() < deadline:
            messages = _archive_lines(game)
            asked = [m["id"] for m in messages if m["role"] == "user" and m["content"] == question]
            answer = next((m for m in messages if m["role"] == "assistant" and asked
                           and asked[0] in (m.get("metadata") or {}).get("reply_to", [])), None)
            await asyncio.sleep(1)
        await player.read_quiet(quiet=1.0, timeout=5)
        if answer is None or FALLBACK in player.received[heard_before:]:
            fail_with_logs(game, "no model-written answer to the question after the flood")
        log = game.read_log("server")
        # the failure this guards against: every prompt over the model's window, for good
        assert "exceeds the available context size" not in log, log[-3000:]
    finally:
        await player.close()
