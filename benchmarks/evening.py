"""
An evening in a village on the default install: several AI NPCs, several players, the embedded
model on a small machine, with and without another process taking a core.

What it measures: a real game made from ``game_template/`` as ``make demo`` makes it
(``demo.gamectl.GameDir``, free loopback ports) with every ``AI_*`` setting at its default (no
``AI_*`` variable reaches the game; ``--set`` changes one for a comparison run), so every NPC
answers through the embedded model (SmolLM2-135M-Instruct) and its memory server. The
superuser builds the village the way an admin would, over telnet with Evennia's own builder
commands: besides the template's Marta (the tavern) and Bram (the gate), ``create/drop`` makes
Fenwick, a second AI NPC in the tavern, and ``dig`` a guildhall off the crossroads with Oswin,
its guild master, each given a persona with ``set``. ``--players`` (3) telnet players then talk
for ``--minutes`` (60): each stands somewhere, says ``talk <NPC> = <line>`` to one of the NPCs
there, waits for that NPC's answer (or ``--reply-timeout`` seconds), thinks for ``--think``
seconds (5-20, uniform) and now and then (``--move``, 15 % of lines) walks to another place
through the crossroads. Lines are LoCoMo turns of 90-170 characters, shuffled with ``--seed``
(``benchmarks/tavern.py``'s :func:`load_lines`): talk about jobs, families, plans and
the past, so every NPC's history fills and its memory work (fact extraction, emergency and
sleep compactions, warm-ups) runs beside the replies of all four on the one embedded server.
NPCs in the tavern hear each other, as in any game.

``--hog`` runs the same evening with a process spinning on one core (a Python loop that ends
with this process) for the whole talk (``on``), without it (``off``) or both in turn, each in a
fresh game (``both``, the default: two evenings).

The superuser reads every NPC's context usage each ``--poll`` seconds (30) with ``py`` (the
history's tokens over its budget, :meth:`~ai_contrib.npc.budgeting.BudgetHandler.usage`); the
first read checks that the village was built (all four NPCs there). After the talk (and the
hog) it waits at most ``--drain`` seconds (600) for every NPC's usage to fall under the
emergency threshold: whether the memory work the talk made due was done within the run (a
warm-up or sleep work may still be under way then).

Printed (Markdown on stdout, progress on stderr), per evening and per NPC and for all: replies
(server log), median, p95 and max of the server's reply seconds and p95 over median; fallback
lines (the server's failed replies, each answered with ``AI_FALLBACK_REPLY``) and lines no
answer reached within the player's limit; compactions done and failed; fact extractions and
cache warm-ups that failed (a failed fact extraction is logged without its NPC: the "all" row
counts those too); the peak and final context usage; replies that waited for a warm-up and the
longest wait. Then the evening's lines said, the players' median seconds to an answer and the
1-minute load average seen at the polls. A player waiting on an NPC takes the NPC's next answer
(its say line, a murmur naming the player, or its fallback line), which in a room of several
players may be another's: the players' seconds and the lines no answer reached are lower
bounds; the per-NPC seconds and fallbacks come from the server's log.

Data: LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0, see ``data/locomo/NOTICE.txt``), only
the conversation turns, never its questions.

How long: ``--minutes`` plus about 1 min to make and start the game and up to ``--drain``, per
evening (``make bench-evening``: 2 h 10 min to 2 h 30 min on 2 cores; ``BENCH_ARGS="--minutes
15 --hog on"`` for a short one). Nothing is asserted: it prints figures; ``--json PATH`` writes
them.

    .venv/bin/python benchmarks/evening.py                      # = make bench-evening
    .venv/bin/python benchmarks/evening.py --minutes 10 --hog off --json evening.json
"""

import argparse
import asyncio
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ai_contrib.settings import DEFAULTS as AI_DEFAULTS  # noqa: E402
from benchmarks.defaults import median, p95, parse_log, progress  # noqa: E402
from benchmarks.tavern import load_lines  # noqa: E402
from demo.gamectl import GameDir  # noqa: E402
from demo.replay import stop_game  # noqa: E402
from demo.telnet import TelnetError, TelnetPlayer, Transcript  # noqa: E402

