"""
World knowledge ("lore") for NPCs: entries an admin writes once, given to the NPCs allowed to
know them when a conversation touches them (``docs/design.md``, "Lore and pins").

Pure functions and data: no Evennia, Twisted or Django. The shell (:mod:`ai_contrib.lore`)
stores the entries, builds the NPC's facts from its Tags and room, and calls
:func:`match_lore`.

An entry, as :func:`parse_entry` returns it, is a plain dict whose fields :class:`LoreEntry`
declares.

**Keys** are plain words or phrases, never patterns: a key matches where its words appear in a
text as consecutive whole words, case-insensitively (``"ale"`` matches "Ale, please!" but not
"sale" or "aleph"; ``"east room"`` matches "the East  room"). Words are runs of letters, digits
and ``_`` (``\\w``); everything else separates them, so ``"ale-house"`` is the two words "ale
house". A key may hold only letters, digits, ``_``, spaces, hyphens and apostrophes
(:func:`parse_keys`): anything else (``^griffin$``, ``(a+)+``, ``a{1,9}``) looks like a pattern
and is refused, never rewritten into words the admin did not write. Matching is a dictionary
lookup per word of the text, so nothing a player types can make it slow.

**Conditions** (who knows), each clause one of:

- ``all``: every NPC;
- ``npc:<key>`` or ``npc:#<dbref>``: one NPC;
- ``location:<room key>`` or ``location:#<dbref>``: NPCs standing in that room;
- ``zone:<name>``: NPCs whose room carries the Tag ``<name>`` of category ``zone``;
- ``tag:<tag>``: NPCs carrying the Tag ``<tag>`` without a category;
- ``<category>:<tag>``: NPCs carrying the Tag ``<tag>`` of category ``<category>``, as
  Evennia writes ``npc.tags.add("watch", category="faction")``: ``faction:watch``.

Values are compared case-insensitively (Evennia stores Tags in lower case). An entry with no
condition given gets ``["all"]``. An NPC for which no clause holds never receives the entry:
the index is partitioned by clause, and only the partitions of the clauses that hold for the
NPC are looked at (:func:`npc_scopes`), so an excluded entry is not even a candidate.
"""

from __future__ import annotations

import re
from typing import NotRequired, TypedDict

from .prompts import LORE_HEADING

#: the clause every NPC satisfies
ALL = "all"
#: clause kinds that are not Tag categories of the NPC
RESERVED_KINDS = ("npc", "location", "zone", "tag")
#: characters of an entry's text at most (lore is a few sentences: the budget is in tokens)
MAX_TEXT_CHARS = 2000
#: words of one key at most, and characters of one key
MAX_KEY_WORDS = 8
MAX_KEY_CHARS = 80
#: characters of an entry id at most
MAX_ID_CHARS = 40
#: the ``reason`` of an entry left out because the lore budget was spent
BUDGET = "budget"

_WORD = re.compile(r"\w+")
#: what a key may hold: word characters, spaces, hyphens and apostrophes (plain words)
_PLAIN_KEY = re.compile(r"[\w\s'\u2019-]+")
_GAME_ID = re.compile(r"[0-9]+")
_MODULE_ID = re.compile(r"[a-z][a-z0-9_.:-]*")
_FIELDS = ("id", "text", "keys", "constant", "condition", "priority", "source", "by", "at")


class LoreEntry(TypedDict):
    """A lore entry (module docstring)."""

    id: str  #: ``"12"`` (written in the game) or ``"tavern-prices"`` (from a module)
    text: str  #: what the NPC knows, as the admin wrote it
    keys: list[str]  #: trigger words or phrases, lower case, single-spaced
    constant: bool  #: True: always given (to the NPCs that may know it), no keys
    condition: list[str]  #: who may know it: any one clause is enough (module docstring)
    priority: int  #: higher first; 0 by default
    source: str  #: ``"game"``, or the module path it was loaded from
    by: str | None  #: who wrote it in the game (None for a module's)
    at: str | None  #: when (ISO 8601, UTC)


