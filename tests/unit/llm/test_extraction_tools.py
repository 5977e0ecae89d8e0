"""
The pre-compaction tools: schemas, native tool-call parsing, and the lenient text protocol.
"""

import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ai_contrib.llm import extraction_tools as tools
from ai_contrib.llm.extraction_tools import (
    ADD_JOURNAL_ENTRY,
    NOOP,
    TOOL_NAMES,
    TOOL_SCHEMAS,
    UPDATE_ENTITY_OBSERVATION,
    decode_arguments,
    format_text_call,
    parse_native_tool_calls,
    parse_text_tool_calls,
    parse_tool_calls,
    to_openai_tool_calls,
)


def _native(name, arguments, call_id="call_1"):
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# ------------------------------------------------------------------------------- schemas


def test_schemas_are_the_three_tools_in_openai_shape():
    names = [schema["function"]["name"] for schema in TOOL_SCHEMAS]
    assert names == [NOOP, ADD_JOURNAL_ENTRY, UPDATE_ENTITY_OBSERVATION]
    for schema in TOOL_SCHEMAS:
        assert schema["type"] == "function"
        params = schema["function"]["parameters"]
        assert params["type"] == "object"
        assert set(params["required"]) <= set(params["properties"])
    add = TOOL_SCHEMAS[1]["function"]["parameters"]
    assert add["required"] == ["content", "importance"]
    assert set(add["properties"]) == {"content", "importance", "tags", "source"}
    json.dumps(TOOL_SCHEMAS)  # serialisable as a request body


def test_text_protocol_instructions_parse_as_the_calls_they_show():
    calls = parse_text_tool_calls(tools.TEXT_PROTOCOL_INSTRUCTIONS)
    assert [c["name"] for c in calls] == [ADD_JOURNAL_ENTRY, UPDATE_ENTITY_OBSERVATION, NOOP]
    assert all(c["error"] is None for c in calls)


# ------------------------------------------------------------------------------- native


def test_native_calls_keep_ids_and_order():
    calls = parse_native_tool_calls(
        [
            _native(
                ADD_JOURNAL_ENTRY, {"content": "Alice is allergic to peanuts", "importance": 8}, "a"
            ),
            _native(NOOP, {}, "b"),
        ]
    )
    assert [(c["name"], c["id"]) for c in calls] == [(ADD_JOURNAL_ENTRY, "a"), (NOOP, "b")]
    assert calls[0]["arguments"] == {"content": "Alice is allergic to peanuts", "importance": 8}
    assert all(c["error"] is None for c in calls)


def test_native_arguments_as_object_or_empty_string():
    calls = parse_native_tool_calls(
        [
            {
                "id": "x",
                "function": {
                    "name": UPDATE_ENTITY_OBSERVATION,
                    "arguments": {"entity": "Bob", "observation": "limps"},
                },
            },
            {"id": "y", "function": {"name": NOOP, "arguments": ""}},
        ]
    )
    assert calls[0]["arguments"] == {"entity": "Bob", "observation": "limps"}
    assert calls[1]["arguments"] == {} and calls[1]["error"] is None


def test_native_coercions_importance_and_tags():
    (call,) = parse_native_tool_calls(
        [
            _native(
                ADD_JOURNAL_ENTRY,
                {"content": " Bob owes 5 gold ", "importance": "12", "tags": "debt, gold"},
            )
        ]
    )
    assert call["error"] is None
    assert call["arguments"] == {
        "content": "Bob owes 5 gold",
        "importance": 10,
        "tags": ["debt", "gold"],
    }


def test_source_is_read_as_message_numbers_and_dropped_when_it_names_none():
    (native,) = parse_native_tool_calls(
        [_native(ADD_JOURNAL_ENTRY, {"content": "x y z", "source": ["#12", 15.0, "12", True]})]
    )
    assert native["error"] is None and native["arguments"]["source"] == [12, 15]
    (text,) = parse_text_tool_calls(
        'TOOL: update_entity_observation {"entity": "Bob", "observation": "limps", '
        '"source": "messages 3 and 4"}'
    )
    assert text["error"] is None and text["arguments"]["source"] == [3, 4]
    (vague,) = parse_native_tool_calls(
        [_native(ADD_JOURNAL_ENTRY, {"content": "x y z", "source": "the last one"})]
    )
    assert vague["error"] is None and "source" not in vague["arguments"]
    assert tools.coerce_source(7) == [7] and tools.coerce_source(None) == []
    assert tools.coerce_source(False) == []


@pytest.mark.parametrize("importance", ["very", "Infinity", 1e999, "9e400", "-inf"])
def test_native_unreadable_importance_is_dropped_not_fatal(importance):
    (call,) = parse_native_tool_calls(
        [_native(ADD_JOURNAL_ENTRY, {"content": "x y z", "importance": importance})]
    )
    assert call["error"] is None
    assert "importance" not in call["arguments"]
    (control,) = parse_native_tool_calls(
        [_native(ADD_JOURNAL_ENTRY, {"content": "x y z", "importance": "7"})])
    assert control["arguments"]["importance"] == 7


