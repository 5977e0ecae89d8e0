"""
The compaction failure policy, failure by failure, against a real HTTP LLM double on 127.0.0.1.

Every failure of the summary step (HTTP error, connection reset or refused, empty summary, an
unparseable body, a summary no shorter than what it replaces, one saving fewer than
``AI_COMPACT_MIN_SAVING_TOKENS``, a stall cutting < 5 % of the tokens) must leave the NPC's
history exactly as it was -- message ids and contents, token count, journal, checkpoint and
archive -- log a warning and return ``{"success": False, "error": ...}``. A summary the server
does not finish within ``AI_COMPACT_TIMEOUT`` is no failure: the server is slow, not dead, and
an extract of the span replaces it. Three automatic
failures in a row open the circuit breaker (Claude Code's rule), which ``aihistory`` shows with
the last error; an admin's ``compact`` still runs and reports its own error; a success closes
the breaker. And the summary requests themselves fit the summariser's context window
(``AI_COMPACT_SUMMARIZER_CONTEXT``): a long history goes out in several requests, each within
the window, the later ones carrying the summary so far (a running summary, as Letta folds the
previous summary into the next); a server that still says "too long" gets the chunking again
with half the budget (OpenCode's "retry with less input"), once.
"""

import copy
import math
import re
import socket
import threading
from unittest import mock

from django.test import override_settings
from evennia.utils.dbserialize import deserialize

from ai_contrib import rag_memory
from ai_contrib.commands import CmdAIHistory, CmdCompact
from ai_contrib.core.cuts import plan_compaction
from ai_contrib.core.messages import SUMMARY_PREFIX, is_marker
from ai_contrib.core.summary import make_marker
from ai_contrib.core.tokens import (
    PER_MESSAGE_OVERHEAD,
    count_message_tokens,
    count_tokens,
    truncate_to_tokens,
)
from ai_contrib.llm.client import reset_client
from ai_contrib.memory.archive import close_archive
from ai_contrib.npc import compacting
from ai_contrib.settings import get_setting

from tests.support.llm_double import (
    drop,
    hold,
    http_error,
    json_body,
    malformed,
    reply,
)
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for, wait_until

SUMMARY = "Bob asked about rooms; Marta offered the east room for two silver."
LLAMA_OVERFLOW = {
    "error": {
        "code": 400,
        "message": "the request exceeds the available context size, try increasing it",
        "type": "exceed_context_size_error",
    }
}


def _words(n):
    """Text of exactly ``n`` tokens (``"note"`` and ``" note"`` are one token each)."""
    text = "note" + " note" * (n - 1)
    assert count_tokens(text) == n
    return text


def _request_tokens(body):
    """Tokens a request needs: its messages (as the contrib counts them) or its text-completion
    prompt, plus the reply."""
    if "prompt" in body:
        return count_tokens(body["prompt"]) + int(body["max_tokens"])
    return sum(
        count_tokens(m.get("content") or "") + PER_MESSAGE_OVERHEAD for m in body["messages"]
    ) + int(body["max_tokens"])


class Summariser:
    """
    An LLM double's answer for summary requests that behaves like llama.cpp's server: a request
    whose prompt plus ``max_tokens`` exceeds ``context`` tokens gets HTTP 400
    ``exceed_context_size_error``; otherwise it answers ``"Notes <n>: ..."`` of exactly
    ``max_tokens`` tokens (the longest summary a real server may return).
    """

    def __init__(self, context, refuse_first=0):
        self.context = context
        self.refuse_first = refuse_first
        self.answers = []

    def __call__(self, body):
        if self.refuse_first > 0:
            self.refuse_first -= 1
            return http_error(400, LLAMA_OVERFLOW)
        if _request_tokens(body) > self.context:
            return http_error(400, LLAMA_OVERFLOW)
        # as long as max_tokens allows: the worst case for the next request's running summary
        # grounded in the fill()ed lines, so that the fidelity guard keeps it
        text = f"Notes {len(self.answers) + 1}: Bob said line 1 word0 word1." + (
            " Marta said word2 word3 in line 2." * 100
        )
        text = truncate_to_tokens(text, int(body["max_tokens"]))
        self.answers.append(text)
        return text  # a reply: the double shapes it for /chat/completions or /completions


