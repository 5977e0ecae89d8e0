"""
An NPC's effective configuration, where each value comes from, and typed per-NPC changes
(the ``aiconfig`` command).

Resolution order (:func:`ai_contrib.settings.resolve_option`, which
:meth:`ai_contrib.typeclasses.AssistantScript.cfg` uses; ``docs/design.md``, "Per-NPC
Attributes"): the script's Attribute when it is set and not None, else the game's ``AI_<NAME>``
setting, else the contrib's default.

Everything here comes from the option records (:data:`ai_contrib.settings.OPTIONS`): which
options are per NPC (``per_npc``), their types, units, bounds and choices. There is no list of
options of its own.
"""

import math

from ..settings import (
    AUTO_OR_BOOL,
    BOOL,
    DEFAULT_SOURCE,
    FLOAT,
    FRACTION,
    INT,
    NPC_SOURCE,
    OPTIONS,
    PER_NPC,
    TEXT,
    Option,
    get_setting,
    option_record,
    resolve_option,
)

#: The options ``aiconfig`` shows and sets, lower case, in table order: exactly those the code
#: reads per NPC (the records with ``per_npc=True``).
PER_NPC_OPTIONS = tuple(option.attribute for option in PER_NPC)
#: The other options, lower case: game-wide only (``AI_<NAME>``); an Attribute of their name on
#: an NPC is not read, and ``aiconfig`` refuses to set one.
GAME_WIDE_OPTIONS = tuple(option.attribute for option in OPTIONS if not option.per_npc)

#: ``source`` labels of :func:`effective_config`: the NPC's own value, one equal to the game's,
#: the game's ``AI_<NAME>`` setting, the record's default.
SOURCE_NPC, SOURCE_NPC_SAME, SOURCE_GAME, SOURCE_DEFAULT = (
    NPC_SOURCE, "NPC (= game)", "game", DEFAULT_SOURCE)

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")

#: per-NPC list options ``aiconfig`` does not set, and the command that does
LIST_COMMANDS = {"actions": "aiactions"}


def option_type(name) -> str:
    """
    The type option ``name`` takes: its record's :attr:`~ai_contrib.settings.Option.type`, one
    of :data:`ai_contrib.settings.TYPES` (``"int"``, ``"fraction"``, ``"str"``...).

    Raises:
        KeyError: ``name`` is not an option.
    """
    return option_record(name).type


def per_npc_record(name) -> Option:
    """
    The record of a per-NPC option, for ``aiconfig``.

    Args:
        name (str): an option name as the admin typed it (any case).

    Returns:
        Option: the record (:class:`ai_contrib.settings.Option`); its ``per_npc`` is True.

    Raises:
        ValueError: fit for the admin's screen. An unknown name: ``"Unknown option 'x'.
            Options: ..."`` (the per-NPC ones). A game-wide option: the message starts the same
            way, says the option is game-wide and names the ``AI_<NAME>`` setting to use
            instead.
    """
    key = str(name).strip().lower()
    if key not in PER_NPC_OPTIONS:
        if key in GAME_WIDE_OPTIONS:
            setting = option_record(key).setting
            raise ValueError(f"Unknown option '{key}' per NPC: it is game-wide. Set {setting} "
                             "in the game's server/conf/settings.py instead.")
        raise ValueError(f"Unknown option '{name}'. Options: {', '.join(PER_NPC_OPTIONS)}.")
    return option_record(key)


def _check_bounds(option, value, raw):
    """``value`` (a number) if it is within ``option``'s bounds, else ValueError."""
    name = option.attribute
    if option.type == FRACTION:
        if not 0 < value <= 1:
            raise ValueError(f"{name} is a {option.unit or 'fraction'}: above 0, at most 1 "
                             f"(got '{raw}').")
        return value
    if option.minimum is not None and value < option.minimum:
        if option.minimum == 0:
            raise ValueError(f"{name} must not be negative (got '{raw}').")
        raise ValueError(f"{name} must be at least {option.minimum} (got {value}).")
    if option.maximum is not None and value > option.maximum:
        raise ValueError(f"{name} must be at most {option.maximum} (got {value}).")
    return value


