"""
NPC actions through the real reply path: the fixed situations of
``benchmarks/action_situations.py`` said to Marta (the template's ``Innkeeper``, whose
``at_ai_action`` refuses the east room key unpaid), each in a fresh world, once with every
action of ``AI_ACTION_CMDSET`` on and once with none (the baseline).

Each line goes through ``AssistantScript`` as in a game (``receive_speech``, ``run_tick``); the
actions the model asked for are read back from the history (``metadata["type"] == "action"``).

Prints: right action, wrong action (acted, not as expected), missed (no action where one was
right), acting when it should not (an action done where none was right), invalid calls (a
call the runner judged invalid or unknown), the extra prompt tokens of the actions (section and
tool schemas: the first reply's prompt with actions minus without, where none was called), prefix-cache reuse
(``cached_tokens / prompt_tokens`` summed over every reply but the run's first) and the median
reply time, with and without actions.

The model: the embedded one (started as the contrib starts it) unless ``AI_LLM_BASE_URL`` names
an OpenAI-compatible server (``AI_LLM_MODEL``, ``AI_LLM_API_KEY`` with it).
``--max-situations N`` runs N, one of each kind in turn; ``--ids a,b`` the ones named; ``--json PATH`` writes the
figures and every situation's calls. Progress on stderr.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "game_template"))  # typeclasses.innkeeper

from benchmarks.action_situations import SITUATIONS  # noqa: E402

ALL_ACTIONS = ["give", "get", "drop", "pose", "look", "go", "whisper"]
BAD_CALLS = ("invalid", "unknown")


def progress(text):
    print(text, file=sys.stderr, flush=True)


def classify(expect, calls):
    """
    One situation's verdict: ``"right"``, ``"wrong"`` or ``"missed"`` where ``expect`` is
    ``(command, [words])``; ``"acted"`` (an action done where none was right) or ``"none"``
    where ``expect`` is None. ``calls``: ``[{"action", "args", "outcome"}]``.
    """
    done = [c for c in calls if c["outcome"] == "done"]
    if expect is None:
        return "acted" if done else "none"
    name, words = expect
    for call in done:
        args = (call["args"] or "").lower()
        if call["action"] == name and all(w in args for w in words):
            return "right"
    return "wrong" if calls else "missed"


def tally(rows):
    """``rows`` of ``{"verdict", "calls"}`` -> counts of each verdict and of invalid calls."""
    counts = {k: 0 for k in ("right", "wrong", "missed", "acted", "none", "invalid")}
    for row in rows:
        counts[row["verdict"]] += 1
        counts["invalid"] += sum(1 for c in row["calls"] if c["outcome"] in BAD_CALLS)
    return counts


# --- one situation in a fresh world -----------------------------------------------------------

def _obj(key, location):
    from evennia.objects.objects import DefaultObject
    from evennia.utils import create

    return create.create_object(DefaultObject, key=key, location=location, home=location)


def build_world(sit):
    """Room, exits, Marta (with the key), guests and items: ``(marta, script, people, made)``."""
    from evennia.objects.objects import DefaultCharacter, DefaultExit, DefaultRoom
    from evennia.utils import create
    from typeclasses.innkeeper import KEY_NAME, Innkeeper
    from world.tavern import MARTA_PERSONA

    from ai_contrib.typeclasses import get_assistant_script

    room = create.create_object(DefaultRoom, key="The Sleeping Stag", nohome=True)
    made = [room]
    for name in sit["exits"]:
        there = create.create_object(DefaultRoom, key=f"{name} side", nohome=True)
        made += [there, create.create_object(DefaultExit, key=name, location=room,
                                             destination=there, nohome=True)]
    marta = create.create_object(Innkeeper, key="Marta", location=room, home=room)
    marta.db.persona = MARTA_PERSONA
    made.append(marta)
    people = {name: create.create_object(DefaultCharacter, key=name, location=room, home=room)
              for name in sit["guests"]}
    made += list(people.values())
    owners = dict(people, Marta=marta)
    for item in [KEY_NAME] + list(sit["carried"].get("Marta", [])):
        _obj(item, marta)
    for who, items in sit["carried"].items():
        for item in items if who != "Marta" else ():
            _obj(item, owners[who])
    for item in sit["floor"]:
        made.append(_obj(item, room))
    marta.db.paid = {people[n].dbref: v for n, v in sit["paid"].items()}
    return marta, get_assistant_script(marta), people, made


def run_situation(sit, timeout):
    """Every line said, one reply each: ``{"calls", "receipts", "reply"}``."""
    from benchmarks.world import say

    marta, script, people, made = build_world(sit)
    receipts, reply, seen = [], "", len(script.history)
    try:
        for speaker, text in sit["lines"]:
            reply, receipt = say(script, marta, people[speaker], text, timeout=timeout)
            receipts.append(receipt)
        calls = [{"action": (m.get("metadata") or {}).get("action"),
                  "args": (m.get("metadata") or {}).get("args"),
                  "outcome": (m.get("metadata") or {}).get("outcome")}
                 for m in script.history[seen:]
                 if m.get("role") == "tool" and (m.get("metadata") or {}).get("type") == "action"]
    finally:
        # out of every room and hand first (the key may be a guest's now), so that no deletion
        # sends anything home to a deleted room
        objs = list(dict.fromkeys([o for holder in made for o in holder.contents] + made))
        for obj in objs:
            obj.location, obj.home = None, None
        for obj in objs:
            obj.delete()
    return {"calls": calls, "receipts": receipts, "reply": reply}


def run_set(situations, actions, timeout):
    """The situations with ``AI_ACTIONS = actions``: a row each."""
    from django.test import override_settings

    rows = []
    with override_settings(AI_ACTIONS=list(actions)):
        for i, sit in enumerate(situations):
            out = run_situation(sit, timeout)
            out.update(id=sit["id"], kind=sit["kind"],
                       verdict=classify(sit["expect"], out["calls"]))
            rows.append(out)
            progress(f"  [{'on' if actions else 'off'}] {i + 1}/{len(situations)} {sit['id']}: "
                     f"{out['verdict']} {out['calls']}")
    return rows


# --- figures ----------------------------------------------------------------------------------

def reuse(rows):
    """Share of prompt tokens cached, summed over every reply but the first."""
    receipts = [r for row in rows for r in row["receipts"] if r and r.get("prompt_tokens")][1:]
    prompt = sum(r["prompt_tokens"] for r in receipts)
    return (sum(r.get("cached_tokens") or 0 for r in receipts) / prompt) if prompt else None


def median_seconds(rows):
    values = [r["seconds"] for row in rows for r in row["receipts"] if r and r.get("seconds")]
    return statistics.median(values) if values else None


def extra_tokens(on, off):
    """Median extra prompt tokens of the first reply with actions over without, on the
    situations where no action was called (so the figure is the offer, not the exchanges)."""
    diffs = [a["receipts"][0]["prompt_tokens"] - b["receipts"][0]["prompt_tokens"]
             for a, b in zip(on, off)
             if not a["calls"] and a["receipts"] and b["receipts"] and (a["receipts"][0] or {}).get("prompt_tokens")
             and (b["receipts"][0] or {}).get("prompt_tokens")]
    return statistics.median(diffs) if diffs else None


def report(on, off, model, wall):
    counts, base = tally(on), tally(off)
    expected = sum(1 for r in on if r["verdict"] in ("right", "wrong", "missed"))
    idle = len(on) - expected

    def fmt(x, spec="{:.1%}"):
        return "n/a" if x is None else spec.format(x)

    t_on, t_off = median_seconds(on), median_seconds(off)
    return "\n".join([
        f"# NPC actions: {len(on)} situations, model {model}", "",
        "| figure | actions on | actions off |", "|---|---|---|",
        f"| right action (of {expected} that want one) | {counts['right']} | {base['right']} |",
        f"| wrong action | {counts['wrong']} | {base['wrong']} |",
        f"| no action where one was right | {counts['missed']} | {base['missed']} |",
        f"| acting when it should not (of {idle}) | {counts['acted']} | {base['acted']} |",
        f"| invalid or unknown calls | {counts['invalid']} | {base['invalid']} |",
        f"| extra prompt tokens for the actions (median) | {fmt(extra_tokens(on, off), '{:.0f}')}"
        " | 0 |",
        f"| prefix-cache reuse, replies after the first | {fmt(reuse(on))} | {fmt(reuse(off))} |",
        f"| median reply time, s | {fmt(t_on, '{:.2f}')} | {fmt(t_off, '{:.2f}')} |",
        f"| ratio on/off | {fmt(t_on / t_off if t_on and t_off else None, '{:.2f}x')} | |",
        "", f"Wall time {wall:.0f} s; {os.cpu_count()} CPUs."])


def pick(limit):
    """The first ``limit`` situations taking one of each kind in turn (all when None)."""
    if not limit:
        return list(SITUATIONS)
    kinds = {}
    for sit in SITUATIONS:
        kinds.setdefault(sit["kind"], []).append(sit)
    out, i = [], 0
    while len(out) < min(limit, len(SITUATIONS)):
        out += [group[i] for group in kinds.values() if i < len(group)][: limit - len(out)]
        i += 1
    return out


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-situations", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=300, help="seconds a reply may take")
    parser.add_argument("--ids", default="", help="comma-separated situation ids (all)")
    parser.add_argument("--json", default="")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    workdir = tempfile.mkdtemp(prefix="ai-contrib-actions-")
    os.environ.setdefault("MEM0_DIR", os.path.join(workdir, "mem0"))
    from benchmarks._evennia_env import setup_evennia

    server = {k: os.environ[k] for k in ("AI_LLM_BASE_URL", "AI_LLM_MODEL", "AI_LLM_API_KEY")
              if os.environ.get(k)}
    setup_evennia(workdir, AI_TICK_INTERVAL=10**7, AI_SLEEP_AFTER_IDLE=0,
                  AI_MEMORY_DIR=os.path.join(workdir, "memory"), **server)
    from benchmarks.world import start_embedded, stop_server

    situations = pick(args.max_situations)
    if args.ids:
        wanted = args.ids.split(",")
        situations = [s for s in SITUATIONS if s["id"] in wanted]
    started = time.monotonic()
    try:
        if not server:
            start_embedded()
        progress(f"{len(situations)} situations, actions on")
        on = run_set(situations, ALL_ACTIONS, args.timeout)
        progress("actions off")
        off = run_set(situations, [], args.timeout)
    finally:
        if not server:
            from ai_contrib.llm.embedded import stop_embedded_server

            stop_server(stop_embedded_server())
        shutil.rmtree(workdir, ignore_errors=True)
    from ai_contrib.settings import get_setting

    model = server.get("AI_LLM_BASE_URL", f"embedded {get_setting('LLM_MODEL')}")
    print(report(on, off, model, time.monotonic() - started))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"on": on, "off": off, "counts_on": tally(on), "counts_off": tally(off)},
                      fh, indent=1, default=str)


if __name__ == "__main__":
    main()
