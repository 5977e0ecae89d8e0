"""
The demo: a real Evennia game, an LLM innkeeper, two telnet players and a long conversation.

``python -m demo`` (what ``make demo`` runs; ``make install`` installed everything first):

1. makes a fresh game under ``./demo-game`` from ``game_template/`` and starts Evennia on
   127.0.0.1 with free ports; the innkeeper Marta answers through the embedded local model
   (SmolLM2-135M-Instruct) unless ``AI_LLM_BASE_URL`` points elsewhere;
2. connects two players over telnet (two accounts, made with ``create``) and an admin (the
   superuser), and has the players replay a LoCoMo conversation to Marta line by line (speaker
   A's lines by player 1, speaker B's by player 2), each waiting for Marta's answer. The token
   budget is small (1500 tokens) so emergency compaction happens mid-conversation;
3. between two LoCoMo sessions the admin puts Marta to sleep (``aisleep``), which compacts her
   history during the sleep phase, then wakes her (``aiwake``);
4. at the end the admin runs ``aihistory``, ``compact``, ``compact/force``,
   ``aihistory <npc>/journal`` and ``aimemory``;
5. writes the transcript of every connection to ``./demo-output/``, prints its tail and a
   summary (lines, replies, compactions with tokens before -> after, wall times) and stops the
   server, unless ``--keep-running``.

The conversation data is LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0, see
``data/locomo/NOTICE.txt``); only its conversation turns are used, never its questions.
"""

import argparse
import asyncio
import json
import re
import secrets
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .gamectl import REPO_ROOT, GameDir, GameError
from .locomo import list_conversations, load_conversation
from .replay import (
    ANSWER_RE,
    COMPACTION_LOG_RE,
    NPC,
    REPLY_LOG_RE,
    WARMUP_LOG_RE,
    account_name,
    compactions_from_log,
    invented_quotes_from_log,
    reply_record,
    run_replay,
    settle,
    stop_game,
)
from .telnet import TelnetError, TelnetPlayer, Transcript

#: the "Tokens" row of aihistory: used / budget (percent)
TOKENS_ROW_RE = re.compile(r"Tokens\s*\|\s*(\d+) / (\d+) \(([\d.]+)%\)")


@dataclass
class Stats:
    """What the demo measured (seconds are wall-clock seconds)."""

    lines_sent: dict = field(default_factory=dict)  # player label -> lines said to Marta
    replies: int = 0  # model-written replies received
    fallbacks: int = 0  # fallback lines ("Marta seems lost in thought.")
    timeouts: int = 0  # lines with no answer within the reply timeout
    reply_seconds: list = field(default_factory=list)  # per answered line
    sleep_session: int | None = None  # the session after which Marta slept
    timings: dict = field(default_factory=dict)  # phase -> seconds
    #: the server's replies in log order: {"seconds", "prompt", "cached", "generated" (tokens
    #: or None), "waited" (seconds waiting for a cache warm-up), "after_compaction" (a
    #: compaction was logged before it), "follows_reply" (the event logged before it was a
    #: reply, not a compaction)}
    server_replies: list = field(default_factory=list)
    #: the server's cache warm-ups after compactions, in log order: {"seconds", "prompt",
    #: "cached"}; they are not replies, and a reply after one still follows a compaction
    warmups: list = field(default_factory=list)
    compactions_seen: int = 0
    last_event: str = ""
    #: invented quotes refused and repaired, from the server log (invented_quotes_from_log)
    invented_quotes: dict | None = None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description="Run a real Evennia game whose innkeeper is an LLM NPC, and talk to her.",
    )
    parser.add_argument(
        "--lines",
        type=int,
        default=60,
        help="player lines to replay from the conversation (default 60)",
    )
    parser.add_argument(
        "--conversation",
        default="conv-26",
        help="LoCoMo sample_id to replay (default conv-26; --list shows all)",
    )
    parser.add_argument("--list", action="store_true", help="list the conversations and exit")
    parser.add_argument(
        "--keep-running",
        action="store_true",
        help="leave the game running afterwards and print how to connect",
    )
    parser.add_argument(
        "--stop", action="store_true", help="stop a game left running by --keep-running, and exit"
    )
    parser.add_argument("--game-dir", default="demo-game", help="where to make the game")
    parser.add_argument("--output-dir", default="demo-output", help="where to write transcripts")
    parser.add_argument(
        "--port-base",
        type=int,
        default=None,
        help="telnet port; web +1, websocket +2, internal +5 and +6 (default: a free block)",
    )
    parser.add_argument(
        "--max-context-tokens",
        type=int,
        default=1500,
        help="Marta's token budget (AI_MAX_CONTEXT_TOKENS, default 1500)",
    )
    parser.add_argument(
        "--preserve-window",
        type=int,
        default=6,
        help="messages kept verbatim by a compaction (default 6)",
    )
    parser.add_argument(
        "--sleep-threshold",
        type=float,
        default=0.4,
        help="fraction of the budget above which sleeping compacts (default 0.4)",
    )
    parser.add_argument(
        "--summary-max-tokens",
        type=int,
        default=200,
        help="tokens a compaction summary may have (default 200)",
    )
    parser.add_argument(
        "--sleep-after-idle",
        type=float,
        default=300,
        help="seconds without speech before Marta falls asleep by herself",
    )
    parser.add_argument(
        "--reply-timeout",
        type=float,
        default=180,
        help="seconds a player waits for Marta's answer (default 180)",
    )
    parser.add_argument(
        "--strategy",
        default=None,
        help="Marta's compaction strategy (AI_COMPACT_STRATEGY: summary, mask, hybrid, cascade, "
        "replace_all; default summary)",
    )
    parser.add_argument("--tail", type=int, default=40, help="transcript lines to print at the end")
    return parser.parse_args(argv)


