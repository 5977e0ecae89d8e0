"""
Lore storage and lookup in the game (``docs/design.md``, "Lore and pins"): one global
:class:`LoreScript` holds every entry, each as its own Attribute of category
:data:`LORE_CATEGORY` (editing one entry re-pickles that entry only), and keeps the matching
index (:class:`ai_contrib.core.lore.LoreIndex`) in ``ndb``, rebuilt on the first lookup after
an entry changed.

Entries come from two places:

- written in the game with ``ailore`` (:mod:`ai_contrib.admin.lore_commands`): numeric ids, kept
  until deleted;
- the game's source: every module of the setting ``AI_LORE_MODULES`` (python paths, like
  ``PROTOTYPE_MODULES``) defines ``LORE = [dict, ...]``; :func:`load_lore_modules` copies them in
  on every server start (:func:`ai_contrib.startup.at_server_start` calls it), replacing what
  the modules gave before and removing what they no longer give. Their ids start with a letter.

The reply path calls :func:`lore_for_npc` with the turn's texts (:func:`lore_texts` picks them)
and places ``format_lore(result["chosen"])`` near the end of the prompt, where what changes per
turn belongs.
"""

from datetime import datetime, timezone

from evennia.scripts.scripts import DefaultScript
from evennia.utils import logger

from .core import lore as core
from .core.lore import LoreMatch
from .settings import get_setting, option_value

#: the key of the one lore script
LORE_SCRIPT_KEY = "ai_lore"
#: the Attribute category of the entries on it
LORE_CATEGORY = "ai_lore"
#: ``source`` of an entry written in the game
GAME_SOURCE = "game"


class LoreScript(DefaultScript):
    """The world's lore: one Attribute per entry (category ``ai_lore``); no timer."""

    def at_script_creation(self):
        self.key = LORE_SCRIPT_KEY
        self.desc = "lore entries for AI NPCs (ailore)"
        self.persistent = True
        self.db.next_id = 1


def get_lore_store(create=False):
    """
    The game's :class:`LoreScript` (one indexed database query).

    Args:
        create (bool): create it when there is none.

    Returns:
        LoreScript | None: None when there is none and ``create`` is False.
    """
    from evennia.scripts.models import ScriptDB
    from evennia.utils import create as ev_create

    found = ScriptDB.objects.filter(db_key=LORE_SCRIPT_KEY).order_by("id").first()
    if found is None and create:
        found = ev_create.create_script(LoreScript, key=LORE_SCRIPT_KEY, persistent=True,
                                        autostart=False)
    return found


def _plain(value):
    """An entry read from an Attribute as plain Python (Evennia returns tracking containers)."""
    out = dict(value)
    for field in ("keys", "condition"):
        out[field] = [str(item) for item in out.get(field) or ()]
    return out


def lore_entries(store=None):
    """
    Every entry, highest priority first, then by source and id.

    Returns:
        list[dict]: entries as :func:`ai_contrib.core.lore.parse_entry` returns them.
    """
    store = store or get_lore_store()
    if store is None:
        return []
    entries = [_plain(attr.value) for attr in store.attributes.all(category=LORE_CATEGORY)]
    return sorted(entries, key=lambda e: (-e["priority"], e["source"] != GAME_SOURCE,
                                          e["id"].zfill(12) if e["id"].isdigit() else e["id"]))


def get_entry(entry_id, store=None):
    """The entry ``entry_id`` (case-insensitive), or None."""
    store = store or get_lore_store()
    if store is None or not entry_id:
        return None
    value = store.attributes.get(str(entry_id).strip().lower(), category=LORE_CATEGORY)
    return _plain(value) if value else None


def lore_index(store=None):
    """
    The matching index of every entry, from the store's ``ndb`` or rebuilt (O(entries), once
    after each change).

    Returns:
        ai_contrib.core.lore.LoreIndex: empty when there is no store.
    """
    store = store or get_lore_store()
    if store is None:
        return core.build_index(())
    index = store.ndb.lore_index
    if index is None:
        index = core.build_index(lore_entries(store))
        store.ndb.lore_index = index
    return index


def _store_entry(store, entry):
    store.attributes.add(entry["id"], entry, category=LORE_CATEGORY)
    store.ndb.lore_index = None


