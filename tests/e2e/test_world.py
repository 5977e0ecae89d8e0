"""
End to end: the NPC's world in its reply prompts (``docs/design.md``, "Lore and pins" and
"Scene, events and people"). The real game from ``game_template/``, players and an admin over
real telnet, and an LLM double on 127.0.0.1 whose recorded requests are the prompts the game
built. Each check reads the request of one reply:

1. a key a player says puts its lore entry into that same reply's prompt, and the prompt before
   it (no key said) does not hold it: the template's own entries (``world/lore.py``: the
   tavern's prices by ``location:``, the town's rumours by ``zone:``) and one an admin adds with
   ``ailore/add``; the watch's curfew (``faction:watch``) never reaches Marta;
2. an entry scoped with ``ailore/set <id>/condition = faction:guild`` reaches a guild NPC made
   over telnet in the same room, and never the innkeeper, for the same words;
3. a pin (``aipin Marta = ...``) is in the system message of every reply after forced
   compactions of several strategies and after ``evennia reload``;
4. an arrival and an emote reach the next prompt as events, and an emote a player could not see
   never reaches a prompt that player hears, while the one who made it gets it back;
5. the ``[SCENE]`` note names who is present and whether and when the NPC last spoke with each.
"""

import asyncio
import re

import pytest

from tests.support.e2e_util import close_all as _close
from tests.support.e2e_util import (FORCED_COMPACT_RE, fail_with_logs, game_fixtures, logged_in,
                                    logged_in_admin)
from tests.support.llm_double import CountingModel, prompt_text, request_kind, unstamped
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

NPC = "Marta"
MARTA = "You are Marta, the innkeeper"  # the start of her persona (world/tavern.py)
PLAYERS = {
    "Wren": "wren-pw-4821",
    "Tamsin": "tamsin-pw-7310",
    "Oswin": "oswin-pw-5517",
    "Perrin": "perrin-pw-9043",
}
REPLY_TIMEOUT = HANG_GUARD  # waits on the answer itself; only a hang reaches it
ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_SLEEP_AFTER_IDLE": "0",
    "AI_MAX_CONTEXT_TOKENS": "3000",
    "AI_COMPACT_PRESERVE_WINDOW": "2",
    "AI_COMPACT_PRESERVE_FRACTION": "0",
    "AI_PRE_COMPACT_EMERGENCY_ITERATIONS": "1",
    "AI_PRE_COMPACT_MAX_ITERATIONS": "1",
    "AI_LLM_TIMEOUT": "60",
    "AI_COMPACT_FAILURE_LIMIT": "100",
}

# world/lore.py's entries, as the NPC is given them
DRINKS = "A mug of ale is 2 copper, a cup of cider 3"
BRIDGE = "the bridge at Hollin ford washed out in the last storm"
CURFEW = "the town gate closes at the tenth bell"
FESTIVAL = "The lantern festival is held on midsummer night at the mill pond"
DUES = "Guild dues are 12 silver a season, paid at the old chapel"
PIN = "Marta's brother Tom is the miller at Hollin ford and she owes him two sacks of flour"
OSRIC_PERSONA = ("You are Osric, a clerk of the Weavers' Guild, drinking at The Sleeping Stag. "
                 "You answer in one short sentence.")


def system_text(body):
    """The system message (persona, instructions, pins, constant lore)."""
    return str(body["messages"][0].get("content") or "")


def latest_scene(body):
    """The newest ``[SCENE]`` note of a reply prompt (None without one)."""
    scenes = [m["content"] for m in body["messages"]
              if m.get("role") == "system" and str(m.get("content")).startswith("[SCENE]")]
    return scenes[-1] if scenes else None


def events(body):
    """The event records a reply prompt shows: user lines in parentheses."""
    return [m["content"] for m in body["messages"]
            if m.get("role") == "user" and str(m.get("content")).startswith("(")]


llm, game = game_fixtures("e2e-world", ENV, CountingModel, players=PLAYERS.items(), timeout=300)


async def _player(game, name):
    return await logged_in(game, name, name, PLAYERS[name])


async def _go(player, where):
    """Walk ``tavern`` (in) or ``out``; idempotent (a missing exit just says so)."""
    await player.command(where, quiet=0.5)


