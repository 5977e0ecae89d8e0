"""
Pre-compaction extraction with a real AssistantScript, the real LLM client and the HTTP LLM
double; plus the importance scorer and entity profiles it uses.
"""

import json

from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from ai_contrib.memory.entities import (
    entity_key,
    find_entity,
    format_entity_profile,
    update_entity_observation,
)
from ai_contrib.memory.importance import (
    heuristic_importance,
    names_in,
    parse_importance,
    score_importance,
)
from ai_contrib.npc.extraction import (
    DEFAULT_PRE_COMPACTION_PROMPT,
    NUDGE,
    build_extraction_messages,
    run_pre_compaction_extraction,
)

from tests.support.llm_double import (  # noqa: F401 (fixture)
    http_error, llm_double, prompt_text, reply, respond, structured, tool_calls)
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for

ALLERGY = {"content": "Bob is allergic to peanuts.", "importance": 8, "speaker": "Bob"}


class ExtractionTestCase(NPCTestCase):
    def setUp(self):
        super().setUp()
        self.fill(8, words=6)
        self.char1.key = "Bob"
        self.char2.key = "Carol"
        # Bob, alone with Marta: one listener group, so one view of the span is read
        # (core.audience.listener_views; TestConsolidation reads two)
        self.said_alone = self.script.add_message(
            "user", "Between us: I am allergic to peanuts.", name="Bob",
            metadata={"speaker": self.char1.dbref, "audience": [self.char1.dbref]})
        self.said_later = self.script.add_message(
            "user", "Carol, the Prancing Goat opens at dawn.", name="Bob",
            metadata={"speaker": self.char1.dbref, "audience": [self.char1.dbref]})

    def say(self, name, text):
        """A line the facts of a test come from (a fact must say what one line says): Bob's,
        or with ``name`` None the NPC's own."""
        if name is None:
            return self.script.add_message("assistant", text, name=self.npc.key)
        return self.script.add_message(
            "user", text, name=name,
            metadata={"speaker": self.char1.dbref, "audience": [self.char1.dbref]})

    def run_extraction(self, **kwargs):
        return stored(wait_for(run_pre_compaction_extraction(self.script, self.npc, **kwargs)))

    def journal(self, source_type="fact"):
        return [e for e in self.npc.db.journal["entries"] if e["source_type"] == source_type]

    def added_messages(self, before):
        return self.script.history[before:]


class TestSkips(ExtractionTestCase):
    def test_disabled(self):
        self.script.db.pre_compact_extraction_enabled = False
        result = self.run_extraction()
        self.assertTrue(result["success"])
        self.assertTrue(result["skipped"])
        self.assertEqual(result["reason"], "disabled")
        self.assertEqual(self.llm.requests, [])

    def test_short_history(self):
        npc_fixture_history = len(self.script.history)
        self.assertGreaterEqual(npc_fixture_history, 5)
        from evennia.utils import create

        from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

        other = create.create_object(AssistantCharacter, key="Quiet", location=self.room1)
        script = get_assistant_script(other)
        for i in range(4):
            script.add_message("user", f"hello {i}", name="Bob")
        result = stored(wait_for(run_pre_compaction_extraction(script, other)))
        self.assertTrue(result["skipped"])
        self.assertIn("shorter than 5", result["reason"])
        self.assertEqual(self.llm.requests, [])


class TestImportanceScoring(ExtractionTestCase):
    def importance_with(self, method, *then):
        call = dict(ALLERGY, source=[self.said_alone["seq"]])  # the call says 8
        with override_settings(AI_IMPORTANCE_SCORING=method):
            self.llm.enqueue(tool_calls([("add_journal_entry", call)]), *then,
                             tool_calls([("noop", {})]))
            self.run_extraction()
        (entry,) = self.journal()
        self.npc.db.journal = None
        return entry["importance"]

    def test_the_setting_chooses_who_scores_a_fact(self):
        heuristic = heuristic_importance(ALLERGY["content"])
        self.assertNotEqual(heuristic, 8)  # so the two cases below can tell
        self.assertEqual(self.importance_with("model"), 8)  # the call's own number
        self.assertEqual(self.importance_with("heuristic"), heuristic)
        self.assertEqual(self.importance_with("llm", reply("3")), 3)  # one more request
        self.assertIn("importance", prompt_text(self.llm.requests[-2]).lower())


class TestImportanceScoringWithStructuredOutput(ExtractionTestCase):
    def structured_importance(self, method):
        call = dict(ALLERGY, source=[self.said_alone["seq"]])  # the reply says 8
        with override_settings(AI_IMPORTANCE_SCORING=method):
            self.llm.enqueue(structured(("add_journal_entry", call)), structured(("noop", {})))
            self.run_extraction()
        (entry,) = self.journal()
        self.npc.db.journal = None
        schema = self.llm.requests[-2]["response_format"]["json_schema"]["schema"]
        fact = schema["properties"]["calls"]["items"]["anyOf"][0]["properties"]["arguments"]
        return entry["importance"], sorted(fact["required"])

    def test_the_setting_chooses_who_scores_a_structured_fact_and_what_the_schema_asks(self):
        heuristic = heuristic_importance(ALLERGY["content"])
        self.assertNotEqual(heuristic, 8)  # so the two cases below can tell
        # "model": the grammar asks for the number and it is kept
        self.assertEqual(self.structured_importance("model"),
                         (8, ["content", "importance", "source"]))
        # "heuristic": the number is not asked for; a reply that gives one anyway is not read
        self.assertEqual(self.structured_importance("heuristic"),
                         (heuristic, ["content", "source"]))


