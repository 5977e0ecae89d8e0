"""
The admin and player commands through Evennia's command test harness: output, usage errors,
locks.
"""

from unittest import mock

from ai_contrib.admin.history_command import BAR_WIDTH, RAW_PAGE_SIZE, usage_bar
from ai_contrib.commands import (
    AIContribCmdSet,
    CmdAIHistory,
    CmdAISleep,
    CmdAIWake,
    CmdCompact,
    CmdTalk,
)

from ai_contrib.memory.journal import add_entry, ensure_journal

from tests.support.llm_double import reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_until

SUMMARY = "Who I Spoke With: Bob.\nConfirmed Facts: Bob rented the east room."


class TestLocks(NPCTestCase):
    def test_admin_commands_need_builder_and_talk_is_for_everyone(self):
        self.char2.account.permissions.remove("Developer")
        self.char2.account.permissions.add("Player")
        for cmd in (CmdAIHistory(), CmdCompact(), CmdAISleep(), CmdAIWake()):
            self.assertFalse(cmd.access(self.char2, "cmd"), cmd.key)
            self.assertTrue(cmd.access(self.char1, "cmd"), cmd.key)  # char1 is a Developer
        self.assertTrue(CmdTalk().access(self.char2, "cmd"))

    def test_cmdset_holds_the_commands(self):
        cmdset = AIContribCmdSet()
        cmdset.at_cmdset_creation()
        keys = {cmd.key for cmd in cmdset.commands}
        self.assertTrue({"talk", "aihistory", "compact", "aisleep", "aiwake", "aimemory"} <= keys)


class TestAIHistory(NPCTestCase):
    def test_overview_shows_budget_usage_messages_and_mode(self):
        self.fill(10)
        self.script.db.max_context_tokens = 1000
        tokens = self.script.token_count()
        out = self.call(CmdAIHistory(), "Marta")
        self.assertIn("AI history of Marta", out)
        self.assertIn(f"{tokens} / 1000 ({tokens / 1000:.1%})", out)
        self.assertIn("10 in context (0 summaries)", out)
        self.assertIn("awake", out)
        self.assertIn("never", out)

    def test_overview_measures_usage_against_the_model_window_and_shows_failures(self):
        from django.test import override_settings

        self.fill(10)
        self.script.db.max_context_tokens = 100_000
        with override_settings(AI_LLM_CONTEXT_WINDOW=2048):
            budget = self.script.budget()
            self.assertLess(budget, 2048)
            out = self.call(CmdAIHistory(), "Marta")
        tokens = self.script.token_count()
        self.assertIn(f"{tokens} / {budget} ", out)
        self.assertIn("model context window 2048 (AI_LLM_CONTEXT_WINDOW)", out)
        self.assertNotIn("Replies", out)
        self.script.db.reply_failures = 2
        self.script.db.last_reply_error = "HTTP 400: too long"
        out = self.call(CmdAIHistory(), "Marta")
        self.assertIn("2 failed in a row", out)
        self.assertIn("HTTP 400: too long", out)

    def test_usage_bar_is_green_then_yellow_then_red_at_the_compaction_thresholds(self):
        sleep_at = float(self.script.cfg("compact_sleep_threshold"))
        emergency_at = float(self.script.cfg("compact_emergency_threshold"))
        self.assertIn("|g", usage_bar(self.script, sleep_at - 0.01))
        self.assertIn("|y", usage_bar(self.script, sleep_at))
        self.assertIn("|y", usage_bar(self.script, emergency_at - 0.01))
        self.assertIn("|r", usage_bar(self.script, emergency_at))
        self.assertEqual(usage_bar(self.script, 0.5).count("#"), BAR_WIDTH // 2)
        over = usage_bar(self.script, 1.6)  # an overflowing history fills the bar, no more
        self.assertEqual(over, f"[|r{'#' * BAR_WIDTH}|n]")

    def test_raw_pages_through_the_archive(self):
        added = self.fill(30)
        out = self.call(CmdAIHistory(), "Marta/raw 0 4")
        self.assertIn("Archive of Marta", out)
        self.assertIn("line 0 ", out)
        self.assertIn("line 4 ", out)
        self.assertNotIn("line 5 ", out)
        same = self.call(CmdAIHistory(), "/raw Marta 0 4")
        self.assertEqual(out, same)
        self.assertEqual(added[0]["seq"], 0)

    def test_raw_without_bounds_ends_at_the_newest_record(self):

        added = self.fill(4 * RAW_PAGE_SIZE + 3)
        out = self.call(CmdAIHistory(), "Marta/raw")
        last = added[-1]["seq"]
        self.assertIn(f"seq {last - RAW_PAGE_SIZE + 1}..{last} of 0..{last}", out)

    def test_usage_errors(self):
        self.call(CmdAIHistory(), "", "Usage: aihistory")
        self.call(CmdAIHistory(), "Nobody", "Could not find 'Nobody'")
        self.call(CmdAIHistory(), "Marta/raw x", "Usage: aihistory <npc>/raw")


FORGED = "|/|w[MudInfo] Fake alert: the server reboots now|n |lcquit|ltclick|le"


def forged_lines(out):
    """Lines of ``out`` that a stored ``|/`` turned into a forged channel line."""
    return [line for line in out.splitlines() if line.lstrip().startswith("[MudInfo]")]


class TestStoredTextIsInertOnAdminScreens(NPCTestCase):
    """
    Text stored before player lines were normalised (a restored backup), or written by a model,
    may hold Evennia markup; no admin view may turn it into markup.
    """

    def setUp(self):
        super().setUp()
        self.script.add_message("user", f"hi {FORGED}", name="Wren", metadata={"speaker": "#9"})
        self.script.add_message("assistant", f"Aye. {FORGED}", name="Marta")
        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, f"Wren said {FORGED}", speaker=f"Wren{FORGED}")
        self.npc.db.journal = journal
        self.script.db.compact_failures = 1
        self.script.db.compact_last_error = f"bad summary {FORGED}"
        self.script.db.reply_failures = 2
        self.script.db.last_reply_error = f"server said {FORGED}"

    def check(self, out):
        self.assertFalse(forged_lines(out), out)
        self.assertIn("\u00a6/\u00a6w[MudInfo]", out)
        self.assertNotIn("click", out.replace("\u00a6lcquit\u00a6ltclick\u00a6le", ""))

    def test_raw_archive_journal_and_overview(self):
        self.check(self.call(CmdAIHistory(), "Marta/raw 0 5"))
        self.check(self.call(CmdAIHistory(), "Marta/journal"))
        self.check(self.call(CmdAIHistory(), "Marta"))


