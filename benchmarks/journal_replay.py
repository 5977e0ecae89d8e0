"""
What the journal holds after a tavern talk: players' facts, or the NPC's babble
(``docs/design.md``, "Facts players said").

Replays the fixed 60-line talk of ``benchmarks/journal_script.py`` (three players telling Marta
about themselves, Marta and another NPC answering) into a real ``AssistantScript``
(Django + Evennia outside a game dir, ``benchmarks/_evennia_env.py``), and runs the real
pre-compaction extraction (``npc.extraction.run_pre_compaction_extraction``) after every 20
lines, over the whole history as a sleep does, once per extractor (``AI_PRE_COMPACT_EXTRACTOR``
set on the NPC, a fresh NPC and a fresh client for each, so each starts unjudged):

- ``model``: the model's extraction alone, the baseline;
- ``auto``: the default (the model, then rules once its facts fail);
- ``rule``: rules alone, no model asked.

Models: the LLM double (``tests/support/llm_double.py``) answering as the embedded model was
measured to (``junk``: the prompt's example with its names, the NPC's own latest lines cited as
facts, words of two lines glued) and as a model that extracts well (``faithful``: each player's
fact in the third person, citing its line); with ``--embedded``, the embedded model
(SmolLM2-135M, every default: the client starts it as a game would).

Prints per model and extractor: entries journaled by kind (player fact: holds the words of a
fact a player stated; NPC line: said by an NPC or repeating an NPC's line; junk: anything else),
the share of the players' stated facts journaled, the share of entries that are NPC lines, the
model's requests, the share of its facts that failed (the extractor's record) and the time.
The script was written beside the rules: their share is an upper bound for talk like it.

Usage: python benchmarks/journal_replay.py [--models junk,faithful] [--embedded]
    [--extractors model,auto,rule] [--json out.json]
"""

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.journal_script import (  # noqa: E402
    FAITHFUL, LINES, NPC, OTHER_NPCS, PLAYERS, STATED)

EXTRACT_EVERY = 20  # lines between two extractions
_NUMBERED = re.compile(r"^\[(\d+)\]\s*(?:(\w+)(?: \(overheard\))?:\s*)?(.*)$", re.S)
EXAMPLES = ["Alice is allergic to peanuts.", "Bob promised to bring 3 iron ingots by Friday."]


def numbered_lines(body):
    """``[(seq, role, speaker, text)]`` of the talk an extraction request shows."""
    out = []
    for msg in body.get("messages") or []:
        match = _NUMBERED.match(str(msg.get("content") or ""))
        if match and msg.get("role") in ("user", "assistant"):
            out.append((int(match.group(1)), msg["role"], match.group(2) or NPC, match.group(3)))
    return out


def _structured(calls):
    return json.dumps({"calls": [{"name": n, "arguments": a} for n, a in calls]})


class JunkModel:
    """The double answering as the embedded model was measured to: per request three calls of
    the prompt's example with its names, the NPC's latest line cited at importance 10, and
    words of two lines glued into a claim nobody made."""

    def __init__(self, seed=1234):
        self.random = random.Random(seed)

    def __call__(self, body):
        lines = numbered_lines(body)
        if not lines:
            return _structured([("noop", {})])
        own = [line for line in lines if line[1] == "assistant"]
        seq, _role, _who, text = self.random.choice(own[-4:] or lines)
        a, b = self.random.sample(lines, 2) if len(lines) > 1 else (lines[0], lines[0])
        glued = " ".join(a[3].split()[:4] + b[3].split()[-4:])
        calls = [(self.random.choice(EXAMPLES), a[0]), (text, seq), (glued, a[0])]
        return _structured([("add_journal_entry", {"content": c, "importance": 10,
                                                   "source": [s]}) for c, s in calls])


class FaithfulModel:
    """The double answering as a model that extracts well: the players' stated facts of the
    request (:data:`benchmarks.journal_script.FAITHFUL`), three a reply, each citing its line;
    noop when it has given them all."""

    def __init__(self):
        self.given = set()

    def __call__(self, body):
        by_text = {LINES[i][1]: fact for i, fact in FAITHFUL.items()}
        calls = []
        for seq, role, _who, text in numbered_lines(body):
            fact = by_text.get(text)
            if role == "user" and fact and fact not in self.given and len(calls) < 3:
                self.given.add(fact)
                calls.append(("add_journal_entry", {"content": fact, "importance": 7,
                                                    "source": [seq]}))
        return _structured(calls or [("noop", {})])


def classify(entry):
    """``("player", stated index)``, ``("npc", None)`` or ``("junk", None)`` for one entry."""
    text = entry.get("content", "").casefold()
    npcs = (NPC,) + OTHER_NPCS
    said = {t.casefold().rstrip(".!?") for who, t in LINES if who in npcs}
    if entry.get("speaker") in npcs or any(text.startswith(f"{n.casefold()} said:")
                                           for n in npcs) \
            or any(s and s in text for s in said):
        return "npc", None
    for index, words in STATED:
        if all(w in text for w in words):
            return "player", index
    return "junk", None


def measure(journal):
    """Counts per kind, the stated facts journaled and the shares (see the module)."""
    entries = [e for e in journal.get("entries", [])
               if e.get("source_type") in ("fact", "observation")]
    kinds = {"player": 0, "npc": 0, "junk": 0}
    covered = set()
    for entry in entries:
        kind, index = classify(entry)
        kinds[kind] += 1
        if index is not None:
            covered.add(index)
    total = len(entries)
    return {"entries": total, **kinds, "stated_journaled": len(covered),
            "stated": len(STATED), "stated_share": len(covered) / len(STATED),
            "npc_share": kinds["npc"] / total if total else 0.0,
            "junk_share": kinds["junk"] / total if total else 0.0,
            "contents": [(classify(e)[0], e.get("importance"), e.get("content"))
                         for e in entries]}


