"""
End to end: a fact a player told an NPC early survives compaction through the journal and Mem0,
and comes back into the reply prompt when the player asks about it.

One game is made from ``game_template/`` on free loopback ports, its ``AI_LLM_BASE_URL``
pointing at an LLM double run by this test process on 127.0.0.1. The double plays a model that
does its job, and it answers from what each request carries:

- fact extraction (the request offers the journaling tools): while the request's transcript
  holds Bob's line about his sister, it calls ``add_journal_entry`` with that fact (importance
  8, told by Bob); once it has seen a tool result, it calls ``noop``;
- a compaction summary (the compaction prompt): notes that leave the fact out, so only the
  journal, Mem0 and the archive can bring it back;
- a reply: a short line in character.

Bob tells Marta where his sister lives, then makes small talk until the history holds more than
the sleep threshold (70 %) of a small token budget. The emergency threshold is set out of reach,
so it is the sleep phase that does the memory work: the admin puts Marta to sleep (``aisleep``),
which extracts the fact into her journal, compacts her history and consolidates the journal
into Mem0; then wakes her (``aiwake``). Checked through the game itself:

1. ``aihistory Marta/journal`` lists the fact, told by Bob, consolidated into Mem0;
2. ``aihistory Marta`` shows a successful sleep compaction, and ``aihistory Marta/raw`` shows
   Bob's line as no longer in context;
3. Bob asks "Where does my sister live?": the reply request the double received carries
   "Riverwood" in its RELATED MEMORIES section and nowhere else (neither the history nor the
   summary holds it any more);
4. ``aimemory/mem0 Marta Elena`` lists the fact with a similarity score.

About a minute: making and starting the game is most of it.
"""

import asyncio
import re
import threading
import time

import pytest

from ai_contrib.core.summary import DEFAULT_COMPACTION_PROMPT
from ai_contrib.npc.extraction import DEFAULT_PRE_COMPACTION_PROMPT
from demo.telnet import TelnetPlayer
from tests.support.e2e_util import ask as _ask, game_fixtures
from tests.support.e2e_util import fail_with_logs, run_scenario, table_rows
from tests.support.e2e_util import rows_with as _rows_with
from tests.support.llm_double import tool_calls
from tests.support.waiting import HANG_GUARD

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

NPC = "Marta"
PLAYER = ("Bob", "bob-pw-5817")
FACT_LINE = "My sister Elena lives in Riverwood, past the old mill on the east road."
FACT_WORDS = "Elena lives in Riverwood"  # how the double recognises the line in a transcript
FACT = "Bob's sister Elena lives in Riverwood."
SMALL_TALK = [
    "The rain has not stopped for three whole days, has it?",
    "I would like a mug of your dark ale and a bowl of the stew, please.",
    "The road from the ford was muddy and full of carts this morning.",
    "Is the blacksmith across the square still open at this hour?",
    "My boots are soaked through; may I dry them by the hearth for a while?",
    "They say the harvest fair will be held next week in the market square.",
    "That stew smells wonderful; is there barley and mutton in it?",
    "I think I will take a room for the night if you have one free.",
]
QUESTION = "Where does my sister live?"
# the summariser's notes: everything but the fact
SUMMARY = (
    "## Who I Spoke With\n"
    "- Bob, a traveller soaked by the rain, ordered dark ale and stew and asked for a room.\n"
    "## Open Questions\n"
    "- Whether Bob will come to the harvest fair."
)
MEMORY_HEADER = "RELATED MEMORIES:"

ENV = {
    "AI_LLM_API_KEY": "e2e-key",
    "AI_MAX_CONTEXT_TOKENS": "400",
    "AI_COMPACT_PRESERVE_WINDOW": "2",
    "AI_COMPACT_PRESERVE_FRACTION": "0",
    # no emergency compaction while Bob talks: the sleep phase does the memory work here
    "AI_COMPACT_EMERGENCY_THRESHOLD": "5.0",
    "AI_SLEEP_AFTER_IDLE": "0",  # she sleeps when the admin says so...
    "AI_SLEEP_DURATION": "0",  # ...and wakes when the admin says so
    "AI_LLM_TIMEOUT": "60",
}

REPLY_RE = rf'{NPC} says, "(?P<text>[^"\n]+)"'
FALLBACK = f"{NPC} seems lost in thought."
ANSWER_RE = rf"{REPLY_RE}|{re.escape(FALLBACK)}"
SLEEP_WORK_TIMEOUT = HANG_GUARD  # extraction, compaction and Mem0 (loading its embedder)
TOKENS_RE = re.compile(r"Tokens\s*\|\s*(\d+) / (\d+) \(")