def parse_value(name, text) -> bool | int | float | str:
    """
    ``text`` as a value of per-NPC option ``name``, checked against its record's type, bounds
    and choices.

    Args:
        name (str): a lower-case option name from :data:`PER_NPC_OPTIONS`.
        text (str): what the admin typed (``yes``/``no``/``on``/``off``/``true``/``false``
            for switches; a number may be written ``0.7`` or ``70%``; a choice in any case).

    Returns:
        bool | int | float | str: of the option's type (``"fraction"`` and ``"float"``: float;
        ``'"auto" or bool'``: ``"auto"`` or a bool; choices in lower case).

    Raises:
        ValueError: unknown or game-wide option (:func:`per_npc_record`), wrong type, out of
            range or not one of the choices; the message says what is expected, fit for the
            admin's screen.
    """
    option = per_npc_record(name)
    name, kind, raw = option.attribute, option.type, text.strip()
    if kind in (BOOL, AUTO_OR_BOOL):
        word = raw.lower()
        if kind == AUTO_OR_BOOL and word == "auto":
            return "auto"
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        also = " or auto" if kind == AUTO_OR_BOOL else ""
        raise ValueError(f"{name} is a switch: give yes or no{also} (got '{raw}').")
    if kind == INT:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{name} takes a whole number (got '{raw}').") from None
        return _check_bounds(option, value, raw)
    if kind in (FLOAT, FRACTION):
        try:
            value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
        except ValueError:
            raise ValueError(f"{name} takes a number (got '{raw}').") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} takes a number (got '{raw}').")
        return _check_bounds(option, value, raw)
    if kind != TEXT:  # lists and dicts: their own command, or the game's setting
        where = LIST_COMMANDS.get(name)
        raise ValueError(f"{name} cannot be set here: " + (
            f"use {where} <npc> = ..." if where else
            f"set {option.setting} in the game's settings."))
    if option.choices:
        value = raw.lower()
        if value not in option.choices:
            raise ValueError(f"{name} is one of: {', '.join(option.choices)} (got '{raw}').")
        return value
    if not raw:
        raise ValueError(f"{name} needs a value.")
    return raw


def effective_config(script) -> list[tuple[Option, object, str]]:
    """
    Every per-NPC option of one NPC as it is read now, for ``aiconfig``.

    Args:
        script: the NPC's ``AssistantScript``.

    Returns:
        list[tuple[Option, object, str]]: ``(record, value, source)`` in table order;
        ``source`` is :data:`SOURCE_NPC` (``"NPC"``, the script's Attribute),
        :data:`SOURCE_NPC_SAME` (``"NPC (= game)"``, an Attribute equal to the game-wide value
        now, as NPCs made by earlier versions hold), :data:`SOURCE_GAME` (``"game"``, the
        ``AI_<NAME>`` setting) or :data:`SOURCE_DEFAULT` (``"default"``).
    """
    rows = []
    for option in PER_NPC:
        value, source = resolve_option(option.name, script)
        if source == NPC_SOURCE:
            source = SOURCE_NPC_SAME if value == get_setting(option.name) else SOURCE_NPC
        elif source.startswith("AI_"):
            source = SOURCE_GAME
        else:
            source = SOURCE_DEFAULT
        rows.append((option, value, source))
    return rows


def ignored_attributes(script) -> list[Option]:
    """
    The game-wide options that one NPC nevertheless has an Attribute of (set by hand or by an
    older version): never read, so ``aiconfig`` points them out.

    Args:
        script: the NPC's ``AssistantScript``.

    Returns:
        list[Option]: their records, in table order (empty: none).
    """
    return [option for option in OPTIONS
            if not option.per_npc and script.attributes.get(option.attribute) is not None]
