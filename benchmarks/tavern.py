"""
A busy tavern: N telnet players talk to Marta, the AI innkeeper, in a real game.

The game is made from ``game_template/`` (``demo.gamectl.GameDir``) on free loopback ports and
started as ``make demo`` starts it. Its ``AI_LLM_BASE_URL`` points at
``tests/support/llm_double.py``'s ``LLMDouble``, a real OpenAI-compatible HTTP server on 127.0.0.1 run by this process, which
answers every request after ``--latency`` seconds:

- a reply (an NPC line): one short in-character sentence, addressed to the last speaker;
- fact extraction before a compaction (the request offers tools): one ``add_journal_entry``
  about the last player line, then ``noop`` once it has seen a tool result;
- a compaction summary: a few lines of notes in the summary prompt's headings.

Players (accounts made with ``create`` over telnet) walk into the tavern, and after one warm-up
exchange (so that the first measured reply does not pay for loading the memory layer) each says
a line every ``--interval`` seconds (uniform, seeded per player) for ``--duration`` seconds:
``say <line>`` mostly, ``talk Marta = <line>`` for a share of them. Lines are LoCoMo
conversation turns (``data/locomo/``, CC BY-NC 4.0) of 90-170 characters (about 20-40
tokens), shuffled with the seed; synthetic lines if the data is missing. After the talk the
script waits up to ``--drain`` seconds for Marta to answer what she heard, then stops the game.

Measured:

- from Marta's archive (``<game>/server/ai_archive/*.jsonl``, one JSON record per line):
  player lines stored (user messages from the players), her replies (assistant messages with
  text), which reply covers which line and when, compactions (``compaction`` records) and
  evictions (``evict`` records). A reply covers the lines its ``metadata["reply_to"]`` names;
  a reply without ``reply_to`` covers the player lines stored since the previous reply (one
  call per line answered in order implies no more). The output says which rule applied.
  Latency: the covering reply's timestamp minus the line's (both written by the server);
- by an admin telnet connection (which stays out of the tavern, so it is no listener), every
  ``--poll`` seconds: one ``py`` expression reading the NPC script's token count and budget
  (context usage over time; with ``--table-polls`` also ``aihistory Marta``, whose table
  takes the server's reactor some 150 ms a poll, time the replies then wait for), its
  ``checkpoint_seq`` and ``ndb.last_checkpoint`` (checkpoints: changes seen between polls, a
  lower bound when two fall between polls);
- by the double: requests by kind (reply, extraction, summary);
- by the clients: lines sent, fallback lines ("Marta seems lost in thought.") heard.

``--baseline-ref REF`` runs the same benchmark a second time with ``ai_contrib`` (and
``game_template``) as they are at git ref REF, extracted with ``git archive`` into a temporary
directory that goes first on the game's ``PYTHONPATH``, and prints both side by side.

Usage::

    .venv/bin/python benchmarks/tavern.py                          # 20 players, 120 s
    .venv/bin/python benchmarks/tavern.py --players 6 --duration 40 --json out.json
    .venv/bin/python benchmarks/tavern.py --baseline-ref HEAD~1

Loopback only; the game is always stopped (killed if it will not stop) at the end. Nothing is
asserted: the figures are printed (Markdown on stdout, progress on stderr).
"""

import argparse
import asyncio
import io
import json
import math
import os
import random
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from demo.gamectl import GameDir, GameError  # noqa: E402
from demo.replay import npc_archives  # noqa: E402
from demo.telnet import TelnetError, TelnetPlayer, Transcript  # noqa: E402
from tests.support.llm_double import LLMDouble, reply, sleep, tool_calls  # noqa: E402

NPC = "Marta"
FALLBACK = f"{NPC} seems lost in thought."
SAY_RE = re.compile(rf'^{NPC} says(?: to [^,]+)?, "', re.M)
LOCOMO = ROOT / "data" / "locomo" / "locomo_dev.json"
LINE_CHARS = (90, 170)  # about 20-40 tokens of English
POLL_MARK = "BENCHPOLL"

NAMES = [
    "Aldric", "Brenna", "Cedric", "Dagny", "Eamon", "Fenna", "Garrick", "Hilde", "Ivo",
    "Jorunn", "Kestrel", "Leofric", "Maelis", "Niall", "Osric", "Perrin", "Quilla", "Rowan",
    "Sigrun", "Tamsin", "Ulric", "Vesna", "Wystan", "Yara", "Zoltan",
]

