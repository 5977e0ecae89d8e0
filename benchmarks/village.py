"""
A village that talks (``docs/design.md``, "Gossip"): how far what players say in public travels
between NPCs, that what they whisper never does, and what gossip costs.

**Part 1, the village** (a real game). The game is made from ``game_template/``
(``demo.gamectl.GameDir``) on free loopback ports and started as ``make demo`` starts it, with
``AI_LLM_BASE_URL`` pointing at ``tests/support/llm_double.py``'s ``LLMDouble`` on 127.0.0.1 (this
process). The admin builds the village over telnet with Evennia's builder commands (``dig``,
``tel``, ``create``, ``set``, ``tag``): the template's tavern and gate (zone ``crossroads``),
a mill (zone ``riverside``) and a hermitage (zone ``hills``), four NPCs in each of the first
three and three in the hermitage (the template's Marta and Bram among them: 15 NPCs), two Tag
networks (``guild``: Hilda of the tavern and Garrow of the mill; ``watch``: Bram of the gate and
Wynn of the mill), and Nell, a peddler NPC whom the admin walks (``tel``) to the next of the
tavern, the gate and the mill each morning, so she meets NPCs there (the meeting route). The
hermitage shares no network with anyone else: it is outside every other NPC's network.

Two players, Ann and Bodo, created over telnet. Each simulated day (``--days``, 3; the NPCs'
sleep cycles shortened: the admin puts each NPC to sleep with ``aisleep`` and wakes it with
``aiwake`` once its sleep report arrives, so a night takes seconds):

1. *tell* (days 1 to ``--tell-days``, 2): in every location Ann tells NPCs facts, each with a
   unique tag (``"The Quillon-07 barge sank at the east dock."``): in public with Bodo beside her
   (``talk <npc> = Did you hear? <fact>``; audience Ann and Bodo) and in private
   (``talk/private <npc> = Keep it quiet: <fact>``; audience Ann alone, no other NPC hears it).
   ``--public`` and ``--private`` facts (40 each) in all, spread evenly over the tell days and
   the 15 NPCs;
2. *night*: every NPC sleeps once, in a fixed order; its sleep journals what it heard (fact
   extraction), takes gossip from its networks and consolidates its journal into Mem0;
3. *ask*: in every location the players ask every NPC there about every fact told so far
   (``talk <npc> = <npc>, what have you heard about Quillon-07?``), through the real reply path
   (its retrieval, audience filter and prompt): public facts with Ann and Bodo both present (the
   fact's audience), private facts with Ann alone (so a private fact that had reached another
   NPC's memory would pass the audience filter and show). The NPCs of a room are asked at once,
   each waiting for its answer before its next question. The double records every reply
   request; a request *contains* a fact when the fact's text appears anywhere in its messages.

The double answers replies with one fixed line that repeats nothing; fact extraction journals
each told line's fact (citing its line, as the extraction tool asks), nothing else; summaries
get one fixed sentence (the fidelity guard then keeps an extract of the lines instead).

Printed per day: **diffusion**, the share of (public fact, NPC) pairs whose reply prompt
contains the fact, over the NPCs of the fact's network (the NPCs the told NPC reaches through
shared networks in at most ``AI_GOSSIP_MAX_HOPS`` steps, Nell with every network she held),
the told NPC left out: all of them, and those that were not in the room when it was told (so
only gossip could bring it); the same outside the network (must be 0); **private facts found
in any other NPC's reply prompt, journal or Mem0 memories** (must be 0; journals and Mem0 are
read by the admin's ``py`` once the last day is asked); facts in journals with a wrong
provenance (the first speaker is not Ann, or the chain does not start at the told NPC: must be
0); model calls during the nights by kind (extraction, summary, other: gossip makes none) and
the facts gossip moved.

**Part 2, the cost of a sleep** (one process, Evennia's models on a file SQLite database,
``benchmarks/_evennia_env.py``): an NPC with 5 peers in its zone, each holding ``--cost-facts``
(40) public facts, and 0, 100 or 400 more NPCs in another zone (ten to a room) holding as
many; the wall time
of the shipped ``ai_contrib.npc.gossip.receive_gossip`` (the sleep step) and of ``meet`` (an NPC
entering the room of the 5), p50/p95 over ``--cost-rounds`` (20) runs, each from an empty
journal, and the ratio to 0 NPCs outside. It must not grow with the NPCs outside.

Usage::

    make bench-village                      # both parts: about 15-25 min on 2 cores
    .venv/bin/python benchmarks/village.py --parts cost           # part 2 only: about 1 min
    .venv/bin/python benchmarks/village.py --days 2 --public 12 --private 12 --json v.json

Loopback only; the game is always stopped (killed if it will not stop). Nothing is asserted:
the figures are printed (Markdown on stdout, progress on stderr).
"""

