"""
The options ``aiconfig`` shows and sets (``ai_contrib/npc_config.py``) against the options the
code reads per NPC: every option read through ``script.cfg(...)``, ``option_value(..., script)``
or the NPC's retrieval options is one an admin can see and set, so none is read per NPC behind
the admin's back.
"""

import re
from pathlib import Path

import pytest

from ai_contrib.memory.retrieval import RETRIEVAL_OPTIONS
from ai_contrib.npc_config import PER_NPC_OPTIONS, parse_value
from ai_contrib.settings import DEFAULTS

SOURCE = Path(__file__).resolve().parent.parent / "ai_contrib"
_READ_PER_NPC = (
    re.compile(r"\bcfg\(\s*[\"']([a-z_]+)[\"']"),
    re.compile(r"\boption_value\(\s*[\"']([A-Z_]+)[\"']\s*,\s*(?!None)\w"),
)


def options_read_per_npc():
    found = set()
    for path in SOURCE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for pattern in _READ_PER_NPC:
            found |= {name.lower() for name in pattern.findall(text)}
    return found | {name.lower() for name in RETRIEVAL_OPTIONS.values()}


def test_every_option_read_per_npc_can_be_shown_and_set():
    read = options_read_per_npc()
    assert {"answer_when", "memory_rrf_k", "compact_enabled"} <= read  # the scan finds them
    assert sorted(read - set(PER_NPC_OPTIONS)) == []
    assert all(name.upper() in DEFAULTS for name in PER_NPC_OPTIONS)


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
