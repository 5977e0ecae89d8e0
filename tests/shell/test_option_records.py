"""
Each option is one record (``ai_contrib.settings.OPTIONS``): ``DEFAULTS`` and the option table of
``docs/configuration.md`` are made from the records, and ``aiconfig`` lists, parses and refuses
options by them.
"""

from dataclasses import replace

import pytest
from django.test import override_settings

from ai_contrib import settings as ai_settings
from ai_contrib.admin.admin_commands import CmdAIConfig
from ai_contrib.core.compaction import STRATEGIES
from ai_contrib.settings import (
    DEFAULTS,
    MARKDOWN_END,
    MARKDOWN_START,
    OPTIONS,
    TYPES,
    Option,
    markdown_table,
    option_record,
    replace_markdown_table,
)

from tests.support.npc_fixtures import NPCTestCase
from tests.support.paths import ROOT

DOC = ROOT / "docs" / "configuration.md"
REGENERATE = "python -m ai_contrib.settings"


class TestRecords:
    def test_defaults_are_derived_from_the_records_in_order(self):
        assert list(DEFAULTS) == [option.name for option in OPTIONS]
        assert all(DEFAULTS[option.name] is option.default for option in OPTIONS)
        assert len({option.name for option in OPTIONS}) == len(OPTIONS)

    def test_every_record_holds_together(self):
        for option in OPTIONS:
            assert option.type in TYPES, option.name
            assert option.accepts(option.default), option.name
            assert option.doc and "\n" not in option.doc, option.name
            assert option.group, option.name
            assert option.setting == f"AI_{option.name}"
            assert option.attribute == option.name.lower()
            if option.choices:
                assert all(choice == choice.lower() for choice in option.choices), option.name

    def test_the_strategy_choices_are_the_strategies(self):
        assert option_record("compact_strategy").choices == STRATEGIES

    def test_numbers_have_a_lower_bound_and_none_is_said(self):
        record = option_record("MEMORY_NOTE_SECONDS")
        assert (record.type, record.unit, record.minimum, record.per_npc) == (
            "float", "seconds", 0, True)
        assert record.accepts(None) and record.none == "no limit"
        assert not option_record("MAX_CONTEXT_TOKENS").accepts(None)
        assert not option_record("MAX_CONTEXT_TOKENS").accepts(0)
        assert not option_record("COMPACT_SLEEP_THRESHOLD").accepts(0)
        assert option_record("COMPACT_SLEEP_THRESHOLD").accepts(1)
        assert not option_record("COMPACT_ENABLED").accepts(1)
        assert option_record("EMBEDDED_FLASH_ATTENTION").accepts("auto")

    def test_a_record_that_contradicts_itself_is_refused(self):
        with pytest.raises(ValueError, match="default"):
            Option("X", -1, "int", "A count.")
        with pytest.raises(ValueError, match="type"):
            Option("X", 1, "integer", "A count.")
        with pytest.raises(ValueError, match="choices"):
            Option("X", 1, "int", "A count.", choices=("1",))
        with pytest.raises(ValueError, match="upper case"):
            Option("AI_X", 1, "int", "A count.")

    def test_unknown_names_raise_naming_the_option(self):
        with pytest.raises(KeyError, match="compact_sleep_treshold"):
            option_record("compact_sleep_treshold")


class TestTheDocsTable:
    def test_the_docs_table_is_the_records(self):
        text = DOC.read_text(encoding="utf-8")
        assert text.count(MARKDOWN_START) == 1 and text.count(MARKDOWN_END) == 1
        assert markdown_table() in text
        assert replace_markdown_table(text) == text, (
            f"docs/configuration.md's option table differs from the records: run {REGENERATE}")

    def test_a_changed_record_or_a_hand_edit_is_caught(self):
        # positive controls of the test above: both make the comparison fail
        text = DOC.read_text(encoding="utf-8")
        altered = tuple(replace(o, default=4321) if o.name == "MAX_CONTEXT_TOKENS" else o
                        for o in OPTIONS)
        assert markdown_table(altered) != markdown_table()
        assert replace_markdown_table(text, altered) != text
        row = "| `AI_MAX_CONTEXT_TOKENS` | `100000` |"
        assert row in text
        edited = text.replace(row, "| `AI_MAX_CONTEXT_TOKENS` | `100001` |")
        assert replace_markdown_table(edited) != edited
        assert replace_markdown_table(edited) == text  # regenerating repairs it

    def test_one_row_per_record_with_type_unit_and_attribute(self):
        table = markdown_table()
        rows = [line for line in table.splitlines() if line.startswith("| `AI_")]
        assert len(rows) == len(OPTIONS)
        assert ("| `AI_COMPACT_SLEEP_THRESHOLD` | `0.7` | fraction | fraction of the token "
                "budget | `compact_sleep_threshold` |") in table
        assert "| `AI_LLM_API_KEY` | `None` | str or None |  |  |" in table
        assert "\\<game dir>" in table  # not an HTML tag

    def test_the_markers_are_required(self):
        with pytest.raises(ValueError, match="options:start"):
            replace_markdown_table("# no table here\n")
        with pytest.raises(ValueError):
            replace_markdown_table(f"{MARKDOWN_END}\n{MARKDOWN_START}\n")


def _rows(out):
    """``{option: [cells...]}`` of the table ``aiconfig`` printed (continuation lines skipped)."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0]:
                rows[cells[0]] = cells[1:]
    return rows


class TestAIConfigFromRecords(NPCTestCase):
    def test_lists_every_per_npc_option_with_its_unit(self):
        with override_settings(AI_CONVERSATION_WINDOW=90):
            out = self.call(CmdAIConfig(), "Marta")
        rows = _rows(out)
        assert set(rows) - {"option"} == {o.attribute for o in ai_settings.PER_NPC}
        assert rows["conversation_window"] == ["90", "game"]
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("| conversation_window"))
        assert "seconds" in lines[at + 1]  # the unit, under the value
        assert "tokens" in lines[next(i for i, line in enumerate(lines)
                                      if line.startswith("| max_context_tokens")) + 1]
        assert "Not read" not in out
        assert all(len(line) <= 80 for line in lines), out

    def test_a_game_wide_option_is_refused_and_named(self):
        self.call(CmdAIConfig(), "Marta/gossip_max_hops=5",
                  "Unknown option 'gossip_max_hops' per NPC: it is game-wide. Set "
                  "AI_GOSSIP_MAX_HOPS in the game's server/conf/settings.py instead.")
        assert not self.script.attributes.has("gossip_max_hops")
        self.call(CmdAIConfig(), "Marta/gossip_max_hops=",
                  "Unknown option 'gossip_max_hops' per NPC: it is game-wide.")

    def test_an_ignored_attribute_is_shown_and_can_be_removed(self):
        self.script.db.gossip_max_hops = 9
        out = self.call(CmdAIConfig(), "Marta")
        assert "gossip_max_hops: set AI_GOSSIP_MAX_HOPS instead" in out
        self.call(CmdAIConfig(), "Marta/gossip_max_hops=",
                  "Marta: removed its gossip_max_hops Attribute, which was never read")
        assert not self.script.attributes.has("gossip_max_hops")

    def test_an_unknown_name_keeps_its_error(self):
        self.call(CmdAIConfig(), "Marta/no_such_option=3", "Unknown option 'no_such_option'. "
                  "Options: llm_model, max_context_tokens")
