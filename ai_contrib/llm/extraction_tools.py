"""
The pre-compaction tools and the two ways a model can call them.

Before compaction discards old messages the NPC gets a few turns to journal what it must not
forget (``docs/design.md``, "Pre-compaction fact extraction" and "Tool calls"). It may use
exactly three tools:

``noop()``
    Nothing (more) worth recording; ends the loop.
``add_journal_entry(content, importance, tags=None, source=None)``
    Record one fact in the character's journal (later consolidated into Mem0). ``source``
    lists the numbers (archive seqs) of the messages the fact comes from, as the extraction
    request shows them; the fact's speaker and audience are taken from those messages
    (``memory/provenance.py``), never from the call: a ``speaker`` argument or a
    ``public``/``private`` tag a model still writes is parsed and ignored.
``update_entity_observation(entity, observation, source=None)``
    Add one observation to the profile of a person, place or thing (``source`` as above).

Models call them in one of three ways, all parsed here into the same normalised *call* dict:

1. **Structured output**: the request carries :func:`structured_response_format`, a JSON
   schema (:func:`structured_schema`) of ``{"calls": [{"name": ..., "arguments": {...}}, ...]}`` whose items are exactly the
   three tools with their arguments' schemas; servers that constrain decoding to a schema
   (llama.cpp's server turns it into a grammar, OpenAI, vLLM) can then only answer with valid
   calls, which is what makes the embedded SmolLM2-135M usable here (``docs/design.md``,
   "Tool calls"): :func:`parse_structured_calls`.
2. **Native** OpenAI ``tool_calls`` (backends with tool support: OpenAI, vLLM, Ollama,
   llama-server with ``--jinja``): :func:`parse_native_tool_calls`.
3. **Text protocol** for models without tool support (the embedded SmolLM2-135M, base
   models): lines such as ``TOOL: add_journal_entry {"content": "...", "importance": 8}`` in the
   reply text, parsed leniently by :func:`parse_text_tool_calls` (code fences, single quotes,
   ``name(key="value")`` call syntax, ``{"name": ..., "arguments": ...}`` objects and trailing
   prose are all accepted). :data:`TEXT_PROTOCOL_INSTRUCTIONS` is the prompt text that teaches it.

A normalised call is a dict (:class:`Call`)::

    {"name": str, "arguments": dict, "id": str, "error": None | str}

``error`` is ``None`` for a well-formed call to one of the three tools; otherwise it starts with
``"unknown tool"`` (any other name: the caller's scope guard stops there) or
``"malformed"`` (arguments that could not be read, or a required argument missing). Parsing
never raises.

Pure module: no Evennia, Twisted or Django imports.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from typing import Any, TypedDict

from ..core.text import normalise_player_text

NOOP = "noop"
ADD_JOURNAL_ENTRY = "add_journal_entry"
UPDATE_ENTITY_OBSERVATION = "update_entity_observation"
TOOL_NAMES = (NOOP, ADD_JOURNAL_ENTRY, UPDATE_ENTITY_OBSERVATION)

#: The ``source`` argument: which messages of the conversation a fact or observation repeats.
SOURCE_SCHEMA = {
    "type": "array",
    "items": {"type": "integer"},
    "description": "The numbers of the messages this comes from (the number in brackets "
    "before each message of the conversation), e.g. [12, 15].",
}

#: OpenAI ``tools=`` schemas of the three pre-compaction tools.
TOOL_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": NOOP,
            "description": "Call this when there is nothing (more) worth recording. Ends the review.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
    {
        "type": "function",
        "function": {
            "name": ADD_JOURNAL_ENTRY,
            "description": (
                "Record one important fact in your journal so it survives when old conversation "
                "is forgotten: names, promises, debts, plans, dates, preferences, secrets."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "content": {
                        "type": "string",
                        "description": "The fact, as one self-contained sentence naming who and what.",
                    },
                    "importance": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 10,
                        "description": "1 = trivia, 10 = must never be forgotten.",
                    },
                    "tags": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": 'Optional keywords, e.g. ["promise", "quest"].',
                    },
                    "source": SOURCE_SCHEMA,
                },
                "required": ["content", "importance"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": UPDATE_ENTITY_OBSERVATION,
            "description": "Add one observation about a person, place or thing to what you know of it.",
            "parameters": {
                "type": "object",
                "properties": {
                    "entity": {
                        "type": "string",
                        "description": "Name of the person, place or thing.",
                    },
                    "observation": {"type": "string", "description": "What you observed about it."},
                    "source": SOURCE_SCHEMA,
                },
                "required": ["entity", "observation"],
            },
        },
    },
]

#: Characters a structured call's text arguments may take: the grammar stops a small model
#: from writing one endless "fact" that runs into the reply's token cap (invalid JSON).
STRUCTURED_TEXT_MAX_CHARS = 200
#: Calls one structured reply may hold (one request: a few facts, then the next iteration).
STRUCTURED_MAX_CALLS = 3


def _structured_text(description, max_chars=STRUCTURED_TEXT_MAX_CHARS, min_chars=12):
    """A text argument: a sentence (or name) starting with a capital letter, ``min_chars`` to
    ``max_chars`` characters, without brackets, braces, markup or quotes: a small model
    otherwise fills it with message numbers ("[2]") or JSON fragments (measured with
    SmolLM2-135M). The length is in the pattern, which llama.cpp's grammar honours."""
    body = "[^\\[\\]{}<>|#\\n\"\\\\]"
    return {"type": "string", "pattern": f"^[A-Z]{body}{{{min_chars - 1},{max_chars - 1}}}$",
            "minLength": min_chars, "maxLength": max_chars, "description": description}


