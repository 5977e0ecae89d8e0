"""
What a journal entry becomes in Mem0, and who may read it back: the payload of a memory, the
filters and checks of privacy by audience, and the shape of what a search returns
(:class:`ai_contrib.memory.mem0_store.Mem0Store` stores and searches with them).

Privacy by audience (``docs/design.md``, "Privacy by audience"): a memory derived from what
players said keeps, in its payload, the ``audience`` of its journal entry (the dbrefs of those
who heard all of its sources), and a search for a reply (``listeners``) returns only the
memories every listener heard, or public ones (:func:`audible_to`). Memories stored before
audiences were recorded fall back to the older scoping: a fact a player told the NPC is stored
with ``user_id`` = that player and ``visibility`` ``"private"`` unless the journal entry is
marked public; a search made in a conversation with player P (``user_id``) returns the NPC's
public memories and P's private ones only.

A *memory hit* returned by searches is a :class:`MemoryHit`::

    {"text": str, "score": float (cosine similarity, 0-1), "metadata": {
        "journal_id", "importance" (1-10), "source_type" ("fact"|"compaction"|"observation"),
        "timestamp" (ISO-8601), "visibility" ("private"|"public"), "user_id" (player key or
        absent), "memory_id" (Mem0's id), "tags" (list), and, where the entry had them,
        "speaker", "entity", "marker_id", "first_seq", "last_seq" (from a synthesis entry's
        ``archive_range``), "first_id", "last_id", "audience" (sorted dbrefs; absent: public
        or stored before audiences), and on a fact heard from another NPC its provenance
        (``docs/design.md``, "Gossip"): "origin", "origin_speaker", "said_at", "heard_from",
        "hops", "chain"}}
"""

from __future__ import annotations

import re
from typing import Any, NotRequired, TypedDict

from ..core.audience import heard_by
from .journal import JournalEntry

PAYLOAD_FIELDS = ("speaker", "entity", "marker_id", "first_seq", "last_seq", "first_id", "last_id",
                  "audience", "origin", "origin_speaker", "said_at", "heard_from", "hops", "chain",
                  # a fact's one-line check (docs/design.md, "Facts you can trust")
                  "support", "grounding", "model_support",
                  # the lines it came from: a forget finds it by them once the journal entry
                  # has been pruned (docs/design.md, "Forgetting a player")
                  "source_ids")


class MemoryHit(TypedDict):
    """A memory a search found (module docstring)."""

    text: str  #: the memory
    score: float  #: cosine similarity, 0-1
    metadata: dict[str, Any]  #: the payload (module docstring), ``memory_id`` and ``user_id``
    created_at: NotRequired[str | None]  #: ISO-8601 (:meth:`Mem0Store.get_sync`)
    updated_at: NotRequired[str | None]


def player_key(name) -> str | None:
    """
    The Mem0 ``user_id`` for a player name: case-folded, whitespace runs turned into ``_``
    (Mem0 rejects ids containing whitespace; "Sir Bob" and "sir  bob" are one player).

    Returns:
        str | None: ``None`` for an empty name.
    """
    if name is None:
        return None
    key = re.sub(r"\s+", "_", str(name).strip()).casefold()
    return key or None


def entry_visibility(entry) -> str:
    """
    ``"public"`` or ``"private"`` for a journal entry.

    An entry with an ``audience`` (derived from what players said) is private whatever else it
    says (``docs/design.md``, "Privacy by audience"). Otherwise an explicit
    ``entry["visibility"]`` wins; else a ``"public"``/``"private"`` tag; else an entry with a
    speaker (something a player told the NPC) is private and one without is public.
    """
    if entry.get("audience") is not None:
        return "private"
    explicit = entry.get("visibility")
    if explicit in ("public", "private"):
        return explicit
    tags = {str(tag).lower() for tag in entry.get("tags") or ()}
    if "public" in tags:
        return "public"
    if "private" in tags:
        return "private"
    return "private" if entry.get("speaker") else "public"


