"""
End to end, the promises of privacy, staff changes, the journal, a room of NPCs and the
server's fields, kept in one real game from ``game_template/``: players and an
admin over real telnet, three AI NPCs (Marta and Tobin in the tavern, Bram at the North Gate,
all of the zone ``crossroads``) and an LLM double on 127.0.0.1 that refuses every request field
OpenAI's API does not know with HTTP 400, as OpenAI's API does. The double repeats what it is
told, merges what it saw into one fact, journals the NPC's own babble, and records every
request: the prompts the game built. Each check asserts on other NPCs' journals, Mem0 memories
and reply prompts, with a positive control beside each negative one.

Item -> test (``docs/design.md``: "Privacy by audience", "Gossip", "Lore and pins", "Facts
players said", "A room of NPCs", "Pre-compaction fact extraction", "Sampling per server and
model"):

1. a whisper never leaves through an NPC that overhears the reply:
   :func:`test_what_was_said_in_private_never_leaves_and_public_lines_travel` (Marta's echo of the
   password is murmured; Tobin's and Bram's journals, Mem0 and prompts never hold it; the public
   lines reach both; Marta, asleep again once they hold her facts, hears Tobin's fair from them
   and none of her own facts back);
2. a fact merging a private detail into a public line stays private: the same test (the double
   merges the two ledger lines into one fact citing the public one; it is stored for Wren, not
   Tamsin, while the public ledger fact is stored for both; Bram's journal, Mem0 and prompts and
   Marta's prompt for Wren and Tamsin have the public part only, while her prompt for Wren alone
   recalls the merged fact);
3. ``aigossip/erase`` leaves the next prompt: :func:`test_an_erased_fact_leaves_the_next_prompt`;
4. lore staff withdraw leaves the next prompt:
   :func:`test_lore_withdrawn_by_staff_leaves_the_next_prompt` (a condition change, a
   deletion and Marta walking out of the tavern, the drinks lore's ``location:``; an untouched
   entry is still carried over);
5. keyed lore reaches a new set of listeners:
   :func:`test_keyed_lore_reaches_a_new_set_of_listeners`;
6. regex-looking lore keys are refused, plain keys accepted:
   :func:`test_a_lore_key_that_looks_like_a_pattern_is_refused`;
7. the journal holds what players said, not the NPC's babble: the test of items 1 and 2
   (Marta's own line stated as a fact is in no journal; Wren's line about herself is);
8. a room of NPCs: :func:`test_a_room_of_npcs_answers_like_a_room` (the NPC named in the
   vocative answers, the one only mentioned does not; NPCs that spoke are in each other's
   people records; ``aireset`` names and removes them). The reply bound and the unnamed
   follow-up are ``tests/e2e/test_village.py``'s, no NPC-to-NPC reply asked for while a
   player's line waits ``tests/shell/test_village.py``'s;
9. ``compact/force`` journals the facts of what it replaces first:
   :func:`test_compact_force_extracts_facts_before_it_summarises` (and not the mill fact
   erased in item 3, proposed again from Wren's line in Marta's context); a line heard while
   a reply's retrieval waits is no memory:
   :func:`test_a_line_heard_while_the_reply_waits_for_its_memory_is_no_memory` (the admin's
   ``py`` holds Marta's memory thread with one background job, so her reply's search waits
   behind it; Tamsin speaks of the same ferry meanwhile; the note recalls the ferry lines
   item 10's compaction archived, not Tamsin's);
10. no reply prompt over its budget while a summary hangs:
    :func:`test_no_reply_prompt_exceeds_its_budget_while_a_summary_hangs` (the admin sets
    Marta's budget small and her strategy to ``summary`` with ``aiconfig``; the double holds her
    compaction's summary open while Wren and Tamsin go on talking; every reply's history is
    within the budget, asked while the summary was open and her stored history over it);
11. replies, extraction and summaries against a server that refuses unknown fields:
    :func:`test_a_server_refusing_unknown_fields_gets_only_openai_fields` (every request of the
    whole module held only OpenAI's fields; the double does refuse ``repeat_penalty``; the
    embedded model's profile carries it).

The tests share the game and run in this order (each reads what the ones before it made).
"""

import asyncio
import itertools
import json
import re
import threading
import time
import urllib.error
import urllib.request

import pytest

from ai_contrib.core.prompts import EXPERIENCES_HEADING, MEMORIES_HEADING
from ai_contrib.llm.sampling import LLAMA_CPP, sampling_fields
from tests.support.e2e_util import (
    archive_records,
    ask,
    close_all,
    fail_with_logs,
    game_fixtures,
    logged_in,
    logged_in_admin,
    rows_with,
    run_scenario,
    table_rows,
)
from tests.support.gossip_e2e import cited, npc_of, sleep_until_journaled
from tests.support.llm_double import (
    OPENAI_CHAT_FIELDS,
    OPENAI_COMPLETION_FIELDS,
    prompt_text,
    request_kind,
    tool_calls,
)
from tests.support.tavern_e2e import wait_idle
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

PLAYERS = {"Wren": "wren-pw-4571", "Tamsin": "tamsin-pw-8832"}
TOBIN_PERSONA = ("You are Tobin, a carter drinking at The Sleeping Stag. You answer in one "
                 "short sentence.")

