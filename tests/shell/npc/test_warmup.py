"""
Warming the reply cache after a compaction (``ai_contrib.npc.warmup``, ``docs/design.md``, "Warming
the cache after a compaction"): a real AssistantScript in Evennia's test DB, the LLM a real HTTP
double on 127.0.0.1.
"""

import threading
from unittest import mock

from django.test import override_settings
from evennia.objects.objects import DefaultCharacter
from evennia.utils import create

from ai_contrib.core.prompts import prompt_head
from ai_contrib.llm.client import get_client
from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

from tests.support.llm_double import reply, respond
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import spin, wait_for, wait_until
from tests.support.waiting import HANG_GUARD

SUMMARY = "Bob asked about rooms; Marta offered the east room for two silver."


def warmups(llm):
    """The warm-up requests the double has seen (one token asked)."""
    return [r for r in llm.requests if r.get("max_tokens") == 1]


def replies(llm):
    """The reply requests the double has seen."""
    return [r for r in llm.requests if r.get("max_tokens") != 1
            and r["messages"][0]["content"].startswith("You are Marta")]


def held_warmup_then_reply(events, gate, answer):
    """Double behaviours: a warm-up that ends only once the test sets ``gate`` (a
    ``threading.Event``), then a reply saying ``answer``; each appends what it does to
    ``events`` ("warm-up starts", "warm-up ends", "reply")."""
    lock = threading.Lock()

    def note(event):
        with lock:
            events.append(event)

    def slow_warmup(request):
        note("warm-up starts")
        gate.wait(HANG_GUARD)
        note("warm-up ends")
        return "A"

    def reply_(request):
        note("reply")
        return answer

    return respond(slow_warmup), respond(reply_)


