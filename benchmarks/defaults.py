"""
The default install, talked to for a long time: how fast Marta answers as her memory fills.

What it measures: a real game made from ``game_template/`` exactly as ``make demo`` makes it
(``demo.gamectl.GameDir``, free loopback ports), with EVERY ``AI_*`` setting at its default:
no ``AI_*`` variable reaches the game (any in this process's environment is removed first and
named on stderr), so Marta answers through the embedded model (SmolLM2-135M-Instruct, no
``AI_LLM_BASE_URL``) with the shipped budget, preserve window, warm-up and sleep settings.
``--players`` (2) telnet players make accounts, walk into the tavern and replay a LoCoMo
conversation to her (``--conversation``, default conv-30, of the memory benchmark's report set:
the settings this measures were chosen on conv-26, of its tuning set): speaker A's lines by the odd players,
speaker B's by the even ones (player 1 and player 2 with two), each line sent as ``talk Marta =
<text>`` (cut at ``--max-chars``, 300, on a word boundary) and the next line only after her
answer (or ``--reply-timeout`` seconds, 180), as the demo does; ``--lines`` (300) lines in all.
No admin command, no sleep between sessions: what memory work happens is the NPC's own.

At the end the game is stopped (killed if it will not stop) and the server log parsed
(``demo.replay``'s regexes: every "AI reply Marta: ..." line with its seconds, prompt tokens,
reused tokens, generated tokens and seconds waited for a cache warm-up; cache warm-ups;
compactions and failed ones; emergency triggers; masking; summaries replaced by an extract).
Printed (Markdown on stdout; progress on stderr), per window of ``--window`` (40) replies in log
order: median and p95 of the server's reply seconds, median prompt tokens, median tokens
evaluated (prompt - reused), median reused share, replies that waited for a warm-up (count, max
wait), median generated tokens, memory work logged in the window (compactions, their tokens
before -> after, emergency triggers, seconds from the emergency trigger to the compaction line,
which include the pre-compaction fact extraction: log timestamps, 1 s resolution; warm-ups), and each window's median reply over the first
window's. Then the totals: wall time, compactions, warm-ups, fallback lines and timeouts the
players saw, bytes per player line (growth of ``<game>/server/ai_archive/`` plus the SQLite
database files, divided by the lines sent) and replies word-for-word identical to an earlier
reply of Marta (assistant messages with text in her archive JSONL).

Data: LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0, see ``data/locomo/NOTICE.txt``), only
the conversation turns, never its questions.

How long: our 16-line trial on a 2-core machine took 76 s (game made in 8 s, started in 18 s,
36 s of conversation: 2-3 s a line, prompts growing by about 120 tokens a line, no compaction
yet). The default 300 lines should take 15 minutes or more there, plus the compactions, which
begin once the prompt nears the budget (their cost is what this measures; not timed here yet).

Nothing is asserted: it prints figures. ``--json PATH`` writes them all (and every parsed
reply); ``--keep-game`` keeps the game directory (server log, archive, transcript).

    .venv/bin/python benchmarks/defaults.py                      # = make bench-defaults
    .venv/bin/python benchmarks/defaults.py --lines 80 --json defaults.json
"""

import argparse
import asyncio
import json
import os
import re
import secrets
import shutil
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from demo.gamectl import GameDir, GameError  # noqa: E402
from demo.locomo import load_conversation  # noqa: E402
from demo.replay import (  # noqa: E402
    ANSWER_RE,
    COMPACTION_FAIL_RE,
    COMPACTION_LOG_RE,
    NPC,
    REPLY_LOG_RE,
    WARMUP_LOG_RE,
    account_name,
    reply_record,
    run_replay,
    settle,
    stop_game,
)
from demo.telnet import TelnetError, TelnetPlayer, Transcript  # noqa: E402