import argparse
import asyncio
import json
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from demo.gamectl import GameDir  # noqa: E402
from demo.telnet import TelnetError, TelnetPlayer, Transcript  # noqa: E402
from tests.support.llm_double import LLMDouble, prompt_text, request_kind, tool_calls  # noqa: E402

#: (room, zone, built by the template, [(npc, role, gossip Tags)])
PLACES = [
    ("The Sleeping Stag", "crossroads", True, [
        ("Marta", None, ()), ("Hilda", "the smith who shoes the horses", ("guild",)),
        ("Pip", "the stable boy", ()), ("Tomas", "a farmer resting his feet", ())]),
    ("The North Gate", "crossroads", True, [
        ("Bram", None, ("watch",)), ("Oswald", "the toll keeper", ()),
        ("Greta", "a fishwife selling from a cart", ()), ("Lukas", "the gate's carpenter", ())]),
    ("The Mill", "riverside", False, [
        ("Edda", "the miller", ()), ("Garrow", "a journeyman of the smiths' guild", ("guild",)),
        ("Hollin", "the miller's boy", ()), ("Wynn", "a retired watchman", ("watch",))]),
    ("The Hermitage", "hills", False, [
        ("Sable", "a hermit who keeps bees", ()), ("Rook", "a shepherd", ()),
        ("Fen", "a herb gatherer", ())]),
]
#: the peddler who walks between these rooms, one a morning (never to the hermitage)
PEDDLER = ("Nell", "a peddler who walks between the tavern, the gate and the mill")
PEDDLER_ROUTE = ("The Sleeping Stag", "The North Gate", "The Mill")
PLAYERS = ("Ann", "Bodo")
NPC_TYPECLASS = "ai_contrib.typeclasses.AssistantCharacter"

_TAG_NAMES = ("Quillon Marrow Teasel Brindle Osprey Cobble Fennick Harrow Lantern Mossel "
              "Pewter Quarry Russet Sorrel Thimble Umber Vetch Wicker Yarrow Zephyr").split()
_PREDICATES = (
    "barge sank at the east dock", "ledger was found under the chapel floor",
    "mare foaled twin colts at dawn", "bell cracked during the harvest feast",
    "cart lost a wheel on the hill road", "well turned bitter after the storm",
    "banner was stolen from the guildhall", "oven collapsed in the bakery fire",
    "ferry rope snapped at high water", "hound dug up an old silver coin",
)
TAG_RE = re.compile(r"\b([A-Z][a-z]+-\d{2})\b")
PERSONA_RE = re.compile(r"You are (\w+)")


def log(text):
    print(text, file=sys.stderr, flush=True)


def make_facts(public, private):
    """``public + private`` facts: ``{"tag", "text", "private"}``, tags unique
    (``"Quillon-07"``), texts unique (``"The Quillon-07 barge sank at the east dock."``)."""
    facts = []
    for i in range(public + private):
        tag = f"{_TAG_NAMES[i % len(_TAG_NAMES)]}-{i:02d}"
        text = f"The {tag} {_PREDICATES[i % len(_PREDICATES)]}."
        facts.append({"tag": tag, "text": text, "private": i >= public})
    return facts


def npcs_by_room():
    return {room: [name for name, _, _ in npcs] for room, _, _, npcs in PLACES}


def all_npcs():
    return [name for npcs in npcs_by_room().values() for name in npcs] + [PEDDLER[0]]