async def _talk(game, llm, player, text, npc=NPC, persona=MARTA):
    """
    ``talk <npc> = <text>``, wait for the NPC's answer, and return the request of that reply
    (the reply request sent after the line whose system message starts with ``persona``).
    """
    # what the room heard before (another player's answer) must not pass for this answer
    await player.read_quiet(quiet=0.3, timeout=5)
    before = len(llm.requests)
    player.send(f"talk {npc} = {text}")
    match, _ = await player.read_until(rf'{npc} says, "Aye', timeout=REPLY_TIMEOUT)
    if match is None:
        fail_with_logs(game, f"{npc} did not answer {text!r}")
    asked = [b for b in llm.requests[before:]
             if b and request_kind(b) == "reply" and system_text(b).startswith(persona)]
    if not asked:
        fail_with_logs(game, f"no reply request of {npc} for {text!r}")
    return asked[-1]


async def _admin_says(admin, line, until, timeout=HANG_GUARD):
    """The admin's command and the answer line matching ``until``."""
    _, text = await admin.expect(line, until, timeout=timeout)
    return text


# -- 1. a key said brings its lore entry into that reply's prompt --------------------------------


def test_a_key_said_brings_its_lore_entry_into_that_reply(game, llm):
    asyncio.run(_lore_keys(game, llm))


async def _lore_keys(game, llm):
    wren, admin = await _player(game, "Wren"), await logged_in_admin(game)
    try:
        await _go(wren, "tavern")
        # the template's entries: prices (location:The Sleeping Stag), rumours (zone:crossroads)
        quiet = await _talk(game, llm, wren, "Good evening, Marta, it is cold out tonight.")
        asked = await _talk(game, llm, wren,
                            "How much is a mug of ale? Any word of the bridge? When is curfew?")
        for entry in (DRINKS, BRIDGE):
            assert entry not in prompt_text(quiet), prompt_text(quiet)
            assert entry in prompt_text(asked), prompt_text(asked)
            # given as world knowledge, not as anyone's words
            assert any(entry in m["content"] for m in asked["messages"]
                       if m["role"] == "system"), asked["messages"]
        # the watch's orders: "curfew" is one of its keys, but Marta is not of the watch
        assert CURFEW not in prompt_text(asked), prompt_text(asked)
        assert "When is curfew?" in prompt_text(asked)  # the key did reach her prompt

        # an entry the admin writes in the game
        added = await _admin_says(
            admin, f"ailore/add lantern festival = {FESTIVAL}; a lantern costs a copper.",
            r"Added lore entry [^\n]*|No lore[^\n]*|Usage[^\n]*")
        assert "Added lore entry" in added, added
        quiet = await _talk(game, llm, wren, "The fire is lovely tonight, Marta.")
        asked = await _talk(game, llm, wren, "When is the Lantern Festival this year?")
        assert FESTIVAL not in prompt_text(quiet), prompt_text(quiet)
        assert FESTIVAL in prompt_text(asked), prompt_text(asked)
    finally:
        await _close(wren, admin)


# -- 2. a faction's entry reaches that faction's NPC, never the innkeeper ------------------------


def test_a_faction_entry_reaches_the_guild_npc_and_never_the_innkeeper(game, llm):
    asyncio.run(_faction_lore(game, llm))