class FaultCase(NPCTestCase):
    """Marta with ``LINES`` lines of history, over the sleep threshold, checkpointed."""

    LINES, WORDS, BUDGET = 50, 20, 1500

    def setUp(self):
        super().setUp()
        self.added = self.fill(self.LINES, words=self.WORDS)
        self.script.db.max_context_tokens = self.BUDGET
        self.script.db.pre_compact_extraction_enabled = False
        # the failure policies are judged on a plan of the message count's preserve window
        # (the cap on its share of the budget is tested in test_core_cuts)
        self.script.db.compact_preserve_max_fraction = 1.0
        self.script.checkpoint()
        self.assertGreaterEqual(
            self.script.token_usage(), self.script.cfg("compact_sleep_threshold")
        )

    # -- helpers -------------------------------------------------------------------------------

    def state(self):
        """Everything a failed compaction must leave as it was."""
        return {
            "history": copy.deepcopy(self.script.history),
            "tokens": self.script.token_count(),
            "journal": deserialize(self.npc.db.journal),
            "checkpoint": deserialize(self.script.db.conversation_history),
            "checkpoint_seq": self.script.db.checkpoint_seq,
            "archive_seq": self.script.archive.last_seq,
            "compaction_count": self.script.db.compaction_count,
            "last_compaction": self.script.db.last_compaction,
        }

    def plan(self):
        """The plan compact_conversation_history makes now: (replaced tokens, total tokens)."""
        history = self.script.history
        plan = plan_compaction(
            history,
            self.script.runtime.token_counts(history),
            max_context_tokens=int(self.script.cfg("max_context_tokens")),
            preserve_window=int(self.script.cfg("compact_preserve_window")),
            preserve_fraction=float(get_setting("COMPACT_PRESERVE_FRACTION")),
        )
        self.assertFalse(plan.skipped)
        return plan.compact_tokens, self.script.token_count()

    def compact(self, trigger="sleep", force=False):
        """Run a compaction; return (result, the warnings logged)."""
        with mock.patch.object(compacting.logger, "log_warn") as warn:
            result = stored(wait_for(
                rag_memory.compact_conversation_history(
                    self.script, self.npc, force=force, trigger=trigger
                )
            ))
        return result, [str(call.args[0]) for call in warn.call_args_list]

    def assert_failed_unchanged(self, behaviours, expected_error, trigger="sleep", requests=1):
        """Queue ``behaviours``, compact, and check the whole failure policy (``requests``:
        how many summary requests the double must have seen)."""
        before = self.state()
        sent = len(self.llm.requests)
        self.llm.enqueue(*behaviours)
        result, warnings = self.compact(trigger=trigger)
        self.assertEqual(len(self.llm.requests) - sent, requests)
        self.assertIs(result.get("success"), False, result)
        self.assertEqual(result["trigger"], trigger)
        self.assertIsInstance(result["error"], str)
        self.assertRegex(result["error"], expected_error)
        self.assertEqual(self.state(), before)
        self.assertTrue(
            any(result["error"] in line and "failed" in line for line in warnings), warnings
        )
        event = self.script.db.compaction_log[-1]
        self.assertEqual((event["success"], event["error"]), (False, result["error"]))
        self.assertEqual(self.script.db.compact_last_error, result["error"])
        return result

    def command(self, cmd, args, until=None):
        """
        Run an admin command as ``self.char1`` and return everything it said; with ``until``
        (a regex), also what it says later (``compact`` answers when the summary is back).
        """
        said = []
        self.char1.msg = lambda text=None, *a, **kw: said.append(
            str(text[0] if isinstance(text, tuple) else text)
        )
        self.addCleanup(self.char1.__dict__.pop, "msg", None)
        # these tests read what the tables say, not how they wrap: a wide client keeps each
        # row on one line (tests/shell/test_command_layout.py checks the 80-column layout)
        cmd.client_width = lambda: 400
        first = self.call(cmd, args)
        if until:
            wait_until(lambda: re.search(until, "\n".join(said)))
            self.assertRegex("\n".join(said), until)
        return first + "\n" + "\n".join(said)