def _structured_call(name, properties):
    """One item of a structured reply's ``calls``: a call of ``name`` whose arguments must all
    be given (a grammar cannot leave out an optional key the model needs, such as ``source``)."""
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": [name]},
            "arguments": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
                "additionalProperties": False,
            },
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def structured_schema(seqs=None, allow_noop=True, importance=True) -> dict[str, Any]:
    """
    JSON schema of a structured-output reply: ``{"calls": [call, ...]}`` (1 to
    :data:`STRUCTURED_MAX_CALLS` calls), each ``{"name": <tool>, "arguments": {...}}`` with the
    tool's arguments (``tags`` left out; ``importance`` and ``source`` required).

    Args:
        seqs (iterable[int], optional): the message numbers the request shows; ``source`` may
            then cite only these (a grammar otherwise lets a small model invent numbers).
        allow_noop (bool): offer ``noop``; without it the reply must record something (the
            first request of a run: a small model otherwise takes the exit before reading).
        importance (bool): ask for ``importance``; without it the fact's importance is not the
            model's to give (``AI_IMPORTANCE_SCORING`` other than ``"model"``), and a grammar
            would make the model write a number no one reads.

    Returns:
        dict: a JSON schema (a fresh dict).
    """
    seqs = sorted({int(seq) for seq in seqs or ()})
    number = {"type": "integer", "enum": seqs} if seqs else {"type": "integer", "minimum": 0}
    source = {"type": "array", "items": number, "minItems": 1, "maxItems": 4}
    fact = {"content": _structured_text(
        "The fact, as one self-contained sentence naming who and what.")}
    if importance:
        fact["importance"] = {"type": "integer", "minimum": 1, "maximum": 10}
    fact["source"] = source
    items = [
        _structured_call(ADD_JOURNAL_ENTRY, fact),
        _structured_call(
            UPDATE_ENTITY_OBSERVATION,
            {
                "entity": _structured_text("Name of the person, place or thing.", 40, 2),
                "observation": _structured_text("What you observed about it."),
                "source": source,
            },
        ),
    ]
    if allow_noop:
        items.append(_structured_call(NOOP, {}))
    return {
        "type": "object",
        "properties": {
            "calls": {
                "type": "array",
                "minItems": 1,
                "maxItems": STRUCTURED_MAX_CALLS,
                "items": {"anyOf": items},
            }
        },
        "required": ["calls"],
        "additionalProperties": False,
    }