class TestNearDuplicates(ExtractionTestCase):
    def test_a_fact_journaled_again_in_other_words_is_not_stored_twice(self):
        source = [self.said_alone["seq"]]
        again = dict(ALLERGY, content="Bob has been allergic to peanuts.", source=source)
        other = dict(ALLERGY, content="Bob is not allergic to peanuts.", source=source)
        self.llm.enqueue(tool_calls([("add_journal_entry", dict(ALLERGY, source=source))]),
                         tool_calls([("add_journal_entry", again),
                                     ("add_journal_entry", other)]),
                         tool_calls([("noop", {})]))
        before = len(self.script.history)
        result = self.run_extraction()
        # the same fact in other words: one entry; its negation is another fact (control)
        self.assertEqual([e["content"] for e in self.journal()],
                         ["Bob is allergic to peanuts.", "Bob is not allergic to peanuts."])
        self.assertEqual(result["facts_recorded"], 2)
        results = [m["content"] for m in self.added_messages(before) if m["role"] == "tool"]
        self.assertIn("ok: already in your journal.", results)


class TestTermination(ExtractionTestCase):
    def test_stops_on_noop(self):
        seen_signal = []

        def noop_and_look(request):
            seen_signal.append(dict(self.script.db.context_signals or {}))
            return tool_calls([("noop", {})])

        before = len(self.script.history)
        cited = dict(ALLERGY, source=[self.said_alone["seq"]])
        self.llm.enqueue(tool_calls([("add_journal_entry", cited)]), respond(noop_and_look))
        result = self.run_extraction()
        self.assertEqual(result["stopped_by"], "noop")
        self.assertTrue(result["success"])
        self.assertEqual(result["facts_recorded"], 1)
        self.assertEqual(result["iterations"], 2)
        self.assertEqual(result["modes"], ["native", "native"])
        # the signal is up during the run and down afterwards
        self.assertEqual(seen_signal, [{"pre_compaction": True}])
        self.assertFalse(self.script.db.context_signals["pre_compaction"])
        # the fact is in the journal, attributed to the line it cites
        (entry,) = self.journal()
        self.assertEqual(entry["content"], "Bob is allergic to peanuts.")
        self.assertEqual(entry["importance"], 8)
        self.assertEqual(entry["speaker"], "Bob")
        self.assertEqual(entry["audience"], [self.char1.dbref])
        self.assertEqual(entry["source_ids"], [self.said_alone["id"]])
        self.assertEqual(entry["visibility"], "private")
        self.assertEqual(result["entry_ids"], [entry["id"]])
        # each call and its result are in the history, paired, in order
        added = self.added_messages(before)
        self.assertEqual([m["role"] for m in added], ["assistant", "tool", "assistant", "tool"])
        call_ids = [added[0]["tool_calls"][0]["id"], added[2]["tool_calls"][0]["id"]]
        self.assertEqual([added[1]["tool_call_id"], added[3]["tool_call_id"]], call_ids)
        self.assertNotEqual(
            call_ids[0], call_ids[1]
        )  # the double reuses "call_0"; the history may not
        self.assertIn("recorded", added[1]["content"])
        self.assertEqual(added[0]["tool_calls"][0]["function"]["name"], "add_journal_entry")
        self.assertTrue(all(m["seq"] is not None for m in added))  # archived like any message

    def test_stops_without_tool_call(self):
        self.llm.enqueue(reply("I have nothing to write down."))
        before = len(self.script.history)
        result = self.run_extraction()
        self.assertEqual(result["stopped_by"], "no_tool_call")
        self.assertEqual(result["iterations"], 1)
        self.assertEqual(result["facts_recorded"], 0)
        self.assertEqual(self.added_messages(before), [])
        self.assertFalse(self.script.db.context_signals["pre_compaction"])

    def test_scope_guard_stops_on_another_tool(self):
        self.llm.enqueue(
            tool_calls([("add_journal_entry", ALLERGY), ("search_memory", {"query": "peanuts"})]),
            tool_calls([("noop", {})]),  # never asked for
        )
        before = len(self.script.history)
        result = self.run_extraction()
        self.assertEqual(result["stopped_by"], "scope_guard")
        self.assertEqual(result["iterations"], 1)
        self.assertEqual(len(self.llm.requests), 1)
        self.assertEqual(self.llm.pending, 1)
        self.assertEqual(result["facts_recorded"], 1)  # the in-scope call before it still counts
        added = self.added_messages(before)
        self.assertEqual([m["role"] for m in added], ["assistant", "tool", "tool"])
        self.assertIn("not available", added[2]["content"])

    def test_stops_at_max_iterations(self):
        self.say("Bob", "Fact number 0, 1 and 2 are about the mill.")
        self.llm.enqueue(
            *[
                tool_calls(
                    [
                        (
                            "add_journal_entry",
                            {"content": f"Fact number {i} about the mill.", "importance": 5},
                        )
                    ]
                )
                for i in range(3)
            ]
        )
        result = self.run_extraction(max_iterations=2)
        self.assertEqual(result["stopped_by"], "max_iterations")
        self.assertEqual(result["iterations"], 2)
        self.assertEqual(result["facts_recorded"], 2)
        self.assertEqual(len(self.llm.requests), 2)
        # the second request carries the first call and its result (native tool messages)
        second = self.llm.requests[1]["messages"]
        self.assertEqual(second[-2]["role"], "assistant")
        self.assertEqual(second[-2]["tool_calls"][0]["function"]["name"], "add_journal_entry")
        self.assertEqual(second[-1]["role"], "tool")

    def test_default_max_iterations_from_the_script(self):
        self.script.db.pre_compact_max_iterations = 1
        self.llm.enqueue(tool_calls([("add_journal_entry", ALLERGY)]))
        result = self.run_extraction()
        self.assertEqual((result["stopped_by"], result["iterations"]), ("max_iterations", 1))


