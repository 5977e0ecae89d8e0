"""
What the demo (``python -m demo``) and ``benchmarks/defaults.py`` share: Marta, the answers
players hear from her over telnet, the server log lines ai_contrib writes about her replies,
cache warm-ups and compactions, and stopping a game.
"""

import asyncio
import re
import sys
import time

from ai_contrib.settings import DEFAULTS as AI_DEFAULTS

NPC = "Marta"

#: Marta's answer: the start of her say line (the model's words follow in quotes), or the
#: in-character line shown when the model fails (AI_FALLBACK_REPLY)
ANSWER_RE = re.compile(
    rf'^(?:(?P<reply>{NPC} says, ")'
    rf"|(?P<fallback>{re.escape(AI_DEFAULTS['FALLBACK_REPLY'].format(name=NPC))}))",
    re.M,
)
#: the server log line ai_contrib writes for every successful compaction, in either form:
#: "AI compaction [emergency, summary] Marta: 13 messages -> summary, 1207 -> 542 tokens" or
#: "AI compaction [sleep, <strategy>] Marta: 13 messages, 1207 -> 542 tokens"
COMPACTION_LOG_RE = re.compile(
    r"AI compaction \[(?P<trigger>\w+)(?:, (?P<strategy>[^\]]+))?\] (?P<npc>.+?): "
    r"(?P<messages>\d+) messages(?: -> summary)?, (?P<before>\d+) -> (?P<after>\d+) tokens"
)
#: the server log line ai_contrib writes for every reply (replies.describe_reply):
#: "AI reply Marta: 1.21 s, prompt 812 tokens, 770 reused (95%), 42 generated", ending
#: ", 0.80 s of it waiting for the cache warm-up" when the reply waited for one
REPLY_LOG_RE = re.compile(
    r"AI reply (?P<npc>.+?): (?P<seconds>[\d.]+) s"
    r"(?:, prompt (?P<prompt>\d+) tokens, (?P<cached>\d+) reused"
    r"(?: \(\d+%\))?(?:, (?P<generated>\d+) generated)?)?"
    r"(?:, (?P<waited>[\d.]+) s of it waiting for the cache warm-up)?"
)
#: the server log line of a cache warm-up after a compaction (ai_contrib.npc.warmup):
#: "AI cache warm-up Marta: 9.80 s, prompt 1132 tokens, 140 reused (12%), 1 generated" (sent in
#: steps: "9.80 s in 6 steps, prompt ...")
WARMUP_LOG_RE = re.compile(
    r"AI cache warm-up (?P<npc>.+?): (?P<seconds>[\d.]+) s(?: in (?P<steps>\d+) steps)?"
    r"(?:, prompt (?P<prompt>\d+) tokens, (?P<cached>\d+) reused)?"
)
#: the server log line of a summary refused by the fidelity check, when it gave as someone's
#: words what they never said, to the wrong speaker or over and over
#: (ai_contrib.npc.compaction_runner): "AI summary of 13 messages failed the fidelity check
#: (...); 2 quote(s) not their speaker's words; replaced by an extract of the span"
MISQUOTED_SUMMARY_LOG_RE = re.compile(
    r"AI summary of \d+ messages failed the fidelity check [^\n]*?; "
    r"(?P<quotes>\d+) quote\(s\) not their speaker's words; replaced by an extract"
)
#: the server log line of the sleep's quote repair (ai_contrib.npc.quote_repair): "AI quote
#: repair Marta: 3 quote(s) not their speaker's words removed (1 summaries, 2 journal entries)"
QUOTE_REPAIR_LOG_RE = re.compile(
    r"AI quote repair (?P<npc>.+?): (?P<quotes>\d+) quote\(s\) not their speaker's words "
    r"removed"
)
COMPACTION_FAIL_RE = re.compile(
    r"AI compaction \[(?P<trigger>\w+)(?:, [^\]]+)?\] (?P<npc>.+?) failed: (?P<error>.*)"
)


def account_name(speaker, taken):
    """A login name for a LoCoMo speaker: letters and digits only, unique among ``taken``."""
    base = re.sub(r"[^A-Za-z0-9]", "", speaker) or "player"
    name, n = base, 1
    while name.lower() in taken:
        n += 1
        name = f"{base}{n}"
    taken.add(name.lower())
    return name


