"""
Replies on the default install (``docs/design.md``, "Prompt structure", "Recall notes"): what the
room hears is what the model wrote for that turn, a reply evaluates few new tokens for memories,
a slow reply shows the room that the NPC is thinking, and the archive keeps lean receipts.

The pure parts are tested directly; the NPC's behaviour with a real AssistantScript in Evennia's
test DB and a real HTTP double on 127.0.0.1 that answers as llama.cpp's server does.
"""

import json
import threading

from django.test import override_settings

from ai_contrib.core.budget import note_allowance, updated_prompt_speed
from ai_contrib.core.messages import make_message
from ai_contrib.core.prompts import assemble_reply_prompt, conversation_order
from ai_contrib.core.receipts import lean_receipt, make_receipt
from ai_contrib.core.recall_notes import anchor_costs, plan_recall

from tests.support.llm_double import respond
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import spin, wait_for, wait_until
from tests.support.waiting import HANG_GUARD


def _msg(role, text, name=None, reply_to=None):
    metadata = {"reply_to": reply_to} if reply_to is not None else {}
    return make_message(role, text, name=name, metadata=metadata)


# -- conversation order ---------------------------------------------------------------------------


def test_a_line_said_while_a_reply_was_written_comes_after_that_reply():
    l1 = _msg("user", "A room, please.", "Wren")
    l2 = _msg("user", "And supper?", "Tamsin")  # said while R1 was being written
    r1 = _msg("assistant", "Two silver a night.", "Marta", reply_to=[l1["id"]])
    history = [l1, l2, r1]
    ordered = conversation_order(history)
    assert [m["id"] for m in ordered] == [l1["id"], r1["id"], l2["id"]]
    # a history already in order is returned as it is
    r2 = _msg("assistant", "Stew tonight.", "Marta", reply_to=[l2["id"]])
    assert conversation_order(ordered + [r2]) == ordered + [r2]


def test_the_prompt_answering_a_line_said_during_a_reply_ends_with_that_line():
    l1 = _msg("user", "A room, please.", "Wren")
    l2 = _msg("user", "And supper?", "Tamsin")
    r1 = _msg("assistant", "Two silver a night.", "Marta", reply_to=[l1["id"]])
    history = [l1, l2, r1]
    messages, parts = assemble_reply_prompt("You are Marta.", "Marta", history, [10, 10, 10],
                                            1000, keep_ids=[l2["id"]])
    assert messages[-1] == {"role": "user", "content": "Tamsin: And supper?"}
    assert messages[-2] == {"role": "assistant", "content": "Two silver a night."}
    assert parts[-1]["part"] == "turn"
    # the previous reply's prompt (l1 then the reply written) is the start of this one
    previous, _ = assemble_reply_prompt("You are Marta.", "Marta", [l1], [10], 1000,
                                        keep_ids=[l1["id"]])
    assert messages[: len(previous)] == previous


# -- recall notes within a latency allowance ------------------------------------------------------


def _items(*keys):
    return [{"key": k, "kind": "line", "line": f"memory {k} " + "word " * 8} for k in keys]


def _render(items):
    return "RELATED MEMORIES\n" + "\n".join(item["line"] for item in items)


def _count(text):
    return len(text.split())


def test_a_note_beside_others_takes_no_more_than_the_reply_may_evaluate():
    ids = {"a1", "a2"}
    # the first note is not capped: a question asked afresh gets the whole budget, once
    first = plan_recall([], _items("x", "y", "z"), "a1", ids, 1000, _render, _count,
                        new_tokens=25)
    assert len(first.new["items"]) == 3 and first.new["tokens"] > 25
    free = plan_recall(first.notes, _items("x", "p", "q", "r"), "a2", ids, 1000, _render,
                       _count)
    assert len(free.new["items"]) == 3  # no allowance: what the budget allows
    capped = plan_recall(first.notes, _items("x", "p", "q", "r"), "a2", ids, 1000, _render,
                         _count, new_tokens=25)
    assert 0 < capped.new["tokens"] <= 25
    assert len(capped.new["items"]) < 3 and capped.left_out >= 1


def test_a_note_is_given_up_only_when_evaluating_what_follows_it_fits_the_allowance():
    ids = ["a1", "m1", "a2", "m2", "a3"]
    first = plan_recall([], _items("x", "y"), "a1", set(ids), 60, _render, _count)
    second = plan_recall(first.notes, _items("p", "q"), "a2", set(ids), 60, _render, _count)
    notes = second.notes
    # a change of subject: none of the turn's best candidates is shown
    costs = anchor_costs(ids, [100, 100, 100, 100, 20])
    cheap = plan_recall(notes, _items("s", "t"), "a3", set(ids), 60, _render, _count,
                        new_tokens=10_000, anchor_cost=costs)
    assert cheap.dropped >= 1  # positive control: a fast server gives up the newest note
    dear = plan_recall(notes, _items("s", "t"), "a3", set(ids), 60, _render, _count,
                       new_tokens=150, anchor_cost=costs)
    assert dear.dropped == 0  # 220 tokens after the newest note's anchor: more than 150
    assert [n["anchor"] for n in dear.shown[: len(notes)]] == [n["anchor"] for n in notes]