def _transcript(body):
    """The transcript a summary request carries (between its ``<transcript>`` tags)."""
    user = body["messages"][-1]["content"]
    return user.split("<transcript>\n", 1)[1].split("\n</transcript>", 1)[0]


def _flat(text):
    """Text without table borders and whitespace, so a wrapped table cell reads whole."""
    return re.sub(r"[\s|+\-]", "", text)


class TestSummaryNotWrittenInTime(FaultCase):
    def test_a_summary_not_written_in_time_is_replaced_by_an_extract(self):
        # control: a server that fails outright still leaves the history as it was
        self.assert_failed_unchanged([http_error(500)], r"^summary failed: .*HTTP 500")
        _, total = self.plan()
        gate = threading.Event()
        self.addCleanup(gate.set)
        with override_settings(AI_COMPACT_TIMEOUT=0.4):  # a summary gets its own timeout
            wait_for(reset_client())
            # a summary that never comes: the timeout alone ends the wait, and the span's
            # own lines replace it
            self.llm.enqueue(hold(gate, then=reply(SUMMARY)))
            said = self.command(CmdCompact(), "/force Marta",
                                until=r"Compacted Marta|Compaction of Marta failed")
        self.assertRegex(said, r"Compacted Marta: \d+ messages -> summary")
        self.assertIn("the model's summary was not used, the summary was not written in time",
                      said)
        self.assertIn("an extract of the span replaced it", said)
        marker = self.script.history[0]
        self.assertTrue(is_marker(marker))
        self.assertNotIn(SUMMARY, marker["content"])
        self.assertIn(" said: ", marker["content"])
        fidelity = marker["metadata"]["fidelity"]
        self.assertTrue(fidelity["replaced"])
        self.assertRegex(fidelity["model_reason"],
                         r"^the summary was not written in time \(.*within 0.4 s")
        self.assertLess(self.script.token_count(), total)
        event = self.script.db.compaction_log[-1]
        self.assertTrue(event["success"])
        self.assertIn("not written in time", event["fidelity_reason"])
        self.assertIsNone(event["model_fidelity"])


