"""
Many AI NPCs in one Evennia server process: how much of the reactor thread our code takes.

For each N in ``--npcs`` a fresh process sets up Django + Evennia with a file SQLite database
(:mod:`benchmarks._evennia_env`), creates N real ``AssistantCharacter`` NPCs (each with its
``AssistantScript``), ``--per-room`` NPCs and one player Character per room, and fills every
NPC's history to ``--fill-fraction`` (70 %) of a ``--budget`` (32,768) token budget with
chat-sized lines (LoCoMo turns from ``data/locomo``, or synthetic lines when the data is
missing). Then it runs a real ``reactor.run()``:

* every NPC ticks through Evennia's own Script timer (``ExtendedLoopingCall`` -> ``at_repeat``)
  every ``AI_TICK_INTERVAL`` (2 s), phases spread uniformly over one interval;
* players' lines arrive as a Poisson process of ``--rate`` messages/s, each to a random NPC,
  through ``script.receive_speech(player_character, text)``;
* the LLM is ``tests/support/llm_double.py``'s ``LLMDouble`` (a real HTTP server on 127.0.0.1,
  echoing the last user line at once), run in a *child process* so that its threads do not compete for
  this process's GIL: what is measured is our code, not a model and not the double.

Two phases share the process, the world and the ticker:

1. **ours**: the contrib as shipped (archive + runtime history + running token total,
   checkpoint of ``db.conversation_history`` every ``AI_CHECKPOINT_INTERVAL`` s when changed;
   each NPC's last checkpoint time is spread uniformly over that interval at the start, as in
   a server that has been up for a while);
2. **naive**: the straightforward design (``docs/design.md``, "The archive"): each message is
   ``script.db.naive_history.append(msg)`` on a plain list Attribute, and each tick reads that
   Attribute and recounts it in full (the per-message sum that ``count_conversation_tokens``
   computes) before answering from it.

Settings: ``compact_enabled`` stays True (the emergency check runs on every tick) and the run
is short enough that no history crosses the 80 % emergency threshold (the table shows the
highest usage reached); ``AI_SLEEP_AFTER_IDLE = 0`` so no NPC falls asleep.

Measurement, in the reactor thread, with ``time.perf_counter`` (wall time) and
``time.thread_time`` (this thread's CPU time, which preemption by other processes does not
inflate):

* our code: the outermost call of ``AssistantScript.run_tick`` (ticks, from the timer and from
  ``kick``), ``AssistantScript.receive_speech`` (speech; ``add_message`` inside) and the
  continuation after each LLM response (wrapping ``LLMClient._post_once``'s Deferred, which
  covers response decoding, the rest of ``answer_pending``, ``add_message`` of the reply and
  ``at_say``). Same entry points for the naive phase's own code;
* the reactor: ``reactor._poller`` (epoll) is wrapped, so the time between leaving one
  ``epoll_wait`` and entering the next is one reactor iteration: everything the thread ran
  (our code, Evennia's timer, Twisted's HTTP client, the load generator). The longest stall
  "from our code" is the largest sum of our calls within one iteration;
* per-message append cost (``add_message`` / the Attribute append), per-tick check cost
  (``check_emergency_compaction`` / Attribute read + full recount), checkpoints, GC pauses;
* memory per NPC: growth of the process RSS (``/proc/self/statm``, after ``gc.collect()``)
  while filling the histories, divided by N.

The database: ``--db sqlite`` (default; a file SQLite database with the pragmas a running
server sets), ``--db postgres`` (a fresh database on the PostgreSQL server of
``AI_DATABASE_URL``, dropped afterwards; ``scripts/with_postgres.sh`` starts a throwaway one,
``make bench-load-postgres``), or ``--db sqlite,postgres``: every N on each, and a second table
puts the two side by side (``docs/design.md``, "Scaling out").

Usage::

    .venv/bin/python benchmarks/load.py --npcs 100,500 [--rate 10] [--seconds 20]
        [--fill real|checkpoint] [--checkpoint-interval 300] [--budget 32768]
        [--per-room 10] [--db sqlite|postgres|sqlite,postgres] [--json OUT]

A Markdown table goes to stdout, progress to stderr. Nothing is asserted: the figures are
printed beside the floors (at 500 NPCs <= 10 % of the reactor in our code, no stall from our
code over 50 ms).
"""

import argparse
import collections
import gc
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from ai_contrib.settings import DEFAULTS  # noqa: E402  (plain dict: needs no Django setup)

LOCOMO = os.path.join(ROOT, "data", "locomo", "locomo_dev.json")
FLOOR_REACTOR_PCT = 10.0
FLOOR_STALL_MS = 50.0
FLOOR_AT_NPCS = 500