@override_settings(AI_LLM_STRUCTURED_OUTPUT="off")
class TestRequests(ExtractionTestCase):
    """The native and text protocols (structured output off)."""

    def test_first_request_carries_history_prompt_and_tools(self):
        self.llm.enqueue(reply("nothing"))
        self.run_extraction()
        request = self.llm.requests[0]
        self.assertEqual(
            [t["function"]["name"] for t in request["tools"]],
            ["noop", "add_journal_entry", "update_entity_observation"],
        )
        system = request["messages"][0]
        self.assertEqual(system["role"], "system")
        self.assertIn("You are Marta", system["content"])
        self.assertIn("call noop", system["content"])
        self.assertIn("TOOL: add_journal_entry", system["content"])  # the text protocol too
        texts = [m["content"] for m in request["messages"]]
        # each line is numbered with its archive seq, the number a call cites as its source
        first = self.script.history[0]
        self.assertIn(f"[{first['seq']}] Bob: line 0 word0 word1 word2 word3 word4 word5", texts)
        self.assertIn(f"[{self.said_alone['seq']}] Bob: Between us: I am allergic to peanuts.",
                      texts)
        self.assertIn("number in brackets", system["content"])
        self.assertEqual(request["messages"][-1], {"role": "user", "content": NUDGE})

    def test_custom_prompt(self):
        self.script.db.pre_compact_prompt = "Write down only debts."
        self.llm.enqueue(reply("nothing"))
        self.run_extraction()
        system = self.llm.requests[0]["messages"][0]["content"]
        self.assertIn("Write down only debts.", system)
        self.assertNotIn(DEFAULT_PRE_COMPACTION_PROMPT[:40], system)

    def test_text_protocol_without_native_tools(self):
        self.say("Bob", "I owe Marta 3 silver.")
        self.llm.enqueue(
            reply(
                'Here it is.\nTOOL: add_journal_entry {"content": "Bob owes Marta 3 silver.", "importance": 7, "speaker": "Bob"}'
            ),
            reply("```\nTOOL: noop {}\n```"),
        )
        result = self.run_extraction()
        self.assertEqual((result["stopped_by"], result["facts_recorded"]), ("noop", 1))
        self.assertEqual(result["modes"], ["text", "text"])
        self.assertEqual(self.journal()[0]["content"], "Bob owes Marta 3 silver.")
        # the next request shows the call and its result as plain text
        second = self.llm.requests[1]["messages"]
        self.assertEqual(second[-2]["role"], "assistant")
        self.assertTrue(second[-2]["content"].startswith("TOOL: add_journal_entry"))
        self.assertTrue(second[-1]["content"].startswith("TOOL RESULTS:"))
        self.assertNotIn("tool_calls", second[-2])

    def test_backend_refusing_tools_is_asked_without_them(self):
        self.llm.enqueue(http_error(400), reply("TOOL: noop"), reply("TOOL: noop"))
        result = self.run_extraction()
        self.assertEqual(result["stopped_by"], "noop")
        self.assertIn("tools", self.llm.requests[0])
        self.assertNotIn("tools", self.llm.requests[1])
        # remembered for this NPC: the next run does not offer tools again
        self.run_extraction()
        self.assertNotIn("tools", self.llm.requests[2])

    def test_llm_failure_is_reported_not_raised(self):
        self.llm.enqueue(tool_calls([("add_journal_entry", ALLERGY)]), http_error(503))
        result = self.run_extraction()
        self.assertFalse(result["success"])
        self.assertEqual(result["stopped_by"], "error")
        self.assertIn("503", result["error"])
        self.assertEqual(result["facts_recorded"], 1)  # what was recorded before stays
        self.assertEqual(len(self.journal()), 1)
        self.assertFalse(self.script.db.context_signals["pre_compaction"])
        self.assertFalse(self.script.ndb.extracting)


REFUSAL = http_error(400, {"error": {"code": 400, "type": "invalid_request_error",
                                     "message": "Unsupported parameter: 'response_format'"}})