MILL_LINE = "Did you hear? The old mill by the ford burned down last night."
MILL_FACT = "The old mill by the ford burned down last night."
LEDGER_LINE = "The guild ledger is bound in red leather with brass clasps."
LEDGER_FACT = "The guild ledger is bound in red leather with brass clasps."
CELLAR_LINE = "And the guild ledger hides in the cellar, under the cider barrels."
#: the two ledger lines as one fact: the public line's words and the private place, a fact
#: of its own (``core.fidelity.same_fact``: not the public one again), so that it is stored
MERGED_FACT = "The guild ledger in red leather hides in the cellar under the cider barrels."
PASSWORD_LINE = "The back door password is heron-gate."
PASSWORD_FACT = "The back door password is heron-gate."
PASSWORD_ECHO = "Heron-gate, aye, I will keep the back door password to myself."
WEAVER_LINE = "I'm Wren, a weaver from Eastwick, Marta."
WEAVER_FACT = "Wren is a weaver from Eastwick."
BABBLE = "Awesome night you did (laughs), the moon over Eastwick is made of green cheese."
BABBLE_FACT = "The moon over Eastwick is made of green cheese."
FAIR_LINE = "The harvest fair opens on the village green next week, Marta."
FAIR_FACT = "The harvest fair opens on the village green next week."
HORSE_LINE = "My mare is called Bramble and she is nine years old, Marta."
HORSE_FACT = "Wren's mare Bramble is nine years old."
#: words of the private lines, none of which may reach anyone outside their audience
PASSWORD_WORDS = ("heron", "back door")
CELLAR_WORDS = ("cellar", "cider barrels")
BABBLE_WORDS = ("green cheese",)

GRIFFIN = "The griffin of Hollin crag nests above the quarry and takes a goat each spring."
MOONWELL = "The moonwell behind the chapel is dry since the old priest died."
WYVERN = "A wyvern was last seen over the salt marsh forty years ago."
#: the template's lore entry ``stag-drinks`` (``location:The Sleeping Stag``)
DRINKS = "A mug of ale is 2 copper"
SUMMARY = "Patrons talked about the ford, the mill and the harvest."

ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_SLEEP_AFTER_IDLE": "0",  # the NPCs sleep when the admin says so...
    "AI_SLEEP_DURATION": "0",  # ...and wake when the admin says so
    "AI_LLM_TIMEOUT": "120",
    "AI_THINKING_EMOTE_AFTER": "0",
    "AI_NPC_REPLY_DEPTH": "1",
    "AI_NPC_REPLY_COOLDOWN": "0",
    "AI_COMPACT_PRESERVE_WINDOW": "2",  # compact/force has lines to replace
    "AI_COMPACT_PRESERVE_FRACTION": "0",
}
SAYS = r'(?:says, |leans in and murmurs to [^:\n]+: )"([^"\n]+)"'
TELEPORTED = r"Teleported[^\n]*|Could not find[^\n]*|[^\n]*(?:blocks|already at)[^\n]*"
MEM0_FOUND = r"Memories of \w+ for|remembers nothing|search failed"