def assign_facts(facts, tell_days):
    """Give each fact a day (1..``tell_days``) and an NPC other than the peddler, round robin
    over the rooms' NPCs so every NPC is told public and private facts."""
    names = [name for npcs in npcs_by_room().values() for name in npcs]
    public = [f for f in facts if not f["private"]]
    private = [f for f in facts if f["private"]]
    for group in (public, private):
        for i, fact in enumerate(group):
            fact["npc"] = names[i % len(names)]
            fact["day"] = 1 + (i * tell_days) // max(1, len(group))
    return facts


def room_of(npc, day):
    if npc == PEDDLER[0]:
        return PEDDLER_ROUTE[(day - 1) % len(PEDDLER_ROUTE)]
    for room, names in npcs_by_room().items():
        if npc in names:
            return room
    raise KeyError(npc)


def reach(max_hops, days):
    """``{npc: set of NPCs it reaches}``: through shared networks (zone, or a gossip Tag), in at
    most ``max_hops`` steps; the peddler holds the zone of every room she visits in ``days``."""
    from ai_contrib.core.gossip import networks

    held = {}
    for room, zone, _, npcs in PLACES:
        for name, _, tags in npcs:
            held[name] = set(networks(tags, zone=zone))
    zones = {room: zone for room, zone, _, _ in PLACES}
    held[PEDDLER[0]] = set()
    for day in range(1, days + 1):
        held[PEDDLER[0]] |= set(networks((), zone=zones[room_of(PEDDLER[0], day)]))
    out = {}
    for start in held:
        seen, frontier = {start}, {start}
        for _ in range(max_hops):
            frontier = {b for a in frontier for b in held if b not in seen and held[a] & held[b]}
            seen |= frontier
        out[start] = seen - {start}
    return out


class VillageModel:
    """The double's model: see the module docstring. Keeps every request with its time."""

    REPLY = "Aye, so I hear."
    SUMMARY = "Guests came and went and traded the news of the day."

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []  # (monotonic time, body)

    def __call__(self, body):
        with self.lock:
            self.requests.append((time.monotonic(), body))
        kind = request_kind(body)
        if kind == "summary":
            return self.SUMMARY
        if kind != "extraction":
            return self.REPLY
        if any(m.get("role") == "tool" for m in body.get("messages") or []):
            return tool_calls([("noop", {})])
        calls = []
        for message in body.get("messages") or []:
            content = str(message.get("content") or "")
            cited = re.match(r"\[(\d+)\] ", content)
            match = re.search(r"(?:Did you hear\?|Keep it quiet:) (The [A-Z][a-z]+-\d{2} [^.]+\.)",
                              content)
            if cited and match:
                calls.append(("add_journal_entry", {"content": match.group(1), "importance": 7,
                                                    "source": [int(cited.group(1))]}))
        return tool_calls(calls or [("noop", {})])

    def since(self, t0):
        with self.lock:
            return [(t, body) for t, body in self.requests if t >= t0]


def npc_of(body):
    messages = body.get("messages") or []
    match = PERSONA_RE.search(str(messages[0].get("content") or "")) if messages else None
    return match.group(1) if match else None


# -- driving the game -------------------------------------------------------------------------


async def build_village(admin):
    """Rooms, zones, NPCs, personas and Tags, with the builder commands an admin would type."""
    for room, zone, built, npcs in PLACES:
        if not built:
            await admin.command(f"dig {room}", until=r"Created room")
        await admin.command(f"tel {room}", until=r"Teleported")
        await admin.read_quiet(quiet=0.4, timeout=5)
        await admin.command(f"tag here = {zone}:zone", until=r"[Tt]ag")
        for name, role, tags in npcs:
            if role is not None:
                await admin.command(f"create/drop {name}:{NPC_TYPECLASS}", until=r"You create a new")
                await admin.command(f"set {name}/persona = You are {name}, {role} of the "
                               f"village. You answer in one short sentence, in character.",
                               until=r"[Cc]reated|[Mm]odified|Attribute")
            for tag in tags:
                await admin.command(f"tag {name} = {tag}:gossip", until=r"[Tt]ag")
    name, role = PEDDLER
    await admin.command(f"tel {PEDDLER_ROUTE[0]}", until=r"Teleported")
    await admin.read_quiet(quiet=0.4, timeout=5)
    await admin.command(f"create/drop {name}:{NPC_TYPECLASS}", until=r"You create a new")
    await admin.command(f"set {name}/persona = You are {name}, {role}. You answer in one "
                   "short sentence, in character.", until=r"[Cc]reated|[Mm]odified|Attribute")
    await admin.command("tel Limbo", until=r"Teleported")  # the admin hears no one
    await admin.read_quiet(quiet=0.4, timeout=5)


