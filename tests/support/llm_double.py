"""
A real OpenAI-compatible HTTP server on 127.0.0.1 that tests script: the LLM double.

Tests talk to it over real sockets with the real :class:`ai_contrib.llm.client.LLMClient`, so the
whole HTTP path (pooling, keep-alive, timeouts, error mapping) is exercised. It runs in a
background thread (stdlib ``ThreadingHTTPServer``), so it serves trial/Twisted tests (whose reactor
runs in the test thread) and plain pytest tests alike.

Endpoints:

- ``POST /v1/chat/completions``: answers with the next queued behaviour, or the default responder;
- ``POST /v1/completions`` (text completion): the same, a reply's text sent as ``choices[0].text``;
- ``GET /v1/models`` and ``GET /health``: fixed small answers;
- ``GET /props``: llama.cpp's server properties, when the double has an ``n_ctx`` or a
  ``model_path`` (see :class:`LLMDouble`);
- anything else: HTTP 404.

Strict mode (``LLMDouble(strict=True)``) answers a request carrying a field that OpenAI's API
does not know (:data:`OPENAI_CHAT_FIELDS`, :data:`OPENAI_COMPLETION_FIELDS`, message fields
:data:`OPENAI_MESSAGE_FIELDS`) as OpenAI's API does: HTTP 400 with ``{"error": {"message":
"Unrecognized request argument supplied: repeat_penalty", "type": "invalid_request_error",
"param": null, "code": null}}``, before any queued behaviour is used. The lists are OpenAI's API
reference, written out here rather than imported from the code under test.

Behaviours (module functions returning a :class:`Behaviour`, queued with :meth:`LLMDouble.enqueue`
and used first in, first out, one per chat request):

- :func:`reply` ``(content, finish_reason="stop", usage=None)``: a normal completion;
- :func:`tool_calls` ``(calls, content="")``: a completion with native tool calls, each call given
  as ``("name", {args})`` or as a full OpenAI tool-call dict;
- :func:`structured` ``(*calls)``: a structured-output extraction reply (``{"calls": [...]}``);
- :func:`http_error` ``(status=500, body=None)``: that status with an OpenAI-style error body;
- :func:`sleep` ``(seconds, then=None)``: wait (seconds), then answer with ``then`` (default: the
  default responder). Use a sleep longer than the client's timeout to provoke a timeout;
- :func:`hold` ``(gate, then=None)``: answer with ``then`` only once the test sets ``gate`` (a
  ``threading.Event``): for what a test does while a request is under way, however slow the
  machine (a ``sleep`` would end on its own, whether the test had done it or not);
- :func:`malformed` ``(body=...)``: HTTP 200 with a body that is not JSON;
- :func:`raw_body` ``(body, status=200)``: exactly these bytes (hand-written JSON);
- :func:`json_body` ``(obj, status=200)``: any JSON body, e.g. one without ``choices``;
- :func:`drop` ``()``: read the request, then close the connection without answering (what a
  server does when it closes an idle keep-alive connection just as the client reuses it);
- :func:`respond` ``(fn)``: ``fn(request_json)`` computes the answer (see "Answers" below).

Answers: the default responder (constructor argument ``default``) and :func:`respond` callables
take the request JSON (dict) and return a ``str`` (the reply text), a ``dict`` (a whole response
body, sent with HTTP 200; build one with :func:`chat_response`) or a :class:`Behaviour`. The
built-in default, :func:`echo_responder`, replies ``"echo: <last user message>"``.

Recording: every chat request is kept in order; :attr:`LLMDouble.requests` lists the decoded JSON
bodies, :attr:`LLMDouble.calls` the :class:`RecordedRequest` objects (path, headers, body,
connection number: equal numbers mean the same kept-alive TCP connection).

Usage with trial (Deferred tests)::

    from twisted.trial import unittest
    from tests.support.llm_double import start_llm_double, reply

    class MyTest(unittest.TestCase):
        def setUp(self):
            self.llm = start_llm_double(self)          # stopped by addCleanup
            self.client = LLMClient(base_url=self.llm.base_url, api_key="k")
            self.addCleanup(self.client.close)         # closes pooled connections (clean reactor)

        @defer.inlineCallbacks
        def test_it(self):
            self.llm.enqueue(reply("Hello, traveller."))
            result = yield self.client.chat([{"role": "user", "content": "hi"}])
            self.assertEqual(result.content, "Hello, traveller.")
            self.assertEqual(self.llm.requests[0]["messages"][0]["content"], "hi")

Usage with plain pytest: ``from tests.support.llm_double import llm_double`` in a test module
makes the ``llm_double`` fixture available (a started double, stopped after the test)::

    def test_it(llm_double):
        llm_double.enqueue(reply("fine"))
        ...

Or as a context manager: ``with LLMDouble() as llm: ...``. To point code that uses the settings
at it, override ``AI_LLM_BASE_URL`` (e.g. Django's ``override_settings(AI_LLM_BASE_URL=
llm.base_url)``) and call ``ai_contrib.llm.client.reset_client()``.

Design source: the OpenAI chat completions API (request and response shapes) and the measured
keep-alive behaviour of llama.cpp's server (idle connections closed after 5 s; emulate it with
``LLMDouble(idle_timeout=...)``; ``docs/design.md``, "The LLM client").
"""