def test_the_prompt_speed_is_measured_from_large_evaluations_only():
    speed = updated_prompt_speed(None, 300, 2000.0)
    assert speed == 150.0
    assert updated_prompt_speed(speed, 20, 400.0) == speed  # too small to say anything
    faster = updated_prompt_speed(speed, 600, 2000.0)
    assert speed < faster < 300.0
    assert note_allowance(0.5, 150.0) == 75
    assert note_allowance(None, 150.0) is None and note_allowance(0.5, None) is None


def test_the_archived_receipt_names_memories_without_their_text():
    items = [{"source": "archive", "ref": "#12", "kind": "line", "score": 0.9,
              "line": "Wren said the ledger is behind the blue barrel " * 5, "new": True},
             {"source": "archive", "ref": "#13", "kind": "line", "score": 0.5,
              "line": "a candidate the prompt did not show", "new": False}]
    receipt = make_receipt("m", 1.0, None, [{"part": "system", "tokens": 10}], items, ["Wren"])
    lean = lean_receipt(receipt)
    assert "ledger" in json.dumps(receipt)
    assert "ledger" not in json.dumps(lean)
    assert lean["memories"] == [{"source": "archive", "ref": "#12", "kind": "line", "new": True}]
    assert lean["memories_retrieved"] == 2
    assert lean["parts"] == receipt["parts"] and receipt["memories"][0]["text"]


# -- the NPC ------------------------------------------------------------------------------------


def prefill_like_llama_cpp(request):
    """
    Answer as llama.cpp's server does: a conversation that ends with an assistant message is
    that message to continue (a prefill), and the answer repeats it (with, here, nothing added:
    the model's end-of-turn token); otherwise a reply naming the last line.
    """
    last = request["messages"][-1]
    if last["role"] == "assistant":
        return last["content"]
    return f"About '{last['content'].split(': ', 1)[-1]}': aye."


class TestReplies(NPCTestCase):
    llm_default = staticmethod(prefill_like_llama_cpp)

    def test_a_line_said_while_the_npc_answers_gets_an_answer_of_its_own(self):
        first = self.script.receive_speech(self.char1, "A room, please.")
        pending = list(self.script.pending_ids())
        # the turn is taken, then a second line arrives before the reply is stored
        turn = self.script.run_tick()
        self.script.receive_speech(self.char2, "And what is for supper?")
        wait_for(turn)
        answer = self.script.history[-1]
        self.assertEqual(answer["metadata"]["reply_to"], pending)
        self.assertIn("A room, please.", answer["content"])
        self.assertEqual(first["id"], pending[0])
        wait_for(self.script.run_tick())
        second = self.script.history[-1]
        self.assertEqual(second["role"], "assistant")
        self.assertIn("what is for supper", second["content"])
        self.assertNotEqual(second["content"], answer["content"])
        self.assertEqual(self.llm.requests[-1]["messages"][-1]["role"], "user")

    @override_settings(AI_THINKING_EMOTE_AFTER=0.2, AI_THINKING_EMOTE="{name} frowns, thinking.")
    def test_a_slow_reply_shows_the_room_once_that_the_npc_is_thinking(self):
        heard = []
        original = self.char1.msg

        def msg(text=None, *args, **kwargs):
            heard.append(text[0] if isinstance(text, (list, tuple)) else text)
            return original(text, *args, **kwargs)

        self.char1.msg = msg
        gate = threading.Event()

        asked = threading.Event()

        def slow(request):
            asked.set()
            gate.wait(HANG_GUARD)
            return "Aye, a room."

        self.llm.enqueue(respond(slow))
        self.script.receive_speech(self.char1, "A room, please.")
        turn = self.script.run_tick()

        def thinking():
            return [t for t in heard if t and "frowns, thinking" in str(t)]

        wait_until(asked.is_set)  # retrieval first; then the reply is with the model
        wait_until(thinking)  # 0.2 s into the wait, however long the machine takes
        spin(0.6)  # three times the setting more: still once
        gate.set()
        wait_for(turn)
        self.assertEqual(len(thinking()), 1)
        # a reply faster than the setting shows nothing (60 s: far above the double's answer,
        # even on a busy machine)
        heard.clear()
        with override_settings(AI_THINKING_EMOTE_AFTER=60.0):
            self.script.receive_speech(self.char1, "And supper?")
            wait_for(self.script.run_tick())
        wait_until(lambda: any("supper" in str(t) for t in heard))  # the reply was heard
        self.assertFalse([t for t in heard if t and "frowns, thinking" in str(t)])