async def move(admin, who, room):
    await admin.command(f"tel {who} = {room}", until=r"Teleported", timeout=30)


def _answer_re(npc):
    return re.compile(rf"\b{npc} (?:says, |leans in and murmurs to \w+: )\"")


async def talk_all(player, lines, timeout=120):
    """Send ``{npc: [line, ...]}``: each NPC gets its next line once it answered the previous,
    all NPCs at once. Returns the answers heard (count)."""
    queues = {npc: list(items) for npc, items in lines.items() if items}
    answered = 0
    player.discard()
    pos = {}
    for npc, items in queues.items():
        pos[npc] = len(player.received)
        player.send(items.pop(0))
    deadline = time.monotonic() + timeout
    while pos:
        if time.monotonic() > deadline:
            raise TelnetError(f"{player.label}: no answer from {sorted(pos)} in {timeout} s")
        for npc in list(pos):
            match = _answer_re(npc).search(player.received, pos[npc])
            if not match:
                continue
            answered += 1
            deadline = time.monotonic() + timeout
            if queues[npc]:
                pos[npc] = len(player.received)
                player.send(queues[npc].pop(0))
            else:
                del pos[npc]
        await asyncio.sleep(0.02)
    player.discard()
    return answered


async def night(admin, order, timeout):
    """Every NPC of ``order`` sleeps once, in turn; returns seconds per NPC's sleep."""
    took = []
    for npc in order:
        t0 = time.monotonic()
        admin.discard()
        admin.send(f"aisleep {npc}")
        match, text = await admin.read_until(rf"{npc}'s sleep: ", timeout=timeout)
        if not match:
            raise TelnetError(f"no sleep report for {npc} in {timeout} s: {text[-300:]!r}")
        await admin.command(f"aiwake {npc}", until=rf"{npc} (wakes up|is already awake)")
        took.append(time.monotonic() - t0)
    return took


def question(npc, fact):
    return f"talk {npc} = {npc}, what have you heard about {fact['tag']}?"


def asked_tag(body, npc):
    """The tag the last question to ``npc`` in this request asks about (None if none)."""
    found = re.findall(rf"{npc}, what have you heard about ([A-Z][a-z]+-\d{{2}})",
                       prompt_text(body))
    return found[-1] if found else None