async def settle(players, timeout=15.0):
    """
    Wait until every player has received each answer Marta has given so far.

    All players stand in the tavern and hear every answer, but not at the same instant: without
    this, the next speaker could take the tail of the previous exchange for its own answer.
    """
    deadline = time.monotonic() + timeout
    while True:
        counts = [len(ANSWER_RE.findall(p.received)) for p in players]
        if min(counts) >= max(counts) or time.monotonic() >= deadline:
            return
        await asyncio.sleep(0.1)


def compactions_from_log(text):
    """
    Compactions and failed compactions in server log text.

    Returns:
        tuple[list[dict], list[dict]]: ``{"trigger", "strategy", "messages", "before",
        "after"}`` per compaction (tokens), ``{"trigger", "error"}`` per failure.
    """
    done = [
        {
            "trigger": m["trigger"],
            "strategy": m["strategy"] or "summary",
            "messages": int(m["messages"]),
            "before": int(m["before"]),
            "after": int(m["after"]),
        }
        for m in COMPACTION_LOG_RE.finditer(text)
    ]
    failed = [
        {"trigger": m["trigger"], "error": m["error"].strip()}
        for m in COMPACTION_FAIL_RE.finditer(text)
    ]
    return done, failed


def invented_quotes_from_log(text, npc=NPC):
    """
    The invented quotes the server log tells of (``docs/design.md``, "Summary fidelity"):
    ``{"summaries": int (summaries refused for quotes that are not their speaker's words, each
    replaced by an extract), "refused": int (those quotes), "repaired": int (such quotes
    removed from stored summaries and journal entries by ``npc``'s sleep repair)}``. A
    summary's line names no NPC: every one in ``text`` counts.
    """
    refused = [int(m["quotes"]) for m in MISQUOTED_SUMMARY_LOG_RE.finditer(text)]
    repaired = sum(int(m["quotes"]) for m in QUOTE_REPAIR_LOG_RE.finditer(text)
                   if m["npc"] == npc)
    return {"summaries": len(refused), "refused": sum(refused), "repaired": repaired}


def stop_game(game):
    """``evennia stop``; if that fails, kill the Server and Portal. Returns the seconds taken."""
    t0 = time.monotonic()
    if not game.retire():
        print("the game did not stop; killed the server and portal", file=sys.stderr)
    return time.monotonic() - t0


def reply_record(match):
    """
    One :data:`REPLY_LOG_RE` match as a dict: ``{"seconds": float, "prompt": int | None,
    "cached": int | None, "generated": int | None, "waited": float (seconds of ``seconds``
    spent waiting for a cache warm-up; 0.0 when the line says none)}``.
    """
    return {
        "seconds": float(match["seconds"]),
        "prompt": int(match["prompt"]) if match["prompt"] else None,
        "cached": int(match["cached"]) if match["cached"] else None,
        "generated": int(match["generated"]) if match["generated"] else None,
        "waited": float(match["waited"]) if match["waited"] else 0.0,
    }


def run_replay(coroutine):
    """
    Run a replay's coroutine (``asyncio.run``) and turn the errors a user can cause into an
    exit status with a message on stderr.

    Returns:
        int: the coroutine's own status; 2 for an unknown ``--conversation`` (``KeyError``);
        1 when the game could not be made (``demo.gamectl.GameError``).
    """
    from .gamectl import GameError

    try:
        return asyncio.run(coroutine)
    except KeyError as err:  # an unknown --conversation
        print(err.args[0], file=sys.stderr)
        return 2
    except GameError as err:  # the game could not be made
        print(err, file=sys.stderr)
        return 1


def npc_archives(game):
    """
    The game's NPC archive files (``server/ai_archive/npc<id>-<hash>.jsonl``), in the order the
    NPCs were created: the template builds Marta first, so hers comes first, before Bram's and
    any NPC added later.
    """
    files = (game.path / "server" / "ai_archive").glob("npc*.jsonl")
    return sorted(files, key=lambda f: int(re.match(r"npc(\d+)", f.name).group(1)))
