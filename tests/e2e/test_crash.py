"""
End to end: ``kill -9`` of a real game server in the middle of a compaction loses nothing.

One game is made from ``game_template/`` on free loopback ports, its ``AI_LLM_BASE_URL``
pointing at an LLM double run by this test process on 127.0.0.1. The double answers NPC replies
at once ("Aye, noted (n).") and can hold a summary request open until the test lets it answer,
so a compaction is truly in flight when the server dies. Players talk to Marta over telnet, the
admin runs ``compact/force Marta``, the server process is killed with SIGKILL at a chosen point,
the game is started again, and then the history is checked through the game itself
(``aihistory Marta`` and ``aihistory Marta/raw``, the journal through ``py``) against the NPC's
archive file on disk:

- every archived message is in context, or inside exactly one in-context summary's archive range;
- no summary appears twice, in context or in the journal, and each one the archive records has
  its journal synthesis entry;
- the counts ``aihistory`` shows agree with the archive (messages, records, summaries, and the
  number and time of compactions), and Marta answers again.

The crash points:

1. while the summary call is pending (a player spoke in the meantime);
2. after the compaction was recorded, with more messages said before the next checkpoint
   (``AI_CHECKPOINT_INTERVAL`` is an hour, so they exist only in the archive);
3. right after the compaction record was written, before the journal entry and the checkpoint
   reached the database. That window is one synchronous run of the reactor (archive line,
   journal Attribute, checkpoint Attribute) and cannot be hit by timing a signal, so it is
   reproduced exactly instead: the database is copied (SQLite backup) while the summary is
   pending -- nothing of Marta's is written to it between then and the compaction record (her
   new lines go to the archive only) -- and put back after the kill, so the server finds the
   archive one compaction record ahead of its database, as a kill at that instant leaves it.

After a kill the Portal keeps running and ``evennia start`` brings back only the Server, which
then logs none of Evennia's "successfully started" lines (no restart mode after a crash), so
readiness is the contrib's own start hook in the server log.

Ports, the game dir and the double are private to this module: about a minute to make and start
the game, then well under a minute per crash.
"""

import ast
import asyncio
import re
import shutil
import sqlite3
import threading

import pytest

from tests.support.e2e_util import (
    archive_records,
    game_fixtures,
    logged_in,
    logged_in_admin,
    npc_archives,
)
from tests.support.waiting import HANG_GUARD

# the third crash restores the game's SQLite file from a backup: this game keeps SQLite even
# where the suite runs on PostgreSQL (tests/conftest.py)
pytestmark = [pytest.mark.e2e, pytest.mark.sqlite_game, pytest.mark.timeout(300)]

NPC = "Marta"
PLAYERS = [("Wren", "wren-pw-4821"), ("Tamsin", "tamsin-pw-7310")]
REPLY_RE = r'Marta says, "Aye, noted \(\d+\)\."'
HOLD_LIMIT = 120  # seconds a held summary waits at most (a failed test must not hang)
ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_SLEEP_AFTER_IDLE": "0",  # no sleep-phase compaction behind the test's back
    "AI_CHECKPOINT_INTERVAL": "3600",  # between compactions the archive alone has new lines
    "AI_MAX_CONTEXT_TOKENS": "4000",  # far from the emergency threshold
    "AI_COMPACT_PRESERVE_WINDOW": "2",
    "AI_COMPACT_PRESERVE_FRACTION": "0",
    "AI_LLM_TIMEOUT": "150",
}
OVERVIEW_NUMBERS = {
    "in_context": r"Messages\s*\|\s*(\d+) in context",
    "summaries": r"in context \((\d+) summaries\)",
    "archived": r"Archived\s*\|\s*(\d+) records",
    "compactions": r"Compactions\s*\|\s*(\d+) \(last",
}
# a row of aihistory's "Summaries in context": marker id, compacted count, ..., archive range
SUMMARY_ROW_RE = re.compile(
    r"^\|\s*([0-9a-f]{12})\s*\|\s*(\d+)\s*\|.*\|\s*(\d+)\.\.(\d+)\s*\|\s*$", re.M
)
# a row of aihistory/raw: seq, time, who, text, in context
RAW_ROW_RE = re.compile(r"^\|\s*(\d+)\s*\|[^|]*\|[^|]*\|\s*(.*?)\s*\|\s*(yes|no)\s*\|\s*$", re.M)