def structured_response_format(seqs=None, allow_noop=True, importance=True
                               ) -> dict[str, Any]:
    """
    The ``response_format`` request field asking for :func:`structured_schema` (OpenAI's
    structured-output form, which llama.cpp's server and vLLM also read).

    Returns:
        dict: ``{"type": "json_schema", "json_schema": {"name": "journal_tool_calls",
        "schema": structured_schema(seqs, allow_noop, importance)}}``.
    """
    return {
        "type": "json_schema",
        "json_schema": {"name": "journal_tool_calls",
                        "schema": structured_schema(seqs, allow_noop, importance)},
    }


#: The facts the prompts' examples show: a small model copies them, so a call that repeats one
#: is not a fact of the conversation (:func:`repeats_example`).
EXAMPLE_FACTS = ("Alice is allergic to peanuts", "Carries a silver locket")


def repeats_example(text) -> bool:
    """True if ``text`` repeats one of :data:`EXAMPLE_FACTS` (case-insensitive)."""
    folded = " ".join(str(text or "").split()).casefold()
    return any(example.casefold() in folded for example in EXAMPLE_FACTS)


#: Prompt text for structured output: the same calls, written as one JSON object.
STRUCTURED_PROTOCOL_INSTRUCTIONS = """Answer with one JSON object listing your tool calls, for example:
{"calls": [{"name": "add_journal_entry", "arguments": {"content": "Alice is allergic to peanuts.", "importance": 8, "source": [12]}}, {"name": "update_entity_observation", "arguments": {"entity": "Alice", "observation": "Carries a silver locket.", "source": [15]}}]}
When nothing (more) is worth recording, answer:
{"calls": [{"name": "noop", "arguments": {}}]}"""

#: Prompt text teaching the text protocol to models without native tool calls.
TEXT_PROTOCOL_INSTRUCTIONS = """\
To use a tool, write one line per call in exactly this form, with the arguments as JSON:
TOOL: add_journal_entry {"content": "Alice is allergic to peanuts.", "importance": 8, "source": [12]}
TOOL: update_entity_observation {"entity": "Alice", "observation": "Carries a silver locket.", "source": [15]}
When nothing (more) is worth recording, write:
TOOL: noop {}"""

_REQUIRED = {
    NOOP: (),
    ADD_JOURNAL_ENTRY: ("content",),
    UPDATE_ENTITY_OBSERVATION: ("entity", "observation"),
}
# positional order used when a model writes add_journal_entry("fact", 8)
_POSITIONAL = {
    NOOP: (),
    ADD_JOURNAL_ENTRY: ("content", "importance", "tags", "speaker"),
    UPDATE_ENTITY_OBSERVATION: ("entity", "observation"),
}

_FENCE_RE = re.compile(r"```[a-zA-Z0-9_-]*")
# "TOOL: name ..." / "Tool call: name ..." / "Action: name ..." at the start of a line
_TOOL_LINE_RE = re.compile(
    r"^[\s>*\-\d.)]*(tool(?:[ _]?call)?|call|action)\s*[:=]\**\s*[`\"']?([A-Za-z_][\w.-]*)[`\"']?(.*)$",
    re.IGNORECASE,
)
_KNOWN_CALL_RE = re.compile(r"\b(" + "|".join(TOOL_NAMES) + r")\s*\(")
_KV_RE = re.compile(r"""(\w+)\s*[=:]\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^,]+)""")


def new_call_id() -> str:
    """Return a fresh OpenAI-style tool call id (``"call_"`` + 16 hex characters)."""
    return "call_" + uuid.uuid4().hex[:16]


