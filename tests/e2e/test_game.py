"""
End to end: the real game from ``game_template/`` with the embedded model, driven over telnet.

One game is made in a temporary directory on free loopback ports and started once for this
module (Evennia's start and the embedded SmolLM2 model are the slow part). A player creates an
account, walks into the tavern and talks to Marta; the admin (superuser) inspects her with
``aihistory`` and compacts her history. The token budget is tiny (AI_MAX_CONTEXT_TOKENS=400,
preserve window 2 messages) so a few lines fill it.
"""

import asyncio
import re

import pytest

from ai_contrib.core.grounding import source_lines, unknown_items
from ai_contrib.core.language import language_problem
from ai_contrib.memory.retrieval import strip_summary_prefix
from demo.telnet import TelnetPlayer, Transcript
from tests.support.e2e_util import FORCED_COMPACT_RE, fail_with_logs, started_game
from tests.support.tavern_e2e import py, wait_idle
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480)]

NPC = "Marta"
FALLBACK = f"{NPC} seems lost in thought."  # AI_FALLBACK_REPLY, shown when the model fails
REPLY_RE = re.compile(rf'^{NPC} says, "(?P<text>.+)"\s*$', re.M)
ANSWER_RE = re.compile(rf'^(?:{NPC} says, "|{re.escape(FALLBACK)})', re.M)
# a successful row of aihistory's "Compaction events" table: trigger, ok, messages, before -> after
# (the trigger cell may name the strategy too: "emergency (summary)")
EVENT_ROW_RE = re.compile(
    r"\|\s*(?P<trigger>sleep|emergency|manual)\b[^|]*\|\s*ok\s*\|\s*(?P<messages>\d+)\s*\|"
    r"\s*(?P<before>\d+) -> (?P<after>\d+)\s*\|"
)
REPLY_TIMEOUT = HANG_GUARD  # waits on the answer (an emergency compaction may come first)

PLAYER = ("Wren", "wren-pw-4821")
LINES = [
    "Good evening, Marta! I'm Wren, a blacksmith from Riverbend.",
    "My daughter Lily turns seven next Tuesday, so I need a cake.",
    "I also sold my old grey mare, Pepper, to a farmer at the market.",
    "Do you remember what my daughter's name is?",
]


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    """A started game with a tiny token budget; stopped (or killed) afterwards."""
    env = {
        "AI_LLM_BASE_URL": "",  # empty = unset: always the embedded model here
        "AI_MAX_CONTEXT_TOKENS": "400",
        "AI_COMPACT_PRESERVE_WINDOW": "2",
        # the strategies, not the in-flight bound, are under test: with a 400-token budget the
        # bound would move to the archive the lines a forced compaction needs
        "AI_COMPACT_INFLIGHT_CAP": "100",
        # ... nor the hurry near the budget: the model writes each strategy's summaries
        "AI_COMPACT_HURRY": "false",
        "AI_SLEEP_AFTER_IDLE": "0",
        # a summary must be shorter than what it replaces; with a 400-token budget that is
        # a few hundred tokens, so the summariser may write at most 120
        "AI_COMPACT_SUMMARY_MAX_TOKENS": "120",
        "AI_LLM_SEED": "1234",
        # one server process for replies and memory work: the strategy round relies on the
        # history the seeded model writes there (with memory work in a process of its own, its
        # summaries differ, the mask round's eviction empties the context and the hybrid round
        # finds nothing to compact); the memory server is tested in tests/model/test_embedded.py
        "AI_EMBEDDED_MEMORY_SERVER": "false",
        # one round of fact extraction before an emergency compaction keeps the test short
        "AI_PRE_COMPACT_EMERGENCY_ITERATIONS": "1",
    }
    yield from started_game(tmp_path_factory, "e2e-game", env, timeout=300)


async def _talk(player, text):
    """Say ``text`` to Marta and return (match, answer text)."""
    player.discard()
    player.send(f"talk {NPC} = {text}")
    return await player.read_until(ANSWER_RE, timeout=REPLY_TIMEOUT)


def test_player_gets_a_model_written_reply_and_admin_sees_a_compaction(game):
    transcript = game.transcript
    replies = asyncio.run(_conversation(game, transcript))

    # (a) Marta answered every line with words from the model, not the fallback line
    for said, reply in zip(LINES, replies, strict=True):
        if reply is None or reply == FALLBACK:
            fail_with_logs(game, f"no model-written answer to {said!r}: {reply!r}")
        assert reply.strip() and reply.strip() != said

    history, compact_answer, history_after = asyncio.run(_admin_checks(game, transcript))

    # the answers are the NPC's own history: the archive lists them as Marta's messages
    raw = history["raw"]
    for reply in replies:
        head = reply[:25]
        if head not in raw:
            fail_with_logs(game, f"reply {head!r} not in Marta's archive:\n{raw}")

    # (b) a compaction appears in aihistory: emergency (the budget overflowed) or the admin's
    events = [m.groupdict() for m in EVENT_ROW_RE.finditer(history_after)]
    if not events:
        fail_with_logs(
            game,
            f"no compaction event in aihistory (compact said: {compact_answer!r}):\n"
            f"{history_after}",
        )
    for event in events:
        assert int(event["after"]) < int(event["before"]), event
    count = re.search(r"Compactions\s*\|\s*(\d+)", history_after)
    assert count and int(count.group(1)) >= len(events)
    assert "[CONTEXT SUMMARY]" not in "\n".join(replies)  # a summary never reads as speech


