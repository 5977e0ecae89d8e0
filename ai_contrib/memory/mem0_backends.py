"""
The vector stores under :class:`ai_contrib.memory.mem0_store.Mem0Store`: Mem0's Qdrant and
pgvector classes adapted to one client (or connection pool) shared by every NPC's collection,
keyword payload indexes for a Qdrant server, and embedded Qdrant's bulk writes synced once
(``docs/design.md``, "Mem0 per NPC").
"""

from __future__ import annotations

import logging
import os

from .mem0_payload import FILTER_FIELDS

__all__ = ["BatchedLocalWrites", "close_pool", "index_filter_fields", "shared_client_qdrant",
           "shared_pool_pgvector"]

logger = logging.getLogger(__name__)


class BatchedLocalWrites:
    """
    Embedded Qdrant collections written without a sync per point, synced once by
    :meth:`finish`.

    qdrant-client's local mode keeps each collection in a SQLite file and commits every point
    in its own transaction at ``synchronous=FULL``. For a bulk move this switches the files
    named by :meth:`add` to ``synchronous=OFF`` and, at :meth:`finish`, restores the setting
    and ``fsync``s each file once, so the batch is on disk before anything depends on it.
    Reaches into qdrant-client's internals (``QdrantLocal.collections[...].storage.storage``);
    where they differ, or with a Qdrant server, it does nothing and writes stay as they are.
    """

    def __init__(self, client):
        self._collections = getattr(getattr(client, "_client", None), "collections", None)
        self._files = {}  # collection -> (sqlite3 connection, previous setting, file path)

    def add(self, collection) -> None:
        """Write ``collection`` unsynced until :meth:`finish` (idempotent)."""
        import sqlite3

        if not isinstance(self._collections, dict) or collection in self._files:
            return
        persistence = getattr(self._collections.get(collection), "storage", None)
        conn = getattr(persistence, "storage", None)
        path = getattr(persistence, "location", None)
        if isinstance(conn, sqlite3.Connection) and path is not None:
            previous = conn.execute("PRAGMA synchronous").fetchone()[0]
            conn.execute("PRAGMA synchronous=OFF")
            self._files[collection] = (conn, int(previous), str(path))

    def finish(self) -> None:
        """Restore each file's setting and sync it to disk."""
        files, self._files = self._files, {}
        for conn, previous, path in files.values():
            conn.execute(f"PRAGMA synchronous={previous}")
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


_SHARED_CLIENT_QDRANT = None


def shared_client_qdrant() -> type:
    """
    Mem0's Qdrant vector store class, for a client opened by someone else.

    Given a client, Mem0 takes it for a server's and asks embedded Qdrant for payload indexes,
    which it has not (a warning per collection); this subclass is told which it is.
    """
    global _SHARED_CLIENT_QDRANT
    if _SHARED_CLIENT_QDRANT is None:
        from mem0.vector_stores.qdrant import Qdrant

        class SharedClientQdrant(Qdrant):
            def __init__(self, *, local, **kwargs):
                self._local_client = bool(local)
                super().__init__(**kwargs)
                self.is_local = self._local_client

            def _create_filter_indexes(self):
                self.is_local = self._local_client
                index_filter_fields(self)

        _SHARED_CLIENT_QDRANT = SharedClientQdrant
    return _SHARED_CLIENT_QDRANT


_SHARED_POOL_PGVECTOR = None


def shared_pool_pgvector() -> type:
    """
    Mem0's pgvector store class for a table reached through another store's connection pool.

    Mem0's ``PGVector`` closes its pool when it is garbage-collected; an NPC's store shares the
    shared store's pool, which only
    :meth:`ai_contrib.memory.mem0_store.Mem0Store.close_sync` may close.
    """
    global _SHARED_POOL_PGVECTOR
    if _SHARED_POOL_PGVECTOR is None:
        from mem0.vector_stores.pgvector import PGVector

        class SharedPoolPGVector(PGVector):
            def __del__(self):
                pass

        _SHARED_POOL_PGVECTOR = SharedPoolPGVector
    return _SHARED_POOL_PGVECTOR


def close_pool(pool) -> None:
    """Close a psycopg (or psycopg2) connection pool; best effort."""
    try:
        closer = getattr(pool, "close", None) or pool.closeall
        closer()
    except Exception as err:
        logger.warning("closing the PostgreSQL connection pool failed: %s", err)


def index_filter_fields(vector_store) -> None:
    """
    Keyword payload indexes on :data:`FILTER_FIELDS` for a Qdrant server (Mem0 makes those on
    ``agent_id`` and ``user_id`` only; ``visibility`` is filtered on by every scoped search).
    Embedded Qdrant has no payload indexes: skipped.
    """
    if getattr(vector_store, "is_local", True):
        return
    for field in FILTER_FIELDS:
        try:
            vector_store.client.create_payload_index(
                collection_name=vector_store.collection_name, field_name=field,
                field_schema="keyword",
            )
        except Exception as err:  # an index that exists already is an error on some versions
            logger.debug("payload index on %s: %s", field, err)