def log(text):
    """Progress line on stderr."""
    print(text, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# small statistics


def percentile(values, q):
    """The ``q`` quantile (0..1) of ``values`` by linear interpolation; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary_ms(values):
    """``{"n", "p50", "p95", "max"}`` of durations given in seconds, reported in milliseconds."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None, "total_s": 0.0}
    return {
        "n": len(values),
        "total_s": sum(values),
        "p50": percentile(values, 0.5) * 1000,
        "p95": percentile(values, 0.95) * 1000,
        "max": max(values) * 1000,
    }


def _involuntary_switches():
    """Times this thread was preempted so far (Linux), or 0 where unknown."""
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    except (ImportError, AttributeError, OSError):
        return 0


def rss_bytes():
    """Resident set size of this process in bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settled_rss():
    """RSS after a full garbage collection (bytes)."""
    gc.collect()
    return rss_bytes()


# ------------------------------------------------------------------------------------------------
# the LLM double in a child process


def serve_llm_double():
    """Child mode: run ``LLMDouble`` on 127.0.0.1, print ``{"base_url": ...}``, serve until
    stdin closes (the parent exited or is done)."""
    from tests.support.llm_double import LLMDouble

    double = LLMDouble().start()
    print(json.dumps({"base_url": double.base_url}), flush=True)
    sys.stdin.read()
    double.stop()


class LLMDoubleProcess:
    """Start :func:`serve_llm_double` in a child process; ``.base_url`` once started."""

    def __init__(self):
        self.proc = None
        self.base_url = None

    def __enter__(self):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve-llm-double"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the LLM double did not start")
        self.base_url = json.loads(line)["base_url"]
        return self

    def __exit__(self, *exc):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:
            self.proc.kill()


# ------------------------------------------------------------------------------------------------
# chat lines


def chat_lines(path=LOCOMO):
    """
    ``[(speaker, text), ...]`` of real chat turns (LoCoMo, Maharana et al. 2024, CC BY-NC 4.0,
    read at run time, not redistributed), or synthetic chat-sized lines if the file is missing.
    """
    lines = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        for sample in data:
            conv = sample["conversation"]
            sessions = sorted(
                (int(key.split("_")[1]), key)
                for key in conv
                if key.startswith("session_") and key.count("_") == 1
            )
            for _, key in sessions:
                for turn in conv[key] or []:
                    text = (turn.get("text") or "").strip()
                    if text:
                        lines.append((turn.get("speaker") or "Someone", text))
    if not lines:
        rng = random.Random(7)
        words = (
            "the a ale room road night gold sword inn keeper rumour north bridge wolf merchant "
            "tomorrow rain fire bread friend price map tower old king guard travel"
        ).split()
        for i in range(5000):
            lines.append((f"Traveller{i % 7}", " ".join(rng.choice(words) for _ in range(18))))
    return lines


# ------------------------------------------------------------------------------------------------
# instrumentation


class Meter:
    """
    Accumulates reactor-thread timings while ``recording`` is True.

    ``call(kind, fn, ...)`` times ``fn``: the duration goes to ``samples[kind]`` (every call, nested
    or not) and, for the outermost timed call only, to the our-code total of the current reactor
    iteration. The reactor side (iteration stretches) is fed by :class:`PollerMeter`.
    """

    def __init__(self):
        self.recording = False
        self.depth = 0
        self.samples = collections.defaultdict(list)
        self.cpu_samples = collections.defaultdict(list)
        self.counts = collections.Counter()
        self.last_return = None
        self.reset()

    def reset(self):
        self.samples.clear()
        self.cpu_samples.clear()
        self.counts.clear()
        self.ours = 0.0  # seconds of outermost our-code calls
        self.ours_cpu = 0.0  # thread CPU seconds of the same calls (immune to preemption)
        self.max_call_cpu = 0.0
        self.max_call = 0.0
        self.iter_ours = 0.0
        self.max_iter_ours = 0.0
        self.busy = 0.0  # seconds the reactor thread was not waiting in epoll
        self.max_iter = 0.0
        self.iterations = 0
        self.window_start = None
        self.window_end = None
        self.gc_pauses = []
        self.latencies = []

    def start(self):
        """Start a window (call from the reactor thread)."""
        self.reset()
        self.recording = True
        self.load_start = os.getloadavg()[0]
        self.cpu_start = time.thread_time()
        self.preempt_start = _involuntary_switches()
        self.window_start = time.perf_counter()

    def stop(self):
        """End the window; the reactor iteration under way (this call's) counts up to now."""
        now = time.perf_counter()
        if self.last_return is not None:
            stretch = now - max(self.last_return, self.window_start)
            self.busy += stretch
            self.max_iter = max(self.max_iter, stretch)
        self.max_iter_ours = max(self.max_iter_ours, self.iter_ours)
        self.recording = False
        self.window_end = now
        self.reactor_cpu = time.thread_time() - self.cpu_start
        self.preemptions = _involuntary_switches() - self.preempt_start
        self.load_end = os.getloadavg()[0]

    def call(self, kind, fn, *args, **kwargs):
        """Run ``fn(*args, **kwargs)``, timing it as ``kind`` (wall and thread CPU seconds)."""
        c0 = time.thread_time()
        t0 = time.perf_counter()
        self.depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            self.depth -= 1
            t1 = time.perf_counter()
            cpu = time.thread_time() - c0
            dt = t1 - t0
            if self.recording:
                if kind:
                    self.samples[kind].append(dt)
                    self.cpu_samples[kind].append(cpu)
                if self.depth == 0:
                    inside = t1 - max(t0, self.window_start)  # a call may straddle the start
                    self.ours += inside
                    self.iter_ours += inside
                    self.ours_cpu += cpu * (inside / dt if dt > 0 else 1.0)
                    if dt > self.max_call:
                        self.max_call = dt
                    if cpu > self.max_call_cpu:
                        self.max_call_cpu = cpu

    def gc_callback(self, phase, info):
        """For ``gc.callbacks``: records each collection's pause (generation, seconds)."""
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        elif self.recording and getattr(self, "_gc_t0", None) is not None:
            self.gc_pauses.append((info.get("generation"), time.perf_counter() - self._gc_t0))


class PollerMeter:
    """Wraps the epoll reactor's poller: the time from one ``poll`` return to the next ``poll``
    call is one reactor iteration's work."""

    def __init__(self, poller, meter):
        self._poller = poller
        self._meter = meter

    def poll(self, *args, **kwargs):
        """``epoll.poll``, closing the iteration that ends here and timing the wait."""
        meter = self._meter
        now = time.perf_counter()
        if meter.recording and meter.last_return is not None:
            stretch = now - max(meter.last_return, meter.window_start)
            meter.busy += stretch
            meter.iterations += 1
            if stretch > meter.max_iter:
                meter.max_iter = stretch
            if meter.iter_ours > meter.max_iter_ours:
                meter.max_iter_ours = meter.iter_ours
        meter.iter_ours = 0.0
        try:
            return self._poller.poll(*args, **kwargs)
        finally:
            meter.last_return = time.perf_counter()

    def __getattr__(self, name):
        return getattr(self._poller, name)


def instrument(meter, state):
    """
    Wrap the contrib's entry points (class/module attributes, so every NPC is covered) with
    ``meter``. ``state["mode"]`` ("ours" or "naive") routes the Script timer's ``at_repeat``.
    """
    from twisted.internet import defer
    from twisted.python.failure import Failure

    from ai_contrib.llm.client import LLMClient
    from ai_contrib.npc import memory_work
    from ai_contrib.typeclasses import AssistantScript

    orig_run_tick = AssistantScript.run_tick
    orig_receive = AssistantScript.receive_speech
    orig_add = AssistantScript.add_message
    orig_checkpoint = AssistantScript.checkpoint
    orig_check = memory_work.check_emergency_compaction
    orig_post_once = LLMClient._post_once

    def run_tick(self):
        if self.ndb.busy:
            meter.counts["tick_skipped_busy"] += meter.recording
            return orig_run_tick(self)
        return meter.call("tick", orig_run_tick, self)

    def at_repeat(self, **kwargs):
        meter.counts["timer_fired"] += meter.recording
        if state["mode"] == "naive":
            mind = state["minds"].get(self.id)
            if mind is not None:
                mind.tick()
            return None
        return self.run_tick()

    def receive_speech(self, speaker, text):
        state["sent_at"][self.id].append(time.perf_counter())
        return meter.call("speech", orig_receive, self, speaker, text)

    def add_message(self, role, content, name=None, **fields):
        msg = meter.call("append", orig_add, self, role, content, name=name, **fields)
        if role == "assistant" and state["mode"] == "ours":
            note_reply(state, meter, self.id)
        return msg

    def checkpoint(self):
        return meter.call("checkpoint", orig_checkpoint, self)

    def check_emergency_compaction(script, character):
        return meter.call("check", orig_check, script, character)

    def _post_once(self, *args, **kwargs):
        inner = orig_post_once(self, *args, **kwargs)
        outer = defer.Deferred()

        def relay(result):
            # the caller's code (response decoding, answer_pending, add_message, at_say...)
            # runs synchronously inside this callback
            meter.counts["llm_responses"] += meter.recording
            if isinstance(result, Failure):
                meter.call("llm_continuation", outer.errback, result)
            else:
                meter.call("llm_continuation", outer.callback, result)

        inner.addBoth(relay)
        return outer

    AssistantScript.run_tick = run_tick
    AssistantScript.at_repeat = at_repeat
    AssistantScript.receive_speech = receive_speech
    AssistantScript.add_message = add_message
    AssistantScript.checkpoint = checkpoint
    # wrapped where it is defined: the tick's memory handler calls it there
    memory_work.check_emergency_compaction = check_emergency_compaction
    LLMClient._post_once = _post_once


def note_reply(state, meter, script_id):
    """Record the latency from a player's line to the NPC's stored reply (oldest line first)."""
    queue = state["sent_at"].get(script_id)
    if queue:
        sent = queue.popleft()
        meter.counts["replies"] += meter.recording
        if meter.recording:
            meter.latencies.append(time.perf_counter() - sent)


# ------------------------------------------------------------------------------------------------
# the naive baseline: the straightforward design's storage and check


class NaiveMind:
    """
    One NPC run the naive way: history only in the list Attribute ``script.db.naive_history``
    (every append re-pickles and rewrites it), a full read + recount on every tick
    (``docs/design.md``, "The archive"), replies built from that read. Same prompt builder, LLM
    client and ``at_say`` as the contrib, so the difference measured is storage and checking.
    """

    def __init__(self, script, character, meter, state):
        self.script = script
        self.character = character
        self.meter = meter
        self.state = state
        self.pending = []
        self.busy = False
        self.model = script.cfg("llm_model")
        self.budget = int(script.cfg("max_context_tokens"))
        self.threshold = float(script.cfg("compact_emergency_threshold"))

    def _append(self, msg):
        self.script.db.naive_history.append(msg)

    def append(self, role, content, name=None, **fields):
        """Append a new message (``make_message`` shape) to the list Attribute; timed."""
        from ai_contrib.core.messages import make_message

        msg = make_message(role, content, name=name, **fields)
        self.meter.call("append", self._append, msg)
        return msg

    def receive(self, speaker, text):
        """A player's line: append it, queue an answer, run a tick now if idle."""
        from twisted.internet import reactor

        self.state["sent_at"][self.script.id].append(time.perf_counter())
        self.meter.call("speech", self._receive, speaker, text, reactor)

    def _receive(self, speaker, text, reactor):
        self.append("user", text, name=speaker.key, metadata={"speaker": speaker.dbref})
        self.pending.append(speaker.key)
        if not self.busy:
            reactor.callLater(0, self.tick)

    def _check(self):
        from ai_contrib.core.tokens import count_message_tokens

        history = self.script.db.naive_history or []
        # the body of count_conversation_tokens, keeping the per-message counts so the reply
        # prompt needs no second pass (the baseline gets the benefit of the doubt)
        counts = [count_message_tokens(msg, self.model) for msg in history]
        usage = sum(counts) / self.budget
        if usage >= self.threshold:
            self.meter.counts["naive_over_threshold"] += 1
        return history, counts

    def tick(self):
        """The naive tick: read + recount (the check), then answer queued speakers."""
        if self.busy:
            self.meter.counts["tick_skipped_busy"] += self.meter.recording
            return None
        return self.meter.call("tick", self._tick)

    def _tick(self):
        self.busy = True
        history, counts = self.meter.call("check", self._check)
        if not self.pending:
            self.busy = False
            return None
        d = self._answer(history, counts)

        def done(_):
            self.busy = False

        d.addBoth(done)
        return d

    def _answer(self, history, counts):
        from twisted.internet import defer

        from ai_contrib.core.prompts import build_reply_messages, clean_reply
        from ai_contrib.llm.client import LLMError, get_client

        @defer.inlineCallbacks
        def run(history, counts):
            character = self.character
            first = True
            while self.pending:
                self.pending.pop(0)
                if not first:  # the history changed: the naive design reads it again
                    history, counts = self._check()
                first = False
                messages = build_reply_messages(
                    character.db.persona, character.key, history, counts, self.budget
                )
                try:
                    result = yield get_client().chat(messages, model=self.model)
                    reply = clean_reply(result.content, character.key)
                except LLMError:
                    reply = ""
                if reply:
                    self.append("assistant", reply, name=character.key)
                    note_reply(self.state, self.meter, self.script.id)
                    character.at_say(reply)

        return run(history, counts)


# ------------------------------------------------------------------------------------------------
# building and filling the world


def build_world(n, per_room, rng):
    """Create rooms, one player Character per room and ``n`` AssistantCharacter NPCs.

    Returns ``[(npc, script, player), ...]``. Each Script's timer is stopped at once (restarted
    with spread phases when the reactor runs)."""
    from django.db import transaction
    from evennia.objects.objects import DefaultCharacter, DefaultRoom
    from evennia.utils import create

    from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

    world = []
    rooms = math.ceil(n / per_room)
    t0 = time.perf_counter()
    for r in range(rooms):
        with transaction.atomic():
            room = create.create_object(DefaultRoom, key=f"Room {r}", nohome=True)
            player = create.create_object(
                DefaultCharacter, key=f"Player{r}", location=room, home=room
            )
            for _ in range(min(per_room, n - len(world))):
                i = len(world)
                npc = create.create_object(
                    AssistantCharacter, key=f"Npc{i}", location=room, home=room
                )
                script = get_assistant_script(npc)
                if script.ndb._task and script.ndb._task.running:
                    script.ndb._task.stop()
                world.append((npc, script, player))
        if (r + 1) % max(1, rooms // 5) == 0 or r + 1 == rooms:
            log(f"  created {len(world)}/{n} NPCs ({time.perf_counter() - t0:.1f} s)")
    return world


def _fresh(text):
    """A new string object equal to ``text``: every stored message owns its text, as in a
    server, so the memory figures count it."""
    return text.encode("utf-8").decode("utf-8")


def _fill_lines(lines, start, npc_key, player_ref):
    """Endless (role, name, text, metadata) for one NPC, walking the chat lines from ``start``:
    one side of the conversation is the player, the other the NPC."""
    i = start
    first_speaker = lines[start][0]
    while True:
        speaker, text = lines[i % len(lines)]
        if speaker == first_speaker:
            yield "user", speaker, _fresh(text), {"speaker": player_ref}
        else:
            yield "assistant", npc_key, _fresh(text), None
        i += 1


def fill_real(world, lines, target_tokens, rng):
    """Fill every NPC through ``script.add_message`` until its running total reaches
    ``target_tokens``; returns the offsets used (for the naive copy)."""
    offsets = []
    t0 = time.perf_counter()
    for k, (npc, script, player) in enumerate(world):
        start = rng.randrange(len(lines))
        offsets.append(start)
        for role, name, text, meta in _fill_lines(lines, start, npc.key, player.dbref):
            if script.token_count() >= target_tokens:
                break
            script.add_message(role, text, name=name, metadata=meta)
        script.checkpoint()
        if (k + 1) % max(1, len(world) // 5) == 0:
            log(f"  filled {k + 1}/{len(world)} NPCs ({time.perf_counter() - t0:.1f} s)")
    return offsets


def fill_checkpoint(world, lines, target_tokens, rng):
    """Faster fill: write each NPC's messages to its archive in one write, store them as the
    checkpoint and let the runtime history load from it (what a server restart does)."""
    from ai_contrib.core.messages import make_message
    from ai_contrib.core.tokens import count_message_tokens

    offsets = []
    t0 = time.perf_counter()
    for k, (npc, script, player) in enumerate(world):
        start = rng.randrange(len(lines))
        offsets.append(start)
        archive = script.archive
        model = script.cfg("llm_model")
        msgs, total, records = [], 0, []
        for role, name, text, meta in _fill_lines(lines, start, npc.key, player.dbref):
            if total >= target_tokens:
                break
            msg = make_message(role, text, name=name, metadata=meta)
            msg["seq"] = archive.last_seq + 1 + len(msgs)
            total += count_message_tokens(msg, model)
            msgs.append(msg)
            records.append(
                json.dumps({"seq": msg["seq"], "kind": "message", "msg": msg}, ensure_ascii=False)
            )
        archive._fh.write(("\n".join(records) + "\n").encode("utf-8"))
        archive.last_seq = msgs[-1]["seq"]
        script.db.conversation_history = msgs
        script.db.checkpoint_seq = archive.last_seq
        script.ndb.runtime = None
        script.runtime  # loads the checkpoint and counts it (TokenLedger.replace)
        script.ndb.last_checkpoint = time.time()
        if (k + 1) % max(1, len(world) // 5) == 0:
            log(f"  filled {k + 1}/{len(world)} NPCs ({time.perf_counter() - t0:.1f} s)")
    return offsets


def fill_naive(world, lines, offsets):
    """Give every NPC a ``db.naive_history`` list Attribute with the same lines as its runtime
    history (fresh dicts and strings, so nothing is shared with it)."""
    from ai_contrib.core.messages import make_message

    for (npc, script, player), start in zip(world, offsets):
        count = len(script.history)
        msgs = []
        for role, name, text, meta in _fill_lines(lines, start, npc.key, player.dbref):
            if len(msgs) >= count:
                break
            msgs.append(make_message(role, text, name=name, metadata=meta))
        script.db.naive_history = msgs


# ------------------------------------------------------------------------------------------------
# one run (one N, in its own process)


DATABASES = ("sqlite", "postgres")


def postgres_database(prefix):
    """
    A new, empty database on the server of ``AI_DATABASE_URL`` (its user may create databases).

    Returns:
        tuple[str, dict]: its URL (for :func:`drop_postgres_database`) and Django's entry for it.

    Raises:
        SystemExit: ``AI_DATABASE_URL`` is not a PostgreSQL URL.
    """
    import uuid
    from urllib.parse import urlsplit

    import psycopg

    from ai_contrib.database_url import database_from_url

    url = os.environ.get("AI_DATABASE_URL", "")
    if not url.startswith(("postgresql://", "postgres://")):
        raise SystemExit("--db postgres needs AI_DATABASE_URL=postgresql://... (a server whose "
                         "user may create databases; scripts/with_postgres.sh starts one)")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    new = urlsplit(url)._replace(path="/" + name).geturl()
    return new, database_from_url(new)


def drop_postgres_database(url):
    """Drop the database of ``url`` (made by :func:`postgres_database`)."""
    from urllib.parse import urlsplit

    import psycopg

    name = urlsplit(url).path.lstrip("/")
    admin = urlsplit(url)._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_one(args):
    """Build, fill and drive one world of ``args.one`` NPCs on ``args.one_db``; return the
    results dict."""
    workdir = tempfile.mkdtemp(prefix=f"ai-contrib-load-{args.one}-")
    pg_url = database = None
    try:
        if args.one_db == "postgres":
            pg_url, database = postgres_database(f"bench_load_{args.one}")
        with LLMDoubleProcess() as double:
            results = LoadRun(args, workdir, double.base_url, database=database).run()
        results["db"] = args.one_db
        return results
    finally:
        if pg_url and not args.keep:
            drop_postgres_database(pg_url)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def phase_results(meter, wall, n, tick):
    """The figures of one measured window (durations in ms, shares in % of wall time)."""
    ph = {
        "wall_s": wall,
        "ours_pct": 100 * meter.ours / wall,
        "ours_cpu_pct": 100 * meter.ours_cpu / wall,
        "reactor_busy_pct": 100 * meter.busy / wall,
        "reactor_cpu_pct": 100 * meter.reactor_cpu / wall,
        "max_stall_ours_ms": 1000 * meter.max_iter_ours,
        "max_call_ours_ms": 1000 * meter.max_call,
        "max_call_ours_cpu_ms": 1000 * meter.max_call_cpu,
        "max_iteration_ms": 1000 * meter.max_iter,
        "iterations": meter.iterations,
        "preemptions": meter.preemptions,
        "load": (meter.load_start, meter.load_end),
        "timer_fired": meter.counts["timer_fired"],
        "ticks_expected": n * wall / tick,
        "ticks_skipped_busy": meter.counts["tick_skipped_busy"],
        "spoken": meter.counts["spoken"],
        "replies": meter.counts["replies"],
        "latency": summary_ms(meter.latencies),
        "gc_pauses": len(meter.gc_pauses),
        "gc_max_ms": 1000 * max((p for _, p in meter.gc_pauses), default=0.0),
        "gc_total_ms": 1000 * sum(p for _, p in meter.gc_pauses),
    }
    for kind in ("append", "check", "tick", "speech", "llm_continuation", "checkpoint"):
        ph[kind] = summary_ms(meter.samples[kind])
        ph[f"{kind}_cpu"] = summary_ms(meter.cpu_samples[kind])
    ph["share_pct"] = {
        kind: 100 * ph[kind]["total_s"] / wall
        for kind in ("tick", "checkpoint", "speech", "llm_continuation")
    }
    return ph


class LoadRun:
    """
    One world of ``args.one`` NPCs in this process: set up, filled, then driven under
    ``reactor.run()`` through the "ours" phase and the "naive" phase.

    Args:
        args (argparse.Namespace): the command line (see :func:`parse_args`).
        workdir (str): directory for the database, logs and archives.
        llm_base_url (str): the LLM double's ``http://127.0.0.1:PORT/v1``.
        database (dict, optional): Django's ``DATABASES["default"]`` entry; default a file
            SQLite database in ``workdir``.
    """

    def __init__(self, args, workdir, llm_base_url, database=None):
        self.args = args
        self.database = database
        self.n = args.one
        self.rng = random.Random(args.seed)
        self.workdir = workdir
        self.llm_base_url = llm_base_url
        self.meter = Meter()
        self.state = {
            "mode": "ours",
            "minds": {},
            "sent_at": collections.defaultdict(collections.deque),
        }
        self.speech = {"on": False, "next": 0.0}
        self.results = {
            "npcs": self.n,
            "rate": args.rate,
            "seconds": args.seconds,
            "fill": args.fill,
            "budget": args.budget,
            "phases": {},
        }

    # -- setting up ------------------------------------------------------------------------------

    def setup(self):
        """Django + Evennia pointed at the LLM double; warm the token encoding."""
        from benchmarks._evennia_env import setup_evennia

        args = self.args
        log(f"[N={self.n}] setting up Evennia in {self.workdir}")
        databases = {"DATABASES": {"default": self.database}} if self.database else {}
        setup_evennia(
            self.workdir,
            **databases,
            AI_LLM_BASE_URL=self.llm_base_url,
            AI_LLM_API_KEY=None,
            AI_TICK_INTERVAL=args.tick,
            AI_MAX_CONTEXT_TOKENS=args.budget,
            AI_SLEEP_AFTER_IDLE=0,
            AI_CHECKPOINT_INTERVAL=args.checkpoint_interval,
            AI_LLM_TIMEOUT=60,
        )
        from ai_contrib.core.tokens import active_tier, count_tokens

        count_tokens("warm up the encoding")
        self.lines = chat_lines()
        log(f"[N={self.n}] token counting tier: {active_tier()}; {len(self.lines)} chat lines")

    def populate(self):
        """Create and fill the world, measuring memory growth at each step."""
        args, n, res = self.args, self.n, self.results
        rss0 = settled_rss()
        self.world = build_world(n, args.per_room, self.rng)
        rss1 = settled_rss()
        target = int(args.fill_fraction * args.budget)
        log(f"[N={n}] filling histories to {target} tokens each ({args.fill} path)")
        t0 = time.perf_counter()
        filler = fill_real if args.fill == "real" else fill_checkpoint
        offsets = filler(self.world, self.lines, target, self.rng)
        res["fill_s"] = time.perf_counter() - t0
        rss2 = settled_rss()
        log(f"[N={n}] naive copies (db.naive_history)")
        t0 = time.perf_counter()
        fill_naive(self.world, self.lines, offsets)
        res["naive_fill_s"] = time.perf_counter() - t0
        rss3 = settled_rss()
        res["history_messages_p50"] = percentile([len(s.history) for _, s, _ in self.world], 0.5)
        res["start_tokens_p50"] = percentile([s.token_count() for _, s, _ in self.world], 0.5)
        res["mem_objects_mb_per_npc"] = (rss1 - rss0) / n / 2**20
        self.mem = {"ours": (rss2 - rss1) / n / 2**20, "naive": (rss3 - rss2) / n / 2**20}

    def attach_meters(self):
        """Wrap the entry points, build the naive minds, wrap the reactor's poller, watch GC."""
        from twisted.internet import reactor

        instrument(self.meter, self.state)
        self.state["minds"] = {
            script.id: NaiveMind(script, npc, self.meter, self.state)
            for npc, script, _ in self.world
        }
        if not hasattr(reactor, "_poller"):
            raise RuntimeError(f"needs the epoll reactor, got {type(reactor).__name__}")
        reactor._poller = PollerMeter(reactor._poller, self.meter)
        gc.callbacks.append(self.meter.gc_callback)

    # -- load ------------------------------------------------------------------------------------

    def deliver(self):
        """One player line to a random NPC."""
        _npc, script, player = self.world[self.rng.randrange(self.n)]
        text = _fresh(self.lines[self.rng.randrange(len(self.lines))][1])
        if self.state["mode"] == "ours":
            script.receive_speech(player, text)
        else:
            self.state["minds"][script.id].receive(player, text)
        self.meter.counts["spoken"] += self.meter.recording

    def speak(self):
        # arrivals follow a fixed Poisson timeline: when the reactor is late, the lines that
        # arrived meanwhile are all handled now, as a server reads them from its sockets
        from twisted.internet import reactor

        speech = self.speech
        now = time.perf_counter()
        while speech["on"] and speech["next"] <= now:
            self.deliver()
            speech["next"] += self.rng.expovariate(self.args.rate)
        if speech["on"]:
            reactor.callLater(max(0.0, speech["next"] - time.perf_counter()), self.speak)

    def start_timers(self):
        """Restart every Script timer with its phase spread over one interval, and spread the
        last checkpoint times over one checkpoint interval (a server up for a while)."""
        now = time.time()
        for _npc, script, _player in self.world:
            script.ndb.last_checkpoint = now - self.rng.uniform(0, self.args.checkpoint_interval)
            script.ndb._task.start(
                self.args.tick, now=False, start_delay=self.rng.uniform(0, self.args.tick)
            )

    def stop_timers(self):
        """Stop every Script timer (the world stays)."""
        for _npc, script, _player in self.world:
            task = script.ndb._task
            if task and task.running:
                task.stop()

    def idle(self):
        """True when no NPC of the current mode is answering or has speakers queued."""
        if self.state["mode"] == "ours":
            return all(not s.ndb.busy and not s.ndb.pending for _, s, _ in self.world)
        return all(not m.busy and not m.pending for m in self.state["minds"].values())

    # -- phases ----------------------------------------------------------------------------------

    def phase(self, mode, then, last=False):
        """Run ``mode`` ("ours"/"naive"): warm-up of one tick interval, the measured window,
        then (unless ``last``) wait up to 15 s for queued replies; finally call ``then``."""
        from twisted.internet import reactor

        args, meter = self.args, self.meter
        log(f"[N={self.n}] phase {mode}: warm-up {args.tick:g} s, then {args.seconds:g} s measured")
        self.state["mode"] = mode
        self.state["sent_at"].clear()
        self.speech.update(on=True, next=time.perf_counter())
        self.start_timers()
        reactor.callLater(0, self.speak)

        def begin():
            meter.start()
            reactor.callLater(args.seconds, end)

        def end():
            meter.stop()
            self.finish_phase(mode)
            self.speech["on"] = False
            if last:
                self.stop_timers()
                reactor.callLater(0, then)
            else:
                drain(time.perf_counter() + 15)

        def drain(deadline):
            if self.idle() or time.perf_counter() > deadline:
                self.stop_timers()
                reactor.callLater(0.2, then)
            else:
                reactor.callLater(0.1, drain, deadline)

        reactor.callLater(args.tick, begin)

    def finish_phase(self, mode):
        """Store the figures of the window that just ended under ``results["phases"][mode]``."""
        meter = self.meter
        ph = phase_results(meter, meter.window_end - meter.window_start, self.n, self.args.tick)
        ph["mem_mb_per_npc"] = self.mem[mode]
        self.results["phases"][mode] = ph
        log(
            f"[N={self.n}] {mode}: our code {ph['ours_pct']:.1f} % of wall "
            f"({ph['ours_cpu_pct']:.1f} % thread CPU), "
            f"reactor busy {ph['reactor_busy_pct']:.1f} %, "
            f"stall from our code {ph['max_stall_ours_ms']:.1f} ms, ticks {ph['timer_fired']}/"
            f"{ph['ticks_expected']:.0f}, replies {ph['replies']}/{ph['spoken']}"
        )

    def run(self):
        """Set up, populate, run both phases under ``reactor.run()``; return the results."""
        from twisted.internet import reactor

        wall0 = time.perf_counter()
        self.setup()
        self.populate()
        self.attach_meters()
        args = self.args

        def failsafe():
            log(f"[N={self.n}] the run took too long; stopping the reactor")
            reactor.stop()

        reactor.callWhenRunning(
            self.phase, "ours", lambda: self.phase("naive", reactor.stop, last=True)
        )
        reactor.callLater(4 * args.seconds + 8 * args.tick + 120, failsafe)
        reactor.run(installSignalHandlers=False)

        res, world = self.results, self.world
        res["max_usage_pct"] = 100 * max(s.token_usage() for _, s, _ in world)
        res["emergency_threshold_pct"] = 100 * float(world[0][1].cfg("compact_emergency_threshold"))
        res["compactions"] = sum((s.db.compaction_count or 0) for _, s, _ in world)
        res["naive_over_threshold"] = self.meter.counts["naive_over_threshold"]
        res["total_wall_s"] = time.perf_counter() - wall0
        return res


# ------------------------------------------------------------------------------------------------
# the report


def _fmt(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _ratio(naive, ours):
    if naive is None or ours is None or ours <= 0:
        return "-"
    return f"{naive / ours:.1f}x"


def render_table(all_results, args):
    """Markdown: one block of columns (ours, naive, naive/ours) per N."""
    rows = [
        ("reactor time in our code (% of wall)", lambda p: p["ours_pct"], 2),
        ("- in ticks (% of wall)", lambda p: p["share_pct"]["tick"], 2),
        ("- of which checkpoints (% of wall)", lambda p: p["share_pct"]["checkpoint"], 2),
        ("- in player lines, receive_speech (% of wall)", lambda p: p["share_pct"]["speech"], 2),
        ("- after LLM responses (% of wall)", lambda p: p["share_pct"]["llm_continuation"], 2),
        ("reactor busy, all code in the thread (% of wall)", lambda p: p["reactor_busy_pct"], 1),
        ("reactor time in our code, thread CPU (% of wall)", lambda p: p["ours_cpu_pct"], 2),
        ("reactor thread CPU, all code (% of wall)", lambda p: p["reactor_cpu_pct"], 1),
        (
            "longest stall from our code (ms, one reactor iteration)",
            lambda p: p["max_stall_ours_ms"],
            1,
        ),
        ("longest single call of our code (ms)", lambda p: p["max_call_ours_ms"], 1),
        (
            "longest single call of our code, thread CPU (ms)",
            lambda p: p["max_call_ours_cpu_ms"],
            1,
        ),
        ("longest reactor iteration, all code (ms)", lambda p: p["max_iteration_ms"], 1),
        ("append per message p50 (ms)", lambda p: p["append"]["p50"], 3),
        ("append per message p95 (ms)", lambda p: p["append"]["p95"], 3),
        ("append per message p50, thread CPU (ms)", lambda p: p["append_cpu"]["p50"], 3),
        ("check per tick p50 (ms)", lambda p: p["check"]["p50"], 3),
        ("check per tick p95 (ms)", lambda p: p["check"]["p95"], 3),
        ("check per tick p50, thread CPU (ms)", lambda p: p["check_cpu"]["p50"], 3),
        ("whole tick, synchronous part p50 (ms)", lambda p: p["tick"]["p50"], 3),
        ("whole tick, synchronous part p95 (ms)", lambda p: p["tick"]["p95"], 3),
        ("whole tick, synchronous part max (ms)", lambda p: p["tick"]["max"], 1),
        ("after each LLM response p50 (ms)", lambda p: p["llm_continuation"]["p50"], 3),
        ("checkpoints written (count)", lambda p: p["checkpoint"]["n"], 0),
        ("checkpoint p50 (ms)", lambda p: p["checkpoint"]["p50"], 1),
        ("checkpoint max (ms)", lambda p: p["checkpoint"]["max"], 1),
        ("checkpoint p50, thread CPU (ms)", lambda p: p["checkpoint_cpu"]["p50"], 1),
        ("history memory per NPC (MB, RSS growth / N)", lambda p: p["mem_mb_per_npc"], 3),
        ("timer ticks run / expected", None, 0),
        ("player lines / replies stored, in the window", None, 0),
        ("reply latency p50 (ms)", lambda p: p["latency"]["p50"], 1),
        ("reply latency p95 (ms)", lambda p: p["latency"]["p95"], 1),
        ("GC pauses: count / longest (ms)", None, 0),
    ]
    header = ["metric"]
    several = len({res.get("db", "sqlite") for res in all_results}) > 1
    for res in all_results:
        n = res["npcs"]
        db = f"{res.get('db', 'sqlite')} " if several else ""
        header += [f"{db}N={n} ours", f"{db}N={n} naive", "naive/ours"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, getter, digits in rows:
        cells = [label]
        for res in all_results:
            ours, naive = res["phases"]["ours"], res["phases"]["naive"]
            if label.startswith("timer ticks"):
                cells += [
                    f"{p['timer_fired']} / {p['ticks_expected']:.0f}" for p in (ours, naive)
                ] + ["-"]
            elif label.startswith("player lines"):
                cells += [f"{p['spoken']} / {p['replies']}" for p in (ours, naive)] + ["-"]
            elif label.startswith("GC pauses"):
                cells += [f"{p['gc_pauses']} / {p['gc_max_ms']:.1f}" for p in (ours, naive)] + ["-"]
            else:
                a, b = getter(ours), getter(naive)
                ratio = "-" if "checkpoint" in label else _ratio(b, a)
                cells += [_fmt(a, digits), _fmt(b, digits), ratio]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


#: rows of the SQLite / PostgreSQL table: (label, getter, digits), our code's phase
DB_ROWS = [
    ("reactor time in our code (% of wall)", lambda r: r["phases"]["ours"]["ours_pct"], 2),
    ("longest stall from our code (ms)", lambda r: r["phases"]["ours"]["max_stall_ours_ms"], 1),
    ("append per message p50 (ms)", lambda r: r["phases"]["ours"]["append"]["p50"], 3),
    ("longest single call of our code (ms)", lambda r: r["phases"]["ours"]["max_call_ours_ms"], 1),
    ("whole tick, synchronous part p50 (ms)", lambda r: r["phases"]["ours"]["tick"]["p50"], 3),
    ("whole tick, synchronous part p95 (ms)", lambda r: r["phases"]["ours"]["tick"]["p95"], 3),
    ("checkpoints written (count)", lambda r: r["phases"]["ours"]["checkpoint"]["n"], 0),
    ("checkpoint p50 (ms)", lambda r: r["phases"]["ours"]["checkpoint"]["p50"], 1),
    ("checkpoint max (ms)", lambda r: r["phases"]["ours"]["checkpoint"]["max"], 1),
    ("checkpoint p50, thread CPU (ms)", lambda r: r["phases"]["ours"]["checkpoint_cpu"]["p50"], 1),
    ("reply latency p50 (ms)", lambda r: r["phases"]["ours"]["latency"]["p50"], 1),
    ("reply latency p95 (ms)", lambda r: r["phases"]["ours"]["latency"]["p95"], 1),
    ("naive: check per tick p50 (ms)", lambda r: r["phases"]["naive"]["check"]["p50"], 3),
    ("naive: append per message p50 (ms)", lambda r: r["phases"]["naive"]["append"]["p50"], 3),
    ("filling the histories (s)", lambda r: r["fill_s"], 1),
]


def render_db_table(all_results):
    """Markdown: for each N, our code's figures on each database side by side, and the ratio
    of the second to the first (empty string with one database)."""
    dbs = list(dict.fromkeys(res.get("db", "sqlite") for res in all_results))
    if len(dbs) < 2:
        return ""
    by = {(res.get("db", "sqlite"), res["npcs"]): res for res in all_results}
    counts = list(dict.fromkeys(res["npcs"] for res in all_results))
    header = ["metric"]
    for n in counts:
        header += [f"N={n} {db}" for db in dbs] + [f"{dbs[1]}/{dbs[0]}"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, getter, digits in DB_ROWS:
        cells = [label]
        for n in counts:
            values = [getter(by[(db, n)]) if (db, n) in by else None for db in dbs]
            cells += [_fmt(v, digits) for v in values]
            cells.append("-" if "count" in label else _ratio(values[1], values[0]))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def render_report(all_results, args, wall):
    """The Markdown report: settings, the table, per-N notes, the floors, the wall time."""
    parts = [
        "## Load: many NPCs in one server process\n",
        f"Rate {args.rate:g} player lines/s (Poisson, random NPC), {args.seconds:g} s measured "
        f"per phase after a {args.tick:g} s warm-up, tick every {args.tick:g} s, "
        f"{args.per_room} NPCs per room, budget {args.budget} tokens, histories filled to "
        f"{args.fill_fraction:.0%} ({args.fill} path), checkpoint every "
        f"{args.checkpoint_interval:g} s, LLM double on 127.0.0.1 in a child process.\n",
        render_table(all_results, args),
        "",
    ]
    side_by_side = render_db_table(all_results)
    if side_by_side:
        parts += ["### The same run per database (our code's phase; last column: ratio)\n",
                  side_by_side, ""]
    for res in all_results:
        parts.append(
            f"- {res.get('db', 'sqlite')}, N={res['npcs']}: "
            f"{res['history_messages_p50']:.0f} messages / "
            f"{res['start_tokens_p50']:.0f} tokens per history at start (median); highest usage "
            f"at the end {res['max_usage_pct']:.1f} % (emergency threshold "
            f"{res['emergency_threshold_pct']:.0f} %, compactions run: {res['compactions']}); "
            f"fill {res['fill_s']:.1f} s, naive copies {res['naive_fill_s']:.1f} s; Evennia "
            f"objects {res['mem_objects_mb_per_npc']:.3f} MB per NPC; "
            f"run {res['total_wall_s']:.0f} s; "
            + "; ".join(
                f"{mode}: load average {p['load'][0]:.1f} -> {p['load'][1]:.1f}, reactor thread "
                f"preempted {p['preemptions']} times"
                for mode, p in res["phases"].items()
            )
            + "."
        )
    floor = [r for r in all_results if r["npcs"] == FLOOR_AT_NPCS]  # the first database's
    if floor:
        ours = floor[0]["phases"]["ours"]
        pct_ok = ours["ours_pct"] <= FLOOR_REACTOR_PCT
        stall_ok = ours["max_stall_ours_ms"] <= FLOOR_STALL_MS
        parts.append(
            f"\nFloors at {FLOOR_AT_NPCS} NPCs: reactor time in our code "
            f"{ours['ours_pct']:.2f} % of wall time, {ours['ours_cpu_pct']:.2f} % in thread CPU "
            f"(floor <= {FLOOR_REACTOR_PCT:g} %: {'met' if pct_ok else 'NOT met'} by wall time); "
            "longest stall from our code "
            f"{ours['max_stall_ours_ms']:.1f} ms (floor <= {FLOOR_STALL_MS:g} ms: "
            f"{'met' if stall_ok else 'NOT met'})."
        )
    parts.append(f"\nTotal wall time {wall:.0f} s.")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------
# command line


def parse_args(argv=None):
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--npcs", default="100,500", help="comma-separated NPC counts")
    parser.add_argument("--rate", type=float, default=10.0, help="player lines per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per phase")
    parser.add_argument("--tick", type=float, default=2.0, help="AI_TICK_INTERVAL (seconds)")
    parser.add_argument("--budget", type=int, default=32768, help="max_context_tokens")
    parser.add_argument("--fill-fraction", type=float, default=0.70)
    parser.add_argument(
        "--fill",
        choices=("real", "checkpoint"),
        default="real",
        help="real: script.add_message per message; checkpoint: archive + checkpoint written "
        "directly, runtime loaded from them",
    )
    parser.add_argument("--per-room", type=int, default=10, help="NPCs per room")
    parser.add_argument(
        "--checkpoint-interval", type=float, default=float(DEFAULTS["CHECKPOINT_INTERVAL"]),
        help="AI_CHECKPOINT_INTERVAL (seconds; default the shipped one)"
    )
    parser.add_argument(
        "--db", default="sqlite",
        help="comma-separated databases: sqlite, postgres (AI_DATABASE_URL's server)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write all results to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary game data")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-db", default="sqlite", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--serve-llm-double", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    """Run each N in its own process (or one N with the internal ``--one``), print the report."""
    args = parse_args(argv)
    if args.serve_llm_double:
        serve_llm_double()
        return 0
    if args.one:
        results = run_one(args)
        with open(args.result, "w") as fh:
            json.dump(results, fh)
        return 0
    wall0 = time.perf_counter()
    counts = [int(x) for x in args.npcs.split(",") if x.strip()]
    dbs = [x.strip() for x in args.db.split(",") if x.strip()]
    unknown = sorted(set(dbs) - set(DATABASES))
    if unknown or not dbs:
        raise SystemExit(f"--db: unknown {unknown}; choose from {', '.join(DATABASES)}")
    all_results = []
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
    for n, db in [(n, db) for n in counts for db in dbs]:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
            result_path = fh.name
        try:
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                *passthrough,
                "--one",
                str(n),
                "--one-db",
                db,
                "--result",
                result_path,
            ]
            subprocess.run(cmd, check=True)
            with open(result_path) as fh:
                all_results.append(json.load(fh))
        finally:
            os.unlink(result_path)
    wall = time.perf_counter() - wall0
    print(render_report(all_results, args, wall))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "results": all_results, "wall_s": wall}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