def game_environment(args):
    """The AI_* settings of the demo game (see game_template/server/conf/settings.py)."""
    return {
        "AI_MAX_CONTEXT_TOKENS": str(args.max_context_tokens),
        "AI_COMPACT_PRESERVE_WINDOW": str(args.preserve_window),
        "AI_COMPACT_SLEEP_THRESHOLD": str(args.sleep_threshold),
        "AI_SLEEP_AFTER_IDLE": str(args.sleep_after_idle),
        "AI_COMPACT_SUMMARY_MAX_TOKENS": str(args.summary_max_tokens),
        **({"AI_COMPACT_STRATEGY": args.strategy} if args.strategy else {}),
    }


def memory_query(turns):
    """A query for ``aimemory``: the longest capitalised word said early in the replay."""
    words = [
        w.strip(".,!?;:'\"()").removesuffix("'s") for turn in turns[: max(1, len(turns) // 3)]
        for w in turn.text.split()
    ]
    names = [w for w in words if len(w) > 3 and w[:1].isupper() and w[1:].islower()]
    return max(names, key=len) if names else "name"


async def admin_compact(admin, command, timeout=300):
    """
    Run an admin's ``compact`` command; while an emergency compaction is still under way (the
    last lines may have set one off) the admin waits and asks again, as an admin would.
    """
    deadline = time.monotonic() + timeout
    while True:
        text = await admin.command(command, until=r"Compact(?:ed|ion of)[^\n]*", timeout=timeout)
        if "already compacting" not in text or time.monotonic() >= deadline:
            return text
        await asyncio.sleep(5)


async def token_usage(admin):
    """Marta's token use from ``aihistory``: ``(used, budget, percent)`` or None."""
    text = await admin.command(f"aihistory {NPC}", until=r"Breaker", timeout=30)
    match = TOKENS_ROW_RE.search(text)
    return (int(match.group(1)), int(match.group(2)), float(match.group(3))) if match else None


async def say_to_marta(player, text, stats, timeout, transcript):
    """
    One player line and Marta's answer; updates ``stats``.

    Returns:
        tuple[str, float]: ``"reply"``, ``"fallback"`` or ``"timeout"``, and the seconds waited.
    """
    t0 = time.monotonic()
    player.discard()  # what arrived before (e.g. the other player's exchange) is transcript only
    player.send(f"talk {NPC} = {text}")
    match, _ = await player.read_until(ANSWER_RE, timeout=timeout)
    elapsed = time.monotonic() - t0
    stats.lines_sent[player.label] = stats.lines_sent.get(player.label, 0) + 1
    if match is None:
        stats.timeouts += 1
        transcript.note(f"no answer from {NPC} within {timeout:.0f} s")
        return "timeout", elapsed
    stats.reply_seconds.append(elapsed)
    if match.group("fallback"):
        stats.fallbacks += 1
        return "fallback", elapsed
    stats.replies += 1
    return "reply", elapsed


async def sleep_and_wake(
    admin, stats, session, transcript, threshold_pct, usage=None, timeout=300
):
    """
    Put Marta to sleep, let her sleep phase run, wake her.

    Above the sleep threshold the demo waits for the admin's report of what the sleep phase did
    (``aisleep`` sends it when the phase ends); below it there is nothing to wait for, so she
    is woken after a short nap. ``usage`` is her token use as :func:`token_usage` returns it
    (asked for here when None).
    """
    usage = usage or await token_usage(admin)
    transcript.note(
        f"--- after session {session}: {NPC} goes to sleep "
        f"(context {usage[2] if usage else '?'}% of the budget) ---"
    )
    # an admin in the NPC's room sees "dozes off" instead of the confirmation
    await admin.command(
        f"aisleep {NPC}", until=rf"{NPC} (falls asleep|is already asleep|dozes off)", timeout=30
    )
    stats.sleep_session = session
    if usage and usage[2] >= threshold_pct:
        # the admin who ran aisleep is told what the sleep phase did when it ends (or that she
        # woke rested before it started: an emergency compaction under way when she fell asleep
        # can leave it nothing to do); the compaction line itself is reported by
        # report_compactions
        match, _ = await admin.read_until(rf"{NPC}'s sleep: (?P<line>.*)", timeout=timeout)
        if match is None:
            note = f"no sleep report within {timeout} s"
        elif "compacted" in match.group("line"):
            note = None
        else:
            note = match.group("line").strip()
    else:
        await asyncio.sleep(5)
        note = f"below the sleep threshold ({threshold_pct:.0f}%): nothing to compact"
    if note:
        transcript.note(f"sleep phase: {note}")
        print(f"        ** sleep phase: {note}", flush=True)
    await admin.command(f"aiwake {NPC}", until=rf"{NPC} (wakes up|is already awake)", timeout=30)


def replies_from_log(text, stats):
    """
    Add the replies and compactions logged in ``text`` to ``stats.server_replies``, in log
    order, and the cache warm-ups to ``stats.warmups``; return the new replies.
    """
    events = sorted(
        [(m.start(), "reply", m) for m in REPLY_LOG_RE.finditer(text) if m["npc"] == NPC]
        + [(m.start(), "compaction", m) for m in COMPACTION_LOG_RE.finditer(text)]
        + [(m.start(), "warm-up", m) for m in WARMUP_LOG_RE.finditer(text) if m["npc"] == NPC],
        key=lambda event: event[0],
    )
    new = []
    for _, kind, m in events:
        if kind == "warm-up":
            stats.warmups.append({
                "seconds": float(m["seconds"]),
                "prompt": int(m["prompt"]) if m["prompt"] else None,
                "cached": int(m["cached"]) if m["cached"] else None,
            })
            continue
        if kind == "compaction":
            stats.compactions_seen += 1
        else:
            reply = {
                **reply_record(m),
                "after_compaction": stats.compactions_seen > 0,
                "follows_reply": stats.last_event == "reply",
            }
            stats.server_replies.append(reply)
            new.append(reply)
        stats.last_event = kind
    return new


def describe_server_reply(reply):
    """``"server 1.2 s, prompt 812 tokens, 95% reused"`` for one logged reply."""
    text = f"server {reply['seconds']:.1f} s"
    if reply["prompt"]:
        text += (f", prompt {reply['prompt']} tokens, "
                 f"{reply['cached'] / reply['prompt']:.0%} reused")
    return text


def cache_summary(replies):
    """
    The prompt-cache figures of the summary.

    Returns:
        dict: ``{"median_before": float | None, "median_after": float | None (seconds, before
        and after the first compaction), "ratio": float | None (after / before), "reused":
        float | None (share of prompt tokens reused on replies that follow a reply with no
        compaction in between), "reused_replies": int, "evaluated_before": int | None,
        "evaluated_after": int | None (median prompt tokens the server evaluated rather than
        reused, before and after the first compaction: unlike seconds, they do not depend on
        what else the machine is doing)}``.
    """
    def median(values):
        values = sorted(values)
        return values[len(values) // 2] if values else None

    before = median([r["seconds"] for r in replies if not r["after_compaction"]])
    after = median([r["seconds"] for r in replies if r["after_compaction"]])
    steady = [r for r in replies if r["follows_reply"] and r["prompt"]]
    prompt = sum(r["prompt"] for r in steady)

    def evaluated(after):
        return median([r["prompt"] - (r["cached"] or 0) for r in replies
                       if r["prompt"] and r["after_compaction"] == after])

    return {
        "evaluated_before": evaluated(False),
        "evaluated_after": evaluated(True),
        "median_before": before,
        "median_after": after,
        "ratio": after / before if before and after else None,
        "reused": sum(r["cached"] for r in steady) / prompt if prompt else None,
        "reused_replies": len(steady),
    }


def report_compactions(game, offset, transcript, stats=None):
    """
    Print and note the compactions (and, given ``stats``, the replies) logged since byte
    ``offset``; return the new offset.
    """
    text, end = game.read_new("server", offset)
    if stats is not None:
        for reply in replies_from_log(text, stats):
            print(f"        .. {describe_server_reply(reply)}", flush=True)
    done, failed = compactions_from_log(text)
    for c in done:
        line = (
            f"compaction [{c['trigger']}, {c['strategy']}]: {c['messages']} messages, "
            f"{c['before']} -> {c['after']} tokens"
        )
        print(f"        ** {line}", flush=True)
        transcript.note(line)
    for f in failed:
        line = f"compaction [{f['trigger']}] failed: {f['error']}"
        print(f"        ** {line}", flush=True)
        transcript.note(line)
    return end


async def run_conversation(game, args, conversation, transcript, stats):
    """Log everyone in, replay the lines, sleep once between sessions, finish with admin commands."""
    turns = conversation.turns[: args.lines]
    taken = {game.superuser[0].lower()}
    players = {}
    for speaker in (conversation.speaker_a, conversation.speaker_b):
        name = account_name(speaker, taken)
        password = f"pw-{secrets.token_hex(6)}"  # never all digits: Django refuses those
        players[speaker] = (TelnetPlayer(name, game.ports.telnet, transcript=transcript), password)
    admin = TelnetPlayer(game.superuser[0], game.ports.telnet, transcript=transcript)
    try:
        await admin.connect()
        await admin.login(*game.superuser)
        for speaker, (player, password) in players.items():
            await player.connect()
            await player.login(player.label, password, create=True)
            await player.command("tavern")
        transcript.note(
            f"replaying {len(turns)} lines of LoCoMo {conversation.sample_id} "
            f"({conversation.speaker_a} and {conversation.speaker_b}) to {NPC}"
        )
        sleep_threshold_pct = args.sleep_threshold * 100
        log_offset = game.log_size("server")
        t_conv = time.monotonic()
        for i, turn in enumerate(turns):
            if i and turn.session != turns[i - 1].session:
                transcript.note(f"--- session {turn.session} ({turn.date}) ---")
                # sleep once, at the first session break where sleeping has something to compact
                if stats.sleep_session is None:
                    usage = await token_usage(admin)
                    last_break = turn.session == turns[-1].session
                    if usage and (usage[2] >= sleep_threshold_pct or last_break):
                        await sleep_and_wake(
                            admin,
                            stats,
                            turns[i - 1].session,
                            transcript,
                            sleep_threshold_pct,
                            usage,
                        )
                        log_offset = report_compactions(game, log_offset, transcript, stats)
            player, _ = players[turn.speaker]
            await settle([p for p, _ in players.values()])
            outcome, elapsed = await say_to_marta(
                player, turn.text, stats, args.reply_timeout, transcript
            )
            print(
                f"  [{i + 1:3d}/{len(turns)}] {turn.dia_id:>6} {player.label:<10} "
                f"-> {NPC}: {outcome} in {elapsed:5.1f} s",
                flush=True,
            )
            log_offset = report_compactions(game, log_offset, transcript, stats)
        stats.timings["conversation"] = time.monotonic() - t_conv
        if stats.sleep_session is None:
            # the lines ended before a session break: sleep now, after the last one
            await sleep_and_wake(admin, stats, turns[-1].session, transcript, sleep_threshold_pct)
            log_offset = report_compactions(game, log_offset, transcript, stats)

        transcript.note("--- admin commands ---")
        await admin.command(f"aihistory {NPC}", quiet=1.5, timeout=30)
        await admin_compact(admin, f"compact {NPC}")
        await admin_compact(admin, f"compact/force {NPC}")
        await admin.command(f"aihistory {NPC}", quiet=1.5, timeout=30)
        # long-term memory: the journal and what the NPC would recall for a topic of the
        # conversation (the archive and Mem0, as a reply reads them)
        await admin.command(f"aihistory {NPC}/journal", quiet=1.5, timeout=30)
        topic = memory_query(turns)
        await admin.command(
            f"aimemory {NPC} {topic}",
            until=r"(would recall|search failed)[^\n]*\n(\([^\n]*\n)?(\+[^\n]*\n)?",
            timeout=120,
        )
        await admin.read_quiet(quiet=1.0, timeout=10)  # the rest of the table
    finally:
        for player, _ in players.values():
            await player.close()
        await admin.close()
    return {p.label: pw for p, pw in players.values()}


def print_summary(args, game, conversation, stats, compactions, failures, transcript_path):
    total_lines = sum(stats.lines_sent.values())
    print("\n=== Summary ===")
    print(f"game:          {game.path} (telnet 127.0.0.1:{game.ports.telnet})")
    print(
        f"conversation:  LoCoMo {conversation.sample_id} ({conversation.speaker_a} & "
        f"{conversation.speaker_b}), {total_lines} lines sent ("
        + ", ".join(f"{k}: {v}" for k, v in stats.lines_sent.items())
        + ")"
    )
    print(
        f"answers:       {stats.replies} model replies, {stats.fallbacks} fallback lines, "
        f"{stats.timeouts} unanswered"
    )
    if stats.reply_seconds:
        rs = sorted(stats.reply_seconds)
        print(
            f"answer time:   median {rs[len(rs) // 2]:.1f} s, max {rs[-1]:.1f} s "
            "(includes any compaction run before the answer)"
        )
    print(
        f"budget:        {args.max_context_tokens} tokens, preserve window "
        f"{args.preserve_window} messages, sleep threshold {args.sleep_threshold:.0%}"
    )
    by_trigger = {}
    for c in compactions:
        by_trigger.setdefault(c["trigger"], []).append(c)
    print(
        f"compactions:   {len(compactions)}"
        + (
            " (" + ", ".join(f"{t}: {len(v)}" for t, v in sorted(by_trigger.items())) + ")"
            if compactions
            else ""
        )
    )
    for c in compactions:
        print(
            f"   [{c['trigger']:<9}] {c['strategy']:<10} {c['messages']:3d} messages, "
            f"{c['before']} -> {c['after']} tokens"
        )
    for f in failures:
        print(f"   [{f['trigger']:<9}] FAILED: {f['error']}")
    quotes = stats.invented_quotes
    if quotes is not None:
        print(f"quotes:        {quotes['summaries']} summaries gave {quotes['refused']} quotes "
              "that are not their speaker's words and were replaced by an extract; "
              f"{quotes['repaired']} such quotes removed from stored texts by the sleep's repair")
    if stats.sleep_session is not None:
        print(f"sleep:         after session {stats.sleep_session}")
    cache = cache_summary(stats.server_replies)
    if cache["median_before"] is not None or cache["median_after"] is not None:
        def shown(seconds):
            return "-" if seconds is None else f"{seconds:.2f} s"

        print(
            f"reply time:    median {shown(cache['median_before'])} before the first compaction, "
            f"{shown(cache['median_after'])} after"
            + (f" ({cache['ratio']:.2f}x)" if cache["ratio"] else "")
            + " (the server's time per reply)"
        )
    if cache["evaluated_before"] is not None or cache["evaluated_after"] is not None:
        def tokens(value):
            return "-" if value is None else f"{value} tokens"

        print(f"prompt work:   median {tokens(cache['evaluated_before'])} evaluated (not reused) "
              f"per reply before the first compaction, {tokens(cache['evaluated_after'])} after")
    if cache["reused"] is not None:
        print(
            f"prompt cache:  {cache['reused']:.0%} of prompt tokens reused on the "
            f"{cache['reused_replies']} replies that follow a reply with no compaction between"
        )
    if stats.warmups:
        seconds = sorted(w["seconds"] for w in stats.warmups)
        print(f"cache warm-up: {len(seconds)} after compactions, median "
              f"{seconds[len(seconds) // 2]:.2f} s (AI_PROMPT_CACHE_WARMUP)")
    print("wall time:     " + ", ".join(f"{k} {v:.1f} s" for k, v in stats.timings.items()))
    print(f"transcript:    {transcript_path}")


async def _run(args):
    conversation = load_conversation(args.conversation)
    if len(conversation.turns) < args.lines:
        print(f"note: {conversation.sample_id} has only {len(conversation.turns)} lines")
    stats = Stats()
    t_all = time.monotonic()
    out_dir = Path(args.output_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    transcript_path = out_dir / f"transcript-{stamp}.txt"

    print(f"Making a fresh game in {args.game_dir} ...", flush=True)
    t0 = time.monotonic()
    game = GameDir.create(args.game_dir, port_base=args.port_base, env=game_environment(args))
    stats.timings["create"] = time.monotonic() - t0
    print(f"Starting Evennia on 127.0.0.1:{game.ports.telnet} ...", flush=True)
    transcript = Transcript(transcript_path)
    transcript.note(
        f"game {game.path}, telnet 127.0.0.1:{game.ports.telnet}, "
        f"settings {json.dumps(game_environment(args))}"
    )
    passwords, failed = {}, None
    try:
        stats.timings["start"] = game.start()
        passwords = await run_conversation(game, args, conversation, transcript, stats)
    except (TelnetError, GameError, asyncio.TimeoutError) as err:
        failed = err
        transcript.note(f"demo stopped early: {err!r}")
    finally:
        transcript.close()
        log_text = game.read_log("server")
        if game.log_path("server").exists():
            shutil.copyfile(game.log_path("server"), out_dir / f"server-{stamp}.log")
        compactions, failures = compactions_from_log(log_text)
        # the summary reads the whole log again, so a reply logged after its answer arrived
        # counts too
        stats.server_replies, stats.warmups = [], []
        stats.compactions_seen, stats.last_event = 0, ""
        replies_from_log(log_text, stats)
        stats.invented_quotes = invented_quotes_from_log(log_text)
        print(f"\n=== Transcript tail ({transcript_path.name}) ===")
        print("\n".join(transcript.lines[-args.tail :]))
        if not args.keep_running or failed:
            stats.timings["stop"] = stop_game(game)
        stats.timings["total"] = time.monotonic() - t_all
        print_summary(args, game, conversation, stats, compactions, failures, transcript_path)
        summary = {
            "conversation": conversation.sample_id,
            "lines_sent": stats.lines_sent,
            "replies": stats.replies,
            "fallbacks": stats.fallbacks,
            "timeouts": stats.timeouts,
            "reply_seconds": [round(x, 2) for x in stats.reply_seconds],
            "compactions": compactions,
            "compaction_failures": failures,
            "server_replies": stats.server_replies,
            "prompt_cache": cache_summary(stats.server_replies),
            "warmups": stats.warmups,
            "invented_quotes": stats.invented_quotes,
            "sleep_after_session": stats.sleep_session,
            "settings": game_environment(args),
            "timings": {k: round(v, 2) for k, v in stats.timings.items()},
            "error": repr(failed) if failed else None,
        }
        (out_dir / f"summary-{stamp}.json").write_text(json.dumps(summary, indent=2))
    if failed:
        print(f"\nThe demo stopped early: {failed}", file=sys.stderr)
        print("Server log tail:\n" + "\n".join(log_text.splitlines()[-30:]), file=sys.stderr)
        return 1
    if args.keep_running:
        print_connect_help(game, passwords)
    return 0


def print_connect_help(game, passwords):
    print("\nThe game is still running.")
    print(f"  telnet:     telnet 127.0.0.1 {game.ports.telnet}")
    print(f"  web client: http://127.0.0.1:{game.ports.web}/webclient")
    print(f"  AI NPCs:    http://127.0.0.1:{game.ports.web}/ai/   (staff pages; log in on the "
          f"web site as {game.superuser[0]} / {game.superuser[1]})")
    print(f"  admin:      connect {game.superuser[0]} {game.superuser[1]}")
    for name, pw in passwords.items():
        print(f"  player:     connect {name} {pw}")
    print("  then: tavern, talk Marta = Hello!   (admins: aihistory Marta, compact Marta)")
    print(
        f"  stop it:    cd {REPO_ROOT} && {sys.executable} -m demo --stop "
        f"--game-dir {game.path}"
    )


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for sample_id, a, b, n in list_conversations():
            print(f"{sample_id}: {a} & {b}, {n} lines")
        return 0
    if args.stop:
        try:
            game = GameDir.open(args.game_dir)
        except GameError as err:
            print(err, file=sys.stderr)
            return 1
        if game.server_pid() is None and game.portal_pid() is None:
            print(f"no game is running in {game.path}")
            return 0
        print(f"stopped in {stop_game(game):.1f} s")
        return 0
    try:
        return run_replay(_run(args))
    except KeyboardInterrupt:
        print("\ninterrupted; if a game is still running: python -m demo --stop", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
