"""
The services that act on one NPC (``docs/design.md``, "Module map"): its script's handlers
(conversation, hearing, budgets, the tick), answering a turn, compaction and memory work run for
it, recall, forgetting, gossip, the scene, pins and the world placed in its prompt.

They may import ``core``, ``memory``, ``llm``, ``settings`` and each other, never the admin views,
the web pages or the Evennia faces above them (``tests/unit/test_layering.py``).
"""
