"""
The NPC's world in its reply prompts (``docs/design.md``, "Prompt structure", "Lore and pins",
"Scene, events and people"): what lore matching costs per turn, how many tokens each prompt
section takes, whether the embedded model's prefix cache still works with the world in the
prompt, and how the replies read.

Usage::

    .venv/bin/python benchmarks/world.py                   # every part: about 15-25 min on 2 cores
    .venv/bin/python benchmarks/world.py --parts lore,tokens          # no model: about 1 min
    .venv/bin/python benchmarks/world.py --parts style --style-conv conv-26 \\
        --set LLM_TEMPERATURE=0.5                          # a candidate on the tuning half

Data: player lines are LoCoMo turns (Maharana et al., ACL 2024; CC BY-NC 4.0,
``data/locomo/NOTICE.txt``) read with ``demo/locomo.py``, cut at ``--max-chars`` (200)
characters; the speaker of a line is a player Character named after the LoCoMo speaker (two
players). In parts 2-4 every ``--tavern-every`` (6th) line is instead one of
:data:`TAVERN_LINES`, fixed questions a guest asks an innkeeper, so the template's lore (whose keys
are rooms, drinks, stew, roads, rumours) is triggered at all: LoCoMo's chat rarely names them.
Everything runs in one process on Evennia's database (``benchmarks/_evennia_env.py``: a file
SQLite database in a temporary directory, tables from the models) with real
``AssistantCharacter`` NPCs, real rooms, Tags, the real ``LoreScript`` store and pins.

1. **lore** (no model): ``--npcs`` (50) NPCs in ``--rooms`` (10) rooms, two rooms to a zone
   (Tag category ``zone``), ten factions (Tag category ``faction``), one pin each (50 pins,
   ``ai_contrib.npc.pins.add_pin``) and 500 lore entries written with ``ai_contrib.lore.add_entry``
   (keys: two words each from LoCoMo's frequent words, one entry in ten constant): 5 ``all``,
   21 per ``faction:X``, 10 per ``location:<room>``, 12 per ``zone:<z>``, 2 per ``npc:<name>``,
   25 ``tag:retired`` (a Tag no NPC has). NPC 0 may know 50 of them. Per turn (``--lore-turns``
   LoCoMo lines, each with the 3 lines before it: ``lore_texts``, ``AI_LORE_SCAN_LINES``) the
   wall time of ``ai_contrib.lore.lore_for_npc(npc0, texts)`` (the shipped budget,
   ``AI_LORE_TOKEN_BUDGET``, and tokenizer), p50/p95 in microseconds; then the 450 entries NPC 0
   cannot know are deleted (``delete_entry``) and the same turns are timed again. The ratio
   500/50 is the figure: matching must not grow with entries the NPC cannot know.
2. **tokens** (no model): Marta (``game_template/world/tavern.py``'s persona) in the tavern room
   (zone ``crossroads``), the template's lore (``game_template/world/lore.py``), two pins of
   her own and one about the first player; ``--turns`` (40) lines said to her with
   ``receive_speech`` and answered by ``run_tick`` -> ``replies.answer_turn`` against
   ``tests/support/llm_double.py``'s double (a short in-character line, at once). Tokens per prompt
   section from each reply's receipt (``receipt["parts"]``, our tokenizer): mean, median, max.
3. **reuse** (embedded model): the same ``--turns`` lines (``--reuse-conv``, conv-26) to the
   embedded model, started as the contrib starts it (``AI_LLM_BASE_URL`` unset: the LLM client
   spawns ``ai_contrib.llm.embedded``'s server), once with no lore store and no pins, once with
   the template's lore and the pins (a fresh Marta each time; the scene is always on, as
   shipped). Per pass, over the replies that follow a reply (not the first): prompt tokens
   reused from the server's cache / prompt tokens (the server's own ``timings`` in each
   receipt), median tokens evaluated, median reply seconds.
4. **style** (embedded model): ``--style-lines`` (60) lines of ``--style-conv`` (conv-30, the
   report half; conv-26 is the tuning half) to Marta with the template's lore, in blocks of
   ``--block`` (20) lines, a fresh Marta per block (so no block reaches a compaction). Share of
   replies that repeat a 4-gram of her previous reply (in the block), that contain "!!", that
   are not English (heuristic: :func:`not_english`), that name a listener, or a key of a lore
   entry she may know. Settings as shipped, and, with ``--set NAME=VALUE``, those settings too
   (a second column).

Settings: every ``AI_*`` option at its default except ``AI_TICK_INTERVAL`` (10^7 s: the
benchmark drives every tick), ``AI_SLEEP_AFTER_IDLE`` 0 (no sleep), ``AI_MEMORY_DIR`` in the
temporary directory, and ``--set`` in part 4. The sampling seed is the shipped one (none), so
parts 3 and 4 vary from run to run by a few points. Nothing is asserted. Markdown on stdout,
progress on stderr.
"""