def model_data(value) -> Any:
    """
    ``value`` (decoded tool arguments: dicts, lists, strings, numbers) with every string
    normalised as a player's line is (:func:`ai_contrib.core.text.normalise_player_text`: one
    line, control and invisible characters dropped, chat-template special tokens broken up, at
    most ``DEFAULT_MAX_CHARS`` characters): what a model wrote is data, whether it is journaled,
    shown or sent back in the next request (``docs/design.md``, "Player text is data").
    Keys are kept as they are (they name parameters).
    """
    if isinstance(value, str):
        return normalise_player_text(value)
    if isinstance(value, dict):
        return {key: model_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [model_data(item) for item in value]
    return value


class Call(TypedDict):
    """A normalised call (module docstring)."""

    name: str  #: the tool's name as the model wrote it, trimmed
    arguments: dict[str, Any]  #: the decoded arguments, strings normalised
    id: str  #: the model's id, or a fresh one
    error: str | None  #: None for a well-formed call to one of the tools


def make_call(name, arguments, call_id=None, error=None) -> Call:
    """
    Build a normalised call dict and validate it; the arguments' strings are normalised
    (:func:`model_data`).

    Args:
        name (str): tool name as the model wrote it.
        arguments (dict | None): decoded arguments (``None`` when they could not be read).
        call_id (str, optional): the model's id; a fresh one is made if missing.
        error (str, optional): a parse error already found.

    Returns:
        Call
    """
    call = {
        "name": (name or "").strip().rstrip(".:-"),
        "arguments": model_data(arguments) if isinstance(arguments, dict) else {},
        "id": call_id or new_call_id(),
        "error": error,
    }
    if call["error"] is None and arguments is not None and not isinstance(arguments, dict):
        call["error"] = "malformed arguments: expected an object"
    if call["error"] is None:
        call["error"] = validate_call(call)
    elif call["name"] and call["name"] not in TOOL_NAMES:
        call["error"] = f"unknown tool {call['name']!r}"
    return call


def validate_call(call) -> str | None:
    """
    Check and coerce a call's arguments in place.

    Coercions: ``importance`` to an int clamped to 1-10 (dropped if unreadable, so the caller
    scores it), ``tags`` from a comma-separated string to a list of strings, ``source`` to a
    list of ints (:func:`coerce_source`; dropped if it names no number), string arguments
    stripped.

    Returns:
        str | None: ``None`` if the call is usable, else an error string starting with
        ``"unknown tool"`` or ``"malformed"``.
    """
    name = call.get("name")
    if name not in TOOL_NAMES:
        return f"unknown tool {name!r}"
    args = call["arguments"]
    for key in ("content", "entity", "observation", "speaker"):
        if key in args and args[key] is not None:
            args[key] = str(args[key]).strip()
    for key in _REQUIRED[name]:
        if not args.get(key):
            return f"malformed arguments: {name} needs a non-empty {key!r}"
    if name == ADD_JOURNAL_ENTRY:
        if "importance" in args:
            importance = _coerce_importance(args["importance"])
            if importance is None:
                args.pop("importance")
            else:
                args["importance"] = importance
        if "tags" in args:
            args["tags"] = _coerce_tags(args["tags"])
        if not args.get("speaker"):
            args.pop("speaker", None)
    if name in (ADD_JOURNAL_ENTRY, UPDATE_ENTITY_OBSERVATION) and "source" in args:
        source = coerce_source(args["source"])
        if source:
            args["source"] = source
        else:
            # unreadable citations count as none: the fact is then attributed to the whole span
            args.pop("source")
    return None


def coerce_source(value) -> list:
    """
    The message numbers of a ``source`` argument as a list of ints, first occurrence order.

    Models write ``[12, 15]``, ``12``, ``"12, 15"``, ``["#12"]`` or ``"messages 12 and 15"``:
    every run of digits counts. Booleans and anything without digits give ``[]``.

    Returns:
        list[int]
    """
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        return [value]
    items = value if isinstance(value, (list, tuple)) else [value]
    numbers = []
    for item in items:
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            numbers.append(item)
        elif isinstance(item, float) and item.is_integer():
            numbers.append(int(item))
        elif isinstance(item, str):
            numbers.extend(int(digits) for digits in re.findall(r"\d+", item))
    return list(dict.fromkeys(numbers))


def _coerce_importance(value):
    try:
        number = int(round(float(str(value).strip().split("/")[0])))
    except (TypeError, ValueError, OverflowError):  # "Infinity" or 1e999: no importance given
        return None
    return max(1, min(10, number))


def _coerce_tags(value):
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)):
        value = [value]
    return [str(tag).strip() for tag in value if str(tag).strip()]