async def drive(game, args, facts, model):
    """Build, then tell, sleep and ask for ``args.days`` days; returns the raw records."""
    transcript = game.transcript
    admin = TelnetPlayer("admin", game.ports.telnet, transcript=transcript)
    await admin.connect()
    await admin.login(*game.superuser)
    players = {}
    raw = {"days": [], "sleep_s": [], "night_requests": [], "present": {}}
    try:
        for name in PLAYERS:
            player = TelnetPlayer(name, game.ports.telnet, transcript=transcript)
            await player.connect()
            await player.login(name, f"pw-{name.lower()}-4417", create=True)
            players[name] = player
        ann, bo = players["Ann"], players["Bodo"]
        log("building the village ...")
        await build_village(admin)
        order = all_npcs()
        for day in range(1, args.days + 1):
            t_day = time.monotonic()
            await move(admin, PEDDLER[0], room_of(PEDDLER[0], day))  # the morning walk
            told = [f for f in facts if f["day"] == day]
            for room in npcs_by_room():
                here = [n for n in all_npcs() if room_of(n, day) == room]
                for who in (ann, bo):
                    await move(admin, who.label, room)
                for fact in told:
                    if room_of(fact["npc"], day) == room:
                        raw["present"][fact["tag"]] = sorted(here)
                await talk_all(ann, {npc: [
                    f"talk {npc} = Did you hear? {f['text']}" for f in told
                    if f["npc"] == npc and not f["private"]] for npc in here})
                await talk_all(ann, {npc: [
                    f"talk/private {npc} = Keep it quiet: {f['text']}" for f in told
                    if f["npc"] == npc and f["private"]] for npc in here})
            for who in (ann, bo):
                await move(admin, who.label, "Limbo")
            t_night = time.monotonic()
            log(f"day {day}: {len(told)} facts told ({t_night - t_day:.0f} s); night ...")
            raw["sleep_s"] += await night(admin, order, args.sleep_timeout)
            raw["night_requests"].append(
                [request_kind(body) for _, body in model.since(t_night)])
            stores = await read_stores(admin, order)
            t_ask = time.monotonic()
            log(f"day {day}: night {t_ask - t_night:.0f} s; asking ...")
            known = [f for f in facts if f["day"] <= day]
            for room in npcs_by_room():
                here = [n for n in all_npcs() if room_of(n, day) == room]
                for who in (ann, bo):
                    await move(admin, who.label, room)
                await talk_all(ann, {npc: [question(npc, f) for f in known if not f["private"]]
                                     for npc in here})
                await move(admin, "Bodo", "Limbo")
                await talk_all(ann, {npc: [question(npc, f) for f in known if f["private"]]
                                     for npc in here})
            await move(admin, "Ann", "Limbo")
            asks = [(npc_of(body), body) for _, body in model.since(t_ask)
                    if request_kind(body) == "reply"]
            raw["days"].append({"day": day, "stores": stores, "asks": [
                (npc, asked_tag(body, npc), prompt_text(body)) for npc, body in asks
                if npc and asked_tag(body, npc)]})
            log(f"day {day}: {len(asks)} questions answered ({time.monotonic() - t_ask:.0f} s)")
    finally:
        for player in list(players.values()) + [admin]:
            await player.close(quit=False)
    return raw


_DUMP = (
    "py import json; from evennia.utils.search import search_object as s; "
    "from ai_contrib.memory.mem0_payload import npc_agent_id; "
    "from ai_contrib.memory.mem0_store import get_store; "
    "o = s('{npc}')[0]; j = (o.db.journal or {{}}).get('entries') or []; "
    "me.msg('JOURNAL {npc} ' + json.dumps([{{k: e.get(k) for k in ('content', 'heard_from', "
    "'origin_speaker', 'chain', 'hops', 'origin', 'speaker')}} for e in j], default=list)); "
    "get_store().list(npc_agent_id(o), limit=1000).addBoth("
    # the py command's names are not the lambda's globals: they go in as defaults
    "lambda r, me=me, json=json: me.msg('MEM0 {npc} ' + json.dumps([h['text'] for h in r] "
    "if isinstance(r, list) else None)))"
)


async def read_stores(admin, order):
    """Every NPC's journal entries and Mem0 memories, read by the admin's ``py``."""
    stores = {}
    for npc in order:
        admin.discard()
        admin.send(_DUMP.format(npc=npc))
        m1, _ = await admin.read_until(rf"JOURNAL {npc} (\[.*\])\s*\n", timeout=30)
        m2, _ = await admin.read_until(rf"MEM0 {npc} (\[.*\]|null)\s*\n", timeout=60)
        stores[npc] = {"journal": json.loads(m1.group(1)) if m1 else None,
                       "mem0": json.loads(m2.group(1)) if m2 else None}
    return stores


# -- figures ----------------------------------------------------------------------------------


def held_facts(store, by_tag):
    """``{tag: [journal entries]}`` and the tags in Mem0 memories, of one NPC's stores."""
    entries = {}
    for entry in store.get("journal") or []:
        for tag in TAG_RE.findall(str(entry.get("content") or "")):
            if tag in by_tag:
                entries.setdefault(tag, []).append(entry)
    memories = {tag for text in store.get("mem0") or [] for tag in TAG_RE.findall(str(text))}
    return entries, memories