class PromiseModel:
    """
    The double's model. Replies: the password echoed when the turn holds it, the babble when
    the turn is Wren's line about herself, else ``lines[npc]`` or ``"Aye (n)."``; each reply is
    kept with its text and NPC in :attr:`replied`. Extraction: one fact per told line, citing
    it, the ledger's lines merged into one fact citing only the public one when both are
    shown, and Marta's babble as a fact of importance 10; Tobin journals no mill and Marta no
    fair, so each hears that one from the other. Summaries:
    :data:`SUMMARY`, held open between :meth:`hold_summaries` and :meth:`release`.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.count = itertools.count(1)
        self.lines = {}
        self.replied = []
        self.summary_gate = threading.Event()
        self.summary_gate.set()
        self.summary_asked = threading.Event()
        self.summaries_open = 0

    def __call__(self, body):
        kind = request_kind(body)
        if kind == "summary":
            return self.summarise()
        if kind == "extraction":
            return self.extract(body)
        return self.answer(body)

    def answer(self, body):
        users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
        turn = str(users[-1].get("content") or "") if users else ""
        name = npc_of(body)
        with self.lock:
            if "heron-gate" in turn:
                text = PASSWORD_ECHO
            elif "weaver from Eastwick" in turn:
                text = BABBLE
            else:
                text = self.lines.get(name, "Aye ({n}).").format(n=next(self.count))
            self.replied.append((name, text, body, self.summaries_open))
        return text

    def summarise(self):
        """:data:`SUMMARY`, once :attr:`summary_gate` is set (held open while it is clear)."""
        with self.lock:
            self.summaries_open += 1
        self.summary_asked.set()
        try:
            self.summary_gate.wait(HANG_GUARD)
            return SUMMARY
        finally:
            with self.lock:
                self.summaries_open -= 1

    def hold_summaries(self):
        """Hold the next summary requests open until :meth:`release`."""
        self.summary_asked.clear()
        self.summary_gate.clear()

    def release(self):
        """Let held summary requests (and later ones) answer."""
        self.summary_gate.set()

    def extract(self, body):
        if any(m.get("role") == "tool" for m in body.get("messages") or []):
            return tool_calls([("noop", {})])
        facts = [("heron-gate", PASSWORD_FACT, 9), ("weaver from Eastwick", WEAVER_FACT, 6),
                 ("green cheese", BABBLE_FACT, 10), ("Bramble", HORSE_FACT, 6)]
        if npc_of(body) != "Tobin":
            facts.append(("old mill", MILL_FACT, 7))
        if npc_of(body) != "Marta":
            facts.append(("harvest fair", FAIR_FACT, 6))
        merged = cited(body, "hides in the cellar") is not None
        facts.append(("red leather", MERGED_FACT if merged else LEDGER_FACT, 8))
        calls = [("add_journal_entry", {"content": fact, "importance": importance,
                                        "source": [cited(body, words)]})
                 for words, fact, importance in facts if cited(body, words) is not None]
        return tool_calls(calls or [("noop", {})])


async def _prepare(game):
    """Tobin, a second AI NPC, drinks in the tavern."""
    admin = await logged_in_admin(game)
    try:
        _, made = await admin.expect(
            "py from evennia.utils.create import create_object; "
            "from ai_contrib.typeclasses import AssistantCharacter; "
            "n = create_object(AssistantCharacter, key='Tobin', "
            "location=me.search('The Sleeping Stag', global_search=True)); "
            f"n.db.persona = {TOBIN_PERSONA!r}; print('MADE=' + n.dbref)",
            r"MADE=#\d+|Error[^\n]*|Traceback[^\n]*", timeout=HANG_GUARD)
        assert "MADE=#" in made, made
    finally:
        await admin.close()


llm, game = game_fixtures("e2e-promises", ENV, PromiseModel, players=PLAYERS.items(),
                          prepare=_prepare, timeout=HANG_GUARD,
                          release=PromiseModel.release, double={"strict": True})


def text_of(body):
    return prompt_text(body)


async def _player(game, name):
    return await logged_in(game, name, name, PLAYERS[name])


async def _walk(player, *steps):
    for step in steps:
        await player.command(step, quiet=0.5)


async def _talk(game, llm, player, npc, text, private=False):
    """
    ``talk[/private] <npc> = <text>``; wait until ``player`` hears the NPC say (or murmur) the
    reply the double wrote for it. Returns ``(said, body)``: the words and the reply request.
    """
    before = len(llm.model.replied)
    player.send(f"talk{'/private' if private else ''} {npc} = {text}")
    return await _answer(game, llm, player, npc, text, before)


async def _answer(game, llm, player, npc, text, before):
    """Wait until ``player`` hears ``npc`` say the reply the double wrote for it after its
    ``before``-th reply; ``(said, body)`` as :func:`_talk`'s."""
    model = llm.model
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        match, _ = await player.read_until(rf"{npc} {SAYS}", timeout=HANG_GUARD)
        if match is None:
            break
        said = match.group(1)
        mine = [body for name, reply, body, _ in model.replied[before:]
                if name == npc and _same_words(reply, said)]
        if mine:
            return said, mine[-1]
    fail_with_logs(game, f"{npc} did not answer {text!r}")


def _same_words(written, said):
    """True when ``said`` is the reply ``written`` as the room shows it (the game may trim a
    reply's end, never its start: "Aye (12)." never passes for "Aye (1).")."""
    written, said = written.strip(), said.strip()
    return written == said or (len(said) >= 12 and written.startswith(said[:12]))


async def _journal(admin, npc):
    return await ask(admin, f"aihistory {npc}/journal", rf"Journal of {npc}|journal is empty")


async def _mem0(admin, npc, query):
    """The text of every memory ``aimemory/mem0`` lists (its table's rows)."""
    out = await ask(admin, f"aimemory/mem0 {npc} {query}", MEM0_FOUND, timeout=HANG_GUARD)
    return out, " ".join(" ".join(row) for row in table_rows(out))


async def _on_script(admin, npc, expression):
    """The value of ``expression`` over ``npc``'s script ``s``, read in the game (JSON)."""
    _, out = await admin.expect(
        "py import json; from evennia.utils.search import search_object as so; "
        "from ai_contrib.typeclasses import get_assistant_script as gs; "
        "from evennia.utils.dbserialize import deserialize; "
        f"s = gs(so('{npc}')[0]); print('VALUE=' + json.dumps(deserialize({expression})))",
        r"(?m)^VALUE=[^\n]*|Error[^\n]*|Traceback[^\n]*", timeout=HANG_GUARD)
    # the printed line, not the echoed command (which holds "VALUE=' + ...")
    found = re.search(r"(?m)^VALUE=([^\n]*)", out)
    assert found, out
    return json.loads(found.group(1))


def _for(llm, npc, since=0):
    """Every request of the double built for ``npc`` (replies, extraction, summaries)."""
    return [body for body in llm.requests[since:] if body and npc_of(body) == npc]


def _absent(words, text, what):
    for word in words:
        assert word not in text, f"{word!r} in {what}:\n{text}"


# -- items 1, 2, 7: private lines stay private, public ones travel, babble is no fact ----------