REPLIES = [
    "Aye, {name}, that is a tale worth a second mug; sit by the fire and tell me more.",
    "Well now, {name}, I have heard stranger things at this counter, but not many.",
    "Mind your elbows, {name}, the stew is hot and the benches are crowded tonight.",
    "Is that so, {name}? Then the next ale is on the house, and you owe me the rest of it.",
    "Ha! {name}, you sound like my late husband; he never could keep a secret either.",
    "I will keep that in mind, {name}; the Stag hears everything sooner or later.",
    "Slow down, {name}, there are twenty of you and only one of me behind this bar.",
    "That is good news, {name}; the road has brought little enough of it this season.",
]

SUMMARY = (
    "## Who I Spoke With\n"
    "- A crowd of travellers filled the common room; {names} told me about their families, "
    "their work and their plans.\n"
    "## Open Questions\n"
    "- Who will come back tomorrow, and who still owes me for the last round."
)


def log(text):
    print(text, file=sys.stderr, flush=True)


# -- lines -----------------------------------------------------------------------------------


def _clean(text):
    """One line safe to type into Evennia: no colour markup, no '=', no double quotes."""
    text = text.replace("|", "/").replace("=", "-").replace('"', "'")
    return " ".join(text.split())


def load_lines(seed, path=LOCOMO):
    """
    Player lines, shuffled with ``seed``: LoCoMo turns of :data:`LINE_CHARS` characters, or
    synthetic lines if the file is missing.

    Returns:
        tuple[list[str], str]: the lines and where they come from.
    """
    lines = []
    try:
        samples = json.loads(Path(path).read_text(encoding="utf-8"))
        for sample in samples:
            conv = sample["conversation"]
            for key, turns in conv.items():
                if not re.fullmatch(r"session_\d+", key):
                    continue
                for turn in turns:
                    text = _clean(str(turn.get("text") or ""))
                    if LINE_CHARS[0] <= len(text) <= LINE_CHARS[1]:
                        lines.append(text)
        source = f"LoCoMo turns ({Path(path).name})"
    except (OSError, ValueError, KeyError):
        lines = []
    if not lines:
        rng = random.Random(seed)
        subjects = ["my brother", "the miller", "our old dog", "the new priest", "my aunt Hesta"]
        verbs = ["came back from", "got lost near", "bought a cart in", "sang all night in"]
        places = ["the river ford", "Stonebridge", "the north road", "the harvest fair"]
        tails = ["and nobody believes a word of it.", "so I need a strong drink tonight.",
                 "and I wonder what you think of it, Marta."]
        for i in range(2000):
            lines.append(
                f"You will not believe it, but {rng.choice(subjects)} {rng.choice(verbs)} "
                f"{rng.choice(places)} last week, {rng.choice(tails)} ({i})"
            )
        source = "synthetic lines (no LoCoMo data)"
    random.Random(seed).shuffle(lines)
    return lines, source


# -- the model -------------------------------------------------------------------------------


def _prompt_markers():
    """Starts of the current summary and extraction prompts (None where not importable)."""
    try:
        from ai_contrib.core.summary import DEFAULT_COMPACTION_PROMPT
    except Exception:  # noqa: BLE001 - another layout of the package
        DEFAULT_COMPACTION_PROMPT = None
    try:
        from ai_contrib.npc.extraction import DEFAULT_PRE_COMPACTION_PROMPT
    except Exception:  # noqa: BLE001
        DEFAULT_PRE_COMPACTION_PROMPT = None
    return (
        DEFAULT_COMPACTION_PROMPT[:60] if DEFAULT_COMPACTION_PROMPT else None,
        DEFAULT_PRE_COMPACTION_PROMPT[:60] if DEFAULT_PRE_COMPACTION_PROMPT else None,
    )


