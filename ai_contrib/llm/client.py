"""
The one LLM client of the contrib: OpenAI-compatible chat completions over ``treq``.

Every LLM call (NPC replies, compaction summaries, memory extraction, benchmark QA) goes through
:class:`LLMClient`, which POSTs to ``{base_url}/chat/completions`` and returns a Twisted
``Deferred`` firing with a :class:`ChatResult`. Nothing here blocks the reactor thread.

Design sources:

- the OpenAI chat completions API (request: ``model``, ``messages``, ``max_tokens``,
  ``temperature``, ``seed``, ``tools``; response: ``choices[0].message``, ``finish_reason``,
  ``usage``), which Ollama, llama.cpp's server, vLLM, LiteLLM and hosted APIs all speak;
- measurements (``docs/design.md``, "The LLM client"): servers such as llama.cpp's close idle
  keep-alive connections after 5 s, and Twisted never retries a POST, so a pooled connection that
  dies just as it is reused fails the request (``RequestTransmissionFailed(ConnectionDone)``).
  Evennia's own LLM contrib fails every second POST for that reason. This client keeps cached
  connections for at most 4 s and retries once when a request dies with the connection;
- llama.cpp's server generates without limit when ``max_tokens`` is missing, so it is always
  sent. Fields outside OpenAI's API (llama.cpp's ``repeat_penalty``, DRY) go only where they are
  known to be taken, as the model's measured profile (:mod:`ai_contrib.llm.sampling`;
  ``docs/design.md``, "Sampling per server and model"): a hosted API answers them with HTTP 400.
  A server that still refuses one is asked again once without them, and never sent them again.

Errors (all subclasses of :class:`LLMError`; messages name the URL, never the API key):

- :class:`LLMTimeoutError`: no complete response within ``timeout`` seconds;
- :class:`LLMHTTPError`: the server answered with a non-2xx status
  (:class:`LLMContextOverflowError` when it says the prompt exceeds its context window);
- :class:`LLMResponseError`: the body is not JSON or has no usable ``choices``;
- :class:`LLMConnectionError`: connection refused or lost (after the one retry).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from twisted.internet import defer, protocol
from twisted.internet import error as net_error
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP6ClientEndpoint,
    wrapClientTLS,
)
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    BrowserLikePolicyForHTTPS,
    HTTPConnectionPool,
    RequestTransmissionFailed,
    ResponseDone,
    ResponseFailed,
    ResponseNeverReceived,
    _HTTP11ClientFactory,
)
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer

from ai_contrib.core.messages import ChatMessage
from ai_contrib.core.redact import has_login, redact, redact_data
from ai_contrib.llm.errors import (  # noqa: F401  (the error family is importable from here too)
    BODY_EXCERPT_CHARS,
    _error_detail,
    LLMConnectionError,
    LLMContextOverflowError,
    LLMError,
    LLMHTTPError,
    LLMResponseError,
    LLMTimeoutError,
    http_error,
    refuses_response_format,
)
from ai_contrib.llm.sampling import (  # noqa: F401  (EMBEDDED_REPLY_SAMPLING: importable here)
    EMBEDDED_REPLY_SAMPLING,
    LLAMA_CPP,
    OPENAI,
    extra_fields,
    llama_cpp_model,
    refused_fields,
    sampling_fields,
    standard_only,
)
from ai_contrib.settings import get_setting

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

#: Seconds an idle pooled connection is kept. Below the 5 s after which llama.cpp's server (and
#: many proxies) close idle keep-alive connections, so the pool rarely hands out a dying one.
CACHED_CONNECTION_TIMEOUT = 4

logger = logging.getLogger(__name__)

#: What an LLM request may be for (the ``purpose`` of :meth:`LLMClient.chat`): an NPC's reply,
#: a compaction summary, fact extraction before compaction, importance scoring of a journal
#: fact, a benchmark's answer to a question, a warm-up of the reply cache after a compaction
#: (``ai_contrib.npc.warmup``), one evaluated by the memory server and handed to the reply server
#: (``ai_contrib.llm.handover``). Never sent to the server; the result and the error carry it, so
#: that logs and benchmarks (``benchmarks/locomo.py``) tell the calls apart.
PURPOSES = ("reply", "summary", "extraction", "importance", "answer", "warm", "handover")

#: Purposes of LLM calls that are memory work, not replies: the embedded model serves them from a
#: process of its own (``ai_contrib.llm.embedded``, role ``"memory"``), in its first slot, so
#: that its last is free for the warm-ups handed over (:data:`HANDOVER_PURPOSE`).
MEMORY_PURPOSES = frozenset({"summary", "extraction", "importance"})

#: the purpose of a warm-up that the embedded memory server evaluates for the reply server
HANDOVER_PURPOSE = "handover"

#: Message fields the OpenAI chat API accepts; the contrib's own fields (id, seq, timestamp,
#: metadata) are stripped before sending because strict servers reject unknown fields.
_WIRE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")

#: OpenAI accepts ``name`` only if it matches this; a player called "Old Tom" would get HTTP 400.
_NAME_OK = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]+")

# ------------------------------------------------------------------------------------------------
# request and response shapes


class PromptStats(TypedDict):
    """What the server did with a prompt (:meth:`ChatResult.prompt_stats`): tokens and
    milliseconds; None where the server does not say."""

    prompt_tokens: int  #: the whole prompt
    cached_tokens: int  #: taken from the server's prefix cache
    evaluated_tokens: int  #: ``prompt_tokens - cached_tokens``
    generated_tokens: int | None
    prompt_ms: float | None  #: the evaluation's time
    generation_ms: float | None  #: the generation's time


class ServerInfo(TypedDict):
    """What the model server is (:meth:`LLMClient.known_server`)."""

    kind: str | None  #: ``"llama.cpp"``, ``"openai"``, or None (not known yet)
    model: str | None  #: the model file the server reports


@dataclass
class ChatResult:
    """
    One chat completion, parsed from ``choices[0]`` of an OpenAI-style response.

    Attributes:
        content (str): the assistant's text (``""`` when it only calls tools).
        tool_calls (list[dict]): native tool calls, each
            ``{"id": str, "type": "function", "function": {"name": str, "arguments": str(JSON)}}``
            (arguments always a JSON string, even from servers that send an object).
        finish_reason (str|None): ``"stop"``, ``"length"`` (hit ``max_tokens``), ``"tool_calls"``...
        usage (dict): token counts as the server reports them, typically
            ``{"prompt_tokens": int, "completion_tokens": int, "total_tokens": int}``; ``{}`` if absent.
        raw (dict): the whole decoded response body.
        purpose (str|None): what the request was for (one of :data:`PURPOSES`), as the caller
            tagged it; None when untagged.
    """

    content: str
    tool_calls: list = field(default_factory=list)
    finish_reason: str = None
    usage: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    purpose: str = None

    def prompt_stats(self) -> PromptStats | None:
        """
        How much of the prompt the server took from its prefix cache, where it says so.

        llama.cpp's server answers with ``timings`` (``prompt_n`` tokens evaluated, ``cache_n``
        reused, ``predicted_n`` generated, ``prompt_ms``/``predicted_ms``); OpenAI, vLLM and
        other hosted APIs with ``usage.prompt_tokens_details.cached_tokens``.

        Returns:
            PromptStats | None: None when the server reports no cache figures.
        """
        timings = self.raw.get("timings") if isinstance(self.raw, dict) else None
        if isinstance(timings, dict) and isinstance(timings.get("prompt_n"), (int, float)):
            evaluated = int(timings["prompt_n"])
            cached = int(timings.get("cache_n") or 0)
            return {
                "prompt_tokens": evaluated + cached,
                "cached_tokens": cached,
                "evaluated_tokens": evaluated,
                "generated_tokens": _int_or_none(timings.get("predicted_n")),
                "prompt_ms": _float_or_none(timings.get("prompt_ms")),
                "generation_ms": _float_or_none(timings.get("predicted_ms")),
            }
        details = self.usage.get("prompt_tokens_details")
        prompt = self.usage.get("prompt_tokens")
        if isinstance(details, dict) and isinstance(prompt, int):
            cached = int(details.get("cached_tokens") or 0)
            return {
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "evaluated_tokens": prompt - cached,
                "generated_tokens": _int_or_none(self.usage.get("completion_tokens")),
                "prompt_ms": None,
                "generation_ms": None,
            }
        return None


def _int_or_none(value):
    return int(value) if isinstance(value, (int, float)) else None


def _float_or_none(value):
    return float(value) if isinstance(value, (int, float)) else None


def wire_name(name) -> str | None:
    """
    Return ``name`` in the form OpenAI accepts for a message's ``name`` (``[A-Za-z0-9_-]{1,64}``).

    Runs of other characters become ``_`` ("Old Tom" -> "Old_Tom"); ``None`` if nothing is left.
    """
    if name is None:
        return None
    name = str(name)
    if _NAME_OK.match(name):
        return name
    cleaned = _NAME_BAD_CHARS.sub("_", name).strip("_")[:64]
    return cleaned or None


def to_wire_message(msg) -> ChatMessage:
    """
    Reduce a contrib message dict (see ``ai_contrib.core.messages``) to what the chat API accepts.

    Keeps ``role``, ``content`` (``None`` -> ``""``), ``name`` (made API-safe with
    :func:`wire_name`), ``tool_calls`` and ``tool_call_id``; drops ``id``, ``seq``, ``timestamp``,
    ``metadata`` and anything else.

    Args:
        msg (dict): ``{"role": str, "content": str, ...}``.

    Returns:
        ChatMessage: a new dict, e.g. ``{"role": "user", "content": "hi", "name": "Old_Tom"}``.
    """
    out = {}
    for key in _WIRE_FIELDS:
        if key not in msg or msg[key] is None:
            continue
        out[key] = msg[key]
    out["role"] = msg.get("role", "user")
    out["content"] = "" if msg.get("content") is None else msg["content"]
    if "name" in out:
        safe = wire_name(out["name"])
        if safe is None or out["role"] == "tool":
            del out["name"]
        else:
            out["name"] = safe
    if not out.get("tool_calls"):
        out.pop("tool_calls", None)
    return out


def _normalise_tool_call(call, index):
    if not isinstance(call, dict):
        raise LLMResponseError(f"tool call #{index} is not an object: {call!r:.200}")
    function = call.get("function") or {}
    if not isinstance(function, dict) or not function.get("name"):
        raise LLMResponseError(f"tool call #{index} has no function name: {call!r:.200}")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": str(call.get("id") or f"call_{index}"),
        "type": call.get("type") or "function",
        "function": {"name": str(function["name"]), "arguments": arguments},
    }


def _first_choice(data):
    """``choices[0]`` of a decoded OpenAI-style response; LLMResponseError when ``data`` is
    not an object, carries an ``error`` or has no ``choices``."""
    if not isinstance(data, dict):
        raise LLMResponseError(f"response is not a JSON object: {data!r:.200}")
    choices = data.get("choices")
    if not choices or not isinstance(choices, list):
        if data.get("error"):
            raise LLMResponseError(f"response carries an error: {_error_detail(json.dumps(data))}")
        raise LLMResponseError(f"response has no choices: {json.dumps(data)[:200]}")
    return choices[0]


def _usage(data):
    usage = data.get("usage")
    return usage if isinstance(usage, dict) else {}


def parse_chat_response(data) -> ChatResult:
    """
    Turn a decoded chat completions response into a :class:`ChatResult`.

    Args:
        data: the decoded JSON body, expected
            ``{"choices": [{"message": {"content": str|None, "tool_calls": [...]?},
            "finish_reason": str}], "usage": {...}}``.

    Returns:
        ChatResult

    Raises:
        LLMResponseError: ``data`` is not an object, carries an ``error``, has no ``choices``, or
            its first choice has no ``message``.
    """
    choice = _first_choice(data)
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise LLMResponseError(f"first choice has no message: {choice!r:.200}")
    content = message.get("content")
    if isinstance(content, list):  # some servers send content parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    tool_calls = [
        _normalise_tool_call(call, i) for i, call in enumerate(message.get("tool_calls") or [])
    ]
    return ChatResult(
        content="" if content is None else str(content),
        tool_calls=tool_calls,
        finish_reason=choice.get("finish_reason"),
        usage=_usage(data),
        raw=data,
    )


def parse_completion_response(data) -> ChatResult:
    """
    Turn a decoded ``/completions`` response (OpenAI's text completion, which llama.cpp's
    server, vLLM and Ollama also serve) into a :class:`ChatResult` with the text as
    ``content`` and no tool calls.

    Args:
        data: the decoded JSON body, expected
            ``{"choices": [{"text": str, "finish_reason": str}], "usage": {...}}``.

    Raises:
        LLMResponseError: ``data`` is not an object, carries an ``error``, has no ``choices``,
            or its first choice has no ``text``.
    """
    choice = _first_choice(data)
    text = choice.get("text") if isinstance(choice, dict) else None
    if not isinstance(text, str):
        raise LLMResponseError(f"first choice has no text: {choice!r:.200}")
    return ChatResult(
        content=text, finish_reason=choice.get("finish_reason"), usage=_usage(data), raw=data
    )


# ------------------------------------------------------------------------------------------------
# the HTTP side


def _n_ctx_of_props(data):
    """llama.cpp's ``/props``: ``default_generation_settings.n_ctx``, or a top-level ``n_ctx``."""
    settings = data.get("default_generation_settings") or {}
    return int(settings.get("n_ctx") or data.get("n_ctx") or 0) or None