async def _privacy_round(game, llm):
    out = {}
    wren, tamsin = await _player(game, "Wren"), await _player(game, "Tamsin")
    admin = await logged_in_admin(game)
    try:
        await _walk(wren, "tavern")
        await _walk(tamsin, "tavern")
        # in public, both players and Tobin listening
        for line in (MILL_LINE, LEDGER_LINE, WEAVER_LINE, FAIR_LINE):
            await _talk(game, llm, wren, "Marta", line)
        await _walk(tamsin, "out")
        # Wren alone with Marta and Tobin: a whisper the model repeats, then the ledger's place
        out["echo"] = (await _talk(game, llm, wren, "Marta", PASSWORD_LINE, private=True))[0]
        await _talk(game, llm, wren, "Marta", CELLAR_LINE)
        await _talk(game, llm, wren, "Marta", "A mug of your dark ale, please.")

        for npc, facts in (("Marta", ("old mill", "red leather", "cellar", "heron-gate",
                                      "weaver")),
                           ("Tobin", ("old mill", "red leather", "harvest fair")),
                           ("Bram", ("old mill", "red leather", "harvest fair")),
                           # again, once the others hold her facts: the fair is Tobin's
                           ("Marta", ("harvest fair",))):
            deadline = time.monotonic() + HANG_GUARD
            out[npc.lower()] = await sleep_until_journaled(admin, npc, facts, deadline)
        for npc in ("Tobin", "Bram"):
            out[f"{npc}_mem0"] = await _mem0(admin, npc, "back door password cellar ledger")
        out["audiences"] = await _on_script(
            admin, "Marta", "{'tamsin': so('Tamsin')[0].dbref, 'wren': so('Wren')[0].dbref, "
                            "'facts': [(e['content'], e.get('audience')) for e in "
                            "s.obj.db.journal['entries']]}")

        # Marta's prompts: for Wren alone the ledger's place is there; with Tamsin back, not
        _, out["for_wren"] = await _talk(game, llm, wren, "Marta",
                                         "Marta, where does the guild ledger hide?")
        await _walk(tamsin, "tavern")
        _, out["for_both"] = await _talk(game, llm, tamsin, "Marta",
                                         "Marta, where is the guild ledger kept these days?")
    finally:
        await close_all(wren, tamsin, admin)
    return out


def test_what_was_said_in_private_never_leaves_and_public_lines_travel(game, llm):
    out = run_scenario(game, _privacy_round(game, llm))
    marta, tobin, bram = out["marta"], out["tobin"], out["bram"]
    # the model did repeat the password: the reply was murmured to Wren, never said aloud
    assert "heron-gate" in out["echo"].lower(), out["echo"]
    echo = [r for r in _reply_records(game, "Marta") if "Heron-gate" in r["content"]]
    assert echo and echo[-1]["murmured"], echo
    # Marta journaled every fact, the private ones too (item 1, 2 controls)
    for words in ("old mill", "red leather", "heron-gate", "cellar"):
        if not rows_with(marta, words):
            fail_with_logs(game, f"Marta did not journal {words!r}:\n{marta}")
    # item 2: the double wrote the ledger's two lines as one fact citing the public line only;
    # it is stored for those who heard both (Wren, not Tamsin), the public one for both
    audiences = {content: audience for content, audience in out["audiences"]["facts"]}
    tamsin, wren = out["audiences"]["tamsin"], out["audiences"]["wren"]
    merged = [audience for content, audience in audiences.items() if "cellar" in content]
    assert merged and all(wren in a and tamsin not in a for a in merged), audiences
    public = [audience for content, audience in audiences.items()
              if "red leather" in content and "cellar" not in content]
    assert public and all({wren, tamsin} <= set(a) for a in public), audiences
    # item 7: what Wren said of herself is journaled; Marta's own babble is no fact
    assert rows_with(marta, "weaver from Eastwick"), marta
    for journal, who in ((marta, "Marta"), (tobin, "Tobin"), (bram, "Bram")):
        _absent(BABBLE_WORDS, journal, f"{who}'s journal")
    # item 1: Marta's second sleep heard the fair from Tobin, and none of her own facts back
    fair = rows_with(marta, "harvest fair")
    assert fair and fair[0][3].startswith("Wren > Tobin"), marta
    assert not [row for row in table_rows(marta) if "Marta" in row[3]], marta

    # the public lines travel: Tobin heard them, Bram heard them by gossip (positive control)
    assert rows_with(tobin, "red leather") and rows_with(tobin, "old mill"), tobin
    mill = rows_with(bram, "old mill")
    assert mill and mill[0][3].startswith("Wren > "), bram
    ledger = rows_with(bram, "red leather")
    assert ledger and ledger[0][4] == "yes", bram
    # nothing private reached Tobin (the password) or Bram (the password, the cellar)
    _absent(PASSWORD_WORDS, tobin, "Tobin's journal")
    _absent(PASSWORD_WORDS + CELLAR_WORDS, bram, "Bram's journal")
    for npc, words in (("Tobin", PASSWORD_WORDS), ("Bram", PASSWORD_WORDS + CELLAR_WORDS)):
        listing, memories = out[f"{npc}_mem0"]
        assert "red leather" in memories, listing  # every memory is listed: the control
        _absent(words + BABBLE_WORDS, memories, f"{npc}'s Mem0")
        for body in _for(llm, npc):  # (Tobin heard the babble said aloud: his to read)
            _absent(words, text_of(body), f"a request built for {npc}")

    # item 2: Marta's prompt for Wren alone holds the merged fact; for Wren and Tamsin it holds
    # the public part only
    assert MERGED_FACT in text_of(out["for_wren"]), text_of(out["for_wren"])
    both = text_of(out["for_both"])
    assert "red leather" in both, both
    _absent(CELLAR_WORDS + PASSWORD_WORDS, both, "Marta's prompt for Wren and Tamsin")


def _reply_records(game, npc):
    """Marta's stored replies as ``{"content", "murmured"}`` (her archive)."""
    assert npc == "Marta"
    return [{"content": r["msg"].get("content") or "",
             "murmured": bool((r["msg"].get("metadata") or {}).get("murmured"))}
            for r in archive_records(game)
            if r["kind"] == "message" and r["msg"].get("role") == "assistant"]


