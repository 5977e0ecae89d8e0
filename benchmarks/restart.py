"""
The first reply after a restart: how long a player waits for Marta after ``evennia reboot``,
beside her replies before it.

What it measures: a real game made from ``game_template/`` as ``make demo`` makes it, with every
``AI_*`` setting at its default (the embedded model, SmolLM2-135M-Instruct) unless ``--set``
says otherwise. One telnet player walks into the tavern and says ``--lines`` (60) lines of a
LoCoMo conversation to Marta (``--conversation``, conv-30), each after her answer, so that her
history is long; after ``--quiet`` seconds (0) with nobody speaking, the game is rebooted (``evennia reboot``: the Portal and the Server
stop, the player's connection with them, and both start again, the embedded model server with
an empty prompt cache). Once the new model server is ready, the player logs in again (back in
the tavern), waits ``--think`` seconds (8: the time to read and type) and says ``--after`` (5)
more lines, each after the
answer before. Printed: the server's reply seconds, prompt tokens and tokens reused from the
cache of the last ``--before`` (10) replies before the reboot (median) and of each reply after
it, the first one's seconds over that median, the context usage the restart found (the first
emergency trigger after it: memory work cut off by the reboot leaves the history over its
budget, and no warm-up is sent over budget), the warm-ups logged after the reboot, and the
fallback lines and timeouts the player saw (``docs/design.md``, "Warming the cache after a
restart").

The same run with ``--set prompt_cache_warmup=false`` is the baseline: no warm-up at all.
Nothing is asserted: it prints figures.

    .venv/bin/python benchmarks/restart.py
    .venv/bin/python benchmarks/restart.py --set prompt_cache_warmup=false

Data: LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0, see ``data/locomo/NOTICE.txt``), only
the conversation turns.
"""

import argparse
import asyncio
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.defaults import cap_text, median, parse_log, progress  # noqa: E402
from demo.gamectl import GameDir  # noqa: E402
from demo.locomo import load_conversation  # noqa: E402
from demo.replay import ANSWER_RE, NPC, account_name, stop_game  # noqa: E402
from demo.telnet import TelnetPlayer, Transcript  # noqa: E402

#: the server log line of a model server ready again (ai_contrib.startup)
READY_LINE = "embedded model server ready"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversation", default="conv-30")
    parser.add_argument("--lines", type=int, default=60, help="lines said before the reboot")
    parser.add_argument("--before", type=int, default=10,
                        help="replies before the reboot the first one after it is weighed against")
    parser.add_argument("--after", type=int, default=5, help="lines said after the reboot")
    parser.add_argument("--quiet", type=float, default=0.0,
                        help="seconds nobody speaks before the reboot (an admin's announcement: "
                             "memory work under way may finish)")
    parser.add_argument("--think", type=float, default=8.0,
                        help="seconds between the new model server being ready and the next line")
    parser.add_argument("--reply-timeout", type=float, default=180.0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="an AI_* setting away from its default (prompt_cache_warmup=false)")
    parser.add_argument("--keep-game", action="store_true")
    return parser.parse_args(argv)


async def say_lines(player, texts, timeout, outcomes):
    """Say each of ``texts`` to Marta after her answer to the one before; note each outcome."""
    for text in texts:
        player.discard()
        player.send(f"talk {NPC} = {cap_text(text, 300)}")
        match, _ = await player.read_until(ANSWER_RE, timeout=timeout)
        outcomes.append("timeout" if match is None
                        else "fallback" if match.group("fallback") else "reply")
        progress(f"  {len(outcomes):3d} {outcomes[-1]}")


