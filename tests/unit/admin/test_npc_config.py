"""
The options ``aiconfig`` shows and sets (``ai_contrib/admin/npc_config.py``) against the options the
code reads per NPC: every option read through ``script.cfg(...)``, ``option_value(..., script)``
or the NPC's retrieval options is one an admin can see and set, so none is read per NPC behind
the admin's back. Both come from the option records (``ai_contrib.settings.OPTIONS``): the
records marked ``per_npc`` are exactly the options the code reads per NPC.
"""

import re

import pytest

from ai_contrib.memory.retrieval import RETRIEVAL_OPTIONS
from ai_contrib.admin.npc_config import (
    GAME_WIDE_OPTIONS,
    LIST_COMMANDS,
    PER_NPC_OPTIONS,
    option_type,
    parse_value,
    per_npc_record,
)
from ai_contrib.settings import DEFAULTS, OPTIONS, PER_NPC
from ai_contrib.typeclasses import CONFIG_ATTRIBUTES
from tests.support.paths import ROOT

SOURCE = ROOT / "ai_contrib"
_READ_PER_NPC = (
    re.compile(r"\bcfg\(\s*[\"']([a-z_]+)[\"']"),
    re.compile(r"\boption_value\(\s*[\"']([A-Z_]+)[\"']\s*,\s*(?!None)\w"),
    # npc.extraction's helper: _cfg(script, "pre_compact_prompt")
    re.compile(r"\b_cfg\(\s*\w+\s*,\s*[\"']([a-z_]+)[\"']"),
)
#: ``script.cfg(name) for name in ("a", "b", ...)``: the tuple's names are read per NPC
_READ_IN_A_LOOP = re.compile(r"\bcfg\(\s*(\w+)\s*\)\s*for\s+\1\s+in\s*\(([^)]*)\)")
_NAME = re.compile(r"[\"']([a-z_]+)[\"']")


def names_read_per_npc(text):
    """The lower-case option names ``text`` (Python source) reads per NPC."""
    found = set()
    for pattern in _READ_PER_NPC:
        found |= {name.lower() for name in pattern.findall(text)}
    for _, names in _READ_IN_A_LOOP.findall(text):
        found |= set(_NAME.findall(names))
    return found


def options_read_per_npc():
    found = set()
    for path in SOURCE.rglob("*.py"):
        found |= names_read_per_npc(path.read_text(encoding="utf-8"))
    return found | {name.lower() for name in RETRIEVAL_OPTIONS.values()}


def test_every_option_read_per_npc_can_be_shown_and_set():
    read = options_read_per_npc()
    assert {"answer_when", "memory_rrf_k", "compact_enabled"} <= read  # the scan finds them
    assert sorted(read - set(PER_NPC_OPTIONS)) == []
    assert all(name.upper() in DEFAULTS for name in PER_NPC_OPTIONS)


def test_the_per_npc_records_are_exactly_the_options_read_per_npc():
    per_npc = {option.attribute for option in OPTIONS if option.per_npc}
    assert sorted(options_read_per_npc() ^ per_npc) == []
    assert PER_NPC_OPTIONS == tuple(option.attribute for option in PER_NPC)
    assert set(PER_NPC_OPTIONS).isdisjoint(GAME_WIDE_OPTIONS)
    assert len(PER_NPC_OPTIONS) + len(GAME_WIDE_OPTIONS) == len(OPTIONS)
    # the design's documented Attributes are among them
    assert set(CONFIG_ATTRIBUTES) <= per_npc


def test_the_scan_finds_each_way_of_reading_per_npc():
    text = '''
        script.cfg("mask_window")
        option_value("LORE_SCAN_LINES", script)
        option_value("TICK_INTERVAL", None)
        _cfg(script, "pre_compact_prompt", None)
        {name: script.cfg(name)
         for name in ("cascade_recent_window", "compact_preserve_max_fraction")}
    '''
    assert names_read_per_npc(text) == {
        "mask_window", "lore_scan_lines", "pre_compact_prompt", "cascade_recent_window",
        "compact_preserve_max_fraction"}


@pytest.mark.parametrize("name, text, value", [
    ("answer_when", "always", "always"),
    ("conversation_window", "300", 300),
    ("memory_enabled", "no", False),
    ("memory_rrf_k", "20", 20),
    ("memory_retrieval_session_weight", "0.25", 0.25),
])
def test_the_new_options_take_typed_values(name, text, value):
    assert parse_value(name, text) == value


def test_a_bad_choice_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="addressed"):
        parse_value("answer_when", "sometimes")


def _typed(value):
    """``value`` as an admin would type it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


@pytest.mark.parametrize("option", [o for o in PER_NPC if o.default is not None],
                         ids=lambda option: option.attribute)
def test_each_per_npc_default_parses_back_to_itself(option):
    if option.attribute in LIST_COMMANDS:
        # a list is set with its own command, and this one says which
        with pytest.raises(ValueError, match=LIST_COMMANDS[option.attribute]):
            parse_value(option.attribute, _typed(option.default))
        return
    value = parse_value(option.attribute, _typed(option.default))
    assert value == option.default
    assert type(value) is type(option.default)


def test_types_come_from_the_records():
    assert option_type("max_context_tokens") == "int"
    assert option_type("compact_sleep_threshold") == "fraction"
    assert option_type("compact_model") == "str"  # default None: text
    assert parse_value("compact_model", " gpt-4o-mini ") == "gpt-4o-mini"
    assert parse_value("compact_summary_ratio", "30%") == pytest.approx(0.3)


@pytest.mark.parametrize("name, text, message", [
    ("max_context_tokens", "0", "must be at least 1"),
    ("pre_compact_max_iterations", "0", "must be at least 1"),
    ("mask_window", "-1", "must not be negative"),
    ("compact_inflight_cap", "0.5", "must be at least 1.0"),
    ("memory_retrieval_min_relative_score", "1.5", "must be at most 1"),
    ("compact_summary_ratio", "0", "compact_summary_ratio is a fraction of the input tokens"),
    ("cascade_pressure_window", "120%", "is a fraction of the token budget"),
    ("memory_note_seconds", "nan", "takes a number"),
    ("compact_prompt", "  ", "needs a value"),
])
def test_bounds_come_from_the_records(name, text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_value(name, text)


def test_a_game_wide_option_is_refused_naming_its_setting():
    for name in ("llm_api_key", "LLM_BASE_URL", "gossip_max_hops"):
        with pytest.raises(ValueError) as caught:
            parse_value(name, "1")
        message = str(caught.value)
        assert message.startswith(f"Unknown option '{name.lower()}'")
        assert "game-wide" in message
        assert f"AI_{name.upper()}" in message


def test_an_unknown_name_keeps_its_clear_error():
    with pytest.raises(ValueError) as caught:
        per_npc_record("compact_sleep_treshold")
    message = str(caught.value)
    assert message.startswith("Unknown option 'compact_sleep_treshold'. Options: ")
    assert "game-wide" not in message
    assert all(name in message for name in PER_NPC_OPTIONS)