#: where the village's NPCs stand (the template builds the tavern and the gate; the
#: superuser digs the guildhall and makes Fenwick and Oswin)
PLACES = {"tavern": ("Marta", "Fenwick"), "gate": ("Bram",), "guildhall": ("Oswin",)}
#: the exit from each place back to the crossroads (Limbo); from there the place's own name
EXIT_TO_CROSSROADS = {"tavern": "out", "gate": "crossroads", "guildhall": "out"}
NPCS = tuple(npc for npcs in PLACES.values() for npc in npcs)
PLAYER_NAMES = ("Wren", "Hollis", "Ysolde", "Tamsin", "Corrin")

FENWICK_PERSONA = (
    "You are Fenwick, an old fiddler who plays in The Sleeping Stag most nights for his supper. "
    "You are cheerful, a gossip and fond of a song, and you remember the people who talk to you. "
    "You answer in one to three short sentences, in character, and you never say you are an AI.")
OSWIN_PERSONA = (
    "You are Oswin, master of the masons' guild, in his guildhall off the crossroads. You are "
    "proud, exact and busy, you take on apprentices and keep the guild's records, and you "
    "remember who asked you for work. You answer in one to three short sentences, in "
    "character, and you never say you are an AI.")
#: the superuser's commands that build the rest of the village, from the crossroads
BUILD = (
    "tavern",
    "create/drop Fenwick:ai_contrib.typeclasses.AssistantCharacter",
    f'set Fenwick/persona = "{FENWICK_PERSONA}"',
    "out",
    "dig The Masons' Guildhall = guildhall;guild, out;crossroads",
    "guildhall",
    "create/drop Oswin:ai_contrib.typeclasses.AssistantCharacter",
    f'set Oswin/persona = "{OSWIN_PERSONA}"',
    "out",
)

POLL_MARK = "EVENING-USAGE"
#: the superuser's poll: every AI NPC's context usage (fraction of its budget), one JSON line
POLL_PY = ("py import json; from ai_contrib.admin.npcs import all_ai_npcs; me.msg('"
           + POLL_MARK + " ' + json.dumps({n.key: round(s.budgeting.usage(), 4) "
           "for n, s in all_ai_npcs() if s}))")
POLL_RE = re.compile(rf"^{POLL_MARK} (\{{.*\}})\s*$", re.M)
#: a failed reply, which players hear as the fallback line (npc.replies: the first of a run
#: is told to admins, the next ones logged)
FAILED_REPLY_RE = re.compile(r"AI (?P<npc>[^:]+): (?:could not answer \(|reply failed \()")
#: a fact extraction or a cache warm-up that failed (npc.compacting; npc.extraction's own line
#: names no NPC; npc.warmup)
EXTRACTION_FAIL_RE = re.compile(r"AI (?P<npc>[^:]+): fact extraction failed")
UNNAMED_EXTRACTION_FAIL_RE = re.compile(r"pre-compaction extraction failed")
WARMUP_FAIL_RE = re.compile(r"AI cache warm-up (?P<npc>\S+)(?: by the memory server)? failed")


def answer_re(npc, player):
    """An ``npc``'s answer as ``player`` reads it: the start of its say line, a murmur that
    names the player (``AI_MURMUR_REPLY``: a reply written while someone walked in), or its
    fallback line (``AI_FALLBACK_REPLY``)."""
    fallback = re.escape(AI_DEFAULTS["FALLBACK_REPLY"].format(name=npc))
    return re.compile(rf'^(?:(?P<reply>{npc} says(?: to [^,]+)?, "'
                      rf'|{npc} leans in and murmurs to [^:"]*\b{player}\b[^:"]*: ")'
                      rf"|(?P<fallback>{fallback}))", re.M)


def player_name(i):
    """The ``i``-th player's account name (0-based)."""
    base = PLAYER_NAMES[i % len(PLAYER_NAMES)]
    return base if i < len(PLAYER_NAMES) else f"{base}{i // len(PLAYER_NAMES) + 1}"


def route(here, there):
    """The commands that walk a player from place ``here`` to place ``there`` (names of
    :data:`PLACES`), through the crossroads."""
    return [] if here == there else [EXIT_TO_CROSSROADS[here], there]