def decode_arguments(raw) -> tuple:
    """
    Decode tool arguments written by a model, leniently.

    Accepts a dict, a JSON object string, a Python-literal dict (single quotes, ``True``), a
    JSON object followed by trailing prose, or ``key=value`` / ``key: value`` pairs. An empty
    string means no arguments.

    Returns:
        tuple: ``(arguments: dict | None, error: str | None)``; never raises.
    """
    if raw is None:
        return {}, None
    if isinstance(raw, dict):
        return dict(raw), None
    if not isinstance(raw, str):
        return None, f"malformed arguments: {type(raw).__name__}"
    text = raw.strip().strip("`").strip()
    if not text or text in ("{}", "()"):
        return {}, None
    start = text.find("{")
    if start != -1:
        obj = _first_object(text[start:])
        if obj is not None:
            return obj, None
    pairs = _KV_RE.findall(text)
    if pairs:
        return {key: _literal(value) for key, value in pairs}, None
    return None, f"malformed arguments: {text[:80]!r}"


def _first_object(text):
    """Decode the first ``{...}`` object at the start of ``text`` (JSON, then Python literal)."""
    try:
        obj, _end = json.JSONDecoder().raw_decode(text)
        if isinstance(obj, dict):
            return obj
    except ValueError:
        pass
    end = _balanced_end(text)
    if end is None:
        return None
    chunk = text[: end + 1]
    for attempt in (chunk, _pythonise(chunk)):
        try:
            obj = ast.literal_eval(attempt)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(obj, dict):
            return obj
    try:
        obj = json.loads(chunk, strict=False)
        return obj if isinstance(obj, dict) else None
    except ValueError:
        return None


_JSON_LITERALS = {"true": "True", "false": "False", "null": "None"}
_WORD_RE = re.compile(r"[A-Za-z_]\w*")


def _pythonise(chunk):
    """JSON literals (true/false/null) outside quotes as Python's, for ``ast.literal_eval``."""
    quoted = _quoted(chunk)
    out = []
    i = 0
    while i < len(chunk):
        word = None if quoted[i] else _WORD_RE.match(chunk, i)
        if word:
            out.append(_JSON_LITERALS.get(word.group(0), word.group(0)))
            i += len(word.group(0))
            continue
        out.append(chunk[i])
        i += 1
    return "".join(out)


def _quoted(text):
    """For each character of ``text``, whether it lies in a quoted string (single or double
    quotes, backslash escapes; the quote characters themselves count as quoted)."""
    flags = []
    quote = None
    escaped = False
    for ch in text:
        if quote:
            flags.append(True)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
            flags.append(True)
        else:
            flags.append(False)
    return flags


def _close_index(text, depth, opens, closes):
    """
    Index in ``text`` where the bracket depth, starting at ``depth``, falls back to 0; quoted
    strings (single or double, with backslash escapes) are skipped. None if it never does.
    """
    quoted = _quoted(text)
    for i, ch in enumerate(text):
        if quoted[i]:
            continue
        if ch in opens:
            depth += 1
        elif ch in closes:
            depth -= 1
            if depth == 0:
                return i
    return None


def _balanced_end(text):
    """Index of the brace closing the one at ``text[0]``, respecting quotes; None if unclosed."""
    return _close_index(text, 0, "{", "}")


def _literal(value):
    value = value.strip().rstrip(")").strip()
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value.strip("\"'")