class TestStructuredOutput(ExtractionTestCase):
    """Structured output (AI_LLM_STRUCTURED_OUTPUT, default "auto") against the double."""

    def test_request_carries_the_schema_and_the_answer_is_journaled_with_provenance(self):
        fact = {"content": "Bob is allergic to peanuts.", "importance": 8,
                "source": [self.said_alone["seq"]]}
        self.llm.enqueue(structured(("add_journal_entry", fact)), structured(("noop", {})))
        result = self.run_extraction()
        self.assertEqual((result["stopped_by"], result["facts_recorded"]), ("noop", 1))
        self.assertEqual(result["modes"], ["structured", "structured"])
        first = self.llm.requests[0]
        self.assertNotIn("tools", first)  # servers refuse tools beside a schema
        fmt = first["response_format"]
        self.assertEqual(fmt["type"], "json_schema")
        schema = fmt["json_schema"]["schema"]
        items = schema["properties"]["calls"]["items"]["anyOf"]
        # the first request must record something; later ones may end with noop
        self.assertEqual([i["properties"]["name"]["enum"] for i in items],
                         [["add_journal_entry"], ["update_entity_observation"]])
        later = self.llm.requests[1]["response_format"]["json_schema"]["schema"]
        self.assertEqual([i["properties"]["name"]["enum"]
                          for i in later["properties"]["calls"]["items"]["anyOf"]],
                         [["add_journal_entry"], ["update_entity_observation"], ["noop"]])
        journal_args = items[0]["properties"]["arguments"]
        self.assertEqual(sorted(journal_args["required"]), ["content", "importance", "source"])
        # a source may cite only the numbers the request shows
        shown = sorted(m["seq"] for m in self.script.history[:10])
        self.assertEqual(journal_args["properties"]["source"]["items"]["enum"], shown)
        self.assertNotIn("speaker", journal_args["properties"])  # never the model's to say
        self.assertIn('{"calls": [', first["messages"][0]["content"])  # taught as JSON
        self.assertNotIn("TOOL: add_journal_entry", first["messages"][0]["content"])
        (entry,) = self.journal()
        self.assertEqual(entry["content"], "Bob is allergic to peanuts.")
        self.assertEqual((entry["speaker"], entry["audience"]), ("Bob", [self.char1.dbref]))
        self.assertEqual(entry["source_ids"], [self.said_alone["id"]])
        # the next request shows the JSON answer and the results as text
        second = self.llm.requests[1]["messages"]
        self.assertEqual(json.loads(second[-2]["content"])["calls"][0]["arguments"]["content"],
                         "Bob is allergic to peanuts.")
        self.assertTrue(second[-1]["content"].startswith("TOOL RESULTS:"))
        self.assertIn("response_format", self.llm.requests[1])

    def test_a_structured_fact_the_conversation_does_not_hold_is_not_journaled(self):
        invented = {"content": "Marta owes Gandalf 300 gold.", "importance": 9,
                    "source": [self.said_alone["seq"]]}
        self.llm.enqueue(structured(("add_journal_entry", invented)), structured(("noop", {})))
        result = self.run_extraction()
        self.assertEqual(result["facts_recorded"], 0)
        self.assertEqual(self.journal(), [])
        self.assertIn("not recorded", self.script.history[-3]["content"])
        self.assertIn("Gandalf", self.script.history[-3]["content"])

    def test_a_server_refusing_the_schema_is_asked_the_old_way_and_remembered(self):
        self.llm.enqueue(REFUSAL, tool_calls([("add_journal_entry", ALLERGY)]),
                         tool_calls([("noop", {})]), reply("TOOL: noop {}"))
        result = self.run_extraction()
        self.assertEqual((result["stopped_by"], result["facts_recorded"]), ("noop", 1))
        self.assertEqual(result["modes"], ["native", "native"])
        requests = self.llm.requests
        self.assertIn("response_format", requests[0])
        self.assertNotIn("response_format", requests[1])
        self.assertIn("tools", requests[1])
        # the retry teaches the text protocol, not the JSON answer
        self.assertIn("TOOL: add_journal_entry", requests[1]["messages"][0]["content"])
        self.assertNotIn("TOOL: add_journal_entry", requests[0]["messages"][0]["content"])
        # remembered by the client: the next run does not send the schema again
        self.run_extraction()
        self.assertNotIn("response_format", self.llm.requests[3])
        self.assertEqual(len(self.llm.requests), 4)

    @override_settings(AI_LLM_STRUCTURED_OUTPUT="json_schema")
    def test_json_schema_setting_makes_a_refusal_an_error(self):
        self.llm.enqueue(REFUSAL)
        result = self.run_extraction()
        self.assertFalse(result["success"])
        self.assertIn("response_format", result["error"])
        self.assertEqual(len(self.llm.requests), 1)

    @override_settings(AI_LLM_STRUCTURED_OUTPUT="off")
    def test_off_sends_no_schema(self):
        self.llm.enqueue(reply("TOOL: noop {}"))
        self.run_extraction()
        self.assertNotIn("response_format", self.llm.requests[0])
        self.assertIn("tools", self.llm.requests[0])

    def test_an_other_400_is_not_taken_for_a_refusal(self):
        self.llm.enqueue(http_error(400))
        result = self.run_extraction()
        self.assertFalse(result["success"])
        self.assertEqual(len(self.llm.requests), 1)


class TestTools(ExtractionTestCase):
    def test_malformed_call_gets_an_error_result_and_the_loop_goes_on(self):
        self.llm.enqueue(
            tool_calls([("add_journal_entry", {"importance": 3})]), tool_calls([("noop", {})])
        )
        before = len(self.script.history)
        result = self.run_extraction()
        self.assertEqual(
            (result["stopped_by"], result["facts_recorded"], result["iterations"]), ("noop", 0, 2)
        )
        self.assertTrue(self.added_messages(before)[1]["content"].startswith("error: malformed"))
        self.assertEqual(self.journal(), [])

    def test_missing_importance_is_scored(self):
        self.say("Bob", "I promise to pay Marta 50 gold by Friday.")
        self.llm.enqueue(
            tool_calls(
                [("add_journal_entry", {"content": "Bob promises to pay Marta 50 gold by Friday."})]
            ),
            tool_calls([("noop", {})]),
        )
        self.run_extraction()
        (entry,) = self.journal()
        self.assertEqual(entry["importance"], heuristic_importance(entry["content"], []))
        self.assertGreaterEqual(entry["importance"], 8)

    def test_duplicate_fact_is_not_journaled_twice(self):
        self.llm.enqueue(
            tool_calls([("add_journal_entry", ALLERGY)]),
            tool_calls(
                [("add_journal_entry", dict(ALLERGY, content="bob is allergic to peanuts"))]
            ),
            tool_calls([("noop", {})]),
        )
        result = self.run_extraction()
        self.assertEqual(result["facts_recorded"], 1)
        self.assertEqual(len(self.journal()), 1)

    def test_entity_observation_updates_profile_and_journal(self):
        self.say("Bob", "I walk with a limp since the war.")
        self.llm.enqueue(
            tool_calls(
                [
                    (
                        "update_entity_observation",
                        {"entity": "Bob", "observation": "Walks with a limp."},
                    ),
                    (
                        "update_entity_observation",
                        {"entity": "bob", "observation": "walks with a limp"},
                    ),
                ]
            ),
            tool_calls([("noop", {})]),
        )
        result = self.run_extraction()
        self.assertEqual(result["observations_recorded"], 1)
        self.assertEqual(result["facts_recorded"], 0)
        self.assertEqual(dict(self.npc.db.entity_profiles), {"Bob": ["Walks with a limp."]})
        (observation,) = self.journal("observation")
        self.assertEqual(observation["entity"], "Bob")
        self.assertEqual(observation["content"], "Bob: Walks with a limp.")

    def test_earlier_facts_are_listed_for_the_model(self):
        from ai_contrib.memory.journal import add_entry, ensure_journal

        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, "The mill burned down last winter.", 6, "fact")
        self.npc.db.journal = journal
        self.llm.enqueue(reply("nothing"))
        self.run_extraction()
        self.assertIn(
            "- The mill burned down last winter.", self.llm.requests[0]["messages"][0]["content"]
        )


