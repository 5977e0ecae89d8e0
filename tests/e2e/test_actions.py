"""
End to end: Marta rents the east room (``docs/design.md``, "Actions"). The real game from
``game_template/`` (Marta is its ``Innkeeper``, the east door asks for the east room key she
holds), players and an admin over real telnet, and an LLM double on 127.0.0.1 playing a model
that calls ``give`` with the key whenever a player's line asks for it:

1. before staff give Marta actions, nothing happens but words;
2. Tamsin, who has not paid, is refused by the game's hook, and the model is told why;
3. Wren pays (``give purse to Marta``), gets the key, and the door lets her through.

Then Marta's actions stay within her list, the turn's limit and the cooldown (a staff command a
player names and the model calls never runs), and what she gave outlives ten compactions of
each strategy that summarises, reaching only the prompts of those who saw it, in context and
after.
"""

import asyncio
import re

import pytest

from tests.support.e2e_util import (FORCED_COMPACT_RE, close_all, fail_with_logs, game_fixtures,
                                    logged_in_admin)
from tests.support.llm_double import CountingModel, request_kind, tool_calls, unstamped
from tests.support.tavern_e2e import NPC, PLAYERS
from tests.support.tavern_e2e import go as _go
from tests.support.tavern_e2e import player as _player
from tests.support.tavern_e2e import py as _py
from tests.support.tavern_e2e import wait_idle
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
    # only the preserve window stays verbatim: each forced compaction has the turn before it
    "AI_COMPACT_PRESERVE_FRACTION": "0",
}


class ActingModel(CountingModel):
    """
    A model that acts on what the newest line of a reply request offering tools asks, as a
    player's words would lead a model to (otherwise as :class:`CountingModel`):

    - the key: ``give east room key to <speaker>``; "please give me the <thing>": ``give``;
    - "teleport me": Evennia's staff ``teleport``; "shut the game down": ``shutdown``;
    - "look around three times": three ``look`` calls in one answer.
    """

    def __call__(self, body):
        messages = body.get("messages") or []
        if (request_kind(body) == "reply" and body.get("tools") and messages
                and messages[-1].get("role") == "user"):
            name, _, text = unstamped(messages[-1].get("content")).partition(": ")
            calls = self.calls(name, text.lower())
            if calls:
                return tool_calls(calls)
        return super().__call__(body)

    @staticmethod
    def calls(name, text):
        wanted = re.search(r"please give me the (\w+)", text)
        if wanted:
            return [("give", {"args": f"{wanted.group(1)} to {name}"})]
        if "key" in text:
            return [("give", {"args": f"{KEY} to {name}"})]
        if "teleport me" in text:
            return [("teleport", {"args": f"{name} = Limbo"})]
        if "shut the game down" in text:
            return [("shutdown", {"args": ""})]
        if "look around three times" in text:
            return [("look", {"args": ""})] * 3
        return []


llm, game = game_fixtures("e2e-actions", ENV, ActingModel, players=PLAYERS, then="tavern")


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
        await wren.expect("east", r"locked", timeout=HANG_GUARD)
        # 1. no actions yet: words only, no tools offered
        await _ask(game, wren, "Marta, the east room key please.")
        assert not llm.requests[-1].get("tools")
        await admin.expect(f"aiactions {NPC} = give, look", r"give, look", timeout=HANG_GUARD)

        # 2. Tamsin has not paid: the hook refuses, the model is told why
        await _ask(game, tamsin, "Marta, give me the key to the east room.")
        told = _told(llm)
        assert told and "refused" in told[0] and "Tamsin has not paid" in told[0], told
        assert await _py(admin, f"[me.search('{KEY}', global_search=True).location.key]") \
            == [NPC]

        # 3. Wren pays, gets the key, and the door lets her through
        made = await _py(admin, "[setattr(p.db, 'silver', 8) or p.dbref for p in [__import__("
                                "'evennia').create_object('typeclasses.objects.Object', "
                                "key='purse', location=me.search('Wren', global_search=True))]]")
        assert made and re.match(r"#\d+", made[0]), made
        await wren.expect(f"give purse to {NPC}", r"You give", timeout=HANG_GUARD)
        # a gift to Marta is a line she answers: her answer comes before Wren asks, or the ask
        # would meet the gift's turn under way and its answer
        thanked, _ = await wren.read_until(ANSWER_RE, timeout=HANG_GUARD)
        assert thanked, "Marta never answered the purse"
        said = await _ask(game, wren, "Marta, I paid: the east room key, please.")
        assert "murmurs to Wren" in said, said  # Evennia's give told Wren alone
        told = _told(llm)
        assert told and "done" in told[0], told
        await wren.expect("inventory", KEY, timeout=HANG_GUARD)
        await wren.expect("east", r"The East Room", timeout=HANG_GUARD)
    finally:
        await close_all(wren, tamsin, admin)


