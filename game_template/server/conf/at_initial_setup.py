"""
At_initial_setup hook: runs once, at the end of the game's very first start.

It builds the tavern and its innkeeper, Marta, an LLM-driven NPC (see world/tavern.py).

Evennia skips this hook without a word if this module fails to import, so every import that can
fail happens inside the function, where an error stops the first start visibly.
"""


def at_initial_setup():
    """Build The Sleeping Stag and Marta (idempotent: see world.tavern.build_tavern)."""
    from world.tavern import build_tavern

    build_tavern()