# ------------------------------------------------------------------------------ pure helpers


def test_build_messages_trims_oldest_to_the_budget_but_keeps_markers():
    marker = {
        "id": "k",
        "role": "system",
        "content": "[CONTEXT SUMMARY]\nEarlier we met.",
        "metadata": {"type": "compaction"},
    }
    history = [marker] + [
        {"id": str(i), "role": "user", "name": "Bob", "content": f"message {i} " + "word " * 50}
        for i in range(20)
    ]
    messages = build_extraction_messages("You are Marta.", history, budget_tokens=300)
    contents = [m["content"] for m in messages]
    assert contents[1].startswith("[CONTEXT SUMMARY]")
    assert any(c.startswith("Bob: message 19 ") for c in contents)
    assert not any(c.startswith("Bob: message 0 ") for c in contents)
    assert messages[-1]["content"] == NUDGE


def test_build_messages_keeps_a_contiguous_recent_stretch():
    long_one = {"id": "L", "role": "user", "name": "Bob", "content": "long " + "word " * 200}
    short = [{"id": str(i), "role": "user", "name": "Bob", "content": f"short {i}"}
             for i in range(6)]
    history = short[:3] + [long_one] + short[3:]
    messages = build_extraction_messages("You are Marta.", history, budget_tokens=60)
    contents = [m["content"] for m in messages[1:-1]]
    # the long line does not fit, so the shorter lines before it are left out too
    assert contents == ["Bob: short 3", "Bob: short 4", "Bob: short 5"]


def test_history_budget_fits_the_model_window_not_just_the_npc_budget():
    from django.test import override_settings

    from ai_contrib.npc.extraction import extraction_history_budget

    with override_settings(AI_COMPACT_SUMMARIZER_CONTEXT=8192):
        big = extraction_history_budget(100_000, 3)
        assert 4000 < big < 8192 - 2 * 256 * 3
        assert extraction_history_budget(100_000, 5) < big  # more rounds, more room kept
        assert extraction_history_budget(1000, 3) == 1000  # a small budget fits as it is
    with override_settings(AI_COMPACT_SUMMARIZER_CONTEXT=32768):
        assert extraction_history_budget(100_000, 3) == big + 32768 - 8192


def test_importance_heuristic():
    assert heuristic_importance("Hello there!") <= 2
    assert heuristic_importance("") == 1
    promise = heuristic_importance("I promise to pay Bob 50 gold by Friday.")
    allergy = heuristic_importance("Alice is allergic to peanuts.")
    small_talk = heuristic_importance("the weather is nice today")
    assert promise > allergy > small_talk
    # first mentions score higher than names already known
    assert heuristic_importance("Mara lives in Eastwood.", known_names=[]) > heuristic_importance(
        "Mara lives in Eastwood.", known_names=["mara", "EASTWOOD"]
    )
    assert names_in("Chris's sister Mara met The Baron on Monday.") == ["Chris", "Mara", "Baron"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_importance_is_always_1_to_10(text):
    assert 1 <= heuristic_importance(text) <= 10


def test_parse_importance():
    assert parse_importance("8") == 8
    assert parse_importance("Importance: 10/10") == 10
    assert parse_importance("about 7 or so") == 7
    assert parse_importance("none") is None


def test_score_importance_heuristic_and_llm(llm_double):
    from ai_contrib.llm.client import LLMClient

    d = score_importance("Alice is allergic to peanuts.", method="heuristic")
    assert wait_for(d) == heuristic_importance("Alice is allergic to peanuts.")
    client = LLMClient(base_url=llm_double.base_url, api_key="k")
    try:
        llm_double.enqueue(reply("9"), reply("I cannot say."), http_error(500))
        assert (
            wait_for(
                score_importance("The dragon sleeps under the hill.", method="llm", client=client)
            )
            == 9
        )
        fallback = heuristic_importance("The dragon sleeps under the hill.", ())
        assert (
            wait_for(
                score_importance("The dragon sleeps under the hill.", method="llm", client=client)
            )
            == fallback
        )
        assert (
            wait_for(
                score_importance("The dragon sleeps under the hill.", method="llm", client=client)
            )
            == fallback
        )
        assert "Fact: The dragon sleeps under the hill." in json.dumps(llm_double.requests[0])
    finally:
        wait_for(client.close())


def test_entity_observations_dedup_and_cap():
    profiles = {}
    assert update_entity_observation(profiles, "Alice", "Carries a silver locket.")
    assert not update_entity_observation(profiles, " alice ", "carries a  silver locket")
    assert not update_entity_observation(profiles, "", "x") and not update_entity_observation(
        profiles, "Bob", "  "
    )
    assert update_entity_observation(profiles, "ALICE", "Hums when nervous.")
    assert profiles == {"Alice": ["Carries a silver locket.", "Hums when nervous."]}
    for i in range(5):
        update_entity_observation(profiles, "Bob", f"observation {i}", max_observations=3)
    assert profiles["Bob"] == ["observation 2", "observation 3", "observation 4"]
    assert find_entity(profiles, "bob") == "Bob" and find_entity(profiles, "Carol") is None
    assert entity_key("  Old   Tom ") == "old tom"
    assert (
        format_entity_profile("Alice", profiles["Alice"])
        == "Alice: Carries a silver locket.; Hums when nervous."
    )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["Alice", "alice", " ALICE", "Bob"]), st.text(max_size=15)),
        max_size=20,
    )
)
def test_entity_profiles_never_hold_duplicates(updates):
    profiles = {}
    for entity, observation in updates:
        update_entity_observation(profiles, entity, observation)
    assert len({entity_key(name) for name in profiles}) == len(profiles)
    for observations in profiles.values():
        keys = [" ".join(o.split()).casefold().rstrip(".!") for o in observations]
        assert len(keys) == len(set(keys))