def analyse(raw, facts, max_hops, days):
    by_tag = {f["tag"]: f for f in facts}
    reached = reach(max_hops, days)
    out = {"days": []}
    for record in raw["days"]:
        hits = {}  # (tag, npc) -> the fact's text was in the reply prompt
        for npc, tag, text in record["asks"]:
            fact = by_tag.get(tag)
            if fact is None:
                continue
            # the question is in the text too: look for the fact's own words
            hits[(tag, npc)] = hits.get((tag, npc), False) or fact["text"] in text
        held = {npc: held_facts(store, by_tag) for npc, store in record["stores"].items()}

        def in_memory(tag, npc):
            entries, memories = held.get(npc, ({}, set()))
            return tag in entries or tag in memories

        row = {"day": record["day"], "asked": len(hits)}
        inside = [(t, n) for (t, n) in hits if not by_tag[t]["private"]
                  and n in reached[by_tag[t]["npc"]]]
        gossip_only = [(t, n) for (t, n) in inside if n not in raw["present"].get(t, [])]
        outside = [(t, n) for (t, n) in hits if not by_tag[t]["private"]
                   and n not in reached[by_tag[t]["npc"]] and n != by_tag[t]["npc"]]
        private_others = [(t, n) for (t, n) in hits if by_tag[t]["private"]
                          and n != by_tag[t]["npc"]]
        told_npc = [(t, n) for (t, n) in hits if n == by_tag[t]["npc"]]
        for key, pairs in (("inside", inside), ("gossip_only", gossip_only),
                           ("outside", outside), ("private_others", private_others),
                           ("told_npc", told_npc)):
            row[key] = (sum(hits[p] for p in pairs), len(pairs))
            row[key + "_memory"] = (sum(in_memory(*p) for p in pairs), len(pairs))
        leaks, wrong, copies = [], [], 0
        for npc, (entries, memories) in held.items():
            for tag, found in entries.items():
                fact = by_tag[tag]
                if fact["private"] and npc != fact["npc"]:
                    leaks.append((npc, "journal", tag))
                for entry in found:
                    if not entry.get("heard_from"):
                        if entry.get("speaker") not in (None, "Ann"):
                            wrong.append((npc, tag, entry.get("speaker"), []))
                        continue
                    copies += 1
                    chain = list(entry.get("chain") or [])
                    # it started with an NPC who heard Ann say it, and came through the chain
                    first_hand = ({fact["npc"]} if fact["private"]
                                  else set(raw["present"].get(tag, [])))
                    if (entry.get("origin_speaker") != "Ann" or not chain
                            or chain[0] not in first_hand or chain[-1] != entry["heard_from"]
                            or len(chain) != entry.get("hops") or npc in chain):
                        wrong.append((npc, tag, entry.get("origin_speaker"), chain))
            for tag in memories:
                if by_tag[tag]["private"] and npc != by_tag[tag]["npc"]:
                    leaks.append((npc, "mem0", tag))
        row["store_leaks"], row["provenance_errors"], row["gossip_copies"] = leaks, wrong, copies
        row["stores_read"] = sum(1 for s in record["stores"].values()
                                 if s.get("journal") is not None and s.get("mem0") is not None)
        out["days"].append(row)
    out["stores_total"] = len(all_npcs())
    kinds = {}
    for night_kinds in raw["night_requests"]:
        for kind in night_kinds:
            kinds[kind] = kinds.get(kind, 0) + 1
    out["night_requests"] = kinds
    out["sleep_s_p50"] = statistics.median(raw["sleep_s"]) if raw["sleep_s"] else None
    return out


def misses(raw, facts):
    """The last day's reply prompts that lacked a public fact their NPC's memory held:
    ``[{"npc", "tag", "fact", "prompt"}]``."""
    by_tag = {f["tag"]: f for f in facts}
    record = raw["days"][-1]
    held = {npc: held_facts(store, by_tag) for npc, store in record["stores"].items()}
    out = []
    for npc, tag, text in record["asks"]:
        fact = by_tag.get(tag)
        entries, memories = held.get(npc, ({}, set()))
        if fact and not fact["private"] and fact["text"] not in text and (
                tag in entries or tag in memories):
            out.append({"npc": npc, "tag": tag, "fact": fact["text"], "prompt": text})
    return out


def _pct(pair):
    hit, total = pair
    return f"{hit}/{total} ({100.0 * hit / total:.1f} %)" if total else "-"