def parse_native_tool_calls(tool_calls) -> list[Call]:
    """
    Normalise native OpenAI ``tool_calls`` (from ``ChatResult.tool_calls``).

    Args:
        tool_calls (list | None): items shaped ``{"id", "type": "function", "function":
            {"name", "arguments": str(JSON) | dict}}``; items already shaped
            ``{"name", "arguments"}`` are accepted too.

    Returns:
        list[dict]: normalised calls (module docstring), in the model's order; never raises.
    """
    calls = []
    for item in tool_calls or []:
        if not isinstance(item, dict):
            calls.append(make_call("", None, error=f"malformed tool call: {item!r:.80}"))
            continue
        function = item.get("function") if isinstance(item.get("function"), dict) else item
        name = function.get("name") or ""
        arguments, error = decode_arguments(function.get("arguments"))
        calls.append(make_call(name, arguments, call_id=item.get("id"), error=error))
    return calls


def parse_text_tool_calls(text) -> list[Call]:
    """
    Find text-protocol tool calls in a model's reply.

    Recognised, in order of appearance (code fences are ignored):

    - ``TOOL: name {json}`` lines (also ``Tool call:``, ``Action:``; single-quoted dicts,
      ``key=value`` pairs and trailing prose after the object are tolerated);
    - ``name(key="value", ...)`` or ``name("content", 8)`` for the three known tool names;
    - JSON objects ``{"name": ..., "arguments": {...}}`` (as in ``<tool_call>`` blocks).

    Unknown names on a ``TOOL:`` line or in a ``{"name": ...}`` object are returned with an
    ``"unknown tool"`` error so the caller can stop; free prose is ignored.

    Args:
        text (str | None): the reply content.

    Returns:
        list[dict]: normalised calls; empty if the text holds none. Never raises.
    """
    if not text:
        return []
    try:
        return _parse_text(text)
    except Exception as err:  # a parser bug must not break the caller's loop
        return [make_call("", None, error=f"malformed tool call text: {err}")]


def _parse_text(text):
    clean = _FENCE_RE.sub("\n", text)
    found = []  # (position, call)
    for match in re.finditer(r"^.*$", clean, re.MULTILINE):
        line = match.group(0)
        tool_line = _TOOL_LINE_RE.match(line)
        if tool_line:
            kind, name, rest = tool_line.group(1), tool_line.group(2), tool_line.group(3).strip()
            # "Action: record the fact" is prose; only "TOOL:" lines, known names or an
            # argument list make a call of an unknown name
            if not (
                kind.lower().startswith("tool")
                or name.rstrip(".:-") in TOOL_NAMES
                or rest.startswith(("{", "("))
            ):
                tool_line = None
        if tool_line:
            if rest.startswith("("):
                arguments, error = _call_arguments(
                    name, rest[1:], clean, match.start() + line.find("(") + 1
                )
            else:
                arguments, error = _line_arguments(
                    rest, clean, match.start() + line.find(rest) if rest else 0
                )
            found.append((match.start(), make_call(name, arguments, error=error)))
            continue
        for call_match in _KNOWN_CALL_RE.finditer(line):
            name = call_match.group(1)
            offset = match.start() + call_match.end()
            arguments, error = _call_arguments(name, clean[offset:], clean, offset)
            found.append(
                (match.start() + call_match.start(), make_call(name, arguments, error=error))
            )
    if not found:
        for position, call in _json_object_calls(clean):
            found.append((position, call))
    found.sort(key=lambda pair: pair[0])
    return [call for _pos, call in found]


def _line_arguments(rest, full_text, offset):
    """Arguments after ``TOOL: name``; a JSON object may continue over several lines."""
    if not rest:
        return {}, None
    if rest.startswith("{"):
        obj = _first_object(full_text[offset:])
        if obj is not None:
            return obj, None
    return decode_arguments(rest)


