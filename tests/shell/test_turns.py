"""
A busy room: one reply answers every line heard since the NPC last spoke, memory work runs
beside replies and is never starved by them, a hung summariser never delays a reply, lines heard
before a restart are answered after it, an overflowing prompt is cut and asked again, and the
history budget fits the model's context window. The pure parts (``core.turns``,
``core.budget``, the listener filter of ``core.prompts``) are tested directly; the rest through
the NPC in Evennia's test world against the real HTTP LLM double.
"""

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from django.test import override_settings

from ai_contrib.core.budget import MIN_HISTORY_BUDGET, TEMPLATE_HEADROOM_TOKENS, effective_budget
from ai_contrib.core.messages import make_message
from ai_contrib.core.prompts import build_reply_messages, overload_window
from ai_contrib.core.summary import make_marker
from ai_contrib.core.turns import turn_query, unanswered_lines

from tests.support.llm_double import http_error, reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import spin, stored, wait_for, wait_until
from tests.support.waiting import HANG_GUARD


def line(text, speaker="#1", audience=("#1",), **fields):
    return make_message("user", text, name=f"P{speaker}",
                        metadata={"speaker": speaker, "audience": list(audience)}, **fields)


# -- core.turns -----------------------------------------------------------------------------------

def test_lines_named_by_a_reply_are_answered_and_later_ones_are_not():
    a, b, c = line("one"), line("two"), line("three")
    answer = make_message("assistant", "Aye.", metadata={"reply_to": [a["id"]]})
    todo, stale = unanswered_lines([a, b, answer, c], time.time())
    # b was said while the answer to a was being written: it is still to be answered
    assert [m["id"] for m in todo] == [b["id"], c["id"]] and stale == []


def test_an_older_reply_without_reply_to_answers_everything_before_it():
    a, b = line("one"), line("two")
    old_style = make_message("assistant", "Aye.")
    tool_only = make_message("assistant", "", tool_calls=[{"id": "c1", "type": "function",
                             "function": {"name": "noop", "arguments": "{}"}}])
    todo, _ = unanswered_lines([a, old_style, b, tool_only], time.time())
    assert [m["id"] for m in todo] == [b["id"]]


def test_lines_older_than_the_age_limit_are_stale():
    old = line("yesterday", timestamp=(datetime.now(timezone.utc) - timedelta(hours=2)).isoformat())
    new = line("now")
    todo, stale = unanswered_lines([old, new], time.time(), max_age=900)
    assert [m["id"] for m in todo] == [new["id"]] and [m["id"] for m in stale] == [old["id"]]
    assert unanswered_lines([old], time.time(), max_age=0)[0] == [old]


def test_turn_query_is_bounded_whatever_the_backlog():
    lines = [line(f"word{i} " * 50) for i in range(200)]
    query = turn_query(lines)
    assert len(query) <= 600 and "word199" in query and "word100" not in query


# -- core.budget ----------------------------------------------------------------------------------

def test_the_window_cuts_a_budget_larger_than_the_model_can_take():
    info = effective_budget(100_000, window=8192, reply_tokens=96, system_tokens=100,
                            memory_tokens=600, window_source="llama.cpp /props")
    assert info.tokens == 8192 - 96 - 100 - 600 - TEMPLATE_HEADROOM_TOKENS
    assert "8192" in info.source and "llama.cpp /props" in info.source


def test_a_budget_within_the_window_and_an_unknown_window_keep_the_setting():
    assert effective_budget(4000, window=128_000, reply_tokens=96).tokens == 4000
    info = effective_budget(100_000)
    assert info.tokens == 100_000 and "unknown" in info.source
    assert effective_budget(100_000, window=300, reply_tokens=96).tokens == MIN_HISTORY_BUDGET
    with pytest.raises(ValueError):
        effective_budget(0)
    with pytest.raises(ValueError):
        effective_budget(10, reply_tokens=-1)


