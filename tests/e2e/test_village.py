"""
End to end, a room of NPCs (``docs/design.md``, "A room of NPCs"): the real game from
``game_template/`` with three AI NPCs in its tavern (Marta, and Hilda and Oswald made over
telnet by an admin), players over real telnet, an LLM double on 127.0.0.1 whose recorded requests
are the prompts the game built.

1. Wren asks Marta, turns to Hilda, then asks an unnamed follow-up: Hilda alone answers it (the
   game's own records: only Hilda took the line as hers), and the prompt of Hilda's answer holds
   Marta's line she overheard;
2. "Good evening, everyone!" is answered by exactly one NPC;
3. Marta and Hilda naming each other stop after ``AI_NPC_REPLY_DEPTH`` (2) NPC replies.
"""

import asyncio
import itertools
import json
import re
import threading

import pytest

from tests.support.e2e_util import fail_with_logs, game_fixtures, logged_in, logged_in_admin
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PLAYERS = {"Wren": "wren-pw-4821", "Tamsin": "tamsin-pw-7310", "Perrin": "perrin-pw-9043"}
NPCS = ("Marta", "Hilda", "Oswald")
PERSONAS = {
    "Hilda": "You are Hilda, the blacksmith of the crossroads. You work the forge and shoe "
             "horses. You answer in one short sentence.",
    "Oswald": "You are Oswald, a guard of the town watch. You keep the gate and the curfew. "
              "You answer in one short sentence.",
}
DEPTH = 2
REPLY_TIMEOUT = HANG_GUARD  # waits on the answer itself; only a hang reaches it
ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_SLEEP_AFTER_IDLE": "0",
    "AI_LLM_TIMEOUT": "60",
    "AI_THINKING_EMOTE_AFTER": "0",
    "AI_NPC_REPLY_DEPTH": str(DEPTH),
    # the depth is the limit under test: no cooldown stops the exchange before it
    "AI_NPC_REPLY_COOLDOWN": "0",
}
SAYS_RE = r'(Marta|Hilda|Oswald) says, "([^"\n]*)"'


def speaker_of(body):
    """The NPC a reply request is for: the first word after "You are" of its system message."""
    match = re.match(r"You are (\w+)", str(body["messages"][0].get("content") or ""))
    return match.group(1) if match else None


def is_reply(body):
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    return not (body.get("tools") or "<transcript>" in text or "add_journal_entry" in text
                or body.get("max_tokens") == 1)


class VillageModel:
    """Each NPC's reply is ``lines[name]`` (``{n}``: a running count) or ``"<name> nods
    (n)."``; summaries and extraction are answered with nothing to keep."""

    def __init__(self):
        self.lock = threading.Lock()
        self.count = itertools.count(1)
        self.lines = {}

    def __call__(self, body):
        if not is_reply(body):
            return "TOOL: noop {}" if body.get("tools") else "Patrons talked."
        name = speaker_of(body) or "Someone"
        with self.lock:
            return self.lines.get(name, "{name} nods ({n}).").format(name=name,
                                                                     n=next(self.count))


async def _prepare(game):
    admin = await logged_in_admin(game)
    try:
        for name, persona in PERSONAS.items():
            _, made = await admin.expect(
                "py from evennia.utils.create import create_object; "
                "from ai_contrib.typeclasses import AssistantCharacter; "
                f"n = create_object(AssistantCharacter, key={name!r}, "
                "location=me.search('The Sleeping Stag', global_search=True)); "
                f"n.db.persona = {persona!r}; print('MADE=' + n.dbref)",
                r"MADE=#\d+|Error[^\n]*|Traceback[^\n]*", timeout=HANG_GUARD)
            assert "MADE=#" in made, made
    finally:
        await admin.close()


llm, game = game_fixtures("e2e-village", ENV, VillageModel, players=PLAYERS.items(),
                          prepare=_prepare, timeout=300)


async def _in_tavern(game, name):
    player = await logged_in(game, name, name, PLAYERS[name])
    await player.command("tavern", quiet=0.5)
    await player.read_quiet(quiet=0.5, timeout=5)
    return player


async def _say_and_hear(game, player, text, count=1):
    """``say <text>``; wait for ``count`` NPC lines; return ``[(npc, words)]`` in order."""
    player.send(f"say {text}")
    heard = []
    while len(heard) < count:
        match, _ = await player.read_until(SAYS_RE, timeout=REPLY_TIMEOUT)
        if match is None:
            fail_with_logs(game, f"after {text!r} the NPCs said {heard}, not {count} lines")
        heard.append((match.group(1), match.group(2)))
    return heard


async def _no_npc_says_more(player, quiet=2.0, timeout=10):
    """Assert that no NPC line reaches ``player`` before ``quiet`` seconds of silence (at most
    ``timeout`` seconds)."""
    more = await player.read_quiet(quiet=quiet, timeout=timeout)
    assert not re.search(SAYS_RE, more), more