@dataclass
class Outcomes:
    """What the players saw: per line, ``(npc, "reply" | "fallback" | "timeout", seconds from
    the line to the answer)``."""

    lines: list = field(default_factory=list)

    def add(self, npc, outcome, seconds) -> None:
        self.lines.append((npc, outcome, round(seconds, 2)))


async def player_evening(player, rng, lines, args, t_end, outcomes):
    """One player's evening until ``t_end`` (monotonic seconds): lines to the NPCs where they
    stand, a think between them, a walk now and then."""
    try:
        await _talk_until(player, rng, lines, args, t_end, outcomes)
    except (TelnetError, ConnectionError) as err:  # the others' evening goes on
        progress(f"  {player.label}: {err}")


async def _talk_until(player, rng, lines, args, t_end, outcomes):
    here = "tavern"
    while time.monotonic() < t_end:
        if rng.random() < args.move:
            there = rng.choice([p for p in PLACES if p != here])
            for command in route(here, there):
                await player.command(command, quiet=0.3)
            here = there
        npc = rng.choice(PLACES[here])
        player.discard()
        sent = time.monotonic()
        player.send(f"talk {npc} = {next(lines)}")
        match, _ = await player.read_until(answer_re(npc, player.label),
                                           timeout=args.reply_timeout)
        took = time.monotonic() - sent
        outcome = "timeout" if match is None else "fallback" if match["fallback"] else "reply"
        outcomes.add(npc, outcome, took)
        progress(f"  {player.label:<8} -> {npc:<8} {outcome} in {took:5.1f} s")
        await asyncio.sleep(rng.uniform(*args.think))


async def poll_usage(admin):
    """Every AI NPC's context usage now, ``{npc: fraction}``, read by the superuser."""
    admin.discard()
    admin.send(POLL_PY)
    match, _ = await admin.read_until(POLL_RE, timeout=60)
    return json.loads(match.group(1)) if match else {}


async def poller(admin, samples, stop, interval):
    """Poll until ``stop`` is set; each sample is ``(seconds since the start, {npc: usage},
    1-minute load average)``."""
    t0 = time.monotonic()
    while not stop.is_set():
        try:
            samples.append((round(time.monotonic() - t0), await poll_usage(admin),
                            os.getloadavg()[0]))
        except (TelnetError, ConnectionError, ValueError) as err:
            progress(f"  poll failed: {err}")
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass


async def drain(admin, samples, limit):
    """Wait at most ``limit`` seconds for every NPC's usage to be under the emergency
    threshold; returns the seconds it took, or None when it did not happen."""
    threshold = AI_DEFAULTS["COMPACT_EMERGENCY_THRESHOLD"]
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        try:
            usage = await poll_usage(admin)
        except (TelnetError, ConnectionError, ValueError) as err:
            progress(f"  poll failed: {err}")
            usage = {}
        samples.append((None, usage, os.getloadavg()[0]))
        if usage and max(usage.values()) < threshold:
            return round(time.monotonic() - t0)
        await asyncio.sleep(15)
    return None


async def evening(game, args, transcript, hog):
    """Build the village, play the evening (``hog``: with a core taken), drain; returns
    ``(outcomes, samples, drain_s)``."""
    admin = TelnetPlayer("admin", game.ports.telnet, transcript=transcript)
    players = [TelnetPlayer(player_name(i), game.ports.telnet, transcript=transcript)
               for i in range(args.players)]
    outcomes, samples, stop = Outcomes(), [], asyncio.Event()
    try:
        await admin.connect()
        await admin.login(*game.superuser)
        for command in BUILD:
            await admin.command(command)
        built = await poll_usage(admin)
        if set(built) != set(NPCS):
            raise RuntimeError(f"the village was not built: AI NPCs {sorted(built)}, "
                               f"expected {sorted(NPCS)} (see the transcript)")
        lines = iter(load_lines(args.seed)[0] * 10)
        for player in players:
            await player.connect()
            await player.login(player.label, f"pw-{secrets.token_hex(6)}", create=True)
            await player.command("tavern")
        spinner = start_hog() if hog else None
        poll = asyncio.create_task(poller(admin, samples, stop, args.poll))
        t_end = time.monotonic() + args.minutes * 60
        try:
            await asyncio.gather(*(
                player_evening(p, random.Random(f"{args.seed}-{i}"), lines, args, t_end, outcomes)
                for i, p in enumerate(players)))
            stop.set()
            await poll
            spinner = stop_hog(spinner)
            progress(f"  talk over; waiting at most {args.drain:.0f} s for the memory work")
            drained = await drain(admin, samples, args.drain)
        finally:
            stop.set()
            stop_hog(spinner)
        return outcomes, samples, drained
    finally:
        for player in players:
            await player.close()
        await admin.close()


