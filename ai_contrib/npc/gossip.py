"""
Gossip in the game (``docs/design.md``, "Gossip"): while an NPC sleeps it hears, from every other
AI NPC it shares a gossip network with, what they learned in public, with its provenance; when
an NPC enters a room, it and the NPCs of its networks already there trade the same way. No
LLM call: facts are copied journal to journal, and the sleep's consolidation stores them in Mem0
like the NPC's own facts. Which facts may pass, and how a copy looks, is decided by
:mod:`ai_contrib.core.gossip`; this module finds the NPCs and writes the journals.

Game data:

* the NPC's Tags of category ``gossip`` name extra networks (``tag "guild" category "gossip"``);
  its room's Tag of category ``zone`` (or the room itself) the default one
  (``AI_GOSSIP_DEFAULT_NETWORK``);
* ``character.db.gossip_off`` (bool): the NPC neither hears nor passes gossip (``aigossip/off``);
* ``character.db.gossip_last`` : what the NPC's last sleep received, ``{"at": ISO str,
  "networks": [str], "received": [{"id", "origin", "from", "hops", "content"}], "peers": int}``;
* ``character.db.gossip_met``: what it received the last time it met other NPCs in a room
  (:func:`meet`), ``{"at", "with": [str], "received": [...]}``;
* ``character.db.gossip_passed``: the last :data:`PASSED_KEPT` facts others heard from it,
  ``[{"at", "to", "origin", "id", "route": "sleep" | "meeting"}]``.

Cost: one sleep reads the journals of the NPCs in the NPC's own networks only (found by Tag),
never of the NPCs outside them.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from evennia.utils import logger
from evennia.utils.search import search_tag

from ..core.gossip import networks, origin_of, select_gossip
from ..core.outcome import SKIPPED, StepResult
from ..memory.journal import add_entry, ensure_journal
from ..settings import get_setting
from .ai_npcs import ai_npc_ids
from .erase import erased_facts, mark_erased, withdraw_recall

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

#: entries of ``db.gossip_passed`` kept
PASSED_KEPT = 20


def gossip_on(character) -> bool:
    """False when staff stopped the NPC's gossip (``aigossip/off``)."""
    return not character.attributes.get("gossip_off", default=False)


def npc_networks(character) -> frozenset:
    """
    The gossip networks of ``character`` now (:func:`ai_contrib.core.gossip.networks`).

    Raises:
        ValueError: ``AI_GOSSIP_DEFAULT_NETWORK`` is not one of ``zone``, ``location``,
            ``none``.
    """
    room = character.location
    zones = sorted(room.tags.get(category="zone", return_list=True) or ()) if room else []
    return networks(
        character.tags.get(category="gossip", return_list=True) or (),
        zone=zones[0] if zones else None,
        location=room.dbref if room else None,
        default=str(get_setting("GOSSIP_DEFAULT_NETWORK")).strip().lower(),
    )


def _members(network):
    """The objects a network could hold (candidates; each is checked by its own networks)."""
    kind, _, name = network.partition(":")
    if kind == "tag":
        return list(search_tag(name, category="gossip"))
    if kind == "zone":
        return [obj for room in search_tag(name, category="zone") for obj in room.contents]
    if kind == "place":
        from evennia.utils.search import search_object

        rooms = search_object(name)
        return list(rooms[0].contents) if rooms else []
    return []


def peers(character, script_key) -> list:
    """
    The other AI NPCs (objects carrying a script keyed ``script_key``) that share a gossip
    network with ``character`` and have gossip on, sorted by dbref.

    Returns:
        list: characters.
    """
    own = npc_networks(character)
    found = {}
    for network in sorted(own):
        for obj in _members(network):
            if obj.id == character.id or obj.id in found or not obj.scripts.get(script_key):
                continue
            if gossip_on(obj) and own & npc_networks(obj):
                found[obj.id] = obj
    return [found[key] for key in sorted(found)]


def _journal_of(character):
    from ..memory.mem0_payload import plain_entry

    return ensure_journal(plain_entry(character.db.journal or {}))