class WarmupCase(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.script.db.pre_compact_extraction_enabled = False
        self.fill(44)
        self.budget_for(0.7)  # under the emergency threshold

    def budget_for(self, usage):
        """Set the NPC's token budget so that the context takes about ``usage`` of it."""
        budget = 4000
        while self.script.token_usage() < usage and budget > 200:
            budget -= 20
            self.script.db.max_context_tokens = budget
        while self.script.token_usage() > usage:
            budget += 20
            self.script.db.max_context_tokens = budget

    def settle(self):
        """Turn the reactor until a warm-up under way, if one started, has been answered by the
        double: a warm-up sets ``ndb.warming`` when it starts (synchronously, when the tick or
        the memory work ends) and clears it only once its request came back, so after this the
        double has seen every warm-up that started."""
        if self.script.ndb.warming is not None:
            wait_for(self.script.ndb.warming)
        spin(0.05)  # and the callbacks of what just came back

    def warm_now(self):
        """Positive control: start a warm-up now, as the end of a tick would, and return the
        warm-up requests the double has seen once it is answered."""
        with override_settings(AI_PROMPT_CACHE_WARMUP=True):
            started = self.script.warm_if_due()
        self.assertIsNotNone(started, "no warm-up was due")
        wait_for(started)
        return warmups(self.llm)

    def talk(self, text, answer="Aye, love."):
        """A player line answered by one tick; returns the reply request's messages."""
        self.llm.enqueue(reply(answer))
        self.script.receive_speech(self.char1, text)
        wait_for(self.script.run_tick())
        return replies(self.llm)[-1]["messages"]

    def compact(self, *then):
        """Run an emergency compaction (the budget cut to put the context over its threshold)
        and the warm-up after it; ``then``: behaviours queued after the summary's. A history
        a compaction left short gets more lines first, so that this one has something to take
        beyond the preserve window."""
        if len(self.script.history) < 2 * self.script.cfg("compact_preserve_window") + 4:
            self.fill(30)
        self.budget_for(0.9)
        self.assertGreaterEqual(self.script.token_usage(), 0.8)
        self.llm.enqueue(reply(SUMMARY), *then)
        head = prompt_head(self.script.history)
        wait_for(self.script.start_memory_work())
        self.assertNotEqual(prompt_head(self.script.history), head, "no compaction landed")


@override_settings(AI_PROMPT_CACHE_WARMUP=True)
class TestWarmup(WarmupCase):
    def test_after_a_compaction_the_next_reply_prompt_is_sent_ahead_and_starts_the_reply(self):
        self.talk("Marta, a room for the night?")
        self.settle()
        self.assertEqual(warmups(self.llm), [])  # a reply with nothing compacted: no warm-up
        self.compact()
        wait_for(self.script.ndb.warming)
        sent = warmups(self.llm)
        self.assertEqual(len(sent), 1)
        warm = sent[0]["messages"]
        self.assertIn(SUMMARY, " ".join(m["content"] for m in warm))
        after = self.talk("And supper?")
        # the reply prompt starts with every message the warm-up sent: the server's cache of
        # the warm-up is the reply's prefix
        self.assertEqual(after[:len(warm)], warm)
        self.assertGreater(len(after), len(warm))
        self.assertIn("And supper?", after[-1]["content"])
        # nothing changed at the front since: no second warm-up
        self.talk("Good night, Marta.")
        self.settle()
        self.assertEqual(len(warmups(self.llm)), 1)

    def test_a_reply_asked_during_the_warm_up_waits_for_it(self):
        self.talk("Marta, a room for the night?")
        events, gate = [], threading.Event()
        self.compact(*held_warmup_then_reply(events, gate, "Supper is stew."))
        warming = self.script.ndb.warming
        self.assertIsNotNone(warming)
        self.script.receive_speech(self.char1, "And supper?")
        turn = self.script.run_tick()
        # the reply waits on the warm-up: its tick has put a callback on the warm-up's Deferred
        wait_until(lambda: warming.callbacks)
        self.assertFalse(turn.called)
        self.assertNotIn("reply", events)
        gate.set()  # the warm-up ends: the reply goes on
        wait_for(turn)
        self.assertEqual(events, ["warm-up starts", "warm-up ends", "reply"])
        self.assertEqual(self.script.history[-1]["content"], "Supper is stew.")
        # the player waited for the warm-up too: the reply's time counts it
        stats = self.script.ndb.last_reply
        self.assertGreater(stats["waited"], 0)
        self.assertGreaterEqual(stats["seconds"], stats["waited"])

    def test_a_reply_for_a_newcomer_does_not_wait_for_a_warm_up_made_without_them(self):
        # the newcomer's prompt holds none of the lines only the others heard: it starts
        # otherwise than the warm-up's, so waiting would only delay it
        self.talk("Marta, a room for the night?")
        events, gate = [], threading.Event()
        self.compact(*held_warmup_then_reply(events, gate, "Welcome, stranger."))
        warming = self.script.ndb.warming
        self.assertIsNotNone(warming)
        ann = create.create_object(DefaultCharacter, key="Ann", location=self.room1)
        self.script.receive_speech(ann, "Marta, is there a room?")
        wait_for(self.script.run_tick())  # with the warm-up still held: no wait for it
        self.assertEqual(self.script.history[-1]["content"], "Welcome, stranger.")
        self.assertEqual(events, ["warm-up starts", "reply"])
        # the reply gave up the warm-up: its request was cancelled, so the warm-up was over
        # for the NPC before the server had finished it (the server ends it once released)
        self.assertIsNone(wait_for(warming))
        self.assertIsNone(self.script.ndb.warming)
        self.assertNotIn("warm-up ends", events)
        gate.set()
        wait_until(lambda: "warm-up ends" in events)
        self.assertEqual(events, ["warm-up starts", "reply", "warm-up ends"])

    def held_past_the_allowance(self, answer, step):
        """Talk once, then, with the server at 5 tokens/s evaluating ``step`` tokens a step,
        compact with a held warm-up that would end long after the reply's 8 s allowance (sent
        in one request: ``AI_PROMPT_CACHE_WARMUP_STEP_SECONDS`` None). Returns ``(events,
        gate, warming)``."""
        self.talk("Marta, a room for the night?")
        # the server's speed from here on: the talk before was not built from less
        for name, value in (("prompt_speed", 5.0), ("evaluation_step", step)):
            patch = mock.patch.object(type(get_client()), name, new_callable=mock.PropertyMock,
                                      return_value=value)
            patch.start()
            self.addCleanup(patch.stop)
        events, gate = [], threading.Event()
        self.compact(*held_warmup_then_reply(events, gate, answer))
        self.assertIsNotNone(self.script.ndb.warming)
        # the test's own control: the warm-up is past the allowance, so only the step decides
        self.assertGreater(self.script.ndb.warming_tokens / 5.0, 8.0)
        return events, gate, self.script.ndb.warming

    @override_settings(AI_REPLY_EVALUATION_SECONDS=8.0, AI_PROMPT_CACHE_WARMUP_STEP_SECONDS=None)
    def test_a_warm_up_in_its_last_step_is_waited_for_even_past_the_allowance(self):
        # the server ends a step before it takes the reply: a cancel would lose the cache
        events, gate, warming = self.held_past_the_allowance("Supper is stew.", step=10 ** 6)
        self.script.receive_speech(self.char1, "And supper?")
        turn = self.script.run_tick()
        wait_until(lambda: warming.callbacks)  # the reply waits on the warm-up
        self.assertFalse(turn.called)
        gate.set()
        wait_for(turn)
        self.assertEqual(events, ["warm-up starts", "warm-up ends", "reply"])
        self.assertGreater(self.script.ndb.last_reply["waited"], 0)

    @override_settings(AI_REPLY_EVALUATION_SECONDS=8.0, AI_PROMPT_CACHE_WARMUP_STEP_SECONDS=None)
    def test_a_warm_up_with_steps_left_past_the_allowance_is_given_up(self):
        # a cancel in the first of many steps spares the server the rest
        events, gate, warming = self.held_past_the_allowance("Supper is stew.", step=1)
        self.script.receive_speech(self.char1, "And supper?")
        wait_for(self.script.run_tick())  # with the warm-up still held
        self.assertEqual(self.script.history[-1]["content"], "Supper is stew.")
        self.assertEqual(events, ["warm-up starts", "reply"])
        self.assertIsNone(wait_for(warming))  # cancelled
        gate.set()
        wait_until(lambda: "warm-up ends" in events)

    @override_settings(AI_PROMPT_CACHE_WARMUP_STEP_SECONDS=None)
    def test_a_newcomer_leaves_a_warm_up_in_its_last_step_to_end(self):
        # it cannot be stopped before it ends: cancelling it would free nothing
        events, gate, warming = self.held_past_the_allowance("Welcome, stranger.", step=10 ** 6)
        ann = create.create_object(DefaultCharacter, key="Ann", location=self.room1)
        self.script.receive_speech(ann, "Marta, is there a room?")
        wait_for(self.script.run_tick())  # the newcomer's reply goes on beside it
        self.assertEqual(self.script.history[-1]["content"], "Welcome, stranger.")
        self.assertEqual(events, ["warm-up starts", "reply"])
        self.assertFalse(warming.called)  # not cancelled: still under way
        self.assertIs(self.script.ndb.warming, warming)
        gate.set()
        wait_for(warming)
        self.assertEqual(events, ["warm-up starts", "reply", "warm-up ends"])
        self.assertIsNone(self.script.ndb.warming)

    def test_a_warm_up_that_cannot_be_built_costs_only_the_cache(self):
        self.talk("Marta, a room for the night?")
        with mock.patch("ai_contrib.npc.warmup.warmup_prompt", side_effect=KeyError("anchor")):
            self.compact()
        self.assertIsNone(self.script.ndb.warming)  # nothing left for a reply to wait on
        self.assertEqual(warmups(self.llm), [])
        self.talk("And supper?", answer="Stew tonight.")
        self.assertEqual(self.script.history[-1]["content"], "Stew tonight.")

    def test_an_npc_that_has_not_spoken_since_the_start_is_not_warmed(self):
        # a server start would otherwise send every NPC's prompt at once
        self.compact()
        self.settle()
        self.assertEqual(warmups(self.llm), [])
        # positive control: once she has spoken, the next compaction is warmed
        self.talk("Marta, a room for the night?")
        self.compact()
        self.settle()
        self.assertEqual(len(warmups(self.llm)), 1)

    def test_nobody_in_the_room_no_warm_up(self):
        self.talk("Marta, a room for the night?")
        self.npc.location = self.room2
        self.compact()
        self.settle()
        self.assertEqual(warmups(self.llm), [])
        # positive control: the same head, someone to hear her, and the warm-up goes out
        self.npc.location = self.room1
        self.assertEqual(len(self.warm_now()), 1)


def hand_over_to_the_double(messages, model=None, timeout=None):
    """:func:`ai_contrib.llm.handover.warm_and_hand_over` with the double as the memory server:
    the warm-up request goes to it, and what it held is taken as restored (the real save and
    restore between two llama.cpp servers: ``tests/model/test_embedded.py``)."""
    d = get_client().chat(messages, model=model, max_tokens=1, purpose="handover",
                          timeout=timeout)
    return d.addCallback(lambda result: (result, len(messages)))


@override_settings(AI_PROMPT_CACHE_WARMUP=True)
class TestWarmupHandedOver(WarmupCase):
    """A warm-up that the memory server evaluates and hands over (``docs/design.md``,
    "Warm-ups handed over"), held open by the double until the test lets it end."""

    def setUp(self):
        super().setUp()
        for target, value in (("handover_available", lambda: True),
                              ("warm_and_hand_over", hand_over_to_the_double)):
            patch = mock.patch(f"ai_contrib.npc.warmup.{target}", value)
            patch.start()
            self.addCleanup(patch.stop)
        self.before = self.talk("Marta, a room for the night?")

    def compact(self, *then):
        """:meth:`WarmupCase.compact` with the budget the last reply had: the talk fills it
        to the emergency threshold (lines the held prompt then shows as new)."""
        while self.script.token_usage() < 0.85:
            self.fill(2)
        self.llm.enqueue(reply(SUMMARY), *then)
        head = prompt_head(self.script.history)
        wait_for(self.script.start_memory_work())
        self.assertNotEqual(prompt_head(self.script.history), head, "no compaction landed")

    def test_a_reply_during_it_extends_the_prompt_the_server_holds_without_waiting(self):
        events, gate = [], threading.Event()
        self.compact(*held_warmup_then_reply(events, gate, "Supper is stew."))
        warming = self.script.ndb.warming
        self.assertTrue(self.script.ndb.handing_over)
        warm = list(self.script.ndb.warming_messages)
        self.assertIn(SUMMARY, " ".join(m["content"] for m in warm))  # the new start
        after = self.talk("And supper?", answer="Supper is stew.")  # with the warm-up held
        self.assertEqual(events, ["warm-up starts", "reply"])
        self.assertFalse(warming.called)  # neither waited for nor cancelled
        # the reply is the last prompt as sent, the NPC's answer to it, the lines since and
        # the new line
        self.assertEqual(after[:len(self.before)], self.before)
        self.assertIn("Aye, love.", after[len(self.before)]["content"])
        self.assertIn("And supper?", after[-1]["content"])
        # the new summary stands in the warm-up's prompt, not in this one
        marker = next(m for m in warm if m["content"].startswith("[CONTEXT SUMMARY]"))
        self.assertIn(SUMMARY, marker["content"])
        self.assertNotIn(marker, after)
        # its receipt has the held prompt's parts (the reply before's), then the new ones
        before, now = (receipt["parts"] for receipt in self.script.db.reply_receipts[-2:])
        self.assertEqual(now[:len(before)], before)
        self.assertIn("turn", [part["part"] for part in now[len(before):]])
        gate.set()
        wait_for(warming)
        self.assertFalse(self.script.ndb.handing_over)
        # handed over: the next reply starts with the warm-up's prompt
        later = self.talk("Good night, Marta.")
        self.assertEqual(later[:len(warm)], warm)

    def test_a_held_prompt_that_would_leave_its_history_budget_is_built_anew(self):
        events, gate = [], threading.Event()
        self.compact(*held_warmup_then_reply(events, gate, "Supper is stew."))
        warming = self.script.ndb.warming
        # positive control: a short exchange extends the held prompt
        held = self.talk("And supper?", answer="Supper is stew.")
        self.assertEqual(held[:len(self.before)], self.before)
        # then the talk meanwhile outgrows what the history budget leaves after the held lines
        # (this class compacts at 0.85 of it)
        start = self.script.token_usage()
        while self.script.token_usage() < start + 0.2:
            self.fill(2)
        with mock.patch("ai_contrib.npc.held_prompt.logger.log_info") as log:
            after = self.talk("And a bath?", answer="Supper is stew.")
        self.assertNotEqual(after[:len(self.before)], self.before)
        lines = [call.args[0] for call in log.call_args_list]
        self.assertTrue(any("over their budgets" in line and "built anew" in line
                            for line in lines), lines)
        # built as any other prompt: the new summary is in it
        self.assertIn(SUMMARY, " ".join(m["content"] for m in after))
        self.assertFalse(warming.called)  # the handover goes on, neither waited for nor cancelled
        gate.set()
        wait_for(warming)

    def test_a_newcomer_during_it_gets_a_prompt_of_their_own_and_leaves_it_running(self):
        events, gate = [], threading.Event()
        self.compact(*held_warmup_then_reply(events, gate, "Welcome, stranger."))
        warming = self.script.ndb.warming
        ann = create.create_object(DefaultCharacter, key="Ann", location=self.room1)
        self.script.receive_speech(ann, "Marta, is there a room?")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-1]["content"], "Welcome, stranger.")
        after = replies(self.llm)[-1]["messages"]
        # built for the room now, not the held prompt of the listeners before
        self.assertNotEqual(after[:len(self.before)], self.before)
        self.assertFalse(warming.called)  # not cancelled: the reply server was free
        gate.set()
        wait_for(warming)
        self.assertEqual(events, ["warm-up starts", "reply", "warm-up ends"])