async def wait_for_line(game, needle, after_chars, timeout):
    """Wait until the server log holds ``needle`` past its first ``after_chars`` characters."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in game.read_log("server")[after_chars:]:
            return True
        await asyncio.sleep(0.5)
    return False


async def session(game, args, texts):
    """The player's evening: the lines, the reboot, logging in again, the lines after it.
    Returns ``(outcomes, log offset of the reboot)``."""
    name = account_name("Wren", {game.superuser[0].lower()})
    password = f"pw-{secrets.token_hex(6)}"
    outcomes = []
    player = TelnetPlayer("player", game.ports.telnet, transcript=game.transcript)
    await player.connect()
    try:
        await player.login(name, password, create=True)
        await player.command("tavern")
        await say_lines(player, texts[: args.lines], args.reply_timeout, outcomes)
        await asyncio.sleep(args.quiet)
        offset = len(game.read_log("server"))
        progress("evennia reboot ...")  # the player still connected, as players are
        game.evennia("reboot", timeout=300)
    finally:
        await player.close()
    if not await wait_for_line(game, READY_LINE, offset, 300):
        progress("the model server did not say it was ready again")
    # the player logs in again (back in the tavern, where the character was) and reads
    player = TelnetPlayer("player", game.ports.telnet, transcript=game.transcript)
    await player.connect()
    try:
        await player.login(name, password)
        await asyncio.sleep(args.think)
        await say_lines(player, texts[args.lines: args.lines + args.after], args.reply_timeout,
                        outcomes)
    finally:
        await player.close()
    return outcomes, offset


def report(args, events_before, events_after, outcomes):
    """Print the figures (Markdown)."""
    before = [e for e in events_before if e["kind"] == "reply"][-args.before:]
    after = [e for e in events_after if e["kind"] == "reply"]
    warmups = [e for e in events_after if e["kind"] == "warm-up"]
    normal = median([r["seconds"] for r in before])
    print(f"\n## First replies after `evennia reboot` ({args.lines} lines of "
          f"{args.conversation} before, {args.quiet:.0f} s quiet before the reboot, "
          f"settings: {args.set or 'every default'})\n")
    usage = [e["usage"] for e in events_after if e["kind"] == "emergency"][:1]
    print(f"Context usage found at the restart: {f'{usage[0]:.0f} %' if usage else 'under 80 %'}")
    print(f"Median of the last {len(before)} replies before the reboot: {normal:.2f} s, "
          f"prompt {median([r['prompt'] for r in before if r['prompt']])} tokens")
    took = ", ".join(f"{w['seconds']:.1f} s" for w in warmups) or "-"
    print(f"Warm-ups after the reboot: {len(warmups)} ({took})\n")
    print("| reply after the reboot | seconds | x before | prompt tokens | reused |")
    print("|---:|---:|---:|---:|---:|")
    for i, r in enumerate(after, 1):
        print(f"| {i} | {r['seconds']:.2f} | {r['seconds'] / normal:.2f}x | {r['prompt']} | "
              f"{r['cached']} |")
    print(f"\nFallback lines: {outcomes.count('fallback')}, timeouts: {outcomes.count('timeout')}"
          f" (of {len(outcomes)} lines)")


async def run(args):
    for key in [k for k in os.environ if k.startswith("AI_")]:
        del os.environ[key]
    env = {f"AI_{name.upper()}": value
           for name, value in (item.split("=", 1) for item in args.set)}
    texts = [t.text for t in load_conversation(args.conversation).turns]
    path = Path(tempfile.mkdtemp(prefix="bench-restart-")) / "game"
    game = GameDir.create(path, env=env)
    game.transcript = Transcript(path.parent / "transcript.txt")
    try:
        progress(f"starting the game ({env or 'every AI_* setting at its default'}) ...")
        game.start(timeout=300)
        outcomes, offset = await session(game, args, texts)
    finally:
        game.transcript.close()
        stop_game(game)
    log = game.read_log("server")
    report(args, parse_log(log[:offset]), parse_log(log[offset:]), outcomes)
    if args.keep_game:
        progress(f"game kept in {path}")
    else:
        shutil.rmtree(path.parent, ignore_errors=True)


def main(argv=None):
    asyncio.run(run(parse_args(argv)))


if __name__ == "__main__":
    main()
