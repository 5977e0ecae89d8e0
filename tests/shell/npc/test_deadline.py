"""
Time limits that follow the work (``ai_contrib.npc.deadline``; ``docs/design.md``, "Time limits
that follow the work"): a slow server gets a shorter prompt and answers, a slow server doing
the work is waited for past ``AI_LLM_TIMEOUT``, and only a server that answers nothing gets the
fallback line. A real AssistantScript in Evennia's test DB; the LLM a real HTTP double on
127.0.0.1 that evaluates prompts as llama.cpp's server does, at a speed of its own.
"""

import json
import re
import threading
import time
from types import SimpleNamespace
from unittest import mock

from django.test import override_settings

from ai_contrib.admin.history_command import CmdAIHistory
from ai_contrib.npc import deadline

from tests.support.llm_double import chat_response, hold, http_error, rough_tokens
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for

FALLBACK = "Marta seems lost in thought."


class SlowServer:
    """
    The double's answers as llama.cpp's server gives them with one slot: its cache holds the
    last prompt, the messages after those it shares with it are evaluated at :attr:`speed`
    tokens/s (the double's :func:`rough_tokens` and 4 a message), really waited for, and the
    answer's ``timings`` say so. :attr:`evaluated` lists the tokens each request evaluated.
    """

    def __init__(self, speed):
        self.speed = speed
        self.lock = threading.Lock()
        self.previous = []
        self.evaluated = []

    def __call__(self, body):
        messages = body["messages"]
        with self.lock:
            same = 0
            for new, old in zip(messages, self.previous):
                if (new["role"], new["content"]) != (old["role"], old["content"]):
                    break
                same += 1
            self.previous = messages
        tokens = [rough_tokens(m["content"]) + 4 for m in messages]
        evaluated, cached = sum(tokens[same:]), sum(tokens[:same])
        seconds = evaluated / self.speed
        time.sleep(seconds)  # the double's own thread: the work a slow server does
        with self.lock:
            self.evaluated.append(evaluated)
        answer = chat_response(f"Aye ({len(self.evaluated)}).",
                               prompt_tokens=evaluated + cached)
        answer["timings"] = {"prompt_n": evaluated, "cache_n": cached,
                             "prompt_ms": seconds * 1000.0, "predicted_n": 3,
                             "predicted_ms": 5.0}
        return answer


class ActingServer(SlowServer):
    """A :class:`SlowServer` whose next answer to a request offering tools, once :attr:`act` is
    set, is a call of the NPC's ``look`` action (the tools protocol) instead of words."""

    act = False

    def __call__(self, body):
        answer = super().__call__(body)
        if self.act and body.get("tools"):
            self.act = False
            call = {"id": "call_0", "type": "function",
                    "function": {"name": "look", "arguments": json.dumps({"args": ""})}}
            answer["choices"][0]["message"] = {"role": "assistant", "content": "",
                                               "tool_calls": [call]}
            answer["choices"][0]["finish_reason"] = "tool_calls"
        return answer


#: what llama.cpp's server answers a prompt over its context window
OVERFLOW = {"error": {"code": 400, "type": "exceed_context_size_error",
                      "message": "the request exceeds the available context size, try "
                                 "increasing it", "n_prompt_tokens": 9000, "n_ctx": 8192}}


@override_settings(AI_LLM_TIMEOUT=2.5, AI_REPLY_EVALUATION_SECONDS=1.0,
                   AI_THINKING_EMOTE_AFTER=None, AI_PROMPT_CACHE_WARMUP_STEP_SECONDS=None)