class GameLLM:
    """
    The double's answers: NPC replies at once; summary requests (they carry a
    ``<transcript>``) answered at once, or held open between :meth:`hold` and :meth:`release`.
    """

    def __init__(self):
        self.replies = 0
        self.summaries = []
        self._release = threading.Event()
        self._release.set()
        self.summary_requested = threading.Event()

    def __call__(self, body):
        last = body["messages"][-1]["content"]
        if "<transcript>" in last:
            self.summary_requested.set()
            self._release.wait(HOLD_LIMIT)
            text = (
                f"Notes {len(self.summaries) + 1}: Wren the blacksmith and Tamsin the weaver "
                "told me about the mill, the ford and Lily's birthday."
            )
            self.summaries.append(text)
            return text
        self.replies += 1
        return f"Aye, noted ({self.replies})."

    def hold(self):
        """Hold the next summary requests open until :meth:`release`."""
        self.summary_requested.clear()
        self._release.clear()

    def release(self):
        """Let held summary requests (and later ones) answer."""
        self._release.set()


# the LLM double the game talks to (``llm.script`` is its :class:`GameLLM`) and a started game
# with two player accounts in the tavern; the telnet transcript is kept beside the game dir
llm, game = game_fixtures("e2e-crash", ENV, GameLLM, players=PLAYERS, then="tavern",
                          attribute="script", release=GameLLM.release)


# -- driving the game ------------------------------------------------------------------------------


async def _player(game, index):
    name, password = PLAYERS[index]
    return await logged_in(game, name, name, password)


async def _admin(game):
    return await logged_in_admin(game)


async def _talk(player, text):
    """Say ``text`` to Marta and wait for her answer: then both lines are in her archive."""
    await player.expect(f"talk {NPC} = {text}", REPLY_RE, timeout=HANG_GUARD)


async def _conversation(game, lines):
    """Each player in turn says its share of ``lines`` and gets an answer."""
    players = [await _player(game, i) for i in range(len(PLAYERS))]
    try:
        for i, line in enumerate(lines):
            await _talk(players[i % len(players)], line)
    finally:
        for player in players:
            await player.close()


def _assert_counted(state):
    """The admin's count of compactions agrees with the archive, replayed ones included."""
    shown, recorded = state["overview"]["compactions"], len(state["compactions"])
    assert shown == recorded, (
        f"aihistory counts {shown} compactions, the archive records {recorded}"
    )
    if recorded:
        last = state["compactions"][-1]["marker"]["metadata"]["compacted_at"]
        assert f"(last: {last})" in state["text"], f"last compaction shown is not {last}"


def _restart_after_kill(game):
    """
    ``evennia start`` with the Portal still up (it keeps the telnet port): the Server comes
    back in no particular restart mode, so the readiness sign is the contrib's own start hook.
    """
    offset = game.log_size("server")
    game.evennia("start", timeout=120)
    if not game.wait_for_log(r"ai_contrib: using the LLM server at", offset=offset, timeout=HANG_GUARD):
        pytest.fail("server did not come back after kill -9:\n" + game.log_tail("server"))


# -- reading the state ---------------------------------------------------------------------------


def _archive_records(game):
    records = archive_records(game)
    assert records, npc_archives(game)
    return records


async def _ask(admin, command, first_line):
    """Send ``command``; wait (however long the server takes) for ``first_line`` of its
    answer, then take the rest of the answer."""
    _, head = await admin.expect(command, first_line, timeout=HANG_GUARD)
    return head + await admin.read_quiet(quiet=0.5, timeout=10)


async def _overview(admin):
    text = await _ask(admin, f"aihistory {NPC}", rf"AI history of {NPC}")
    numbers = {}
    for key, pattern in OVERVIEW_NUMBERS.items():
        match = re.search(pattern, text)
        assert match, f"no {key} in aihistory:\n{text}"
        numbers[key] = int(match.group(1))
    summaries = [(m[1], int(m[3]), int(m[4])) for m in SUMMARY_ROW_RE.finditer(text)]
    return numbers, summaries, text


async def _raw(admin, last_seq):
    """``{seq: (text, in_context)}`` for every archived message, page by page."""
    rows = {}
    for start in range(0, last_seq + 1, 20):
        text = await _ask(admin, f"aihistory {NPC}/raw {start} {start + 19}",
                          rf"Archive of {NPC}|No archived messages")
        for match in RAW_ROW_RE.finditer(text):
            rows[int(match[1])] = (match[2], match[3] == "yes")
    return rows