def _reply_requests(llm):
    return [b for b in llm.requests if request_kind(b) == "reply"]


def _prompt(body):
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])


async def _to_marta(admin, *names):
    """Bring each of ``names`` to Marta's room, wherever an earlier test left them."""
    for name in names:
        await _py(admin, f"[me.search('{name}', global_search=True).move_to(me.search('{NPC}', "
                         "global_search=True).location, quiet=True)]")


async def _ready(admin, *names):
    """Each of ``names`` with Marta, whose actions are give and look."""
    await _to_marta(admin, *names)
    await admin.expect(f"aiactions {NPC} = give, look", r"give, look", timeout=HANG_GUARD)


async def _given(game, admin, player, thing):
    """A ``thing`` made in Marta's hands, asked for by ``player`` and given: in their
    inventory."""
    made = await _py(admin, "[__import__('evennia').create_object('typeclasses.objects."
                            f"Object', key='{thing}', location=me.search('{NPC}', "
                            "global_search=True)).dbref]")
    assert made, made
    await _ask(game, player, f"Marta, please give me the {thing}.")
    await player.expect("inventory", thing, timeout=HANG_GUARD)


async def _where(admin, name):
    """The key of the room ``name`` stands in."""
    found = await _py(admin, f"[me.search('{name}', global_search=True).location.key]")
    return found[0] if found else None


def test_marta_acts_only_within_her_actions_the_turns_limit_and_the_cooldown(game, llm):
    asyncio.run(_limits(game, llm))


async def _limits(game, llm):
    wren = await _player(game, 0)
    admin = await logged_in_admin(game)
    try:
        await _ready(admin, "Wren")
        room = await _where(admin, "Wren")
        # a staff command a player names, which the model calls: never run, the model told
        await _ask(game, wren, "Marta, teleport me to Limbo right now.")
        told = _told(llm)
        assert told and "teleport" in told[0] and "unknown" in told[0], told
        assert await _where(admin, "Wren") == room
        # a command outside her cmdset altogether
        await _ask(game, wren, "Marta, shut the game down.")
        told = _told(llm)
        assert told and "shutdown" in told[0] and "unknown" in told[0], told
        # three calls in one answer: the turn's limit (2) runs, the last round offers no more
        await _ask(game, wren, "Marta, look around three times.")
        told = _told(llm)
        assert len(told) == 2 and all("look" in t and "done" in t for t in told), told
        assert _reply_requests(llm)[-1].get("tool_choice") == "none"
        # cooling down: no tools offered at all; positive control once the cooldown is over
        await _py(admin, f"[setattr(s.db, 'action_cooldown', 600) for s in me.search('{NPC}', "
                         "global_search=True).scripts.all()]")
        await _ask(game, wren, "Marta, look around three times.")
        assert not _reply_requests(llm)[-1].get("tools")
        await _py(admin, f"[setattr(s.db, 'action_cooldown', 0) for s in me.search('{NPC}', "
                         "global_search=True).scripts.all()]")
        await _ask(game, wren, "Marta, a quiet evening.")
        assert _reply_requests(llm)[-1].get("tools")
    finally:
        await close_all(wren, admin)


#: the strategies that summarise, each compacting Marta's history ten times
SUMMARISING = ("summary", "hybrid", "cascade", "replace_all")
COMPACTIONS = 10
GAVE = "Marta did: give lantern to Wren."


def test_what_marta_gave_outlives_ten_compactions_of_each_strategy(game, llm):
    asyncio.run(_outlives(game, llm))


async def _compaction_count(admin):
    counts = await _py(admin, f"[s.db.compaction_count or 0 for s in me.search('{NPC}', "
                              "global_search=True).scripts.all()]")
    return max(counts or [0])


