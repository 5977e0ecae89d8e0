"""
LLM I/O: the OpenAI-compatible chat client and the embedded model server.

- :mod:`ai_contrib.llm.client`: :class:`LLMClient` (treq, Deferreds), :func:`get_client` and
  :class:`ChatResult`;
- :mod:`ai_contrib.llm.errors`: the :class:`LLMError` family (also importable from ``client``);
- :mod:`ai_contrib.llm.embedded`: the local llama.cpp server (``xllamacpp``) in a child process,
  used when ``AI_LLM_BASE_URL`` is unset.
"""

from ai_contrib.llm.client import ChatResult, LLMClient, get_client, reset_client
from ai_contrib.llm.embedded import (
    EmbeddedServer,
    EmbeddedServerError,
    EmbeddedServerProcess,
    running_server,
    start_embedded_server,
    stop_embedded_server,
)
from ai_contrib.llm.errors import LLMConnectionError, LLMContextOverflowError, LLMError
from ai_contrib.llm.errors import LLMHTTPError, LLMResponseError, LLMTimeoutError

__all__ = [
    "ChatResult",
    "EmbeddedServer",
    "EmbeddedServerError",
    "EmbeddedServerProcess",
    "LLMClient",
    "LLMConnectionError",
    "LLMContextOverflowError",
    "LLMError",
    "LLMHTTPError",
    "LLMResponseError",
    "LLMTimeoutError",
    "get_client",
    "reset_client",
    "running_server",
    "start_embedded_server",
    "stop_embedded_server",
]