# -- item 3: an erased fact leaves the next prompt --------------------------------------------


async def _erase_round(game, llm):
    out = {}
    wren, admin = await _player(game, "Wren"), await logged_in_admin(game)
    try:
        await _walk(wren, "out", "gate")
        _, out["before"] = await _talk(game, llm, wren, "Bram",
                                       "Bram, any news of the old mill by the ford?")
        marta = await _journal(admin, "Marta")
        fact_id = rows_with(marta, "old mill")[0][0]
        out["erase"] = await ask(admin, f"aigossip/erase Marta = {fact_id}", r"Erased fact",
                                 timeout=HANG_GUARD)
        _, out["after"] = await _talk(game, llm, wren, "Bram",
                                      "Tell me again, Bram, what of the old mill by the ford?")
        out["bram"] = await _journal(admin, "Bram")
        out["mem0"] = await _mem0(admin, "Bram", "old mill ford burned")
        await _walk(wren, "crossroads")
    finally:
        await close_all(wren, admin)
    return out


def test_an_erased_fact_leaves_the_next_prompt(game, llm):
    out = run_scenario(game, _erase_round(game, llm))
    before, after = text_of(out["before"]), text_of(out["after"])
    # the control: before the erase, Bram's prompt recalls what he heard
    assert re.search(r"you heard from \w+ that The old mill by the ford burned down", before), \
        before
    assert "journal(s)" in out["erase"], out["erase"]
    assert "burned down" not in after, after
    assert "old mill" not in out["bram"], out["bram"]
    assert "red leather" in out["bram"], out["bram"]  # the erase took that fact only
    listing, memories = out["mem0"]
    assert "burned down" not in memories, listing


# -- items 6, 5, 4: lore keys, listeners, withdrawn lore --------------------------------------


async def _add_lore(admin, keys, text):
    added = await ask(admin, f"ailore/add {keys} = {text}",
                      r"Added lore entry \S+|not a plain word[^\n]*|Usage[^\n]*|key [^\n]*")
    return added


def test_a_lore_key_that_looks_like_a_pattern_is_refused(game, llm):
    async def scenario():
        admin = await logged_in_admin(game)
        try:
            refused = [await _add_lore(admin, key, "The pattern lore says nothing at all.")
                       for key in ("(a+)+$", "^griffin$", "a{1,99999}")]
            plain = await _add_lore(admin, "griffin", GRIFFIN)
            listing = await ask(admin, "ailore", r"Lore\W*: \d+ entries")
        finally:
            await admin.close()
        return refused, plain, listing

    refused, plain, listing = run_scenario(game, scenario())
    for answer in refused:
        assert "is not a plain word or phrase" in " ".join(answer.split()), answer
    assert "pattern lore" not in listing, listing
    assert "Added lore entry" in plain, plain  # the control: a plain key is taken
    assert "griffin" in listing, listing


def _lore_id(listing, words):
    rows = rows_with(listing, words)
    assert rows, listing
    return rows[0][0]


def test_keyed_lore_reaches_a_new_set_of_listeners(game, llm):
    async def scenario():
        wren, tamsin = await _player(game, "Wren"), await _player(game, "Tamsin")
        try:
            await _walk(tamsin, "out")
            await _walk(wren, "tavern")
            _, alone = await _talk(game, llm, wren, "Marta", "Marta, have you ever seen a griffin?")
            await _walk(tamsin, "tavern")
            _, both = await _talk(game, llm, tamsin, "Marta",
                                  "Marta, tell me about the griffin as well.")
        finally:
            await close_all(wren, tamsin)
        return alone, both

    alone, both = run_scenario(game, scenario())
    assert GRIFFIN in text_of(alone), text_of(alone)  # the control: shown to Wren alone
    assert GRIFFIN in text_of(both), text_of(both)  # and again to Wren and Tamsin
    # the prompt is Wren's and Tamsin's: Wren's line said without Tamsin is not in it
    assert "have you ever seen a griffin" not in text_of(both), text_of(both)


async def _moved_out(game, llm, wren, admin):
    """Marta walks out of the tavern (the drinks lore's ``location:`` condition) and Wren
    follows; her next prompt, and its receipt; both go back in."""
    moved = await ask(admin, "tel Marta = Limbo", TELEPORTED)
    assert "Teleported" in moved, moved
    await _walk(wren, "out")
    _, prompt = await _talk(game, llm, wren, "Marta", "It is cold out here, Marta.")
    receipt = await _on_script(admin, "Marta", "s.db.reply_receipts[-1]")
    back = await ask(admin, "tel Marta = The Sleeping Stag", TELEPORTED)
    assert "Teleported" in back, back
    await _walk(wren, "tavern")
    return prompt, receipt


def _skipped(receipt):
    return {item["key"]: item["reason"] for item in receipt.get("world_skipped") or []}


