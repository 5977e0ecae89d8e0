"""
What storing the conversation history costs per message and per tick: ours against the naive way.

**Ours** (``ai_contrib.memory``): ``AssistantScript.add_message`` writes one line to the NPC's
append-only JSONL archive, appends to the runtime list in ``ndb`` and adds the new message's
tokens to a running total (``TokenLedger``); the per-tick budget check
(``AssistantScript._needs_tick`` for an idle NPC, ``rag_memory.check_emergency_compaction`` in
a running tick) reads that total.
``db.conversation_history`` is re-pickled only as a checkpoint, every
``AI_CHECKPOINT_INTERVAL`` seconds (300) when it changed, and after each compaction.

**Naive** (the straightforward design, ``docs/design.md``, "The archive"): each message is
``script.db.naive_history.append(msg)`` on a plain list Attribute (Evennia re-pickles and rewrites
the whole list), and each tick reads the Attribute and recounts it in full
(``count_conversation_tokens``).

Measured in one run, on a real ``AssistantCharacter`` and its ``AssistantScript`` in Evennia
with a file SQLite database (``benchmarks/_evennia_env.py``: the pragmas a running server sets),
at 100, 1,000 and 5,000 messages of chat-sized lines (~25 words):

* append cost, p50 and p95 (``time.perf_counter``, one call each);
* per-tick check cost (median of many calls): ``AssistantScript.at_repeat`` of an idle awake
  NPC, and ``check_emergency_compaction`` when a tick runs and nothing needs doing;
* the same two for ``RuntimeHistory`` alone over a real archive file, without Evennia;
* the checkpoint (one re-pickle of ``db.conversation_history``), and the rebuild after a crash
  (checkpoint + replay of the archive records written after it), through the script and for
  ``RuntimeHistory`` alone with 100 and 1,000 records to replay;
* the bookkeeping of one compaction of 1,000 messages without the LLM call: plan
  (``plan_compaction`` on cached counts), marker (``make_marker``), splice + ledger + archive
  record (``RuntimeHistory.apply_compaction``), journal entry, checkpoint.

Floors the design aims at: append <= 1 ms p95 at 5,000 messages; per-tick check <= 0.1 ms at
any size; compaction bookkeeping <= 20 ms. The script prints a markdown table and never asserts
on time (timings depend on the machine; read them, do not test them).

Usage::

    .venv/bin/python benchmarks/storage.py [--sizes 100,1000,5000] [--appends 300]
"""

import argparse
import copy
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

FLOOR_APPEND_P95_MS = 1.0
FLOOR_TICK_MS = 0.1
FLOOR_BOOKKEEPING_MS = 20.0
WORDS = (
    "the innkeeper said that the east room is free tonight for two silver and supper is a stew of "
    "mutton barley and leeks while the bard from Riverbend sings about the old mill by the ford"
).split()


def chat_line(i):
    """A chat-sized line (~25 words, ~140 characters), different for each ``i``."""
    start = (i * 7) % len(WORDS)
    words = (WORDS[start:] + WORDS[:start])[:24]
    return f"({i}) " + " ".join(words)