import itertools
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.support.waiting import HANG_GUARD

DOUBLE_MODEL = "llm-double"

#: The request fields OpenAI's chat completions API takes (its API reference).
OPENAI_CHAT_FIELDS = frozenset({
    "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities",
    "n", "parallel_tool_calls", "prediction", "presence_penalty", "reasoning_effort",
    "response_format", "seed", "service_tier", "stop", "store", "stream", "stream_options",
    "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
    "web_search_options",
})
#: The request fields OpenAI's text completions API takes.
OPENAI_COMPLETION_FIELDS = frozenset({
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs",
    "max_tokens", "n", "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix",
    "temperature", "top_p", "user",
})
#: The fields a chat message may have.
OPENAI_MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id",
                                   "refusal", "audio", "function_call"})


# ------------------------------------------------------------------------------------------------
# response shapes


def rough_tokens(text):
    """A deterministic stand-in token count: ``len(text) // 4 + 1`` (characters / 4)."""
    return len(text or "") // 4 + 1


def chat_response(
    content="",
    tool_calls=None,
    finish_reason=None,
    usage=None,
    model=DOUBLE_MODEL,
    prompt_tokens=None,
):
    """
    Build an OpenAI chat completion body.

    Args:
        content (str): the assistant text.
        tool_calls (list[dict], optional): OpenAI tool calls (``{"id", "type", "function":
            {"name", "arguments"}}``); makes ``finish_reason`` default to ``"tool_calls"``.
        finish_reason (str, optional): default ``"stop"``.
        usage (dict, optional): default from :func:`rough_tokens`.
        prompt_tokens (int, optional): the ``usage.prompt_tokens`` when ``usage`` is not given.

    Returns:
        dict: ``{"id", "object": "chat.completion", "created", "model", "choices": [{"index": 0,
        "message": {"role": "assistant", "content", "tool_calls"?}, "finish_reason"}], "usage"}``.
    """
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    if usage is None:
        completion = rough_tokens(content) + (
            rough_tokens(json.dumps(tool_calls)) if tool_calls else 0
        )
        prompt = prompt_tokens if prompt_tokens is not None else 1
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return {
        "id": "chatcmpl-double",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage,
    }


def _prompt_tokens(request_json):
    if isinstance(request_json.get("prompt"), str):  # a text completion
        return rough_tokens(request_json["prompt"])
    messages = request_json.get("messages") or []
    return sum(
        rough_tokens(str(m.get("content") or "")) + 4 for m in messages if isinstance(m, dict)
    )


# ------------------------------------------------------------------------------------------------
# behaviours


@dataclass
class Behaviour:
    """One scripted answer. Build it with the module functions (:func:`reply`, :func:`drop`...)."""

    kind: str
    params: dict = field(default_factory=dict)


def reply(content, finish_reason="stop", usage=None):
    """A normal completion whose ``message.content`` is ``content``."""
    return Behaviour("reply", {"content": content, "finish_reason": finish_reason, "usage": usage})


def tool_calls(calls, content=""):
    """
    A completion carrying native tool calls.

    Args:
        calls (list): each ``("name", {arguments})`` or a full OpenAI tool-call dict.
        content (str): text beside the calls.
    """
    full = []
    for i, call in enumerate(calls):
        if isinstance(call, dict):
            full.append(call)
        else:
            name, args = call
            full.append(
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
            )
    return Behaviour("tool_calls", {"calls": full, "content": content})


def structured(*calls):
    """A structured-output extraction reply: ``{"calls": [...]}`` as the message content, each
    call given as ``("name", {arguments})``."""
    return reply(json.dumps({"calls": [{"name": n, "arguments": a} for n, a in calls]}))