def test_tokens_lent_to_recall_notes_come_off_the_history_budget():
    base = effective_budget(100_000, window=4096, reply_tokens=96, memory_tokens=600)
    lent = effective_budget(100_000, window=4096, reply_tokens=96, memory_tokens=600,
                            lent_tokens=150)
    assert base.lent == 0 and lent.lent == 150
    assert lent.tokens == base.tokens - 150 and "150 lent" in lent.source
    assert "lent" not in base.source
    # a window the setting does not reach lends from the setting
    assert effective_budget(4000, window=128_000, lent_tokens=100).tokens == 3900
    assert effective_budget(300, lent_tokens=200).tokens == MIN_HISTORY_BUDGET
    with pytest.raises(ValueError):
        effective_budget(1000, lent_tokens=-1)


# -- core.prompts: the listener filter and the cut ----------------------------------------------

def _contents(messages):
    return "\n".join(m["content"] for m in messages)


def test_a_prompt_for_listeners_holds_only_what_all_of_them_heard():
    alone = line("my secret is the blue door", speaker="#1", audience=["#1"])
    both = line("a round for everyone", speaker="#1", audience=["#1", "#2"])
    summary_alone = make_marker("summary of what #1 said alone", [alone], 10, 5)
    summary_alone["metadata"]["audience"] = ["#1"]
    question = line("what did he tell you?", speaker="#2", audience=["#1", "#2"])
    history = [summary_alone, alone, both, question]
    prompt = _contents(build_reply_messages("P", "Marta", history, [10] * 4, 1000,
                                            listeners=["#1", "#2"], keep_ids=[question["id"]]))
    assert "blue door" not in prompt and "summary of what" not in prompt
    assert "a round for everyone" in prompt and "what did he tell you?" in prompt
    # #1 alone may hear all of it (the control: the filter is not dropping everything)
    prompt = _contents(build_reply_messages("P", "Marta", history, [10] * 4, 1000, listeners=["#1"]))
    assert "blue door" in prompt and "summary of what" in prompt


def test_the_turn_is_kept_for_a_listener_who_walked_in_after_it_was_said():
    said = line("is the stew ready?", speaker="#1", audience=["#1"])
    prompt = build_reply_messages("P", "Marta", [said], [10], 1000, listeners=["#1", "#3"],
                                  keep_ids=[said["id"]])
    assert "is the stew ready?" in _contents(prompt)


def test_memories_go_last_so_consecutive_prompts_share_their_prefix():
    history = [line(f"line {i}") for i in range(6)]
    first = build_reply_messages("P", "Marta", history, [10] * 6, 1000, memories="MEMORIES A",
                                 keep_ids=[history[-1]["id"]])
    assert [m["content"] for m in first[-2:]] == ["MEMORIES A", "P#1: line 5"]
    history.append(line("line 6"))
    second = build_reply_messages("P", "Marta", history, [10] * 7, 1000, memories="MEMORIES B",
                                  keep_ids=[history[-1]["id"]])
    # everything before the first prompt's memories is an unchanged prefix of the second
    assert second[: len(first) - 2] == first[:-2]
    assert second[-2]["content"] == "MEMORIES B"


def test_an_overflowing_history_loses_its_oldest_part_summaries_included():
    old_summary = make_marker("OLD SUMMARY", [line("x")], 10, 5)
    lines = [line(f"line {i}") for i in range(10)]
    prompt = build_reply_messages("P", "Marta", [old_summary] + lines, [50] * 11, 200)
    text = _contents(prompt)
    assert "OLD SUMMARY" not in text and "line 9" in text and "line 5" not in text
    # a single message larger than the budget is still sent: the turn is never dropped
    prompt = build_reply_messages("P", "Marta", lines[:1], [5000], 200)
    assert "line 0" in _contents(prompt)


# -- the NPC ------------------------------------------------------------------------------------

