"""
The services that act on one NPC (``docs/design.md``, "Module map"): its script's handlers
(conversation, hearing, budgets, the tick), answering a turn, compaction and memory work run for
it, recall, forgetting, gossip, the scene, pins and the world placed in its prompt.

They may import ``core``, ``memory``, ``llm``, ``settings`` and each other and, of the Evennia
faces, only ``rag_memory`` (the memory work the tick starts) and ``lore`` (the lore Script, whose
typeclass path games store): never the admin views, the web pages, ``typeclasses`` or
``commands`` (``tests/unit/test_layering.py``).
"""