def start_hog():
    """A process spinning on one core until killed, or until this process ends."""
    return subprocess.Popen([sys.executable, "-c",
                             f"import os\nwhile os.getppid() == {os.getpid()}: pass"])


def stop_hog(spinner) -> None:
    """Kill the process :func:`start_hog` started, if any, and reap it; returns None."""
    if spinner is not None:
        spinner.kill()
        spinner.wait()


def npc_figures(log, npc, outcomes, samples):
    """One NPC's row: its replies, memory work and usage over the evening (see the module
    docstring), from the server ``log``, the players' ``outcomes`` and the polls."""
    events = parse_log(log, npc)
    seconds = [e["seconds"] for e in events if e["kind"] == "reply"]
    waited = [e["waited"] for e in events if e["kind"] == "reply" and e["waited"] > 0]
    usage = [s[1][npc] for s in samples if npc in s[1]]
    heard = [o for o in outcomes.lines if o[0] == npc]
    mid, top = median(seconds), p95(seconds)
    return {
        "replies": len(seconds), "median_s": mid, "p95_s": top,
        "max_s": max(seconds) if seconds else None,
        "p95_over_median": top / mid if mid else None,
        "fallbacks": sum(1 for m in FAILED_REPLY_RE.finditer(log) if m["npc"] == npc),
        "heard_fallbacks": sum(1 for o in heard if o[1] == "fallback"),
        "timeouts": sum(1 for o in heard if o[1] == "timeout"),
        "compactions": sum(1 for e in events if e["kind"] == "compaction"),
        "compaction_failures": sum(1 for e in events if e["kind"] == "compaction-failed"),
        "extraction_failures": sum(1 for m in EXTRACTION_FAIL_RE.finditer(log)
                                   if m["npc"] == npc),
        "warmup_failures": sum(1 for m in WARMUP_FAIL_RE.finditer(log) if m["npc"] == npc),
        "peak_usage": max(usage) if usage else None,
        "final_usage": usage[-1] if usage else None,
        "waited": len(waited), "max_wait_s": max(waited) if waited else None,
    }


def totals(rows, log, outcomes, samples):
    """The evening's row for all NPCs together."""
    seconds = [e["seconds"] for npc in rows for e in parse_log(log, npc) if e["kind"] == "reply"]
    mid, top = median(seconds), p95(seconds)
    summed = ("fallbacks", "heard_fallbacks", "timeouts", "compactions", "compaction_failures",
              "extraction_failures", "warmup_failures", "waited", "replies")
    out = {key: sum(r[key] for r in rows.values()) for key in summed}
    out["extraction_failures"] += len(UNNAMED_EXTRACTION_FAIL_RE.findall(log))
    peaks = [r["peak_usage"] for r in rows.values() if r["peak_usage"] is not None]
    waits = [r["max_wait_s"] for r in rows.values() if r["max_wait_s"] is not None]
    out.update(median_s=mid, p95_s=top, max_s=max(seconds) if seconds else None,
               p95_over_median=top / mid if mid else None,
               peak_usage=max(peaks) if peaks else None,
               final_usage=max((r["final_usage"] or 0) for r in rows.values()),
               max_wait_s=max(waits) if waits else None,
               lines=len(outcomes.lines),
               heard_median_s=median([o[2] for o in outcomes.lines if o[1] != "timeout"]),
               load_median=median([s[2] for s in samples]))
    return out


def _f(value, spec=".2f"):
    return "-" if value is None else format(value, spec)