def entry_metadata(entry) -> dict[str, Any]:
    """
    The Mem0 payload metadata for a journal entry (shape: module docstring, minus
    ``memory_id``/``user_id``, which Mem0 sets).
    """
    meta = {
        "journal_id": str(entry["id"]),
        "importance": int(entry.get("importance") or 5),
        "source_type": entry.get("source_type") or "fact",
        "timestamp": entry.get("timestamp") or "",
        "visibility": entry_visibility(entry),
        "tags": [str(tag) for tag in entry.get("tags") or ()],
    }
    archive_range = entry.get("archive_range")
    if isinstance(archive_range, (list, tuple)) and len(archive_range) == 2:
        # a compaction synthesis names the archive seqs its summary covers (rag_memory)
        meta["first_seq"], meta["last_seq"] = archive_range
    for field in PAYLOAD_FIELDS:
        if entry.get(field) is not None:
            meta[field] = entry[field]
    return {key: value for key, value in meta.items() if value is not None}


def scope_filters(agent_id, user_id=None, include_private=False) -> dict[str, Any]:
    """
    Mem0 search filters for one NPC, applying privacy scoping.

    Args:
        agent_id (str): the NPC's id.
        user_id (str, optional): the player in the conversation (a name; normalised with
            :func:`player_key`). With a player: public memories plus that player's private ones.
            Without: public memories only.
        include_private (bool): every memory of the NPC (admin tools), ignoring ``user_id``.

    Returns:
        dict: filters for ``Memory.search`` / ``Memory.get_all``.
    """
    filters = {"agent_id": str(agent_id)}
    if include_private:
        return filters
    player = player_key(user_id)
    if player:
        filters["OR"] = [{"visibility": "public"}, {"user_id": player}]
    else:
        filters["visibility"] = "public"
    return filters


#: payload fields :func:`scope_filters` filters on, given keyword indexes on a Qdrant server
FILTER_FIELDS = ("agent_id", "user_id", "visibility")


def plain_entry(entry) -> JournalEntry:
    """A deep copy of a journal entry made of plain dicts, lists and scalars only."""
    from collections.abc import Mapping

    def convert(value):
        if isinstance(value, Mapping):
            return {str(key): convert(item) for key, item in value.items()}
        if isinstance(value, (list, tuple, set, frozenset)) or (
            hasattr(value, "__iter__") and not isinstance(value, (str, bytes))
        ):
            return [convert(item) for item in value]
        return value

    return convert(entry)


def audible_to(hit, listeners) -> bool:
    """
    True when every one of ``listeners`` (``{dbref: name}``) could have heard what memory
    ``hit`` holds: its ``audience`` includes them all, or it is public. A memory stored before
    audiences were recorded has none: a public one stays public, a private one (``user_id``) is
    returned only when the listeners are that player alone (``docs/design.md``, "Privacy by
    audience").

    Args:
        hit (dict): a memory hit (module docstring).
        listeners (dict): ``{dbref: character name}``.

    Returns:
        bool
    """
    meta = hit.get("metadata") or {}
    if meta.get("audience") is not None:
        return heard_by(meta, list(listeners))
    if meta.get("visibility", "public") == "public":
        return True
    owner = meta.get("user_id")
    return bool(listeners) and all(player_key(name) == owner for name in listeners.values())


def memory_hit(item) -> MemoryHit:
    """A Mem0 result item as a memory hit (module docstring)."""
    meta = dict(item.get("metadata") or {})
    meta["memory_id"] = item.get("id")
    if item.get("user_id"):
        meta["user_id"] = item["user_id"]
    return {
        "text": item.get("memory") or "",
        "score": float(item.get("score") or 0.0),
        "metadata": meta,
    }


def npc_agent_id(character) -> str:
    """The Mem0 ``agent_id`` of an NPC: ``"npc-<database id>"`` (stable, whitespace-free)."""
    return f"npc-{character.id}"