def _hear_from(character, journal, peer, peer_entries, now, max_hops, route, npcs=()):
    """
    Copy into ``journal`` (``character``'s, not saved here) the facts ``peer`` may pass to it
    (:func:`ai_contrib.core.gossip.select_gossip` over ``peer_entries``, its journal's
    entries), and note on ``peer`` what it passed. ``npcs``: :func:`ai_npc_ids`.

    Returns:
        list[dict]: ``{"id", "origin", "from", "hops", "content"}`` for each fact received.
    """
    at = now.isoformat(timespec="seconds")
    copies = select_gossip(
        peer_entries, peer.key, peer.dbref, journal["entries"],
        character.dbref, now, max_hops, float(get_setting("GOSSIP_MAX_AGE_DAYS")),
        limit=int(get_setting("GOSSIP_MAX_PER_SLEEP")),
        forgotten=character.db.forgotten_players or (), erased=erased_facts(character),
        npcs=npcs, receiver_name=character.key,
    )
    received, passed = [], []
    for copy in copies:
        fields = dict(copy)
        content = fields.pop("content")
        entry = add_entry(journal, content, now=now, **fields)
        received.append({"id": entry["id"], "origin": entry["origin"], "from": peer.key,
                         "hops": entry["hops"], "content": entry["content"]})
        passed.append({"at": at, "to": character.key, "origin": entry["origin"],
                       "id": entry["id"], "route": route})
    if passed:
        peer.db.gossip_passed = (list(peer.db.gossip_passed or []) + passed)[-PASSED_KEPT:]
    return received


def _off_reason(character, max_hops):
    """Why ``character`` takes no gossip now, or None."""
    if not gossip_on(character):
        return "gossip off for this NPC"
    if max_hops <= 0:
        return "AI_GOSSIP_MAX_HOPS 0"
    return None


def receive_gossip(script, character, now=None) -> StepResult:
    """
    The sleep step "gossip": ``character`` hears from its peers (:func:`peers`) what they
    learned in public, into its journal (``docs/design.md``, "Gossip").

    Args:
        script: the NPC's ``AssistantScript`` (its key finds the other AI NPCs).
        character: the NPC.
        now (datetime, optional): clock override for tests (timezone-aware).

    Returns:
        StepResult: figures ``{"received": int, "peers": int, "networks": [str]}``; skipped,
        with the reason, when gossip is off (the NPC's switch, or ``AI_GOSSIP_MAX_HOPS`` 0).
    """
    now = now or datetime.now(timezone.utc)
    at = now.isoformat(timespec="seconds")
    max_hops = int(get_setting("GOSSIP_MAX_HOPS"))
    reason = _off_reason(character, max_hops)
    if reason:
        character.db.gossip_last = {"at": at, "networks": [], "received": [], "peers": 0,
                                    "skipped": reason}
        return StepResult(SKIPPED, reason=reason)
    own = npc_networks(character)
    journal = _journal_of(character)
    received = []
    others = peers(character, script.key)
    npcs = ai_npc_ids(script.key) if others else frozenset()
    for peer in others:
        received += _hear_from(character, journal, peer, _journal_of(peer)["entries"], now,
                               max_hops, "sleep", npcs)
    if received:
        character.db.journal = journal
        logger.log_info(f"AI {character}: heard {len(received)} fact(s) from "
                        f"{len({r['from'] for r in received})} NPC(s) while asleep")
    character.db.gossip_last = {"at": at, "networks": sorted(own), "received": received,
                                "peers": len(others)}
    return StepResult(figures={"received": len(received), "peers": len(others),
                               "networks": sorted(own)})


