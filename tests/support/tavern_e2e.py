"""
Marta's tavern in a real game, as the end-to-end tests drive it over telnet: the two players'
accounts, walking in and out, saying a line and waiting for Marta's answer, her archive, the
value of an admin's ``py`` and waiting until she is idle.
"""

import ast
import asyncio
import time

from tests.support.e2e_util import archive_records, logged_in, npc_archives
from tests.support.waiting import HANG_GUARD

NPC = "Marta"
PLAYERS = [("Wren", "wren-pw-4821"), ("Tamsin", "tamsin-pw-7310")]
#: the start of Marta's answer in the room (the tests' doubles answer "Aye ...")
REPLY_RE = rf'{NPC} says, "Aye'


async def player(game, index):
    """A telnet connection logged in as ``PLAYERS[index]``."""
    name, password = PLAYERS[index]
    return await logged_in(game, name, name, password)


#: what walking ``tavern`` or ``out`` answers: the room arrived in (its name heads the look
#: Evennia shows), or that there is no such exit where the player stands
ARRIVED_RE = r"(?m)^(?:Limbo|The Sleeping Stag)\b|is not available"


async def go(player, where):
    """Walk ``tavern`` (in) or ``out`` and wait for the game's answer; idempotent (a missing
    exit just says so)."""
    await player.expect(where, ARRIVED_RE, timeout=HANG_GUARD)


async def say(player, text, timeout=HANG_GUARD):
    """Say ``text`` and wait for an answer from Marta that follows it."""
    await player.expect(f"say {text}", REPLY_RE, timeout=timeout)


def archive(game):
    """Every record of Marta's archive; fails when she has none yet."""
    records = archive_records(game)
    assert records, npc_archives(game)
    return records


def _literal(line):
    try:
        return True, ast.literal_eval(line)
    except (SyntaxError, ValueError):  # a channel line such as "[MudInfo] ..."
        return False, None


async def py(admin, expression):
    """The value ``py <expression>`` prints (the last line that is a Python literal)."""
    _, text = await admin.expect(f"py {expression}", r"(?m)^[\[{(].*$|^None$|^True$|^False$",
                                 timeout=HANG_GUARD)
    text += await admin.read_quiet(quiet=0.4, timeout=5)
    values = [_literal(line) for line in text.splitlines() if line[:1] in "[{("]
    values = [value for ok, value in values if ok]
    return values[-1] if values else None


async def wait_idle(admin, timeout=HANG_GUARD):
    """Wait until Marta has no memory work and no reply under way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = await py(admin, f"[bool(s.ndb.memory_work or s.ndb.busy or s.ndb.pending) for s in "
                               f"me.search('{NPC}', global_search=True).scripts.all()]")
        if busy is not None and not any(busy):
            return
        await asyncio.sleep(1)
    raise AssertionError("Marta stayed busy")
