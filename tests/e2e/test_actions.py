"""
End to end: Marta rents the east room (``docs/design.md``, "Actions"). The real game from
``game_template/`` (Marta is its ``Innkeeper``, the east door asks for the east room key she
holds), players and an admin over real telnet, and an LLM double on 127.0.0.1 playing a model
that calls ``give`` with the key whenever a player's line asks for it:

1. before staff give Marta actions, nothing happens but words;
2. Tamsin, who has not paid, is refused by the game's hook, and the model is told why;
3. Wren pays (``give purse to Marta``), gets the key, and the door lets her through.
"""

import asyncio
import re

import pytest

from tests.support.e2e_util import close_all, fail_with_logs, game_fixtures, logged_in_admin
from tests.support.llm_double import CountingModel, request_kind, tool_calls, unstamped
from tests.support.tavern_e2e import NPC, PLAYERS
from tests.support.tavern_e2e import player as _player
from tests.support.tavern_e2e import py as _py
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

KEY = "east room key"
#: Marta's answer, said aloud or (after a give only its receiver saw) murmured to the receiver
ANSWER_RE = rf'{NPC} (?:says, |leans in and murmurs to [^:]+: )"Aye'
ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_SLEEP_AFTER_IDLE": "0",
    "AI_LLM_TIMEOUT": "60",
    "AI_ACTION_COOLDOWN": "0",
}


class RentingModel(CountingModel):
    """Calls ``give east room key to <speaker>`` when the newest line of a reply request
    offering tools asks for the key; otherwise as :class:`CountingModel`."""

    def __call__(self, body):
        messages = body.get("messages") or []
        if (request_kind(body) == "reply" and body.get("tools") and messages
                and messages[-1].get("role") == "user"):
            name, _, text = unstamped(messages[-1].get("content")).partition(": ")
            if "key" in text.lower():
                return tool_calls([("give", {"args": f"{KEY} to {name}"})])
        return super().__call__(body)


llm, game = game_fixtures("e2e-actions", ENV, RentingModel, players=PLAYERS, then="tavern")


async def _ask(game, player, text):
    """``talk Marta = <text>`` and wait for her answer."""
    match, said = await player.expect(f"talk {NPC} = {text}", ANSWER_RE, timeout=HANG_GUARD)
    if match is None:
        fail_with_logs(game, f"{NPC} did not answer {text!r}")
    return said


def _told(llm):
    """The tool results the newest reply request showed the model."""
    replies = [b for b in llm.requests if request_kind(b) == "reply"]
    return [m["content"] for m in replies[-1]["messages"] if m.get("role") == "tool"]


def test_marta_rents_the_east_room_only_to_a_guest_who_paid(game, llm):
    asyncio.run(_renting(game, llm))


async def _renting(game, llm):
    wren, tamsin = await _player(game, 0), await _player(game, 1)
    admin = await logged_in_admin(game)
    try:
        blocked = await wren.command("east", quiet=0.8)
        assert "locked" in blocked, blocked
        # 1. no actions yet: words only, no tools offered
        await _ask(game, wren, "Marta, the east room key please.")
        assert not llm.requests[-1].get("tools")
        given = await admin.command(f"aiactions {NPC} = give, look", quiet=0.8)
        assert "give, look" in given, given

        # 2. Tamsin has not paid: the hook refuses, the model is told why
        await _ask(game, tamsin, "Marta, give me the key to the east room.")
        told = _told(llm)
        assert told and "refused" in told[0] and "Tamsin has not paid" in told[0], told
        inventory = await tamsin.command("inventory", quiet=0.8)
        assert KEY not in inventory, inventory

        # 3. Wren pays, gets the key, and the door lets her through
        made = await _py(admin, "[setattr(p.db, 'silver', 8) or p.dbref for p in [__import__("
                                "'evennia').create_object('typeclasses.objects.Object', "
                                "key='purse', location=me.search('Wren', global_search=True))]]")
        assert made and re.match(r"#\d+", made[0]), made
        paid = await wren.command(f"give purse to {NPC}", quiet=0.8)
        assert "You give" in paid, paid
        said = await _ask(game, wren, "Marta, I paid: the east room key, please.")
        assert "murmurs to Wren" in said, said  # Evennia's give told Wren alone
        told = _told(llm)
        assert told and "done" in told[0], told
        inventory = await wren.command("inventory", quiet=0.8)
        assert KEY in inventory, inventory
        through = await wren.command("east", quiet=0.8)
        assert "The East Room" in through, through
    finally:
        await close_all(wren, tamsin, admin)