def _max_model_len_of_models(data):
    """vLLM's ``/v1/models``: the first model entry's ``max_model_len``."""
    for entry in data.get("data") or []:
        if entry.get("max_model_len"):
            return int(entry["max_model_len"])
    return None


class _QuietHTTP11ClientFactory(_HTTP11ClientFactory):
    """Twisted's per-connection factory without the "Starting/Stopping factory" log lines."""

    noisy = False


class _ClosingPool(HTTPConnectionPool):
    """
    An ``HTTPConnectionPool`` that, once its cached connections were closed, closes a connection
    that finishes its response afterwards instead of caching it: a request still under way
    when :meth:`LLMClient.close` runs would otherwise leave a cached connection, and its idle
    timer, in the reactor after the client is gone.
    """

    closed = False

    def closeCachedConnections(self):
        self.closed = True
        return super().closeCachedConnections()

    def _putConnection(self, key, connection):  # Twisted's hook for a connection going idle
        if self.closed:
            connection.transport.loseConnection()
            return
        super()._putConnection(key, connection)


def make_quiet_pool(reactor=None, persistent=True) -> HTTPConnectionPool:
    """
    Return an ``HTTPConnectionPool`` that keeps idle connections :data:`CACHED_CONNECTION_TIMEOUT`
    seconds (under the 5 s after which servers drop them), does not log every connection, and
    caches none once :meth:`~twisted.web.client.HTTPConnectionPool.closeCachedConnections` ran.
    """
    if reactor is None:
        from twisted.internet import reactor
    pool = _ClosingPool(reactor, persistent=persistent)
    pool.cachedConnectionTimeout = CACHED_CONNECTION_TIMEOUT
    pool._factory = _QuietHTTP11ClientFactory  # the documented hook for a custom factory
    return pool