async def _journal_marker_ids(admin):
    text = await _ask(
        admin,
        f"py [e.get('marker_id') for e in me.search('{NPC}', global_search=True)"
        ".db.journal['entries'] if e.get('marker_id')]",
        r"(?m)^\[[^\n]*\]\s*$",
    )
    lists = [line for line in text.splitlines()
             if line.startswith("[") and not line.startswith("[MudInfo]")]
    assert lists, f"no journal listing in:\n{text}"
    return ast.literal_eval(lists[-1])


async def _check_consistent(game):
    """
    Check the game's view of Marta's history against her archive file; return what was read:
    ``{"records", "messages", "overview", "summaries", "raw", "journal"}``.
    """
    # After a restart Marta may still answer a line the kill left unanswered: read the game's
    # view until the archive stood still while it was read, so both describe the same moment.
    for _attempt in range(10):
        records = _archive_records(game)
        admin = await _admin(game)
        try:
            overview, summaries, text = await _overview(admin)
            raw = await _raw(admin, records[-1]["seq"])
            journal = await _journal_marker_ids(admin)
        finally:
            await admin.close()
        if _archive_records(game) == records:
            break
        await asyncio.sleep(1)
    messages = [r["msg"] for r in records if r["kind"] == "message"]
    compactions = [r for r in records if r["kind"] == "compaction"]
    evicted = {i for r in records if r["kind"] == "evict" for i in r["ids"]}
    assert [r["seq"] for r in records] == list(range(len(records)))  # no torn or lost record
    assert len({m["id"] for m in messages}) == len(messages)

    assert overview["archived"] == len(records), text
    # no duplicated summary: in context, or among the journal's synthesis entries
    marker_ids = [s[0] for s in summaries]
    assert overview["summaries"] == len(summaries), text
    assert len(set(marker_ids)) == len(marker_ids), summaries
    assert len(set(journal)) == len(journal), journal
    # each compaction the archive recorded has its journal entry (replayed ones included)
    assert {r["marker"]["id"] for r in compactions} <= set(journal), (compactions, journal)
    assert set(marker_ids) <= {r["marker"]["id"] for r in compactions}
    # every archived message: in context, or inside exactly one in-context summary's range
    assert sorted(raw) == [m["seq"] for m in messages], (sorted(raw), len(messages))
    for msg in messages:
        shown, in_context = raw[msg["seq"]]
        assert msg["content"].startswith(shown.rstrip(". ")[:20]), (shown, msg)
        covering = [s for s in summaries if s[1] <= msg["seq"] <= s[2]]
        if in_context:
            assert not covering, (msg, covering)
        else:
            assert len(covering) == 1 or (not covering and msg["id"] in evicted), (msg, summaries)
    assert overview["in_context"] == sum(1 for _, yes in raw.values() if yes) + len(summaries)
    return {"records": records, "messages": messages, "overview": overview,
            "summaries": summaries, "raw": raw, "journal": journal, "text": text,
            "compactions": compactions}


async def _compact(game, expect=r"Compacted Marta[^\n]*"):
    """``compact/force Marta`` as the admin; returns the answer line."""
    admin = await _admin(game)
    try:
        _, text = await admin.expect(f"compact/force {NPC}", expect, timeout=HANG_GUARD)
    finally:
        await admin.close()
    return text


async def _summary_pending(game, llm, player_index):
    """
    The admin forces a compaction whose summary the LLM double holds back (until
    ``llm.script.release()``); returns ``(admin, player)`` connections, player ``player_index``
    logged in, once the summary has been asked for.
    """
    admin = await _admin(game)
    player = await _player(game, player_index)
    llm.script.hold()
    await admin.expect(f"compact/force {NPC}", r"Compacting Marta's history \(forced\)")
    assert await asyncio.to_thread(llm.script.summary_requested.wait, 60)
    return admin, player


# -- the crash points ------------------------------------------------------------------------------


