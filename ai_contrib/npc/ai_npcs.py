"""
The game's AI NPCs as the database knows them: every object carrying a script keyed like the
NPC's own ``AssistantScript`` (``ai_contrib.typeclasses.SCRIPT_KEY``, passed in as
``script_key`` so that ``npc/`` never imports the typeclasses). One query each, O(NPCs).
"""

from __future__ import annotations


def ai_npc_ids(script_key) -> frozenset[str]:
    """The dbrefs (``"#12"``) of every AI NPC: never counted among a fact's hearers when
    deciding whether it was learned in public (``docs/design.md``, "Gossip")."""
    return frozenset(f"#{obj_id}" for obj_id in _npc_field(script_key, "id"))


def ai_npc_names(script_key) -> frozenset[str]:
    """The keys of every AI NPC, case-folded: a summary's line giving one of them words
    (``"Fenwick said: ..."``) gives an NPC's words, even once that NPC has left the
    conversation (``docs/design.md``, "Facts players said")."""
    return frozenset(str(key).casefold() for key in _npc_field(script_key, "db_key") if key)


def _npc_field(script_key, field):
    """One field of every object carrying a script keyed ``script_key`` (one query)."""
    from evennia.scripts.models import ScriptDB

    return ScriptDB.objects.filter(db_key=script_key, db_obj__isnull=False).values_list(
        f"db_obj__{field}", flat=True)