@override_settings(AI_PROMPT_CACHE_WARMUP=True, AI_REPLY_EVALUATION_SECONDS=8.0,
                   AI_PROMPT_CACHE_WARMUP_STEP_SECONDS=2.0)
class TestWarmupInSteps(WarmupCase):
    """A server at 5 tokens/s: a warm-up step of 2 s adds 10 tokens, so each request adds one
    message, and a reply may evaluate 40 tokens (8 s)."""

    def setUp(self):
        super().setUp()
        self.talk("Marta, a room for the night?")
        patch = mock.patch.object(type(get_client()), "prompt_speed",
                                  new_callable=mock.PropertyMock, return_value=5.0)
        patch.start()
        self.addCleanup(patch.stop)

    def test_a_warm_up_is_sent_in_steps_each_the_start_of_the_next(self):
        self.compact()
        whole = list(self.script.ndb.warming_messages)
        self.settle()
        sent = [r["messages"] for r in warmups(self.llm)]
        self.assertGreater(len(sent), 2)
        for before, after in zip(sent, sent[1:]):
            self.assertEqual(after[:len(before)], before)  # each request starts the next
            # one message a step (10 tokens), more where notes must come with their line
            self.assertGreater(len(after), len(before))
        self.assertEqual(sent[-1], whole)
        # the server held the system message from the reply before: the first step adds the
        # summary after it
        self.assertEqual(len(sent[0]), 2)
        self.assertIn(SUMMARY, sent[0][1]["content"])
        after = self.talk("And supper?")
        self.assertEqual(after[:len(whole)], whole)  # the reply is whole, on the warm prompt

    def test_a_reply_during_a_warm_up_in_steps_waits_for_one_step_and_is_built_on_it(self):
        events, gate = [], threading.Event()
        held, answer = held_warmup_then_reply(events, gate, "Supper is stew.")
        self.compact(reply("A"), held, answer)  # the first step answered, the second held
        warming = self.script.ndb.warming
        whole = list(self.script.ndb.warming_messages)
        wait_until(lambda: "warm-up starts" in events)
        self.script.receive_speech(self.char1, "And supper?")
        turn = self.script.run_tick()
        wait_until(lambda: warming.callbacks)  # the reply waits for the step under way
        self.assertTrue(self.script.ndb.warm_yield)
        self.assertFalse(turn.called)
        gate.set()
        wait_for(turn)
        self.assertEqual(events, ["warm-up starts", "warm-up ends", "reply"])
        self.assertEqual(self.script.history[-1]["content"], "Supper is stew.")
        steps = [r["messages"] for r in warmups(self.llm)]
        self.assertEqual(len(steps), 2)  # the series stopped after the step under way
        self.assertLess(len(steps[-1]), len(whole))
        # the reply starts with what the server held, then the newest lines and the turn: the
        # lines in between, which the server did not hold, are left out for time
        asked = replies(self.llm)[-1]["messages"]
        self.assertEqual(asked[:len(steps[-1])], steps[-1])
        self.assertIn("And supper?", asked[-1]["content"])
        left_out = [m for m in whole[len(steps[-1]):] if m not in asked]
        self.assertTrue(left_out)
        self.assertTrue(self.script.db.reply_receipts[-1]["cut_for_time"]["history_from"])
        self.assertGreater(self.script.ndb.last_reply["waited"], 0)
        # idle again, the warm-up goes on from what the server holds, to the whole prompt
        wait_for(self.script.run_tick())
        self.settle()
        resumed = [r["messages"] for r in warmups(self.llm)][2:]
        self.assertTrue(resumed)
        self.assertEqual(resumed[0][:len(steps[-1])], steps[-1])
        self.assertGreater(len(resumed[0]), len(steps[-1]))
        after = self.talk("And a bath?")
        self.assertEqual(after[:len(resumed[-1])], resumed[-1])
        # the history whole again (a new note may still be left out at 5 tokens/s)
        cut = self.script.db.reply_receipts[-1].get("cut_for_time") or {}
        self.assertIsNone(cut.get("history_from"))


    def test_a_newcomer_during_a_warm_up_in_steps_waits_for_the_step_and_hears_none_of_it(self):
        # the held messages were built for those who were there: Ann did not hear them
        events, gate = [], threading.Event()
        held, answer = held_warmup_then_reply(events, gate, "Welcome, stranger.")
        self.compact(reply("A"), held, answer)
        warming = self.script.ndb.warming
        wait_until(lambda: "warm-up starts" in events)
        ann = create.create_object(DefaultCharacter, key="Ann", location=self.room1)
        self.script.receive_speech(ann, "Marta, is there a room?")
        turn = self.script.run_tick()
        wait_until(lambda: warming.callbacks)  # she waits for the step under way
        self.assertFalse(turn.called)
        gate.set()
        wait_for(turn)
        self.assertEqual(events, ["warm-up starts", "warm-up ends", "reply"])
        self.assertEqual(self.script.history[-1]["content"], "Welcome, stranger.")
        steps = [r["messages"] for r in warmups(self.llm)]
        self.assertEqual(len(steps), 2)  # stopped after the step
        asked = replies(self.llm)[-1]["messages"]
        # what the step held for the others does not reach her prompt: a line of their talk
        # she did not hear (in the test above, a reply for them starts with it)
        held_line = steps[-1][-1]
        self.assertIn(held_line["role"], ("user", "assistant"))
        self.assertNotIn(held_line, asked)
        self.assertIn("is there a room?", asked[-1]["content"])