def _now():
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def add_entry(text, keys=None, constant=False, condition=None, priority=0, by=None):
    """
    Write a new entry in the game; it gets the next free number as its id.

    Args:
        text (str): what the NPCs know.
        keys (str | list[str]): trigger words or phrases (comma-separated in a string).
        constant (bool): always given instead of keys.
        condition (str | list[str] | None): who knows it (None: everyone).
        priority (int): higher first.
        by (str | None): who wrote it.

    Returns:
        dict: the stored entry.

    Raises:
        ValueError: :func:`ai_contrib.core.lore.parse_entry`'s message.
    """
    store = get_lore_store(create=True)
    number = int(store.db.next_id or 1)
    while store.attributes.has(str(number), category=LORE_CATEGORY):
        number += 1
    entry = core.parse_entry({"id": str(number), "text": text, "keys": keys or [],
                              "constant": constant, "condition": condition,
                              "priority": priority, "by": by, "at": _now()}, GAME_SOURCE)
    store.db.next_id = number + 1
    _store_entry(store, entry)
    return entry


def _game_entry(store, entry_id, verb):
    """
    The entry ``entry_id`` written in the game, for a change (``verb``: "edit", "remove").

    Raises:
        KeyError: no such entry.
        ValueError: it comes from a module, where the change must be made instead.
    """
    entry = get_entry(entry_id, store)
    if entry is None:
        raise KeyError(f"no lore entry {entry_id!r}")
    if entry["source"] != GAME_SOURCE:
        raise ValueError(f"lore entry {entry['id']!r} comes from {entry['source']}: {verb} it "
                         "there (it is loaded again on every start)")
    return entry


def update_entry(entry_id, by=None, **changes):
    """
    Change fields of an entry written in the game.

    Args:
        entry_id (str): its id.
        by (str | None): who changed it (recorded in ``by``).
        **changes: any of ``text``, ``keys``, ``constant``, ``condition``, ``priority``.
            Setting ``keys`` makes a constant entry keyed; ``constant=True`` drops its keys.

    Returns:
        dict: the stored entry.

    Raises:
        KeyError: no such entry.
        ValueError: the entry comes from a module (edit the module: it would be replaced on the
            next start), or the changed entry is invalid (nothing is stored then).
    """
    store = get_lore_store()
    entry = _game_entry(store, entry_id, "edit")
    unknown = set(changes) - {"text", "keys", "constant", "condition", "priority"}
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))}")
    if changes.get("keys"):
        entry["constant"] = False
    if changes.get("constant"):
        entry["keys"] = []
    entry.update(changes)
    entry.update(by=by if by is not None else entry.get("by"), at=_now())
    entry = core.parse_entry(entry, GAME_SOURCE)
    _store_entry(store, entry)
    return entry


def delete_entry(entry_id):
    """
    Delete an entry written in the game.

    Returns:
        dict: the deleted entry.

    Raises:
        KeyError: no such entry.
        ValueError: it comes from a module.
    """
    store = get_lore_store()
    entry = _game_entry(store, entry_id, "remove")
    store.attributes.remove(entry["id"], category=LORE_CATEGORY)
    store.ndb.lore_index = None
    return entry


def _module_entries(path):
    """``(entries, errors)`` of one lore module; raises ImportError/AttributeError/TypeError."""
    import importlib

    module = importlib.import_module(path)
    raw = getattr(module, "LORE")
    if not isinstance(raw, (list, tuple)):
        raise TypeError(f"{path}.LORE must be a list of dicts, not {type(raw).__name__}")
    entries, errors = [], []
    for number, item in enumerate(raw):
        try:
            entries.append(core.parse_entry(item, path))
        except ValueError as err:
            errors.append(f"{path}.LORE[{number}]: {err}")
    return entries, errors