def test_native_unknown_tool_is_reported():
    (call,) = parse_native_tool_calls([_native("search_memory", {"query": "gold"})])
    assert call["error"].startswith("unknown tool")
    assert call["name"] == "search_memory"


@pytest.mark.parametrize(
    "arguments",
    ['{"content": "unterminated', '{"importance": 5}', '{"content": ""}', "[1, 2]"],
)
def test_native_malformed_arguments_are_reported(arguments):
    (call,) = parse_native_tool_calls([_native(ADD_JOURNAL_ENTRY, arguments)])
    assert call["error"].startswith("malformed")


def test_native_garbage_items_never_raise():
    calls = parse_native_tool_calls(["junk", None, {"function": None}, 5])
    assert len(calls) == 4
    assert all(c["error"] for c in calls)


def test_entity_observation_needs_both_fields():
    (call,) = parse_native_tool_calls([_native(UPDATE_ENTITY_OBSERVATION, {"entity": "Bob"})])
    assert call["error"].startswith("malformed") and "observation" in call["error"]


# ------------------------------------------------------------------------------- text protocol


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            'TOOL: add_journal_entry {"content": "Alice is allergic to peanuts", "importance": 8} -- done',
            [(ADD_JOURNAL_ENTRY, {"content": "Alice is allergic to peanuts", "importance": 8})],
        ),
        (
            "```\nTOOL: add_journal_entry {'content': 'Bob owes 5 gold', 'importance': '7'}\nTOOL: noop {}\n```",
            [(ADD_JOURNAL_ENTRY, {"content": "Bob owes 5 gold", "importance": 7}), (NOOP, {})],
        ),
        (
            'Sure! add_journal_entry(content="The quest ends on Friday", importance=9) and that is all.',
            [(ADD_JOURNAL_ENTRY, {"content": "The quest ends on Friday", "importance": 9})],
        ),
        (
            'add_journal_entry("Alice likes tea", 4)\nnoop()',
            [(ADD_JOURNAL_ENTRY, {"content": "Alice likes tea", "importance": 4}), (NOOP, {})],
        ),
        (
            '<tool_call>{"name": "update_entity_observation", "arguments": {"entity": "Alice", "observation": "wears a locket"}}</tool_call>',
            [(UPDATE_ENTITY_OBSERVATION, {"entity": "Alice", "observation": "wears a locket"})],
        ),
        ("**TOOL:** noop", [(NOOP, {})]),
        ("1. Tool call: noop.", [(NOOP, {})]),
        (
            'TOOL: add_journal_entry content="x y z", importance=3',
            [(ADD_JOURNAL_ENTRY, {"content": "x y z", "importance": 3})],
        ),
        (
            'TOOL: add_journal_entry {\n  "content": "spread over lines",\n  "importance": 2, "speaker": "Bob"\n}',
            [
                (
                    ADD_JOURNAL_ENTRY,
                    {"content": "spread over lines", "importance": 2, "speaker": "Bob"},
                )
            ],
        ),
        (
            "TOOL: add_journal_entry {'content': 'uses true', 'importance': 5, 'tags': ['a'], 'x': true}",
            [
                (
                    ADD_JOURNAL_ENTRY,
                    {"content": "uses true", "importance": 5, "tags": ["a"], "x": True},
                )
            ],
        ),
    ],
)
def test_text_protocol_lenient_forms(text, expected):
    calls = parse_text_tool_calls(text)
    assert [(c["name"], c["arguments"]) for c in calls] == expected
    assert all(c["error"] is None for c in calls)
    assert len({c["id"] for c in calls}) == len(calls)


def test_text_protocol_unknown_tool_is_reported():
    (call,) = parse_text_tool_calls('TOOL: search_memory {"query": "x"}')
    assert call["name"] == "search_memory"
    assert call["error"].startswith("unknown tool")


def test_text_protocol_malformed_arguments_are_reported():
    (call,) = parse_text_tool_calls('TOOL: add_journal_entry {"content": "never closed')
    assert call["name"] == ADD_JOURNAL_ENTRY
    assert call["error"].startswith("malformed")


def test_prose_without_calls_gives_nothing():
    assert parse_text_tool_calls("I have nothing to add. The noop tool is nice.") == []
    assert parse_text_tool_calls("Action: record the fact about Bob.\nCall: me tomorrow") == []
    (call,) = parse_text_tool_calls('Action: search_memory {"query": "Bob"}')
    assert call["error"].startswith("unknown tool")
    assert parse_text_tool_calls("") == []
    assert parse_text_tool_calls(None) == []


def test_parse_tool_calls_prefers_native_then_text():
    native = [_native(NOOP, {})]
    calls, mode = parse_tool_calls(
        native, 'TOOL: add_journal_entry {"content": "ignored here", "importance": 3}'
    )
    assert mode == "native" and [c["name"] for c in calls] == [NOOP]
    calls, mode = parse_tool_calls([], "TOOL: noop {}")
    assert mode == "text" and [c["name"] for c in calls] == [NOOP]
    assert parse_tool_calls([], "just words") == ([], None)