class TavernModel:
    """
    The double's responder: classifies each request, answers it after ``latency`` seconds,
    counts requests by kind (thread-safe: the double serves each request in its own thread).
    """

    def __init__(self, latency, seed):
        self.latency = latency
        self.rng = random.Random(seed)
        self.counts = {"reply": 0, "extraction": 0, "summary": 0}
        self.last_request = time.monotonic()  # when the latest request arrived
        self.lock = threading.Lock()
        self.summary_mark, self.extraction_mark = _prompt_markers()

    def kind(self, body):
        """``"extraction"``, ``"summary"`` or ``"reply"``."""
        if "prompt" in body and "messages" not in body:  # text completion: base-style summary
            return "summary"
        messages = body.get("messages") or []
        system = str(messages[0].get("content") or "") if messages else ""
        if body.get("tools") or (self.extraction_mark and self.extraction_mark in system):
            return "extraction"
        if "add_journal_entry" in system and "noop" in system:
            return "extraction"
        if self.summary_mark and system.startswith(self.summary_mark):
            return "summary"
        if "conversation log" in system and "notes" in system:
            return "summary"
        return "reply"

    def snapshot(self):
        with self.lock:
            return dict(self.counts)

    def __call__(self, body):
        kind = self.kind(body)
        with self.lock:
            self.counts[kind] += 1
            self.last_request = time.monotonic()
            pick = self.rng.random()
        messages = body.get("messages") or []
        speakers = []
        for m in messages:
            if isinstance(m, dict) and m.get("role") == "user":
                head = str(m.get("content") or "").split(":", 1)[0].strip()
                if head in NAMES or re.fullmatch(r"[A-Z][a-z]+\d*", head or "-"):
                    speakers.append(head)
        if kind == "extraction":
            if any(isinstance(m, dict) and m.get("role") == "tool" for m in messages):
                answer = tool_calls([("noop", {})])
            else:
                who = speakers[-1] if speakers else "A guest"
                answer = tool_calls([(
                    "add_journal_entry",
                    {"content": f"{who} talked to me in the crowded common room.",
                     "importance": 4, "speaker": who},
                )])
        elif kind == "summary":
            names = ", ".join(sorted(set(speakers))[:6]) or "the guests"
            answer = reply(SUMMARY.format(names=names))
        else:
            name = speakers[-1] if speakers else "friend"
            answer = reply(REPLIES[int(pick * len(REPLIES))].format(name=name))
        return sleep(self.latency, then=answer)


# -- the game --------------------------------------------------------------------------------