async def _faction_lore(game, llm):
    wren, admin = await _player(game, "Wren"), await logged_in_admin(game)
    osric = None
    try:
        added = await _admin_says(admin, f"ailore/add guild dues, dues = {DUES}.",
                                  r"Added lore entry (\d+)[^\n]*|Usage[^\n]*")
        entry_id = re.search(r"Added lore entry (\d+)", added)
        assert entry_id, added
        entry_id = entry_id.group(1)
        changed = await _admin_says(admin, f"ailore/set {entry_id}/condition = faction:guild",
                                    r"Changed lore entry [^\n]*|No lore[^\n]*|Fields[^\n]*")
        assert "who knows: faction:guild" in changed, changed

        # a second AI NPC in the tavern, of the guild
        made = await _admin_says(
            admin,
            "py from evennia.utils.create import create_object; "
            "from ai_contrib.typeclasses import AssistantCharacter; "
            "b = create_object(AssistantCharacter, key='Osric', "
            "location=me.search('The Sleeping Stag', global_search=True)); "
            f"b.db.persona = {OSRIC_PERSONA!r}; print('OSRIC=' + b.dbref)",
            r"OSRIC=#\d+|Error[^\n]*|Traceback[^\n]*", timeout=HANG_GUARD)
        osric = re.search(r"OSRIC=(#\d+)", made)
        assert osric, made
        osric = osric.group(1)
        tagged = await admin.command(f"tag {osric} = guild:faction", quiet=1.0)
        assert "guild" in tagged and "faction" in tagged, tagged

        await _go(wren, "tavern")
        to_osric = await _talk(game, llm, wren, "Osric, how much are the guild dues?",
                              npc="Osric", persona="You are Osric")
        to_marta = await _talk(game, llm, wren, "Marta, what are the guild dues these days?")
        assert DUES in prompt_text(to_osric), prompt_text(to_osric)
        assert DUES not in prompt_text(to_marta), prompt_text(to_marta)
        assert "what are the guild dues" in prompt_text(to_marta)  # her key, her prompt
        # Osric stands in the tavern too: its prices (location:The Sleeping Stag) reach him
        priced_osric = await _talk(game, llm, wren, "Osric, is the cider good here?",
                                  npc="Osric", persona="You are Osric")
        assert DRINKS in prompt_text(priced_osric), prompt_text(priced_osric)
        assert DUES in prompt_text(priced_osric)  # still shown where it was triggered
    finally:
        if osric:
            await admin.command(f"py from evennia.utils.search import search_object; "
                                f"search_object('{osric}')[0].delete()", quiet=1.0)
        await _close(wren, admin)


# -- 3. a pin survives compactions and a restart -------------------------------------------------


def test_a_pin_is_in_every_reply_after_compactions_and_a_reload(game, llm):
    asyncio.run(_pins(game, llm))


async def _pins(game, llm):
    wren, admin = await _player(game, "Wren"), await logged_in_admin(game)
    try:
        await _go(wren, "tavern")
        before = await _talk(game, llm, wren, "Marta, who grinds your flour?")
        assert PIN not in prompt_text(before), prompt_text(before)
        pinned = await _admin_says(admin, f"aipin {NPC} = {PIN}.",
                                   r"Pinned on [^\n]*|Usage[^\n]*|budget[^\n]*")
        assert f"Pinned on {NPC}" in pinned, pinned
        asked = await _talk(game, llm, wren, "Marta, who grinds your flour now?")
        assert PIN in system_text(asked), system_text(asked)

        results = {}
        for i, strategy in enumerate(("summary", "mask", "hybrid", "replace_all")):
            answer = await _admin_says(admin, f"aiconfig {NPC}/compact_strategy={strategy}",
                                       r"compact_strategy = [^\n]*|Unknown[^\n]*|[Uu]sage[^\n]*")
            assert f"compact_strategy = '{strategy}'" in answer, answer
            for j in range(3):
                await _talk(game, llm, wren, f"Round {i}.{j}: the ford is high and the mill "
                                             "wheel turns slowly this spring.")
            for _ in range(6):
                result = await _admin_says(admin, f"compact/force {NPC}", FORCED_COMPACT_RE,
                                           timeout=HANG_GUARD)
                if "already compacting" not in result:
                    break
                await asyncio.sleep(3)
            results[strategy] = result
            asked = await _talk(game, llm, wren, f"After compaction {i}, do you remember Tom?")
            if PIN not in system_text(asked):
                fail_with_logs(game, f"pin lost after {strategy} ({result!r}):\n"
                                     f"{system_text(asked)}")
            if strategy == "summary":
                # the compaction did its work: the prompt now starts with a summary
                assert "Compacted Marta" in result, result
                assert any(m["role"] == "system" and "[CONTEXT SUMMARY]" in m["content"]
                           for m in asked["messages"][1:]), asked["messages"]
                # the compacted lines left the history (recalled memories may still quote them)
                lines = [unstamped(m["content"]) for m in asked["messages"]
                         if m["role"] == "user"]
                assert not any(t.startswith("Wren: Round 0.0") for t in lines), lines
                assert any(t.startswith("Wren: Round 0.2") for t in lines), lines
        # every strategy but mask (Marta calls no tools, so it has nothing to mask) compacted
        assert re.search(r"Compacted Marta \(hybrid\)|Masked \d+", results["hybrid"]), results
        assert "Replaced Marta's whole history" in results["replace_all"], results
        assert re.search(r"Masked \d+|\(mask\) skipped: no old tool output", results["mask"]), \
            results
        await _admin_says(admin, f"aiconfig {NPC}/compact_strategy=summary",
                          r"compact_strategy = [^\n]*")

        # a server restart: the pin is an Attribute of the NPC, not a note of the process
        offset = game.log_size("server")
        game.evennia("reload", timeout=120)
        if not game.wait_for_log(r"ai_contrib: using the LLM server at", offset=offset,
                                 timeout=HANG_GUARD):
            fail_with_logs(game, "the server did not come back after evennia reload")
        await _close(wren, admin)
        wren = admin = None
        wren = await _player(game, "Wren")
        await _go(wren, "tavern")
        asked = await _talk(game, llm, wren, "Back again, Marta. How is your brother?")
        if PIN not in system_text(asked):
            fail_with_logs(game, f"pin lost after the reload:\n{system_text(asked)}")
    finally:
        await _close(wren, admin)


