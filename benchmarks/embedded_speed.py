"""
The embedded model's speed with llama.cpp's flash attention off, on and "auto", at several
depths of context: prompt evaluation (tokens/s) and generation (ms a token).

``docs/design.md``, "The embedded model". Usage::

    .venv/bin/python benchmarks/embedded_speed.py [--modes off,on,auto] [--depths 300,1000,2000,3500]
        [--reps 3] [--json OUT]

Each mode gets a real embedded server (``EmbeddedServerProcess``, one slot, the shipped thread
settings) and the same prompts: LoCoMo turns (``data/locomo/``; synthetic lines without it) up to
about each depth, in our token count (the server's own count is printed). For each depth the
prompt is sent once (the figure for prompt evaluation: the depths' prompts share their start,
so the server evaluates what each adds to the one before, a rate at that depth), then ``--reps`` times more
with the same prompt, which the server has cached, so each of those measures generation at that
depth alone: ``max_tokens`` 96 with ``ignore_eos``, the length of a capped NPC reply. Figures are
llama.cpp's own ``timings``; medians over the reps. The modes run one after the other on the
same machine, and the ratios are against the first of ``--modes`` (``off`` by default) in the
same run. Nothing is asserted.
"""

import argparse
import json
import os
import statistics
import sys
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import django  # noqa: E402
from django.conf import settings  # noqa: E402

if not settings.configured:
    settings.configure()
    django.setup()

from django.test import override_settings  # noqa: E402

from ai_contrib.core.tokens import count_tokens  # noqa: E402
from ai_contrib.llm.embedded import EmbeddedServerProcess  # noqa: E402

LOCOMO = os.path.join(ROOT, "data", "locomo", "locomo_dev.json")
GENERATED = 96


def conversation_lines():
    """LoCoMo turns as ``"Name: text"`` lines, or synthetic ones without the data."""
    if os.path.exists(LOCOMO):
        with open(LOCOMO, encoding="utf-8") as handle:
            sample = json.load(handle)[0]["conversation"]
        lines = []
        for key in sorted((k for k in sample if k.startswith("session_") and
                           isinstance(sample[k], list)), key=lambda k: int(k.split("_")[1])):
            lines += [f"{turn['speaker']}: {turn['text']}" for turn in sample[key]]
        return lines
    return [f"Player {i % 3}: the caravan left the mill at dawn with {i} barrels of cider."
            for i in range(2000)]


def prompt_of(lines, depth):
    """Chat messages whose text is about ``depth`` tokens (our count) of conversation."""
    picked, used = [], 0
    for line in lines:
        if used >= depth:
            break
        picked.append(line)
        used += count_tokens(line) + 4
    return [{"role": "system", "content": "You are Marta, who keeps the inn. Answer in character."},
            {"role": "user", "content": "\n".join(picked) + "\n\nMarta, what do you make of it?"}]


def ask(server, messages):
    """One chat request; llama.cpp's ``timings`` dict of the response."""
    body = json.dumps({"messages": messages, "max_tokens": GENERATED, "temperature": 0,
                       "ignore_eos": True, "cache_prompt": True}).encode()
    request = urllib.request.Request(
        server.base_url + "/chat/completions", body,
        {"Content-Type": "application/json", "Authorization": f"Bearer {server.api_key}"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())["timings"]


def measure(mode, depths, reps, lines):
    """Rows ``{"mode", "depth", "prompt_tokens" (the server's count), "evaluated" (tokens not
    taken from the cache), "prompt_tps" (evaluated tokens a second), "gen_ms" (milliseconds a
    generated token)}`` for one mode."""
    rows = []
    with override_settings(AI_EMBEDDED_FLASH_ATTENTION=mode, AI_EMBEDDED_SLOTS=1):
        with EmbeddedServerProcess() as server:
            for depth in depths:
                messages = prompt_of(lines, depth)
                first = ask(server, messages)
                again = [ask(server, messages) for _ in range(reps)]
                # the depths' prompts share their start, so the server evaluates only what
                # this one adds to the previous depth's: a rate at that depth
                rows.append({
                    "mode": mode, "depth": depth,
                    "prompt_tokens": first["prompt_n"] + first.get("cache_n", 0),
                    "evaluated": first["prompt_n"], "prompt_tps": first["prompt_per_second"],
                    "gen_ms": statistics.median(t["predicted_per_token_ms"] for t in again),
                })
                print(f"  {mode:>4} {depth:>5}: prompt {rows[-1]['prompt_tokens']} tokens, "
                      f"{first['prompt_n']} evaluated at {first['prompt_per_second']:.0f}/s, "
                      f"generation {rows[-1]['gen_ms']:.1f} ms a token", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="off,on,auto")
    parser.add_argument("--depths", default="300,1000,2000,3500")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    depths = [int(d) for d in args.depths.split(",")]
    lines = conversation_lines()
    rows = []
    for mode in modes:
        rows += measure(mode, depths, args.reps, lines)
    base = {row["depth"]: row for row in rows if row["mode"] == modes[0]}
    print(f"\n{'mode':>5} {'depth':>6} {'prompt tokens':>13} {'prompt tok/s':>12} "
          f"{'gen ms/token':>12} {'gen vs ' + modes[0]:>12} {'prompt vs ' + modes[0]:>14}")
    for row in rows:
        ref = base[row["depth"]]
        print(f"{row['mode']:>5} {row['depth']:>6} {row['prompt_tokens']:>13} "
              f"{row['prompt_tps']:>12.0f} {row['gen_ms']:>12.1f} "
              f"{row['gen_ms'] / ref['gen_ms']:>11.2f}x {row['prompt_tps'] / ref['prompt_tps']:>13.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"modes": modes, "depths": depths, "reps": args.reps, "rows": rows},
                      handle, indent=1)


if __name__ == "__main__":
    main()