async def _game_view(game, text):
    """
    What each NPC's own history holds for the line ``text``: ``{npc: [addressed, ...]}`` (one
    entry per stored copy), read in the game by an admin.
    """
    admin = await logged_in_admin(game)
    try:
        _, out = await admin.expect(
            "py import json; from evennia.utils.search import search_object as so; "
            "from ai_contrib.typeclasses import get_assistant_script as gs; "
            "print('VIEW=' + json.dumps({k: [m['metadata'].get('addressed') for m in "
            f"gs(so(k)[0]).history if m['content'] == {text!r}] for k in {list(NPCS)!r}}}))",
            r"VIEW=\{[^\n]*\}|Error[^\n]*|Traceback[^\n]*", timeout=HANG_GUARD)
    finally:
        await admin.close()
    found = re.search(r"VIEW=(\{[^\n]*\})", out)
    assert found, out
    return json.loads(found.group(1))


def _replies_since(llm, before):
    return [speaker_of(b) for b in llm.requests[before:] if b and is_reply(b)]


def test_an_unnamed_follow_up_after_turning_to_hilda_is_hers_alone_and_she_heard_marta(game,
                                                                                        llm):
    async def scenario():
        llm.model.lines.clear()
        llm.model.lines["Marta"] = "The east room is two silver a night ({n})."
        wren = await _in_tavern(game, "Wren")
        try:
            [(who, marta_said)] = await _say_and_hear(game, wren, "Marta, how much is a room?")
            assert who == "Marta"
            before = len(llm.requests)
            [(who, _)] = await _say_and_hear(game, wren, "Hilda, can you shoe my horse?")
            assert who == "Hilda"
            asked = [b for b in llm.requests[before:] if b and is_reply(b)]
            assert [speaker_of(b) for b in asked] == ["Hilda"]
            prompt = "\n".join(str(m.get("content") or "") for m in asked[0]["messages"])
            # Hilda overheard Marta's answer to Wren: it is in the prompt of her reply
            assert f"Marta (overheard): {marta_said}" in prompt, prompt

            follow_up = "And how much would that cost?"
            before = len(llm.requests)
            [(who, _)] = await _say_and_hear(game, wren, follow_up)
            assert who == "Hilda"
            await _no_npc_says_more(wren)  # nobody else answered
            assert _replies_since(llm, before) == ["Hilda"]
            # every NPC heard the line; only Hilda took it as hers
            view = await _game_view(game, follow_up)
            assert view == {"Marta": [False], "Hilda": [True], "Oswald": [False]}, view
        finally:
            await wren.close()

    asyncio.run(scenario())


def test_good_evening_everyone_is_answered_by_exactly_one_npc(game, llm):
    async def scenario():
        llm.model.lines.clear()
        tamsin = await _in_tavern(game, "Tamsin")
        try:
            before = len(llm.requests)
            [(who, _)] = await _say_and_hear(game, tamsin, "Good evening, everyone!")
            await _no_npc_says_more(tamsin)
            assert _replies_since(llm, before) == [who]
            view = await _game_view(game, "Good evening, everyone!")
            assert sorted(view) == sorted(NPCS)
            assert all(len(stored) == 1 for stored in view.values()), view  # all heard it
            assert [npc for npc, stored in view.items() if stored == [True]] == [who], view
        finally:
            await tamsin.close()

    asyncio.run(scenario())


def test_two_npcs_naming_each_other_stop_after_the_depth_limit(game, llm):
    async def scenario():
        llm.model.lines.clear()
        llm.model.lines["Marta"] = "Hilda, what do you say to that? ({n})"
        llm.model.lines["Hilda"] = "Marta, I say aye. ({n})"
        perrin = await _in_tavern(game, "Perrin")
        try:
            before = len(llm.requests)
            # Marta answers Perrin, then DEPTH NPC replies: Hilda, Marta
            heard = await _say_and_hear(game, perrin, "Marta, who shoes horses around here?",
                                        count=1 + DEPTH)
            assert [who for who, _ in heard] == ["Marta", "Hilda", "Marta"], heard
            # Hilda does not answer the third
            await _no_npc_says_more(perrin, quiet=3.0, timeout=15)
            assert _replies_since(llm, before) == ["Marta", "Hilda", "Marta"]
            # Hilda heard Marta's last line (it names her) and took it as not hers
            last = heard[-1][1]
            view = await _game_view(game, last)
            assert view["Hilda"] == [False], view
            # the line before it was hers to answer: the same rule said yes within the limit
            view = await _game_view(game, heard[-2][1])
            assert view["Marta"] == [True], view
        finally:
            await perrin.close()

    asyncio.run(scenario())