def test_kill_while_summary_is_pending(game, llm):
    """The summary never comes back: the history is all there, nothing half-applied."""
    asyncio.run(_conversation(game, [f"line {i} about the mill by the ford" for i in range(6)]))
    before = _archive_records(game)

    async def crash():
        admin, player = await _summary_pending(game, llm, 1)
        await _talk(player, "said while the summary was being written")
        game.kill("server")
        llm.script.release()
        await player.close(quit=False)
        await admin.close(quit=False)

    asyncio.run(crash())
    _restart_after_kill(game)
    state = asyncio.run(_check_consistent(game))

    # the summary never came back: no compaction, every message in context, the late line too
    assert not any(r["kind"] == "compaction" for r in state["records"])
    assert state["summaries"] == [] and state["journal"] == []
    assert all(in_context for _, in_context in state["raw"].values())
    # everything said before is still there, in order, and the line said during the pending
    # summary after it (a reply still on its way when ``before`` was read may sit in between)
    before_ids = [r["msg"]["id"] for r in before if r["kind"] == "message"]
    assert [m["id"] for m in state["messages"]][: len(before_ids)] == before_ids
    later = [m["content"] for m in state["messages"][len(before_ids):]]
    assert "said while the summary was being written" in later
    # nothing stuck: Marta answers, and compaction works again
    asyncio.run(_conversation(game, ["are you still there, Marta?"]))
    assert "Compacted Marta" in asyncio.run(_compact(game))
    state = asyncio.run(_check_consistent(game))
    assert len(state["summaries"]) == 1
    _assert_counted(state)


def test_kill_after_compaction_before_next_checkpoint(game, llm):
    """Lines said after the compaction's checkpoint come back from the archive."""
    asyncio.run(_conversation(game, [f"news {i} from Riverbend" for i in range(4)]))
    assert "Compacted Marta" in asyncio.run(_compact(game))
    compacted = asyncio.run(_check_consistent(game))
    later = ["my daughter Lily turns seven on Tuesday", "I sold Pepper, my grey mare"]
    asyncio.run(_conversation(game, later))  # after the checkpoint: only in the archive
    game.kill("server")
    _restart_after_kill(game)
    state = asyncio.run(_check_consistent(game))

    assert [s[0] for s in state["summaries"]] == [s[0] for s in compacted["summaries"]]
    assert len(state["summaries"]) == 1  # the new summary folded the earlier one
    # the lines said after the checkpoint, whether or not Marta's replies to them were stored
    # before the kill (two players' lines may share one reply, which may still be written)
    said = [m["content"] for m in state["messages"] if m.get("role") == "user"]
    assert said[-len(later):] == later
    assert all(state["raw"][m["seq"]][1] for m in state["messages"][-4:])
    _assert_counted(state)
    asyncio.run(_conversation(game, ["what did I sell, Marta?"]))


def test_kill_right_after_compaction_record(game, llm):
    """The archive holds a compaction the database never saw: it is replayed, once."""
    asyncio.run(_conversation(game, [f"rumour {i} about the old mill" for i in range(4)]))
    db = game.path / "server" / "evennia.db3"
    snapshot = game.path.parent / "before-record.db3"

    async def compact_with_snapshot():
        admin, player = await _summary_pending(game, llm, 0)
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as source, \
                sqlite3.connect(snapshot) as copy:
            source.backup(copy)
        await _talk(player, "a line said while the summary was pending")
        llm.script.release()
        await admin.read_until(r"Compacted Marta", timeout=HANG_GUARD)
        await player.close(quit=False)
        await admin.close(quit=False)

    asyncio.run(compact_with_snapshot())
    record = [r for r in _archive_records(game) if r["kind"] == "compaction"][-1]
    game.kill("server")
    game.kill("portal")
    for suffix in ("-journal", "-wal", "-shm"):
        (db.parent / (db.name + suffix)).unlink(missing_ok=True)
    shutil.copyfile(snapshot, db)  # the database as it was before the compaction record
    game.start(timeout=240)
    state = asyncio.run(_check_consistent(game))

    # the compaction was replayed from the archive, once, with its journal entry recovered
    assert [s[0] for s in state["summaries"]] == [record["marker"]["id"]]
    assert state["journal"].count(record["marker"]["id"]) == 1
    assert state["messages"][-2]["content"] == "a line said while the summary was pending"
    assert state["raw"][state["messages"][-2]["seq"]][1]
    asyncio.run(_conversation(game, ["one more ale, please"]))
    # the compaction the database never heard of is counted and dated like any other
    _assert_counted(asyncio.run(_check_consistent(game)))