async def _conversation(game, transcript):
    replies = []
    async with TelnetPlayer("player", game.ports.telnet, transcript=transcript) as player:
        await player.login(*PLAYER, create=True)
        await player.command("tavern")
        for line in LINES:
            match, text = await _talk(player, line)
            if match is None:
                replies.append(None)
                continue
            said = REPLY_RE.search(text)
            replies.append(said.group("text") if said else FALLBACK)
    return replies


async def _admin_checks(game, transcript):
    """
    aihistory until no compaction is running; compact/force if none succeeded yet; aihistory
    again; the raw archive.
    """
    async with TelnetPlayer("admin", game.ports.telnet, transcript=transcript) as admin:
        await admin.login(*game.superuser)
        before = await admin.command(f"aihistory {NPC}", quiet=1.5, timeout=30)
        compact_answer = None
        for _ in range(6):
            if EVENT_ROW_RE.search(before):
                break
            _, compact_answer = await admin.expect(
                f"compact/force {NPC}", r"Compacted [^\n]*|Compaction of [^\n]*", timeout=HANG_GUARD
            )
            if "already compacting" not in compact_answer:
                break
            # an emergency compaction is under way: let it finish, then look again
            await asyncio.sleep(5)
            before = await admin.command(f"aihistory {NPC}", quiet=1.5, timeout=30)
        after = await admin.command(f"aihistory {NPC}", quiet=1.5, timeout=30)
        raw = await admin.command(f"aihistory/raw {NPC}", quiet=1.5, timeout=30)
    return {"before": before, "raw": raw}, compact_answer, after


# -- every compaction strategy on the live NPC ---------------------------------------------------

#: What ``compact/force`` answers when each strategy did its work
#: (ai_contrib.npc.compaction_runner).
STRATEGY_DONE = {
    # the NPC calls no tools in this game: the admin gives her a tool call and its output first
    # (TOOL_TURN), so the manual mask has one to mask (its automatic path, eviction at the
    # emergency threshold, runs while the player talks)
    "mask": r"Masked [1-9]\d* old tool output[^\n]*",
    "hybrid": r"Compacted Marta \(hybrid\)[^\n]*|Masked \d+ old tool output[^\n]*",
    "cascade": r"Cascade cycle \d+ for Marta[^\n]*",
    "replace_all": r"Replaced Marta's whole history[^\n]*",
}
STRATEGY_PLAYER = ("Tamsin", "tamsin-pw-7730")
STRATEGY_LINES = {
    "mask": "The mill by the river burned down last night.",
    "hybrid": "My brother Tobin is coming to town on Friday.",
    "cascade": "I owe the miller four silver coins.",
    "replace_all": "Will you keep a room for Tobin?",
}
#: ``py`` run by the admin before the mask round's ``compact/force``: a tool call of Marta's and
#: its output (about 100 tokens) added to her history the one way any code adds to it, as a
#: tool-using NPC's turn does, and a mask window of 0 turns so that the output may be masked at
#: once; automatic compaction is off until the forced one has run (those 100 tokens can take
#: the tiny budget past the emergency threshold, and the emergency mask would take the output
#: first, every try); ``{n}`` makes each call id unique
TOOL_TURN = (
    "py from ai_contrib.typeclasses import get_assistant_script as g; "
    f"s = g(me.search('{NPC}', global_search=True)); s.db.mask_window = 0; "
    "s.db.compact_enabled = False; "
    "s.add_message('assistant', '', name='Marta', tool_calls=[{{'id': 'call_ledger{n}', "
    "'type': 'function', 'function': {{'name': 'read_ledger', 'arguments': '{{}}'}}}}]); "
    "s.add_message('tool', 'The ledger: the miller owes four silver coins, ' * 10, "
    "tool_call_id='call_ledger{n}', metadata={{'tool': 'read_ledger'}})"
)
TOOL_TURN_DONE = f"py from ai_contrib.typeclasses import get_assistant_script as g; " \
    f"s = g(me.search('{NPC}', global_search=True)); s.db.mask_window = None; " \
    "s.db.compact_enabled = None"


