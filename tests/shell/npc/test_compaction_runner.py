"""
The compaction strategies (ai_contrib/npc/compaction_runner.py) on a real AssistantScript in
Evennia's test
DB, with summaries written by the real HTTP LLM double on 127.0.0.1: mask, hybrid, cascade,
replace_all, the benefit guard, prompt styles, the per-turn hook, crash replay, switching
strategy on a live NPC, and the admin commands.
"""

import json
import re
from unittest import mock

from twisted.internet import defer

from evennia.utils.dbserialize import deserialize

from ai_contrib import rag_memory
from ai_contrib.admin import history_command
from ai_contrib.commands import CmdAIHistory, CmdCompact
from ai_contrib.core import cascade
from ai_contrib.core.cuts import EXTRACTION_TYPE
from ai_contrib.core.masking import MASK_PREFIX, is_masked, masked_count
from ai_contrib.core.messages import is_marker, new_message_id
from ai_contrib.core.outcome import SUCCESS, ExtractionResult
from ai_contrib.core.structured import BASE_SUMMARY_INSTRUCTION
from ai_contrib.core.summary import DEFAULT_COMPACTION_PROMPT
from ai_contrib.core.tokens import count_conversation_tokens
from ai_contrib.memory.archive import ArchiveError
from ai_contrib.memory.runtime import RuntimeHistory
from ai_contrib.npc import compacting, compaction_runner
from ai_contrib.admin.compaction_report import format_result

from tests.support.llm_double import http_error, reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for, wait_until

BIG = "The ledger lists: " + ", ".join(f"item {i} costs {i * 3} silver" for i in range(60))
SUMMARY = "## People\n- Bob wants the east room\nFacts:\n- The east room costs two silver"


def cascade_responder(request):
    """Short-term summaries name the lines they cover; folds say so."""
    if "prompt" in request:  # base style: one text completion
        first = last = request["prompt"]
    else:
        first, last = request["messages"][0]["content"], request["messages"][-1]["content"]
    if first == cascade.LONG_TERM_PROMPT or first.startswith(cascade.LONG_TERM_INSTRUCTION):
        return "Long ago Bob and I talked through many lines."
    lines = re.findall(r"line (\d+)", last)
    return f"Bob and I talked through lines {lines[0]} to {lines[-1]}." if lines else "We talked."


class StrategyTestCase(NPCTestCase):
    def tool_turn(self, name="read_ledger", output=BIG):
        """An assistant tool call and its (large) result, as the extraction loop adds them."""
        call_id = "call_" + new_message_id()
        self.script.add_message(
            "assistant", "", name="Marta",
            tool_calls=[{"id": call_id, "type": "function",
                         "function": {"name": name, "arguments": "{}"}}],
        )
        return self.script.add_message("tool", output, tool_call_id=call_id,
                                       metadata={"tool": name})

    def reload(self):
        """
        What a server restart after a crash does: rebuild the runtime from the checkpoint plus
        the archive records after it, and finish interrupted journal work. The checkpoint is
        read as plain data (see test_reload_through_the_script_with_tool_calls below).
        """
        runtime = RuntimeHistory(
            self.script.archive,
            deserialize(self.script.db.conversation_history or []),
            self.script.db.checkpoint_seq,
            model=self.script.cfg("llm_model"),
        )
        self.script.ndb.runtime = runtime
        rag_memory.recover_after_replay(self.script, runtime.replayed)
        return runtime

    def assert_nothing_lost(self):
        """Every archived message is in context or inside a summary's archive range, masked
        outputs point at their originals, and the running total matches a recount."""
        history = self.script.history
        in_context = {m["id"] for m in history}
        ranges = [(m["metadata"]["first_seq"], m["metadata"]["last_seq"])
                  for m in history if is_marker(m)]
        for msg in self.script.archive.messages():
            if msg["id"] not in in_context:
                self.assertTrue(any(lo <= msg["seq"] <= hi for lo, hi in ranges), msg)
        for msg in history:
            if is_masked(msg):
                (original,) = self.script.archive.messages(msg["seq"], msg["seq"])
                self.assertEqual(original["id"], msg["id"])
                self.assertFalse(is_masked(original))
        self.assertEqual(self.script.token_count(),
                         count_conversation_tokens(history, self.script.runtime.ledger.model))

    def compact_command(self, args, expect):
        """Run `compact <args>` and wait for the line containing ``expect``."""
        with mock.patch.object(self.char1, "msg") as seen:
            first = self.call(CmdCompact(), args)  # what the command said at once

            def texts():
                return [first] + [str(c.kwargs.get("text", c.args[0] if c.args else ""))
                                  for c in seen.call_args_list]

            wait_until(lambda: any(expect in t for t in texts()))
            return texts()


