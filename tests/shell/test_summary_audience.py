"""
Summaries by audience (``docs/design.md``, "Summaries by audience"): a compaction span holding
lines of different audiences gives a summary one listener group may read, made only from the
lines that group heard; the others stay in the archive. One private line never hides the
running summary from everyone.
"""

from ai_contrib.core.audience import common_audience, shared_part
from ai_contrib.core.compaction import Span
from ai_contrib.core.messages import is_marker
from ai_contrib.core.summary import make_marker

from tests.support.llm_double import reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for

A, B, C = "#11", "#12", "#13"


def line(n, audience, role="user"):
    return {"id": f"m{n}", "seq": n, "role": role, "content": f"line {n}",
            "metadata": {"audience": None if audience is None else sorted(audience)}}


def test_a_secret_told_alone_is_left_out_of_the_shared_summary():
    span = [line(i, [A, B]) for i in range(6)]
    secret = [line(6, [B]), line(7, [B], "assistant")]
    span[3:3] = secret
    shared, left_out = shared_part(span)
    assert left_out == secret
    assert [m["id"] for m in shared] == [m["id"] for m in span if m not in secret]
    assert common_audience(shared) == [A, B]
    marker = make_marker("notes", span, 100, 10, source=shared)
    assert marker["metadata"]["audience"] == [A, B]
    assert marker["metadata"]["left_out"] == 2
    assert marker["metadata"]["left_out_seqs"] == [6, 7]
    # control: made from the whole span, as before, only bob could read it
    assert make_marker("notes", span, 100, 10)["metadata"]["audience"] == [B]


def test_the_running_summary_never_shrinks_to_nobody():
    # an earlier summary only bob may read, then alice talks alone with the NPC: folded
    # together nobody could read the result; the summary is written for one group instead
    earlier = make_marker("notes", [line(0, [B])], 50, 5)
    earlier["metadata"]["compacted_count"] = 3
    span = [earlier] + [line(i, [A]) for i in range(1, 9)]
    assert common_audience(span) == []  # control: the old rule gave nobody
    shared, left_out = shared_part(span)
    assert common_audience(shared) == [A]
    assert left_out == [earlier]
    # an earlier summary standing for many lines outweighs a few new ones
    earlier["metadata"]["compacted_count"] = 40
    shared, left_out = shared_part(span)
    assert shared == [earlier] and common_audience(shared) == [B]


def test_public_lines_join_every_group_and_one_audience_keeps_all():
    span = [line(0, None), line(1, [A, B]), line(2, [A, B]), line(3, None)]
    assert shared_part(span) == (span, [])
    everyone = [line(0, None), line(1, None)]
    assert shared_part(everyone) == (everyone, [])
    # most lines x listeners wins; a tie goes to the larger group
    span = [line(0, [A]), line(1, [A]), line(2, [A, B])]
    shared, left_out = shared_part(span)
    assert (common_audience(shared), len(left_out)) == ([A], 0)
    span = [line(0, [A]), line(1, [A, B])]
    shared, left_out = shared_part(span)
    assert (common_audience(shared), left_out) == ([A, B], [span[0]])
    span = [line(0, [A]), line(1, [A, B]), line(2, [A, B]), line(3, [A, B, C])]
    shared, left_out = shared_part(span)
    assert common_audience(shared) == [A, B] and left_out == [span[0]]


def test_a_span_summarises_its_shared_lines_and_replaces_them_all():
    span = [line(0, [A, B]), line(1, [B]), line(2, [A, B]), line(3, [A, B])]
    whole = Span(span, 40)
    assert whole.messages == span
    assert whole.shared == [span[0], span[2], span[3]] and whole.left_out == [span[1]]