def extract_ref(ref, target):
    """
    ``ai_contrib`` and ``game_template`` as they are at git ``ref``, written under ``target``
    (``git archive``: the repository and its work tree are left as they are).

    Returns:
        Path | None: the extracted ``game_template`` (None if the ref has none).
    """
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "ai_contrib", "game_template"],
        capture_output=True,
    )
    if proc.returncode != 0:  # a ref without game_template
        proc = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", ref, "ai_contrib"],
            capture_output=True,
        )
    if proc.returncode != 0:
        raise SystemExit(f"git archive {ref} failed: {proc.stderr.decode(errors='replace')}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(target, filter="data")
    template = Path(target) / "game_template"
    return template if template.is_dir() else None


def game_class(python_first=None):
    """``GameDir``, or a subclass whose games import from ``python_first`` before the repo."""
    if not python_first:
        return GameDir

    class RefGame(GameDir):
        def env(self, **overrides):
            env = super().env(**overrides)
            parts = env["PYTHONPATH"].split(os.pathsep)
            # after Evennia's root, which the launcher puts first; before this checkout
            parts.insert(1, str(python_first))
            env["PYTHONPATH"] = os.pathsep.join(parts)
            return env

    return RefGame


def game_environment(args, base_url):
    env = {
        "AI_LLM_BASE_URL": base_url,
        "AI_LLM_API_KEY": "tavern-bench",
        "AI_MAX_CONTEXT_TOKENS": str(args.budget),
        "AI_SLEEP_AFTER_IDLE": "0",  # a busy tavern: the emergency path does the memory work
        "AI_LLM_TIMEOUT": str(max(60, 10 * args.latency)),
    }
    for item in args.env:
        key, _, value = item.partition("=")
        env[key.strip()] = value
    return env


# -- the admin's polls -------------------------------------------------------------------------

_TOKENS_PATTERNS = [
    re.compile(r"Tokens\s*\|\s*([\d,]+)\s*/\s*([\d,]+)"),
    re.compile(r"([\d,]+)\s*/\s*([\d,]+)\s*tokens", re.I),
]
_PCT_RE = re.compile(r"([\d.]+)\s*%")
_USAGE_LINE_RE = re.compile(r"(?:\d+\s*/\s*\d+|\d+(?:\.\d+)?\s*%)[^\n]*\n")


def parse_usage(text):
    """
    Context usage from ``aihistory`` output: ``(used, budget, percent)``; ``used``/``budget``
    None where only a percentage was found; None if neither.
    """
    for rx in _TOKENS_PATTERNS:
        m = rx.search(text)
        if m:
            used, budget = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
            return used, budget, 100.0 * used / max(1, budget)
    for line in text.splitlines():
        if "oken" in line:
            m = _PCT_RE.search(line)
            if m:
                return None, None, float(m.group(1))
    return None


POLL_PY = (
    "py (lambda s: '" + POLL_MARK + " ' + __import__('json').dumps({"
    "'checkpoint_seq': s.db.checkpoint_seq, 'last_checkpoint': s.ndb.last_checkpoint, "
    "'tokens': s.token_count(), "
    "'budget': (s.budget() if hasattr(s, 'budget') else s.cfg('max_context_tokens')), "
    "'mode': s.db.operating_mode, 'module': __import__('ai_contrib').__file__}))"
    f"(me.search('{NPC}', global_search=True).scripts.get('assistant_script')[0])"
)
_POLL_RE = re.compile(rf"^{POLL_MARK} (\{{.*\}})\s*$", re.M)


async def poll_once(admin, t0, table=False):
    """One poll: ``{"t", "pct", "used", "budget", "py": {...} | None}`` (t: s since ``t0``);
    ``pct``, ``used`` and ``budget`` only with ``table`` (read from ``aihistory``)."""
    sample = {"t": round(time.monotonic() - t0, 2)}
    if table:
        # the first line with "N / M" or a percentage is the usage row; the rest of the table
        # is read (and ignored) by the next command
        text = await admin.command(f"aihistory {NPC}", until=_USAGE_LINE_RE, timeout=15)
        usage = parse_usage(text)
        if usage:
            sample["used"], sample["budget"], sample["pct"] = usage
    _, text = await _py(admin)
    m = _POLL_RE.search(text)
    sample["py"] = json.loads(m.group(1)) if m else None
    return sample


async def _py(admin):
    admin.discard()
    admin.send(POLL_PY)
    return await admin.read_until(_POLL_RE, timeout=15)


async def poller(admin, t0, interval, samples, stop, table=False):
    while not stop.is_set():
        started = time.monotonic()
        try:
            samples.append(await poll_once(admin, t0, table))
        except (TelnetError, ConnectionError, ValueError) as err:
            log(f"  poll failed: {err}")
        left = interval - (time.monotonic() - started)
        if left > 0:
            try:
                await asyncio.wait_for(stop.wait(), left)
            except asyncio.TimeoutError:
                pass


# -- the archive --------------------------------------------------------------------------------


def archive_records(game):
    """All records of Marta's archive (the template's first NPC), oldest first."""
    records = []
    for path in npc_archives(game)[:1]:
        with open(path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # being written
                try:
                    records.append(json.loads(line))
                except ValueError:
                    continue
    records.sort(key=lambda r: r.get("seq", 0))
    return records


def _epoch(ts):
    try:
        return datetime.fromisoformat(str(ts)).timestamp()
    except (TypeError, ValueError):
        return None


def _is_reply(msg):
    return (
        msg.get("role") == "assistant"
        and bool((msg.get("content") or "").strip())
        and not msg.get("tool_calls")
    )


def coverage(records, players, after_seq=-1, latency=0.0):
    """
    Which stored player lines a reply covers, and when.

    A reply with ``metadata["reply_to"]`` covers the lines it names. A reply without it covers
    the player lines not covered yet that were stored before its LLM request could have been
    made (its timestamp minus the double's fixed ``latency``); lines said while it was being
    written are left to the next reply. For replies without ``reply_to`` a second reading is
    kept too, the one-call-per-line queue: each reply answers one line, oldest first.

    Args:
        records (list[dict]): archive records.
        players (set[str]): the players' character names (lower case).
        after_seq (int): only records after this seq count (the warm-up is before it).
        latency (float): seconds the double takes to answer.

    Returns:
        dict: ``lines`` (id -> stored player line), ``replies``, ``covered`` ({line id: seconds
        to the first covering reply}), ``rule`` ("reply_to", "order", "mixed" or "none"),
        ``per_reply`` (lines newly covered per reply), ``fifo`` ({line id: seconds}, the
        one-line-per-reply reading of replies without ``reply_to``).
    """
    lines, replies, covered, per_reply, fifo = {}, [], {}, [], {}
    uncovered, queue, rules = [], [], set()
    for rec in records:
        if rec.get("kind") != "message" or rec.get("seq", -1) <= after_seq:
            continue
        msg = rec["msg"]
        meta = msg.get("metadata") or {}
        if msg.get("role") == "user" and str(msg.get("name") or "").lower() in players:
            lines[msg["id"]] = msg
            uncovered.append(msg["id"])
            queue.append(msg["id"])
            continue
        if not _is_reply(msg):
            continue
        replies.append(msg)
        when = _epoch(msg.get("timestamp"))
        reply_to = meta.get("reply_to")
        if reply_to is None:
            rules.add("order")
            cutoff = None if when is None else when - latency
            ids = [
                i for i in uncovered
                if cutoff is None or (_epoch(lines[i].get("timestamp")) or 0) <= cutoff
            ]
            if queue:
                first = queue.pop(0)
                said = _epoch(lines[first].get("timestamp"))
                fifo[first] = when - said if when is not None and said is not None else None
        else:
            rules.add("reply_to")
            ids = [i for i in reply_to if i in lines]
        new = 0
        for line_id in ids:
            if line_id in covered:
                continue
            said = _epoch(lines[line_id].get("timestamp"))
            covered[line_id] = (when - said) if when is not None and said is not None else None
            new += 1
        per_reply.append(new)
        uncovered = [i for i in uncovered if i not in covered]
    rule = "mixed" if len(rules) > 1 else (rules.pop() if rules else "none")
    return {"lines": lines, "replies": replies, "covered": covered, "rule": rule,
            "per_reply": per_reply, "fifo": fifo}


def _pct(values, q):
    """The ``q`` quantile (0-1) of ``values`` (nearest rank), None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def analyse(records, players, after_seq, sent, samples, counts, fallbacks, budget, latency):
    cov = coverage(records, players, after_seq, latency)
    lat = [v for v in cov["covered"].values() if v is not None]
    fifo = [v for v in cov["fifo"].values() if v is not None]
    late = [r for r in records if r.get("seq", -1) > after_seq]
    compactions = [r for r in late if r.get("kind") == "compaction"]
    evictions = [r for r in late if r.get("kind") == "evict"]
    # input lag: the client's send time to the line's archive timestamp, matched by text
    sent_at = {}
    for t, text in sent:
        sent_at.setdefault(text, t)
    lag = []
    for msg in cov["lines"].values():
        stored = _epoch(msg.get("timestamp"))
        if msg.get("content") in sent_at and stored is not None:
            lag.append(stored - sent_at[msg["content"]])
    # context usage over time
    usage = [(s["t"], s.get("pct")) for s in samples]
    if all(p is None for _, p in usage):  # no aihistory polls, or unreadable: the py poll's
        usage = [
            (s["t"], 100.0 * s["py"]["tokens"] / max(1, s["py"]["budget"] or budget))
            if s.get("py") else (s["t"], None)
            for s in samples
        ]
    pcts = [p for _, p in usage if p is not None]
    above, longest, run = 0.0, 0.0, 0.0
    for (t, p), nxt in zip(usage, usage[1:] + [None]):
        span = (nxt[0] - t) if nxt else 0.0
        if p is not None and p > 100.0:
            above += span
            run += span
            longest = max(longest, run)
        else:
            run = 0.0
    # checkpoints: changes of (checkpoint_seq, last_checkpoint) between polls
    seen = [
        (s["py"].get("checkpoint_seq"), s["py"].get("last_checkpoint"))
        for s in samples if s.get("py")
    ]
    checkpoints = sum(1 for a, b in zip(seen, seen[1:]) if a != b) if len(seen) > 1 else None
    module = next((s["py"].get("module") for s in samples if s.get("py")), None)
    return {
        "lines_sent": len(sent),
        "lines_stored": len(cov["lines"]),
        "lines_covered": len(cov["covered"]),
        "lines_never_covered": len(cov["lines"]) - len(cov["covered"]),
        "coverage_rule": cov["rule"],
        "latency_p50": _pct(lat, 0.5),
        "latency_p95": _pct(lat, 0.95),
        "latency_max": max(lat) if lat else None,
        "fifo_latency_p50": _pct(fifo, 0.5) if cov["rule"] != "reply_to" else None,
        "fifo_latency_p95": _pct(fifo, 0.95) if cov["rule"] != "reply_to" else None,
        "fifo_latency_max": (max(fifo) if fifo else None) if cov["rule"] != "reply_to" else None,
        "fifo_never_covered": (len(cov["lines"]) - len(cov["fifo"])
                               if cov["rule"] != "reply_to" else None),
        "input_lag_p50": _pct(lag, 0.5),
        "input_lag_max": max(lag) if lag else None,
        "npc_replies": len(cov["replies"]),
        "lines_per_reply_mean": statistics.mean(cov["per_reply"]) if cov["per_reply"] else None,
        "lines_per_reply_max": max(cov["per_reply"]) if cov["per_reply"] else None,
        "fallback_lines_heard": fallbacks,
        "llm_requests": counts,
        "context_max_pct": max(pcts) if pcts else None,
        "context_above_100_s": round(above, 1),
        "context_above_100_longest_s": round(longest, 1),
        "compactions": len(compactions),
        "evictions": len(evictions),
        "checkpoints": checkpoints,
        "polls": len(samples),
        "ai_contrib_module": module,
        "usage_samples": [[t, None if p is None else round(p, 1)] for t, p in usage],
    }


# -- one run ------------------------------------------------------------------------------------


def player_names(n):
    names = []
    for i in range(n):
        base = NAMES[i % len(NAMES)]
        names.append(base if i < len(NAMES) else f"{base}{i // len(NAMES) + 1}")
    return names


async def talk(player, index, lines, args, t0, sent, rng):
    """One player's lines for ``args.duration`` seconds from ``t0``."""
    lo, hi = args.interval
    next_at = t0 + rng.uniform(0, hi)
    n = 0
    while next_at - t0 < args.duration:
        await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        text = lines[(index + n * args.players) % len(lines)]
        n += 1
        command = f"talk {NPC} = {text}" if rng.random() < args.talk_share else f"say {text}"
        try:
            player.send(command)
        except TelnetError as err:
            log(f"  {player.label}: {err}")
            return
        sent.append((time.time(), text))
        next_at += rng.uniform(lo, hi)


async def drive(game, args, lines, model, transcript):
    """Log in, warm up, talk, drain; returns the raw measurements."""
    names = player_names(args.players)
    players = [TelnetPlayer(name, game.ports.telnet, transcript=transcript) for name in names]
    admin = TelnetPlayer(game.superuser[0], game.ports.telnet, transcript=transcript)
    samples, sent = [], []
    stop = asyncio.Event()
    poll_task = None
    try:
        await admin.connect()
        await admin.login(*game.superuser)
        t_login = time.monotonic()
        for i, player in enumerate(players):
            await player.connect()
            await player.login(player.label, f"pw-{secrets.token_hex(6)}", create=True)
            await player.command("tavern", quiet=0.3)
        log(f"  {len(players)} players in the tavern ({time.monotonic() - t_login:.0f} s)")

        # warm-up: one exchange, not measured
        first = players[0]
        first.discard()
        first.send(f"talk {NPC} = Good evening, {NPC}! A busy night, is it not?")
        match, _ = await first.read_until(SAY_RE, timeout=180)
        log(f"  warm-up reply: {'yes' if match else 'NONE within 180 s'}")
        await asyncio.sleep(1.0)
        records = archive_records(game)
        after_seq = records[-1]["seq"] if records else -1
        counts0 = model.snapshot()
        heard_from = len(first.received)

        t0 = time.monotonic()
        poll_task = asyncio.create_task(
            poller(admin, t0, args.poll, samples, stop, args.table_polls))
        log(f"  talking for {args.duration:.0f} s ...")
        await asyncio.gather(*(
            talk(p, i, lines, args, t0, sent, random.Random(f"{args.seed}-{i}"))
            for i, p in enumerate(players)
        ))
        t_end = time.monotonic()
        load = os.getloadavg()[0]  # other work on the machine inflates the timings
        log(f"  {len(sent)} lines sent; draining (at most {args.drain:.0f} s) ...")
        while time.monotonic() - t_end < args.drain:
            await asyncio.sleep(1.0)
            cov = coverage(archive_records(game), {n.lower() for n in names}, after_seq,
                           args.latency)
            all_in = len(cov["lines"]) >= len(sent) or time.monotonic() - t_end > 10
            # done when every line is covered and the NPC has stopped asking the model
            # (a one-call-per-line loop may still be working through its queue)
            quiet = time.monotonic() - model.last_request > args.latency + 3
            if all_in and quiet and len(cov["covered"]) == len(cov["lines"]):
                break
        drained = time.monotonic() - t_end
        log(f"  drain: {drained:.0f} s")
        stop.set()
        await poll_task
        poll_task = None
        fallbacks = first.received[heard_from:].count(FALLBACK)
        counts = {k: v - counts0.get(k, 0) for k, v in model.snapshot().items()}
        return {
            "names": names, "after_seq": after_seq, "sent": sent, "samples": samples,
            "counts": counts, "fallbacks": fallbacks, "drain_s": round(drained, 1),
            "loadavg_1m": round(load, 2),
        }
    finally:
        stop.set()
        if poll_task is not None:
            poll_task.cancel()
            try:
                await poll_task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        for p in players:
            await p.close(quit=False)
        await admin.close(quit=False)


def run_once(args, label, python_first=None, template=None):
    """Make, start, drive and stop one game; returns its figures (dict)."""
    lines, source = load_lines(args.seed)
    model = TavernModel(args.latency, args.seed)
    double = LLMDouble(default=model).start()
    work = Path(tempfile.mkdtemp(prefix=f"tavern-{label}-"))
    game = None
    result = {"label": label, "lines_from": source}
    t_all = time.monotonic()
    ok = False
    try:
        env = game_environment(args, double.base_url)
        log(f"[{label}] making a game in {work} ...")
        kwargs = {"template": template} if template else {}
        game = game_class(python_first).create(work / "game", env=env, **kwargs)
        log(f"[{label}] starting it on 127.0.0.1:{game.ports.telnet} ...")
        result["start_s"] = round(game.start(timeout=300), 1)
        transcript = Transcript(work / "transcript.txt")
        try:
            raw = asyncio.run(drive(game, args, lines, model, transcript))
        finally:
            transcript.close()
        records = archive_records(game)
        result.update(analyse(
            records, {n.lower() for n in raw["names"]}, raw["after_seq"], raw["sent"],
            raw["samples"], raw["counts"], raw["fallbacks"], args.budget, args.latency,
        ))
        result["drain_s"] = raw["drain_s"]
        result["loadavg_1m"] = raw["loadavg_1m"]
        log_text = game.read_log("server")
        result["server_log_errors"] = len(re.findall(r"Traceback \(most recent call last\)|\[EE\]",
                                                     log_text))
        ok = True
    finally:
        if game is not None:
            log(f"[{label}] stopping the game ...")
            if not game.retire(timeout=60):
                log(f"[{label}] the game did not stop: killed")
        double.stop()
        result["wall_s"] = round(time.monotonic() - t_all, 1)
        if args.keep or not ok:
            log(f"[{label}] game dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return result


# -- report -----------------------------------------------------------------------------------

ROWS = [
    ("lines sent (clients)", "lines_sent", "{:d}"),
    ("lines stored (NPC archive)", "lines_stored", "{:d}"),
    ("lines covered by a reply", "lines_covered", "{:d}"),
    ("lines never covered", "lines_never_covered", "{:d}"),
    ("reply latency p50 (s)", "latency_p50", "{:.2f}"),
    ("reply latency p95 (s)", "latency_p95", "{:.2f}"),
    ("reply latency max (s)", "latency_max", "{:.2f}"),
    ("one line per reply, oldest first: latency p50 / p95 / max (s)",
     ("fifo_latency_p50", "fifo_latency_p95", "fifo_latency_max"), "{:.2f} / {:.2f} / {:.2f}"),
    ("one line per reply, oldest first: lines never answered", "fifo_never_covered", "{:d}"),
    ("NPC replies", "npc_replies", "{:d}"),
    ("lines per reply mean / max", ("lines_per_reply_mean", "lines_per_reply_max"), "{:.1f} / {}"),
    ("fallback lines heard", "fallback_lines_heard", "{:d}"),
    ("LLM requests: reply", ("llm_requests", "reply"), "{:d}"),
    ("LLM requests: summary", ("llm_requests", "summary"), "{:d}"),
    ("LLM requests: extraction", ("llm_requests", "extraction"), "{:d}"),
    ("max context % of budget", "context_max_pct", "{:.1f}"),
    ("time above 100 % (s)", "context_above_100_s", "{:.1f}"),
    ("longest stretch above 100 % (s)", "context_above_100_longest_s", "{:.1f}"),
    ("compactions", "compactions", "{:d}"),
    ("evictions", "evictions", "{:d}"),
    ("checkpoints (at least)", "checkpoints", "{}"),
    ("line said -> stored p50 / max (s)", ("input_lag_p50", "input_lag_max"), "{:.2f} / {:.2f}"),
    ("drain used (s)", "drain_s", "{:.0f}"),
    ("server log errors", "server_log_errors", "{:d}"),
]


def _value(result, key):
    if isinstance(key, tuple) and key[0] == "llm_requests":
        return (result.get("llm_requests") or {}).get(key[1])
    if isinstance(key, tuple):
        return tuple(result.get(k) for k in key)
    return result.get(key)


def _fmt(value, fmt):
    if value is None or (isinstance(value, tuple) and any(v is None for v in value)):
        return "n/a"
    try:
        return fmt.format(*value) if isinstance(value, tuple) else fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _ratio(a, b):
    if isinstance(a, tuple):
        a, b = a[0], b[0] if isinstance(b, tuple) else b
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return "n/a"
    return f"{a / b:.2f}"


def print_report(args, results):
    print(f"\n## Tavern: {args.players} players, one line every {args.interval[0]:g}-"
          f"{args.interval[1]:g} s for {args.duration:g} s, LLM latency {args.latency:g} s, "
          f"budget {args.budget} tokens\n")
    head = ["figure"] + [r["label"] for r in results]
    if len(results) == 2:
        head.append(f"{results[0]['label']} / {results[1]['label']}")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, key, fmt in ROWS:
        values = [_value(r, key) for r in results]
        cells = [_fmt(v, fmt) for v in values]
        if len(results) == 2:
            cells.append(_ratio(values[0], values[1]))
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    for r in results:
        rule = {
            "reply_to": "a reply covers the lines its metadata reply_to names",
            "order": "replies carry no reply_to: a reply covers the player lines not covered "
                     "yet that were stored before its LLM request (its time minus the double's "
                     "latency); the 'one line per reply' rows read the same replies as the "
                     "one-call-per-line queue that made them",
            "mixed": "reply_to where a reply has it, else the lines stored before its request",
        }.get(r.get("coverage_rule"), "no replies")
        print(f"- {r['label']}: coverage rule: {rule}. ai_contrib from "
              f"{r.get('ai_contrib_module') or '?'}; lines from {r['lines_from']}; "
              f"{r.get('polls')} polls every {args.poll:g} s (checkpoints are changes seen "
              f"between polls); game start {r.get('start_s')} s, whole run {r.get('wall_s')} s; "
              f"load average {r.get('loadavg_1m')} when the talk ended.")


def parse_interval(text):
    lo, _, hi = text.partition("-")
    lo, hi = float(lo), float(hi or lo)
    if lo <= 0 or hi < lo:
        raise argparse.ArgumentTypeError("--interval wants LO-HI seconds, 0 < LO <= HI")
    return lo, hi


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--players", type=int, default=20, help="telnet players (default 20)")
    p.add_argument("--interval", type=parse_interval, default=(1.0, 3.0),
                   help="seconds between one player's lines, LO-HI, uniform (default 1-3)")
    p.add_argument("--duration", type=float, default=120, help="seconds of talk (default 120)")
    p.add_argument("--latency", type=float, default=0.5,
                   help="seconds the LLM double takes for every answer (default 0.5)")
    p.add_argument("--budget", type=int, default=8000,
                   help="the NPC's AI_MAX_CONTEXT_TOKENS (default 8000)")
    p.add_argument("--drain", type=float, default=60,
                   help="seconds to wait after the talk for the last replies (default 60)")
    p.add_argument("--poll", type=float, default=2.0,
                   help="seconds between the admin's polls of usage (default 2)")
    p.add_argument("--table-polls", action="store_true",
                   help="poll usage with aihistory too, as an admin watching it would (its "
                        "table takes the server's reactor some 150 ms a poll)")
    p.add_argument("--talk-share", type=float, default=0.3,
                   help="share of lines said with 'talk Marta = ...' rather than 'say' (0.3)")
    p.add_argument("--seed", type=int, default=1, help="seed of lines and timing (default 1)")
    p.add_argument("--env", action="append", default=[], metavar="AI_NAME=VALUE",
                   help="another setting for the game (repeatable)")
    p.add_argument("--baseline-ref", default=None, metavar="REF",
                   help="also run with ai_contrib and game_template from this git ref")
    p.add_argument("--keep", action="store_true", help="keep the game dirs (printed)")
    p.add_argument("--json", default=None, help="write the figures to this file")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    results = [run_once(args, "current")]
    if args.baseline_ref:
        tmp = Path(tempfile.mkdtemp(prefix="tavern-ref-"))
        try:
            template = extract_ref(args.baseline_ref, tmp)
            results.append(run_once(args, args.baseline_ref, python_first=tmp, template=template))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print_report(args, results)
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        Path(args.json).write_text(json.dumps({"settings": settings, "runs": results}, indent=2))
        log(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (GameError, TelnetError) as err:
        print(f"tavern benchmark failed: {err}", file=sys.stderr)
        sys.exit(1)