# -- the model ---------------------------------------------------------------------------------


def _kind(body):
    """What a chat request is for: ``"extraction"``, ``"summary"`` or ``"reply"``."""
    messages = body.get("messages") or []
    system = str(messages[0].get("content") or "") if messages else ""
    if body.get("tools") or DEFAULT_PRE_COMPACTION_PROMPT[:60] in system:
        return "extraction"
    if system.startswith(DEFAULT_COMPACTION_PROMPT[:60]):
        return "summary"
    return "reply"


def _text_of(body):
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])


class ScriptedModel:
    """The double's responder (see the module docstring); keeps ``(kind, request)`` in order."""

    def __init__(self):
        self.seen = []
        self._lock = threading.Lock()

    def __call__(self, body):
        kind = _kind(body)
        with self._lock:
            self.seen.append((kind, body))
            replies = sum(1 for k, _ in self.seen if k == "reply")
        if kind == "extraction":
            messages = body.get("messages") or []
            if any(m.get("role") == "tool" for m in messages) or FACT_WORDS not in _text_of(body):
                return tool_calls([("noop", {})])
            return tool_calls(
                [("add_journal_entry", {"content": FACT, "importance": 8, "speaker": PLAYER[0]})]
            )
        if kind == "summary":
            return SUMMARY
        return f"Aye, love, I hear you ({replies})."

    def requests(self, kind):
        with self._lock:
            return [body for k, body in self.seen if k == kind]


# -- fixtures ----------------------------------------------------------------------------------


llm, game = game_fixtures("e2e-memory", ENV, ScriptedModel)


# -- driving the game --------------------------------------------------------------------------


async def _talk(player, text):
    """Say ``text`` to Marta; return her answer (None for the fallback line)."""
    match, _ = await player.expect(f"talk {NPC} = {text}", ANSWER_RE, timeout=HANG_GUARD)
    return match.group("text")


async def _wait_for_fact_consolidated(admin, deadline):
    """Poll the journal until the fact's row says it is in Mem0; return the last listing."""
    journal = ""
    while time.monotonic() < deadline:
        journal = await _ask(admin, f"aihistory {NPC}/journal", rf"Journal of {NPC}|journal is empty")
        rows = _rows_with(journal, "Riverwood")
        if rows and rows[0][4] == "yes":
            return journal
        await asyncio.sleep(1.0)
    return journal


async def _scenario(game, llm):
    out = {}
    transcript = game.transcript
    player = TelnetPlayer("bob", game.ports.telnet, transcript=transcript)
    admin = TelnetPlayer("admin", game.ports.telnet, transcript=transcript)
    try:
        await player.connect()
        await player.login(*PLAYER, create=True)
        await player.command("tavern")
        out["replies"] = [await _talk(player, line) for line in [FACT_LINE] + SMALL_TALK]

        await admin.connect()
        await admin.login(*game.superuser)
        out["before"] = await _ask(admin, f"aihistory {NPC}", rf"AI history of {NPC}")
        out["sleep"] = await _ask(admin, f"aisleep {NPC}",
                                  rf"{NPC} (falls asleep|is already asleep|dozes off)")
        out["journal"] = await _wait_for_fact_consolidated(
            admin, time.monotonic() + SLEEP_WORK_TIMEOUT
        )
        out["wake"] = await _ask(admin, f"aiwake {NPC}", rf"{NPC} (wakes up|is already awake)")
        out["after"] = await _ask(admin, f"aihistory {NPC}", rf"AI history of {NPC}")
        out["raw"] = await _ask(
            admin, f"aihistory {NPC}/raw 0 19", rf"Archive of {NPC}|No archived messages"
        )

        replies_before = len(llm.model.requests("reply"))
        out["answer"] = await _talk(player, QUESTION)
        out["question_requests"] = llm.model.requests("reply")[replies_before:]

        out["memory"] = await _ask(
            admin,
            f"aimemory/mem0 {NPC} Elena",
            rf"Memories of {NPC} for|remembers nothing|Memory search failed",
            timeout=HANG_GUARD,
        )
    finally:
        await admin.close()
        await player.close()
    return out


# -- the test ----------------------------------------------------------------------------------