@override_settings(AI_PROMPT_CACHE_WARMUP=True)
class TestWarmupAfterRestart(WarmupCase):
    def npc_beside(self, key, replied_at=None):
        """Another AI NPC in the room, with a line heard and, at ``replied_at``, a reply."""
        npc = create.create_object(AssistantCharacter, key=key, location=self.room1)
        npc.db.persona = f"You are {key}, a regular of the Prancing Goat."
        script = get_assistant_script(npc)
        script.add_message("user", f"Evening, {key}.", name=self.char1.key)
        if replied_at:
            script.db.reply_receipts = [{"at": replied_at}]
        return script

    def test_the_npcs_beside_players_are_warmed_in_turn_the_last_to_reply_first(self):
        from ai_contrib.startup import warm_after_restart

        self.script.db.reply_receipts = [{"at": "2026-12-01T10:00:00+00:00"}]
        tobin = self.npc_beside("Tobin", "2026-12-01T11:00:00+00:00")  # replied last
        self.npc_beside("Petra")  # never replied: a third, beyond the server's two slots
        events, gate = [], threading.Event()
        self.llm.enqueue(*held_warmup_then_reply(events, gate, "A"))
        # a restart: the server's cache is empty and no NPC has sent a prompt to it yet
        warmed = warm_after_restart()
        wait_until(lambda: "warm-up starts" in events)
        # Tobin first; Marta's warm-up waits until the server has evaluated his
        first = warmups(self.llm)
        self.assertEqual(len(first), 1)
        self.assertTrue(first[0]["messages"][0]["content"].startswith("You are Tobin"), first)
        self.assertIsNotNone(tobin.ndb.warming)
        gate.set()
        self.assertEqual(wait_for(warmed), 2)
        sent = [r["messages"][0]["content"].split(",")[0] for r in warmups(self.llm)]
        self.assertEqual(sent, ["You are Tobin", "You are Marta"])
        # the cache holds the start of Marta's next reply prompt
        warm = warmups(self.llm)[1]["messages"]
        after = self.talk("Marta, a room for the night?")
        self.assertEqual(after[:len(warm)], warm)

    def test_after_a_stop_and_start_the_npc_is_warmed_for_those_it_last_answered(self):
        from ai_contrib.npc.last_active import last_active_ids
        from ai_contrib.startup import warm_after_restart

        tobin = self.npc_beside("Tobin")
        tobin.obj.location = None  # no player beside him, and he has not replied
        self.talk("Marta, a room for the night?")
        self.assertEqual(last_active_ids()[:1], [self.npc.id])  # noted as she replied
        # it starts again before the player is back in the tavern
        self.script.ndb.cached_head = None
        self.char1.location = self.room2
        self.llm.enqueue(reply("A"))
        self.assertEqual(wait_for(warm_after_restart()), 1)  # Marta only
        warm = warmups(self.llm)[0]["messages"]
        self.assertTrue(warm[0]["content"].startswith("You are Marta"), warm)
        self.assertIn("a room for the night", " ".join(m["content"] for m in warm))
        # the player comes back: the reply prompt starts with what the warm-up sent
        self.char1.location = self.room1
        after = self.talk("And supper?")
        self.assertEqual(after[:len(warm)], warm)

    def test_an_npc_whose_cache_was_restored_is_not_warmed_again(self):
        from ai_contrib.startup import warm_after_restart

        self.script.db.reply_receipts = [{"at": "2026-12-01T10:00:00+00:00"}]
        tobin = self.npc_beside("Tobin", "2026-12-01T11:00:00+00:00")
        self.llm.enqueue(reply("A"))
        # the kept cache was restored for Tobin (ai_contrib.npc.kept_cache): Marta alone
        self.assertEqual(wait_for(warm_after_restart({tobin.obj.id})), 1)
        sent = [r["messages"][0]["content"].split(",")[0] for r in warmups(self.llm)]
        self.assertEqual(sent, ["You are Marta"])

    def test_no_npc_beside_a_player_no_warm_up(self):
        from ai_contrib.startup import warm_after_restart

        self.npc.location = self.room2
        self.assertEqual(wait_for(warm_after_restart()), 0)
        self.assertEqual(warmups(self.llm), [])
        # positive control: back beside the player, she is warmed
        self.npc.location = self.room1
        self.llm.enqueue(reply("A"))
        self.assertEqual(wait_for(warm_after_restart()), 1)
        self.assertEqual(len(warmups(self.llm)), 1)


