"""
The services that act on one NPC (``docs/design.md``, "Module map"): its script's handlers
(conversation, hearing, budgets, the tick, memory work), answering a turn, compaction, recall,
forgetting, gossip, the scene, pins and the world placed in its prompt.

They may import ``core``, ``memory``, ``llm``, ``settings`` and each other and, of the Evennia
faces, only ``lore`` (the lore Script, whose typeclass path games store): never ``rag_memory``
(which re-exports the memory work of ``npc/``), the admin views, the web pages, ``typeclasses``
or ``commands`` (``tests/unit/test_layering.py``).
"""