def test_over_budget_the_prompt_keeps_its_head_and_a_tail_start_until_it_outgrows_the_budget():
    history = [make_message("user" if i % 2 == 0 else "assistant", f"line {i}", name="Bob")
               for i in range(20)]
    counts = [100] * 20
    # 2,000 tokens against a 1,000-token budget: the oldest 300 tokens stay (the head), the
    # tail keeps head and tail at half the budget
    assert overload_window(history, counts, 1000, None, 0.3, 0.5) == (3, 18)
    windows, previous, grown = [], history[18]["id"], list(history)
    for turn in range(7):  # each turn adds a line and a reply
        grown += [make_message("user", f"more {turn}", name="Bob"),
                  make_message("assistant", f"reply {turn}", name="Marta")]
        window = overload_window(grown, [100] * len(grown), 1000, previous, 0.3, 0.5)
        windows.append(window)
        previous = grown[window[1]]["id"]
    # the head never moves (it stays in the server's cache); the tail's start moves only when
    # head and tail pass 80 % of the budget
    assert [w[0] for w in windows] == [3] * 7
    assert [w[1] for w in windows] == [18, 22, 22, 26, 26, 30, 30]
    # all fits: no window
    assert overload_window(history, [10] * 20, 1000, previous, 0.3, 0.5) is None
    # a first message larger than the head's share: no head, the tail alone
    assert overload_window(history, [400] + [100] * 19, 1000, None, 0.3, 0.5) == (0, 15)
    # a turn larger than the tail's share: the tail starts at the turn's first line
    assert overload_window(history, counts, 1000, None, 0.3, 0.5, keep_from=12) == (3, 12)
    assert overload_window(history, counts, 1000, history[18]["id"], 0.3, 0.5,
                           keep_from=10) == (3, 10)
    # a turn within the tail or the head changes nothing
    assert overload_window(history, counts, 1000, None, 0.3, 0.5, keep_from=19) == (3, 18)
    assert overload_window(history, counts, 1000, None, 0.3, 0.5, keep_from=1) == (3, 18)


def _kind(body):
    """What an LLM request is for: a reply, a summary or a fact extraction."""
    text = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    text += str(body.get("prompt") or "")
    if "<transcript>" in text or "SUMMARY" in text[-200:]:
        return "summary"
    if body.get("tools") or "add_journal_entry" in text:
        return "extraction"
    return "reply"


class Router:
    """The double's answers by kind: replies at once; summaries and extractions may be held."""

    def __init__(self):
        self.release = threading.Event()
        self.release.set()
        self.kinds = []

    def __call__(self, body):
        kind = _kind(body)
        self.kinds.append(kind)
        if kind == "reply":
            return "Aye, I hear you all."
        self.release.wait(HANG_GUARD)
        if kind == "summary":
            return "The patrons talked about ale, the weather and the road north."
        return "TOOL: noop {}"