def test_lore_withdrawn_by_staff_leaves_the_next_prompt(game, llm):
    async def scenario():
        wren, admin = await _player(game, "Wren"), await logged_in_admin(game)
        try:
            for keys, text in (("moonwell", MOONWELL), ("wyvern", WYVERN)):
                assert "Added lore entry" in await _add_lore(admin, keys, text)
            listing = await ask(admin, "ailore", r"Lore\W*: \d+ entries")
            ids = {name: _lore_id(listing, name) for name in ("griffin", "moonwell", "wyvern")}
            await _walk(wren, "tavern")
            _, shown = await _talk(game, llm, wren, "Marta",
                                   "Marta, what of the wyvern and the moonwell? And ale prices?")
            changed = await ask(admin, f"ailore/set {ids['griffin']}/condition = npc:Petra",
                                r"Changed lore entry[^\n]*|No lore[^\n]*|Fields[^\n]*")
            deleted = await ask(admin, f"ailore/del {ids['moonwell']}",
                                r"Deleted lore entry[^\n]*|No lore[^\n]*")
            _, after = await _talk(game, llm, wren, "Marta", "The fire is warm tonight, Marta.")
            receipt = await _on_script(admin, "Marta", "s.db.reply_receipts[-1]")
            moved, moved_receipt = await _moved_out(game, llm, wren, admin)
        finally:
            await close_all(wren, admin)
        return ids, shown, (changed, deleted), after, receipt, moved, moved_receipt

    ids, shown, (changed, deleted), after, receipt, moved, moved_receipt = run_scenario(
        game, scenario())
    # the control: all in the prompt before (the griffin carried over from its line)
    for entry in (GRIFFIN, MOONWELL, WYVERN, DRINKS):
        assert entry in text_of(shown), text_of(shown)
    assert "Changed lore entry" in changed and "Deleted lore entry" in deleted, (changed, deleted)
    assert GRIFFIN not in text_of(after) and MOONWELL not in text_of(after), text_of(after)
    # untouched: still carried over
    assert WYVERN in text_of(after) and DRINKS in text_of(after), text_of(after)
    assert _skipped(receipt).get(f"lore:{ids['griffin']}") == "condition", _skipped(receipt)
    assert _skipped(receipt).get(f"lore:{ids['moonwell']}") == "deleted", _skipped(receipt)
    # out of the tavern, Marta no longer knows its prices
    assert DRINKS not in text_of(moved), text_of(moved)
    assert _skipped(moved_receipt).get("lore:stag-drinks") == "condition", \
        _skipped(moved_receipt)


# -- item 8: a room of NPCs --------------------------------------------------------------------


async def _addressed(admin, text):
    """``{npc: [addressed, ...]}`` for the stored copies of the line ``text``."""
    return {npc: await _on_script(admin, npc, f"[m['metadata'].get('addressed') for m in "
                                              f"s.history if m['content'] == {text!r}]")
            for npc in ("Marta", "Tobin")}


def test_a_room_of_npcs_answers_like_a_room(game, llm):
    question = "Marta, is Tobin always this talkative?"
    nudge = "Marta, does Tobin ever stop talking?"

    async def scenario():
        out = {}
        tamsin, admin = await _player(game, "Tamsin"), await logged_in_admin(game)
        try:
            await _walk(tamsin, "tavern")
            llm.model.lines.clear()
            await _talk(game, llm, tamsin, "Marta", question)
            out["question"] = await _addressed(admin, question)
            # Marta turns to Tobin, who answers her (the reply depth is 1)
            llm.model.lines["Marta"] = "Tobin, tell them yourself! ({n})"
            llm.model.lines["Tobin"] = "Marta, I talk no more than the next carter. ({n})"
            await _talk(game, llm, tamsin, "Marta", nudge)
            match, _ = await tamsin.read_until(rf"Tobin {SAYS}", timeout=HANG_GUARD)
            assert match, "Tobin did not answer Marta"
            out["tobin_line"] = match.group(1)
            llm.model.lines.clear()
            out["last"] = await _addressed(admin, out["tobin_line"])
            out["people"] = {npc: await ask(admin, f"aihistory {npc}/people",
                                            rf"People {npc} has met|has not spoken")
                             for npc in ("Marta", "Tobin")}
            out["preview"] = await ask(admin, "aireset Tobin", r"This removes from Tobin")
            out["reset"] = await ask(admin, "aireset/confirm Tobin", r"Reset Tobin: [^\n]*",
                                     timeout=HANG_GUARD)
            out["after"] = await ask(admin, "aihistory Tobin/people",
                                     r"People Tobin has met|has not spoken")
        finally:
            await close_all(tamsin, admin)
        return out

    out = run_scenario(game, scenario())
    # named in the vocative, Marta answered; Tobin, only mentioned, heard it as not his
    assert out["question"] == {"Marta": [True], "Tobin": [False]}, out["question"]
    # the bound: Tobin's answer to Marta is the last reply (depth 1), not Marta's to take
    assert out["last"]["Marta"] == [False], out["last"]
    # NPCs that spoke are in each other's people records, beside the players they spoke with
    assert rows_with(out["people"]["Marta"], "Tobin"), out["people"]["Marta"]
    assert rows_with(out["people"]["Marta"], "Tamsin"), out["people"]["Marta"]
    assert rows_with(out["people"]["Tobin"], "Marta"), out["people"]["Tobin"]
    # aireset names whom Tobin met and removes the records
    assert "whom it met" in out["preview"] and "Marta" in out["preview"], out["preview"]
    assert "Tobin has not spoken with anyone yet" in out["after"], out["after"]


# -- item 9: compact/force journals what it replaces first ------------------------------------