def replay(extractor, timeout):
    """One replay with a fresh NPC and client: the figures of :func:`measure` and the run's."""
    from evennia.objects.objects import DefaultCharacter, DefaultRoom
    from evennia.utils import create

    from ai_contrib.core.fact_policy import ungrounded_share
    from ai_contrib.llm.client import get_client, reset_client
    from ai_contrib.npc.extraction import run_pre_compaction_extraction
    from ai_contrib.npc.extractor import grounding_record
    from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script
    from tests.support.twisted_util import wait_for

    wait_for(reset_client())
    room = create.create_object(DefaultRoom, key=f"Tavern-{extractor}", nohome=True)
    npc = create.create_object(AssistantCharacter, key=NPC, location=room, home=room)
    npc.db.persona = "You are Marta, the innkeeper of the Prancing Goat."
    script = get_assistant_script(npc)
    script.db.pre_compact_extractor = extractor
    people = {name: create.create_object(DefaultCharacter, key=name, location=room, home=room)
              for name in PLAYERS + OTHER_NPCS}
    audience = sorted(people[p].dbref for p in PLAYERS)
    runs, t0 = [], time.perf_counter()
    for i, (who, text) in enumerate(LINES, 1):
        if who == NPC:
            script.add_message("assistant", text, name=NPC, metadata={"audience": audience})
        else:
            meta = {"speaker": people[who].dbref, "audience": audience}
            if who in OTHER_NPCS:
                meta["npc"] = True
            script.add_message("user", text, name=who, metadata=meta)
        if i % EXTRACT_EVERY == 0:
            result = wait_for(run_pre_compaction_extraction(script, npc), timeout=timeout)
            runs.append(result.as_dict())
    client = get_client()
    share = ungrounded_share(grounding_record(client, client.model))
    out = measure(dict(npc.db.journal or {}))
    out.update(seconds=round(time.perf_counter() - t0, 1), failed_share=share,
               modes=[r.get("modes") for r in runs],
               rejected=sum(r.get("facts_rejected", 0) for r in runs))
    return out


def run_model(name, extractors, args):
    """The replays of one model: ``{extractor: figures}`` (requests counted by the double)."""
    figures = {}
    for extractor in extractors:
        double = None
        if name != "embedded":
            from tests.support.llm_double import LLMDouble

            model = JunkModel() if name == "junk" else FaithfulModel()
            double = LLMDouble(default=model).start()
            from django.conf import settings

            settings.AI_LLM_BASE_URL = double.base_url
            settings.AI_LLM_API_KEY = "bench"
        print(f"  {name} / {extractor} ...", file=sys.stderr, flush=True)
        figures[extractor] = replay(extractor, args.timeout)
        if double is not None:
            figures[extractor]["requests"] = len(double.requests)
            double.stop()
    return figures


def report(results):
    print("| model | extractor | entries | player facts | NPC lines | junk | stated facts "
          "journaled | NPC lines share | junk share | model's facts failed | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, rows in results.items():
        for extractor, r in rows.items():
            failed = "-" if r["failed_share"] is None else f"{r['failed_share']:.0%}"
            print(f"| {model} | {extractor} | {r['entries']} | {r['player']} | {r['npc']} | "
                  f"{r['junk']} | {r['stated_journaled']}/{r['stated']} "
                  f"({r['stated_share']:.0%}) | {r['npc_share']:.0%} | {r['junk_share']:.0%} | "
                  f"{failed} | {r['seconds']} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="junk,faithful",
                        help="doubles to run: junk, faithful (comma-separated; '' for none)")
    parser.add_argument("--embedded", action="store_true", help="also the embedded model")
    parser.add_argument("--extractors", default="model,auto,rule")
    parser.add_argument("--timeout", type=float, default=900, help="s per extraction")
    parser.add_argument("--show", action="store_true", help="print every journal entry")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    from benchmarks._evennia_env import setup_evennia

    workdir = tempfile.mkdtemp(prefix="journal-replay-")
    overrides = {"AI_MEMORY_ENABLED": False, "AI_TICK_INTERVAL": 10**7,
                 "AI_SLEEP_AFTER_IDLE": 0}
    setup_evennia(workdir, **overrides)
    extractors = [e for e in args.extractors.split(",") if e]
    results = {}
    try:
        for name in [m for m in args.models.split(",") if m]:
            results[name] = run_model(name, extractors, args)
        if args.embedded:
            from django.conf import settings

            settings.AI_LLM_BASE_URL = None
            settings.AI_LLM_API_KEY = None
            results["embedded"] = run_model(
                "embedded", [e for e in extractors if e != "rule"], args)
    finally:
        report(results)
        if args.embedded:
            from ai_contrib.llm.embedded import stop_embedded_server
            from tests.support.twisted_util import wait_for

            try:
                wait_for(stop_embedded_server(), timeout=60)
            except TimeoutError:  # its child exits with this process anyway
                print("the embedded server did not stop within 60 s", file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)
    if args.show:
        for model, rows in results.items():
            for extractor, r in rows.items():
                print(f"\n{model} / {extractor}:")
                for kind, importance, content in r["contents"]:
                    print(f"  {kind:6} {importance:>2} {content}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