class TestTurns(NPCTestCase):
    def setUp(self):
        self.router = Router()
        self.llm_default = self.router
        super().setUp()
        self.addCleanup(self.router.release.set)

    def test_one_reply_answers_every_line_heard_since_the_npc_last_spoke(self):
        said = [self.script.receive_speech(self.char1, "Evening, Marta."),
                self.script.receive_speech(self.char2, "Two ales, please."),
                self.script.receive_speech(self.char1, "And some bread.")]
        wait_for(self.script.run_tick())
        self.assertEqual(self.router.kinds, ["reply"])
        answer = self.script.history[-1]
        self.assertEqual(answer["role"], "assistant")
        self.assertEqual(answer["metadata"]["reply_to"], [m["id"] for m in said])
        self.assertEqual(answer["metadata"]["audience"], sorted([self.char1.dbref, self.char2.dbref]))
        self.assertEqual(said[1]["metadata"]["audience"], sorted([self.char1.dbref, self.char2.dbref]))
        prompt = _contents(self.llm.requests[0]["messages"])
        for msg in said:
            self.assertIn(msg["content"], prompt)
        self.assertEqual(self.script.pending_ids(), [])

    def test_lines_heard_before_a_restart_are_answered_after_it(self):
        said = [self.script.receive_speech(self.char1, f"Line {i} before the crash") for i in range(3)]
        self.script.checkpoint()
        # a restart: ndb is gone, the history comes back from the checkpoint and the archive
        self.script.ndb.pending = None
        self.script.ndb.runtime = None
        self.assertEqual(self.script.pending_ids(), [m["id"] for m in said])
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-1]["metadata"]["reply_to"], [m["id"] for m in said])
        self.script.ndb.pending = None
        self.assertEqual(self.script.pending_ids(), [])

    def test_memory_work_is_not_starved_by_continuous_speech_and_never_delays_a_reply(self):
        self.script.db.max_context_tokens = 600
        self.script.db.compact_preserve_window = 4
        self.router.release.clear()  # the summariser hangs
        for i in range(20):
            self.script.receive_speech(self.char1, f"Line {i}: the road north is muddy " * 3)
        self.assertGreater(self.script.token_usage(), 0.8)
        # the summariser hangs until the test releases it: a reply that waited on it would
        # never come (wait_for would give up at its hang guard)
        wait_for(self.script.run_tick())
        # the compaction started at the first tick over the threshold, with lines still queued,
        # and is still hanging: yet the reply was given
        self.assertIsNotNone(self.script.ndb.memory_work)
        self.assertEqual(self.script.history[-1]["role"], "assistant")
        for i in range(3):  # players keep talking while the summariser hangs
            self.script.receive_speech(self.char2, f"More talk {i}")
            wait_for(self.script.run_tick())
            self.assertIsNotNone(self.script.ndb.memory_work)  # still hanging
            self.assertEqual(self.script.history[-1]["content"], "Aye, I hear you all.")
        self.router.release.set()
        wait_for(self.script.ndb.memory_work)
        self.assertGreaterEqual(self.script.db.compaction_count, 1)
        self.assertLess(self.script.token_usage(), 1.0)

    def test_context_over_budget_after_a_failed_compaction_is_brought_back_at_once(self):
        self.script.db.max_context_tokens = 600
        self.script.db.compact_preserve_window = 4
        self.llm.default = lambda body: (
            http_error(503) if _kind(body) != "reply" else "Aye, I hear you all.")
        for i in range(20):
            self.script.receive_speech(self.char1, f"Line {i}: the road north is muddy " * 3)
        self.assertGreater(self.script.token_usage(), 1.0)
        wait_for(self.script.run_tick())
        if self.script.ndb.memory_work is not None:
            wait_for(self.script.ndb.memory_work)
        self.assertEqual(self.script.db.compaction_count or 0, 0)
        self.assertLess(self.script.token_usage(), 1.0)
        # nothing is lost: every line is still in the archive
        archived = [m["content"] for m in self.script.archive.message_log()]
        self.assertEqual(sum(1 for c in archived if c.startswith("Line ")), 20)

    def test_while_the_summariser_hangs_the_history_stays_within_the_cap(self):
        # docs/design.md, "Bounded while a compaction is written": the oldest lines outside the
        # range being summarised leave for the archive; the range stays whole for the splice
        from ai_contrib.core.compaction import context_change

        self.script.db.max_context_tokens = 600
        self.script.db.compact_preserve_window = 4
        self.script.db.pre_compact_extraction_enabled = False  # the summary itself hangs
        self.script.db.compact_hurry = False  # the model is waited for (npc.hurry)
        budget = self.script.budget()
        cap = 2.0 * budget  # AI_COMPACT_INFLIGHT_CAP's default
        self.router.release.clear()
        for i in range(20):
            self.script.receive_speech(self.char1, f"Line {i}: the road north is muddy " * 3)
        wait_for(self.script.run_tick())
        wait_until(lambda: "summary" in self.router.kinds)  # the summary request is out, and held
        self.assertIn("summary", self.router.kinds)
        span = self.script.ndb.compacting_ids
        self.assertTrue(span)
        peak = 0
        for i in range(60):  # players keep talking while the summariser hangs
            self.script.receive_speech(
                self.char2, f"More talk {i}: the miller's cart lost a wheel on the north road")
            wait_for(self.script.run_tick())
            self.assertEqual(self.script.history[-1]["content"], "Aye, I hear you all.")
            peak = max(peak, self.script.token_count())
            ids = {m["id"] for m in self.script.history}
            self.assertLessEqual(span, ids)  # the range being summarised is all there
        self.assertIsNotNone(self.script.ndb.memory_work)  # still hanging
        # positive control: without the cap the history would be far past it by now
        archived = list(self.script.archive.message_log())
        total = sum(self.script.runtime.token_counts(archived))
        self.assertGreater(total, 1.5 * cap)
        self.assertLessEqual(peak, cap)
        self.router.release.set()
        result = stored(wait_for(self.script.ndb.memory_work))
        self.assertTrue(result["success"], result)
        self.assertGreater(result["context_evicted"], 0)
        self.assertIn("said while it was written", context_change(result))
        # nothing is lost: every line is still in the archive
        contents = [m["content"] for m in archived]
        self.assertEqual(sum(1 for c in contents if c.startswith("More talk ")), 60)


    # each line is longer than the history budget, and the memory thread gives every one its
    # vector with the real embedder (about 2 s a line on 2 cores): the fast lane leaves it out
    @pytest.mark.slow
    @override_settings(AI_PLAYER_TEXT_MAX_CHARS=4000)  # a game that allows long lines
    def test_while_the_summariser_hangs_no_reply_prompt_exceeds_its_budget(self):
        self.script.db.max_context_tokens = 300
        self.script.db.compact_preserve_window = 4
        self.script.db.pre_compact_extraction_enabled = False  # the summary itself hangs
        self.script.db.compact_hurry = False  # the model is waited for (npc.hurry)
        budget = self.script.budget()
        self.router.release.clear()
        long_line = "the ferry to Eastport is late again and the miller blames the tide " * 25
        for i in range(6):
            self.script.receive_speech(self.char1, f"Line {i}: {long_line}")
        wait_for(self.script.run_tick())
        wait_until(lambda: "summary" in self.router.kinds)  # the summary request is out, and held
        shown, over = [], 0
        for i in range(6):  # players keep talking while the summariser hangs
            self.script.receive_speech(self.char2 if i % 2 else self.char1,
                                       f"More talk {i}: {long_line}")
            wait_for(self.script.run_tick())
            parts = self.script.db.reply_receipts[-1]["parts"]
            shown.append(sum(p["tokens"] for p in parts
                             if p["part"] in ("history", "turn", "summary")))
            over = max(over, self.script.token_usage())
            prompt = _contents(self.llm.requests[-1]["messages"])
            self.assertIn(f"More talk {i}:", prompt)  # the turn is always there
        self.assertIsNotNone(self.script.ndb.memory_work)  # still hanging
        self.assertGreater(over, 1.0)  # the control: the history itself was over its budget
        self.assertLessEqual(max(shown), budget, shown)
        self.router.release.set()