class TestConfiguration(StrategyTestCase):
    def test_defaults_and_resolution(self):
        self.assertEqual(self.script.cfg("compact_strategy"), "summary")
        self.assertEqual(self.script.cfg("mask_window"), 10)
        self.assertEqual(compaction_runner.resolve_strategy(self.script), "summary")
        self.assertEqual(compaction_runner.resolve_strategy(self.script, "Cascade"), "cascade")
        with self.assertRaises(ValueError):
            compaction_runner.resolve_strategy(self.script, "compress")
        self.script.db.compact_strategy = "typo"
        self.assertEqual(compaction_runner.resolve_strategy(self.script), "summary")
        self.assertIn("'typo' is unknown", history_command.describe_strategy(self.script))

    def test_unknown_strategy_in_call_and_command(self):
        result = stored(wait_for(rag_memory.compact_conversation_history(
            self.script, self.npc, trigger="manual", strategy="bogus")))
        self.assertFalse(result["success"])
        self.assertIn("unknown compaction strategy", result["error"])
        out = self.call(CmdCompact(), "Marta/strategy=bogus")
        self.assertIn("Unknown strategy 'bogus'", out)
        sent = len(self.llm.requests)
        out = self.call(CmdCompact(), "Marta/strategy=")  # a name left out: no compaction
        self.assertIn("Unknown strategy ''", out)
        self.assertEqual(len(self.llm.requests), sent)

    def test_compact_set_changes_the_npc_strategy_without_compacting(self):
        self.fill(10)
        ids = [m["id"] for m in self.script.history]
        out = self.call(CmdCompact(), "/set Marta/strategy=Hybrid")
        self.assertIn("Marta now compacts with strategy hybrid (was summary).", out)
        self.assertEqual(self.script.db.compact_strategy, "hybrid")
        self.assertEqual(compaction_runner.resolve_strategy(self.script), "hybrid")
        self.assertEqual([m["id"] for m in self.script.history], ids)
        self.assertEqual(self.llm.requests, [])
        self.assertIn("Usage: compact/set", self.call(CmdCompact(), "/set Marta"))
        self.assertIn("Unknown strategy", self.call(CmdCompact(), "/set Marta/strategy=zip"))
        self.assertEqual(self.script.db.compact_strategy, "hybrid")

    def test_aihistory_shows_strategy_and_benefit_guard(self):
        self.script.db.compact_strategy = "cascade"
        self.fill(10)
        cmd = CmdAIHistory()
        cmd.client_width = lambda: 400  # the content, not the 80-column wrapping, is tested here
        out = self.call(cmd, "Marta")
        for shown in ("Strategy", "cascade (immediate 64, recent 64 messages; 10 raw in context",
                      "next at 129 raw", "Benefit guard", "not evaluated yet"):
            self.assertIn(shown, out)


class TestExtractionTrafficLeftBehind(StrategyTestCase):
    def traffic(self, content, audience):
        """One round of fact extraction left in the history, as a compaction that failed after
        it leaves it: an assistant tool call and its result, read for ``audience``."""
        call_id = "call_" + new_message_id()
        meta = {"type": EXTRACTION_TYPE, "audience": audience}
        arguments = json.dumps({"content": content})
        self.script.add_message("assistant", "", name="Marta", metadata=meta, tool_calls=[
            {"id": call_id, "type": "function",
             "function": {"name": "add_journal_entry", "arguments": arguments}}])
        self.script.add_message("tool", "ok: added to your journal.", tool_call_id=call_id,
                                metadata=meta)

    def test_the_summary_is_written_from_the_lines_said_not_from_the_traffic(self):
        self.script.db.compact_strategy = "summary"
        self.script.db.max_context_tokens = 1000  # the window's 12 lines hold 20 % of it
        both = [self.char1.dbref, self.char2.dbref]
        self.traffic("Bob rents the east room", both)
        self.traffic("Bob pays in silver", both)
        self.script.add_message("user", "The spare key is under the blue mat.", name="Bob",
                                metadata={"audience": [self.char1.dbref]})
        added = self.fill(12)
        self.script.db.compact_preserve_window = 12
        self.llm.enqueue(reply("Bob told me the spare key is under the blue mat."))
        result = stored(wait_for(rag_memory.compact_conversation_history(
            self.script, self.npc, force=True, trigger="manual")))
        self.assertTrue(result["success"], result)
        transcript = self.llm.requests[0]["messages"][-1]["content"]
        self.assertIn("spare key is under the blue mat", transcript)
        self.assertNotIn("Bob pays in silver", transcript)
        marker = self.script.history[0]
        self.assertTrue(is_marker(marker))
        self.assertIn("blue mat", marker["content"])
        self.assertEqual(self.script.history[-1]["id"], added[-1]["id"])
        self.assertFalse([m for m in self.script.history
                          if (m.get("metadata") or {}).get("type") == EXTRACTION_TYPE])