class TestCompactCommand(NPCTestCase):
    def run_compact(self, args):
        with mock.patch.object(self.char1, "msg") as msg:
            immediate = self.call(CmdCompact(), args)  # a skip is reported at once
            wait_until(lambda: any(word in immediate + " ".join(map(str, msg.call_args_list))
                                   for word in ("Compacted", "skipped", "failed")))
        return immediate + " ".join(str(c) for c in msg.call_args_list)

    def test_reports_messages_tokens_and_reduction(self):
        self.fill(50)
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(reply("ok"))  # the fact extraction before it: nothing to journal
        self.llm.enqueue(reply(SUMMARY))
        out = self.run_compact("Marta")
        self.assertRegex(out, r"Compacted Marta: \d+ messages -> summary, \d+ -> \d+ tokens "
                              r"\(\d+\.\d% reduction\)")

    def test_below_threshold_is_skipped_and_force_runs(self):
        self.fill(50)
        self.script.db.max_context_tokens = 10000
        out = self.run_compact("Marta")
        self.assertIn("skipped: below threshold", out)
        self.assertEqual(self.llm.requests, [])  # nothing extracted for a skipped compaction
        self.llm.enqueue(reply("ok"))  # the fact extraction before it: nothing to journal
        self.llm.enqueue(reply(SUMMARY))
        out = self.run_compact("/force Marta")
        self.assertIn("Compacted Marta", out)

    def test_force_journals_the_facts_of_what_it_replaces_first(self):
        from tests.support.llm_double import request_kind, tool_calls

        added = self.fill(50)
        self.script.db.max_context_tokens = 10000  # far below the threshold: /force alone runs
        fact = "Bob rented the east room for 2 silver."
        self.llm.enqueue(tool_calls([("add_journal_entry", {"content": fact, "importance": 6})]))
        self.llm.enqueue(reply("ok"))  # no tool call: the extraction stops
        self.llm.enqueue(reply(SUMMARY))
        self.assertEqual(self.npc.db.journal["entries"], [])
        out = self.run_compact("/force Marta")
        self.assertIn("Compacted Marta", out)
        kinds = [request_kind(body) for body in self.llm.requests]
        self.assertEqual(kinds[-1], "summary")
        self.assertIn("extraction", kinds[:-1])  # the extraction came first
        self.assertIn(fact, [e["content"] for e in self.npc.db.journal["entries"]])
        # it read what the compaction replaced: the oldest lines, not the preserve window's
        read = " ".join(str(m.get("content")) for m in self.llm.requests[0]["messages"])
        self.assertIn(added[0]["content"], read)
        self.assertNotIn(added[-1]["content"], read)

    def test_usage(self):
        self.call(CmdCompact(), "", "Usage: compact")


class TestSleepWakeCommands(NPCTestCase):
    def test_sleep_and_wake(self):
        out = self.call(CmdAISleep(), "Marta")
        # the admin stands in the room: its line is the confirmation (no second one)
        self.assertIn("Marta dozes off.", out)
        self.assertNotIn("Marta falls asleep.", out)
        self.assertEqual(self.script.db.operating_mode, "sleep")
        self.call(CmdAISleep(), "Marta", "Marta is already asleep.")
        self.assertIn("Marta wakes up.", self.call(CmdAIWake(), "Marta"))
        self.assertEqual(self.script.db.operating_mode, "awake")
        self.call(CmdAIWake(), "Marta", "Marta is already awake.")
        self.call(CmdAISleep(), "", "Usage: aisleep <npc>")
