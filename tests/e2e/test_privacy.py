"""
End to end: summaries by audience and forgetting a player, in the real game from
``game_template/`` with players over real telnet and an LLM double on 127.0.0.1 whose summaries
keep every secret they are shown (``docs/design.md``, "Summaries by audience", "Forgetting a
player"):

1. Wren and Tamsin talk with Marta; Wren tells her a secret alone; a compaction runs. The
   summary is written from the lines both heard, and Tamsin's next reply prompt carries it,
   without the secret (before, the summary could be read by Wren alone, and Tamsin's prompt
   had no summary at all).
2. Staff make Marta forget Wren (``aiforget``): the secret, which Wren alone got back before,
   is gone from what Marta recalls for Wren, also after a ``kill -9`` and a restart, while
   Tamsin's lines stay.
"""

import pytest

from tests.support.e2e_util import close_all, fail_with_logs, game_fixtures, logged_in_admin
from tests.support.e2e_util import scenario_test
from tests.support.llm_double import CountingModel, prompt_text, request_kind
from tests.support.tavern_e2e import NPC, PLAYERS
from tests.support.tavern_e2e import archive as _archive
from tests.support.tavern_e2e import go as _go
from tests.support.tavern_e2e import player as _player
from tests.support.tavern_e2e import py as _py
from tests.support.tavern_e2e import say as _say
from tests.support.tavern_e2e import wait_idle as _wait_idle
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SECRET = "behind the blue barrel"
SECRET_LINE = f"Keep this between us, Marta: the ledger is hidden {SECRET}."
SUMMARY = "Wren and Tamsin talked about the ford and the mill."
ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_SLEEP_AFTER_IDLE": "0",
    "AI_MAX_CONTEXT_TOKENS": "6000",  # no compaction but the one the test asks for
    "AI_COMPACT_PRESERVE_WINDOW": "2",
    "AI_COMPACT_PRESERVE_FRACTION": "0",
    "AI_LLM_TIMEOUT": "120",
}


class IndiscreetSummariser(CountingModel):
    """Summaries repeat any secret they are shown; extraction records nothing; replies say
    ``Aye (n).``"""

    def summarise(self, body):
        told = f" Wren said the ledger is {SECRET}." if SECRET in prompt_text(body) else ""
        return SUMMARY + told


llm, game = game_fixtures("e2e-privacy", ENV, IndiscreetSummariser, players=PLAYERS)


def _asked(llm, since, kind):
    return [prompt_text(body) for body in llm.requests[since:] if request_kind(body) == kind]


@scenario_test
async def test_a_secret_told_alone_leaves_the_shared_summary_to_everyone(game, llm):
    wren, tamsin = await _player(game, 0), await _player(game, 1)
    admin = await logged_in_admin(game)
    try:
        await _go(wren, "tavern")
        await _go(tamsin, "tavern")
        for i in range(3):
            await _say(wren, f"Talk {i}: the ford is high and the mill wheel creaks, Marta.")
            await _say(tamsin, f"Talk {i}: aye, the ford and the mill, Marta, every spring.")
        await _go(tamsin, "out")
        await _say(wren, SECRET_LINE)
        await _go(tamsin, "tavern")
        for i in range(3, 5):
            await _say(tamsin, f"Talk {i}: the mill and the ford again, Marta.")
        await _wait_idle(admin)
        before = len(llm.requests)
        await admin.command(f"compact/force {NPC}", quiet=1.0)
        await _wait_idle(admin)
        compactions = [r for r in _archive(game) if r["kind"] == "compaction"]
        if not compactions:
            fail_with_logs(game, "no compaction ran")
        summaries = _asked(llm, before, "summary")
        assert summaries and all(SECRET not in text for text in summaries), summaries
        assert any("Talk 1: aye, the ford and the mill" in text for text in summaries), summaries
        both = sorted([(await _py(admin, f"[me.search('{name}', global_search=True).dbref]"))[0]
                       for name in ("Wren", "Tamsin")])
        meta = compactions[-1]["marker"]["metadata"]
        assert meta["audience"] == both, meta
        secret_seq = next(r["seq"] for r in _archive(game) if r["kind"] == "message"
                          and SECRET in (r["msg"].get("content") or "")
                          and r["msg"]["role"] == "user")
        assert secret_seq in meta["left_out_seqs"], meta

        # Tamsin's next reply prompt carries the summary of what both heard, not the secret
        before = len(llm.requests)
        await _say(tamsin, "Marta, what have we been talking about tonight?")
        replies = _asked(llm, before, "reply")
        assert replies, "no reply request for Tamsin"
        assert any(SUMMARY in text for text in replies), replies
        assert all(SECRET not in text for text in replies), replies
        shown = await admin.command(f"aihistory {NPC}", quiet=1.0)
        assert "line(s) left out" in " ".join(shown.split()), shown
    finally:
        await close_all(wren, tamsin, admin)


@scenario_test
async def test_a_forgotten_player_stays_forgotten_after_a_kill(game, llm):
    wren, admin = await _player(game, 0), await logged_in_admin(game)
    question = "Marta, do you remember where my ledger is hidden?"
    try:
        await _go(wren, "tavern")
        await _wait_idle(admin)
        # control: Wren alone gets the secret back from the archive (hidden from others,
        # not forgotten)
        before = len(llm.requests)
        await _say(wren, question)
        assert any(SECRET in text for text in _asked(llm, before, "reply")), \
            _asked(llm, before, "reply")
        await _wait_idle(admin)
        wren_ref = (await _py(admin, "[me.search('Wren', global_search=True).dbref]"))[0]
        tamsin_ref = (await _py(admin, "[me.search('Tamsin', global_search=True).dbref]"))[0]
        _, said = await admin.expect(f"aiforget/confirm {NPC} = Wren", rf"{NPC} forgot Wren",
                                     timeout=HANG_GUARD)
        said += await admin.read_quiet(quiet=0.5, timeout=5)
        assert "summaries made from them" in said, said
        forgets = [r for r in _archive(game) if r["kind"] == "forget"]
        assert forgets and forgets[-1]["player"] == wren_ref, forgets
        await wren.close(quit=False)
        await admin.close()

        game.kill("server")
        offset = game.log_size("server")
        game.evennia("start", timeout=120)
        if not game.wait_for_log(r"ai_contrib: using the LLM server at", offset=offset,
                                 timeout=HANG_GUARD):
            pytest.fail("server did not come back after kill -9:\n" + game.log_tail("server"))
        wren, admin = await _player(game, 0), await logged_in_admin(game)
        speakers = await _py(admin, f"[(m.get('metadata') or {{}}).get('speaker') for m in "
                                    f"me.search('{NPC}', global_search=True).scripts.all()[0]"
                                    ".history]")
        assert wren_ref not in speakers, speakers
        assert tamsin_ref in speakers, speakers  # control: Tamsin's lines stay
        await _go(wren, "tavern")
        before = len(llm.requests)
        await _say(wren, question)
        replies = _asked(llm, before, "reply")
        assert replies and all(SECRET not in text for text in replies), replies
    finally:
        await close_all(wren, admin)
