"""
Gossip: which journal facts an NPC may pass to which other NPCs (``docs/design.md``, "Gossip").

A fact passes only when the NPC *learned it in public* (:func:`learned_in_public`): it is a
journaled ``"fact"`` (never a compaction synthesis, an observation or a summary) that was not
said in private, and

* its ``audience`` (the dbrefs of everyone who heard all of its source lines; the NPC itself is
  never listed, the speaker always is) holds more than one character who is not an AI NPC: at
  least two players heard it (an AI NPC, the speaking one included, never makes a line
  public: a reply said to one player in front of another NPC is still between the two); or
* every one of its source lines was said aloud in a room marked public (``said_in_public``,
  recorded from the room's Tag ``public`` of category ``gossip``).

A fact with no audience at all (an admin's entry, or words from before audiences were recorded)
never passes: nothing says who heard it. A fact marked ``private`` (``talk/private``) never
passes, whatever its audience says. Because a fact's audience is the intersection of its
sources' audiences, a fact drawn from a private line has an audience of the speaker alone (or
none) and never passes either: derived from private means private.

A copy that travels (:func:`gossip_copy`) keeps its source's audience exactly (it never becomes
more public by travelling), counts one more hop, keeps the time it was first said, and names
who it was heard from and the chain of NPCs it went through. It can travel on while it is
younger than ``max_age_days`` and has made fewer than ``max_hops`` hops, and never back to an
NPC it came from: the one that first journaled it, one it passed through, or the NPC who first
said it.

A *network* is a string: ``"zone:<name>"`` (the room's Tag of category ``zone``),
``"place:<dbref>"`` (the room itself) or ``"tag:<name>"`` (the NPC's Tag of category
``gossip``). Two NPCs gossip when their networks intersect.

Pure functions over plain values.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from .dates import aware_datetime
from .fidelity import says_one_of
from .text import content_key

#: the Tag (category ``gossip``) of a room where everything said aloud is public
PUBLIC_ROOM_TAG = "public"
#: the journal source types that may pass (syntheses and observations never do)
PASSING_SOURCE_TYPES = ("fact",)
#: the default network settings (``AI_GOSSIP_DEFAULT_NETWORK``)
DEFAULT_NETWORKS = ("zone", "location", "none")
#: the entry fields a gossip copy carries (its provenance)
PROVENANCE_FIELDS = ("origin", "origin_speaker", "said_at", "heard_from", "heard_from_id",
                     "hops", "chain", "chain_ids", "received_at")


def networks(gossip_tags, zone=None, location=None, default="zone") -> frozenset:
    """
    The gossip networks of an NPC.

    Args:
        gossip_tags (iterable[str]): the NPC's Tags of category ``gossip`` (``"guild"``).
        zone (str, optional): its room's Tag of category ``zone``.
        location (str, optional): its room's dbref.
        default (str): ``"zone"`` (the zone, else the room), ``"location"`` (the room) or
            ``"none"`` (tag networks only).

    Returns:
        frozenset[str]: network names (see the module docstring).

    Raises:
        ValueError: an unknown ``default``.
    """
    if default not in DEFAULT_NETWORKS:
        raise ValueError(f"default network must be one of {DEFAULT_NETWORKS}, got {default!r}")
    found = {f"tag:{str(tag).strip().lower()}" for tag in gossip_tags or () if str(tag).strip()}
    if default == "zone" and zone:
        found.add(f"zone:{str(zone).strip().lower()}")
    elif default in ("zone", "location") and location:
        found.add(f"place:{location}")
    return frozenset(found)


def learned_in_public(entry, npcs=()) -> bool:
    """
    True when ``entry`` (a journal entry dict, ``memory/journal.py``) was learned in public and
    may be passed on (the rule in the module docstring).

    Args:
        npcs (iterable[str]): dbrefs of the AI NPCs: never counted among its hearers.
    """
    if entry.get("source_type") not in PASSING_SOURCE_TYPES:
        return False
    if entry.get("private"):
        return False
    audience = entry.get("audience")
    if audience is None:
        return False
    members = {str(member) for member in audience if member}
    if not members:
        return False
    players = members - {str(npc) for npc in npcs}
    return len(players) > 1 or bool(entry.get("said_in_public"))


def age_days(entry, now) -> float | None:
    """
    Days since the fact was first said (``said_at``, else the entry's ``timestamp``); None when
    neither parses.

    Args:
        entry (dict): a journal entry.
        now (datetime): timezone-aware.
    """
    said = aware_datetime(entry.get("said_at") or entry.get("timestamp"))
    if said is None:
        return None
    return (now - said).total_seconds() / 86400.0


def hops_of(entry) -> int:
    """The hops a fact has made: 0 for one the NPC heard itself."""
    try:
        return max(0, int(entry.get("hops") or 0))
    except (TypeError, ValueError):
        return 0


def origin_of(entry, npc_dbref) -> str:
    """
    The fact's id everywhere it travels: ``"<dbref of the NPC that first journaled it>/<its
    journal id there>"``; a copy keeps its ``origin``.
    """
    return entry.get("origin") or f"{npc_dbref}/{entry.get('id')}"


def may_pass(entry, now, max_hops, max_age_days, npcs=()) -> bool:
    """
    True when ``entry`` may travel one more hop now: learned in public, fewer than
    ``max_hops`` hops made, and at most ``max_age_days`` old (a fact with an unreadable time
    does not travel).

    Args:
        entry (dict): a journal entry.
        now (datetime): timezone-aware.
        max_hops (int): hops a fact may make in all (0: no gossip).
        max_age_days (float): days after it was first said that a fact stops travelling.
        npcs (iterable[str]): dbrefs of the AI NPCs (:func:`learned_in_public`).
    """
    if not learned_in_public(entry, npcs) or hops_of(entry) >= int(max_hops):
        return False
    age = age_days(entry, now)
    return age is not None and age <= float(max_age_days)


class GossipCopy(TypedDict):
    """A fact as another NPC hears it (:func:`gossip_copy`): keyword arguments of
    :func:`ai_contrib.memory.journal.add_entry`, ``content`` first."""

    content: str
    importance: int
    source_type: str  #: ``"fact"``
    tags: list[str]
    audience: list[str]  #: the source's, unchanged
    origin: str  #: :func:`origin_of`
    origin_speaker: str | None  #: who first said it
    said_at: str | None  #: ISO-8601
    heard_from: str  #: the sender's name
    heard_from_id: str  #: the sender's dbref
    hops: int  #: the source's + 1
    chain: list[str]  #: the NPCs it passed through, oldest first, the sender last
    chain_ids: list[str]  #: their dbrefs, where known
    received_at: str  #: ISO-8601
    said_in_public: NotRequired[bool]  #: when the source had it


def gossip_copy(entry, sender_name, sender_dbref, now) -> GossipCopy:
    """
    The journal entry fields of ``entry`` as another NPC hears it from ``sender``.

    Args:
        entry (dict): the sender's journal entry (:func:`may_pass` holds).
        sender_name (str): the sender's name (shown: "heard from Marta").
        sender_dbref (str): the sender's dbref.
        now (datetime): timezone-aware.

    Returns:
        GossipCopy
    """
    chain = [str(name) for name in entry.get("chain") or ()] + [str(sender_name)]
    copy = {
        "content": entry["content"],
        "importance": entry.get("importance", 5),
        "source_type": "fact",
        "tags": [str(tag) for tag in entry.get("tags") or ()],
        "audience": sorted({str(member) for member in entry.get("audience") or ()}),
        "origin": origin_of(entry, sender_dbref),
        "origin_speaker": first_speaker(entry),
        "said_at": entry.get("said_at") or entry.get("timestamp"),
        "heard_from": str(sender_name),
        "heard_from_id": str(sender_dbref),
        "hops": hops_of(entry) + 1,
        "chain": chain,
        "chain_ids": [str(dbref) for dbref in entry.get("chain_ids") or ()] + [str(sender_dbref)],
        "received_at": now.isoformat(),
    }
    if entry.get("said_in_public"):
        copy["said_in_public"] = True
    return copy


def first_speaker(entry) -> str | None:
    """Who first said the fact of journal ``entry``: the player a copy names as its origin, or
    the entry's own speaker (None when unknown)."""
    return entry.get("origin_speaker") or entry.get("speaker")


def known_origins(entries, npc_dbref) -> set:
    """The origins (:func:`origin_of`) of the facts in ``entries`` (an NPC's journal)."""
    return {origin_of(entry, npc_dbref) for entry in entries}


def came_from(entry, origin, receiver_dbref, receiver_name=None) -> bool:
    """
    True when the fact of journal ``entry`` (whose :func:`origin_of` is ``origin``) came from
    the NPC ``receiver_dbref``: it first journaled it, passed it on (``heard_from_id``,
    ``chain_ids``), or first said it (``receiver_name`` is :func:`first_speaker`, compared
    without case).
    """
    via = {str(dbref) for dbref in entry.get("chain_ids") or ()}
    via.update({origin.split("/", 1)[0], str(entry.get("heard_from_id") or "")})
    if str(receiver_dbref) in via:
        return True
    first = first_speaker(entry)
    return bool(receiver_name and first
                and str(first).strip().lower() == str(receiver_name).strip().lower())


def select_gossip(sender_entries, sender_name, sender_dbref, receiver_entries, receiver_dbref,
                  now, max_hops, max_age_days, limit=None, forgotten=(), npcs=(),
                  receiver_name=None, erased=()) -> list[GossipCopy]:
    """
    What one NPC hears from another in one sleep: copies of the sender's facts that may pass
    (:func:`may_pass`), that the receiver does not hold yet (by origin, or by the same words,
    :func:`ai_contrib.core.text.content_key`: two NPCs who both heard a line journal it each
    under its own origin, and the one who heard it first-hand must not hear it again as
    gossip), and that did not come from the receiver (:func:`came_from`).

    Args:
        sender_entries (list[dict]): the sender's journal entries, oldest first.
        sender_name (str), sender_dbref (str): the sender.
        receiver_entries (list[dict]): the receiver's journal entries.
        receiver_dbref (str): the receiver.
        now (datetime): timezone-aware.
        max_hops (int), max_age_days (float): as :func:`may_pass`.
        limit (int, optional): copies at most (the newest are kept).
        forgotten (iterable[str]): names of the players the receiver was made to forget
            (``aiforget``): what one of them said first is not passed to it again.
        npcs (iterable[str]): dbrefs of the AI NPCs (:func:`learned_in_public`).
        receiver_name (str, optional): the receiver's name (:func:`came_from`).
        erased (iterable[str]): facts staff erased from the receiver (``aigossip/erase``):
            one saying the same (:func:`ai_contrib.core.fidelity.says_one_of`) is not passed.

    Returns:
        list[dict]: :func:`gossip_copy` dicts, oldest first.
    """
    held = known_origins(receiver_entries, receiver_dbref)
    said = {content_key(entry.get("content")) for entry in receiver_entries}
    refused = {str(name).strip().lower() for name in forgotten}
    copies = []
    for entry in sender_entries:
        if not may_pass(entry, now, max_hops, max_age_days, npcs):
            continue
        first = first_speaker(entry)
        if first and str(first).strip().lower() in refused:
            continue
        if erased and says_one_of(entry.get("content") or "", erased):
            continue
        origin = origin_of(entry, sender_dbref)
        key = content_key(entry.get("content"))
        if origin in held or key in said or came_from(entry, origin, receiver_dbref,
                                                        receiver_name):
            continue
        held.add(origin)
        said.add(key)
        copies.append(gossip_copy(entry, sender_name, sender_dbref, now))
    if limit is not None:
        copies = copies[-int(limit):] if int(limit) > 0 else []
    return copies


def heard_from_text(text, meta) -> str:
    """
    How a heard-from fact is shown to the model and on admin screens: ``"you heard from Marta
    that <text> (Wren said it first, 2026-11-20; 2 hops: Hilda, Marta)"``; ``text`` unchanged
    for a fact the NPC heard itself.

    Args:
        text (str): the fact.
        meta (dict): a journal entry or a Mem0 hit's metadata (the provenance fields).
    """
    heard_from = meta.get("heard_from")
    if not heard_from:
        return text
    said = aware_datetime(meta.get("said_at"))
    first = meta.get("origin_speaker")
    details = []
    if first or said:
        details.append(f"{first or 'someone'} said it first"
                       + (f", {said.date().isoformat()}" if said else ""))
    hops = hops_of(meta)
    chain = [str(name) for name in meta.get("chain") or ()]
    if hops > 1 and chain:
        details.append(f"{hops} hops: {', '.join(chain)}")
    return (f"you heard from {heard_from} that {text}"
            + (f" ({'; '.join(details)})" if details else ""))


def chain_text(meta) -> str:
    """The provenance chain in a few words for receipts and tables: ``"Wren > Marta > Bram"``
    style, from the first speaker through every NPC it passed; ``""`` for a first-hand fact."""
    if not meta.get("heard_from"):
        return ""
    names = [str(meta.get("origin_speaker") or "?")] + [str(n) for n in meta.get("chain") or ()]
    return " > ".join(names) + f" ({hops_of(meta)} hop{'s' if hops_of(meta) != 1 else ''})"