import argparse
import gc
import json
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "game_template"))  # world.lore, world.tavern

from benchmarks._cli import setting_overrides  # noqa: E402

#: a guest's questions to an innkeeper, mixed into the LoCoMo lines of parts 2-4
TAVERN_LINES = [
    "How much is a room for the night, and is breakfast included?",
    "Any news from the road? I heard something about the bridge at Hollin.",
    "What's in the stew today? I'm hungry after the ride.",
    "A mug of ale, please. What do you charge for cider?",
    "Have you heard the rumours about lights on the barrow hill?",
    "Is the east room free? I'd like to stay the night.",
    "What's good to drink here besides beer?",
    "Which road should a carter take now, with the bridge gone?",
]

PINS_OWN = [
    "Your late husband Tomas built the Stag's oak bar with his own hands; you never sell it.",
    "You keep a crossbow under the bar and the watch captain is your cousin Edric.",
]
PIN_PLAYER = "{name} paid for a week's lodging in advance and has the east room."

#: common English words for :func:`not_english`
STOPWORDS = set("""
a about all also am an and any are as at be been but by can could did do does for from had has
have he her here him his how i if in into is it its just know like me more my no not now of on
one or our out so some that the their them then there they this to too up us very was we well
were what when where which who will with would you your yes oh dear love aye""".split())

_WORD = re.compile(r"[a-z']+")
#: a line written for a speaker: "Jon: ...", "Gina (Jen): ..." at the start or after a sentence
SPEAKER_PREFIX = re.compile(r"(?:^|\n|[.!?]\s+)[A-Z][a-z]+(?: \([^)]*\))?:\s")


def progress(text):
    print(text, file=sys.stderr, flush=True)


def pct(part, whole):
    return f"{100.0 * part / whole:.0f} %" if whole else "n/a"


def quantile(values, q):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


# --- data -------------------------------------------------------------------------------------

def locomo_turns(conv_id):
    from demo.locomo import load_conversation

    return load_conversation(conv_id).turns