class TestWarmupSetting(WarmupCase):
    def assert_a_compaction_sends_no_warm_up(self):
        self.talk("Marta, a room for the night?")
        self.compact()
        self.settle()
        self.assertEqual(warmups(self.llm), [])
        self.assertEqual(len(self.warm_now()), 1)  # positive control: "true" warms the same head

    def test_auto_warms_only_the_embedded_model(self):
        # the double is a configured server (AI_LLM_BASE_URL): "auto" sends no warm-up
        self.assert_a_compaction_sends_no_warm_up()

    @override_settings(AI_PROMPT_CACHE_WARMUP=False)
    def test_off(self):
        self.assert_a_compaction_sends_no_warm_up()


class TestWarmupPrompt(WarmupCase):
    def test_the_warm_up_prompt_never_ends_with_two_replies(self):
        from ai_contrib.npc.warmup import warmup_messages

        self.talk("Marta, a room for the night?")
        said = self.script.receive_speech(self.char1, "And supper?")
        self.script.add_message("assistant", "Stew tonight.", name="Marta",
                                metadata={"reply_to": [said["id"]]})
        self.script.add_message("assistant", "And fresh bread.", name="Marta",
                                metadata={"reply_to": [said["id"]]})
        messages = warmup_messages(self.script, self.npc, [self.char1.dbref, self.char2.dbref])
        self.assertEqual(messages[-1]["role"], "assistant")  # one reply may end it
        self.assertEqual(messages[-1]["content"], "Stew tonight.")
        self.assertNotEqual(messages[-2]["role"], "assistant")
