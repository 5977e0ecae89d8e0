"""
What the staff command tests share: text forged to look like markup and a link, a stand-in for
the Mem0 store, a test case that swaps it in, and the check that output fits a client's width.
"""

from twisted.internet import defer

from ai_contrib.memory import mem0_store
from tests.support.npc_fixtures import NPCTestCase

#: a MudInfo alert and a clickable ``quit`` link, forged in text a player or the model wrote
FORGED = "|/|w[MudInfo] Fake alert|n |lcquit|ltclick|le"


def too_wide(out, width=80):
    """The lines of ``out`` longer than ``width`` columns."""
    return [line for line in out.splitlines() if len(line) > width]


class FakeStore:
    """
    Stands in for the process-wide Mem0 store: records calls, answers at once (the worker
    thread's Deferreds are the real store's business, tested in
    tests/unit/memory/test_mem0_store.py).
    """

    is_open = True

    def __init__(self, memories=3, hit=None):
        self.memories = memories
        self.hit = hit
        self.calls = []

    def run(self, func, *args, **kwargs):
        self.calls.append(("run", func.__name__))
        return defer.maybeDeferred(func, *args, **kwargs)

    def delete_agent(self, agent_id, drop_collection=False):
        self.calls.append(("delete_agent", agent_id, drop_collection))
        return defer.succeed(self.memories)

    def get(self, agent_id, memory_id):
        self.calls.append(("get", agent_id, memory_id))
        return defer.succeed(self.hit if memory_id and self.hit and
                             self.hit["metadata"]["memory_id"].startswith(memory_id) else None)

    def search(self, agent_id, query, **kwargs):
        self.calls.append(("search", agent_id, query))
        return defer.succeed([self.hit] if self.hit else [])


class AdminCase(NPCTestCase):
    """An NPC test case whose :meth:`use_store` swaps a store in for the process-wide one."""

    def use_store(self, store):
        previous, mem0_store._store = mem0_store._store, store
        self.addCleanup(setattr, mem0_store, "_store", previous)
        return store