class TestMask(StrategyTestCase):
    def setUp(self):
        super().setUp()
        self.script.db.compact_strategy = "mask"
        self.script.db.mask_window = 3
        self.tool = self.tool_turn()
        self.fill(6)  # three NPC turns after the tool turn

    def speak_and_answer(self, answer="Aye, love."):
        self.llm.enqueue(reply(answer))
        self.script.receive_speech(self.char1, "Anything else in the ledger?")
        wait_for(self.script.run_tick())
        return stored(wait_for(self.script.ndb.after_turn))

    def test_old_tool_output_is_masked_after_a_turn_without_an_llm_call(self):
        result = self.speak_and_answer()
        self.assertTrue(result["success"], result)
        self.assertEqual(result["masked_ids"], [self.tool["id"]])
        self.assertEqual(len(self.llm.requests), 1)  # the reply; masking asks no model
        masked = next(m for m in self.script.history if m["id"] == self.tool["id"])
        self.assertTrue(masked["content"].startswith(
            f"{MASK_PREFIX}seq {self.tool['seq']}] read_ledger: The ledger lists:"))
        self.assertEqual(masked["tool_call_id"], self.tool["tool_call_id"])
        self.assertEqual(masked["metadata"]["original_tool"], "read_ledger")
        self.assertLess(result["new_tokens"], result["original_tokens"])
        # the original is in the archive, and so is the masking
        (original,) = self.script.archive.messages(self.tool["seq"], self.tool["seq"])
        self.assertEqual(original["content"], BIG)
        (record,) = list(self.script.archive.records(kinds=("mask",)))
        self.assertEqual(record["ids"], [self.tool["id"]])
        self.assertEqual(record["trigger"], "turn")
        self.assertEqual(self.script.history[-1]["content"], "Aye, love.")
        self.assertEqual(self.script.db.compaction_log[-1]["strategy"], "mask")
        self.assert_nothing_lost()

    def test_masking_is_replayed_after_a_crash(self):
        self.script.checkpoint()  # the last checkpoint holds the tool output unmasked
        self.speak_and_answer()
        expected = [(m["id"], m["content"]) for m in self.script.history]
        self.assertFalse(is_masked(next(m for m in self.script.db.conversation_history
                                        if m["id"] == self.tool["id"])))  # not checkpointed
        runtime = self.reload()
        self.assertEqual([(m["id"], m["content"]) for m in runtime.messages], expected)
        self.assertIn("mask", [r["kind"] for r in runtime.replayed])
        self.assertEqual(self.script.token_count(),
                         count_conversation_tokens(runtime.messages, runtime.ledger.model))

    def test_reload_through_the_script_with_tool_calls(self):
        # the checkpoint Attribute comes back as nested _SaverList/_SaverDict; the runtime
        # must work on plain containers (json.dumps of tool_calls when counting tokens)
        self.script.checkpoint()
        self.script.ndb.runtime = None
        self.assertEqual(len(self.script.runtime.messages),
                         len(self.script.db.conversation_history))

    def test_failed_masking_keeps_the_original_and_the_conversation_goes_on(self):
        archive = self.script.archive
        real_append = archive.append

        def append(kind, **data):
            if kind == "mask":
                raise ArchiveError("disk full")
            return real_append(kind, **data)

        with mock.patch.object(archive, "append", side_effect=append):
            result = self.speak_and_answer()
        self.assertFalse(result["success"])
        self.assertIn("disk full", result["error"])
        kept = next(m for m in self.script.history if m["id"] == self.tool["id"])
        self.assertEqual(kept["content"], BIG)
        self.assertEqual(self.script.history[-1]["content"], "Aye, love.")
        self.assert_nothing_lost()

    def test_recent_tool_outputs_and_disabled_compaction_are_left_alone(self):
        self.script.db.mask_window = 10
        self.assertTrue(self.speak_and_answer()["skipped"])
        self.script.db.mask_window = 3
        self.script.db.compact_enabled = False
        self.assertIsNone(self.speak_and_answer())
        self.assertEqual(masked_count(self.script.history), 0)

    def test_compact_command_masks_with_either_syntax(self):
        out = self.call(CmdCompact(), "/strategy=mask Marta")
        self.assertIn("Masked 1 old tool output(s) of Marta", out)
        self.tool_turn()
        self.fill(6)
        out = self.call(CmdCompact(), "Marta/strategy=mask")
        self.assertIn("Masked 1 old tool output(s) of Marta", out)
        out = self.call(CmdCompact(), "Marta/strategy=mask")
        self.assertIn("skipped: no old tool output to mask", out)
        self.assertEqual(len(self.llm.requests), 0)

    def test_emergency_under_mask_moves_the_oldest_messages_to_the_archive(self):
        self.script.db.pre_compact_extraction_enabled = True
        self.fill(20)
        added = self.fill(20)
        # still over the emergency threshold once the ledger is masked
        rest = self.script.token_count() - self.script.runtime.ledger.tokens_of(self.tool)
        self.script.db.max_context_tokens = int(rest / 0.85)
        result = stored(wait_for(rag_memory.check_emergency_compaction(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        self.assertEqual(result["masked_messages"], 1)
        self.assertGreater(result["evicted_messages"], 0)
        self.assertLessEqual(self.script.token_usage(), 0.8 * 0.9)
        self.assertEqual(len(self.llm.requests), 0)  # no extraction: nothing will be summarised
        # the newest messages stay, in order; everything is still in the archive
        kept = [m["id"] for m in self.script.history]
        archived = [m["id"] for m in self.script.archive.messages()]
        self.assertEqual(len(archived), 2 + 6 + 40)
        self.assertEqual(kept, archived[-len(kept):])
        self.assertIn(added[-1]["id"], kept)
        self.assertNotEqual(self.script.db.compaction_log[-1]["trigger"], "overflow")
        # and the next tick does not do it again
        self.assertIsNone(wait_for(rag_memory.check_emergency_compaction(self.script, self.npc)))


class TestHybrid(StrategyTestCase):
    def setUp(self):
        super().setUp()
        self.script.db.compact_strategy = "hybrid"
        self.script.db.mask_window = 2
        self.script.db.pre_compact_extraction_enabled = False
        self.tool = self.tool_turn()
        self.fill(50)

    def test_masks_then_summarises_when_still_over_the_threshold(self):
        self.script.db.max_context_tokens = 1500
        self.llm.enqueue(reply(SUMMARY))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        self.assertEqual((result["strategy"], result["masked_messages"]), ("hybrid", 1))
        self.assertTrue(is_marker(self.script.history[0]))
        event = self.script.db.compaction_log[-1]  # what aihistory lists
        self.assertEqual((event["strategy"], event["marker_id"]), ("hybrid", result["marker_id"]))
        # the summariser saw the placeholder, not the 600-token ledger
        transcript = self.llm.requests[0]["messages"][-1]["content"]
        self.assertIn("[TOOL OUTPUT ARCHIVED - seq", transcript)
        self.assertNotIn("item 50 costs", transcript)
        self.assertEqual(self.llm.requests[0]["messages"][0]["content"], DEFAULT_COMPACTION_PROMPT)
        # structured: renamed sections come back under the fixed headings
        marker = self.script.history[0]["content"]
        self.assertIn("## Who I Spoke With\n- Bob wants the east room", marker)
        self.assertIn("## Confirmed Facts\n- The east room costs two silver", marker)
        self.assert_nothing_lost()

    def test_an_emergency_whose_extracted_lines_were_compacted_meanwhile_still_compacts(self):
        """compact/force can take the lines an emergency's extraction read before the
        emergency's own compaction starts: it must plan afresh, not fail on lines now gone."""
        self.script.db.max_context_tokens = int(self.script.token_count() / 0.85)
        gone = [m["id"] for m in self.script.history[:10]]

        def extraction_beside_a_forced_compaction(script, character, **_):
            # what the read lines look like once a forced compaction replaced them
            script.runtime.apply_compaction(
                {"role": "system", "content": "[CONTEXT SUMMARY]\nBob asked about rooms.",
                 "id": new_message_id(), "metadata": {"compacted_count": 10}},
                gone[0], gone[-1], strategy="hybrid")
            return defer.succeed(ExtractionResult(SUCCESS, read_ids=gone))

        self.llm.enqueue(reply(SUMMARY))
        with mock.patch.object(compacting, "run_pre_compaction_extraction",
                               extraction_beside_a_forced_compaction):
            result = stored(wait_for(rag_memory.check_emergency_compaction(self.script,
                                                                           self.npc)))
        self.assertTrue(result["success"], result)
        self.assertEqual(result["trigger"], "emergency")
        ids = [m["id"] for m in self.script.history]
        self.assertFalse(set(gone) & set(ids))
        self.assertIn(result["marker_id"], ids)

    def test_masking_alone_can_bring_it_under_the_threshold(self):
        self.script.db.max_context_tokens = int(self.script.token_count() / 0.72)
        outcome = wait_for(rag_memory.compact_conversation_history(self.script, self.npc))
        result = stored(outcome)
        self.assertTrue(result["success"], result)
        self.assertEqual(result["masked_messages"], 1)
        self.assertTrue(result["summary"].startswith("below threshold"))
        self.assertEqual(len(self.llm.requests), 0)
        self.assertIn("Masked 1 old tool output(s)",
                      format_result("Marta", outcome))


class TestCascade(StrategyTestCase):
    llm_default = staticmethod(cascade_responder)

    def setUp(self):
        super().setUp()
        self.script.db.compact_strategy = "cascade"
        self.script.db.pre_compact_extraction_enabled = False

    def after_turn(self):
        return stored(wait_for(rag_memory.after_turn_compaction(self.script, self.npc)))

    def tiers(self):
        return [cascade.tier_of(m) for m in self.script.history if is_marker(m)]

    def test_trigger_points_on_a_live_npc(self):
        self.fill(128)
        result = self.after_turn()
        self.assertEqual(result["reason"], "not due: 128 raw messages, next cycle at 129")
        self.assertEqual(len(self.llm.requests), 0)

        self.fill(1)  # 129: the first short-term summary
        result = self.after_turn()
        self.assertTrue(result["success"], result)
        self.assertEqual((result["cycle"], result["waterfall"], result["compacted_messages"]),
                         (1, False, 65))
        self.assertEqual(self.tiers(), [cascade.TIER_SHORT])
        self.assertEqual(len(self.llm.requests), 1)
        self.assertEqual(self.llm.requests[0]["messages"][0]["content"], cascade.SHORT_TERM_PROMPT)
        first_short = cascade.summary_text_of(self.script.history[0])

        self.fill(63)  # 192
        self.assertTrue(self.after_turn()["skipped"])
        self.fill(1)  # 193: waterfall; the lone short-term summary is promoted without a call
        result = self.after_turn()
        self.assertEqual((result["cycle"], result["waterfall"]), (2, True))
        self.assertEqual(self.tiers(), [cascade.TIER_LONG, cascade.TIER_SHORT])
        self.assertEqual(len(self.llm.requests), 2)
        self.assertEqual(cascade.summary_text_of(self.script.history[0]), first_short)

        self.fill(64)  # 257: waterfall folded by the model
        result = self.after_turn()
        self.assertEqual(result["cycle"], 3)
        self.assertEqual(len(self.llm.requests), 4)
        fold = self.llm.requests[-1]["messages"]
        self.assertEqual(fold[0]["content"], cascade.LONG_TERM_PROMPT)
        self.assertIn(first_short, fold[1]["content"])
        self.assertEqual(cascade.summary_text_of(self.script.history[0]),
                         "Long ago Bob and I talked through many lines.")
        self.assertEqual(self.tiers(), [cascade.TIER_LONG, cascade.TIER_SHORT])
        self.assertEqual(sum(1 for m in self.script.history if not is_marker(m)), 64)
        self.assertEqual(self.script.db.compaction_count, 3)
        self.assert_nothing_lost()

        # each short-term summary is in the journal with its timestamp and archive range
        entries = [e for e in self.npc.db.journal["entries"] if "short_term" in e["tags"]]
        self.assertEqual(len(entries), 3)
        self.assertEqual(entries[0]["tags"], ["compaction", "short_term"])
        self.assertEqual(entries[0]["source_type"], "compaction")
        self.assertEqual(entries[0]["content"], first_short)
        self.assertTrue(entries[0]["timestamp"])
        short = self.script.history[1]["metadata"]
        self.assertEqual((entries[-1]["memory_range_start"], entries[-1]["memory_range_end"]),
                         (short["memory_range_start"], short["memory_range_end"]))
        self.assertEqual(entries[0]["memory_range_start"], 0)
        self.assertFalse(any("synthesis" in e["tags"] for e in self.npc.db.journal["entries"]))

    def test_base_style_sends_both_tiers_as_text_completions(self):
        self.script.db.summary_prompt_style = "base"
        for count in (129, 64, 64):  # first cycle, promotion, a fold by the model
            self.fill(count)
            self.assertTrue(self.after_turn()["success"])
        paths = [call.path for call in self.llm.calls]
        self.assertEqual(paths, ["/v1/completions"] * 4)
        short, fold = self.llm.calls[0].body["prompt"], self.llm.calls[-1].body["prompt"]
        self.assertTrue(short.startswith(cascade.SHORT_TERM_INSTRUCTION), short[:80])
        self.assertTrue(fold.startswith(cascade.LONG_TERM_INSTRUCTION), fold[:80])
        self.assertTrue(fold.endswith("SUMMARY:\n"))
        self.assertEqual(cascade.summary_text_of(self.script.history[0]),
                         "Long ago Bob and I talked through many lines.")

    def test_the_tick_starts_a_due_cycle_in_the_background(self):
        self.script.db.cascade_immediate_window = 4
        self.script.db.cascade_recent_window = 4
        self.fill(8)
        self.llm.enqueue(reply("Good evening, Bob."))
        self.script.receive_speech(self.char1, "Evening, Marta.")  # 9 raw, then the reply: 10
        wait_for(self.script.run_tick())
        result = stored(wait_for(self.script.ndb.after_turn))
        self.assertTrue(result["success"], result)
        self.assertEqual(result["trigger"], "turn")
        self.assertEqual(self.tiers(), [cascade.TIER_SHORT])
        self.assertEqual(self.script.history[-1]["content"], "Good evening, Bob.")
        self.assertEqual(len([m for m in self.script.history if not is_marker(m)]), 4)

    def test_token_pressure_forces_a_cycle_before_it_is_due(self):
        self.fill(80)
        budget = int(self.script.token_count() / 0.85)
        self.script.db.max_context_tokens = budget
        result = stored(wait_for(rag_memory.check_emergency_compaction(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        self.assertEqual(result["trigger"], "emergency")
        # the window shrinks to 40 % of the budget, not the 64 messages the count rule keeps
        raw = [m for m in self.script.history if not is_marker(m)]
        self.assertEqual(result["compacted_messages"], 80 - len(raw))
        self.assertLessEqual(sum(self.script.runtime.token_counts(raw)), 0.4 * budget)
        self.assertGreater(sum(self.script.runtime.token_counts(raw)), 0.3 * budget)

    def test_a_small_budget_does_not_cost_an_llm_call_per_message(self):
        self.fill(60)
        budget = int(self.script.token_count() / 0.75)
        self.script.db.max_context_tokens = budget
        cycles = []
        for _ in range(120):
            self.fill(1)
            for result in (
                stored(wait_for(rag_memory.check_emergency_compaction(self.script, self.npc))),
                stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc))),
            ):
                if result and result.get("success"):
                    cycles.append(result)
        short_calls = [r for r in self.llm.requests
                       if r["messages"][0]["content"] == cascade.SHORT_TERM_PROMPT]
        self.assertEqual(len(short_calls), len(cycles))
        # 180 messages of which 60 were over the sleep threshold already: a cycle per ~30
        self.assertGreaterEqual(len(cycles), 2)  # a waterfall happened
        self.assertLessEqual(len(cycles), 6)
        for result in cycles:  # window + summaries come back to 40 % (+ one new summary)
            self.assertLessEqual(result["context_after"], 0.4 * budget + result["summary_tokens"])

    def test_failed_summary_changes_nothing_and_counts_for_the_breaker(self):
        self.fill(129)
        ids = [m["id"] for m in self.script.history]
        self.llm.enqueue(http_error(500))
        result = self.after_turn()
        self.assertFalse(result["success"])
        self.assertIn("500", result["error"])
        self.assertEqual([m["id"] for m in self.script.history], ids)
        self.assertEqual(self.script.db.compact_failures, 1)
        self.assertEqual(self.npc.db.journal["entries"], [])

    def test_cycle_is_replayed_after_a_crash(self):
        self.fill(129)
        self.after_turn()
        self.fill(64)
        self.after_turn()
        expected = [m["id"] for m in self.script.history]
        self.script.db.conversation_history = []  # as if the checkpoint were from the start
        self.script.db.checkpoint_seq = -1
        self.npc.db.journal = {"entries": [], "consolidated_entry_ids": []}
        self.script.db.compaction_count, self.script.db.compaction_counted_seq = 0, None
        self.assertEqual([m["id"] for m in self.reload().messages], expected)
        tags = [e["tags"] for e in self.npc.db.journal["entries"]]
        self.assertEqual(tags, [["compaction", "short_term"]] * 2)  # journaled again, once each
        # two cycles, the second written as two records (fold, then short-term): counted twice
        self.assertEqual(self.script.db.compaction_count, 2)

    def test_manual_compact_runs_one_cycle(self):
        self.fill(70)
        texts = self.compact_command("Marta/strategy=cascade", "skipped")
        self.assertIn("skipped: not due: 70 raw messages, next cycle at 129", " ".join(texts))
        texts = self.compact_command("/force/strategy=cascade Marta", "Cascade cycle 1")
        self.assertTrue(any("6 messages -> short-term summary" in t for t in texts), texts)


class TestReplaceAll(StrategyTestCase):
    def setUp(self):
        super().setUp()
        self.script.db.compact_strategy = "replace_all"
        self.script.db.pre_compact_extraction_enabled = False
        self.fill(40)
        self.script.db.max_context_tokens = 1200

    def test_whole_history_becomes_one_structured_summary(self):
        self.llm.enqueue(reply(SUMMARY))
        result = stored(wait_for(rag_memory.run_sleep_tick(self.script, self.npc)))["context_compaction"]
        self.assertTrue(result["success"], result)
        self.assertEqual((result["strategy"], result["compacted_messages"]), ("replace_all", 40))
        (marker,) = self.script.history
        self.assertTrue(is_marker(marker))
        self.assertTrue(marker["content"].startswith(
            "[CONTEXT SUMMARY]\n## Who I Spoke With\n- Bob wants the east room"))
        self.assertEqual(marker["metadata"]["strategy"], "replace_all")
        request = self.llm.requests[0]["messages"]
        self.assertEqual(request[0]["content"], DEFAULT_COMPACTION_PROMPT)
        self.assertIn("line 39 ", request[-1]["content"])  # no raw tail kept back
        (entry,) = self.npc.db.journal["entries"]
        self.assertEqual(entry["tags"], ["compaction", "synthesis"])
        self.assert_nothing_lost()

    def test_speech_waiting_for_an_answer_stays_verbatim(self):
        waiting = self.script.add_message("user", "Is the stew ready?", name="Alice")
        self.script.ndb.pending = [waiting["id"]]
        self.llm.enqueue(reply(SUMMARY))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        self.assertEqual([m["id"] for m in self.script.history[1:]], [waiting["id"]])

    def test_base_prompt_style_sends_one_completion_prompt_without_chat_template(self):
        self.script.db.summary_prompt_style = "base"
        self.llm.enqueue(reply("Bob wants the east room."))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        (call,) = self.llm.calls
        self.assertEqual(call.path, "/v1/completions")
        self.assertNotIn("messages", call.body)
        prompt = call.body["prompt"]
        self.assertTrue(prompt.startswith(BASE_SUMMARY_INSTRUCTION))
        self.assertTrue(prompt.endswith("\nSUMMARY:\n"))
        self.assertEqual(self.script.history[0]["content"],
                         "[CONTEXT SUMMARY]\nBob wants the east room.")


class TestBenefitGuard(StrategyTestCase):
    def setUp(self):
        super().setUp()
        self.fill(50)
        self.script.db.max_context_tokens = 1500

    def test_guard_skips_logs_and_shows_and_force_overrides_it(self):
        self.script.db.compact_min_saving_tokens = 10**6
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc)))
        self.assertTrue(result["skipped"])
        self.assertTrue(result["reason"].startswith("benefit guard: estimated saving"))
        self.assertEqual(len(self.llm.requests), 0)
        decision = self.script.db.compact_benefit
        self.assertFalse(decision["run"])
        self.assertEqual(decision["estimated_saving"],
                         decision["current_tokens"] - decision["estimated_summary_tokens"])
        self.assertGreater(decision["estimated_summary_tokens"], 0)
        out = self.call(CmdAIHistory(), "Marta")
        self.assertIn("skip:", out)
        self.assertIn(f"{decision['current_tokens']} - {decision['estimated_summary_tokens']}", out)
        # an admin's compact/force runs anyway, still validated against the real summary
        self.script.db.compact_min_saving_tokens = decision["estimated_saving"] + 1
        # the guard is the subject: no fact extraction asks the model first (compact runs it)
        self.script.db.pre_compact_extraction_enabled = False
        self.llm.enqueue(reply("Bob asked about rooms; I offered the east room for two silver."))
        texts = self.compact_command("/force Marta", "Compacted Marta")
        self.assertTrue(self.script.db.compact_benefit["bypassed"])
        self.assertTrue(is_marker(self.script.history[0]), texts)

    def test_guard_lets_a_worthwhile_compaction_through(self):
        self.llm.enqueue(reply("Bob asked about rooms."))
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc)))
        self.assertTrue(result["success"], result)
        decision = self.script.db.compact_benefit
        self.assertTrue(decision["run"] and not decision["bypassed"])
        self.assertIn("compact:", history_command.describe_benefit(self.script))