def http_error(status=500, body=None):
    """Answer HTTP ``status`` with ``body`` (default an OpenAI-style ``{"error": {...}}``)."""
    if body is None:
        body = {
            "error": {"message": f"double error {status}", "type": "server_error", "code": status}
        }
    return Behaviour("http_error", {"status": status, "body": body})


def sleep(seconds, then=None):
    """Wait ``seconds`` before answering with ``then`` (a Behaviour; default: the default responder)."""
    return Behaviour("sleep", {"seconds": seconds, "then": then})


def hold(gate, then=None):
    """Answer with ``then`` (default: the default responder) once ``gate`` (a
    ``threading.Event``) is set; past :data:`tests.support.waiting.HANG_GUARD` seconds, or when
    the double stops, close the connection unanswered."""
    return Behaviour("hold", {"gate": gate, "then": then})


def malformed(body=b'{"choices": [ this is not JSON'):
    """HTTP 200 with a body that is not JSON."""
    return Behaviour("raw", {"status": 200, "body": body, "content_type": "application/json"})


def raw_body(body, status=200):
    """HTTP ``status`` with ``body`` (bytes) sent exactly as given, e.g. JSON whose strings use
    escapes (``\\u0073k-...``) that ``json.dumps`` would not write."""
    return Behaviour("raw", {"status": status, "body": body, "content_type": "application/json"})


def json_body(obj, status=200):
    """Any JSON body with any status, e.g. ``json_body({"object": "chat.completion"})`` (no choices)."""
    return Behaviour("json", {"status": status, "body": obj})


def drop():
    """Read the request, then close the connection without a byte of response."""
    return Behaviour("drop")


def respond(fn):
    """Let ``fn(request_json)`` answer (str, response dict or Behaviour)."""
    return Behaviour("call", {"fn": fn})


def echo_responder(request_json):
    """The default answer: ``"echo: <content of the last user message>"``."""
    for message in reversed(request_json.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return f"echo: {message.get('content') or ''}"
    return "echo: "


# ------------------------------------------------------------------------------------------------
# the server


@dataclass
class RecordedRequest:
    """One chat request as received: ``path`` (str), ``headers`` (dict, lower-case names),
    ``body`` (decoded JSON dict, or ``None`` if it was not JSON), ``raw`` (bytes),
    ``connection`` (int: the TCP connection's number, counting from 1)."""

    path: str
    headers: dict
    body: object
    raw: bytes
    connection: int


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers
    server_version = "LLMDouble/1.0"

    def setup(self):
        double = self.server.double
        self.timeout = double.idle_timeout  # socket timeout: an idle keep-alive socket is closed
        super().setup()
        self.connection_number = next(double._connection_numbers)
        with double._lock:
            double._sockets.add(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            with self.server.double._lock:
                self.server.double._sockets.discard(self.connection)

    def log_message(self, format, *args):  # keep test output clean
        pass

    # --- helpers ---

    def _send(self, status, body, content_type="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _read_body(self):
        length = self.headers.get("Content-Length")
        if length is None:
            return None
        return self.rfile.read(int(length))

    # --- routes ---

    def do_GET(self):
        with self.server.double._lock:
            self.server.double._gets.append(self.path)
        n_ctx = self.server.double.n_ctx
        if self.path.rstrip("/") == "/v1/models":
            entry = {"id": DOUBLE_MODEL, "object": "model"}
            if n_ctx and self.server.double.style == "vllm":
                entry["max_model_len"] = n_ctx
            self._send(200, {"object": "list", "data": [entry]})
        elif (self.path.rstrip("/") == "/props" and self.server.double.style == "llama.cpp"
              and (n_ctx or self.server.double.model_path)):
            # llama.cpp's server reports its window and model file here
            settings = {"n_ctx": n_ctx} if n_ctx else {}
            self._send(200, {"default_generation_settings": settings, "total_slots": 1,
                             "model_path": self.server.double.model_path or DOUBLE_MODEL})
        elif self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "code": 404}})

    def do_POST(self):
        double = self.server.double
        raw = self._read_body()
        if raw is None:
            self._send(411, {"error": {"message": "Content-Length required", "code": 411}})
            return
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/v1/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "code": 404}})
            return
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        double._record(RecordedRequest(self.path, headers, body, raw, self.connection_number))
        if body is None:
            self._send(400, {"error": {"message": "request body is not JSON", "code": 400}})
            return
        if double.expected_api_key is not None:
            if headers.get("authorization") != f"Bearer {double.expected_api_key}":
                self._send(
                    401,
                    {
                        "error": {
                            "message": "Invalid API Key",
                            "type": "authentication_error",
                            "code": 401,
                        }
                    },
                )
                return
        refusal = double.field_refusal(self.path, body) or double.context_refusal(body)
        if refusal is not None:
            # a real server refuses before generating, so no queued behaviour is used up
            self._send(400, refusal)
            return
        self._perform(double._next_behaviour(), body)

    def _perform(self, behaviour, request_json):
        double = self.server.double
        if behaviour is None:
            behaviour = double._as_behaviour(double.default(request_json))
        kind, p = behaviour.kind, behaviour.params
        if kind == "reply":
            body = chat_response(
                p["content"],
                finish_reason=p["finish_reason"],
                usage=p["usage"],
                prompt_tokens=_prompt_tokens(request_json),
            )
            if self.path.rstrip("/") == "/v1/completions":
                choice = body["choices"][0]
                body = dict(body, object="text_completion", choices=[
                    {"index": 0, "text": choice["message"]["content"],
                     "finish_reason": choice["finish_reason"]}])
            self._send(200, body)
        elif kind == "tool_calls":
            self._send(
                200,
                chat_response(
                    p["content"], tool_calls=p["calls"], prompt_tokens=_prompt_tokens(request_json)
                ),
            )
        elif kind == "http_error":
            self._send(p["status"], p["body"])
        elif kind == "json":
            self._send(p["status"], p["body"])
        elif kind == "raw":
            self._send(p["status"], p["body"], p["content_type"])
        elif kind == "sleep":
            double._stopping.wait(p["seconds"])
            if double._stopping.is_set():
                self.close_connection = True
                return
            self._perform(p["then"], request_json)
        elif kind == "hold":
            deadline = time.monotonic() + HANG_GUARD
            while not p["gate"].wait(0.05):
                if double._stopping.is_set() or time.monotonic() > deadline:
                    self.close_connection = True
                    return
            self._perform(p["then"], request_json)
        elif kind == "drop":
            self.close_connection = True  # no response; the socket closes after this handler
        elif kind == "call":
            self._perform(double._as_behaviour(p["fn"](request_json)), request_json)
        else:  # pragma: no cover - a typo in a test
            raise ValueError(f"unknown behaviour {kind!r}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # a client that timed out and aborted leaves a broken pipe behind: expected, stay quiet
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)