def load_lore_modules(modules=None):
    """
    Copy the entries of the lore modules into the store; idempotent, called on every server
    start (:func:`ai_contrib.startup.at_server_start`).

    Each module's entries replace what that module gave before: changed ones are rewritten,
    unchanged ones left alone (no write), those it no longer has removed, as are the entries of
    modules no longer listed. Entries written in the game are never touched. A module that
    cannot be imported keeps its previous entries; an invalid entry is left out. Both are
    logged and reported, never raised, so a typo does not stop the game.

    Args:
        modules (list[str] | str | None): python paths (a string: comma-separated); None: the
            setting ``AI_LORE_MODULES``.

    Returns:
        dict: ``{"added": [ids], "updated": [ids], "removed": [ids], "unchanged": int,
        "errors": [str]}``.
    """
    if modules is None:
        modules = get_setting("LORE_MODULES") or []
    if isinstance(modules, str):  # from the environment: comma-separated
        modules = [path.strip() for path in modules.split(",") if path.strip()]
    report = {"added": [], "updated": [], "removed": [], "unchanged": 0, "errors": []}
    wanted, failed = {}, set()
    for path in modules:
        try:
            entries, errors = _module_entries(path)
        except Exception as err:  # an import error must not stop the game
            failed.add(path)
            report["errors"].append(f"{path}: {type(err).__name__}: {err}")
            continue
        report["errors"].extend(errors)
        for entry in entries:
            if entry["id"] in wanted:
                report["errors"].append(f"{path}: lore id {entry['id']!r} is already used by "
                                        f"{wanted[entry['id']]['source']}; left out")
                continue
            wanted[entry["id"]] = entry
    store = get_lore_store(create=bool(wanted))
    if store is not None:
        existing = {e["id"]: e for e in lore_entries(store)}
        for entry_id, old in existing.items():
            if (old["source"] != GAME_SOURCE and old["source"] not in failed
                    and entry_id not in wanted):
                store.attributes.remove(entry_id, category=LORE_CATEGORY)
                report["removed"].append(entry_id)
        for entry_id, entry in wanted.items():
            old = existing.get(entry_id)
            if old == entry:
                report["unchanged"] += 1
                continue
            _store_entry(store, entry)
            report["updated" if old else "added"].append(entry_id)
        store.ndb.lore_index = None
    for error in report["errors"]:
        logger.log_err(f"ai_contrib lore: {error}")
    if report["added"] or report["updated"] or report["removed"]:
        logger.log_info(f"ai_contrib lore: {len(report['added'])} added, "
                        f"{len(report['updated'])} updated, {len(report['removed'])} removed "
                        f"from {len(modules)} module(s)")
    return report


def npc_facts(npc):
    """
    What conditions are checked against (:func:`ai_contrib.core.lore.npc_scopes`): the NPC's
    key, dbref and Tags, its room's key and dbref, and the room's Tags of category ``zone``.

    Returns:
        dict: ``{"name", "dbref", "tags": [(tag, category | None)], "location", "location_dbref",
        "zones": [str]}``.
    """
    room = getattr(npc, "location", None)
    zones = list(room.tags.get(category="zone", return_list=True) or []) if room else []
    return {
        "name": npc.key,
        "dbref": npc.dbref,
        "tags": [tuple(pair) for pair in npc.tags.all(return_key_and_category=True)],
        "location": room.key if room else None,
        "location_dbref": room.dbref if room else None,
        "zones": [str(zone) for zone in zones if zone],
    }


def _script_of(npc):
    """The NPC's AssistantScript, for its per-NPC options (None: game-wide values)."""
    return getattr(npc, "assistant", None)


def lore_texts(npc, turn_texts, earlier_texts):
    """
    The texts :func:`lore_for_npc` scans for one turn: the turn's lines, then the last
    ``LORE_SCAN_LINES`` (per NPC) lines before them, newest first.

    Args:
        npc: the NPC (for its ``lore_scan_lines`` option).
        turn_texts (list[str]): the lines being answered, in the order said.
        earlier_texts (list[str]): lines before them, oldest first (only the last few are read).

    Returns:
        list[str]
    """
    lines = max(0, int(option_value("LORE_SCAN_LINES", _script_of(npc)) or 0))
    earlier = list(earlier_texts)[-lines:] if lines else []
    return list(reversed(list(turn_texts))) + list(reversed(earlier))


def lore_for_npc(npc, texts, budget_tokens=None, count=None) -> LoreMatch:
    """
    The lore entries ``npc`` is given for ``texts`` (``docs/design.md``, "Lore and pins"):
    constant entries and entries a key of which occurs in the texts as whole words, only among
    those whose condition holds for the NPC (its Tags, room, zone), ranked by priority, within
    the budget.

    Cost per call: one query for the store, then O(words of the texts x clauses that hold for
    the NPC + candidate entries) (:func:`ai_contrib.core.lore.match_lore`); the index is rebuilt
    only after entries changed.

    Args:
        npc: the NPC (any typeclassed object with Tags and a location).
        texts (list[str]): the texts scanned, most important first (:func:`lore_texts`).
        budget_tokens (int | None): tokens the chosen texts may take; None: the NPC's
            ``lore_token_budget`` option (``AI_LORE_TOKEN_BUDGET``).
        count (callable | None): ``str -> int`` tokens; None: the NPC model's tokenizer.

    Returns:
        LoreMatch: (:func:`ai_contrib.core.lore.match_lore`); both lists empty when there is
        no lore.
    """
    store = get_lore_store()
    if store is None:
        return {"chosen": [], "skipped": []}
    script = _script_of(npc)
    if budget_tokens is None:
        budget_tokens = option_value("LORE_TOKEN_BUDGET", script)
    if count is None:
        from .core.tokens import count_tokens

        model = option_value("LLM_MODEL", script)

        def count(text):
            return count_tokens(text, model)

    return core.match_lore(lore_index(store), npc_facts(npc), texts, budget_tokens, count)