class TestDeadline(NPCTestCase):
    """Warm-ups here are one request each (``AI_PROMPT_CACHE_WARMUP_STEP_SECONDS`` None); those
    sent in steps are ``tests/shell/npc/test_warmup.py``'s."""

    #: prompt tokens a second: the whole history of the test (about 1,600 of the double's
    #: tokens) takes about 4 s, longer than AI_LLM_TIMEOUT
    SPEED = 400.0

    def setUp(self):
        self.server = ActingServer(self.SPEED)
        self.llm_default = self.server
        super().setUp()
        self.script.db.compact_enabled = False
        self.fill(6)
        # the client measures the server's speed on a first reply (under 1 s of evaluation)
        self.assertEqual(self.turn("Good evening, Marta."), "Aye (1).")
        self.assertAlmostEqual(self.client_speed(), self.SPEED, delta=self.SPEED * 0.2)
        self.fill(40)  # said since: about 1,600 tokens the server has not seen

    def client_speed(self):
        from ai_contrib.llm.client import get_client

        return get_client().prompt_speed

    def turn(self, text):
        """A player line and the tick answering it; returns what the room heard Marta say
        (her reply, or the fallback line)."""
        with mock.patch.object(self.char1, "msg") as seen:
            self.script.receive_speech(self.char2, text)
            wait_for(self.script.run_tick())
        heard = " ".join(str(c) for c in seen.call_args_list)
        if FALLBACK in heard:
            return FALLBACK
        last = self.script.history[-1]
        return last["content"] if last["role"] == "assistant" else None

    def prompt_of(self, index):
        return "\n".join(m["content"] for m in self.llm.requests[index]["messages"])

    def test_a_slow_server_gets_a_shorter_prompt_and_answers(self):
        self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
        sent = self.prompt_of(-1)
        self.assertIn("What news from the road?", sent)
        self.assertNotIn("line 0 ", sent)  # the oldest lines were left out
        self.assertIn("line 39 ", sent)  # the newest kept
        # under 1.5 s of the server's work, where the whole prompt is about 4 s (counted in the
        # double's tokens, not on the wall clock, which a busy machine stretches)
        self.assertLess(self.server.evaluated[-1], 600)
        cut = self.script.db.reply_receipts[-1]["cut_for_time"]
        self.assertIsNotNone(cut["history_from"])
        self.char1.permissions.add("Developer")
        self.assertRegex(self.call(CmdAIHistory(), "Marta/prompt"),
                         r"Built from less for time: \d+ new note\(s\) left out;\s+only the"
                         r"\s+newest\s+lines")
        # the next reply keeps the short window's start: the server evaluates only what is new
        self.assertEqual(self.turn("And the weather?"), "Aye (3).")
        self.assertLess(self.server.evaluated[-1], 120)
        self.assertEqual(self.script.db.reply_receipts[-1]["cut_for_time"]["history_from"],
                         cut["history_from"])

    def fitted_with_notes(self, text, *sizes):
        """The next turn's prompt fitted by :func:`deadline.fit_reply` with new notes anchored
        at the turn (as a retrieval and the NPC's world make them), the ``i``-th of
        ``sizes[i]`` words ``note<i>w0 note<i>w1 ...``; returns ``(sent text, prompt)``."""
        from ai_contrib.npc.replies import prompt_window
        from ai_contrib.npc.reply_prompt import ReplyPrompt

        self.script.receive_speech(self.char2, text)
        turn = self.script.history[-1]["id"]
        notes = [{"anchor": turn, "audience": None, "items": [], "new": True,
                  "text": "[MEMORY] " + " ".join(f"note{i}w{w}" for w in range(words)),
                  "tokens": words} for i, words in enumerate(sizes)]
        prompt = ReplyPrompt(self.script, self.npc, [turn], [self.char2.dbref], notes, [])
        messages, _timeout = deadline.fit_reply(self.script, self.npc, prompt,
                                                prompt_window(self.script, [turn]))
        return "\n".join(m["content"] for m in messages), prompt

    def test_a_new_note_is_kept_in_the_short_window_the_server_holds(self):
        self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
        kept = self.script.ndb.short_start_id
        self.assertIsNotNone(kept)  # built from less: the server holds a short window
        sent, prompt = self.fitted_with_notes("Do you remember the ferry?", 40)
        # the whole window does not fit even without the note: the short window the server
        # holds is tried with the note before without it
        self.assertIn("note0w39", sent)
        self.assertNotIn("line 0 ", sent)
        self.assertEqual(prompt.cut, {"new_notes": 0, "history_from": kept})
        # a note the allowance cannot take is left out, and only it: the small one stays
        sent, prompt = self.fitted_with_notes("And the ferryman?", 40, 2000)
        self.assertIn("note0w39", sent)
        self.assertNotIn("note1w1999", sent)
        self.assertEqual(prompt.cut, {"new_notes": 1, "history_from": kept})
        self.assertEqual([note["tokens"] for note in prompt.notes if note.get("new")], [40])

    def test_a_recall_note_too_large_for_the_allowance_keeps_its_best_items(self):
        from ai_contrib.npc.replies import prompt_window
        from ai_contrib.npc.reply_prompt import ReplyPrompt

        self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
        self.assertIsNotNone(self.script.ndb.short_start_id)
        self.script.receive_speech(self.char2, "Do you remember the ferry?")
        turn = self.script.history[-1]["id"]
        filler = " ".join(["the ferry crossed the grey river at dawn"] * 4)
        items = [{"key": f"a:{i}", "kind": "archive", "line": f"- Wren said: item{i} {filler}"}
                 for i in range(16)]  # best first; about 1,000 tokens in all
        stored = {"anchor": turn, "audience": None, "items": items, "tokens": 1000,
                  "text": "\n".join(item["line"] for item in items)}
        self.script.ndb.recall_notes = [stored]
        prompt = ReplyPrompt(self.script, self.npc, [turn], [self.char2.dbref],
                             [dict(stored, new=True)], [])
        messages, _timeout = deadline.fit_reply(self.script, self.npc, prompt,
                                                prompt_window(self.script, [turn]))
        sent = "\n".join(m["content"] for m in messages)
        # the best items are shown, the worst are not (the control: both were in the note)
        self.assertIn("item0 ", sent)
        self.assertNotIn("item15 ", sent)
        self.assertEqual(prompt.cut["new_notes"], 0)
        self.assertLessEqual(self.server_tokens(messages), 1.5 * self.SPEED)
        # the NPC keeps the note as shown: the next turn finds it in the server's cache
        (note,) = self.script.ndb.recall_notes
        self.assertIn(note["text"], sent)
        self.assertLess(len(note["items"]), len(items))
        self.assertNotIn("trimmed_from", note)
        # the receipt calls new only what the trimmed note shows
        from ai_contrib.npc.replies import _items_shown

        marked = _items_shown([dict(item, new=True) for item in items], prompt.notes)
        self.assertEqual([item["new"] for item in marked],
                         [i < len(note["items"]) for i in range(len(items))])

    def test_a_note_fetched_ahead_that_the_server_holds_is_not_trimmed_for_time(self):
        from ai_contrib.npc.replies import prompt_window
        from ai_contrib.npc.reply_prompt import ReplyPrompt

        self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
        self.script.receive_speech(self.char2, "Do you remember the ferry?")
        turn = self.script.history[-1]["id"]

        def note(name, count, **more):
            items = [{"key": f"{name}:{i}", "kind": "archive",
                      "line": f"- Wren said: {name}{i} " + "the grey ferry at dawn " * 6}
                     for i in range(count)]
            text = "\n".join(item["line"] for item in items)
            return dict({"anchor": turn, "audience": None, "items": items, "new": True,
                         "text": text, "tokens": 40 * count}, **more)

        # the fetch evaluated the larger note after the prompt's opening (the warm-up's
        # messages are what the server holds); a note of the turn's own is over the allowance
        fetched, own = note("fetched", 16, fetched=True), note("own", 12)
        opening = ReplyPrompt(self.script, self.npc, [], [self.char2.dbref], [], []).opening()
        self.script.ndb.server_prompt = opening[:-1] + [{"role": "system",
                                                         "content": fetched["text"]}]
        prompt = ReplyPrompt(self.script, self.npc, [turn], [self.char2.dbref],
                             [fetched, own], [])
        messages, _timeout = deadline.fit_reply(self.script, self.npc, prompt,
                                                prompt_window(self.script, [turn]))
        sent = "\n".join(m["content"] for m in messages)
        # the turn's own note gave way (the control: it was in the prompt asked for); the
        # fetched one, which costs nothing to show, is whole
        self.assertIn("own0 ", sent)
        self.assertNotIn("own11 ", sent)
        self.assertIn(fetched["text"], sent)

    def server_tokens(self, messages):
        """What the double's server would evaluate of ``messages`` now (its own counts)."""
        from tests.support.llm_double import rough_tokens

        same = 0
        for new, old in zip(messages, self.server.previous):
            if (new["role"], new["content"]) != (old["role"], old["content"]):
                break
            same += 1
        return sum(rough_tokens(m["content"]) + 4 for m in messages[same:])

    def test_an_acting_reply_over_its_allowance_is_built_from_less_and_says_so(self):
        self.script.db.actions = ["look"]
        self.server.act = True  # the model looks around before it speaks
        self.assertEqual(self.turn("What news from the road?"), "Aye (3).")
        acting, speaking = self.llm.requests[-2:]
        # the control: actions were offered, and one was run and told before the reply
        self.assertEqual([t["function"]["name"] for t in acting["tools"]], ["look"])
        self.assertEqual([m["role"] for m in speaking["messages"][-2:]], ["assistant", "tool"])
        for request in (acting, speaking):
            sent = "\n".join(str(m.get("content") or "") for m in request["messages"])
            self.assertIn("What news from the road?", sent)
            self.assertNotIn("line 0 ", sent)  # the oldest lines were left out
            self.assertIn("line 39 ", sent)
        self.assertLess(self.server.evaluated[-2], 600)
        # the round after the action starts where the first one did: its exchange is new
        self.assertLess(self.server.evaluated[-1], 120)
        cut = self.script.db.reply_receipts[-1]["cut_for_time"]
        self.assertIsNotNone(cut["history_from"])
        self.assertEqual(self.script.ndb.short_start_id, cut["history_from"])

    @override_settings(AI_PROMPT_CACHE_WARMUP=True)
    def test_the_ask_after_a_context_overflow_is_fitted_to_the_allowance_too(self):
        self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
        wait_for(self.script.ndb.warming)  # the server's cache holds the whole prompt now
        self.llm.enqueue(http_error(400, OVERFLOW))  # and refuses it as over its context
        self.assertEqual(self.turn("And the weather?"), "Aye (4).")
        refused, asked = (r["messages"] for r in self.llm.requests[-2:])
        # the control: the refused prompt was whole (its cache made it quick), the one asked
        # after it shows less
        self.assertIn("line 0 ", "\n".join(m["content"] for m in refused))
        self.assertLess(len(asked), len(refused))
        self.assertIn("And the weather?", self.prompt_of(-1))
        # half that history starts where nothing is cached: more than the second allowed,
        # it is built from less too, and the receipt says so
        self.assertLess(self.server.evaluated[-1], 600)
        self.assertIsNotNone(self.script.db.reply_receipts[-1]["cut_for_time"]["history_from"])

    @override_settings(AI_PROMPT_CACHE_WARMUP=True)
    def test_after_a_short_prompt_the_whole_one_is_warmed_and_the_next_reply_is_whole(self):
        self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
        self.assertNotIn("line 0 ", self.prompt_of(-1))
        # the tick that answered, idle now, sent the whole prompt ahead (about 4 s of work,
        # past AI_LLM_TIMEOUT: its time limit follows it too)
        self.assertIsNotNone(self.script.ndb.warming, "no warm-up of the whole prompt")
        wait_for(self.script.ndb.warming)
        self.assertEqual(self.llm.requests[-1]["max_tokens"], 1)
        self.assertIn("line 0 ", self.prompt_of(-1))
        self.assertGreater(self.server.evaluated[-1], 1000)
        self.assertEqual(self.turn("And the weather?"), "Aye (4).")
        self.assertIn("line 0 ", self.prompt_of(-1))  # whole again, from the server's cache
        self.assertLess(self.server.evaluated[-1], 120)
        self.assertNotIn("cut_for_time", self.script.db.reply_receipts[-1])

    @override_settings(AI_PROMPT_CACHE_WARMUP=True)
    def test_a_line_during_that_long_warm_up_is_answered_in_time_not_after_it(self):
        # the clock the warm-up's end is reckoned on stands still: a busy machine's delay
        # between the warm-up and the next line cannot bring that end within the allowance
        clock = SimpleNamespace(monotonic=lambda: 1000.0)
        with mock.patch.object(deadline, "time", clock):
            self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
            self.assertIsNotNone(self.script.ndb.warming, "no warm-up of the whole prompt")
            # the warm-up has about 4 s left: more than the reply's 1 s allowance, so the reply
            # does not wait for it, and answers from the lines it can have in time (had it
            # waited, the server would hold the whole prompt and be asked all of it)
            self.assertEqual(self.turn("And the weather?"), "Aye (3).")
        self.assertNotIn("line 0 ", self.prompt_of(-1))
        self.assertIn("And the weather?", self.prompt_of(-1))

    @override_settings(AI_REPLY_EVALUATION_SECONDS=None)
    def test_without_an_allowance_the_whole_prompt_is_waited_for_past_the_flat_limit(self):
        # positive control of the test above: the whole prompt does take longer than
        # AI_LLM_TIMEOUT, and the time limit follows it, so the reply still comes
        started = time.monotonic()
        self.assertEqual(self.turn("What news from the road?"), "Aye (2).")
        self.assertGreater(time.monotonic() - started, 2.5)
        self.assertIn("line 0 ", self.prompt_of(-1))
        self.assertGreater(self.server.evaluated[-1], 1000)
        self.assertNotIn("cut_for_time", self.script.db.reply_receipts[-1])

    def test_a_dead_server_still_gets_the_fallback_line(self):
        self.llm.enqueue(hold(threading.Event()))  # answers nothing until the double stops
        self.assertEqual(self.turn("Marta? Marta!"), FALLBACK)
        # given up at AI_LLM_TIMEOUT (2.5 s) plus twice the evaluation of the prompt asked (built
        # to fit the 1 s allowance), not at a flat minute: the limit the error names, which
        # a busy machine does not change
        error = self.script.db.last_reply_error
        self.assertIn("no complete response", error)
        limit = float(re.search(r"within ([\d.]+) s", error).group(1))
        self.assertGreater(limit, 2.5)
        self.assertLessEqual(limit, 2.5 + 2 * 1.0)
        # the same NPC answered before (setUp): the line is for the dead server alone
        self.assertEqual(self.script.history[7]["content"], "Aye (1).")