def test_early_fact_survives_compaction_and_returns_in_related_memories(game, llm):
    out = run_scenario(game, _scenario(game, llm))
    model = llm.model

    # Marta answered every line with the model's words, never the fallback line
    if None in out["replies"] or out["answer"] is None:
        fail_with_logs(game, f"a line got the fallback answer: {out['replies']} / {out['answer']}")

    # the conversation filled more than the sleep threshold, and nothing compacted it yet
    tokens = TOKENS_RE.search(out["before"])
    assert tokens, out["before"]
    used, budget = int(tokens.group(1)), int(tokens.group(2))
    assert used >= 0.7 * budget, f"only {used} of {budget} tokens: no sleep compaction is due"
    assert re.search(r"Compactions\s*\|\s*0 \(", out["before"]), out["before"]
    assert "falls asleep" in out["sleep"] or "dozes off" in out["sleep"], out["sleep"]
    assert "wakes up" in out["wake"], out["wake"]

    # the sleep phase asked for extraction (with Bob's line in view) before the summary
    kinds = [kind for kind, _ in model.seen]
    assert "extraction" in kinds and "summary" in kinds, kinds
    assert kinds.index("extraction") < kinds.index("summary"), kinds
    summaries = model.requests("summary")
    assert any(FACT_WORDS in _text_of(body) for body in summaries), (
        "Bob's line was not among the messages the summary replaced"
    )

    # (1) the journal holds the fact, told by Bob, consolidated into Mem0
    facts = _rows_with(out["journal"], "Riverwood")
    if not facts or facts[0][4] != "yes":
        fail_with_logs(game, f"the fact is not consolidated into Mem0:\n{out['journal']}")
    _id, importance, source, who, _in_mem0, content = facts[0]
    assert (importance, source, who) == ("8", "fact", PLAYER[0]), facts[0]
    assert "Elena" in content, facts[0]

    # (2) a successful sleep compaction replaced Bob's line, which left the context
    events = [
        row for row in table_rows(out["after"])
        if len(row) == 6 and row[1].startswith("sleep") and row[2] == "ok"
    ]
    if not events:
        fail_with_logs(game, f"no successful sleep compaction in aihistory:\n{out['after']}")
    before, after = (int(n) for n in events[-1][4].split(" -> "))
    assert after < before, events[-1]
    assert re.search(r"in context \(1 summaries\)", out["after"]), out["after"]
    said = [row for row in _rows_with(out["raw"], "Riverwood") if row[2] == PLAYER[0]]
    assert said, f"Bob's line is not in the archive:\n{out['raw']}"
    assert said[0][4] == "no", f"Bob's line is still in context:\n{out['raw']}"

    # (3) the reply to the question carried the fact in RELATED MEMORIES, and only there
    assert len(out["question_requests"]) == 1, out["question_requests"]
    messages = out["question_requests"][0]["messages"]
    assert QUESTION in str(messages[-1].get("content")), messages[-1]
    memory_sections = [
        str(m.get("content") or "") for m in messages
        if str(m.get("content") or "").startswith(MEMORY_HEADER)
    ]
    assert memory_sections, f"no {MEMORY_HEADER} section in the reply prompt: {messages}"
    memories = memory_sections[0]
    # from Mem0: the journal fact, attributed to Bob...
    assert f"- {FACT} (told by {PLAYER[0]})" in memories, memories
    # ...and from the archive: Bob's own words, compacted out of the context
    assert f'{PLAYER[0]}: "{FACT_LINE}"' in memories, memories
    # the sleep phase also made Bob's impression from the journal fact: the scene recalls it
    # beside his name, a memory too; nowhere else does the fact appear
    scenes = [str(m.get("content") or "") for m in messages
              if str(m.get("content") or "").startswith("[SCENE]")]
    assert any(re.search(rf"{PLAYER[0]} \([^)]*you recall: [^)]*Riverwood", s) for s in scenes), \
        scenes
    elsewhere = [
        m for m in messages
        if "Riverwood" in str(m.get("content") or "")
        and not str(m.get("content") or "").startswith((MEMORY_HEADER, "[SCENE]"))
    ]
    assert not elsewhere, f"the fact is still in the prompt outside the memories: {elsewhere}"
    assert any(m.get("content", "").startswith("[CONTEXT SUMMARY]") for m in messages), messages

    # (4) Mem0 returns the fact for "Elena", with a similarity score
    hits = _rows_with(out["memory"], "Riverwood")
    if not hits:
        fail_with_logs(game, f"aimemory did not list the fact:\n{out['memory']}")
    _memory_id, score, source, visibility, text = hits[0]
    assert re.fullmatch(r"-?\d+\.\d{3}", score) and float(score) > 0, hits[0]
    assert source == "fact" and "Elena" in text, hits[0]