class TestEachFailureLeavesHistoryUnchanged(FaultCase):
    def test_http_error(self):
        self.assert_failed_unchanged([http_error(500)], r"^summary failed: .*HTTP 500")

    def test_http_error_503(self):
        self.assert_failed_unchanged([http_error(503)], r"^summary failed: .*HTTP 503")

    def test_connection_reset(self):
        # the client retries a request whose connection died once; both attempts are dropped
        self.assert_failed_unchanged([drop(), drop()], r"^summary failed: .*connection .* lost",
                                     requests=2)

    def test_connection_refused(self):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        with override_settings(AI_LLM_BASE_URL=f"http://127.0.0.1:{port}/v1"):
            wait_for(reset_client())
            self.assert_failed_unchanged([], r"^summary failed: cannot connect", requests=0)

    def test_empty_summary(self):
        self.assert_failed_unchanged([reply("")], r"^summary failed: .*empty summary")

    def test_summary_that_cleans_to_nothing(self):
        self.assert_failed_unchanged([reply("<think>what to keep?</think>\n[CONTEXT SUMMARY]\n")],
                                     r"^summary failed: .*empty summary")

    def test_malformed_json(self):
        self.assert_failed_unchanged([malformed()], r"^summary failed: .*not JSON")

    def test_no_choices(self):
        self.assert_failed_unchanged([json_body({"object": "chat.completion", "choices": []})],
                                     r"^summary failed: .*no choices")

    def test_summary_longer_than_what_it_replaces(self):
        replaced, _ = self.plan()
        self.assert_failed_unchanged([reply(_words(replaced + 50))],
                                     rf"^summary \(\d+ tokens\) is not shorter than "
                                     rf"the {replaced} tokens")

    def test_summary_saving_less_than_min_saving_tokens(self):
        replaced, _ = self.plan()
        summary_tokens = int(replaced * 0.6)
        saving = replaced - summary_tokens
        with override_settings(AI_COMPACT_MIN_SAVING_TOKENS=saving + 1):
            self.assert_failed_unchanged(
                [reply(_words(summary_tokens))],
                rf"^summary saves only \d+ tokens \(minimum {saving + 1}\)",
            )

    def test_stall_under_five_percent(self):
        replaced, total = self.plan()
        saving = max(2, int(total * 0.025))
        self.assertLess(saving, total * rag_memory.STALL_FRACTION)
        self.assert_failed_unchanged([reply(_words(replaced - saving))],
                                     rf"^stall: the summary would cut only \d+ of {total} ")

    def test_failed_apply_after_range_vanished(self):
        # the summarised range disappears while the summary is pending (evicted): no splice
        gate = threading.Event()
        self.llm.enqueue(hold(gate, then=reply(SUMMARY)))
        d = rag_memory.compact_conversation_history(self.script, self.npc).addCallback(stored)
        # the summary request is out (and held): now the range vanishes
        wait_until(lambda: self.llm.requests)
        self.assertEqual(len(self.llm.requests), 1)
        self.script.runtime.evict([self.added[0]["id"]], reason="test")
        self.script.checkpoint()
        before = self.state()
        gate.set()
        result = wait_for(d)
        self.assertIs(result["success"], False, result)
        self.assertIn("could not apply the compaction", result["error"])
        self.assertEqual(self.state(), before)

    def test_history_still_compacts_after_each_kind_of_failure(self):
        for behaviour in (http_error(500), reply(""), malformed()):
            self.assert_failed_unchanged([behaviour], r".", trigger="manual")
        self.llm.enqueue(reply(SUMMARY))
        result, _ = self.compact(trigger="manual")
        self.assertTrue(result["success"], result)
        self.assertTrue(is_marker(self.script.history[0]))
        self.assertEqual(self.script.db.compact_last_error, None)


class TestTheStoredSummaryIsWhatIsChecked(FaultCase):
    """
    A short history, where the few tokens a marker adds to its summary text (the
    ``[CONTEXT SUMMARY]`` line and the per-message overhead) decide whether it saves anything.
    """

    LINES, WORDS, BUDGET = 4, 2, 45

    def setUp(self):
        super().setUp()
        self.script.db.compact_preserve_window = 1

    def test_marker_costing_more_than_what_it_replaces_is_refused(self):
        replaced, total = self.plan()
        text_tokens = replaced - math.ceil(total * rag_memory.STALL_FRACTION)
        summary = _words(text_tokens)
        marker_tokens = count_message_tokens(
            {"role": "system", "content": f"{SUMMARY_PREFIX}\n{summary}"}
        )
        self.assertGreater(marker_tokens, replaced)  # stored, it would cost more than it saves
        self.assert_failed_unchanged([reply(summary)], r"is not shorter than|stall|saves only")


class TestPerNPCSettings(FaultCase):
    def test_per_npc_min_saving_tokens_also_judges_the_summary(self):
        # the NPC's own Attribute (script.cfg) rules, as it does for the benefit guard
        replaced, _ = self.plan()
        summary_tokens = int(replaced * 0.6)
        saving = replaced - summary_tokens
        self.script.db.compact_min_saving_tokens = saving + 1
        self.assert_failed_unchanged(
            [reply(_words(summary_tokens))],
            rf"^summary saves only \d+ tokens \(minimum {saving + 1}\)",
        )