#: the timestamp Evennia's logger puts at the start of every server log line
LOG_TIME_RE = re.compile(r"^(\d{2,4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
#: "AI Marta: emergency compaction triggered: 81.2% context usage" (rag_memory)
EMERGENCY_LOG_RE = re.compile(
    r"AI (?P<npc>.+?): emergency compaction triggered: (?P<usage>[\d.]+)% context usage"
)
#: "AI masking [emergency] Marta: 3 old tool outputs archived, 900 -> 700 tokens" (strategies)
MASKING_LOG_RE = re.compile(r"AI masking \[(?P<trigger>\w+)\] (?P<npc>.+?): (?P<count>\d+) old")
#: "AI summary of 13 messages failed the fidelity check (...); replaced by an extract", "...
#: was not written in time; replaced by ...", "... written as an extract of the span (not asked:
#: ...)" (ai_contrib.npc.compaction_runner): a summary whose text is the span's own lines
EXTRACT_LOG_RE = re.compile(r"AI summary of (?P<messages>\d+) messages (?:failed the fidelity "
                            r"check|was not written in time|written as an extract)")
#: "AI cache warm-up Marta: evaluated by the memory server, 1700 tokens handed to the reply
#: server" (npc.warmup; docs/design.md, "Warm-ups handed over")
HANDOVER_LOG_RE = re.compile(
    r"AI cache warm-up (?P<npc>.+?): evaluated by the memory server, (?P<tokens>\d+) tokens")
#: "AI reply Marta: on the prompt the server holds while the next is warmed (41 messages)"
HELD_LOG_RE = re.compile(r"AI reply (?P<npc>.+?): on the prompt the server holds while")
#: "AI Marta: falls asleep (idle)" / "AI Marta: wakes up (...)"
SLEEP_LOG_RE = re.compile(r"AI (?P<npc>.+?): (?P<what>falls asleep|wakes up) \(")


def log_time(line):
    """The POSIX time of a server log line's timestamp, or None."""
    m = LOG_TIME_RE.match(line)
    if not m:
        return None
    stamp = m.group(1).replace("T", " ")
    for fmt in ("%Y-%m-%d %H:%M:%S", "%y-%m-%d %H:%M:%S"):
        try:
            return datetime.strptime(stamp, fmt).timestamp()
        except ValueError:
            pass
    return None


def parse_log(text, npc=NPC):
    """
    Marta's replies and memory work in server log text, in log order.

    Returns:
        list[dict]: one per event, ``{"kind", "time" (POSIX seconds or None), ...}``: ``reply``
        (:func:`demo.replay.reply_record`'s fields), ``warm-up`` (``seconds``, ``prompt``,
        ``cached``), ``compaction`` (``trigger``, ``strategy``, ``messages``, ``before``,
        ``after``), ``compaction-failed`` (``trigger``, ``error``), ``emergency`` (``usage``
        percent), ``masking`` (``count``), ``extract`` (``messages``), ``sleep`` (``what``),
        ``handover`` (``tokens`` restored in the reply server), ``held`` (a reply on the
        prompt the reply server held meanwhile).
    """
    events = []
    for line in text.splitlines():
        at = log_time(line)
        if (m := REPLY_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "reply", "time": at, **reply_record(m)})
        elif (m := WARMUP_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "warm-up", "time": at, "seconds": float(m["seconds"]),
                           "prompt": int(m["prompt"]) if m["prompt"] else None,
                           "cached": int(m["cached"]) if m["cached"] else None})
        elif (m := COMPACTION_FAIL_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "compaction-failed", "time": at, "trigger": m["trigger"],
                           "error": m["error"].strip()})
        elif (m := COMPACTION_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "compaction", "time": at, "trigger": m["trigger"],
                           "strategy": m["strategy"] or "summary",
                           "messages": int(m["messages"]), "before": int(m["before"]),
                           "after": int(m["after"])})
        elif (m := EMERGENCY_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "emergency", "time": at, "usage": float(m["usage"])})
        elif (m := MASKING_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "masking", "time": at, "count": int(m["count"])})
        elif m := EXTRACT_LOG_RE.search(line):
            events.append({"kind": "extract", "time": at, "messages": int(m["messages"])})
        elif (m := SLEEP_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "sleep", "time": at, "what": m["what"]})
        elif (m := HANDOVER_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "handover", "time": at, "tokens": int(m["tokens"])})
        elif (m := HELD_LOG_RE.search(line)) and m["npc"] == npc:
            events.append({"kind": "held", "time": at})
    return events