@implementer(IAgentEndpointFactory)
class _EndpointFactory:
    """
    Endpoints for the Agent: IP literals (``127.0.0.1``, the usual local server) connect directly;
    host names go through ``HostnameEndpoint``. Twisted's default resolves even IP literals on the
    reactor's thread pool, which only starts once the reactor runs, so a request made while the
    reactor is merely iterated (Evennia's Django test harness) would never connect.
    """

    def __init__(self, reactor):
        self._reactor = reactor
        self._tls_policy = BrowserLikePolicyForHTTPS()

    def endpointForURI(self, uri):
        host = uri.host.decode("ascii")
        if isIPAddress(host):
            endpoint = TCP4ClientEndpoint(self._reactor, host, uri.port)
        elif isIPv6Address(host):
            endpoint = TCP6ClientEndpoint(self._reactor, host, uri.port)
        else:
            endpoint = HostnameEndpoint(self._reactor, uri.host, uri.port)
        if uri.scheme == b"https":
            endpoint = wrapClientTLS(
                self._tls_policy.creatorForNetloc(uri.host, uri.port), endpoint
            )
        return endpoint


def _is_dropped_connection(failure):
    """True if a request died because the connection closed under it (worth one retry)."""
    if not failure.check(RequestTransmissionFailed, ResponseNeverReceived):
        return False
    return any(
        isinstance(reason, Failure) and reason.check(net_error.ConnectionClosed)
        for reason in failure.value.reasons
    )


class _BodyCollector(protocol.Protocol):
    """Collects a response body; see :func:`read_body`."""

    def __init__(self, finished):
        self.finished = finished
        self.parts = []

    def dataReceived(self, data):
        self.parts.append(data)

    def connectionLost(self, reason):
        if self.finished.called:  # cancelled
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.finished.callback(b"".join(self.parts))
        else:
            self.finished.errback(reason)


def read_body(response) -> Deferred:
    """
    Deferred[bytes]: the whole body of a Twisted ``IResponse``.

    Unlike ``twisted.web.client.readBody`` (whose cancel finds no ``abortConnection`` on the
    HTTP/1.1 client's transport proxy and leaves the socket open), cancelling this one closes the
    connection, so a server stalling mid-body cannot hold it after a timeout.
    """

    def cancel(_):
        transport = collector.transport
        if transport is not None:
            transport.stopProducing()  # the proxy passes this to the TCP transport: it closes

    finished = defer.Deferred(cancel)
    collector = _BodyCollector(finished)
    response.deliverBody(collector)
    return finished


class _Timeout(Exception):
    """Internal: the deadline of one attempt passed."""


def _check_purpose(purpose):
    """Raise ValueError unless ``purpose`` is None or one of :data:`PURPOSES`."""
    if purpose is not None and purpose not in PURPOSES:
        raise ValueError(f"unknown LLM request purpose {purpose!r}; one of {PURPOSES}")