class TestCircuitBreaker(FaultCase):
    def sleep_tick(self):
        return stored(wait_for(rag_memory.run_sleep_tick(self.script, self.npc)))["context_compaction"]

    def test_opens_after_three_automatic_failures_manual_runs_and_success_closes(self):
        for n in range(1, 4):
            self.llm.enqueue(http_error(503))
            result = self.sleep_tick()
            self.assertIs(result["success"], False, result)
            self.assertEqual(self.script.db.compact_failures, n)
            overview = self.command(CmdAIHistory(), "Marta")
            if n < 3:
                self.assertIn(_flat(f"closed, {n} recent failure(s)"), _flat(overview))
        last_error = self.script.db.compact_last_error
        self.assertIn("HTTP 503", last_error)
        self.assertTrue(rag_memory.breaker_open(self.script))
        overview = self.command(CmdAIHistory(), "Marta")
        self.assertIn(_flat("OPEN: automatic compaction paused"), _flat(overview))
        self.assertIn(_flat(last_error), _flat(overview))

        # open: automatic compaction (sleep and emergency) sends nothing
        sent = len(self.llm.requests)
        result = self.sleep_tick()
        self.assertTrue(result["skipped"])
        self.assertIn("paused after 3 failures", result["reason"])
        self.assertIsNone(wait_for(rag_memory.check_emergency_compaction(self.script, self.npc)))
        self.assertEqual(len(self.llm.requests), sent)

        # open: the admin's compact still runs, and its error reaches the admin
        before = self.state()
        self.llm.enqueue(http_error(500))
        said = self.command(CmdCompact(), "/force Marta", until=r"Compaction of Marta failed")
        self.assertEqual(len(self.llm.requests), sent + 1)
        self.assertRegex(said, r"Compaction of Marta failed: summary failed: .*HTTP 500.*"
                               r"History unchanged\.")
        self.assertEqual(self.state(), before)
        self.assertTrue(rag_memory.breaker_open(self.script))  # manual failures do not count

        # a success closes it
        self.llm.enqueue(reply(SUMMARY))
        said = self.command(CmdCompact(), "/force Marta", until=r"Compacted Marta")
        self.assertRegex(said, r"Compacted Marta: \d+ messages -> summary")
        self.assertFalse(rag_memory.breaker_open(self.script))
        self.assertEqual(self.script.db.compact_failures, 0)
        overview = self.command(CmdAIHistory(), "Marta")
        self.assertRegex(overview, r"Breaker\s*\|\s*closed\s*\|")
        self.assertIn("1 summaries", overview)

    def test_successful_automatic_compaction_resets_the_count(self):
        for _ in range(2):
            self.llm.enqueue(http_error(500))
            self.assertIs(self.sleep_tick()["success"], False)
        self.llm.enqueue(reply(SUMMARY))
        self.assertTrue(self.sleep_tick()["success"])
        self.assertEqual(self.script.db.compact_failures, 0)
        self.fill(60)
        self.llm.enqueue(http_error(500))
        self.assertIs(self.sleep_tick()["success"], False)
        self.assertFalse(rag_memory.breaker_open(self.script))  # 1 failure, not 3