def meet(character, script_key, now=None) -> dict[str, int]:
    """
    Gossip when NPCs meet (``docs/design.md``, "Gossip"): ``character`` has just entered its
    room, and it and every AI NPC already there that shares a gossip network with it (both
    with gossip on) trade, both ways, what they learned in public, by the same rules and limits
    as a sleep (:func:`ai_contrib.core.gossip.select_gossip`; no LLM call). What is received
    waits in the journal for the NPC's next sleep to reach Mem0, like its own facts.

    Each NPC that received anything gets ``db.gossip_met``: ``{"at": ISO str, "with": [str],
    "received": [{"id", "origin", "from", "hops", "content"}]}``.

    Args:
        character: the AI NPC that arrived.
        script_key (str): the ``AssistantScript``'s key (finds the other AI NPCs).
        now (datetime, optional): clock override for tests (timezone-aware).

    Returns:
        dict: ``{npc key: facts received}`` for each NPC that received any (empty when nobody
        did, or when ``character`` takes no gossip).

    Raises:
        ValueError: ``AI_GOSSIP_DEFAULT_NETWORK`` is not one of ``zone``, ``location``,
            ``none``.
    """
    room = character.location
    max_hops = int(get_setting("GOSSIP_MAX_HOPS"))
    if room is None or _off_reason(character, max_hops):
        return {}
    now = now or datetime.now(timezone.utc)
    own = npc_networks(character)
    met = [obj for obj in room.contents
           if obj.id != character.id and obj.scripts.get(script_key) and gossip_on(obj)
           and own & npc_networks(obj)]
    counts = {}
    npcs = ai_npc_ids(script_key) if met else frozenset()
    # each journal is read once, before anyone hears anything: a fact moves one hop per meeting
    journals = {obj.id: _journal_of(obj) for obj in [character] + met}
    entries = {key: list(journal["entries"]) for key, journal in journals.items()}
    for receiver in [character] + met:
        journal = journals[receiver.id]
        received = []
        for sender in (met if receiver is character else [character]):
            received += _hear_from(receiver, journal, sender, entries[sender.id], now,
                                   max_hops, "meeting", npcs)
        if received:
            receiver.db.journal = journal
            receiver.db.gossip_met = {"at": now.isoformat(timespec="seconds"),
                                      "with": sorted({r["from"] for r in received}),
                                      "received": received}
            counts[receiver.key] = len(received)
    if counts:
        logger.log_info(f"AI {character} met {', '.join(o.key for o in met)} in {room}: "
                        + ", ".join(f"{key} heard {n} fact(s)" for key, n in counts.items()))
    return counts


def travelled_copies(origin, script_key) -> list[tuple]:
    """
    Every journal entry of every AI NPC that is ``origin`` (:func:`ai_contrib.core.gossip.
    origin_of`) or a copy of it.

    Args:
        origin (str): ``"<dbref>/<journal id>"``.
        script_key (str): the ``AssistantScript``'s key.

    Returns:
        list[tuple]: ``(npc, entry id)`` pairs.
    """
    from evennia.scripts.models import ScriptDB

    found = []
    seen = set()
    for script in ScriptDB.objects.filter(db_key=script_key, db_obj__isnull=False):
        npc = script.obj
        if npc is None or npc.id in seen:
            continue
        seen.add(npc.id)
        for entry in _journal_of(npc)["entries"]:
            if origin_of(entry, npc.dbref) == origin:
                found.append((npc, entry["id"]))
    return found


def erase_everywhere(origin, script_key) -> Deferred:
    """
    Erase a fact from every NPC it travelled to (``aigossip/erase``): the journal entries of
    :func:`travelled_copies` are removed at once, with the recall notes that quote them
    (:func:`ai_contrib.npc.erase.withdraw_recall`: the next reply's prompt no longer holds
    the fact), their Mem0 memories on the store's thread.

    Returns:
        Deferred[dict]: ``{"journals": [(npc key, entry id)], "memories": int | None,
        "memory_error"?: str}``; never errbacks.
    """
    from twisted.internet import defer

    from ..memory.mem0_payload import npc_agent_id
    from ..memory.mem0_store import get_store

    copies = travelled_copies(origin, script_key)
    by_npc = {}
    for npc, entry_id in copies:
        by_npc.setdefault(npc.id, (npc, []))[1].append(entry_id)
    for npc, ids in by_npc.values():
        journal = _journal_of(npc)
        gone = set(ids)
        # refused from now on: lines still in its context must not journal it again
        mark_erased(npc, [e.get("content") for e in journal["entries"] if e.get("id") in gone])
        journal["entries"] = [e for e in journal["entries"] if e.get("id") not in gone]
        journal["consolidated_entry_ids"] = [
            jid for jid in journal["consolidated_entry_ids"] if jid not in gone]
        npc.db.journal = journal
        script = getattr(npc, "assistant", None)
        if script is not None:  # its recall notes may quote the fact: they leave with it
            withdraw_recall(script, ids)
    report = {"journals": [(npc.key, entry_id) for npc, entry_id in copies], "memories": None}
    if not copies or not get_setting("MEMORY_ENABLED"):
        return defer.succeed(report)
    jobs = [get_store().delete_derived(npc_agent_id(npc), ids) for npc, ids in by_npc.values()]

    def _counted(results):
        report["memories"] = 0
        for ok, value in results:
            if ok:
                report["memories"] += int(value)
            else:
                report["memory_error"] = value.getErrorMessage()
        return report

    return defer.DeferredList(jobs, consumeErrors=True).addCallback(_counted)