def percentile(samples, fraction):
    """The ``fraction`` quantile of ``samples`` (nearest rank)."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def timed(fn, *args, **kwargs):
    """``(result, milliseconds)`` of one call."""
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, (time.perf_counter() - t0) * 1000


def median_ms(fn, calls):
    """Median milliseconds of ``calls`` calls of ``fn()``, measured in batches of 10."""
    batches = []
    for _ in range(max(1, calls // 10)):
        t0 = time.perf_counter()
        for _ in range(10):
            fn()
        batches.append((time.perf_counter() - t0) * 100)  # ms per call
    return statistics.median(batches)


# -- the Evennia side ----------------------------------------------------------------------------


class Bench:
    """One benchmark run: an Evennia world in a temporary directory, and the numbers."""

    def __init__(self, appends):
        from benchmarks._evennia_env import setup_evennia

        self.workdir = setup_evennia(
            AI_TICK_INTERVAL=3600,
            AI_CHECKPOINT_INTERVAL=300,
            AI_MAX_CONTEXT_TOKENS=10_000_000,  # no emergency compaction while filling
        )
        self.appends = appends
        self.room = None

    def new_npc(self, key):
        from evennia.utils import create

        from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

        if self.room is None:
            from evennia.objects.objects import DefaultRoom

            self.room = create.create_object(DefaultRoom, key="Tavern", nohome=True)
        npc = create.create_object(AssistantCharacter, key=key, location=self.room, home=self.room)
        return npc, get_assistant_script(npc)

    def fill(self, script, n):
        """Bring ``script``'s history to ``n`` messages (alternating player and NPC lines)."""
        while len(script.history) < n:
            i = len(script.history)
            if i % 2 == 0:
                script.add_message("user", chat_line(i), name="Bob")
            else:
                script.add_message("assistant", chat_line(i), name="Marta")

    def ours(self, size):
        """Append p50/p95 and per-tick check at ``size`` messages, through the script."""
        from twisted.internet import defer

        from ai_contrib import rag_memory

        npc, script = self.new_npc(f"Ours{size}")
        self.fill(script, size)
        script.checkpoint()
        samples = []
        gc.collect()
        for i in range(self.appends):
            _, ms = timed(script.add_message, "user", chat_line(size + i), name="Bob")
            samples.append(ms)
        # an idle awake NPC between players' lines, checkpointed a moment ago
        script.ndb.awake_since = script.ndb.last_activity = time.time()
        script.checkpoint()
        assert not script._needs_tick(), "the idle tick must be the cheap synchronous one"
        tick = median_ms(script.at_repeat, 2000)
        # the budget check inside a tick when nothing needs doing: an already fired Deferred
        assert isinstance(rag_memory.check_emergency_compaction(script, npc), defer.Deferred)
        emergency = median_ms(lambda: rag_memory.check_emergency_compaction(script, npc), 2000)
        messages = len(script.history)
        checkpoint = statistics.median(timed(script.checkpoint)[1] for _ in range(5))
        rebuild = statistics.median(self.rebuild_ms(script) for _ in range(3))
        return {
            "append_p50": percentile(samples, 0.5),
            "append_p95": percentile(samples, 0.95),
            "tick": tick,
            "emergency": emergency,
            "checkpoint": checkpoint,
            "rebuild": rebuild,
            "messages": messages,
        }

    def rebuild_ms(self, script):
        """
        A restart after a crash (ms): the checkpoint is 100 messages old. Opening the archive,
        replaying the records after the checkpoint, recounting the ledger and the checkpoint
        written after the replay are all in it.
        """
        from ai_contrib.memory.archive import close_archive

        script.checkpoint()
        for i in range(100):
            script.add_message("user", chat_line(i), name="Bob")
        script.ndb.runtime = None
        close_archive(script.archive_path())
        runtime, ms = timed(lambda: script.runtime)
        assert len(runtime.replayed) == 100
        return ms

    def naive(self, size, appends):
        """The naive list Attribute: append p50/p95 and the per-tick read + full recount."""
        from ai_contrib.core.messages import make_message
        from ai_contrib.core.tokens import count_conversation_tokens

        _, script = self.new_npc(f"Naive{size}")
        script.db.naive_history = [
            make_message("user" if i % 2 == 0 else "assistant", chat_line(i), name="Bob")
            for i in range(size)
        ]
        samples = []
        gc.collect()
        for i in range(appends):
            msg = make_message("user", chat_line(size + i), name="Bob")
            _, ms = timed(script.db.naive_history.append, msg)
            samples.append(ms)

        def tick():
            return count_conversation_tokens(script.db.naive_history)

        ticks = [timed(tick)[1] for _ in range(max(5, appends // 2))]
        return {
            "append_p50": percentile(samples, 0.5),
            "append_p95": percentile(samples, 0.95),
            "tick": statistics.median(ticks),
        }

    def bookkeeping(self, size=1000, repeats=7):
        """One compaction of a ``size``-message history minus the LLM call, part by part (ms)."""
        from ai_contrib import rag_memory
        from ai_contrib.core.cuts import plan_compaction
        from ai_contrib.core.summary import make_marker
        from ai_contrib.core.tokens import count_tokens
        from ai_contrib.settings import get_setting

        summary = "People: Bob rented the east room for two silver. Promises: supper at dusk."
        runs = []
        for r in range(repeats):
            npc, script = self.new_npc(f"Compact{r}")
            self.fill(script, size)
            # at the emergency threshold: the history fills 80 % of the budget
            script.db.max_context_tokens = int(script.token_count() / 0.8)
            script.checkpoint()
            gc.collect()
            parts = {}
            t0 = time.perf_counter()
            history = list(script.history)
            plan, parts["plan"] = timed(
                plan_compaction,
                history,
                script.runtime.token_counts(history),
                max_context_tokens=int(script.cfg("max_context_tokens")),
                preserve_window=int(script.cfg("compact_preserve_window")),
                preserve_fraction=float(get_setting("COMPACT_PRESERVE_FRACTION")),
            )
            to_compact = plan.to_compact
            marker, parts["marker"] = timed(
                make_marker,
                summary,
                to_compact,
                original_token_count=plan.compact_tokens,
                summary_token_count=count_tokens(summary),
                trigger="sleep",
            )
            _, parts["apply"] = timed(
                script.runtime.apply_compaction,
                marker,
                to_compact[0]["id"],
                to_compact[-1]["id"],
                trigger="sleep",
            )
            _, parts["journal"] = timed(rag_memory._record_synthesis, npc, marker)
            _, parts["checkpoint"] = timed(script.checkpoint)
            parts["total"] = (time.perf_counter() - t0) * 1000
            parts["compacted"] = len(to_compact)
            runs.append(parts)
        return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


# -- RuntimeHistory alone ------------------------------------------------------------------------


def runtime_only(size, appends):
    """Append p50/p95 and the budget read of ``RuntimeHistory`` over a real archive file."""
    from ai_contrib.core.messages import make_message
    from ai_contrib.memory.archive import MessageArchive
    from ai_contrib.memory.runtime import RuntimeHistory

    workdir = tempfile.mkdtemp(prefix="ai-runtime-bench-")
    try:
        archive = MessageArchive(os.path.join(workdir, "npc.jsonl"))
        runtime = RuntimeHistory(archive, [], -1)
        for i in range(size):
            runtime.append(make_message("user", chat_line(i), name="Bob"))
        samples = []
        gc.collect()
        for i in range(appends):
            msg = make_message("user", chat_line(size + i), name="Bob")
            samples.append(timed(runtime.append, msg)[1])
        tick = median_ms(lambda: runtime.tokens >= 1000, 5000)
        # what retrieval reads for each reply (a player line and the answer since the last
        # one): the archive's incremental message log vs parsing the whole file again
        archive.message_log()
        incremental, full = [], []
        for i in range(20):
            for role in ("user", "assistant"):
                runtime.append(make_message(role, chat_line(i), name="Bob"))
            incremental.append(timed(archive.message_log)[1])
            full.append(timed(archive.messages)[1])
        replay = {}
        for records in (100, 1000):
            # a checkpoint, then ``records`` more lines in the archive only, then a crash
            checkpoint, seq = copy.deepcopy(runtime.messages), archive.last_seq
            for i in range(records):
                runtime.append(make_message("user", chat_line(i), name="Bob"))
            archive.close()
            archive = MessageArchive(archive.path)
            runtime, replay[records] = timed(RuntimeHistory, archive, checkpoint, seq)
            assert len(runtime.replayed) == records
        archive.close()
        return {
            "append_p50": percentile(samples, 0.5),
            "append_p95": percentile(samples, 0.95),
            "tick": tick,
            "replay100": replay[100],
            "replay1000": replay[1000],
            "read_incremental": statistics.median(incremental),
            "read_full": statistics.median(full),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# -- report --------------------------------------------------------------------------------------


def fmt(ms):
    """Milliseconds with sensible precision."""
    if ms >= 100:
        return f"{ms:.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    if ms >= 0.1:
        return f"{ms:.2f}"
    return f"{ms:.4f}"


def ratio(naive, ours):
    return f"{naive / ours:,.0f}x" if ours > 0 else "-"


def verdict(value, floor):
    return "yes" if value <= floor else "**no**"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,5000",
                        help="history sizes in messages (comma-separated)")
    parser.add_argument("--appends", type=int, default=300,
                        help="appends timed per size for our storage")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    bench = Bench(args.appends)
    try:
        rows = []
        for size in sizes:
            naive_appends = max(20, min(args.appends, 20000 // max(1, size)))
            rows.append((size, bench.ours(size), bench.naive(size, naive_appends),
                         runtime_only(size, args.appends), naive_appends))
        books = bench.bookkeeping()
    finally:
        shutil.rmtree(bench.workdir, ignore_errors=True)

    print("# Conversation storage: ours vs a list Attribute\n")
    print(f"{platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, file SQLite with Evennia's server pragmas; "
          f"{args.appends} appends timed per size for ours. Times in ms.\n")
    print("| messages | ours append p50 | ours append p95 | naive append p50 | naive append p95 "
          "| append p95 naive/ours | ours tick check | naive tick check | tick naive/ours "
          "| floors met (append p95 <= 1 ms, tick <= 0.1 ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for size, ours, naive, _, naive_appends in rows:
        print(
            f"| {size:,} | {fmt(ours['append_p50'])} | {fmt(ours['append_p95'])} "
            f"| {fmt(naive['append_p50'])} | {fmt(naive['append_p95'])} "
            f"| {ratio(naive['append_p95'], ours['append_p95'])} "
            f"| {fmt(ours['tick'])} | {fmt(naive['tick'])} | {ratio(naive['tick'], ours['tick'])} "
            f"| {verdict(ours['append_p95'], FLOOR_APPEND_P95_MS)}, "
            f"{verdict(ours['tick'], FLOOR_TICK_MS)} |"
        )
    print("\nNaive appends timed per size: "
          + ", ".join(f"{size:,}: {n}" for size, _, _, _, n in rows)
          + ". Ours' tick check is `AssistantScript.at_repeat` of an idle awake NPC (its "
          "synchronous `_needs_tick` test: pending speech, checkpoint due, emergency threshold, "
          "idle time); inside a tick that runs, `check_emergency_compaction` with nothing to do "
          "costs " + ", ".join(f"{fmt(ours['emergency'])}" for _, ours, _, _, _ in rows)
          + " ms. The naive tick reads the list Attribute and recounts every message.\n")

    print("| messages | RuntimeHistory append p50 | p95 | budget read "
          "| RuntimeHistory rebuild, 100 / 1,000 records replayed "
          "| checkpoint: re-pickle db.conversation_history (messages then) "
          "| script rebuild after a crash, 100 records replayed |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for size, ours, _, rt, _ in rows:
        print(f"| {size:,} | {fmt(rt['append_p50'])} | {fmt(rt['append_p95'])} | {fmt(rt['tick'])} "
              f"| {fmt(rt['replay100'])} / {fmt(rt['replay1000'])} "
              f"| {fmt(ours['checkpoint'])} ({ours['messages']:,}) | {fmt(ours['rebuild'])} |")
    print("\nThe script rebuild is what the first touch of an NPC after a crash costs in the "
          "reactor thread: reading and unpickling the checkpoint, replaying the archive, "
          "recounting the ledger and writing a fresh checkpoint.\n")

    print("Archive read for each reply's retrieval (on the memory thread), two messages "
          "appended since the last reply (median of 20):\n")
    print("| messages | incremental message log | whole file parsed again | ratio |")
    print("|---:|---:|---:|---:|")
    for size, _, _, rt, _ in rows:
        print(f"| {size:,} | {fmt(rt['read_incremental'])} | {fmt(rt['read_full'])} "
              f"| {ratio(rt['read_full'], rt['read_incremental'])} |")

    print(f"\nCompaction bookkeeping, {books['compacted']:.0f} of 1,000 messages compacted, "
          f"no LLM call (median of 7):\n")
    print("| plan | marker | splice + ledger + archive record | journal entry | checkpoint "
          "| total | floor met (<= 20 ms) |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    print(f"| {fmt(books['plan'])} | {fmt(books['marker'])} | {fmt(books['apply'])} "
          f"| {fmt(books['journal'])} | {fmt(books['checkpoint'])} | {fmt(books['total'])} "
          f"| {verdict(books['total'], FLOOR_BOOKKEEPING_MS)} |")
    big = rows[-1][1]
    print(f"\nThe checkpoint is the one O(n) write left: {fmt(big['checkpoint'])} ms at "
          f"{big['messages']:,} messages, in the reactor thread, once per AI_CHECKPOINT_INTERVAL "
          f"(300 s) at most and only when the history changed; the naive way pays about that on "
          f"every message.")


if __name__ == "__main__":
    main()