def print_evening(result):
    """One evening's table (Markdown)."""
    print(f"\n## {result['label']}: {result['minutes']:g} min, {result['players']} players, "
          f"{len(NPCS)} NPCs ({result['settings']})\n")
    print("| NPC | replies | median s | p95 s | max s | p95 / median | fallbacks | no answer "
          "| compactions (failed) | extractions failed | warm-ups failed | waited (max s) "
          "| peak usage | final usage |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|")
    for name, r in [*result["npcs"].items(), ("all", result["all"])]:
        print(f"| {name} | {r['replies']} | {_f(r['median_s'])} | {_f(r['p95_s'], '.1f')} | "
              f"{_f(r['max_s'], '.1f')} | {_f(r['p95_over_median'])}x | {r['fallbacks']} | "
              f"{r['timeouts']} | {r['compactions']} ({r['compaction_failures']}) | "
              f"{r['extraction_failures']} | {r['warmup_failures']} | "
              f"{r['waited']} ({_f(r['max_wait_s'], '.1f')}) | {_f(r['peak_usage'], '.0%')} | "
              f"{_f(r['final_usage'], '.0%')} |")
    a = result["all"]
    drained = result["drain_s"]
    print(f"\nLines said: {a['lines']}; the players' median seconds to an answer: "
          f"{_f(a['heard_median_s'])}; median 1-minute load average: {_f(a['load_median'])}; "
          f"every NPC under the emergency threshold after the talk: "
          + (f"yes, {drained} s after it" if drained is not None else
             f"no, usage still {_f(a['final_usage'], '.0%')} after {result['drain_limit']:.0f} s"))


def run_evening(args, hog):
    """Make a fresh game, play one evening (``hog``: with a core taken), return its figures."""
    env = {f"AI_{name.upper()}": value for name, value in (s.split("=", 1) for s in args.set)}
    path = Path(tempfile.mkdtemp(prefix="bench-evening-")) / "game"
    progress(f"making a game in {path} ...")
    game = GameDir.create(path, env=env)
    transcript = Transcript(path.parent / "transcript.txt")
    try:
        game.start(timeout=300)
        outcomes, samples, drained = asyncio.run(evening(game, args, transcript, hog))
    finally:
        transcript.close()
        stop_game(game)
    log = game.read_log("server")
    rows = {npc: npc_figures(log, npc, outcomes, samples) for npc in NPCS}
    result = {"label": "with a CPU hog on one core" if hog else "no other work",
              "minutes": args.minutes, "players": args.players, "drain_s": drained,
              "drain_limit": args.drain,
              "settings": f"defaults except {env}" if env else "every AI_* setting at its default",
              "npcs": rows, "all": totals(rows, log, outcomes, samples),
              "outcomes": outcomes.lines, "samples": samples}
    if args.keep_game:
        progress(f"game kept in {path}")
    else:
        shutil.rmtree(path.parent, ignore_errors=True)
    return result


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60, help="minutes of talk (60)")
    parser.add_argument("--players", type=int, default=3, help="telnet players (3)")
    parser.add_argument("--hog", choices=("off", "on", "both"), default="both",
                        help="a process spinning on one core during the talk (both: two runs)")
    parser.add_argument("--think", type=float, nargs=2, default=(5.0, 20.0), metavar=("LO", "HI"),
                        help="seconds a player thinks between lines (5 20)")
    parser.add_argument("--move", type=float, default=0.15,
                        help="share of lines before which a player walks elsewhere (0.15)")
    parser.add_argument("--reply-timeout", type=float, default=180,
                        help="seconds a player waits for an answer (180)")
    parser.add_argument("--poll", type=float, default=30, help="seconds between usage polls")
    parser.add_argument("--drain", type=float, default=600,
                        help="seconds to wait after the talk for the memory work (600)")
    parser.add_argument("--seed", default="evening")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="one AI_* setting away from its default (PROMPT_CACHE_WARMUP=false)")
    parser.add_argument("--keep-game", action="store_true")
    parser.add_argument("--json", metavar="PATH", help="write every figure here")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    for key in [k for k in os.environ if k.startswith("AI_")]:
        progress(f"leaving {key} out of the game's environment")
        del os.environ[key]
    hogs = {"off": [False], "on": [True], "both": [False, True]}[args.hog]
    results = [run_evening(args, hog) for hog in hogs]
    for result in results:
        print_evening(result)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
        progress(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