def _tagged(d, purpose):
    """``d`` (Deferred[ChatResult]) with ``purpose`` set on its result or its error."""

    def on_result(result):
        result.purpose = purpose
        return result

    def on_error(failure):
        try:
            failure.value.purpose = purpose
        except AttributeError:  # an exception type that takes no attributes
            pass
        return failure

    return d.addCallbacks(on_result, on_error)


class _SharedQuestion:
    """
    One question to the server (``ask() -> Deferred``), asked once at a time: callers while it is
    under way share its answer, and after an answer of None (or a failure, read as None) it is
    not asked again for ``retry_seconds()`` seconds, those callers get None at once.
    """

    def __init__(self, reactor, ask, retry_seconds):
        self._reactor = reactor
        self._ask = ask
        self._retry_seconds = retry_seconds
        self._tried_at = None
        self._waiters = None  # Deferreds of callers while a question is in flight

    def __call__(self) -> Deferred:
        """Deferred[answer | None]; never errbacks. Each caller gets a Deferred of its own:
        cancelling it leaves the question to the others (it ends by its own deadline)."""
        d = defer.Deferred()
        if self._waiters is not None:
            self._waiters.append(d)
            return d
        now = self._reactor.seconds()
        if self._tried_at is not None and now - self._tried_at < self._retry_seconds():
            return defer.succeed(None)
        self._tried_at = now
        self._waiters = [d]

        def done(result):
            waiters, self._waiters = self._waiters, None
            for waiter in waiters:
                waiter.callback(result)  # a cancelled waiter ignores it

        defer.maybeDeferred(self._ask).addErrback(lambda _failure: None).addCallback(done)
        return d


def _is_auto(value) -> bool:
    """Whether a setting's value is the word ``"auto"`` (any case, spaces around)."""
    return isinstance(value, str) and value.strip().lower() == "auto"


def _server_kind_setting() -> str:
    """``AI_LLM_SERVER_KIND`` in lower case: ``"auto"``, ``"llama.cpp"`` or ``"openai"``."""
    value = str(get_setting("LLM_SERVER_KIND") or "auto").strip().lower()
    if value not in ("auto", LLAMA_CPP, OPENAI):
        raise ValueError(f"AI_LLM_SERVER_KIND={value!r}: expected 'auto', 'llama.cpp' or 'openai'")
    return value