class TestConsolidation(ExtractionTestCase):
    """Extraction -> journal Attribute -> Mem0 (real store on a temporary path) -> search."""

    def test_journaled_facts_reach_mem0_and_come_back_scoped(self):
        import shutil
        import tempfile

        from ai_contrib.memory.journal import unconsolidated
        from ai_contrib.memory.mem0_payload import npc_agent_id
        from ai_contrib.memory.consolidation import consolidate_journal
        from ai_contrib.memory.mem0_store import Mem0Store

        together = self.script.add_message(
            "user", "Carol, the Prancing Goat opens at dawn.", name="Bob",
            metadata={"speaker": self.char1.dbref,
                      "audience": sorted([self.char1.dbref, self.char2.dbref])})
        # two listener groups: the view of what Bob and Carol both heard is read first, then
        # the view of what Bob heard (core.audience.listener_views)
        self.llm.enqueue(
            tool_calls(
                [
                    (
                        "add_journal_entry",
                        {
                            "content": "The Prancing Goat opens at dawn.",
                            "importance": 4,
                            "tags": ["public"],
                            "source": [together["seq"]],
                        },
                    )
                ]
            ),
            tool_calls([("noop", {})]),
            tool_calls([("add_journal_entry", dict(ALLERGY, source=[self.said_alone["seq"]]))]),
            tool_calls([("noop", {})]),
        )
        self.assertEqual(self.run_extraction()["facts_recorded"], 2)
        asked = [prompt_text(body) for body in self.llm.requests]
        self.assertNotIn("Between us", asked[0])  # Carol's view leaves Bob's secret out
        self.assertIn("Between us", asked[-1])
        directory = tempfile.mkdtemp(prefix="ai-memory-test-")
        self.addCleanup(shutil.rmtree, directory, True)
        store = Mem0Store(path=directory)
        self.addCleanup(lambda: wait_for(store.close()))
        pending = [e["id"] for e in unconsolidated(self.npc.db.journal)]
        result = stored(wait_for(consolidate_journal(self.npc, store=store)))
        self.assertEqual(result, {"success": True, "added": 2, "skipped": 0})
        self.assertEqual(sorted(self.npc.db.journal["consolidated_entry_ids"]), sorted(pending))
        self.assertEqual(unconsolidated(self.npc.db.journal), [])
        # nothing left to do the second time; Mem0 holds each fact once
        self.assertEqual(stored(wait_for(consolidate_journal(self.npc, store=store)))["added"], 0)
        self.assertEqual(len(wait_for(store.list(npc_agent_id(self.npc)))), 2)
        bob = store.run(store.search_sync, npc_agent_id(self.npc), "what can't Bob eat?",
                        listeners={self.char1.dbref: "Bob"})
        self.assertEqual(wait_for(bob)[0]["text"], "Bob is allergic to peanuts.")
        # Carol heard only what was said with her there; the model's "public" tag changes nothing
        carol = store.run(store.search_sync, npc_agent_id(self.npc), "what can't Bob eat?",
                          threshold=0.0, listeners={self.char2.dbref: "Carol"})
        self.assertEqual([h["text"] for h in wait_for(carol)], ["The Prancing Goat opens at dawn."])
        both = store.run(store.search_sync, npc_agent_id(self.npc), "what can't Bob eat?",
                         threshold=0.0, listeners={self.char1.dbref: "Bob",
                                                   self.char2.dbref: "Carol"})
        self.assertEqual([h["text"] for h in wait_for(both)], ["The Prancing Goat opens at dawn."])