class SharedSummaryOnANPC(NPCTestCase):
    """A real NPC in Evennia's test world, the real HTTP LLM double: Wren and Tamsin talk with
    Marta, Wren tells her a secret alone, a compaction runs; the summary request carries only
    the lines both heard, and the next reply to Tamsin carries that summary."""

    SUMMARY = ("Who I Spoke With: Wren and Tamsin asked about rooms; I offered the east room "
               "for two silver.")

    def setUp(self):
        super().setUp()
        self.char1.key, self.char2.key = "Wren", "Tamsin"
        self.wren, self.tamsin = self.char1.dbref, self.char2.dbref
        both = sorted([self.wren, self.tamsin])
        self.public = []
        for i in range(20):
            self.public.append(self.script.add_message(
                "user" if i % 2 == 0 else "assistant",
                f"line {i} Wren and Tamsin asked about rooms; Marta offered the east room for "
                f"two silver, and the road north is muddy after the rain.",
                name="Wren" if i % 2 == 0 else "Marta",
                metadata={"speaker": self.wren, "audience": both}))
            if i == 9:
                self.secret = self.script.add_message(
                    "user", "Marta, my secret: the ledger is hidden behind the blue barrel.",
                    name="Wren", metadata={"speaker": self.wren, "audience": [self.wren]})

    def test_the_summary_is_made_of_what_both_heard_and_tamsin_gets_it(self):
        from ai_contrib import rag_memory

        self.script.db.max_context_tokens = 900  # 21 lines of ~30 tokens: over the threshold
        self.llm.enqueue(reply(self.SUMMARY))
        before = len(self.llm.requests)
        result = stored(wait_for(rag_memory.compact_conversation_history(
            self.script, self.npc, force=True, trigger="manual")))
        self.assertTrue(result.get("success"), result)
        asked = "\n".join(m["content"] for body in self.llm.requests[before:]
                          for m in body["messages"])
        self.assertIn("line 4 Wren and Tamsin", asked)  # the shared lines were summarised
        self.assertNotIn("blue barrel", asked)          # the secret was not
        marker = next(m for m in self.script.history if is_marker(m))
        self.assertEqual(marker["metadata"]["audience"], sorted([self.wren, self.tamsin]))
        self.assertEqual(marker["metadata"]["left_out"], 1)
        self.assertEqual(marker["metadata"]["left_out_seqs"], [self.secret["seq"]])
        self.assertNotIn(self.secret["id"], [m["id"] for m in self.script.history])
        # the secret stays in the archive
        self.assertIn(self.secret["id"],
                      [m["id"] for m in self.script.archive.messages(self.secret["seq"],
                                                                     self.secret["seq"])])

        self.char1.location = self.room2  # Tamsin alone asks; her prompt has the summary
        self.llm.enqueue(reply("The east room is still free, Tamsin."))
        self.script.receive_speech(self.char2, "Marta, what did we talk about?")
        wait_for(self.script.run_tick())
        prompt = "\n".join(m["content"] or "" for m in self.llm.requests[-1]["messages"])
        self.assertIn("east room for two silver", prompt)
        self.assertNotIn("blue barrel", prompt)

    def test_aihistory_and_the_web_page_show_each_summary_audience(self):
        from ai_contrib import rag_memory
        from ai_contrib.commands import CmdAIHistory
        from ai_contrib.npc.scene import note_exchange
        from ai_contrib.web.snapshot import context_messages

        note_exchange(self.script, {self.wren: "Wren", self.tamsin: "Tamsin"})
        self.script.db.max_context_tokens = 900
        self.llm.enqueue(reply(self.SUMMARY))
        result = stored(wait_for(rag_memory.compact_conversation_history(
            self.script, self.npc, force=True, trigger="manual")))
        self.assertTrue(result.get("success"), result)
        shown = self.call(CmdAIHistory(), "Marta")
        # the table wraps its cells (how, depends on the width of the dbrefs): read its rows
        from tests.support.e2e_util import rows_with

        (row,) = rows_with(shown, "left out")
        self.assertIn(f"Wren ({self.wren}), Tamsin ({self.tamsin}); 1 line(s) left out", row)
        (summary,) = [m for m in context_messages(self.script) if m["kind"] == "summary"]
        self.assertEqual(summary["audience"],
                         ", ".join(f"{n} ({d})" for d, n in sorted(
                             [(self.wren, "Wren"), (self.tamsin, "Tamsin")])))
        self.assertEqual(summary["left_out"], 1)
        messages = [m for m in context_messages(self.script) if m["kind"] == "message"]
        self.assertTrue(messages and all(m["audience"] is None for m in messages))