def test_compact_force_extracts_facts_before_it_summarises(game, llm):
    async def scenario():
        wren, admin = await _player(game, "Wren"), await logged_in_admin(game)
        try:
            await _walk(wren, "tavern")
            await _talk(game, llm, wren, "Marta", HORSE_LINE)
            # the mill fact staff erased from Marta (item 3) is in her context again
            for line in (MILL_LINE, "The road was muddy today, Marta.",
                         "Is the stew ready yet, Marta?"):
                await _talk(game, llm, wren, "Marta", line)
            await wait_idle(admin, timeout=HANG_GUARD)
            before = len(llm.requests)
            journal_before = await _journal(admin, "Marta")
            await ask(admin, "compact/force Marta", r"Compact|compact", timeout=HANG_GUARD)
            await wait_idle(admin, timeout=HANG_GUARD)
            journal = await _journal(admin, "Marta")
        finally:
            await close_all(wren, admin)
        return before, journal_before, journal

    before, journal_before, journal = run_scenario(game, scenario())
    # only Marta has memory work under way (a summary request names no NPC as its speaker)
    kinds = [request_kind(b) for b in llm.requests[before:] if b]
    assert "summary" in kinds, kinds  # the control: the compaction ran
    assert "extraction" in kinds and kinds.index("extraction") < kinds.index("summary"), kinds
    assert not rows_with(journal_before, "Bramble"), journal_before
    assert rows_with(journal, "Bramble"), journal
    # the same extraction proposed the erased mill fact again (the double journals what it
    # sees), and it was refused: Marta's next sleep has nothing of it to gossip
    asked = [b for b in _for(llm, "Marta", before) if request_kind(b) == "extraction"]
    assert any(cited(b, "old mill") is not None for b in asked), kinds
    assert not rows_with(journal, "old mill"), journal


# -- item 10: no reply prompt over its budget while a summary hangs ---------------------------

#: a line of about 60 tokens: five of them fill the small budget set below
FERRY_LINE = "the ferry to Eastport is late again and the miller blames the tide " * 4
#: the parts of a reply prompt that hold the conversation (``tests/shell/test_turns.py``)
HISTORY_PARTS = ("history", "turn", "summary")


def test_no_reply_prompt_exceeds_its_budget_while_a_summary_hangs(game, llm):
    # the summary is waited for however far the talk goes (npc.hurry would write an extract)
    settings = {"max_context_tokens": "300", "compact_strategy": "summary",
                "compact_preserve_window": "4", "pre_compact_extraction_enabled": "no",
                "compact_hurry": "no"}

    async def scenario():
        wren, tamsin = await _player(game, "Wren"), await _player(game, "Tamsin")
        admin = await logged_in_admin(game)
        out = {"turns": []}
        try:
            await _walk(wren, "tavern")
            await _walk(tamsin, "tavern")
            await wait_idle(admin, timeout=HANG_GUARD)
            # the summary item 9's compact/force left is larger than the small budget below,
            # and no compaction replaces a summary alone: Marta starts again from no history
            await ask(admin, "aireset Marta", r"This removes from Marta")
            await ask(admin, "aireset/confirm Marta", r"Reset Marta: [^\n]*", timeout=HANG_GUARD)
            llm.model.hold_summaries()
            for option, value in settings.items():  # as an admin would, over telnet
                said = await ask(admin, f"aiconfig Marta/{option}={value}",
                                 rf"{option} = [^\n]*|Unknown[^\n]*|[Uu]sage[^\n]*")
                assert f"{option} = " in said, said
            out["budget"] = await _on_script(admin, "Marta", "s.budget()")
            for i in range(5):
                await _talk(game, llm, wren, "Marta", f"Line {i}: {FERRY_LINE}")
            # the history is over the emergency threshold: its compaction asks for a summary
            if not await asyncio.to_thread(llm.model.summary_asked.wait, 60):
                fail_with_logs(game, "no summary asked of Marta's full history")
            for i in range(6):  # players keep talking while the summariser hangs
                player = tamsin if i % 2 else wren
                line = f"More talk {i}: {FERRY_LINE}"
                _, body = await _talk(game, llm, player, "Marta", line)
                receipt = await _on_script(admin, "Marta", "s.db.reply_receipts[-1]")
                state = await _on_script(admin, "Marta", "[s.token_usage(), "
                                         "s.ndb.memory_work is not None]")
                open_then = [o for _, _, b, o in llm.model.replied if b is body][0]
                out["turns"].append((line, body, receipt, state, open_then))
        finally:
            llm.model.release()
            try:
                await wait_idle(admin, timeout=HANG_GUARD)
                for option in settings:
                    await ask(admin, f"aiconfig/reset Marta/{option}", rf"{option}[^\n]*")
            finally:
                await close_all(wren, tamsin, admin)
        return out

    out = run_scenario(game, scenario())
    budget, shown = out["budget"], []
    for line, body, receipt, (usage, working), open_then in out["turns"]:
        assert line.split(":")[0] in text_of(body), text_of(body)  # the turn is always there
        # the controls: the summary was held open, and memory work under way, when the reply
        # was asked and read back
        assert open_then >= 1, (line, open_then)
        assert working, line
        shown.append(sum(int(p["tokens"]) for p in receipt["parts"]
                         if p["part"] in HISTORY_PARTS))
        out.setdefault("usage", []).append(usage)
    # the control: the stored history itself was over its budget while the summary hung
    assert max(out["usage"]) > 1.0, out["usage"]
    assert max(shown) <= budget, (shown, budget)
    # released, the compaction finished: a summary came back and the game went idle
    assert llm.model.summaries_open == 0


# -- item 9: a line heard while a reply's retrieval waits is no memory ------------------------

