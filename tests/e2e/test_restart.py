"""
End to end, on the defaults (the embedded SmolLM2 model, every ``AI_*`` setting at its
default): a player talks to Marta, the admin runs ``evennia reboot``, the player logs in again
and speaks; then ``evennia reload`` with the player connected. The reply server's prompt cache
was kept over each restart (``docs/design.md``, "Keeping the cache over a restart"), so the
first reply after it evaluates only what follows the prompt the old server held, not the whole
prompt again.
"""

import asyncio
import re

import pytest

from demo.replay import REPLY_LOG_RE, reply_record
from demo.telnet import TelnetPlayer
from tests.support.e2e_util import fail_with_logs, started_game
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

NPC = "Marta"
REPLY_RE = re.compile(rf'^{NPC} says, "(?P<text>.+)"\s*$', re.M)
PLAYER = ("Wren", "wren-pw-5310")
LINES = [
    "Good evening, Marta. The road from Riverbend was long and muddy after the storm.",
    "My cousin sold three goats at the market for a silver piece each, a fair price.",
    "The miller says the wheel has creaked all week; he blames the early frost.",
    "We plan a harvest feast with roast pork, apple pies and a barrel of dark ale.",
]
AFTER = "Marta, do you still have a room for the night?"
KEPT_RE = r"ai_contrib: (?P<tokens>\d+) tokens of prompt cache in \d+ slot\(s\) kept"
RESTORED_RE = r"ai_contrib: (?P<tokens>\d+) tokens of prompt cache restored"


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    env = {"AI_LLM_BASE_URL": ""}  # empty = unset: the embedded model, every other default
    yield from started_game(tmp_path_factory, "e2e-restart", env, timeout=300)


def _replies(text):
    return [reply_record(m) for m in REPLY_LOG_RE.finditer(text) if m["npc"] == NPC]


async def _say(game, player, text):
    player.discard()
    player.send(f"talk {NPC} = {text}")
    match, _ = await player.read_until(REPLY_RE, timeout=HANG_GUARD)
    if match is None:
        fail_with_logs(game, f"no reply from {NPC} to {text!r}")


def test_the_first_reply_after_a_reboot_or_a_reload_evaluates_only_its_new_tokens(game):
    asyncio.run(_reboot(game))


async def _reboot(game):
    player = TelnetPlayer("player", game.ports.telnet, transcript=game.transcript)
    await player.connect()
    try:
        await player.login(*PLAYER, create=True)
        await player.command("tavern")
        for line in LINES:
            await _say(game, player, line)
    finally:
        await player.close()
    before = _replies(game.read_log("server"))
    assert len(before) == len(LINES), before
    offset = game.log_size("server")
    game.evennia("reboot", timeout=300)
    kept = game.wait_for_log(KEPT_RE, offset=offset, timeout=HANG_GUARD)
    restored = game.wait_for_log(RESTORED_RE, offset=offset, timeout=HANG_GUARD)
    if kept is None or restored is None:
        fail_with_logs(game, "the prompt cache was not kept and restored over the reboot")
    # the server held at least Marta's last prompt
    assert int(restored["tokens"]) >= before[-1]["prompt"], (restored[0], before[-1])

    player = TelnetPlayer("player", game.ports.telnet, transcript=game.transcript)
    await player.connect()
    try:
        await player.login(*PLAYER)
        await _say(game, player, AFTER)
    finally:
        await player.close()
    first = _replies(game.read_log("server", offset))[0]
    # a cold server reuses nothing: all but the new line and its reply came from the kept cache
    assert first["cached"] >= before[-1]["prompt"] - 16, (first, before[-1])
    assert first["prompt"] - first["cached"] < 120, first

    # `evennia reload`, the player still connected: the Portal keeps the sessions and starts
    # the new server as soon as the old one has left it
    player = TelnetPlayer("player", game.ports.telnet, transcript=game.transcript)
    await player.connect()
    try:
        await player.login(*PLAYER)
        last = _replies(game.read_log("server", offset))[-1]
        offset = game.log_size("server")
        game.evennia("reload", timeout=300)
        if game.wait_for_log(RESTORED_RE, offset=offset, timeout=HANG_GUARD) is None:
            fail_with_logs(game, "the prompt cache was not restored after the reload")
        await _say(game, player, "Is the stew still hot?")
    finally:
        await player.close()
    after = _replies(game.read_log("server", offset))[0]
    assert after["cached"] >= last["prompt"] - 16, (after, last)