def test_openai_rendering_round_trips():
    calls = parse_text_tool_calls(
        'TOOL: add_journal_entry {"content": "Ünïcode fact", "importance": 6}'
    )
    rendered = to_openai_tool_calls(calls)
    assert rendered[0]["type"] == "function" and rendered[0]["id"] == calls[0]["id"]
    again = parse_native_tool_calls(rendered)
    assert again[0]["arguments"] == calls[0]["arguments"]


def test_decode_arguments_forms():
    assert decode_arguments(None) == ({}, None)
    assert decode_arguments("()") == ({}, None)
    assert decode_arguments({"a": 1}) == ({"a": 1}, None)
    args, err = decode_arguments("{'a': 'b'} and then some prose")
    assert args == {"a": "b"} and err is None
    args, err = decode_arguments(42)
    assert args is None and err.startswith("malformed")


# ------------------------------------------------------------------------------- properties

_text_value = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=60
).filter(lambda s: s.strip() and "\n" not in s and "\r" not in s)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_text_parser_never_raises(text):
    calls = parse_text_tool_calls(text)
    for call in calls:
        assert set(call) == {"name", "arguments", "id", "error"}
        assert isinstance(call["arguments"], dict)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=20),
            st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
        ),
        max_size=5,
    )
)
def test_native_parser_never_raises(items):
    calls = parse_native_tool_calls(items)
    assert len(calls) == len(items)


@settings(max_examples=150, deadline=None)
@given(
    content=_text_value,
    importance=st.integers(min_value=1, max_value=10),
    speaker=st.one_of(st.none(), _text_value),
)
def test_formatted_text_call_parses_back(content, importance, speaker):
    args = {"content": content, "importance": importance}
    if speaker is not None:
        args["speaker"] = speaker
    call = tools.make_call(ADD_JOURNAL_ENTRY, args)
    # a content of control characters alone is normalised away: no fact to format
    assume(call["error"] is None)
    line = format_text_call(call)
    (back,) = [c for c in parse_text_tool_calls(line) if c["name"] in TOOL_NAMES][:1]
    assert back["error"] is None
    assert back["arguments"] == call["arguments"]


# --- structured output --------------------------------------------------------------------------


def test_structured_schema_offers_exactly_the_tools_with_every_argument_required():
    schema = tools.structured_schema(seqs=[12, 3, 12], allow_noop=True)
    items = schema["properties"]["calls"]["items"]["anyOf"]
    assert [i["properties"]["name"]["enum"][0] for i in items] == list(
        (tools.ADD_JOURNAL_ENTRY, tools.UPDATE_ENTITY_OBSERVATION, tools.NOOP))
    journal = items[0]["properties"]["arguments"]
    assert journal["required"] == ["content", "importance", "source"]
    assert journal["properties"]["source"]["items"]["enum"] == [3, 12]
    assert journal["additionalProperties"] is False
    first = tools.structured_schema(allow_noop=False)
    assert tools.NOOP not in json.dumps(first)
    assert tools.structured_response_format()["json_schema"]["name"] == "journal_tool_calls"


def test_parse_structured_calls():
    content = json.dumps({"calls": [
        {"name": "add_journal_entry",
         "arguments": {"content": "Bob owes 3 silver.", "importance": 7, "source": [4]}},
        {"name": "noop", "arguments": {}},
    ]})
    calls, mode = tools.parse_tool_calls(None, content, structured=True)
    assert mode == "structured"
    assert [(c["name"], c["error"]) for c in calls] == [("add_journal_entry", None), ("noop", None)]
    assert calls[0]["arguments"]["source"] == [4]
    # a reply cut at the token cap: the complete call objects are still read
    cut = content[: content.index('{"name": "noop"')]
    calls, mode = tools.parse_tool_calls(None, cut, structured=True)
    assert (mode, [c["name"] for c in calls]) == ("text", ["add_journal_entry"])
    assert tools.parse_structured_calls("not json") == []
    assert tools.parse_structured_calls('{"calls": [1, {"x": 2}]}') == []


def test_refuses_response_format():
    from ai_contrib.llm.client import LLMContextOverflowError, LLMHTTPError, \
        refuses_response_format

    named = '{"error": {"message": "Unsupported parameter: \'response_format\'"}}'
    assert refuses_response_format(LLMHTTPError(400, named))
    assert refuses_response_format(LLMHTTPError(422, "json_schema is not supported"))
    assert not refuses_response_format(LLMHTTPError(400, "bad request"))
    assert not refuses_response_format(LLMHTTPError(500, named))
    assert not refuses_response_format(LLMContextOverflowError(400, named))
    assert not refuses_response_format(ValueError(named))


def test_repeats_example():
    assert tools.repeats_example("alice is allergic to PEANUTS, she said")
    assert tools.repeats_example("Carries a  silver locket.: and more")
    assert not tools.repeats_example("Lena is allergic to fish.")