def _call_arguments(name, after_paren, full_text, offset):
    """Arguments of ``name(`` ... ``)`` written in Python call syntax."""
    end = _closing_paren(after_paren)
    if end is None:
        return None, f"malformed arguments: unclosed call to {name}"
    inner = after_paren[:end].strip()
    if not inner:
        return {}, None
    if inner.startswith("{"):
        return decode_arguments(inner)
    try:
        node = ast.parse(f"f({inner})", mode="eval").body
        args = {}
        positional = _POSITIONAL.get(name, ())
        for index, arg in enumerate(node.args):
            if index < len(positional):
                args[positional[index]] = ast.literal_eval(arg)
        for keyword in node.keywords:
            if keyword.arg:
                args[keyword.arg] = ast.literal_eval(keyword.value)
        return args, None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return decode_arguments(inner)


def _closing_paren(text):
    """Index of the parenthesis closing a call whose ``(`` came just before ``text``."""
    return _close_index(text, 1, "([{", ")]}")


def _json_object_calls(text):
    """``{"name": ..., "arguments": ...}`` objects anywhere in the text."""
    position = 0
    while True:
        start = text.find("{", position)
        if start == -1:
            return
        obj = _first_object(text[start:])
        end = _balanced_end(text[start:])
        position = start + (end + 1 if end is not None else 1)
        if not isinstance(obj, dict):
            continue
        name = obj.get("name") or obj.get("tool") or obj.get("function")
        if isinstance(name, dict):  # {"function": {"name": ..., "arguments": ...}}
            obj, name = name, name.get("name")
        if not isinstance(name, str):
            continue
        raw_args = obj.get("arguments", obj.get("parameters", obj.get("args", {})))
        arguments, error = decode_arguments(raw_args)
        yield start, make_call(name, arguments, error=error)


def parse_structured_calls(content) -> list[Call]:
    """
    The calls of a structured-output reply (:func:`structured_schema`): ``{"calls": [{"name",
    "arguments"}, ...]}``. A single call object, or a list of them, is accepted too.

    Args:
        content (str | None): ``ChatResult.content``.

    Returns:
        list[dict]: normalised calls (module docstring); ``[]`` when the text is not such an
        object (e.g. cut off at the token cap). Never raises.
    """
    try:
        data = json.loads(content or "")
    except ValueError:
        return []
    if isinstance(data, dict) and "calls" in data:
        data = data["calls"]
    items = data if isinstance(data, list) else [data]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            continue
        arguments, error = decode_arguments(item.get("arguments", {}))
        calls.append(make_call(item["name"], arguments, error=error))
    return calls


def parse_tool_calls(tool_calls=None, content=None, structured=False) -> tuple:
    """
    Normalised calls from a chat reply: native ``tool_calls`` first, then (when the request
    asked for structured output) the reply as :func:`structured_schema`, else the text protocol
    (which also finds ``{"name", "arguments"}`` objects in a structured reply cut short).

    Args:
        tool_calls (list | None): ``ChatResult.tool_calls``.
        content (str | None): ``ChatResult.content``.
        structured (bool): the request carried :func:`structured_response_format`.

    Returns:
        tuple: ``(calls: list[dict], mode: "native" | "structured" | "text" | None)``; mode is
        ``None`` when the reply holds no call at all.
    """
    calls = parse_native_tool_calls(tool_calls)
    if calls:
        return calls, "native"
    if structured:
        calls = parse_structured_calls(content)
        if calls:
            return calls, "structured"
    calls = parse_text_tool_calls(content)
    if calls:
        return calls, "text"
    return [], None


def to_openai_tool_calls(calls) -> list:
    """
    Render normalised calls as an assistant message's OpenAI ``tool_calls`` field.

    Returns:
        list[dict]: ``[{"id", "type": "function", "function": {"name", "arguments": str(JSON)}}]``.
    """
    return [
        {
            "id": call["id"],
            "type": "function",
            "function": {
                "name": call["name"],
                "arguments": json.dumps(call["arguments"], ensure_ascii=False),
            },
        }
        for call in calls
    ]


def format_text_call(call) -> str:
    """Render one normalised call as a text-protocol line (``TOOL: name {json}``)."""
    return f"TOOL: {call['name']} {json.dumps(call['arguments'], ensure_ascii=False)}"