# -- 4. arrivals and emotes are events, heard by who saw them ------------------------------------


def test_arrivals_and_emotes_reach_the_prompt_of_those_who_saw_them(game, llm):
    asyncio.run(_events(game, llm))


async def _events(game, llm):
    wren, tamsin = await _player(game, "Wren"), await _player(game, "Tamsin")
    try:
        await _go(tamsin, "out")
        await _go(wren, "tavern")
        quiet = await _talk(game, llm, wren, "Quiet night, Marta.")
        await _go(tamsin, "tavern")
        await tamsin.command("pose waves to the room.", quiet=0.5)
        asked = await _talk(game, llm, wren, "Who is that, Marta?")
        seen = events(asked)
        for expected in ("Tamsin arrives", "Tamsin waves to the room."):
            assert not any(expected in e for e in events(quiet)), events(quiet)
            assert any(expected in e for e in seen), (expected, seen)
        # in order: the arrival, then the wave, then the line being answered
        texts = [m["content"] for m in asked["messages"]]
        arrival = max(i for i, t in enumerate(texts) if "Tamsin arrives" in t)
        wave = max(i for i, t in enumerate(texts) if "Tamsin waves" in t)
        assert arrival < wave < len(texts) - 1 and unstamped(texts[-1]).startswith("Wren: Who is that")

        # Wren steps out; what Tamsin does meanwhile, Wren never saw
        await _go(wren, "out")
        await tamsin.command("emote juggles three red apples.", quiet=0.5)
        await _go(wren, "tavern")
        back = await _talk(game, llm, wren, "I am back, Marta. Did I miss anything?")
        assert not any("juggles three red apples" in e for e in events(back)), events(back)
        assert "juggles" not in prompt_text(back), prompt_text(back)
        assert any("Wren arrives" in e for e in events(back)), events(back)  # seen by both
        # Tamsin alone: her own emote is hers to be reminded of
        await _go(wren, "out")
        alone = await _talk(game, llm, tamsin, "Marta, did you like my juggling?")
        assert any("Tamsin juggles three red apples." in e for e in events(alone)), events(alone)
    finally:
        await _close(wren, tamsin)


# -- 5. the scene: who is present, whom the NPC has met ------------------------------------------


def test_the_scene_names_who_is_present_and_when_marta_last_spoke_with_each(game, llm):
    asyncio.run(_scene(game, llm))


async def _scene(game, llm):
    oswin, perrin = await _player(game, "Oswin"), await _player(game, "Perrin")
    try:
        await _go(oswin, "tavern")
        await _go(perrin, "tavern")
        first = await _talk(game, llm, oswin, "Good evening, Marta. A bowl of something warm?")
        scene = latest_scene(first)
        assert scene and "The Sleeping Stag" in scene, first["messages"]
        assert re.search(r"Oswin \([^)]*you last spoke just now", scene), scene
        assert re.search(r"Perrin \([^)]*you have not met\)", scene), scene

        second = await _talk(game, llm, perrin, "Evening, Marta. I am new in town.")
        scene = latest_scene(second)
        assert scene, second["messages"]
        assert re.search(r"Oswin \([^)]*you last spoke", scene), scene
        assert re.search(r"Perrin \([^)]*you last spoke just now", scene), scene
        assert "you have not met" not in scene, scene
    finally:
        await _close(oswin, perrin)


# -- 6. three NPCs in one room: only the one a player names answers ------------------------------