class LoreChoice(TypedDict):
    """An entry :func:`match_lore` chose or skipped for a turn."""

    id: str
    tokens: int  #: its text's tokens
    key: str | None  #: the key that triggered it; None for a constant entry
    constant: bool
    priority: int
    text: NotRequired[str]  #: a chosen entry's text
    reason: NotRequired[str]  #: a skipped entry's: ``"budget"``


class LoreMatch(TypedDict):
    """The lore of one turn (:func:`match_lore`), both lists in ranking order."""

    chosen: list[LoreChoice]
    skipped: list[LoreChoice]


def words(text) -> list[str]:
    """
    The words of ``text`` in lower case, in order: runs of ``\\w`` characters. Linear in the
    length of the text.

    Returns:
        list[str]
    """
    return _WORD.findall(str(text or "").lower())


def parse_keys(keys) -> list[str]:
    """
    Normalise trigger keys.

    Args:
        keys (str | list[str]): a list of words or phrases, or one string of them separated by
            commas (``"ale, beer, east room"``).

    Returns:
        list[str]: each key lower case, its words joined by one space, duplicates dropped,
        order kept.

    Raises:
        ValueError: a key without a word in it (empty, only punctuation), with a character
            other than letters, digits, ``_``, spaces, hyphens and apostrophes (a key is never
            a pattern: ``^griffin$`` is refused, not stored as "griffin"), longer than
            :data:`MAX_KEY_WORDS` words or :data:`MAX_KEY_CHARS` characters, or not text.
    """
    if isinstance(keys, str):
        keys = keys.split(",")
    if not isinstance(keys, (list, tuple)):
        raise ValueError(f"keys must be a list of words or phrases, not {type(keys).__name__}")
    out = []
    for key in keys:
        if not isinstance(key, str):
            raise ValueError(f"a key must be text, not {key!r}")
        if len(key.strip()) > MAX_KEY_CHARS:
            raise ValueError(f"key {key.strip()[:20]!r}... is longer than {MAX_KEY_CHARS} "
                             "characters")
        found = words(key)
        if not found:
            raise ValueError(f"empty key {key!r}: a key needs at least one word (letters or "
                             "digits)")
        if not _PLAIN_KEY.fullmatch(key):
            raise ValueError(f"key {key.strip()!r} is not a plain word or phrase: keys match "
                             "whole words, never patterns; use only letters, digits, spaces, "
                             "hyphens and apostrophes")
        if len(found) > MAX_KEY_WORDS:
            raise ValueError(f"key {key.strip()!r} has {len(found)} words; at most "
                             f"{MAX_KEY_WORDS}")
        norm = " ".join(found)
        if norm not in out:
            out.append(norm)
    return out


def parse_clause(clause) -> str:
    """
    Normalise one condition clause (module docstring, "Conditions").

    Returns:
        str: ``"all"`` or ``"<kind>:<value>"`` in lower case, spaces around the colon removed.

    Raises:
        ValueError: not ``all`` and not ``<kind>:<value>``, or an empty kind or value.
    """
    if not isinstance(clause, str):
        raise ValueError(f"a condition clause must be text, not {clause!r}")
    text = " ".join(clause.split()).lower()
    if text == ALL:
        return ALL
    kind, colon, value = text.partition(":")
    kind, value = kind.strip(), value.strip()
    if not colon or not kind or not value:
        raise ValueError(
            f"condition {clause!r}: expected 'all', 'npc:<name>', 'location:<room>', "
            "'zone:<name>', 'tag:<tag>' or '<category>:<tag>'")
    if not re.fullmatch(r"[\w-]+", kind):
        raise ValueError(f"condition {clause!r}: '{kind}' is not a word")
    return f"{kind}:{value}"