class TestSwitching(StrategyTestCase):
    def test_every_strategy_in_turn_on_a_live_npc(self):
        self.script.db.pre_compact_extraction_enabled = False
        self.script.db.mask_window = 2
        self.script.db.cascade_immediate_window = 6
        self.script.db.cascade_recent_window = 6
        self.script.db.max_context_tokens = 2000  # the summary keeps at least 20 % of it verbatim
        self.tool_turn()
        self.fill(30)
        self.llm.default = cascade_responder
        steps = [("mask", "Masked 2"), ("cascade", "Cascade cycle 1"),
                 ("summary", "Compacted Marta"),
                 ("cascade", "Cascade cycle"), ("hybrid", "Compacted Marta (hybrid)"),
                 ("replace_all", "Replaced Marta's whole history")]
        for name, expect in steps:
            self.script.db.compact_strategy = name
            self.tool_turn()
            self.fill(30)
            before = self.script.token_count()
            self.compact_command("/force Marta", expect)
            self.assertLessEqual(self.script.token_count(), before, name)
            self.assert_nothing_lost()
            ids = [m["id"] for m in self.script.history]
            self.assertEqual([m["id"] for m in self.reload().messages], ids, name)
        self.assertEqual(len([m for m in self.script.history if is_marker(m)]), 1)


