"""
Entity profiles: what an NPC has observed about the people, places and things it meets.

``character.db.entity_profiles`` is the "working context" of MemGPT's split between explicitly
managed facts and the message queue (``docs/design.md``, "Journal and Mem0");
the pre-compaction tool ``update_entity_observation(entity, observation)`` writes to it.

Shape of the profiles dict (plain, pickle-safe), as ``AssistantCharacter`` documents it::

    {entity_name: [observation, ...]}     # observations oldest first, each a str

Names are matched by :func:`entity_key` (case-folded, whitespace collapsed), so "Alice",
"alice" and " ALICE " share one profile, kept under the name as first written. Observations are
de-duplicated the same way (a trailing full stop ignored). Pure module: no Evennia, Twisted or
Django imports.
"""

from __future__ import annotations


def entity_key(name) -> str:
    """The matching key of an entity name: case-folded, whitespace runs collapsed ("" if blank)."""
    return " ".join(str(name or "").split()).casefold()


def _observation_key(text):
    return " ".join(str(text or "").split()).casefold().rstrip(".!")


def find_entity(profiles, entity) -> str | None:
    """The key under which ``profiles`` holds ``entity`` (by :func:`entity_key`), or None."""
    wanted = entity_key(entity)
    if not wanted:
        return None
    if entity in profiles:
        return entity
    for name in profiles:
        if entity_key(name) == wanted:
            return name
    return None


def update_entity_observation(profiles, entity, observation, max_observations=None) -> bool:
    """
    Add one observation to an entity's profile unless it is already there.

    Args:
        profiles (dict): ``{entity_name: [observation, ...]}``; modified in place.
        entity (str): the entity's name.
        observation (str): what was observed (whitespace runs collapsed before storing).
        max_observations (int, optional): keep at most this many per entity, dropping the
            oldest (an Attribute is re-pickled whole on every change; ``docs/design.md``,
            "The archive").

    Returns:
        bool: True if something was added; False for a duplicate or a blank entity/observation.
    """
    text = " ".join(str(observation or "").split())
    display = " ".join(str(entity or "").split())
    if not display or not text:
        return False
    name = find_entity(profiles, display)
    if name is None:
        name = display
        profiles[name] = []
    observations = profiles[name]
    if not isinstance(observations, list):  # a profile written by other code as one string
        observations = [str(observations)] if observations else []
        profiles[name] = observations
    wanted = _observation_key(text)
    if any(_observation_key(item) == wanted for item in observations):
        return False
    observations.append(text)
    if max_observations is not None and len(observations) > max_observations:
        del observations[: len(observations) - max_observations]
    return True


def format_entity_profile(name, observations, max_observations=5) -> str:
    """One prompt line per entity: ``"Alice: allergic to peanuts; carries a locket"``."""
    return f"{name}: " + "; ".join(
        str(item) for item in list(observations or [])[-max_observations:]
    )
