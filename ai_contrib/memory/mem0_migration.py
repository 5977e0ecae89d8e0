"""
Moving memories an older version stored in one shared collection (or table) into one
collection per NPC (``docs/design.md``, "Mem0 per NPC"), ids, vectors and payloads unchanged,
so Mem0's history and the journal ids still name them. Called by
:meth:`ai_contrib.memory.mem0_store.Mem0Store.migrate_shared_collection`, which holds the
store's lock; an already migrated store costs one count.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, TypedDict

from .mem0_backends import BatchedLocalWrites
from .mem0_config import MemoryStoreError


class MigrationReport(TypedDict):
    """What a move out of the shared collection did."""

    memories: int  #: memories moved
    npcs: int  #: NPCs whose memories moved
    seconds: float  #: wall time

__all__ = ["MIGRATION_PAGE", "move_pgvector_rows", "move_qdrant_points"]

logger = logging.getLogger(__name__)

#: points moved per page when the shared collection is migrated
MIGRATION_PAGE = 1000


def move_qdrant_points(base, memory_for: Callable[[str], Any]) -> MigrationReport:
    """
    Copy every point of the shared Qdrant collection that has an ``agent_id`` into that NPC's
    collection, page by page, then delete the copies from the shared one once every copy is on
    disk. Copying again after a crash overwrites the same ids: nothing is lost or duplicated.
    Points without an ``agent_id`` stay where they are.

    Embedded Qdrant commits (and syncs) every point on its own, ~17 ms each: 25,000 memories
    would take minutes, so its SQLite files are written unsynced during the move and synced once
    at the end (:class:`~ai_contrib.memory.mem0_backends.BatchedLocalWrites`).

    Args:
        base: the shared ``Memory`` (its ``vector_store`` holds the client and the collection).
        memory_for: ``agent_id -> Memory`` of that NPC's collection.

    Returns:
        MigrationReport

    Raises:
        MemoryStoreError: if Qdrant fails.
    """
    from qdrant_client import models

    started = time.perf_counter()
    client, shared = base.vector_store.client, base.vector_store.collection_name
    moved, npcs = [], set()
    try:
        if client.count(shared, exact=True).count:
            copies = BatchedLocalWrites(client)
            offset = None
            try:
                while True:
                    points, offset = client.scroll(
                        shared, limit=MIGRATION_PAGE, offset=offset, with_payload=True,
                        with_vectors=True,
                    )
                    by_agent = {}
                    for point in points:
                        agent_id = (point.payload or {}).get("agent_id")
                        if agent_id:
                            by_agent.setdefault(str(agent_id), []).append(point)
                    for agent_id, group in by_agent.items():
                        target = memory_for(agent_id).vector_store.collection_name
                        copies.add(target)
                        client.upsert(target, points=[
                            models.PointStruct(id=p.id, vector=p.vector, payload=p.payload)
                            for p in group
                        ])
                        moved.extend(p.id for p in group)
                        npcs.add(agent_id)
                    if offset is None:
                        break
            finally:
                copies.finish()
            # only once every copy is synced: a crash before this copies again
            deletions = BatchedLocalWrites(client)
            deletions.add(shared)
            try:
                for first in range(0, len(moved), MIGRATION_PAGE):
                    client.delete(shared, points_selector=models.PointIdsList(
                        points=moved[first:first + MIGRATION_PAGE]))
            finally:
                deletions.finish()
    except Exception as err:
        raise MemoryStoreError(f"moving memories out of {shared!r} failed: {err}") from err
    if moved:
        logger.info("moved %d memories of %d NPCs from %r into one collection per NPC",
                    len(moved), len(npcs), shared)
    return {"memories": len(moved), "npcs": len(npcs), "seconds": time.perf_counter() - started}


def move_pgvector_rows(base, memory_for: Callable[[str], Any]) -> MigrationReport:
    """
    :func:`move_qdrant_points` on pgvector, in SQL: for each ``agent_id`` found in the shared
    table, one transaction inserts its rows into the NPC's table (ids, vectors and payloads
    unchanged; an id already there is overwritten) and deletes them from the shared table, so
    a crash leaves each NPC's rows in one table or the other, never both or neither.

    Returns:
        MigrationReport

    Raises:
        MemoryStoreError: if PostgreSQL fails (NPCs already moved stay moved).
    """
    from psycopg import sql

    started = time.perf_counter()
    shared = base.vector_store
    moved = npcs = 0
    try:
        if shared.collection_name in shared.list_cols():
            with shared.connection_pool.connection() as conn:
                agents = [row[0] for row in conn.execute(
                    sql.SQL("SELECT DISTINCT payload->>'agent_id' FROM {} "
                            "WHERE payload ? 'agent_id'").format(
                        sql.Identifier(shared.collection_name))).fetchall()]
            for agent_id in agents:
                target = memory_for(agent_id).vector_store
                target._ensure_collection()
                with shared.connection_pool.connection() as conn, conn.transaction():
                    names = (sql.Identifier(target.collection_name),
                             sql.Identifier(shared.collection_name))
                    conn.execute(sql.SQL(
                        "INSERT INTO {} (id, vector, payload) "
                        "SELECT id, vector, payload FROM {} "
                        "WHERE payload->>'agent_id' = %s ON CONFLICT (id) DO UPDATE "
                        "SET vector = EXCLUDED.vector, payload = EXCLUDED.payload"
                    ).format(*names), (agent_id,))
                    count = conn.execute(sql.SQL(
                        "DELETE FROM {} WHERE payload->>'agent_id' = %s"
                    ).format(names[1]), (agent_id,)).rowcount
                moved += count
                npcs += 1
    except Exception as err:
        raise MemoryStoreError(
            f"moving memories out of {shared.collection_name!r} failed: {err}"
        ) from err
    if moved:
        logger.info("moved %d memories of %d NPCs from table %r into one table per NPC",
                    moved, npcs, shared.collection_name)
    return {"memories": moved, "npcs": npcs, "seconds": time.perf_counter() - started}