class TestSummaryRequestsFit(FaultCase):
    """A summariser with a small context window: every request must fit it."""

    CONTEXT = 1400
    MAX_OUTPUT = 120

    def setUp(self):
        super().setUp()
        self.fill(150, words=30)
        self.script.db.max_context_tokens = 10000
        override = override_settings(
            AI_COMPACT_SUMMARIZER_CONTEXT=self.CONTEXT,
            AI_COMPACT_SUMMARY_MAX_TOKENS=self.MAX_OUTPUT,
        )
        override.enable()
        self.addCleanup(override.disable)

    def assert_running_summary(self, requests, answers):
        transcripts = []
        for i, body in enumerate(requests):
            self.assertLessEqual(_request_tokens(body), self.CONTEXT, f"request {i}")
            self.assertEqual(body["max_tokens"], self.MAX_OUTPUT)
            user = body["messages"][-1]["content"]
            if i == 0:
                self.assertNotIn("<notes>", user)
            else:
                # the summary so far rides along (a running summary)
                self.assertIn(f"<notes>\n{answers[i - 1]}\n</notes>", user)
            transcripts.append(_transcript(body))
        return transcripts

    def assert_the_window_refuses_the_compaction(self, window):
        """A forced compaction under a summariser context of ``window`` tokens fails, naming the
        setting, and sends no request larger than the window."""
        with override_settings(AI_COMPACT_SUMMARIZER_CONTEXT=window):
            result, _ = self.compact(force=True, trigger="manual")
        for body in self.llm.requests:
            self.assertLessEqual(_request_tokens(body), window)
        self.assertIs(result["success"], False, result)
        self.assertIn("COMPACT_SUMMARIZER_CONTEXT", result["error"])

    def test_long_history_is_summarised_in_chunks_that_fit(self):
        summariser = Summariser(self.CONTEXT)
        self.llm.default = summariser
        history = list(self.script.history)
        result, _ = self.compact(force=True, trigger="manual")
        self.assertTrue(result["success"], result)
        requests = self.llm.requests
        self.assertGreaterEqual(len(requests), 3)
        transcripts = self.assert_running_summary(requests, summariser.answers)
        # every compacted message went out exactly once, in order
        compacted = history[: result["compacted_messages"]]
        lines = "\n".join(transcripts).split("\n")
        self.assertEqual(len(lines), len(compacted))
        for line, msg in zip(lines, compacted, strict=True):
            self.assertIn(msg["content"][:40], line)
        # the marker holds the last answer
        self.assertEqual(self.script.history[0]["content"],
                         "[CONTEXT SUMMARY]\n" + summariser.answers[-1])

    def test_server_saying_too_long_gets_half_the_budget_once(self):
        summariser = Summariser(self.CONTEXT, refuse_first=1)
        self.llm.default = summariser
        result, _ = self.compact(force=True, trigger="manual")
        self.assertTrue(result["success"], result)
        budget = rag_memory.summary_input_budget(
            self.script.cfg("compact_prompt") or rag_memory.DEFAULT_COMPACTION_PROMPT,
            self.MAX_OUTPUT, self.CONTEXT,
        )
        refused, retried = self.llm.requests[0], self.llm.requests[1:]
        transcripts = self.assert_running_summary(retried, summariser.answers)
        self.assertGreater(count_tokens(_transcript(refused)), budget // 2)
        self.assertGreater(len(retried), 2)
        for transcript in transcripts:
            self.assertLessEqual(count_tokens(transcript), budget // 2)
        # nothing was lost to the retry: the first refused chunk went out again
        first_line = _transcript(refused).split("\n")[0]
        self.assertEqual(_transcript(retried[0]).split("\n")[0], first_line)

    def test_server_saying_too_long_twice_fails_cleanly(self):
        self.llm.default = Summariser(self.CONTEXT, refuse_first=2)
        before = self.state()
        result, _ = self.compact(force=True, trigger="manual")
        self.assertIs(result["success"], False, result)
        self.assertIn("exceeds the available context size", result["error"])
        self.assertEqual(len(self.llm.requests), 2)
        self.assertEqual(self.state(), before)

    def test_base_prompt_style_chunks_fit_and_carry_the_notes(self):
        # the completion-style prompt for models without a chat template (docs/design.md,
        # "Structured summaries")
        self.script.db.summary_prompt_style = "base"
        summariser = Summariser(self.CONTEXT)
        self.llm.default = summariser
        result, _ = self.compact(force=True, trigger="manual")
        self.assertTrue(result["success"], result)
        self.assertGreaterEqual(len(self.llm.requests), 3)
        for i, body in enumerate(self.llm.requests):
            self.assertLessEqual(_request_tokens(body), self.CONTEXT, f"request {i}")
            self.assertNotIn("messages", body)  # a text completion: no chat template
            if i:
                self.assertIn(f"Earlier notes:\n{summariser.answers[i - 1]}\n", body["prompt"])

    def test_base_prompt_style_gets_half_the_budget_once_too(self):
        self.script.db.summary_prompt_style = "base"
        self.llm.default = Summariser(self.CONTEXT, refuse_first=1)
        result, _ = self.compact(force=True, trigger="manual")
        self.assertTrue(result["success"], result)

    def test_base_prompt_style_window_too_small_sends_nothing(self):
        self.script.db.summary_prompt_style = "base"
        # instruction (~60 tokens) + previous summary + reply (2 x 120) + headroom > 500
        self.llm.default = Summariser(500)
        self.assert_the_window_refuses_the_compaction(500)

    def test_window_too_small_for_prompt_and_summaries_fails_without_a_doomed_request(self):
        # prompt (~380 tokens) + previous summary + reply (2 x 120) + headroom leave no room
        # for a transcript in 800 tokens: no request may go out that cannot fit
        summariser = Summariser(800)
        self.llm.default = summariser
        before = self.state()
        self.assert_the_window_refuses_the_compaction(800)
        self.assertEqual(self.state(), before)


class TestCrashRightAfterTheCompactionRecord(FaultCase):
    """
    ``kill -9`` after ``apply_compaction`` wrote the archive record, before the journal entry,
    the checkpoint and the compaction counters reached the database (what the end-to-end crash
    test reproduces in a real game).
    """

    def test_replayed_compaction_is_journaled_once_and_counted(self):
        history = list(self.script.history)
        plan = plan_compaction(history, self.script.runtime.token_counts(history),
                               max_context_tokens=1500, preserve_window=20)
        marker = make_marker(SUMMARY, plan.to_compact, original_token_count=plan.compact_tokens,
                             summary_token_count=count_tokens(SUMMARY), trigger="sleep")
        self.script.runtime.apply_compaction(
            marker, plan.to_compact[0]["id"], plan.to_compact[-1]["id"], trigger="sleep"
        )
        for _ in range(2):  # the restart, then a second one: nothing may happen twice
            self.script.ndb.runtime = None
            close_archive(self.script.archive_path())
            history = self.script.history
            self.assertEqual([m["id"] for m in history if is_marker(m)], [marker["id"]])
            self.assertEqual(
                [e.get("marker_id") for e in self.npc.db.journal["entries"]], [marker["id"]]
            )
            self.assertEqual(self.script.db.compaction_count, 1)
            self.assertEqual(self.script.db.last_compaction, marker["metadata"]["compacted_at"])
            overview = self.command(CmdAIHistory(), "Marta")
            self.assertRegex(overview, r"Compactions\s*\|\s*1 \(last: ")


class TestOverflowSparesLinesAwaitingAnswers(NPCTestCase):
    def test_the_oldest_talk_goes_and_every_waiting_line_is_answered(self):
        # no summary can be made (compaction off, as with the breaker open) and a flood of
        # questions takes the context over its budget: the overflow eviction must take the old
        # talk, never a line still waiting for its answer
        self.script.db.compact_enabled = False
        self.flood_and_answer()

    def test_the_mask_strategys_eviction_spares_them_too(self):
        self.script.db.compact_strategy = "mask"
        self.flood_and_answer()

    def flood_and_answer(self):
        self.llm.default = lambda body: reply("Aye.")
        self.script.db.max_context_tokens = 600
        old = self.script.add_message("user", "An old word about the weather " * 3, name="Bob")
        self.script.add_message("assistant", "Fine weather indeed.", name="Marta",
                                metadata={"reply_to": [old["id"]]})
        said = [self.script.receive_speech(self.char1, f"Question {i}: where does the north "
                                           "road go " * 4) for i in range(16)]
        self.assertGreater(self.script.token_usage(), 1.0)
        wait_for(self.script.run_tick())
        ids = [m["id"] for m in self.script.history]
        self.assertNotIn(old["id"], ids)  # the old talk was evicted
        answered = self.script.history[-1]["metadata"].get("reply_to") or []
        self.assertEqual([m["id"] for m in said if m["id"] not in answered], [])