class TestFloodTurn(NPCTestCase):
    def test_over_budget_a_turn_larger_than_the_tail_is_shown_from_its_first_line(self):
        self.llm.default = lambda body: reply("Aye.")
        self.script.db.max_context_tokens = 600
        self.fill(16, words=12)
        # a compaction is being written while a flood of lines comes in as one turn
        self.script.ndb.compacting = True
        for i in range(10):
            self.script.receive_speech(self.char1, f"Flood {i}: the bridge is out " * 4)
        self.assertGreater(self.script.token_usage(), 1.0)
        wait_for(self.script.run_tick())
        prompt = _contents(self.llm.requests[-1]["messages"])
        self.assertIn("Flood 0:", prompt)
        self.assertIn("Flood 9:", prompt)


class TestReplyFailures(NPCTestCase):
    def test_an_overflowing_prompt_is_cut_and_asked_again(self):
        overflow = {"error": {"code": 400, "type": "exceed_context_size_error",
                              "message": "the request exceeds the available context size, try "
                                         "increasing it", "n_prompt_tokens": 9000, "n_ctx": 8192}}
        self.llm.enqueue(http_error(400, overflow), reply("Sorry, what was that?"))
        for i in range(30):
            self.script.add_message("user", f"old line {i} " + "word " * 40, name="Bob")
        self.script.receive_speech(self.char1, "Are you listening?")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-1]["content"], "Sorry, what was that?")
        first, second = (r["messages"] for r in self.llm.requests[:2])
        self.assertLess(len(_contents(second)), len(_contents(first)))
        self.assertIn("Are you listening?", _contents(second))

    def test_failures_are_counted_for_admins_and_cleared_by_a_good_reply(self):
        self.llm.enqueue(http_error(500), reply("I'm back."))
        self.script.receive_speech(self.char1, "Hello?")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.db.reply_failures, 1)
        self.assertIn("500", self.script.db.last_reply_error)
        self.script.receive_speech(self.char1, "Hello again?")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.db.reply_failures, 0)

    def test_a_line_answered_by_the_fallback_is_not_answered_again_after_a_reload(self):
        self.llm.enqueue(http_error(500), reply("Hello, Char2."))
        failed = self.script.receive_speech(self.char1, "Hello?")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.pending_ids(), [])
        waiting = self.script.receive_speech(self.char2, "Anyone here?")  # not answered yet
        self.script.checkpoint()
        # an Evennia reload: ndb is gone, the queue is made again from the history
        self.script.ndb.pending = None
        self.script.ndb.runtime = None
        self.assertEqual(self.script.pending_ids(), [waiting["id"]])  # the other line still is
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-1]["content"], "Hello, Char2.")
        self.assertEqual(self.script.history[-1]["metadata"]["reply_to"], [waiting["id"]])
        self.assertEqual(len(self.llm.requests), 2)
        self.assertNotIn(failed["id"], self.script.pending_ids())

    def test_lines_wait_while_nobody_is_there_and_are_dropped_when_their_speaker_left(self):
        said = self.script.receive_speech(self.char1, "Back in a moment!")
        self.char1.location = self.room2
        self.char2.location = self.room2
        wait_for(self.script.run_tick())
        spin(0.05)
        self.assertEqual(self.llm.requests, [])
        self.assertEqual(self.script.pending_ids(), [said["id"]])  # waiting for a listener
        self.char1.location = self.room1
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-1]["metadata"]["reply_to"], [said["id"]])
        # a line whose speaker left is not answered to whoever is there
        self.char2.location = self.room1
        self.script.receive_speech(self.char1, "Something for my ears only.")
        self.char1.location = self.room2
        wait_for(self.script.run_tick())
        spin(0.05)
        self.assertEqual(len(self.llm.requests), 1)
        self.assertEqual(self.script.pending_ids(), [])


class TestBudgetFitsTheModel(NPCTestCase):
    def test_usage_is_measured_against_the_window_when_the_model_reports_one(self):
        with override_settings(AI_MAX_CONTEXT_TOKENS=100_000, AI_LLM_CONTEXT_WINDOW=8192):
            self.script.db.max_context_tokens = None
            info = self.script.budget_info()
            self.assertLess(info.tokens, 8192)
            self.assertEqual(info.window, 8192)
            self.assertEqual(info.configured, 100_000)
            self.assertIn("8192", info.source)
            self.script.add_message("user", "word " * 2000, name="Bob")
            self.assertGreater(self.script.token_usage(), 0.2)