def parse_condition(condition) -> list[str]:
    """
    Normalise a condition: any-of a list of clauses.

    Args:
        condition (str | list[str] | None): clauses as a list, or one string of them separated
            by commas; None or empty means ``["all"]``.

    Returns:
        list[str]: the clauses (:func:`parse_clause`), duplicates dropped; ``["all"]`` alone
        when ``all`` is among them.

    Raises:
        ValueError: a clause :func:`parse_clause` refuses.
    """
    if condition is None:
        return [ALL]
    if isinstance(condition, str):
        condition = [c for c in condition.split(",") if c.strip()]
    if not isinstance(condition, (list, tuple)):
        raise ValueError(f"condition must be a list of clauses, not {type(condition).__name__}")
    out = []
    for clause in condition:
        norm = parse_clause(clause)
        if norm not in out:
            out.append(norm)
    if not out or ALL in out:
        return [ALL]
    return out


def parse_priority(priority) -> int:
    """
    An entry's priority: a whole number (``"5"`` accepted), 0 for None.

    Raises:
        ValueError: anything else (booleans and fractions included).
    """
    if priority is None:
        return 0
    if isinstance(priority, bool) or isinstance(priority, float):
        raise ValueError(f"priority must be a whole number, not {priority!r}")
    try:
        return int(str(priority).strip())
    except ValueError:
        raise ValueError(f"priority must be a whole number, not {priority!r}") from None


def parse_entry(raw, source="game") -> LoreEntry:
    """
    Validate one entry and return it normalised (module docstring for the shape;
    ``docs/design.md``, "Lore and pins").

    Args:
        raw (dict): ``{"id", "text", "keys" | "constant", "condition", "priority"}`` (and
            optionally ``"by"``, ``"at"``; a ``"source"`` field is ignored); ``keys``
            and ``condition`` may be lists or comma-separated strings. Exactly one of a
            non-empty ``keys`` or ``constant: True``.
        source (str): ``"game"`` for an entry written in the game (its id must be a number),
            else the module path it comes from (its id must start with a letter, so the two
            never collide).

    Returns:
        LoreEntry: with exactly its fields.

    Raises:
        ValueError: with a message naming the entry and what is wrong: unknown field, missing
            or empty text, text over :data:`MAX_TEXT_CHARS`, no keys and not constant, keys and
            constant both, a bad key, clause, priority or id.
    """
    if not isinstance(raw, dict):
        raise ValueError(f"a lore entry must be a dict, not {type(raw).__name__}")
    name = raw.get("id")
    label = f"lore entry {name!r}" if name is not None else "lore entry"
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise ValueError(f"{label}: unknown field(s) {', '.join(unknown)}")
    entry_id = str(name).strip().lower() if name is not None else ""
    valid = bool((_GAME_ID if source == "game" else _MODULE_ID).fullmatch(entry_id))
    if not valid or len(entry_id) > MAX_ID_CHARS:
        need = ("a number" if source == "game" else
                "a name starting with a letter (letters, digits, - _ . :)")
        raise ValueError(f"{label}: the id must be {need}, at most {MAX_ID_CHARS} characters")
    text = raw.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{label}: the text is empty")
    text = text.strip()
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"{label}: the text has {len(text)} characters; at most "
                         f"{MAX_TEXT_CHARS}")
    constant = raw.get("constant", False)
    if not isinstance(constant, bool):
        raise ValueError(f"{label}: constant must be True or False, not {constant!r}")
    try:
        keys = parse_keys(raw.get("keys") or [])
        condition = parse_condition(raw.get("condition"))
        priority = parse_priority(raw.get("priority"))
    except ValueError as err:
        raise ValueError(f"{label}: {err}") from None
    if constant and keys:
        raise ValueError(f"{label}: a constant entry has no keys (it is always given)")
    if not constant and not keys:
        raise ValueError(f"{label}: give keys (words that bring it up) or make it constant")
    return {"id": entry_id, "text": text, "keys": keys, "constant": constant,
            "condition": condition, "priority": priority, "source": source,
            "by": None if raw.get("by") is None else str(raw["by"]),
            "at": None if raw.get("at") is None else str(raw["at"])}