class LLMClient:
    """
    OpenAI-compatible chat completions client returning Deferreds.

    Args:
        base_url (str, optional): the API root, e.g. ``"http://127.0.0.1:11434/v1"``; requests go
            to ``{base_url}/chat/completions``. ``None`` = ``get_setting("LLM_BASE_URL")``; if that
            is unset too, the embedded model server is started (or reused) before the first
            request and its URL and API key are used.
        api_key (str, optional): sent as ``Authorization: Bearer <key>`` when set. When
            ``base_url`` is ``None`` too, ``None`` means ``get_setting("LLM_API_KEY")`` (or the
            embedded server's random key); with an explicit ``base_url`` it means no key.
        model (str, optional): default ``model`` field. ``None`` = ``get_setting("LLM_MODEL")``.
        timeout (float, optional): seconds one HTTP attempt may take, response body included.
            ``None`` = ``get_setting("LLM_TIMEOUT")``.
        reactor: the Twisted reactor (tests may pass another); default the global one.
        pool: an ``HTTPConnectionPool``; default :func:`make_quiet_pool`.
        embedded (bool, optional): whether the server at ``base_url`` is the embedded model,
            started by a script of its own (``EmbeddedServerProcess``): the client then treats
            it as the embedded model (context window, prompt speed, sampling) without starting
            one. Default: only when ``base_url`` is unset too (the client starts it).

    Use it from the reactor thread (from another thread, wrap calls in
    ``twisted.internet.threads.blockingCallFromThread``). Call :meth:`close` when done with a
    client that is not the process-wide one (tests: its pool holds connections and timers that
    trial reports as a dirty reactor).
    """

    def __init__(
        self, base_url=None, api_key=None, model=None, timeout=None, reactor=None, pool=None,
        embedded=None,
    ):
        if reactor is None:
            from twisted.internet import reactor
        self._reactor = reactor
        if base_url is None:
            base_url = get_setting("LLM_BASE_URL")
            if api_key is None:
                api_key = get_setting("LLM_API_KEY")
        # the embedded model: started by this client (no URL), or by a script that gave its URL
        self.embedded = not base_url if embedded is None else bool(embedded)
        self._starts_server = not base_url
        # set once the server answered that it does not take response_format (see
        # refuses_response_format): later requests leave it out
        self.structured_output_refused = False
        self.context_window_source = None  # where known_context_window came from, for admins
        self.measured_prompt_speed = None  # reply server's tokens/s (observe_prompt_speed)
        self._window = None  # (tokens, source) once discovered
        self._ask_window = _SharedQuestion(reactor, self._discover_window,
                                           lambda: self.WINDOW_RETRY_SECONDS)
        # what the server is, once its /props answered (known_server); and set once it refused a
        # field outside OpenAI's (refused_fields): later requests carry the standard fields only
        self._server = None
        self._ask_server = _SharedQuestion(reactor, self._discover_server,
                                           lambda: self.WINDOW_RETRY_SECONDS)
        self._embedded_model = None
        self.extra_fields_refused = False
        self.base_url = base_url.rstrip("/") if base_url else None
        self.api_key = api_key or None
        self.model = model if model is not None else get_setting("LLM_MODEL")
        self.timeout = float(timeout if timeout is not None else get_setting("LLM_TIMEOUT"))
        self._pool = pool or make_quiet_pool(reactor)
        from treq.client import HTTPClient

        agent = Agent.usingEndpointFactory(reactor, _EndpointFactory(reactor), pool=self._pool)
        self._http = HTTPClient(agent)

    def __repr__(self):
        where = redact(self.base_url) if self.base_url else "embedded model server"
        return f"<LLMClient {where} model={self.model!r}>"

    # --- the model's context window --------------------------------------------------------------

    #: seconds before a failed discovery of the context window is tried again
    WINDOW_RETRY_SECONDS = 60.0
    #: seconds one discovery request may take
    WINDOW_TIMEOUT = 5.0

    @property
    def known_context_window(self) -> int | None:
        """
        The model's context window in tokens as known now, without a request: the
        ``AI_LLM_CONTEXT_WINDOW`` setting, else the embedded model's ``AI_EMBEDDED_N_CTX``, else
        what :meth:`context_window` found; None while unknown (``docs/design.md``, "The budget
        fits the model").
        """
        configured = get_setting("LLM_CONTEXT_WINDOW")
        if configured:
            self.context_window_source = "AI_LLM_CONTEXT_WINDOW"
            return int(configured)
        if self.embedded and get_setting("EMBEDDED_N_CTX"):
            self.context_window_source = "embedded model, AI_EMBEDDED_N_CTX"
            return int(get_setting("EMBEDDED_N_CTX"))
        return self._window[0] if self._window else None

    def context_window(self) -> Deferred:
        """
        Ask the server for the model's context window, once (a failure is retried after
        :data:`WINDOW_RETRY_SECONDS`; callers during a request share it): llama.cpp's
        ``GET /props`` (``default_generation_settings.n_ctx``, or a top-level ``n_ctx``), else
        vLLM's ``GET /v1/models`` (``max_model_len`` of the model entry).

        Returns:
            Deferred[int | None]: tokens, or None when neither answers; never errbacks.
        """
        known = self.known_context_window
        if known:
            return defer.succeed(known)
        return self._ask_window()

    @defer.inlineCallbacks
    def _discover_window(self):
        base_url, api_key = yield self._endpoint()
        root = re.sub(r"/v1$", "", base_url)
        for path, source, read in (
            (f"{root}/props", "llama.cpp /props", _n_ctx_of_props),
            (f"{root}/v1/models", "/v1/models", _max_model_len_of_models),
        ):
            try:
                data = yield self._get_json(path, api_key)
                if read is _n_ctx_of_props:
                    self._note_props(data)  # what the server is comes with it
                window = read(data)
            except Exception:  # not this kind of server, or not answering: try the next
                continue
            if window:
                self._window = (int(window), source)
                self.context_window_source = source
                return int(window)
        return None

    def _get_json(self, url, api_key):
        """One GET with a :data:`WINDOW_TIMEOUT` deadline; Deferred[decoded JSON]."""
        headers = {"Accept": ["application/json"]}
        if api_key:
            headers["Authorization"] = [f"Bearer {api_key}"]
        d = self._http.get(url, headers=headers, allow_redirects=False)

        def read(response):
            def decode(data):
                if not 200 <= response.code < 300:
                    raise LLMHTTPError(response.code, "", redact(url))
                return json.loads(data.decode("utf-8"))

            # the body is read whatever the status: the connection then goes back to the pool
            return read_body(response).addCallback(decode)

        d.addCallback(read)
        d.addTimeout(self.WINDOW_TIMEOUT, self._reactor)
        return d

    # --- prompt speed ---------------------------------------------------------------------------

    #: tokens/s assumed for the embedded model before its first measured reply (its prompt
    #: evaluation on one thread of a 2-core machine, docs/design.md, "The embedded model")
    EMBEDDED_PROMPT_SPEED = 150.0

    def observe_prompt_speed(self, stats) -> None:
        """
        Take the prompt figures of a reply-server response
        (:meth:`ChatResult.prompt_stats`) into :attr:`measured_prompt_speed`
        (:func:`ai_contrib.core.budget.updated_prompt_speed`).
        """
        if stats:
            from ai_contrib.core.budget import updated_prompt_speed

            self.measured_prompt_speed = updated_prompt_speed(
                self.measured_prompt_speed, stats.get("evaluated_tokens"), stats.get("prompt_ms"))

    @property
    def prompt_speed(self) -> float | None:
        """
        The reply server's prompt evaluation speed in tokens/s: ``AI_PROMPT_TOKENS_PER_SECOND``
        if set, else as measured from its responses, else :data:`EMBEDDED_PROMPT_SPEED` for
        the embedded model; None for a server that has reported no timings.
        """
        configured = get_setting("PROMPT_TOKENS_PER_SECOND")
        if configured:
            return float(configured)
        if self.measured_prompt_speed is not None:
            return self.measured_prompt_speed
        return self.EMBEDDED_PROMPT_SPEED if self.embedded else None

    @property
    def evaluation_step(self) -> int | None:
        """
        Prompt tokens the reply server evaluates in one step, between which alone it takes a
        new request or drops a cancelled one: the embedded server's
        :data:`ai_contrib.llm.embedded.EVALUATION_STEP_TOKENS`; None (unknown) for another
        server (``docs/design.md``, "Warming the cache after a compaction").
        """
        if not self.embedded:
            return None
        from ai_contrib.llm.embedded import EVALUATION_STEP_TOKENS

        return EVALUATION_STEP_TOKENS

    # --- the server and the fields it takes ----------------------------------------------------

    def known_server(self) -> ServerInfo:
        """
        What the server is as known now, without a request (``docs/design.md``, "Sampling per
        server and model"): the embedded model is llama.cpp's server with its GGUF; otherwise
        ``AI_LLM_SERVER_KIND`` where it names a kind, and what :meth:`server_info` found.

        Returns:
            ServerInfo

        Raises:
            ValueError: ``AI_LLM_SERVER_KIND`` is not one of its words.
        """
        if self.embedded:
            return {"kind": LLAMA_CPP, "model": self._embedded_model_name()}
        forced = _server_kind_setting()
        found = self._server or {"kind": None, "model": None}
        return dict(found, kind=found["kind"] if forced == "auto" else forced)

    def server_info(self) -> Deferred:
        """
        :meth:`known_server`, asking the server first when it is not known: ``GET /props``,
        which llama.cpp's server answers with its settings and model file; any other answer, or
        HTTP 4xx, means another OpenAI-compatible server. No answer (refused, 5xx, timeout) is
        asked again after :data:`WINDOW_RETRY_SECONDS`; meanwhile the kind stays None.

        Returns:
            Deferred[dict]: as :meth:`known_server`; never errbacks.
        """
        known = self.known_server()
        if self.embedded or self._server is not None or _server_kind_setting() == OPENAI:
            return defer.succeed(known)
        return self._ask_server().addCallback(lambda _found: self.known_server())

    @defer.inlineCallbacks
    def _discover_server(self):
        base_url, api_key = yield self._endpoint()
        if has_login(base_url):
            return None  # its requests are refused anyway (_request), and it is not asked
        root = re.sub(r"/v1$", "", base_url)
        try:
            data = yield self._get_json(f"{root}/props", api_key)
        except LLMHTTPError as err:
            if 400 <= err.status < 500:  # no such route: not llama.cpp's server
                self._server = {"kind": OPENAI, "model": None}
            return self._server
        if not self._note_props(data):
            self._server = {"kind": OPENAI, "model": None}
        return self._server

    def _note_props(self, data) -> bool:
        """Take what a ``/props`` answer says of the server (and of its context window); True
        when it is llama.cpp's."""
        model = llama_cpp_model(data)
        if model is None:
            return False
        self._server = {"kind": LLAMA_CPP, "model": model or None}
        window = _n_ctx_of_props(data)
        if window and self._window is None:
            self._window = (window, "llama.cpp /props")
            self.context_window_source = "llama.cpp /props"
        return True

    def _embedded_model_name(self):
        """The embedded model's GGUF file name, or None when there is none to find."""
        if self._embedded_model is None:
            from ai_contrib.llm.embedded import model_path

            try:
                self._embedded_model = os.path.basename(model_path())
            except LLMError:
                self._embedded_model = ""
        return self._embedded_model or None

    def explicit_sampling(self, purpose=None) -> dict[str, Any]:
        """
        The sampling fields the admin set, sent to any server: ``repeat_penalty``
        (``AI_LLM_REPEAT_PENALTY``), ``repeat_last_n`` (``AI_LLM_REPEAT_LAST_N``) and, for a
        reply, an ``AI_LLM_REPLY_SAMPLING`` dict.

        Returns:
            dict: body fields (a new dict), ``{}`` when every one is left to the model's profile.

        Raises:
            ValueError: ``AI_LLM_REPLY_SAMPLING`` is neither ``"auto"``, None nor a dict.
        """
        fields = {}
        penalty = get_setting("LLM_REPEAT_PENALTY")
        if penalty is not None:
            fields["repeat_penalty"] = float(penalty)
        last_n = get_setting("LLM_REPEAT_LAST_N")
        if last_n is not None:
            fields["repeat_last_n"] = int(last_n)
        value = get_setting("LLM_REPLY_SAMPLING")
        if isinstance(value, dict):
            if purpose == "reply":
                fields.update(value)
        elif value is not None and not _is_auto(value):
            raise ValueError(f"AI_LLM_REPLY_SAMPLING={value!r}: expected 'auto', None or a dict "
                             "of request fields")
        return fields

    def request_fields(self, purpose=None, model=None) -> dict[str, Any]:
        """
        The fields a request of ``purpose`` for ``model`` sends besides the standard ones, as
        the server is known now (:func:`ai_contrib.llm.sampling.sampling_fields`): the profile of
        the model a llama.cpp server reports (else of ``model``, default the client's), then
        what the admin set (:meth:`explicit_sampling`); none once the server refused one.

        Returns:
            dict: body fields, e.g. ``{"repeat_penalty": 1.25, "dry_multiplier": 0.8, ...}``.

        Raises:
            ValueError: as :meth:`explicit_sampling` and :meth:`known_server`.
        """
        explicit = self.explicit_sampling(purpose)
        if self.extra_fields_refused:
            return {}
        server = self.known_server()
        auto = _is_auto(get_setting("LLM_REPLY_SAMPLING"))
        fields = sampling_fields(server["kind"], server["model"] or model or self.model,
                                 purpose, explicit, profile_replies=auto)
        if purpose in MEMORY_PURPOSES and self._starts_server:
            from ai_contrib.llm.embedded import memory_server_enabled

            if memory_server_enabled():
                # memory work one request at a time in the memory server's first slot, as when
                # it had one: its last is for warm-ups handed over (ai_contrib.llm.handover)
                fields = {**fields, "id_slot": 0}
        return fields

    # --- payload ---------------------------------------------------------------------------------

    def build_payload(
        self, messages, model=None, max_tokens=None, temperature=None, tools=None, **extra
    ) -> dict[str, Any]:
        """
        Build the JSON request body of :meth:`chat` (no I/O).

        Returns:
            dict: ``{"model", "messages" (wire form, see :func:`to_wire_message`), "max_tokens",
            "temperature", "seed"?, "tools"?, **extra}``: ``seed`` is sent when ``LLM_SEED`` is
            set. Sampling fields outside OpenAI's API come in ``extra``
            (:meth:`request_fields`). An ``extra`` key set to ``None`` removes that field.
        """
        payload = {
            "model": model or self.model,
            "messages": [to_wire_message(m) for m in messages],
            "max_tokens": int(
                max_tokens if max_tokens is not None else get_setting("LLM_MAX_REPLY_TOKENS")
            ),
            "temperature": float(
                temperature if temperature is not None else get_setting("LLM_TEMPERATURE")
            ),
        }
        seed = get_setting("LLM_SEED")
        if seed is not None:
            payload["seed"] = int(seed)
        if tools:
            payload["tools"] = list(tools)
        for key, value in extra.items():
            if value is None:
                payload.pop(key, None)
            else:
                payload[key] = value
        if not payload.get("model"):
            payload.pop("model", None)
        return payload

    # --- the call --------------------------------------------------------------------------------

    def chat(self, messages, model=None, max_tokens=None, temperature=None, tools=None,
             timeout=None, purpose=None, **extra) -> Deferred:
        """
        Ask for one chat completion.

        Args:
            messages (list[dict]): contrib message dicts or plain ``{"role", "content"}`` dicts.
            model (str, optional): overrides the client's model.
            max_tokens (int, optional): tokens the reply may have; default ``LLM_MAX_REPLY_TOKENS``.
                Always sent: llama.cpp's server default is unlimited.
            temperature (float, optional): default ``LLM_TEMPERATURE``.
            tools (list[dict], optional): OpenAI tool schemas
                ``[{"type": "function", "function": {"name", "description", "parameters"}}]``.
            timeout (float, optional): seconds this request may take (default the client's):
                background memory work allows its long prompts more time than a reply.
            purpose (str, optional): what the request is for, one of :data:`PURPOSES`; not
                sent, but set as ``purpose`` on the :class:`ChatResult` and on the error.
                :data:`MEMORY_PURPOSES` go to the embedded memory server where one runs.
            **extra: more body fields (``stop``, ``response_format``, ``seed``...); ``None`` drops one.

        Returns:
            Deferred[ChatResult]. Cancelling it aborts the request.

        Raises:
            ValueError: ``purpose`` is not one of :data:`PURPOSES` (at once, not in the Deferred).

        Errors (errback): :class:`LLMTimeoutError`, :class:`LLMHTTPError` (and
        :class:`LLMContextOverflowError`), :class:`LLMResponseError`, :class:`LLMConnectionError`,
        ``ai_contrib.llm.embedded.EmbeddedServerError`` if the embedded server cannot start.
        A request whose connection dies before any response byte (a pooled keep-alive connection
        the server had just closed) is sent once more on a fresh connection.
        """
        _check_purpose(purpose)
        self.request_fields(purpose)  # a bad setting raises here, not in the Deferred

        def build(fields):
            return self.build_payload(messages, model, max_tokens, temperature, tools,
                                      **{**fields, **extra})

        return _tagged(self._send("chat/completions", build, model, purpose, parse_chat_response,
                                  timeout), purpose)

    def complete(self, prompt, model=None, max_tokens=None, temperature=None, timeout=None,
                 purpose=None, **extra) -> Deferred:
        """
        Ask for one text completion of ``prompt`` at ``{base_url}/completions``, with no chat
        template around it: what a base model without one needs (the summary prompt ending in
        ``SUMMARY:``, ``docs/design.md``, "Structured summaries").

        Args:
            prompt (str): the whole prompt text.
            model, max_tokens, temperature, timeout, purpose, **extra: as for :meth:`chat`.

        Returns:
            Deferred[ChatResult] with the completion text as ``content``.

        Errors (errback): as for :meth:`chat`.
        """
        _check_purpose(purpose)
        self.request_fields(purpose)  # a bad setting raises here, not in the Deferred

        def build(fields):
            payload = self.build_payload([], model, max_tokens, temperature,
                                         **{**fields, **extra})
            del payload["messages"]
            payload["prompt"] = str(prompt)
            return payload

        return _tagged(self._send("completions", build, model, purpose,
                                  parse_completion_response, timeout), purpose)

    @defer.inlineCallbacks
    def _send(self, path, build, model, purpose, parse, timeout):
        """
        Learn what the server is (:meth:`server_info`), build the body with the fields it takes
        (``build(fields) -> dict``, :meth:`request_fields`) and send it; a server that answers
        HTTP 400 naming a field outside OpenAI's API is asked again once without any such field,
        and is sent none from then on (logged once). Deferred[the ``parse``d result].
        """
        yield self.server_info()
        payload = build(self.request_fields(purpose, model))
        if self.extra_fields_refused:
            payload = standard_only(payload)
        try:
            result = yield self._request(path, payload, parse, timeout, purpose)
        except LLMHTTPError as err:
            refused = ([] if isinstance(err, LLMContextOverflowError)
                       else refused_fields(err.status, err.body, extra_fields(payload)))
            if not refused:
                raise
            self._refused(refused, err)
            result = yield self._request(path, standard_only(payload), parse, timeout, purpose)
        return result

    def _refused(self, fields, err):
        """Remember that the server refuses fields outside OpenAI's API; log it the first time
        (the URL without its login, the field names and the status: no key, no body)."""
        if not self.extra_fields_refused:
            logger.warning(
                "LLM server at %s refused the request field(s) %s (HTTP %s): sending it only "
                "OpenAI's standard fields from now on", redact(err.url) or "?",
                ", ".join(fields), err.status)
        self.extra_fields_refused = True

    @defer.inlineCallbacks
    def _request(self, path, payload, parse, timeout=None, purpose=None):
        timeout = float(timeout or self.timeout)
        base_url, api_key = yield self._endpoint(purpose)
        if has_login(base_url):
            # the HTTP client sends no login from a URL: say so, without the login
            raise LLMConnectionError(
                f"the LLM server's URL {redact(base_url)} holds a user name or password, which "
                "are not sent: give the server's key as AI_LLM_API_KEY instead")
        url = f"{base_url}/{path}"
        headers = {"Content-Type": ["application/json"], "Accept": ["application/json"]}
        if api_key:
            headers["Authorization"] = [f"Bearer {api_key}"]
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            status, data = yield self._post_once(url, headers, body, timeout)
        except Exception:
            failure = Failure()
            if not _is_dropped_connection(failure):
                self._raise_translated(failure, url, timeout)
            # the connection closed under the request: a keep-alive socket the server had just
            # dropped; POSTs are never retried by Twisted, so retry once here
            try:
                status, data = yield self._post_once(url, headers, body, timeout)
            except Exception:
                self._raise_translated(Failure(), url, timeout)
        # whatever the status, a body echoing the key must not reach an exception, a log line,
        # an admin's screen or a stored summary
        text = redact(data.decode("utf-8", errors="replace"), (api_key,))
        if not 200 <= status < 300:
            raise http_error(status, text.encode("utf-8"), url, api_key)
        try:
            decoded = json.loads(text)
        except ValueError as err:
            raise LLMResponseError(
                f"LLM server at {url} sent a body that is not JSON ({err}): {text[:200]!r}"
            ) from None
        # and again once decoded: a JSON escape ("\u0073k-...") spells the key only now, and a
        # tool call's arguments are JSON inside JSON (docs/design.md, "Secrets")
        decoded = redact_data(decoded, (api_key,))
        try:
            return parse(decoded)
        except LLMResponseError as err:
            raise LLMResponseError(f"LLM server at {url}: {err}") from None

    def _endpoint(self, purpose=None):
        """
        Deferred[(base_url, api_key)]: the configured endpoint, or the embedded server's: the
        memory server's for a call whose ``purpose`` is in :data:`MEMORY_PURPOSES`.
        """
        if not self._starts_server:
            return defer.succeed((self.base_url, self.api_key))
        from ai_contrib.llm.embedded import start_embedded_server

        role = "memory" if purpose in MEMORY_PURPOSES or purpose == HANDOVER_PURPOSE \
            else "reply"
        return start_embedded_server(role=role).addCallback(
            lambda srv: (srv.base_url, srv.api_key))

    @property
    def starts_server(self) -> bool:
        """Whether the client sends to the embedded servers it starts (no ``AI_LLM_BASE_URL``)."""
        return self._starts_server

    @defer.inlineCallbacks
    def slot_request(self, role, slot=None, action=None, filename=None,
                     timeout=None) -> Deferred:
        """
        One of llama.cpp's slot requests to an embedded server (``role`` ``"reply"`` or
        ``"memory"``): with no ``action``, ``GET /slots`` (a list of dicts, each with ``"id"``,
        ``"is_processing"`` and, once used, ``"id_task"``); else ``POST
        /slots/<slot>?action=<action>`` with ``{"filename": filename}`` (``"save"``: the
        slot's cache to that file of the servers' slot directory; ``"restore"``: the file into
        the slot), whose decoded answer it fires with (``"n_saved"`` or ``"n_restored"``
        tokens). llama.cpp keeps a save or restore for a slot that is busy until it is free.

        Errors (errback): :class:`LLMHTTPError` (a file that does not fit the slot: HTTP 400),
        :class:`LLMTimeoutError` after ``timeout`` seconds (default the client's),
        :class:`LLMConnectionError`; ``RuntimeError`` for a client of an external server.
        """
        if not self._starts_server:
            raise RuntimeError("slot requests go to the embedded servers only")
        from ai_contrib.llm.embedded import start_embedded_server

        server = yield start_embedded_server(role=role)
        root = server.base_url.rsplit("/v1", 1)[0]
        if action is None:
            return (yield self._get_json(f"{root}/slots", server.api_key))
        url = f"{root}/slots/{int(slot)}?action={action}"
        headers = {"Content-Type": ["application/json"], "Accept": ["application/json"],
                   "Authorization": [f"Bearer {server.api_key}"]}
        body = json.dumps({"filename": filename}).encode("utf-8")
        try:
            status, data = yield self._post_once(url, headers, body, timeout)
        except Exception:
            self._raise_translated(Failure(), url, timeout)
        if not 200 <= status < 300:
            raise http_error(status, data, url, server.api_key)
        return json.loads(data.decode("utf-8"))

    def _post_once(self, url, headers, body, timeout=None):
        """One POST with a deadline covering connect, request, response and body. -> (status, bytes)."""
        d = self._http.post(url, data=body, headers=headers, unbuffered=True, allow_redirects=False)

        def read(response):
            return read_body(response).addCallback(lambda data: (response.code, data))

        d.addCallback(read)
        timed_out = []

        def on_deadline():
            timed_out.append(True)
            d.cancel()  # reaches the pending connect/request/readBody, which aborts the socket

        deadline = self._reactor.callLater(timeout or self.timeout, on_deadline)

        def settle(result):
            if deadline.active():
                deadline.cancel()
            if timed_out and isinstance(result, Failure):
                raise _Timeout()
            return result

        return d.addBoth(settle)

    def _raise_translated(self, failure, url, timeout=None):
        """Raise the LLMError for a failure of :meth:`_post_once`; re-raise anything else as is
        (a caller's cancellation stays a ``CancelledError``)."""
        reasons = getattr(failure.value, "reasons", None) or []
        if any(isinstance(r, Failure) and r.check(defer.CancelledError) for r in reasons):
            raise defer.CancelledError()  # the caller cancelled while the request was in flight
        if failure.check(_Timeout):
            raise LLMTimeoutError(
                f"LLM server at {url} sent no complete response within "
                f"{timeout or self.timeout:g} s"
            ) from None
        if failure.check(net_error.ConnectError, net_error.DNSLookupError):
            raise LLMConnectionError(
                f"cannot connect to LLM server at {url}: {failure.value}"
            ) from None
        if failure.check(ResponseFailed, RequestTransmissionFailed, net_error.ConnectionClosed):
            reasons = getattr(failure.value, "reasons", None) or [failure]
            why = "; ".join(str(r.value) if isinstance(r, Failure) else str(r) for r in reasons)
            raise LLMConnectionError(f"connection to LLM server at {url} was lost: {why}") from None
        failure.raiseException()

    # --- lifecycle -------------------------------------------------------------------------------

    def close(self) -> Deferred:
        """Close pooled connections. Returns a Deferred firing when they are closed."""
        return self._pool.closeCachedConnections()


# ------------------------------------------------------------------------------------------------
# the process-wide client

_default_client = None


def get_client() -> LLMClient:
    """
    Return the process-wide :class:`LLMClient`, built from the settings on first use.

    When ``AI_LLM_BASE_URL`` is unset it uses the embedded model server, starting it (or waiting
    for the start under way) before its first request.
    """
    global _default_client
    if _default_client is None:
        _default_client = LLMClient()
    return _default_client


def use_client(client) -> LLMClient:
    """
    Make ``client`` the process-wide :class:`LLMClient` (scripts that start the embedded model
    themselves: ``LLMClient(base_url, api_key, embedded=True)``); :func:`reset_client` first.

    Returns:
        LLMClient: ``client``.
    """
    global _default_client
    _default_client = client
    return client


def reset_client() -> Deferred:
    """
    Forget the process-wide client (tests, or after changing settings).

    Returns:
        Deferred firing when the old client's pooled connections are closed.
    """
    global _default_client
    old, _default_client = _default_client, None
    if old is None:
        return defer.succeed(None)
    return old.close()
