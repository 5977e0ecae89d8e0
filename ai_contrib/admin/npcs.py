"""
Finding AI NPCs: by name for the admin commands, and all of them for ``ailist``.

An AI NPC is any object that carries an ``AssistantScript`` (or a subclass of it): an
``AssistantCharacter``, a game's own subclass of it (``class Innkeeper(AssistantCharacter,
Character)``, the usual way to use a contrib), or any other typeclass an admin added the script
to. Matching on the exact typeclass path would miss all but the first, so lookups test
inheritance and the script, never the path.
"""

from __future__ import annotations

from evennia.utils.utils import at_search_result

from ..typeclasses import AssistantCharacter, AssistantScript, get_assistant_script


def class_paths(cls) -> list[str]:
    """
    The typeclass paths of ``cls`` and of every subclass of it imported so far.

    Returns:
        list[str]: ``"module.Class"`` paths, ``cls``'s first.
    """
    paths, todo = [], [cls]
    while todo:
        current = todo.pop()
        path = f"{current.__module__}.{current.__name__}"
        if path not in paths:
            paths.append(path)
            todo.extend(current.__subclasses__())
    return paths


def is_ai_npc(obj) -> bool:
    """True if ``obj`` is an ``AssistantCharacter`` (any subclass) or carries an AssistantScript."""
    return isinstance(obj, AssistantCharacter) or get_assistant_script(obj) is not None


def find_npc(caller, name) -> tuple:
    """
    Find an AI NPC by name anywhere in the game; report failures to ``caller``.

    Every object matching ``name`` is found (Evennia's global search: key, alias, ``#dbref``,
    ``name-2`` for the second of several), then only AI NPCs are kept, so an NPC named like a
    player or an item is still found.

    Returns:
        tuple: ``(npc, script)``, or ``(None, None)`` after telling the caller why: "Could not
        find '<name>'.", Evennia's list of several matches, "<name> is not an AI NPC." when
        only other objects match, or "<name> has no AssistantScript." for an
        ``AssistantCharacter`` whose script was deleted.
    """
    if not name:
        return None, None
    matches = caller.search(name, global_search=True, quiet=True) or []
    npcs = [obj for obj in matches if is_ai_npc(obj)]
    if not npcs and matches:
        what = matches[0].key if len(matches) == 1 else f"'{name}'"
        caller.msg(f"{what} is not an AI NPC.")
        return None, None
    npc = at_search_result(npcs, caller, query=name)
    if not npc:
        return None, None
    script = get_assistant_script(npc)
    if not script:
        caller.msg(f"{npc.key} has no AssistantScript.")
        return None, None
    return npc, script


def npcs_beside_players() -> list[tuple]:
    """
    The AI NPCs in a room with a connected player's character, the one that replied last first:
    those players are likely to speak to first after a restart (``docs/design.md``, "Warming
    the cache after a restart"). Costs the connected sessions and their rooms' contents, never
    a search of every object.

    Returns:
        list[tuple]: ``(npc, script)`` pairs, by the time of the NPC's last reply (its last
        receipt's ``"at"``), latest first; NPCs that never replied last.
    """
    from evennia.server.sessionhandler import SESSION_HANDLER

    rooms = {}
    for session in SESSION_HANDLER.get_sessions():
        room = getattr(session.get_puppet(), "location", None)
        if room is not None:
            rooms[room.id] = room
    found = {}
    for room in rooms.values():
        for obj in room.contents:
            script = get_assistant_script(obj) if obj.id not in found else None
            if script is not None:
                found[obj.id] = (obj, script)
    return by_last_reply(found.values())


def ai_npcs_with_ids(ids) -> list[tuple]:
    """
    The AI NPCs among the objects with these ids (one query), as ``(npc, script)`` pairs in no
    particular order; ids of objects gone or no longer AI NPCs are left out.
    """
    from evennia.objects.models import ObjectDB

    pairs = []
    for obj in ObjectDB.objects.filter(id__in=list(ids)):
        script = get_assistant_script(obj)
        if script is not None:
            pairs.append((obj, script))
    return pairs


def by_last_reply(pairs) -> list[tuple]:
    """``(npc, script)`` pairs by the time of the NPC's last reply (its last receipt's
    ``"at"``, an ISO-8601 UTC string), latest first; NPCs that never replied last."""

    def last_reply(pair):
        receipts = pair[1].db.reply_receipts or []
        return str(receipts[-1].get("at") or "") if receipts else ""

    return sorted(pairs, key=last_reply, reverse=True)


def all_ai_npcs() -> list[tuple]:
    """
    Every AI NPC in the game, by name: one query for the scripts (by typeclass path, the
    ``AssistantScript`` and its subclasses) and one for ``AssistantCharacter`` objects whose
    script is missing, so the cost is O(NPCs), not O(objects).

    Returns:
        list[tuple]: ``(npc, script)`` pairs sorted by the NPC's key; ``script`` is None for an
        ``AssistantCharacter`` without its script.
    """
    from evennia.objects.models import ObjectDB
    from evennia.scripts.models import ScriptDB

    found = {}
    scripts = ScriptDB.objects.filter(
        db_typeclass_path__in=class_paths(AssistantScript), db_obj__isnull=False
    )
    for script in scripts:
        npc = script.obj
        if npc is not None and npc.id not in found:
            found[npc.id] = (npc, script)
    bare = ObjectDB.objects.filter(
        db_typeclass_path__in=class_paths(AssistantCharacter)
    ).exclude(id__in=list(found))
    for npc in bare:
        found[npc.id] = (npc, None)
    return sorted(found.values(), key=lambda pair: (pair[0].key.lower(), pair[0].id))