class TestLinesAwaitingAnAnswer(StrategyTestCase):
    """A burst of speech during a compaction: the lines not yet answered stay in context, for
    every strategy that removes messages, however small the preserve window."""

    def setUp(self):
        super().setUp()
        self.script.db.pre_compact_extraction_enabled = False
        self.script.db.compact_preserve_window = 1
        self.script.db.cascade_immediate_window = 1
        self.fill(30)
        self.answering = self.script.add_message("user", "Queued 0: is the ferry late?",
                                                 name="Bob")
        self.queued = [self.script.add_message("user", f"Queued {i}: and the tide?", name="Bob")
                       for i in range(1, 4)]
        self.script.ndb.answering = [self.answering["id"]]
        self.script.ndb.pending = [m["id"] for m in self.queued]

    def compact(self, strategy):
        self.script.db.compact_strategy = strategy
        self.llm.default = cascade_responder
        result = stored(wait_for(rag_memory.compact_conversation_history(self.script, self.npc,
                                                                  force=True)))
        self.assertTrue(result.get("success"), result)
        ids = [m["id"] for m in self.script.history]
        for msg in [self.answering] + self.queued:
            self.assertIn(msg["id"], ids, (strategy, msg["content"]))
        self.assertLess(ids.index(self.answering["id"]), len(ids) - 3)
        self.assert_nothing_lost()

    def test_summary(self):
        with self.settings(AI_COMPACT_PRESERVE_FRACTION=0):
            self.compact("summary")

    def test_replace_all(self):
        self.compact("replace_all")

    def test_cascade(self):
        self.compact("cascade")