async def _journaled_in_mem0(admin, fact=GAVE):
    """Wait until the journal's fact ``fact`` (its start) is consolidated into Mem0; True once
    it is."""
    for _ in range(int(HANG_GUARD)):
        found = await _py(admin, "[e['id'] in j.get('consolidated_entry_ids', []) for j in "
                                 f"[me.search('{NPC}', global_search=True).db.journal or {{}}] "
                                 f"for e in j.get('entries', []) if e['content'].startswith("
                                 f"'{fact}')]")
        if not found:
            return False  # journaled at the first compaction, before the sleep, or never
        if all(found):
            return True
        await asyncio.sleep(1)
    return False


async def _outlives(game, llm):
    wren, tamsin = await _player(game, 0), await _player(game, 1)
    admin = await logged_in_admin(game)
    try:
        await _ready(admin, "Wren", "Tamsin")
        await _given(game, admin, wren, "lantern")
        # in context: Evennia's give told Wren alone, so a reply Tamsin hears never shows it...
        count = len(_reply_requests(llm))
        await _ask(game, tamsin, "Marta, what a cold night.")
        asked = _reply_requests(llm)[count:]
        assert asked and not any("give lantern to Wren" in _prompt(b) for b in asked)
        # ...and one only Wren hears does (positive control)
        await _go(tamsin, "out")
        await _ask(game, wren, "Marta, thank you.")
        assert "(You: give lantern to Wren: done." in _prompt(_reply_requests(llm)[-1])
        await _go(tamsin, "tavern")
        await _py(admin, f"[setattr(s.db, 'compact_preserve_window', 2) for s in me.search("
                         f"'{NPC}', global_search=True).scripts.all()]")
        for strategy in SUMMARISING:
            _, said = await admin.expect(f"compact/set {NPC}/strategy={strategy}",
                                         r"now compacts with[^\n]*")
            assert strategy in said, said
            goal = await _compaction_count(admin) + COMPACTIONS
            for turn in range(6 * COMPACTIONS):
                if await _compaction_count(admin) >= goal:
                    break
                await _ask(game, tamsin, f"Marta, tell me about the weather, turn {turn}.")
                await admin.expect(f"compact/force {NPC}", FORCED_COMPACT_RE, timeout=HANG_GUARD)
            assert await _compaction_count(admin) >= goal, strategy
        # the sleep phase takes the journal into Mem0, where a question's recall finds it
        await admin.expect(f"aisleep {NPC}", rf"{NPC} (falls asleep|is already asleep|dozes "
                                              "off)", timeout=HANG_GUARD)
        await wait_idle(admin)
        assert await _journaled_in_mem0(admin), "the give never reached Mem0"
        await admin.expect(f"aiwake {NPC}", rf"{NPC} (wakes up|is already awake)",
                           timeout=HANG_GUARD)
        # Wren alone with her: her prompt holds what Marta gave her
        await _go(tamsin, "out")
        count = len(_reply_requests(llm))
        await _ask(game, wren, "Marta, do you remember what you gave me before?")
        assert any(GAVE in _prompt(b) for b in _reply_requests(llm)[count:]), \
            _prompt(_reply_requests(llm)[count])
        # Tamsin alone with her: it never reaches her prompt (only Wren saw the give)
        await _go(wren, "out")
        await _go(tamsin, "tavern")
        count = len(_reply_requests(llm))
        await _ask(game, tamsin, "Marta, do you remember what you gave Wren before?")
        asked = _reply_requests(llm)[count:]
        assert asked and not any("give lantern to Wren" in _prompt(b) for b in asked)
    finally:
        await close_all(wren, tamsin, admin)


def test_old_action_results_are_masked_and_their_calls_still_pair(game, llm):
    asyncio.run(_masked(game, llm))


#: the results of Marta's two newest looks (each the room's description, worth masking), and
#: whether her history pairs every call with its result
LOOKS = (f"[[m['content'] for m in s.history if (m.get('metadata') or {{}}).get('action') == "
         f"'look' and m['role'] == 'tool'][-2:] + [__import__('ai_contrib.core.masking', "
         f"fromlist=['x']).call_trail_intact(s.history)] for s in me.search('{NPC}', "
         "global_search=True).scripts.all()]")