#: the two NPCs made beside Marta for this test: (key, persona); their names are in no other line
COMPANIONS = (
    ("Hobb", "You are Hobb, the stable hand of The Sleeping Stag. Speak briefly."),
    ("Cora", "You are Cora, the miller's daughter, resting at The Sleeping Stag. Speak briefly."),
)


def test_with_three_npcs_only_the_one_named_answers(game, llm):
    asyncio.run(_three_npcs(game, llm))


async def _wait_all_idle(game, admin, names, timeout=HANG_GUARD):
    """Wait until no NPC of ``names`` is writing a reply or has a line awaiting one: after this
    every reply the lines said so far set off has been asked of the double."""
    # map and a lambda's default argument: py's exec gives a generator no access to its names
    found = " + ".join(f"list(so({name!r}))" for name in names)
    probe = ("py from ai_contrib.typeclasses import get_assistant_script as g; "
             "from evennia.utils.search import search_object as so; "
             f"npcs = {found}; "
             "print('IDLE=%s' % all(map(lambda o, g=g: not (g(o).ndb.busy or g(o).pending_ids()), "
             "npcs)))")
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        answer = await _admin_says(admin, probe, r"IDLE=\w+|Error[^\n]*|Traceback[^\n]*")
        if "IDLE=True" in answer:
            return
        assert "IDLE=False" in answer, answer
        await asyncio.sleep(0.5)
    fail_with_logs(game, f"the NPCs {names} did not finish their replies")


def _replies_by_npc(bodies, names):
    """How many reply requests of each NPC of ``names`` are in ``bodies`` (by persona)."""
    return {name: sum(1 for b in bodies if b and request_kind(b) == "reply"
                      and system_text(b).startswith(f"You are {name}")) for name in names}


async def _three_npcs(game, llm):
    wren, admin = await _player(game, "Wren"), await logged_in_admin(game)
    made = []
    names = (NPC,) + tuple(key for key, _ in COMPANIONS)
    try:
        for key, persona in COMPANIONS:
            answer = await _admin_says(
                admin,
                "py from evennia.utils.create import create_object; "
                "from ai_contrib.typeclasses import AssistantCharacter; "
                f"o = create_object(AssistantCharacter, key='{key}', "
                "location=me.search('The Sleeping Stag', global_search=True)); "
                f"o.db.persona = {persona!r}; print('MADE=' + o.dbref)",
                r"MADE=#\d+|Error[^\n]*|Traceback[^\n]*", timeout=HANG_GUARD)
            dbref = re.search(r"MADE=(#\d+)", answer)
            assert dbref, answer
            made.append(dbref.group(1))
        await _go(wren, "tavern")
        await _wait_all_idle(game, admin, names)  # what arriving set off is not counted below
        # each NPC is named once, by talk or by say; each line is answered by that one alone
        lines = [
            ("Hobb", "say Hobb, is my horse fed and watered?"),
            ("Cora", "say Cora, is the mill grinding this week?"),
            (NPC, f"talk {NPC} = {NPC}, a mug of your dark ale, please."),
            ("Cora", "talk Cora = Cora, and the flour, is it dear?"),
        ]
        for named, command in lines:
            await wren.read_quiet(quiet=0.3, timeout=5)
            wren.discard()
            heard_from = len(wren.received)  # what Wren is shown from this line on
            before = len(llm.requests)
            wren.send(command)
            match, _ = await wren.read_until(rf'{named} says, "Aye', timeout=REPLY_TIMEOUT)
            if match is None:
                fail_with_logs(game, f"{named} did not answer {command!r}")
            await _wait_all_idle(game, admin, names)
            await wren.read_quiet(quiet=0.5, timeout=5)
            asked = _replies_by_npc(llm.requests[before:], names)
            # the positive control: the named NPC was asked once, and the room heard it
            assert asked[named] == 1, (command, asked)
            assert f'{named} says, "Aye' in wren.received[heard_from:]
            for other in names:
                if other != named:
                    assert asked[other] == 0, (command, asked)
                    heard = wren.received[heard_from:]
                    assert f'{other} says, "' not in heard, (command, heard)
    finally:
        for dbref in made:
            await admin.command(f"py from evennia.utils.search import search_object; "
                                f"search_object('{dbref}')[0].delete()", quiet=1.0)
        await _close(wren, admin)