class LoreIndex:
    """
    Entries indexed for :func:`match_lore`: partitioned by condition clause, and within a
    partition by the first word of each key.

    ``partitions``: ``{clause: {"constant": [entry, ...], "first": {word: [(entry, key,
    key_words), ...]}}}``. An entry with several clauses is in several partitions (it is
    chosen once). ``entries``: ``{id: entry}``, for checking a note shown earlier against
    the store (:func:`withdrawn_reason`). Building is O(entries x clauses x keys); it is done
    when entries change, never per turn.
    """

    def __init__(self, entries=()):
        self.partitions = {}
        self.entries = {}
        self.size = 0
        for entry in entries:
            self.add(entry)

    def add(self, entry) -> None:
        """Index one entry (as :func:`parse_entry` returns it)."""
        self.size += 1
        self.entries[entry["id"]] = entry
        for clause in entry["condition"]:
            part = self.partitions.setdefault(clause, {"constant": [], "first": {}})
            if entry["constant"]:
                part["constant"].append(entry)
                continue
            for key in entry["keys"]:
                key_words = tuple(key.split())
                part["first"].setdefault(key_words[0], []).append((entry, key, key_words))


def build_index(entries) -> LoreIndex:
    """
    Index parsed entries (:func:`parse_entry`).

    Returns:
        LoreIndex
    """
    return LoreIndex(entries)


def _norm(value):
    """``value`` as a condition compares it: lower case, inner spaces single."""
    return " ".join(str(value).split()).lower()


def npc_scopes(npc_facts) -> set[str]:
    """
    The condition clauses that hold for an NPC.

    Args:
        npc_facts (dict): ``{"name": str, "dbref": str ("#12"), "tags": [(tag, category |
            None), ...], "location": str | None (room key), "location_dbref": str | None,
            "zones": [str, ...]}``; missing fields count as empty.

    Returns:
        set[str]: clauses in the form :func:`parse_clause` gives, ``"all"`` always among them.
    """
    facts = npc_facts or {}
    scopes = {ALL}
    for field in ("name", "dbref"):
        if facts.get(field):
            scopes.add(f"npc:{_norm(facts[field])}")
    for field in ("location", "location_dbref"):
        if facts.get(field):
            scopes.add(f"location:{_norm(facts[field])}")
    for zone in facts.get("zones") or ():
        scopes.add(f"zone:{_norm(zone)}")
    for tag, category in facts.get("tags") or ():
        tag = _norm(tag)
        if category:
            category = _norm(category)
            if category not in RESERVED_KINDS:
                scopes.add(f"{category}:{tag}")
        else:
            scopes.add(f"tag:{tag}")
    return scopes


def may_know(entry, npc_facts) -> bool:
    """True if one clause of ``entry``'s condition holds for the NPC (:func:`npc_scopes`)."""
    scopes = npc_scopes(npc_facts)
    return any(clause in scopes for clause in entry["condition"])


def withdrawn_reason(index, scopes, entry_id, shown, key) -> str | None:
    """
    Why a keyed entry shown earlier in an NPC's prompt (a world note, ``docs/design.md``, "The
    NPC's world") must leave it now, or None while the store still gives it to that NPC.

    Args:
        index (LoreIndex): the store's index now (:func:`build_index`).
        scopes (set[str]): the clauses that hold for the NPC now (:func:`npc_scopes`): an NPC
            that walked out of a ``location:`` or ``zone:`` clause no longer has it.
        entry_id (str): the entry the note shows.
        shown (str): what the note shows (:func:`format_lore` of the entry as it was then).
        key (str | None): the key that triggered the note.

    Returns:
        str | None: ``"deleted"`` (no such entry), ``"edited"`` (its text, its keys or its
        constancy changed: the note says something the store no longer does), ``"condition"``
        (no clause of its condition holds for the NPC), or None. O(clauses + keys).
    """
    entry = index.entries.get(entry_id)
    if entry is None:
        return "deleted"
    if format_lore([entry]) != shown or entry["constant"] or (key is not None
                                                              and key not in entry["keys"]):
        return "edited"
    if not any(clause in scopes for clause in entry["condition"]):
        return "condition"
    return None