def player_lines(conv_id, count, max_chars, tavern_every=0):
    """``[(speaker, text)]``: LoCoMo turns cut at ``max_chars``, every ``tavern_every``-th
    replaced by a :data:`TAVERN_LINES` line (said by the speaker whose turn it was)."""
    out = []
    for i, turn in enumerate(locomo_turns(conv_id)):
        if len(out) >= count:
            break
        text = turn.text
        if tavern_every and (len(out) + 1) % tavern_every == 0:
            text = TAVERN_LINES[(len(out) // tavern_every) % len(TAVERN_LINES)]
        if len(text) > max_chars:
            text = text[:max_chars].rsplit(" ", 1)[0] + "..."
        out.append((turn.speaker, text))
    return out


def frequent_words(count):
    """LoCoMo's most frequent words of 4+ letters that are no stopword (keys for part 1)."""
    from demo.locomo import DATA_FILE

    words = Counter()
    for sample in json.loads(DATA_FILE.read_text(encoding="utf-8")):
        for key, turns in sample["conversation"].items():
            if key.startswith("session_") and isinstance(turns, list):
                for turn in turns:
                    words.update(w for w in _WORD.findall(turn.get("text", "").lower())
                                 if len(w) >= 4 and w not in STOPWORDS and "'" not in w)
    return [w for w, _ in words.most_common(count)]


# --- Evennia ----------------------------------------------------------------------------------

def wait(d, timeout=600):
    from tests.support.twisted_util import wait_for

    return wait_for(d, timeout=timeout)


def make_room(key, zone=None):
    from evennia.objects.objects import DefaultRoom
    from evennia.utils import create

    room = create.create_object(DefaultRoom, key=key, nohome=True)
    if zone:
        room.tags.add(zone, category="zone")
    return room


def make_npc(key, room, persona=None):
    from evennia.utils import create

    from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

    npc = create.create_object(AssistantCharacter, key=key, location=room, home=room)
    if persona:
        npc.db.persona = persona
    return npc, get_assistant_script(npc)


def make_player(key, room):
    from evennia.objects.objects import DefaultCharacter
    from evennia.utils import create

    return create.create_object(DefaultCharacter, key=key, location=room, home=room)


def say(script, npc, player, text, timeout=300):
    """One line to the NPC, answered by one tick; ``(reply text, receipt)`` or ``("", None)``."""
    from twisted.internet import reactor

    before = len(script.db.reply_receipts or [])
    script.receive_speech(player, text, to=npc)
    d = script.run_tick()
    if d is not None:
        wait(d, timeout)
    deadline = time.monotonic() + timeout
    while script.ndb.busy and time.monotonic() < deadline:
        reactor.iterate(0.01)
    receipts = script.db.reply_receipts or []
    if len(receipts) == before and len(receipts) < 20:
        return "", None
    replies = [m for m in script.history if m.get("role") == "assistant"]
    return (replies[-1]["content"] if replies else ""), dict(receipts[-1])


def set_world_lore(on):
    """The template's lore in the store (``on``), or no lore store at all."""
    from ai_contrib import lore

    if on:
        report = lore.load_lore_modules(["world.lore"])
        if report["errors"]:
            progress(f"lore errors: {report['errors']}")
    else:
        store = lore.get_lore_store()
        if store is not None:
            store.delete()


# --- part 1: lore matching cost ---------------------------------------------------------------

def part_lore(args):
    from ai_contrib import lore
    from ai_contrib.core import lore as core
    from ai_contrib.npc.pins import add_pin

    rng = random.Random(args.seed)
    progress(f"part 1: {args.npcs} NPCs, {args.rooms} rooms, 500 lore entries")
    rooms = [make_room(f"Room {r}", zone=f"zone{r // 2}") for r in range(args.rooms)]
    npcs = []
    for i in range(args.npcs):
        npc, _ = make_npc(f"Npc{i}", rooms[i % args.rooms])
        npc.tags.add(f"faction{i % 10}", category="faction")
        add_pin(npc, f"Npc{i} owes the miller {i + 3} silver.")
        npcs.append(npc)
    vocab = frequent_words(400)
    plan = [("all", 5)] + [(f"faction:faction{f}", 21) for f in range(10)]
    plan += [(f"location:Room {r}", 10) for r in range(args.rooms)]
    plan += [(f"zone:zone{z}", 12) for z in range((args.rooms + 1) // 2)]
    plan += [(f"npc:Npc{i}", 2) for i in range(args.npcs)]
    total = sum(n for _, n in plan)
    plan.append(("tag:retired", max(0, 500 - total)))
    made = 0
    started = time.perf_counter()
    for condition, n in plan:
        for _ in range(n):
            made += 1
            constant = made % 10 == 0
            text = f"{'Always' if constant else 'Entry'} {made}: " + " ".join(
                rng.sample(vocab, 12)) + "."
            if constant:
                lore.add_entry(text, constant=True, condition=condition)
            else:
                lore.add_entry(text, keys=rng.sample(vocab, 2), condition=condition)
    write_s = time.perf_counter() - started
    target = npcs[0]
    facts = lore.npc_facts(target)
    entries = lore.lore_entries()
    knowable = [e for e in entries if core.may_know(e, facts)]
    progress(f"  {len(entries)} entries written in {write_s:.1f} s; {target.key} may know "
             f"{len(knowable)}")
    turns = [t.text for t in locomo_turns(args.lore_conv)][: args.lore_turns + 3]

    def measure():
        times, chosen, skipped = [], [], 0
        lore.lore_for_npc(target, ["warm up"])  # builds the index once
        gc.collect()
        for i in range(3, len(turns)):
            texts = lore.lore_texts(target, [turns[i]], turns[max(0, i - 3):i])
            t0 = time.perf_counter()
            result = lore.lore_for_npc(target, texts)
            times.append((time.perf_counter() - t0) * 1e6)
            chosen.append(tuple(e["text"] for e in result["chosen"]))
            skipped += len(result["skipped"])
        return times, chosen, skipped

    keep = {e["id"] for e in knowable}
    others = [e for e in entries if e["id"] not in keep]
    big, big_chosen, small, small_chosen = [], None, [], None
    big_skipped = small_skipped = 0
    for round_ in range(args.lore_rounds):  # 500, 50, 500, 50...: drift hits both alike
        if round_:
            for entry in others:  # the same entries again (new ids)
                lore.add_entry(entry["text"], keys=entry["keys"] or None,
                               constant=entry["constant"], condition=entry["condition"])
            others = [e for e in lore.lore_entries() if e["id"] not in keep]
        times, big_chosen, skipped = measure()
        big += times
        big_skipped += skipped
        for entry in others:
            lore.delete_entry(entry["id"])
        times, small_chosen, skipped = measure()
        small += times
        small_skipped += skipped
    keyed = [len([t for t in c if t.startswith("Entry")]) for c in small_chosen]
    rows = [(f"{len(entries)} in the store", big), (f"only the {len(keep)} it may know", small)]
    out = [
        "## 1. Lore matching per turn (`lore_for_npc`)",
        "",
        f"{args.npcs} NPCs in {args.rooms} rooms ({(args.rooms + 1) // 2} zones, 10 factions), "
        f"{sum(len(p.attributes.get('ai_pins') or []) for p in npcs)} pins, "
        f"{len(entries)} entries (5 all, 21 per faction, 10 per room, 12 per zone, 2 per NPC, "
        f"{plan[-1][1]} for a Tag nobody has; one in ten constant), written in {write_s:.1f} s. "
        f"NPC `{target.key}` (room, zone, faction, name) may know {len(keep)}. "
        f"{len(turns) - 3} turns of LoCoMo {args.lore_conv}, each scanned with the 3 lines "
        f"before it; shipped `AI_LORE_TOKEN_BUDGET` and tokenizer; wall time per call, one "
        f"database query for the store included; {args.lore_rounds} rounds of 500 then "
        f"{len(keep)} (the others deleted, then written again), pooled.",
        "",
        "| entries in the store | p50 µs | p95 µs | max µs | entries given per turn (mean) |",
        "|---|---:|---:|---:|---:|",
    ]
    for (label, times), chosen in zip(rows, (big_chosen, small_chosen)):
        out.append(f"| {label} | {quantile(times, .5):.0f} | {quantile(times, .95):.0f} | "
                   f"{max(times):.0f} | {statistics.mean(map(len, chosen)):.1f} |")
    out += [
        "",
        f"Ratio {len(entries)} / {len(keep)} entries: p50 "
        f"{quantile(big, .5) / quantile(small, .5):.2f}x, "
        f"p95 {quantile(big, .95) / quantile(small, .95):.2f}x. Same entries chosen on every "
        f"turn: {'yes' if big_chosen == small_chosen else 'NO'}; keyed entries triggered per "
        f"turn: mean {statistics.mean(keyed):.2f}, turns with one or more "
        f"{pct(sum(1 for k in keyed if k), len(keyed))}; left out for the budget: "
        f"{big_skipped} / {small_skipped} in all (a full budget, not an error).",
        "",
    ]
    for npc in npcs:
        npc.delete()
    for room in rooms:
        room.delete()
    set_world_lore(False)
    return out


# --- the tavern -------------------------------------------------------------------------------

class Tavern:
    """Marta in the tavern room with two players; ``world``: template lore and pins."""

    def __init__(self, speakers):
        from world.tavern import MARTA_PERSONA

        self.persona = MARTA_PERSONA
        self.room = make_room("The Sleeping Stag", zone="crossroads")
        self.players = {name: make_player(name, self.room) for name in speakers}
        self.npc = self.script = None

    def fresh_marta(self, pins=False):
        from ai_contrib.npc.pins import add_pin

        if self.npc is not None:
            self.npc.delete()
        self.npc, self.script = make_npc("Marta", self.room, self.persona)
        if pins:
            for text in PINS_OWN:
                add_pin(self.npc, text)
            first = next(iter(self.players.values()))
            add_pin(self.npc, PIN_PLAYER.format(name=first.key), player=first.dbref)
        return self.npc

    def talk(self, lines, on_reply=None):
        """Every line said and answered; ``[(line, reply, receipt)]``."""
        out = []
        for i, (speaker, text) in enumerate(lines):
            reply, receipt = say(self.script, self.npc, self.players[speaker], text)
            out.append((text, reply, receipt))
            if on_reply:
                on_reply(i, reply, receipt)
        return out


def speakers_of(lines):
    return list(dict.fromkeys(s for s, _ in lines))


# --- part 2: tokens per section ---------------------------------------------------------------

SECTIONS = ("system", "pins", "lore", "scene", "memories", "summary", "history", "turn")


def part_tokens(args):
    from django.conf import settings

    from ai_contrib.llm.client import reset_client
    from tests.support.llm_double import LLMDouble

    answers = ["Aye, love, sit by the fire and tell me more.",
               "That sounds like a fine thing. What will you do next?",
               "Well now, the road's long. Have a bowl of stew.",
               "I'll remember that, dear. Anything to drink?"]
    counter = iter(range(10**6))
    double = LLMDouble(default=lambda request: answers[next(counter) % len(answers)])
    double.start()
    lines = player_lines(args.reuse_conv, args.turns, args.max_chars, args.tavern_every)
    progress(f"part 2: {len(lines)} turns against the LLM double")
    settings.AI_LLM_BASE_URL, settings.AI_LLM_API_KEY = double.base_url, "bench"
    wait(reset_client())
    try:
        set_world_lore(True)
        tavern = Tavern(speakers_of(lines))
        tavern.fresh_marta(pins=True)
        results = tavern.talk(lines)
    finally:
        settings.AI_LLM_BASE_URL, settings.AI_LLM_API_KEY = None, None
        wait(reset_client())
        double.stop()
    per = {name: [] for name in SECTIONS}
    totals = []
    for _, _, receipt in results:
        if not receipt:
            continue
        sums = Counter()
        for part in receipt.get("parts") or ():
            sums[part["part"]] += int(part.get("tokens") or 0)
        for name in SECTIONS:
            per[name].append(sums.get(name, 0))
        totals.append(sum(sums.values()))
    n = len(totals)
    out = [
        "## 2. Prompt tokens per section (real reply path, LLM double)",
        "",
        f"Marta (template persona) in the tavern (zone crossroads), the template's lore "
        f"({len(__import__('world.lore', fromlist=['LORE']).LORE)} entries), "
        f"{len(PINS_OWN)} pins of her own + 1 about {lines[0][0]}; {len(lines)} lines of LoCoMo "
        f"{args.reuse_conv} (two speakers, every {args.tavern_every}th a tavern question), "
        f"{n} replies with a receipt; tokens from `receipt['parts']` (our tokenizer), shipped "
        f"settings.",
        "",
        "| section | mean | median | max | replies with it | share of the prompt (mean) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    mean_total = statistics.mean(totals) if totals else 0
    for name in SECTIONS:
        values = per[name]
        if not values or (name == "summary" and not any(values)):
            continue
        out.append(f"| {name} | {statistics.mean(values):.0f} | {statistics.median(values):.0f}"
                   f" | {max(values)} | {sum(1 for v in values if v)} | "
                   f"{pct(statistics.mean(values), mean_total)} |")
    if totals:
        out.append(f"| whole prompt | {mean_total:.0f} | {statistics.median(totals):.0f} | "
                   f"{max(totals)} | {n} | 100 % |")
    out.append("")
    return out


# --- parts 3 and 4: the embedded model --------------------------------------------------------

def start_embedded():
    """The embedded server as the contrib starts it: the client spawns it on first use."""
    from ai_contrib.llm.client import get_client

    progress("starting the embedded model server (AI_LLM_BASE_URL unset)")
    t0 = time.monotonic()
    window = wait(get_client().context_window(), timeout=300)
    progress(f"  ready in {time.monotonic() - t0:.0f} s, context window {window}")
    return window


def part_reuse(args):
    lines = player_lines(args.reuse_conv, args.turns, args.max_chars, args.tavern_every)
    tavern = Tavern(speakers_of(lines))
    rows = []
    for label, world in (("no lore, no pins", False), ("template lore + 3 pins", True)):
        set_world_lore(world)
        tavern.fresh_marta(pins=world)
        progress(f"part 3: {label}, {len(lines)} lines")
        results = tavern.talk(lines, on_reply=lambda i, r, rc: progress(
            f"  {i + 1}: {(rc or {}).get('cached_tokens')}/{(rc or {}).get('prompt_tokens')} "
            f"cached, {(rc or {}).get('seconds', 0):.1f} s") if (i + 1) % 10 == 0 else None)
        follow = [rc for _, _, rc in results[1:] if rc and rc.get("prompt_tokens")]
        prompt = sum(rc["prompt_tokens"] for rc in follow)
        cached = sum(rc.get("cached_tokens") or 0 for rc in follow)
        per_reply = [(rc.get("cached_tokens") or 0) / rc["prompt_tokens"] for rc in follow]
        lore_turns = sum(1 for _, _, rc in results if rc and any(
            p["part"] == "lore" for p in rc.get("parts") or ()))
        rows.append((label, len(results), len(follow), prompt, cached, per_reply,
                     [rc["prompt_tokens"] - (rc.get("cached_tokens") or 0) for rc in follow],
                     [rc["seconds"] for rc in follow],
                     max((rc["prompt_tokens"] for rc in follow), default=0), lore_turns,
                     sum(1 for _, r, _ in results if not r)))
    set_world_lore(False)
    tavern.npc.delete()
    out = [
        "## 3. Prefix-cache reuse on the embedded model",
        "",
        f"{len(lines)} lines of LoCoMo {args.reuse_conv} (two speakers, every "
        f"{args.tavern_every}th a tavern question) to a fresh Marta per pass, through "
        f"`run_tick` -> `answer_turn` to the embedded model (shipped settings, scene on in both "
        f"passes); figures over the replies that follow a reply, from the server's `timings` "
        f"in each receipt.",
        "",
        "| pass | replies | counted | reused / prompt tokens | reuse median per reply | "
        "median evaluated | median reply s | max prompt | replies with lore | no reply |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (label, n, counted, prompt, cached, per_reply, evaluated, seconds, top, lore_n,
         empty) in rows:
        out.append(f"| {label} | {n} | {counted} | {cached} / {prompt} = "
                   f"{pct(cached, prompt)} | {pct(statistics.median(per_reply), 1)} | "
                   f"{statistics.median(evaluated):.0f} | {statistics.median(seconds):.2f} | "
                   f"{top} | {lore_n} | {empty} |")
    out.append("")
    return out


def ngrams(text, n=4):
    words = _WORD.findall(text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def not_english(text):
    """
    True when ``text`` does not read as English: under 90 % of its letters are ASCII, or it has
    4+ words of which under 15 % are among :data:`STOPWORDS` (English prose runs at 40-60 %).
    """
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return False
    if sum(1 for c in letters if c.isascii()) / len(letters) < 0.9:
        return True
    words = _WORD.findall(text.lower())
    return len(words) >= 4 and sum(1 for w in words if w in STOPWORDS) / len(words) < 0.15


def style_figures(blocks, listeners, lore_keys):
    """Shares over the replies of the blocks (each ``[(line, reply, receipt)]``)."""
    replies, repeat, follow, bangs, foreign, named, lored, empty, words, secs = (
        0, 0, 0, 0, 0, 0, 0, 0, [], [])
    voiced = 0
    key_patterns = [re.compile(r"\b" + re.escape(k) + r"\b", re.I) for k in lore_keys]
    name_patterns = [re.compile(r"\b" + re.escape(n) + r"\b", re.I) for n in listeners]
    for block in blocks:
        previous = None
        for _, reply, receipt in block:
            if not reply:
                empty += 1
                previous = None
                continue
            replies += 1
            words.append(len(reply.split()))
            if receipt:
                secs.append(receipt.get("seconds") or 0)
            if previous is not None:
                follow += 1
                repeat += bool(ngrams(reply) & ngrams(previous))
            bangs += "!!" in reply
            voiced += bool(SPEAKER_PREFIX.search(reply))
            foreign += not_english(reply)
            named += any(p.search(reply) for p in name_patterns)
            lored += any(p.search(reply) for p in key_patterns)
            previous = reply
    return {"replies": replies, "empty": empty, "repeat": (repeat, follow),
            "bangs": (bangs, replies), "foreign": (foreign, replies),
            "named": (named, replies), "lore": (lored, replies), "voiced": (voiced, replies),
            "words": statistics.median(words) if words else 0,
            "seconds": statistics.median(secs) if secs else 0}


def part_style(args, overrides):
    from django.test import override_settings

    from ai_contrib import lore
    from ai_contrib.core import lore as core
    from ai_contrib.llm.client import reset_client

    lines = player_lines(args.style_conv, args.style_lines, args.max_chars, args.tavern_every)
    tavern = Tavern(speakers_of(lines))
    set_world_lore(True)
    tavern.fresh_marta()
    facts = lore.npc_facts(tavern.npc)
    lore_keys = sorted({k for e in lore.lore_entries() if core.may_know(e, facts)
                        for k in e["keys"]})
    runs = [("as shipped", {})]
    for group in [overrides] + [setting_overrides(c.split()) for c in args.candidate]:
        if group:
            runs.append(("with " + ", ".join(f"{k[3:]}={v}" for k, v in group.items()), group))
    columns, samples = [], []
    for label, settings_ in runs:
        progress(f"part 4: {label}, {len(lines)} lines in blocks of {args.block}")
        with override_settings(**settings_):
            wait(reset_client())
            blocks = []
            for start in range(0, len(lines), args.block):
                tavern.fresh_marta()
                blocks.append(tavern.talk(lines[start:start + args.block]))
                progress(f"  block {len(blocks)} done")
        wait(reset_client())
        columns.append((label, style_figures(blocks, list(tavern.players), lore_keys)))
        samples.append((label, [r for b in blocks for _, r, _ in b][:4]))
    set_world_lore(False)
    tavern.npc.delete()
    out = [
        "## 4. In character (embedded model, Marta, the template's lore)",
        "",
        f"{len(lines)} lines of LoCoMo {args.style_conv} (speakers {', '.join(tavern.players)}; "
        f"every {args.tavern_every}th a tavern question), a fresh Marta every {args.block} "
        f"lines; lore keys she may know: {len(lore_keys)}. Not English: under 90 % ASCII "
        f"letters, or 4+ words with under 15 % common English words.",
        "",
        "| figure | " + " | ".join(label for label, _ in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    names = [("repeats a 4-gram of her previous reply", "repeat"), ('contains "!!"', "bangs"),
             ("not English", "foreign"), ('has a "Name:" line (speaks for someone)', "voiced"),
             ("names a listener", "named"),
             ("names a lore key", "lore")]
    for title, key in names:
        out.append(f"| {title} | " + " | ".join(
            f"{pct(*fig[key])} ({fig[key][0]}/{fig[key][1]})" for _, fig in columns) + " |")
    out.append("| median words a reply | " + " | ".join(
        f"{fig['words']:.0f}" for _, fig in columns) + " |")
    out.append("| median reply s | " + " | ".join(
        f"{fig['seconds']:.2f}" for _, fig in columns) + " |")
    out.append("| no reply (fallback) | " + " | ".join(
        str(fig["empty"]) for _, fig in columns) + " |")
    out.append("")
    for label, replies in samples:
        out.append(f"First replies, {label}: " + " / ".join(
            json.dumps(r[:160], ensure_ascii=False) for r in replies))
        out.append("")
    return out


def stop_server(d, limit=20.0):
    """Drive the embedded server's stop. Without ``reactor.run()`` Twisted has no SIGCHLD
    handler, so exited children are reaped here by hand."""
    from twisted.internet import process, reactor

    box = []
    d.addBoth(box.append)
    deadline = time.monotonic() + limit
    while not box and time.monotonic() < deadline:
        reactor.iterate(0.05)
        process.reapAllProcesses()
    if not box:
        progress("the embedded server did not report its exit; it ends with this process")


# --- main -------------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="lore,tokens,reuse,style")
    parser.add_argument("--npcs", type=int, default=50)
    parser.add_argument("--rooms", type=int, default=10)
    parser.add_argument("--lore-turns", type=int, default=400)
    parser.add_argument("--lore-conv", default="conv-41")
    parser.add_argument("--lore-rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=40, help="lines of parts 2 and 3")
    parser.add_argument("--reuse-conv", default="conv-26")
    parser.add_argument("--style-conv", default="conv-30")
    parser.add_argument("--style-lines", type=int, default=60)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--max-chars", type=int, default=200)
    parser.add_argument("--tavern-every", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a contrib setting for part 4's second column")
    parser.add_argument("--candidate", action="append", default=[], metavar="'A=1 B=2'",
                        help="one more column of part 4 with these settings")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    workdir = tempfile.mkdtemp(prefix="ai-contrib-world-")
    os.environ.setdefault("MEM0_DIR", os.path.join(workdir, "mem0"))
    from benchmarks._evennia_env import setup_evennia

    setup_evennia(workdir, AI_TICK_INTERVAL=10**7, AI_SLEEP_AFTER_IDLE=0,
                  AI_MEMORY_DIR=os.path.join(workdir, "memory"))
    overrides = setting_overrides(args.set)
    started = time.monotonic()
    out = ["# The NPC's world in the reply prompt", ""]
    try:
        if "lore" in parts:
            out += part_lore(args)
        if "tokens" in parts:
            out += part_tokens(args)
        if "reuse" in parts or "style" in parts:
            start_embedded()
        if "reuse" in parts:
            out += part_reuse(args)
        if "style" in parts:
            out += part_style(args, overrides)
    finally:
        if "reuse" in parts or "style" in parts:
            from ai_contrib.llm.embedded import stop_embedded_server

            stop_server(stop_embedded_server())
        shutil.rmtree(workdir, ignore_errors=True)
    from ai_contrib.settings import get_setting

    out.append(f"Wall time {time.monotonic() - started:.0f} s; {os.cpu_count()} CPUs; shipped "
               f"LLM settings: temperature {get_setting('LLM_TEMPERATURE')}, repeat penalty "
               f"{get_setting('LLM_REPEAT_PENALTY') or 'of the model profile'}, max reply tokens "
               f"{get_setting('LLM_MAX_REPLY_TOKENS')}, model {get_setting('LLM_MODEL')}.")
    print("\n".join(out))


if __name__ == "__main__":
    main()
