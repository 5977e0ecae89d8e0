"""
The commands on an 80-column client: every admin table fits the caller's width, help texts fit
78 columns, the help category reads as written, usage lines name every form, and ``aisleep`` /
``aiwake`` report once.
"""

import inspect
from unittest import mock

from hypothesis import given, settings, strategies as st
from twisted.internet import defer

from ai_contrib.admin.command_util import column_widths
from ai_contrib.admin.command_util import HELP_CATEGORY
from ai_contrib.commands import AIContribCmdSet, CmdAIHistory, CmdAIMemory
from ai_contrib.commands import CmdAISleep, CmdAIWake, CmdCompact, CmdTalk
from ai_contrib.core.summary import make_marker
from ai_contrib.memory.journal import add_entry, ensure_journal

from tests.support.admin_fixtures import too_wide
from tests.support.npc_fixtures import NPCTestCase

LONG = "the road north is muddy and the bridge at Hollin ford is out " * 4
OWN_COMMANDS = (CmdTalk, CmdAIHistory, CmdCompact, CmdAISleep, CmdAIWake, CmdAIMemory)


class TestTablesFitTheClient(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.session.protocol_flags["SCREENWIDTH"] = {0: 80}
        self.addCleanup(self.session.protocol_flags.pop, "SCREENWIDTH", None)
        for i in range(6):
            self.script.add_message("user", f"{i} {LONG}", name="Bartholomew the Wanderer",
                                    metadata={"speaker": self.char1.dbref})
        marker = make_marker(LONG, self.script.history[:2], 400, 50, first_seq=0, last_seq=1)
        self.script.runtime.messages.insert(0, marker)
        self.script.db.compaction_count = 9
        self.script.db.compaction_log = [
            {"at": "2025-01-01T10:00:00", "trigger": "emergency", "strategy": "cascade",
             "success": True, "compacted_messages": 120, "original_tokens": 123456,
             "new_tokens": 2345, "reduction_pct": 98.1, "fidelity": 0.314,
             "fidelity_replaced": True},
            {"at": "2025-01-01T11:00:00", "trigger": "sleep", "success": False, "error": LONG},
        ]
        self.script.db.compact_failures = 2
        self.script.db.compact_last_error = LONG
        self.script.db.reply_failures = 3
        self.script.db.last_reply_error = LONG
        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, LONG, speaker="Bartholomew the Wanderer")
        add_entry(journal, LONG, source_type="compaction")
        self.npc.db.journal = journal

    def check(self, out):
        self.assertTrue(out.strip())
        self.assertEqual(too_wide(out), [], out)

    def test_every_admin_table_fits_80_columns(self):
        overview = self.call(CmdAIHistory(), "Marta")
        self.check(overview)
        # the summary's fidelity, and that an extract replaced the model's summary
        self.assertIn("fidelity", overview)
        self.assertIn("0.31", overview)
        self.assertIn("(extract)", overview)
        self.check(self.call(CmdAIHistory(), "Marta/raw 0 10"))
        self.check(self.call(CmdAIHistory(), "Marta/journal"))
        hits = [{"text": LONG, "score": 0.8123, "metadata": {
            "memory_id": "0123456789abcdef", "source_type": "journal", "visibility": "private"}}]
        store = mock.Mock()
        store.search.return_value = defer.succeed(hits)
        with mock.patch("ai_contrib.memory.mem0_store.get_store", return_value=store):
            self.check(self.call(CmdAIMemory(), "/mem0 Marta the road"))
        found = {"query": "the road", "text": LONG, "results": [
            {"kind": "message", "source": "archive", "ref": "12345", "score": 0.0421,
             "vector_score": None, "bm25_score": 7.5, "text": LONG},
            {"kind": "fact", "source": "mem0", "ref": "0123456789abcdef", "score": 0.0388,
             "vector_score": 0.81, "bm25_score": None, "text": LONG}]}
        with mock.patch("ai_contrib.npc.recall.recall_preview",
                        return_value=defer.succeed(found)):
            self.check(self.call(CmdAIMemory(), "Marta the road"))

    def test_words_are_not_split_where_the_width_allows(self):
        import re

        journal = self.call(CmdAIHistory(), "Marta/journal")
        self.check(journal)
        header = next(line for line in journal.splitlines() if "| id" in line)
        self.assertIn("importance", header)  # EvTable alone cut it "importanc|e"
        overview = self.call(CmdAIHistory(), "Marta")
        self.check(overview)
        # the event's time: the date and the time each whole (they may wrap between)
        self.assertRegex(overview, r"\| 2025-01-01 (10:00:00 )?")
        self.assertRegex(overview, r"\| (2025-01-01 )?10:00:00 ")
        raw = self.call(CmdAIHistory(), "Marta/raw 0 10")
        self.check(raw)
        cells = [c.strip() for line in raw.splitlines() for c in line.split("|")]
        # every time the archive shows is a whole date and a whole time
        times = [c for c in cells if re.fullmatch(r"[\d:-]+", c) and len(c) > 3]
        self.assertTrue(times, raw)
        self.assertTrue(all(re.fullmatch(r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d", t) for t in times),
                        times)

    def test_a_narrow_client_gets_narrower_tables(self):
        self.session.protocol_flags["SCREENWIDTH"] = {0: 60}
        out = self.call(CmdAIHistory(), "Marta/raw 0 10")
        self.assertEqual(too_wide(out, 60), [], out)


def test_help_texts_fit_78_columns():
    cmdset = AIContribCmdSet()
    cmdset.at_cmdset_creation()
    for cmd in cmdset.commands:
        if not type(cmd).__module__.startswith("ai_contrib."):
            continue
        wide = [line for line in inspect.cleandoc(cmd.__doc__ or "").splitlines() if len(line) > 78]
        assert wide == [], (cmd.key, wide)


def test_the_help_category_survives_evennia_title_casing():
    # Evennia stores help_category lower-cased and lists it with str.title()
    assert HELP_CATEGORY.lower().title() == HELP_CATEGORY
    for cls in OWN_COMMANDS[1:]:
        assert cls.help_category == HELP_CATEGORY.lower(), cls.key


class TestMessagesOnce(NPCTestCase):
    def test_sleep_and_wake_are_reported_once_to_an_admin_in_the_room(self):
        out = self.call(CmdAISleep(), "Marta")
        self.assertEqual(out.count("Marta"), 1, out)
        self.assertIn("Marta dozes off.", out)
        out = self.call(CmdAIWake(), "Marta")
        self.assertEqual(out.count("wakes up"), 1, out)

    def test_an_admin_elsewhere_is_told_too(self):
        self.char1.location = self.room2
        self.assertIn("Marta falls asleep.", self.call(CmdAISleep(), "Marta"))
        self.assertIn("Marta wakes up.", self.call(CmdAIWake(), "Marta"))

    def test_usage_lines_name_every_form(self):
        out = self.call(CmdAIHistory(), "")
        for form in ("/raw", "/journal", "/show"):
            self.assertIn(form, out)
        out = self.call(CmdAIMemory(), "")
        self.assertIn("aimemory <npc> <query>", out)
        self.assertIn("/show", out)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.integers(0, 60)), min_size=1, max_size=8),
       st.integers(8, 200))