def _found(text_words, start, key_words):
    """True if ``key_words`` occur in ``text_words`` from position ``start``."""
    return tuple(text_words[start:start + len(key_words)]) == key_words


def match_lore(index, npc_facts, texts, budget_tokens, count) -> LoreMatch:
    """
    The lore entries an NPC is given for a turn, within a token budget (``docs/design.md``,
    "Lore and pins").

    Candidates are the constant entries and the entries one of whose keys occurs as whole words
    in ``texts`` (module docstring), taken only from the index partitions of the clauses that
    hold for the NPC: an entry whose condition excludes the NPC is never a candidate.

    Ranking: higher ``priority`` first; at equal priority constant entries, then the entry whose
    key occurs earliest (in the first text, then the next; within a text, by word position),
    then by id. In that order each candidate is chosen if its tokens fit what is left of the
    budget, else skipped with reason ``"budget"`` (a later, smaller one may still fit).

    Cost: O(W x S + C + K), where W is the number of words in ``texts``, S the number of
    clauses that hold for the NPC (a handful: all, its name, dbref, room, zones, tags), C the
    entries in those partitions that are constant or whose key starts with one of those words,
    and K the words of their keys compared; the total number of entries does not enter.
    Tokens are counted for candidates only.

    Args:
        index (LoreIndex): from :func:`build_index`.
        npc_facts (dict): the NPC's facts (:func:`npc_scopes`).
        texts (list[str]): the texts scanned for keys, most important first (the turn's lines,
            then the last few lines before them, newest first).
        budget_tokens (int): tokens the chosen entries' texts may take together.
        count (callable): ``str -> int``, tokens of a text.

    Returns:
        LoreMatch
    """
    partitions = [index.partitions[s] for s in npc_scopes(npc_facts) if s in index.partitions]
    best = {}  # id -> (rank, entry, key)
    for part in partitions:
        for entry in part["constant"]:
            best[entry["id"]] = ((-entry["priority"], 0, 0, 0, entry["id"]), entry, None)
    for t, text in enumerate(texts or ()):
        text_words = words(text)
        for position, word in enumerate(text_words):
            for part in partitions:
                for entry, key, key_words in part["first"].get(word, ()):
                    rank = (-entry["priority"], 1, t, position, entry["id"])
                    known = best.get(entry["id"])
                    if known is not None and known[0] <= rank:
                        continue
                    if len(key_words) == 1 or _found(text_words, position, key_words):
                        best[entry["id"]] = (rank, entry, key)
    chosen, skipped = [], []
    left = max(0, int(budget_tokens or 0))
    for _rank, entry, key in sorted(best.values(), key=lambda item: item[0]):
        tokens = int(count(entry["text"]))
        item = {"id": entry["id"], "text": entry["text"], "tokens": tokens, "key": key,
                "constant": entry["constant"], "priority": entry["priority"]}
        if tokens <= left:
            left -= tokens
            chosen.append(item)
        else:
            skipped.append({"id": entry["id"], "reason": BUDGET, "tokens": tokens, "key": key,
                            "constant": entry["constant"], "priority": entry["priority"]})
    return {"chosen": chosen, "skipped": skipped}


def format_lore(chosen) -> str:
    """
    The chosen entries as one block of text for the prompt: one entry per line, in the order
    given, under a ``WHAT YOU KNOW`` heading; ``""`` when nothing was chosen.

    Args:
        chosen (list[dict]): ``match_lore(...)["chosen"]``.

    Returns:
        str
    """
    if not chosen:
        return ""
    return LORE_HEADING + "\n" + "\n".join(f"- {item['text']}" for item in chosen)


def key_found(entry, texts) -> str | None:
    """
    The first key of ``entry`` that occurs in ``texts`` as whole words, or None (constant
    entries: None). For admin views that explain what was *not* given; O(words x keys).
    """
    for text in texts or ():
        text_words = words(text)
        for key in entry["keys"]:
            key_words = tuple(key.split())
            if any(_found(text_words, i, key_words) for i, w in enumerate(text_words)
                   if w == key_words[0]):
                return key
    return None