class LLMDouble:
    """
    A scriptable OpenAI-compatible chat completions server on ``127.0.0.1`` (a free port).

    Args:
        default (callable, optional): ``fn(request_json) -> str | dict | Behaviour`` used when the
            queue is empty; default :func:`echo_responder`.
        expected_api_key (str, optional): if set, requests without ``Authorization: Bearer <key>``
            get HTTP 401 (they are still recorded).
        idle_timeout (float, optional): seconds after which an idle keep-alive connection is
            closed by the server (llama.cpp's server uses 5). ``None`` = never.
        n_ctx (int, optional): a context window (tokens) to report: at ``GET /props`` as
            llama.cpp does (``style="llama.cpp"``) or as ``max_model_len`` in ``GET /v1/models``
            as vLLM does (``style="vllm"``), and enforce: a chat or text completion request that
            does not fit gets HTTP 400 with the server's own body (see :meth:`context_refusal`).
            ``None`` = report none and accept any length. May be changed while it runs.
        style (str): ``"llama.cpp"`` (default) or ``"vllm"``: which server ``n_ctx`` imitates.
        model_path (str, optional): the model file ``GET /props`` reports (with ``n_ctx`` or
            alone: either makes the double answer ``/props`` as llama.cpp's server does).
        strict (bool): refuse fields outside OpenAI's API as OpenAI does (module docstring,
            :meth:`field_refusal`). May be changed while it runs.

    Attributes:
        base_url (str): ``"http://127.0.0.1:<port>/v1"`` once started.
        requests (list[dict]): the JSON bodies received, in order (a copy).
        calls (list[RecordedRequest]): the full records, in order (a copy).

    Thread-safety: :meth:`enqueue` and the recordings may be used from any thread while it runs.
    """

    def __init__(self, default=None, expected_api_key=None, idle_timeout=None, n_ctx=None,
                 style="llama.cpp", model_path=None, strict=False):
        self.default = default or echo_responder
        self.n_ctx = n_ctx
        self.style = style
        self.model_path = model_path
        self.strict = strict
        self.expected_api_key = expected_api_key
        self.idle_timeout = idle_timeout
        self._lock = threading.Lock()
        self._queue = []
        self._calls = []
        self._gets = []
        self._sockets = set()
        self._connection_numbers = itertools.count(1)
        self._stopping = threading.Event()
        self._server = None
        self._thread = None
        self._request_seen = threading.Condition(self._lock)

    # --- lifecycle ---

    def start(self):
        """Bind a free port on 127.0.0.1 and serve in a daemon thread. Returns ``self``."""
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.double = self
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="llm-double",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self):
        """Stop serving, wake sleeping behaviours and close every open connection. Idempotent."""
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)
        self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def port(self):
        """The TCP port (int)."""
        return self._server.server_address[1]

    @property
    def base_url(self):
        """The API root to give :class:`LLMClient`: ``"http://127.0.0.1:<port>/v1"``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting ---

    def enqueue(self, *behaviours):
        """Queue behaviours (or plain strings, meaning :func:`reply`), used one per chat request."""
        with self._lock:
            self._queue.extend(self._as_behaviour(b) for b in behaviours)
        return self

    def field_refusal(self, path, request_json):
        """
        The error body OpenAI's API answers (with HTTP 400) when :attr:`strict` and
        ``request_json`` carries a field it does not know, else ``None``.

        - a top-level field outside :data:`OPENAI_CHAT_FIELDS` (``/chat/completions``) or
          :data:`OPENAI_COMPLETION_FIELDS` (``/completions``): ``{"error": {"message":
          "Unrecognized request argument supplied: repeat_penalty", "type":
          "invalid_request_error", "param": None, "code": None}}`` ("arguments" and a
          comma-separated list when there are several);
        - a message field outside :data:`OPENAI_MESSAGE_FIELDS`: ``"Additional properties are
          not allowed ('seq' was unexpected) - 'messages.0'"``, same type.

        Args:
            path (str): the request path.
            request_json (dict): the decoded body.

        Returns:
            dict | None
        """
        if not self.strict:
            return None
        known = (OPENAI_COMPLETION_FIELDS if path.rstrip("/").endswith("/v1/completions")
                 else OPENAI_CHAT_FIELDS)
        unknown = [key for key in request_json if key not in known]
        if unknown:
            noun = "argument" if len(unknown) == 1 else "arguments"
            message = f"Unrecognized request {noun} supplied: {', '.join(unknown)}"
        else:
            message = next((
                f"Additional properties are not allowed ('{key}' was unexpected) - "
                f"'messages.{i}'"
                for i, msg in enumerate(request_json.get("messages") or [])
                if isinstance(msg, dict) for key in msg if key not in OPENAI_MESSAGE_FIELDS),
                None)
        if message is None:
            return None
        return {"error": {"message": message, "type": "invalid_request_error", "param": None,
                          "code": None}}

    def context_refusal(self, request_json):
        """
        The error body a real server answers (with HTTP 400) when ``request_json`` does not fit
        :attr:`n_ctx`, else ``None``. Prompt tokens are counted roughly (:func:`rough_tokens` per
        message plus 4), as for ``usage.prompt_tokens``.

        - ``style="llama.cpp"``: refused when the prompt alone is ``>= n_ctx`` (llama.cpp's server
          does not count ``max_tokens``); body ``{"error": {"code": 400, "message": "the request
          exceeds the available context size, try increasing it", "type":
          "exceed_context_size_error", "n_prompt_tokens": int, "n_ctx": int}}``;
        - ``style="vllm"``: refused when prompt plus ``max_tokens`` is ``> n_ctx``; body
          ``{"object": "error", "message": "This model's maximum context length is ...",
          "type": "BadRequestError", "param": None, "code": 400}``.

        Args:
            request_json (dict): a decoded ``/chat/completions`` or ``/completions`` body.

        Returns:
            dict | None
        """
        n_ctx = self.n_ctx
        if not n_ctx:
            return None
        prompt = _prompt_tokens(request_json)
        if self.style == "vllm":
            completion = int(request_json.get("max_tokens") or 0)
            if prompt + completion <= n_ctx:
                return None
            return {
                "object": "error",
                "message": (
                    f"This model's maximum context length is {n_ctx} tokens. However, you "
                    f"requested {prompt + completion} tokens ({prompt} in the messages, "
                    f"{completion} in the completion). Please reduce the length of the messages "
                    "or completion."
                ),
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        if prompt < n_ctx:
            return None
        return {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": n_ctx,
            }
        }

    @property
    def gets(self):
        """The paths of the GET requests received, in order (a copy)."""
        with self._lock:
            return list(self._gets)

    @property
    def open_connections(self):
        """Number of client connections the server holds open (kept alive or answering); 0
        once an ``idle_timeout`` has closed every idle one."""
        with self._lock:
            return len(self._sockets)

    @property
    def pending(self):
        """Number of queued behaviours not used yet."""
        with self._lock:
            return len(self._queue)

    def reset(self):
        """Forget queued behaviours and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._calls.clear()

    # --- recordings ---

    @property
    def requests(self):
        with self._lock:
            return [call.body for call in self._calls]

    @property
    def calls(self):
        with self._lock:
            return list(self._calls)

    @property
    def last_request(self):
        """The JSON body of the latest chat request (``None`` if none yet)."""
        with self._lock:
            return self._calls[-1].body if self._calls else None

    def wait_for_requests(self, count, timeout=HANG_GUARD):
        """
        Block until ``count`` chat requests were received, or ``timeout`` seconds pass (by
        default :data:`HANG_GUARD`, a hang guard).

        For plain pytest tests whose code under test runs elsewhere; never call it from the
        Twisted reactor thread (it would stop the reactor from sending anything).

        Returns:
            bool: True if the count was reached.
        """
        deadline = time.monotonic() + timeout
        with self._request_seen:
            while len(self._calls) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._request_seen.wait(left)
            return True

    # --- internals used by the handler ---

    def _record(self, recorded):
        with self._request_seen:
            self._calls.append(recorded)
            self._request_seen.notify_all()

    def _next_behaviour(self):
        with self._lock:
            return self._queue.pop(0) if self._queue else None

    @staticmethod
    def _as_behaviour(answer):
        if isinstance(answer, Behaviour):
            return answer
        if isinstance(answer, str):
            return reply(answer)
        if isinstance(answer, dict):
            return json_body(answer)
        raise TypeError(
            f"an LLM double answer must be str, dict or Behaviour, not {type(answer).__name__}"
        )


