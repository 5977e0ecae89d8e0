"""
The character's journal: a plain dict kept in ``character.db.journal`` (``docs/design.md``,
"Journal and Mem0").

Shape::

    {
        "entries": [entry, ...],           # oldest first
        "consolidated_entry_ids": [id, ...] # entries already stored in Mem0
    }

An *entry* is a dict:

``id`` (str)
    Unique within the journal. Syntheses from compaction use ``compact_YYYYmmdd_HHMMSS``
    (``docs/design.md``, "Journal and Mem0"), with a numeric suffix if two land in the same
    second.
``content`` (str), ``importance`` (int, 1-10), ``timestamp`` (ISO-8601 UTC str)
``source_type`` (str)
    ``"fact"`` (pre-compaction extraction), ``"compaction"`` (synthesis) or ``"observation"``.
``tags`` (list of str); ``speaker`` / ``entity`` (str) where known; ``marker_id`` (str) on a
compaction synthesis: the id of the ``[CONTEXT SUMMARY]`` marker it archives, which makes
recording the same compaction twice (for instance when a compaction is replayed after a crash)
a no-op.
``audience`` (list of dbrefs), ``visibility`` (``"public"``/``"private"``), ``source_ids`` (list
of message ids)
    Where an entry was derived from what players said: who heard all of its sources, and which
    messages those were (``docs/design.md``, "Privacy by audience"). A fact or observation takes
    them from the messages it was extracted from (:mod:`ai_contrib.memory.provenance`), a
    synthesis from its marker's ``metadata["audience"]``. No ``audience``: public (an admin's
    entry), unless ``visibility`` is ``"private"`` (a player's words from before audiences were
    recorded: then only that player, its ``speaker``, may hear it).
``said_in_public`` (bool)
    A fact whose player lines were all said aloud in a room marked public (``docs/design.md``,
    "Gossip").
``origin``, ``origin_speaker``, ``said_at``, ``heard_from``, ``heard_from_id``, ``hops``,
``chain``, ``chain_ids``, ``received_at``
    A fact heard from another NPC while asleep: its provenance
    (:func:`ai_contrib.core.gossip.gossip_copy`). Such a fact has no ``speaker``: the NPC did
    not hear it from the person who said it.

:class:`Journal` and :class:`JournalEntry` declare these fields. These are pure functions over
the dict; the caller saves it back to the Attribute.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NotRequired, TypedDict

from ..core.text import MODEL_TEXT_MAX_CHARS, normalise_player_text

SOURCE_TYPES = ("fact", "compaction", "observation")


class JournalEntry(TypedDict):
    """One entry of the journal (the module docstring says what each field means)."""

    id: str  #: unique within the journal
    content: str  #: the fact, observation or synthesis
    importance: int  #: 1-10
    timestamp: str  #: ISO-8601 UTC
    source_type: str  #: one of :data:`SOURCE_TYPES`
    tags: list[str]
    speaker: NotRequired[str]  #: who said it
    entity: NotRequired[str]  #: whom it is about
    audience: NotRequired[list[str] | None]  #: dbrefs who heard all of its sources
    visibility: NotRequired[str]  #: ``"public"`` or ``"private"``
    source_ids: NotRequired[list[str]]  #: the message ids it was taken from
    said_in_public: NotRequired[bool]
    #: a fact's check against the lines it came from (``docs/design.md``, "Facts you can
    #: trust"): its support (0-1), ``"model"``, ``"replaced"`` or ``"verbatim"``, and the
    #: model's own wording and support where the line's replaced it
    support: NotRequired[float]
    grounding: NotRequired[str]
    model_support: NotRequired[float]
    model_text: NotRequired[str]
    #: a synthesis's: its marker's id, the seqs it covers, the lines it was not written from,
    #: and a cascade short-term summary's range of long-term memory
    marker_id: NotRequired[str]
    archive_range: NotRequired[list[int | None]]
    left_out_seqs: NotRequired[list[int] | None]
    memory_range_start: NotRequired[Any]
    memory_range_end: NotRequired[Any]
    #: a fact heard from another NPC (:func:`ai_contrib.core.gossip.gossip_copy`)
    origin: NotRequired[str]
    origin_speaker: NotRequired[str | None]
    said_at: NotRequired[str]
    heard_from: NotRequired[str]
    heard_from_id: NotRequired[str]
    hops: NotRequired[int]
    chain: NotRequired[list[str]]
    chain_ids: NotRequired[list[str]]
    received_at: NotRequired[str]


class Journal(TypedDict):
    """``character.db.journal``."""

    entries: list[JournalEntry]  #: oldest first
    consolidated_entry_ids: list[str]  #: entries already stored in Mem0


def new_journal() -> Journal:
    """Return an empty journal dict."""
    return {"entries": [], "consolidated_entry_ids": []}


def ensure_journal(journal) -> Journal:
    """Return ``journal`` with both keys present (``None`` gives a new journal)."""
    if not journal:
        return new_journal()
    journal.setdefault("entries", [])
    journal.setdefault("consolidated_entry_ids", [])
    return journal


def add_entry(
    journal,
    content,
    importance=5,
    source_type="fact",
    tags=(),
    speaker=None,
    entity=None,
    entry_id=None,
    now=None,
    **extra,
) -> JournalEntry:
    """
    Append an entry to ``journal`` and return it.

    Args:
        journal (dict): a journal dict (modified in place).
        content (str): the fact or synthesis text; must be non-empty once normalised
            (:func:`ai_contrib.core.text.normalise_player_text`, line breaks kept).
        importance (int): 1-10, clamped.
        source_type (str): one of :data:`SOURCE_TYPES`.
        tags (iterable of str): free-form labels.
        speaker, entity (str, optional): who said it / whom it is about.
        entry_id (str, optional): explicit id; default ``<source_type>_YYYYmmdd_HHMMSS`` made
            unique by a suffix.
        now (datetime, optional): clock override for tests.
        **extra: stored as they are (e.g. ``marker_id``, ``archive_range``).

    Returns:
        JournalEntry: the new entry.

    Raises:
        ValueError: for empty content or an unknown ``source_type``.
    """
    # a fact, an observation or a synthesis a model wrote is data like a player's line
    # (docs/design.md, "Player text is data"): it is shown in prompts and on admin screens
    content = normalise_player_text(content or "", MODEL_TEXT_MAX_CHARS, multiline=True)
    if not content:
        raise ValueError("journal entry content is empty")
    if source_type not in SOURCE_TYPES:
        raise ValueError(f"source_type must be one of {SOURCE_TYPES}, got {source_type!r}")
    now = now or datetime.now(timezone.utc)
    existing = {e.get("id") for e in journal["entries"]}
    if entry_id is None:
        prefix = "compact" if source_type == "compaction" else source_type
        entry_id = f"{prefix}_{now.strftime('%Y%m%d_%H%M%S')}"
    base, n = entry_id, 1
    while entry_id in existing:
        n += 1
        entry_id = f"{base}_{n}"
    entry = {
        "id": entry_id,
        "content": content,
        "importance": max(1, min(10, int(importance))),
        "timestamp": now.isoformat(),
        "source_type": source_type,
        "tags": list(tags),
    }
    if speaker:
        entry["speaker"] = speaker
    if entity:
        entry["entity"] = entity
    entry.update({k: v for k, v in extra.items() if v is not None})
    journal["entries"].append(entry)
    return entry


def find_entry(journal, **match) -> JournalEntry | None:
    """Return the first entry whose fields equal all of ``match`` (e.g. ``marker_id=...``), or None."""
    for entry in journal.get("entries", []):
        if all(entry.get(k) == v for k, v in match.items()):
            return entry
    return None


def synthesis_entries(journal, limit=None) -> list[JournalEntry]:
    """Return compaction synthesis entries, newest last (the last ``limit`` if given)."""
    found = [e for e in journal.get("entries", []) if e.get("source_type") == "compaction"]
    return found[-limit:] if limit else found


def unconsolidated(journal) -> list[JournalEntry]:
    """Return the entries not yet recorded in ``consolidated_entry_ids``, oldest first."""
    done = set(journal.get("consolidated_entry_ids", []))
    return [e for e in journal.get("entries", []) if e.get("id") not in done]