#: said in the room while Marta's reply to Wren waits for the memory thread (about the ferry
#: of item 10's lines, which its compaction took out of her context into the archive)
DAWN_LINE = "The ferry to Eastport leaves at dawn today, mark my words."
#: the admin's ``py``: one background job holds Marta's memory thread until released
HOLD_MEMORY_THREAD = (
    "import threading; from ai_contrib.memory.mem0_store import get_store; "
    "from evennia.utils.search import search_object as so; m = so('Marta')[0]; "
    "m.ndb.memory_released, m.ndb.memory_held = threading.Event(), threading.Event(); "
    "get_store().run_background(lambda r=m.ndb.memory_released, h=m.ndb.memory_held: "
    f"(h.set(), r.wait({HANG_GUARD})))")
RELEASE_MEMORY_THREAD = ("from evennia.utils.search import search_object as so; "
                         "so('Marta')[0].ndb.memory_released.set()")
#: Marta's reply under way, its retrieval queued behind the held job
RETRIEVAL_WAITS = ("bool(s.ndb.busy) and any(job.kind == 'first' for job in __import__("
                   "'ai_contrib.memory.mem0_store').memory.mem0_store.get_store()._worker._queue)")


async def _run_in_game(admin, code):
    """Run the statements ``code`` with the admin's ``py``, and wait until they ran."""
    _, out = await admin.expect(f"py {code}; print('RAN=' + 'yes')",
                                r"(?m)^RAN=yes|Error[^\n]*|Traceback[^\n]*", timeout=HANG_GUARD)
    assert re.search(r"(?m)^RAN=yes", out), out


async def _until(admin, npc, expression):
    """Wait until ``expression`` over ``npc``'s script ``s`` is true in the game."""
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        if await _on_script(admin, npc, expression):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"never true for {npc}: {expression}")


def _notes_of(body):
    """The text of the reply prompt's recall notes (the messages under a memory heading)."""
    return "\n".join(m.get("content") or "" for m in body.get("messages") or []
                     if EXPERIENCES_HEADING in (m.get("content") or "")
                     or MEMORIES_HEADING in (m.get("content") or ""))


def test_a_line_heard_while_the_reply_waits_for_its_memory_is_no_memory(game, llm):
    question = "Marta, do you remember when the ferry to Eastport goes?"

    async def scenario():
        wren, tamsin = await _player(game, "Wren"), await _player(game, "Tamsin")
        admin = await logged_in_admin(game)
        try:
            await _walk(wren, "tavern")
            await _walk(tamsin, "tavern")
            await wait_idle(admin, timeout=HANG_GUARD)
            await _run_in_game(admin, HOLD_MEMORY_THREAD)
            released = False
            try:
                await _until(admin, "Marta", "s.obj.ndb.memory_held.is_set()")
                before = len(llm.model.replied)
                wren.send(f"talk Marta = {question}")
                # the reply's snapshot is taken, its search queued behind the held job...
                await _until(admin, "Marta", RETRIEVAL_WAITS)
                # ...when Tamsin says something of the same ferry, heard into Marta's context
                tamsin.send(f"say {DAWN_LINE}")
                await _until(admin, "Marta", "any('leaves at dawn' in (m.get('content') or '') "
                                             "for m in s.history)")
                await _run_in_game(admin, RELEASE_MEMORY_THREAD)
                released = True
                _, body = await _answer(game, llm, wren, "Marta", question, before)
            finally:
                if not released:
                    await _run_in_game(admin, RELEASE_MEMORY_THREAD)
            await wait_idle(admin, timeout=HANG_GUARD)
        finally:
            await close_all(wren, tamsin, admin)
        return body

    body = run_scenario(game, scenario())
    notes, prompt = _notes_of(body), text_of(body)
    assert question in prompt, prompt
    # the control: the ferry lines that left Marta's context are recalled...
    assert "ferry to Eastport is late" in notes, notes
    # ...and Tamsin's line, heard into her context (the scenario waited for it) after the
    # reply's snapshot, is not recalled as a memory
    assert "leaves at dawn" not in notes, notes


# -- item 11: a server that refuses unknown fields --------------------------------------------


def test_a_server_refusing_unknown_fields_gets_only_openai_fields(game, llm):
    async def scenario():
        wren = await _player(game, "Wren")
        try:
            await _walk(wren, "tavern")
            return await _talk(game, llm, wren, "Marta", "One more ale before I go, Marta.")
        finally:
            await wren.close()

    said, body = run_scenario(game, scenario())
    assert said.startswith("Aye ("), said  # the model's words, not the fallback line
    kinds = {request_kind(b) for b in llm.requests if b}
    assert {"reply", "extraction", "summary"} <= kinds, kinds  # the whole path, this module
    for call in llm.calls:
        known = (OPENAI_COMPLETION_FIELDS if call.path.rstrip("/").endswith("/v1/completions")
                 else OPENAI_CHAT_FIELDS)
        extra = [key for key in (call.body or {}) if key not in known]
        assert not extra, (call.path, extra)
    assert "repeat_penalty" not in body

    # the controls: the double refuses the field, and the embedded model's profile sends it
    request = urllib.request.Request(
        f"{llm.base_url}/chat/completions", method="POST",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                         "repeat_penalty": 1.25}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer e2e-key"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=HANG_GUARD)
    assert refused.value.code == 400
    assert "Unrecognized request argument supplied: repeat_penalty" in \
        refused.value.read().decode()
    embedded = sampling_fields(LLAMA_CPP, "SmolLM2-135M-Instruct.Q4_1.gguf", "reply", {})
    assert embedded.get("repeat_penalty") == 1.25, embedded