def test_column_widths_keep_words_whole_where_they_fit(columns, room):
    words = [w for w, _ in columns]
    natural = [w + extra for w, extra in columns]  # a column's text is at least its word
    widths = column_widths(natural, words, room)
    assert len(widths) == len(columns)
    assert all(w >= 1 for w in widths)
    assert sum(widths) <= max(room, len(columns))
    if sum(words) <= room:
        assert all(w >= word for w, word in zip(widths, words))  # no word split
    if sum(natural) >= room >= len(columns):
        assert sum(widths) == room  # the whole width is used
    assert all(w <= max(n, 1) for w, n in zip(widths, natural))


def test_a_long_text_does_not_starve_the_short_columns():
    # id, importance, source, who ("Wren > Marta (1 hop)"), in Mem0, a long content: the
    # content is long, but the chain still gets room for "Marta (1"
    widths = column_widths([20, 10, 6, 20, 7, 48], [20, 10, 6, 5, 4, 7], 59)
    assert widths[3] >= len("Marta (1"), widths
    assert widths[:3] == [20, 10, 6] and sum(widths) == 59
    # who, two dates beside a long game time, a count, an impression: the dates stay whole
    widths = column_widths([11, 31, 31, 5, 17], [8, 10, 10, 5, 10], 62)
    assert widths[1] >= 16 and widths[2] >= 16 and widths[4] >= 10, widths
    assert sum(widths) == 62
