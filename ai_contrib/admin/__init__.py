"""
What admins see (``docs/design.md``, "Module map"): the staff commands assembled by
:class:`ai_contrib.commands.AIContribCmdSet`, the tables they share, the reports of a sleep and a
compaction, the NPC's figures read for the commands and the web pages, reply receipts.

They may import anything below ``commands``, which assembles them: never ``commands``, the web
pages or ``startup``; they read the NPC classes of ``typeclasses`` to find and show NPCs
(``tests/unit/test_layering.py``).
"""