# ------------------------------------------------------------------------------------------------
# test-framework glue


def start_llm_double(testcase, **kwargs):
    """
    Start an :class:`LLMDouble` for a ``unittest``/trial test case and stop it on cleanup.

    Args:
        testcase: the running ``TestCase`` (its ``addCleanup`` is used).
        **kwargs: passed to :class:`LLMDouble`.

    Returns:
        LLMDouble: started.
    """
    double = LLMDouble(**kwargs).start()
    testcase.addCleanup(double.stop)
    return double


@pytest.fixture
def llm_double():
    """pytest fixture: a started :class:`LLMDouble` (default responder), stopped after the test."""
    double = LLMDouble().start()
    try:
        yield double
    finally:
        double.stop()


def prompt_text(body):
    """Every message's text and the text completion's prompt of a request body, joined."""
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or []) + str(
        body.get("prompt") or "")


def unstamped(text):
    """A prompt line without the time a resumed conversation's first line starts with
    (``"[2026-11-20 14:02] Wren: hi"`` -> ``"Wren: hi"``; ``core.prompts.resumption_stamps``)."""
    from ai_contrib.core.prompts import TIME_STAMP

    text = str(text or "")
    stamp = TIME_STAMP.match(text)
    return text[stamp.end():].lstrip() if stamp else text


def request_kind(body):
    """What an LLM request is for: ``summary``, ``extraction`` or ``reply``."""
    text = prompt_text(body)
    if "<transcript>" in text:
        return "summary"
    # an NPC with actions offers tools in its replies too: extraction's are the journal's
    tools = {(t.get("function") or {}).get("name") for t in body.get("tools") or ()}
    if "add_journal_entry" in tools or "add_journal_entry" in text:
        return "extraction"
    return "reply"


class CountingModel:
    """
    A model for the double: replies ``Aye (n).`` (``n`` counts the replies), extraction
    journals nothing, summaries are :meth:`summarise`'s text (:data:`SUMMARY`).
    """

    SUMMARY = "Patrons talked about the ford, the mill and the harvest."

    def __init__(self):
        self.lock = threading.Lock()
        self.replies = 0

    def summarise(self, body):
        return self.SUMMARY

    def __call__(self, body):
        kind = request_kind(body)
        if kind == "summary":
            return self.summarise(body)
        if kind == "extraction":
            return "TOOL: noop {}"
        with self.lock:
            self.replies += 1
            return f"Aye ({self.replies})."