def report_village(result, args):
    print(f"## Part 1: the village ({len(all_npcs())} NPCs in {len(PLACES)} locations, "
          f"{args.public} public and {args.private} private facts, {args.days} days)\n")
    print("Share of (fact, NPC) pairs whose reply prompt held the fact (in brackets: whose "
          "journal or Mem0 held it after the night).\n")
    print("| day | public, in the network | ... not in the room when told (gossip only) "
          "| public, outside the network | private, other NPCs | private and public, the "
          "told NPC |")
    print("|---|---|---|---|---|---|")
    for row in result["days"]:
        cells = [f"{_pct(row[key])} [{_pct(row[key + '_memory'])}]"
                 for key in ("inside", "gossip_only", "outside", "private_others", "told_npc")]
        print(f"| {row['day']} | " + " | ".join(cells) + " |")
    print()
    last = result["days"][-1] if result["days"] else {}
    leaks = [item for row in result["days"] for item in row["store_leaks"]]
    wrong = [item for row in result["days"] for item in row["provenance_errors"]]
    print(f"- private facts in another NPC's journal or Mem0, any night: **{len(leaks)}** "
          f"(stores read each night: {', '.join(str(r['stores_read']) for r in result['days'])}"
          f" of {result['stores_total']} NPCs)")
    print(f"- journal facts with a wrong provenance, any night: **{len(wrong)}** (facts heard "
          f"as gossip after the last night: {last.get('gossip_copies', 0)})")
    kinds = result["night_requests"]
    print(f"- model calls during the nights: {kinds.get('extraction', 0)} extraction, "
          f"{kinds.get('summary', 0)} summary, {kinds.get('reply', 0)} other; gossip itself "
          "calls no model")
    if result.get("sleep_s_p50") is not None:
        print(f"- one NPC's night (aisleep to its report, aiwake): p50 "
              f"{result['sleep_s_p50']:.1f} s")
    print(f"- wall time {result['wall_s']:.0f} s")
    for item in (leaks + wrong)[:10]:
        print(f"  - {item}")
    print()