class TestOneLineCheck(ExtractionTestCase):
    """A fact reaches the journal (and so Mem0, which is filled from the journal) only when one
    line of the conversation says it (docs/design.md, "Facts you can trust")."""

    GLUED = "Bob is a hero who is allergic to the dawn."  # the words are Bob's, the claim is not

    def journal_with(self, policy, *facts):
        self.script.db.pre_compact_facts = policy
        self.llm.enqueue(tool_calls([("add_journal_entry", fact) for fact in facts]),
                         tool_calls([("noop", {})]))
        result = self.run_extraction()
        entries = self.journal()
        self.npc.db.journal = None
        return result, entries

    def test_a_fact_no_line_says_is_dropped_and_one_that_a_line_says_is_kept(self):
        kept = dict(ALLERGY, source=[self.said_alone["seq"]])
        result, entries = self.journal_with("reject", kept, dict(ALLERGY, content=self.GLUED))
        # the fact one line says is kept in the model's words, with its support (control)
        self.assertEqual([e["content"] for e in entries], [ALLERGY["content"]])
        self.assertEqual((entries[0]["grounding"], entries[0]["support"]), ("model", 1.0))
        self.assertEqual((result["facts_recorded"], result["facts_rejected"]), (1, 1))

    def test_a_fact_no_line_says_is_replaced_by_its_line_attributed(self):
        result, entries = self.journal_with("checked", dict(ALLERGY, content=self.GLUED))
        self.assertEqual([e["content"] for e in entries],
                         ["Bob said: Between us: I am allergic to peanuts."])
        self.assertEqual((entries[0]["grounding"], entries[0]["model_text"]),
                         ("replaced", self.GLUED))
        self.assertLess(entries[0]["model_support"], 0.7)
        self.assertEqual((result["facts_replaced"], result["facts_recorded"]), (1, 1))
        # the quoted line is attributed to its own message: Bob said it alone
        self.assertEqual(entries[0]["audience"], [self.char1.dbref])
        # the same line again, from the model's words that say it, is the same fact: merged
        result, entries = self.journal_with(
            "checked", dict(ALLERGY, content=self.GLUED),
            dict(ALLERGY, source=[self.said_alone["seq"]]))
        self.assertEqual(len(entries), 1)
        self.assertEqual(result["facts_recorded"], 1)

    def test_a_fact_quoting_a_line_nobody_said_is_refused_whatever_the_setting(self):
        from ai_contrib.core.grounding import check_fact, source_lines

        invented = dict(ALLERGY, content="Bob said: I am not allergic to peanuts.",
                        source=[self.said_alone["seq"]])
        # the one-line check alone keeps it: the words are Bob's line's
        self.assertTrue(check_fact(invented["content"], source_lines(self.script.history)).passed)
        real = dict(ALLERGY, content="Bob said: I am allergic to peanuts.",
                    source=[self.said_alone["seq"]])
        for policy in ("checked", "verbatim", "reject"):
            result, entries = self.journal_with(policy, invented, real)
            self.assertFalse(any("not allergic" in e["content"] for e in entries), policy)
            self.assertEqual(result["facts_rejected"], 1, (policy, result))
            # control: the quote as Bob said it is journaled
            self.assertEqual(len(entries), 1, policy)
            self.assertIn("allergic to peanuts", entries[0]["content"])

    def test_a_fact_replaced_by_its_line_is_said_by_that_line_s_speaker(self):
        asked = self.say("Bob", "Is the east room free? The storm last week kept me away.")
        self.say("Carol", "The east room has a leaking roof since the storm last week.")
        # the model's fact, told as Bob's and citing his line, is only Carol's line glued wrong
        glued = {"content": "Carol kept the east room away from the storm.", "importance": 6,
                 "speaker": "Bob", "source": [asked["seq"]], "_speaker": "Wren"}
        result, entries = self.journal_with("checked", glued)
        self.assertEqual(result["facts_replaced"], 1, result)
        self.assertEqual([e["content"] for e in entries], [
            "Carol said: The east room has a leaking roof since the storm last week."])
        # Bob's line repeats the quoted one's words, and the model said Bob: the line is Carol's
        self.assertEqual(entries[0]["speaker"], "Carol")
        # a fact kept in the model's words is told by the player whose line it cites (control)
        kept = dict(ALLERGY, source=[self.said_alone["seq"]], _speaker="Carol")
        result, entries = self.journal_with("checked", kept)
        self.assertEqual([(e["grounding"], e["speaker"]) for e in entries], [("model", "Bob")])


    def test_an_observation_replaced_by_its_line_is_filed_under_a_name_of_that_line(self):
        self.script.db.pre_compact_facts = "checked"
        self.say("Bob", "Carol keeps the keys of the cellar under the counter.")
        line = "Bob said: Carol keeps the keys of the cellar under the counter."
        filed = []
        # the model's sentence-long "entity" gives way to the line's speaker; a name the line
        # uses stays (control)
        for entity, observation in (("I am grateful to have keys. I", "is a hero who keeps the "
                                                                       "counter"),
                                    ("Carol", "is a hero who hides peanuts with the keys")):
            self.llm.enqueue(tool_calls([("update_entity_observation",
                                          {"entity": entity, "observation": observation})]),
                             tool_calls([("noop", {})]))
            result = self.run_extraction()
            self.assertEqual(result["facts_replaced"], 1, result)
            filed += [(e["entity"], e["content"]) for e in self.journal("observation")]
            self.npc.db.journal = None
        self.assertEqual(filed, [("Bob", f"Bob: {line}"), ("Carol", f"Carol: {line}")])


@override_settings(AI_MEMORY_ENABLED=False)  # the history is what this test reads
class TestJournalingLeavesTheContext(ExtractionTestCase):
    def test_a_sleep_that_journals_without_compacting_leaves_the_talk_and_not_the_tool_calls(self):
        from ai_contrib import rag_memory
        from ai_contrib.core.cuts import is_extraction_traffic

        self.say("Bob", "I owe Marta 3 silver.")
        self.fill(11)
        self.assertLess(self.script.token_usage(), 0.7)  # no compaction is due
        talk = [m["id"] for m in self.script.history]
        self.llm.enqueue(
            tool_calls([("add_journal_entry", {"content": "Bob owes Marta 3 silver.",
                                                "importance": 8})]),
            tool_calls([("add_journal_entry", {"content": "Bob owes Marta 3 silver.",
                                                "importance": 8})]),
            tool_calls([("noop", {})]))
        results = stored(wait_for(rag_memory.run_sleep_tick(self.script, self.npc)))
        self.assertEqual(results["pre_compaction_extraction"]["facts_recorded"], 1, results)
        self.assertFalse(results["context_compaction"].get("success") and
                         results["context_compaction"].get("compacted_messages"))
        # the facts are in the journal; the calls and results left the context for the
        # archive, every line of talk stayed
        self.assertEqual([e["content"] for e in self.journal()], ["Bob owes Marta 3 silver."])
        self.assertEqual([m for m in self.script.history if is_extraction_traffic(m)], [])
        self.assertEqual([m["id"] for m in self.script.history], talk)
        archived = self.script.archive.messages(0, self.script.archive.last_seq)
        self.assertTrue(any(m.get("role") == "tool" for m in archived))