def median(values):
    """The median of ``values`` (the mean of the middle two for an even count), or None."""
    return statistics.median(values) if values else None


def p95(values):
    """The nearest-rank 95th percentile of ``values``, or None."""
    if not values:
        return None
    values = sorted(values)
    return values[max(0, -(-95 * len(values) // 100) - 1)]


def compaction_seconds(events):
    """
    Seconds from each emergency trigger to the compaction (or failure) line that follows it,
    from the log's 1 s timestamps; a compaction without a trigger before it (sleep, manual)
    gets none. Returns a list aligned with the compactions and failures in ``events``.
    """
    out, trigger_at = [], None
    for e in events:
        if e["kind"] == "emergency":
            trigger_at = e["time"]
        elif e["kind"] in ("compaction", "compaction-failed"):
            ok = trigger_at is not None and e["time"] is not None and e["trigger"] == "emergency"
            out.append(e["time"] - trigger_at if ok else None)
            trigger_at = None
    return out


def window_stats(events, size=40):
    """
    Figures per window of ``size`` replies, from :func:`parse_log`'s events. The memory work
    logged after reply ``k`` and before reply ``k + 1`` counts in reply ``k + 1``'s window (it
    happened while that reply was awaited or just before); what follows the last reply counts
    in the last window.

    Returns:
        list[dict]: per window, ``{"first", "last" (1-based reply numbers), "replies",
        "median_s", "p95_s", "median_prompt", "median_evaluated", "median_reused_share",
        "median_generated", "median_cached_s" (median seconds of the replies that reused at
        least 90 % of their prompt), "misses" (replies that reused less than half of it),
        "waited" (replies that waited for a warm-up), "max_wait_s",
        "warmups", "warmup_median_s", "compactions", "compaction_failures", "tokens_before",
        "tokens_after" (summed over the window's compactions), "compaction_s" (seconds from
        trigger to compaction, each), "emergencies", "maskings", "extracts", "ratio" (median_s
        over the first window's)}``.
    """
    n_replies = sum(1 for e in events if e["kind"] == "reply")
    n_windows = max(1, -(-n_replies // size))
    buckets = [{"replies": [], "other": []} for _ in range(n_windows)]
    seconds = iter(compaction_seconds(events))
    seen = 0
    for e in events:
        if e["kind"] == "reply":
            buckets[min(seen // size, n_windows - 1)]["replies"].append(e)
            seen += 1
        else:
            if e["kind"] in ("compaction", "compaction-failed"):
                e = {**e, "duration": next(seconds)}
            buckets[min(seen // size, n_windows - 1)]["other"].append(e)
    windows = []
    for i, b in enumerate(buckets):
        rs, other = b["replies"], b["other"]
        with_prompt = [r for r in rs if r["prompt"]]
        waited = [r["waited"] for r in rs if r["waited"] > 0]
        warmups = [e["seconds"] for e in other if e["kind"] == "warm-up"]
        comps = [e for e in other if e["kind"] == "compaction"]
        windows.append({
            "first": i * size + 1,
            "last": i * size + len(rs),
            "replies": len(rs),
            "median_s": median([r["seconds"] for r in rs]),
            "p95_s": p95([r["seconds"] for r in rs]),
            "median_prompt": median([r["prompt"] for r in with_prompt]),
            "median_evaluated": median([r["prompt"] - (r["cached"] or 0) for r in with_prompt]),
            "median_reused_share": median([(r["cached"] or 0) / r["prompt"] for r in with_prompt]),
            "median_generated": median([r["generated"] for r in rs if r["generated"] is not None]),
            "median_cached_s": median([r["seconds"] for r in with_prompt
                                       if (r["cached"] or 0) >= 0.9 * r["prompt"]]),
            "misses": sum(1 for r in with_prompt if (r["cached"] or 0) < 0.5 * r["prompt"]),
            "waited": len(waited),
            "max_wait_s": max(waited) if waited else None,
            "warmups": len(warmups),
            "warmup_median_s": median(warmups),
            "compactions": len(comps),
            "compaction_failures": sum(1 for e in other if e["kind"] == "compaction-failed"),
            "tokens_before": sum(c["before"] for c in comps),
            "tokens_after": sum(c["after"] for c in comps),
            "compaction_s": [e["duration"] for e in other
                             if e["kind"] in ("compaction", "compaction-failed")],
            "emergencies": sum(1 for e in other if e["kind"] == "emergency"),
            "maskings": sum(1 for e in other if e["kind"] == "masking"),
            "extracts": sum(1 for e in other if e["kind"] == "extract"),
        })
    first = windows[0]["median_s"]
    for w in windows:
        w["ratio"] = w["median_s"] / first if first and w["median_s"] is not None else None
    return windows


def warmup_waits(events):
    """
    Each reply that waited for a cache warm-up, beside that warm-up: the warm-up's log line
    comes when it ends, so the waiting reply's is the first reply line after it. A reply that
    takes a warm-up's work waits for what is left of it, and the warm-up's own seconds are what
    evaluating the same tokens took the server: waiting longer than that would have been slower
    than evaluating them itself.

    Returns:
        list[dict]: ``{"waited" (s), "warmup_s", "warmup_evaluated" (tokens the warm-up
        evaluated), "reply_evaluated" (tokens the reply still evaluated), "reply_s"}``.
    """
    out, last = [], None
    for e in events:
        if e["kind"] == "warm-up":
            last = e
        elif e["kind"] == "reply":
            if e["waited"] > 0:
                evaluated = None if e["prompt"] is None else e["prompt"] - (e["cached"] or 0)
                out.append({
                    "waited": e["waited"],
                    "warmup_s": last["seconds"] if last else None,
                    "warmup_evaluated": (last["prompt"] - (last["cached"] or 0)
                                         if last and last["prompt"] is not None else None),
                    "reply_evaluated": evaluated,
                    "reply_s": e["seconds"],
                })
            last = None
    return out


def archive_replies(archive_dir):
    """
    The text of every assistant message with text in the archive JSONL files under
    ``archive_dir``, per file, in archive order: ``{file name: [text, ...]}``.
    """
    out = {}
    for path in sorted(Path(archive_dir).glob("*.jsonl")):
        texts = []
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                msg = record.get("msg") if record.get("kind") == "message" else None
                if msg and msg.get("role") == "assistant" and (msg.get("content") or "").strip():
                    texts.append(msg["content"])
        out[path.name] = texts
    return out


def duplicate_replies(texts):
    """
    How many of ``texts`` (one NPC's replies, in order) are word-for-word identical to an
    earlier one (whitespace runs count as one space, case and punctuation count).

    Returns:
        tuple[int, list[str]]: the count and the distinct repeated texts, most repeated first.
    """
    seen, repeats = set(), {}
    for text in texts:
        key = " ".join(text.split())
        if key in seen:
            repeats[key] = repeats.get(key, 0) + 1
        seen.add(key)
    ordered = sorted(repeats, key=lambda k: -repeats[k])
    return sum(repeats.values()), ordered


def tree_bytes(path):
    """Bytes in the files under ``path`` (0 if missing)."""
    path = Path(path)
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def db_bytes(game):
    """Bytes of the game's SQLite database files (the main file, its WAL and journal)."""
    server = game.path / "server"
    return sum(p.stat().st_size for p in server.glob("*.db3*") if p.is_file())


def cap_text(text, limit):
    """``text`` cut to at most ``limit`` characters, at a word boundary where there is one."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut if len(cut) > limit // 2 else text[:limit]


def progress(text):
    print(text, file=sys.stderr, flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Reply speed of the default install over a long LoCoMo conversation.")
    parser.add_argument("--lines", type=int, default=300, help="player lines (default 300)")
    parser.add_argument("--conversation", default="conv-30",
                        help="LoCoMo sample_id (conv-30; conv-26 to tune)")
    parser.add_argument("--players", type=int, default=2, help="telnet players, >= 2 (default 2)")
    parser.add_argument("--reply-timeout", type=float, default=180,
                        help="seconds a player waits for Marta's answer (default 180)")
    parser.add_argument("--max-chars", type=int, default=300,
                        help="longest line a player says, in characters (default 300)")
    parser.add_argument("--window", type=int, default=40, help="replies per window (default 40)")
    parser.add_argument("--game-dir", default=str(ROOT / "bench-game"),
                        help="where to make the game (default ./bench-game, replaced)")
    parser.add_argument("--port-base", type=int, default=None,
                        help="telnet port; the game takes 7 from it (default: a free block)")
    parser.add_argument("--keep-game", action="store_true", help="keep the game directory")
    parser.add_argument("--json", metavar="PATH", help="write every figure here")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="one AI_* setting away from its default, for a comparison run "
                        "(e.g. --set PROMPT_CACHE_WARMUP=false); repeatable; printed with the "
                        "figures")
    args = parser.parse_args(argv)
    if args.players < 2:
        parser.error("--players must be at least 2")
    return args


async def replay(game, args, turns, conversation, transcript, counts):
    """Log the players in and replay ``turns``; fills ``counts`` (lines, replies, ...)."""
    taken = {game.superuser[0].lower()}
    players = []
    for i in range(args.players):
        speaker = conversation.speaker_a if i % 2 == 0 else conversation.speaker_b
        name = account_name(speaker, taken)
        players.append((TelnetPlayer(name, game.ports.telnet, transcript=transcript),
                        f"pw-{secrets.token_hex(6)}"))
    try:
        for player, password in players:
            await player.connect()
            await player.login(player.label, password, create=True)
            await player.command("tavern")
        counts["archive_bytes_before"] = tree_bytes(game.path / "server" / "ai_archive")
        counts["db_bytes_before"] = db_bytes(game)
        a_players, b_players = players[0::2], players[1::2]
        said = {conversation.speaker_a: 0, conversation.speaker_b: 0}
        t0 = time.monotonic()
        for i, turn in enumerate(turns):
            group = a_players if turn.speaker == conversation.speaker_a else b_players
            player = group[said.get(turn.speaker, 0) % len(group)][0]
            said[turn.speaker] = said.get(turn.speaker, 0) + 1
            await settle([p for p, _ in players])
            player.discard()
            sent = time.monotonic()
            player.send(f"talk {NPC} = {cap_text(turn.text, args.max_chars)}")
            counts["lines"] += 1
            match, _ = await player.read_until(ANSWER_RE, timeout=args.reply_timeout)
            waited = time.monotonic() - sent
            outcome = ("timeout" if match is None
                       else "fallback" if match.group("fallback") else "reply")
            counts[{"reply": "replies", "fallback": "fallbacks", "timeout": "timeouts"}[outcome]] += 1
            if match is None:
                transcript.note(f"no answer from {NPC} within {args.reply_timeout:.0f} s")
            counts["client_seconds"].append(round(waited, 2))
            progress(f"  [{i + 1:3d}/{len(turns)}] {turn.dia_id:>7} {player.label:<10} "
                     f"{outcome} in {waited:5.1f} s")
        counts["conversation_s"] = time.monotonic() - t0
        # the last answer may reach the other players a little later
        await settle([p for p, _ in players])
    finally:
        for player, _ in players:
            await player.close()


def fmt(value, spec=".2f", none="-"):
    return none if value is None else format(value, spec)


def print_report(result):
    windows = result["windows"]
    print(f"\n## Default install, LoCoMo {result['conversation']}: {result['lines_sent']} lines, "
          f"{result['players']} players\n")
    print(f"Settings: {result['settings']}.\n")
    print("| replies | median s | p95 s | median prompt | median evaluated | median reused | "
          "median generated | median s, >= 90 % reused | misses (< 50 % reused) | "
          "waited for warm-up (n, max s) | warm-ups (n, median s) | "
          "compactions (tokens before -> after) | emergency -> compaction s | other memory work"
          " | median / first |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---:|")
    for w in windows:
        comps = (f"{w['compactions']} ({w['tokens_before']} -> {w['tokens_after']})"
                 if w["compactions"] else "0")
        if w["compaction_failures"]:
            comps += f", {w['compaction_failures']} failed"
        secs = ", ".join(fmt(s, ".0f", "?") for s in w["compaction_s"]) or "-"
        other = ", ".join(part for part in (
            f"{w['emergencies']} emergency triggers" if w["emergencies"] else "",
            f"{w['maskings']} maskings" if w["maskings"] else "",
            f"{w['extracts']} summaries replaced by extracts" if w["extracts"] else "",
        ) if part) or "-"
        print(f"| {w['first']}-{w['last']} | {fmt(w['median_s'])} | {fmt(w['p95_s'])} | "
              f"{fmt(w['median_prompt'], '.0f')} | {fmt(w['median_evaluated'], '.0f')} | "
              f"{fmt(w['median_reused_share'], '.0%')} | {fmt(w['median_generated'], '.0f')} | "
              f"{fmt(w['median_cached_s'])} | {w['misses']} | "
              f"{w['waited']}, {fmt(w['max_wait_s'])} | "
              f"{w['warmups']}, {fmt(w['warmup_median_s'])} | {comps} | {secs} | {other} | "
              f"{fmt(w['ratio'], '.2f')}x |")
    t = result["totals"]
    print()
    print(f"- wall time: {t['wall_s']:.0f} s in all ({t['conversation_s']:.0f} s of conversation,"
          f" game made in {t['create_s']:.0f} s, started in {t['start_s']:.0f} s, stopped in "
          f"{t['stop_s']:.0f} s)")
    print(f"- replies logged by the server: {t['server_replies']}; players heard "
          f"{t['replies_heard']} replies, {t['fallbacks']} fallback lines, timed out on "
          f"{t['timeouts']}")
    print(f"- compactions: {t['compactions']}" + (f" ({t['compactions_by_trigger']})"
                                                  if t["compactions"] else "")
          + f", failed: {t['compaction_failures']}")
    print(f"- cache warm-ups: {t['warmups']}, median {fmt(t['warmup_median_s'])} s; replies that "
          f"waited for one: {t['replies_waited']}, max {fmt(t['max_wait_s'])} s; handed over "
          f"by the memory server: {t['handovers']}, replies meanwhile on the prompt the reply "
          f"server held: {t['held_replies']}")
    for wait in t["warmup_waits"]:
        print(f"  - waited {fmt(wait['waited'])} s for a warm-up that evaluated "
              f"{fmt(wait['warmup_evaluated'], '.0f')} tokens in {fmt(wait['warmup_s'])} s; the "
              f"reply then evaluated {fmt(wait['reply_evaluated'], '.0f')} tokens, "
              f"{fmt(wait['reply_s'])} s in all")
    print(f"- replies logged with at most 1 generated token: {t['replies_1_generated']}")
    print(f"- bytes per player line: {fmt(t['bytes_per_line'], ',.0f')} (archive "
          f"+{t['archive_growth']:,} B, database +{t['db_growth']:,} B, over "
          f"{result['lines_sent']} lines)")
    print(f"- replies word-for-word identical to an earlier reply: {t['duplicate_replies']} of "
          f"{t['archived_replies']} archived replies")
    for text in t["duplicate_examples"][:3]:
        print(f"  - repeated: {text[:100]!r}")


async def run(args):
    removed = sorted(k for k in os.environ if k.startswith("AI_"))
    for key in removed:
        del os.environ[key]
    if removed:
        progress(f"removed from the environment so every AI_* setting is its default: "
                 f"{', '.join(removed)}")
    conversation = load_conversation(args.conversation)
    turns = conversation.turns[: args.lines]
    if len(turns) < args.lines:
        progress(f"note: {conversation.sample_id} has only {len(conversation.turns)} lines")
    t_all = time.monotonic()
    progress(f"Making a fresh game in {args.game_dir} ...")
    t0 = time.monotonic()
    overrides = dict(item.split("=", 1) for item in args.set)
    env = {f"AI_{name.upper().removeprefix('AI_')}": value for name, value in overrides.items()}
    if env:
        progress(f"settings away from their defaults: {env}")
    game = GameDir.create(args.game_dir, port_base=args.port_base, env=env)
    create_s = time.monotonic() - t0
    counts = {"lines": 0, "replies": 0, "fallbacks": 0, "timeouts": 0, "client_seconds": [],
              "conversation_s": 0.0, "archive_bytes_before": 0, "db_bytes_before": 0}
    transcript = Transcript(game.path / "transcript.txt")
    failed, start_s, stop_s = None, 0.0, 0.0
    try:
        progress(f"Starting Evennia on 127.0.0.1:{game.ports.telnet} (all AI_* settings at "
                 "their defaults) ...")
        start_s = game.start()
        progress(f"Replaying {len(turns)} lines of LoCoMo {conversation.sample_id} with "
                 f"{args.players} players ...")
        await replay(game, args, turns, conversation, transcript, counts)
    except (TelnetError, GameError, asyncio.TimeoutError) as err:
        failed = err
        progress(f"stopped early: {err!r}")
    finally:
        transcript.close()
        progress("Stopping the game ...")
        stop_s = stop_game(game)
    log_text = game.read_log("server")
    events = parse_log(log_text)
    archive_dir = game.path / "server" / "ai_archive"
    archive_growth = tree_bytes(archive_dir) - counts["archive_bytes_before"]
    db_growth = db_bytes(game) - counts["db_bytes_before"]
    texts = [t for ts in archive_replies(archive_dir).values() for t in ts]
    dup_count, dup_examples = duplicate_replies(texts)
    replies = [e for e in events if e["kind"] == "reply"]
    comps = [e for e in events if e["kind"] == "compaction"]
    warmups = [e["seconds"] for e in events if e["kind"] == "warm-up"]
    waited = [r["waited"] for r in replies if r["waited"] > 0]
    by_trigger = {}
    for c in comps:
        by_trigger[c["trigger"]] = by_trigger.get(c["trigger"], 0) + 1
    result = {
        "conversation": conversation.sample_id,
        "players": args.players,
        "lines_sent": counts["lines"],
        "settings": ("every AI_* setting at its default (no AI_* environment variable)"
                     if not env else f"defaults except {env}"),
        "removed_environment": removed,
        "windows": window_stats(events, args.window),
        "totals": {
            "wall_s": time.monotonic() - t_all,
            "create_s": create_s,
            "start_s": start_s,
            "stop_s": stop_s,
            "conversation_s": counts["conversation_s"],
            "server_replies": len(replies),
            "replies_heard": counts["replies"],
            "fallbacks": counts["fallbacks"],
            "timeouts": counts["timeouts"],
            "compactions": len(comps),
            "compactions_by_trigger": ", ".join(f"{k}: {v}" for k, v in sorted(by_trigger.items())),
            "compaction_failures": sum(1 for e in events if e["kind"] == "compaction-failed"),
            "warmups": len(warmups),
            "warmup_median_s": median(warmups),
            "replies_waited": len(waited),
            "max_wait_s": max(waited) if waited else None,
            "warmup_waits": warmup_waits(events),
            "handovers": sum(1 for e in events if e["kind"] == "handover"),
            "held_replies": sum(1 for e in events if e["kind"] == "held"),
            "replies_1_generated": sum(1 for r in replies
                                       if r["generated"] is not None and r["generated"] <= 1),
            "archive_growth": archive_growth,
            "db_growth": db_growth,
            "bytes_per_line": ((archive_growth + db_growth) / counts["lines"]
                               if counts["lines"] else None),
            "archived_replies": len(texts),
            "duplicate_replies": dup_count,
            "duplicate_examples": dup_examples,
        },
        "client_seconds": counts["client_seconds"],
        "events": events,
        "error": repr(failed) if failed else None,
        "game_dir": str(game.path) if args.keep_game else None,
    }
    print_report(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        progress(f"figures written to {args.json}")
    if args.keep_game:
        progress(f"game kept in {game.path} (server log: {game.log_path('server')})")
    else:
        shutil.rmtree(game.path, ignore_errors=True)
    return 1 if failed else 0


def main(argv=None):
    return run_replay(run(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