def run_village(args):
    facts = assign_facts(make_facts(args.public, args.private), args.tell_days)
    model = VillageModel()
    double = LLMDouble(default=model).start()
    work = Path(tempfile.mkdtemp(prefix="village-"))
    game = None
    t0 = time.monotonic()
    ok = False
    try:
        env = {
            "AI_LLM_BASE_URL": double.base_url,
            "AI_LLM_API_KEY": "village-bench",
            "AI_SLEEP_AFTER_IDLE": "0",  # the admin says when each NPC sleeps...
            "AI_SLEEP_DURATION": "0",  # ...and wakes it
            "AI_TICK_INTERVAL": str(args.tick),
            "AI_THINKING_EMOTE_AFTER": "0",
            "AI_LLM_TIMEOUT": "60",
        }
        log(f"making a game in {work} ...")
        game = GameDir.create(work / "game", env=env)
        game.transcript = Transcript(work / "transcript.txt")
        log(f"starting it on 127.0.0.1:{game.ports.telnet} ...")
        game.start(timeout=300)
        try:
            raw = asyncio.run(drive(game, args, facts, model))
        finally:
            game.transcript.close()
        result = analyse(raw, facts, args.max_hops, args.days)
        result["wall_s"] = time.monotonic() - t0
        if args.misses:
            Path(args.misses).write_text(json.dumps(misses(raw, facts), indent=1))
        ok = True
        return result
    finally:
        if game is not None:
            log("stopping the game ...")
            if not game.retire(timeout=60):
                log("the game did not stop: killed")
        double.stop()
        if args.keep or not ok:
            log(f"game dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


# -- part 2: the cost of a sleep --------------------------------------------------------------


def run_cost(args):
    from benchmarks._evennia_env import setup_evennia

    workdir = tempfile.mkdtemp(prefix="village-cost-")
    setup_evennia(workdir, AI_TICK_INTERVAL=10**7, AI_SLEEP_AFTER_IDLE=0,
                  AI_MEMORY_ENABLED=False)
    from evennia.objects.objects import DefaultRoom
    from evennia.utils import create

    from ai_contrib.npc.gossip import meet, receive_gossip
    from ai_contrib.memory.journal import add_entry, new_journal
    from ai_contrib.typeclasses import SCRIPT_KEY, AssistantCharacter, get_assistant_script

    def room(key, zone):
        obj = create.create_object(DefaultRoom, key=key, nohome=True)
        obj.tags.add(zone, category="zone")
        return obj

    def npc(key, where, facts):
        obj = create.create_object(AssistantCharacter, key=key, location=where, home=where)
        journal = new_journal()
        for i in range(facts):
            add_entry(journal, f"{key} heard that the bell number {i} cracked.", 6,
                      speaker="Ann", audience=["#9001", "#9002"])
        obj.db.journal = journal
        return obj

    square, lane = room("Square", "town"), room("Lane", "town")
    far_rooms = []  # ten NPCs to a room, as a game spreads them
    receiver = npc("Reeve", lane, 0)
    for i in range(5):
        npc(f"Peer{i}", square, args.cost_facts)
    walker = npc("Walker", lane, 0)
    rows = []
    outside = 0
    script = get_assistant_script(receiver)
    for wanted in (0, 100, 400):
        log(f"cost: {wanted} NPCs outside the network ...")
        while outside < wanted:
            if outside % 10 == 0:
                far_rooms.append(room(f"Far{outside // 10}", "hills"))
            npc(f"Far{outside}", far_rooms[-1], args.cost_facts)
            outside += 1
        sleep_t, meet_t = [], []
        for i in range(args.cost_rounds + 3):  # the first three warm the caches: not counted
            if i == 3:
                sleep_t, meet_t = [], []
            receiver.db.journal = new_journal()
            t = time.perf_counter()
            receive_gossip(script, receiver)
            sleep_t.append(time.perf_counter() - t)
            walker.db.journal = new_journal()
            walker.location = lane
            t = time.perf_counter()
            walker.location = square
            meet(walker, SCRIPT_KEY)
            meet_t.append(time.perf_counter() - t)
        got = len((receiver.db.journal or {}).get("entries") or [])
        rows.append((wanted, _p(sleep_t, 50), _p(sleep_t, 95), _p(meet_t, 50), _p(meet_t, 95),
                     got))
    shutil.rmtree(workdir, ignore_errors=True)
    return rows


def _p(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100.0 * (len(values) - 1))))] * 1000.0


def report_cost(rows, args):
    print(f"## Part 2: the cost of gossip (5 peers x {args.cost_facts} facts, "
          f"{args.cost_rounds} runs each)\n")
    print("| NPCs outside the network | sleep step p50 / p95 (ms) | ratio to 0 | "
          "meeting p50 / p95 (ms) | ratio to 0 | facts received |")
    print("|---|---|---|---|---|---|")
    base_sleep, base_meet = rows[0][1], rows[0][3]
    for n, s50, s95, m50, m95, got in rows:
        print(f"| {n} | {s50:.1f} / {s95:.1f} | {s50 / base_sleep:.2f} | {m50:.1f} / {m95:.1f} "
              f"| {m50 / base_meet:.2f} | {got} |")
    print()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="village,cost")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--tell-days", type=int, default=2)
    parser.add_argument("--public", type=int, default=40)
    parser.add_argument("--private", type=int, default=40)
    parser.add_argument("--max-hops", type=int, default=3,
                        help="AI_GOSSIP_MAX_HOPS of the game (its default)")
    parser.add_argument("--tick", type=float, default=0.25, help="AI_TICK_INTERVAL (s)")
    parser.add_argument("--sleep-timeout", type=float, default=240)
    parser.add_argument("--cost-facts", type=int, default=40)
    parser.add_argument("--cost-rounds", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the game directory")
    parser.add_argument("--misses", help="write here, as JSON, the reply prompts of the last day "
                        "that missed a public fact their NPC held (to see why)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    args.tell_days = max(1, min(args.tell_days, args.days))
    parts = {p.strip() for p in args.parts.split(",")}
    figures = {}
    if "village" in parts:
        figures["village"] = run_village(args)
        report_village(figures["village"], args)
    if "cost" in parts:
        figures["cost"] = run_cost(args)
        report_cost(figures["cost"], args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