class TestAudienceOfWhatWasRead(ExtractionTestCase):
    """A fact may merge a public line with a private one and cite only the first: it takes the
    audience of everything its request showed (``docs/design.md``, "Privacy by audience"),
    and the span is read one listener group at a time so that a public fact stays public."""

    def test_a_merged_fact_is_private_and_a_fact_of_public_lines_stays_public(self):
        wren, tamsin = self.char1.dbref, self.char2.dbref
        ledger = self.script.add_message(
            "user", "The guild ledger is bound in red leather.", name="Bob",
            metadata={"speaker": wren, "audience": sorted([wren, tamsin])})
        self.script.add_message(
            "user", "It hides in the cellar, behind the casks.", name="Bob",
            metadata={"speaker": wren, "audience": [wren]})
        public = {"content": "The guild ledger is bound in red leather.", "importance": 6,
                  "source": [ledger["seq"]]}
        merged = {"content": "Bob keeps the guild ledger hidden in the cellar behind the casks.",
                  "importance": 8, "source": [ledger["seq"]]}
        self.llm.enqueue(tool_calls([("add_journal_entry", public)]), tool_calls([("noop", {})]),
                         tool_calls([("add_journal_entry", merged)]), tool_calls([("noop", {})]))
        self.assertEqual(self.run_extraction()["facts_recorded"], 2)
        first, second = self.journal()
        # control: read from what Wren and Tamsin both heard, the fact is theirs
        self.assertEqual(first["content"], public["content"])
        self.assertEqual(first["audience"], sorted([wren, tamsin]))
        self.assertNotIn("cellar", prompt_text(self.llm.requests[0]))
        # read with the private line, the fact citing the public line is Wren's alone
        self.assertIn("cellar", second["content"])
        self.assertEqual(second["audience"], [wren])
        self.assertEqual(second["visibility"], "private")

    def test_a_public_fact_stays_public_beside_a_longer_private_talk(self):
        # one line Wren said in front of Tamsin, then a long talk with Marta alone: the view
        # of what both heard is read before Wren's own, however much longer his is
        wren, tamsin = self.char1.dbref, self.char2.dbref
        ledger = self.script.add_message(
            "user", "The guild ledger is bound in red leather.", name="Bob",
            metadata={"speaker": wren, "audience": sorted([wren, tamsin])})
        for i in range(12):
            self.script.add_message(
                "user", f"Between us, note {i}: it hides in the cellar, behind the casks.",
                name="Bob", metadata={"speaker": wren, "audience": [wren]})
        public = {"content": "The guild ledger is bound in red leather.", "importance": 6,
                  "source": [ledger["seq"]]}
        merged = {"content": "Bob keeps the guild ledger hidden in the cellar behind the casks.",
                  "importance": 8, "source": [ledger["seq"]]}

        def model(body):
            # a model that journals what each request shows, citing the public line only
            if any(m.get("role") == "tool" for m in body.get("messages") or []):
                return tool_calls([("noop", {})])
            text = prompt_text(body)
            calls = [("add_journal_entry", public)] if "red leather" in text else []
            if "cellar" in text:
                calls.append(("add_journal_entry", merged))
            return tool_calls(calls or [("noop", {})])

        self.llm.enqueue(*[respond(model)] * 8)
        self.assertEqual(self.run_extraction()["facts_recorded"], 2)
        first, second = self.journal()
        self.assertEqual(first["content"], public["content"])
        self.assertEqual(first["audience"], sorted([wren, tamsin]))
        # control: the fact read beside the private talk (stored in the words of a line it
        # could come from) is Wren's alone
        self.assertIn("cellar", second["content"])
        self.assertEqual(second["audience"], [wren])
        self.assertEqual(second["visibility"], "private")

    def test_a_request_lists_only_the_journal_facts_its_listeners_heard(self):
        # a fact written from a view takes the view's audience: a secret listed beside it as
        # "already in your journal" could be merged into it and leave with it
        from ai_contrib.memory.journal import add_entry, ensure_journal

        wren, tamsin = self.char1.dbref, self.char2.dbref
        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, "Bob hid the guild ledger in the cellar.", 8, "fact",
                  audience=[wren], visibility="private")
        add_entry(journal, "The guild ledger is bound in red leather.", 6, "fact",
                  audience=sorted([wren, tamsin]), visibility="private")
        add_entry(journal, "The fair is on Sunday.", 4, "fact")  # an admin's: public
        self.npc.db.journal = journal
        self.script.add_message(
            "user", "The ferry runs twice a day.", name="Bob",
            metadata={"speaker": wren, "audience": sorted([wren, tamsin])})
        self.llm.enqueue(*[tool_calls([("noop", {})])] * 4)
        self.run_extraction()
        systems = [body["messages"][0]["content"] for body in self.llm.requests]
        both = [text for body, text in zip(self.llm.requests, systems)
                if "Between us" not in prompt_text(body)]
        alone = [text for body, text in zip(self.llm.requests, systems)
                 if "Between us" in prompt_text(body)]
        self.assertTrue(both and alone, systems)
        for text in both:
            self.assertNotIn("cellar", text)
            self.assertIn("- The guild ledger is bound in red leather.", text)
            self.assertIn("- The fair is on Sunday.", text)
        # control: the view of what Bob heard alone lists his secret too
        for text in alone:
            self.assertIn("- Bob hid the guild ledger in the cellar.", text)