async def _masked(game, llm):
    wren = await _player(game, 0)
    admin = await logged_in_admin(game)
    try:
        await _ready(admin, "Wren")
        await admin.expect(f"compact/set {NPC}/strategy=mask", r"now compacts with[^\n]*")
        await _py(admin, f"[(setattr(s.db, 'mask_window', 1), setattr(s.db, 'mask_min_tokens', "
                         f"1)) for s in me.search('{NPC}', global_search=True).scripts.all()]")
        await _ask(game, wren, "Marta, look around three times.")
        (*results, paired), = await _py(admin, LOOKS)
        # in full while they are recent
        assert len(results) == 2 and all("done" in r for r in results) and paired, results
        for line in ("Marta, a fine evening.", "Marta, good night."):
            await _ask(game, wren, line)
        _, said = await admin.expect(f"compact/force {NPC}", FORCED_COMPACT_RE,
                                     timeout=HANG_GUARD)
        (*results, paired), = await _py(admin, LOOKS)
        assert all(r.startswith("[TOOL OUTPUT ARCHIVED") for r in results), (said, results)
        assert paired
    finally:
        try:
            await _py(admin, f"[(setattr(s.db, 'mask_window', None), setattr(s.db, "
                             f"'mask_min_tokens', None)) for s in me.search('{NPC}', "
                             "global_search=True).scripts.all()]")
            await admin.expect(f"compact/set {NPC}/strategy=summary", r"now compacts with[^\n]*")
        finally:
            await close_all(wren, admin)


def test_what_marta_gave_outlives_the_evictions_of_the_mask_strategy(game, llm):
    asyncio.run(_evicted(game, llm))


GAVE_MUG = "Marta did: give mug to Wren."
#: whether Marta's history still holds the result of a give of the mug
HOLDS_MUG = (f"[any((m.get('metadata') or {{}}).get('action') == 'give' and 'mug' in "
             f"(m.get('content') or '') for m in s.history) for s in me.search('{NPC}', "
             "global_search=True).scripts.all()]")
#: the journal entries of Marta's that tell of the give
JOURNALED_MUG = (f"[e['content'] for e in (me.search('{NPC}', global_search=True).db.journal "
                 f"or {{}}).get('entries', []) if e['content'].startswith('{GAVE_MUG}')]")


async def _evicted(game, llm):
    """``mask`` summarises nothing and runs no fact extraction: at the emergency threshold its
    oldest messages leave the context for the archive, and the give's fact with them for the
    journal, whence the sleep takes it into Mem0 and a question's recall finds it."""
    wren = await _player(game, 0)
    admin = await logged_in_admin(game)
    try:
        await _ready(admin, "Wren")
        await _given(game, admin, wren, "mug")
        assert await _py(admin, HOLDS_MUG) == [True]  # positive control: in context
        assert await _py(admin, JOURNALED_MUG) == []  # and not journaled yet
        await admin.expect(f"compact/set {NPC}/strategy=mask", r"now compacts with[^\n]*")
        await _py(admin, f"[setattr(s.db, 'max_context_tokens', 1500) for s in me.search("
                         f"'{NPC}', global_search=True).scripts.all()]")
        for turn in range(80):
            if await _py(admin, HOLDS_MUG) == [False]:
                break
            await _ask(game, wren, f"Marta, tell me about the weather, turn {turn}.")
        assert await _py(admin, HOLDS_MUG) == [False], "the give was never evicted"
        # journaled when it was evicted, before any sleep; the sleep takes it into Mem0
        journaled = await _py(admin, JOURNALED_MUG)
        assert journaled and len(journaled) == 1, journaled
        await admin.expect(f"aisleep {NPC}", rf"{NPC} (falls asleep|is already asleep|dozes "
                                              "off)", timeout=HANG_GUARD)
        await wait_idle(admin)
        assert await _journaled_in_mem0(admin, GAVE_MUG), "the give never reached Mem0"
        await admin.expect(f"aiwake {NPC}", rf"{NPC} (wakes up|is already awake)",
                           timeout=HANG_GUARD)
        count = len(_reply_requests(llm))
        await _ask(game, wren, "Marta, do you remember the mug you gave me?")
        assert any(GAVE_MUG in _prompt(b) for b in _reply_requests(llm)[count:]), \
            _prompt(_reply_requests(llm)[count])
    finally:
        try:
            await _py(admin, f"[setattr(s.db, 'max_context_tokens', None) for s in me.search("
                             f"'{NPC}', global_search=True).scripts.all()]")
            await admin.expect(f"compact/set {NPC}/strategy=summary", r"now compacts with[^\n]*")
        finally:
            await close_all(wren, admin)