def test_each_strategy_compacts_the_live_npc_and_she_keeps_talking(game):
    """
    The admin switches Marta to each strategy in turn (``compact/set``), a player talks to her
    under it (the tiny budget makes the automatic path run with that strategy too), and
    ``compact/force`` runs it once: every strategy must do its work, Marta must answer every
    line with model-written words, and no compaction may grow the history.
    """
    transcript = Transcript(game.path.parent / "transcript-strategies.txt")
    outcomes, final = asyncio.run(_strategy_round(game, transcript))
    for strategy, outcome in outcomes.items():
        if outcome["reply"] in (None, FALLBACK):
            fail_with_logs(game, f"{strategy}: no model-written answer: {outcome!r}", transcript)
        if not re.search(STRATEGY_DONE[strategy], outcome["compact"]):
            fail_with_logs(game, f"{strategy}: compact/force said {outcome['compact']!r}",
                           transcript)
        assert f"now compacts with strategy {strategy}" in outcome["set"], outcome
        assert strategy in outcome["history"], outcome  # aihistory's Strategy row
        tokens = re.search(r"(\d+) -> (\d+) tokens", outcome["compact"])
        assert tokens, outcome
        assert int(tokens.group(2)) <= int(tokens.group(1)), outcome
    for strategy in ("hybrid", "cascade", "replace_all"):  # the ones that write summaries
        assert f"({strategy})" in final, f"no {strategy} event in aihistory:\n{final}"


def test_the_journal_holds_only_names_and_numbers_that_were_said(game):
    """
    What the embedded model journaled while the strategies ran (facts, observations, the
    compactions' syntheses) names no name and no number that no line of the conversation
    holds, and is in the conversation's language (docs/design.md, "Facts you can trust").
    """
    entries, said = asyncio.run(_journal_and_archive(game))
    lines = source_lines([{"role": role, "name": name, "content": content}
                          for role, name, content in said])
    assert lines, said
    source = "\n".join(line.text for line in lines)
    checked = 0
    for kind, content in entries:
        text = strip_summary_prefix(content)
        if kind not in ("fact", "observation", "compaction") or not text:
            continue
        checked += 1
        assert unknown_items(text, lines) == [], (kind, content)
        assert language_problem(text, source) == "", (kind, content)
    # the strategies' compactions journal their syntheses: the check read something
    assert checked, entries


async def _journal_and_archive(game):
    async with TelnetPlayer("admin", game.ports.telnet, transcript=game.transcript) as admin:
        await admin.login(*game.superuser)
        await wait_idle(admin)
        npc = f"me.search('{NPC}', global_search=True)"
        entries = await py(admin, f"[(e.get('source_type'), e.get('content')) for e in "
                                  f"{npc}.db.journal['entries']]")
        said = await py(admin, f"[(m.get('role'), m.get('name'), m.get('content')) for s in "
                               f"{npc}.scripts.all() for m in s.archive.messages(0, "
                               f"s.archive.last_seq) if m.get('role') in ('user', 'assistant', "
                               f"'system')]")
    return entries or [], said or []


async def _strategy_round(game, transcript):
    outcomes = {}
    async with (
        TelnetPlayer("admin", game.ports.telnet, transcript=transcript) as admin,
        TelnetPlayer("player", game.ports.telnet, transcript=transcript) as player,
    ):
        await admin.login(*game.superuser)
        await player.login(*STRATEGY_PLAYER, create=True)
        await player.command("tavern")
        for strategy, line in STRATEGY_LINES.items():
            outcome = outcomes[strategy] = {}
            _, outcome["set"] = await admin.expect(
                f"compact/set {NPC}/strategy={strategy}", r"now compacts with[^\n]*|Unknown[^\n]*"
            )
            match, text = await _talk(player, line)
            said = REPLY_RE.search(text) if match else None
            outcome["reply"] = said.group("text") if said else (FALLBACK if match else None)
            for attempt in range(6):
                if strategy == "mask":  # a fresh output each try: one the try before found
                    # may have been masked by the automatic compaction it met
                    await admin.command(TOOL_TURN.format(n=attempt), quiet=1.5, timeout=30)
                _, outcome["compact"] = await admin.expect(
                    f"compact/force {NPC}", FORCED_COMPACT_RE, timeout=HANG_GUARD
                )
                # an automatic compaction under way, or (mask) one that met the fresh output
                # first and evicted or masked it: try again with a fresh one
                if "nothing to compact" in outcome["compact"] or (
                        "under way" in outcome["compact"] and "skipped" in outcome["compact"]):
                    # an automatic compaction with this strategy landed just before (or the
                    # forced one waited for it) and left nothing for the forced one: the
                    # player says more, and it runs on that
                    await _talk(player, line)
                    continue
                if "already compacting" not in outcome["compact"] and not (
                        strategy == "mask" and "no old tool output" in outcome["compact"]):
                    break
                await asyncio.sleep(5)  # an automatic compaction is under way
            if strategy == "mask":
                await admin.command(TOOL_TURN_DONE, quiet=1.5, timeout=30)
            outcome["history"] = await admin.command(f"aihistory {NPC}", quiet=1.5, timeout=30)
        await admin.expect(f"compact/set {NPC}/strategy=summary", r"now compacts with[^\n]*")
        final = await admin.command(f"aihistory {NPC}", quiet=1.5, timeout=30)
    return outcomes, final
