"""
The errors of the LLM client and the embedded model server, apart from both so that each
imports them without importing the other (``docs/design.md``, "The LLM client").

All are subclasses of :class:`LLMError`; messages name the URL, never the API key:

- :class:`LLMTimeoutError`: no complete response within the client's timeout (seconds);
- :class:`LLMHTTPError`: the server answered with a non-2xx status
  (:class:`LLMContextOverflowError` when it says the prompt exceeds its context window);
- :class:`LLMResponseError`: the body is not JSON or has no usable ``choices``;
- :class:`LLMConnectionError`: connection refused or lost (after the one retry);
- ``ai_contrib.llm.embedded.EmbeddedServerError``: the embedded server cannot start.

:mod:`ai_contrib.llm.client` re-exports every name here.
"""

from __future__ import annotations

import json

from ai_contrib.core.redact import redact, redact_data

#: Characters of an error response body kept in :class:`LLMHTTPError` messages.
BODY_EXCERPT_CHARS = 500

# phrases servers use when a prompt is longer than the context window
_OVERFLOW_MARKERS = (
    "exceed_context_size",  # llama.cpp server
    "context_length_exceeded",  # OpenAI
    "maximum context length",  # OpenAI, vLLM
    "context window",
    "too many tokens",
)



class LLMError(Exception):
    """Base class of every error raised by the LLM client and the embedded server."""


class LLMTimeoutError(LLMError):
    """No complete response arrived within the client's timeout (seconds)."""


class LLMConnectionError(LLMError):
    """The server could not be reached, or the connection died (after the one retry)."""


class LLMResponseError(LLMError):
    """The server answered 2xx but the body is not JSON or has no usable ``choices``."""


class LLMHTTPError(LLMError):
    """
    The server answered with a non-2xx HTTP status.

    Attributes:
        status (int): the HTTP status code, e.g. 500.
        body (str): the start of the response body (at most :data:`BODY_EXCERPT_CHARS`
            characters, with the API key masked should the server echo it).
        url (str): the URL that was requested.
    """

    def __init__(self, status, body, url=""):
        self.status = int(status)
        self.body = body
        self.url = url
        detail = _error_detail(body)
        super().__init__(f"LLM server at {url or '?'} answered HTTP {self.status}: {detail}")


class LLMContextOverflowError(LLMHTTPError):
    """An :class:`LLMHTTPError` saying the prompt exceeds the model's context window.

    llama.cpp answers HTTP 400 ``exceed_context_size_error``, OpenAI ``context_length_exceeded``.
    Callers can retry with less input (what Codex CLI does when its summary call overflows).
    """


def _error_detail(body):
    """The server's own error message from an OpenAI-style error body, else the raw excerpt."""
    try:
        data = json.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:BODY_EXCERPT_CHARS]
        if isinstance(err, str):
            return err[:BODY_EXCERPT_CHARS]
    except (ValueError, TypeError):
        pass
    return body if body else "(empty body)"


def refuses_response_format(err) -> bool:
    """
    True if ``err`` is a server's refusal of the ``response_format`` field (structured output):
    HTTP 400, 422 or 501 whose body names ``response_format`` or ``json_schema``, not a context
    overflow (``docs/design.md``, "Tool calls").

    Args:
        err (Exception): what a request errbacked with.
    """
    if not isinstance(err, LLMHTTPError) or isinstance(err, LLMContextOverflowError):
        return False
    body = (err.body or "").lower()
    return err.status in (400, 422, 501) and ("response_format" in body or "json_schema" in body)


def _is_overflow(status, body):
    if status not in (400, 413):
        return False
    low = body.lower()
    return any(marker in low for marker in _OVERFLOW_MARKERS)


def http_error(status, body_bytes, url, api_key=None) -> LLMHTTPError:
    """
    Build the :class:`LLMHTTPError` (or :class:`LLMContextOverflowError`) for an error response.

    Args:
        status (int): HTTP status.
        body_bytes (bytes): the response body.
        url (str): the requested URL.
        api_key (str, optional): masked as ``***`` if the server echoes it.
    """
    secrets = (api_key,) if api_key else ()
    text = body_bytes.decode("utf-8", errors="replace")
    try:
        # the message an error reports is read from the decoded body, where a JSON escape
        # ("\u0073k-...") spells the key: redact what decoding gives (docs/design.md, "Secrets")
        decoded = json.loads(text)
    except ValueError:
        decoded = None
    if isinstance(decoded, (dict, list)):
        text = json.dumps(redact_data(decoded, secrets), ensure_ascii=False)
    body = redact(text, secrets)
    if api_key:  # however short
        body = body.replace(api_key, "***")
    body = body[:BODY_EXCERPT_CHARS]
    cls = LLMContextOverflowError if _is_overflow(status, body) else LLMHTTPError
    return cls(status, body, url)
