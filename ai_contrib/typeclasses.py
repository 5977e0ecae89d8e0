"""
Typeclasses: the Evennia shell around the compaction core.

``AssistantCharacter`` is the NPC players talk to. ``AssistantScript`` (a persistent Script on
it) holds the conversation history, ticks, answers players through the LLM, and runs sleep and
emergency compaction through :mod:`ai_contrib.rag_memory` (``docs/design.md``, "Summary
compaction").

Storage: every message goes first to the NPC's append-only archive
(:mod:`ai_contrib.memory.archive`), then into the runtime history held in ``ndb``.
``script.db.conversation_history`` is a checkpoint of that runtime history, written every
``checkpoint_interval`` seconds when it changed, after each compaction and when the server stops;
on load the archive records written after the checkpoint are replayed. So an append costs one
file line, not a re-pickle of the whole list (O(n) per append, measured in ``docs/design.md``,
"The archive").
"""

import os
import time
import uuid
from collections import deque

from django.conf import settings
from twisted.internet import defer, reactor

from evennia.objects.objects import DefaultCharacter
from evennia.scripts.scripts import DefaultScript
from evennia.utils import logger
from evennia.utils.ansi import strip_ansi, strip_mxp
from evennia.utils.dbserialize import deserialize

from . import sleep_report
from .gossip import meet
from .core.audience import normalise_audience
from .core.gossip import PUBLIC_ROOM_TAG
from .core.budget import effective_budget
from .core.messages import make_message
from .core.prompts import prompt_head
from .core.tick import TickState, due, tick_needed
from .core.text import normalise_player_text
from .core.tokens import count_tokens
from .memory.archive import get_archive
from .memory.journal import new_journal
from .memory.runtime import RuntimeHistory
from .notify import notify_admins
from .scene import note_exchange
from .settings import get_setting, option_value
from .usage_log import record_usage

DEFAULT_PERSONA = "You are {name}, a friendly inhabitant of this world."
SCRIPT_KEY = "assistant_script"

# The documented per-NPC Attributes (docs/design.md, "Per-NPC Attributes"). None is set when the
# script is created: AssistantScript.cfg reads the game's AI_<NAME> setting at use time until
# the NPC gets an Attribute of its own; set one to None to follow the setting again.
CONFIG_ATTRIBUTES = (
    "compact_enabled",
    "compact_sleep_threshold",
    "compact_emergency_threshold",
    "compact_preserve_window",
    "compact_model",
    "compact_prompt",
    "max_context_tokens",
    "pre_compact_extraction_enabled",
    "pre_compact_max_iterations",
    "pre_compact_prompt",
    "llm_model",
    "compact_strategy",
    "mask_window",
)


def get_assistant_script(character):
    """Return the ``AssistantScript`` on ``character``, or None."""
    if character is None:
        return None
    for script in character.scripts.get(SCRIPT_KEY):
        return script
    return None


def _archive_dir():
    configured = get_setting("ARCHIVE_DIR")
    if configured:
        return configured
    return os.path.join(getattr(settings, "GAME_DIR", os.getcwd()), "server", "ai_archive")


def room_listeners(character):
    """
    Who hears what ``character`` says now: ``{dbref: name}`` of the characters in its room,
    itself and other AI NPCs left out: a reply is built for the players' ears (other NPCs hear
    it too and store it with this audience, ``docs/design.md``, "A room of NPCs"). Characters
    of players who logged off are not in the room (Evennia moves them to no location).
    """
    room = getattr(character, "location", None)
    if room is None:
        return {}
    return {
        obj.dbref: obj.key
        for obj in room.contents
        if obj != character
        and isinstance(obj, DefaultCharacter)
        and not isinstance(obj, AssistantCharacter)
    }


def room_npcs(character):
    """The other AI NPCs in ``character``'s room (a list; empty without a room)."""
    room = getattr(character, "location", None)
    if room is None:
        return []
    return [obj for obj in room.contents
            if obj != character and isinstance(obj, AssistantCharacter)]


def npc_names(npc):
    """An NPC's key and aliases: the words that address it."""
    return [npc.key] + list(npc.aliases.all())


#: speakers a room's record of exchanges keeps at most (the oldest are forgotten first)
ROOM_RECORD_SPEAKERS = 200


def room_exchanges(room):
    """
    The room's record of exchanges: ``{speaker dbref: {npc dbref: unix seconds}}``, when each
    speaker last spoke with each AI NPC of the room (a line answered by it, or its reply), in
    ``room.ndb.ai_exchanges`` (``docs/design.md``, "A room of NPCs"). It lives in memory: after
    a reload a player names the NPC again, as after a pause longer than the conversation window.
    """
    record = room.ndb.ai_exchanges
    if record is None:
        record = room.ndb.ai_exchanges = {}
    return record


def note_room_exchange(room, speaker, npcs, when=None):
    """Record in :func:`room_exchanges` that ``speaker`` (dbref) exchanged with ``npcs``
    (dbrefs) at ``when`` (Unix seconds, default now); the record keeps the newest
    :data:`ROOM_RECORD_SPEAKERS` speakers."""
    if room is None or not speaker or not npcs:
        return
    record = room_exchanges(room)
    seen = record.pop(speaker, {})
    at = time.time() if when is None else when
    seen.update({npc: at for npc in npcs})
    record[speaker] = seen  # re-inserted: dict order is the order of last use
    while len(record) > ROOM_RECORD_SPEAKERS:
        record.pop(next(iter(record)))


def line_answerers(npc, speaker, text, to=None):
    """
    Which AI NPCs of ``npc``'s room answer a line (:func:`ai_contrib.core.room_talk.answerers`),
    decided once per line for the whole room: the first NPC to hear it decides, records the
    exchange, and leaves the decision in ``room.ndb.ai_line`` for the others, who hear the same
    line right after it in the same delivery. A line heard again by an NPC that already took it
    is a new line.

    Args:
        npc (AssistantCharacter): the NPC hearing the line.
        speaker (Object | str): who said it (a character, or a dbref).
        text (str): the normalised words.
        to (Object, optional): whom it was ``talk``-ed to.

    Returns:
        tuple[tuple[str, ...], str | None]: ``(dbrefs of the NPCs that answer, reason)``.
    """
    from .core.room_talk import answerers

    room = npc.location
    dbref = getattr(speaker, "dbref", None) or str(speaker)
    key = (dbref, text, getattr(to, "dbref", None))
    shared = room.ndb.ai_line if room is not None else None
    if shared and shared["key"] == key and npc.dbref not in shared["taken"]:
        shared["taken"].add(npc.dbref)
        return shared["answer"]
    others = room_npcs(npc) if room is not None else []
    people = [npc] + others
    now = time.time()
    exchanges = room_exchanges(room).get(dbref, {}) if room is not None else {}
    script = npc.assistant
    window = float((script.cfg("conversation_window") if script else None) or 0)

    def described(obj):
        mind = obj.assistant
        policy = str((mind.cfg("answer_when") if mind else None) or "addressed").lower()
        return {"id": obj.dbref, "names": npc_names(obj), "persona": obj.db.persona or "",
                "always": policy == "always"}

    answer = answerers(
        text, dbref, [described(obj) for obj in people], to=key[2], exchanges=exchanges,
        now=now, window=window, from_npc=isinstance(speaker, AssistantCharacter))
    if room is not None:
        room.ndb.ai_line = {"key": key, "answer": answer, "taken": {npc.dbref}}
        if answer[0] and not isinstance(speaker, AssistantCharacter):
            note_room_exchange(room, dbref, answer[0], now)
            # a player's line goes first: NPC-to-NPC replies being written give the model
            # server up to it (docs/design.md, "A room of NPCs")
            for obj in people:
                mind = obj.assistant
                if mind is not None:
                    mind.give_up_npc_turn()
    return answer


def _speech_from_say(text):
    """Extract the spoken words from a say line like ``Bob says, "hello"``."""
    plain = strip_ansi(text or "")
    first, last = plain.find('"'), plain.rfind('"')
    if first == -1 or last <= first:
        return None
    return plain[first + 1 : last].strip() or None


def _log_failure(what):
    """
    An errback that logs ``"<what> failed: <error>"`` with the traceback and swallows the
    failure (returns None): background work must never leave an unhandled error in a Deferred.
    """

    def errback(failure):
        logger.log_trace(f"{what} failed: {failure.getErrorMessage()}")

    return errback


_checkpoint_queue = deque()


def _queue_checkpoint(script):
    """
    Checkpoint ``script`` soon, one script per reactor turn: a checkpoint re-pickles the whole
    history (O(n), ~10-30 ms for long ones), and many NPCs due at once must not stall the
    reactor together.
    """
    script.ndb.checkpoint_queued = True
    _checkpoint_queue.append(script)
    _schedule_drain()


_drain_call = None  # the pending drain (an IDelayedCall), if any


def _schedule_drain():
    # keyed on the pending call, not on the queue's length: a drain call that never ran (a
    # reactor stopped or its calls cancelled) must not leave the queue stuck for good
    global _drain_call
    if _drain_call is None or not _drain_call.active():
        _drain_call = reactor.callLater(0, _drain_checkpoint_queue)


def _drain_checkpoint_queue():
    if not _checkpoint_queue:
        return
    script = _checkpoint_queue.popleft()
    try:
        script.ndb.checkpoint_queued = False
        # a script deleted since it was queued has no row left to write Attributes for (on
        # PostgreSQL the write fails the whole transaction when it commits)
        if script.id is None or not type(script).objects.filter(id=script.id).exists():
            raise LookupError(f"script #{script.id} no longer exists")
        script.checkpoint()
    except Exception as err:  # a script deleted meanwhile: nothing left to save
        logger.log_warn(f"AI checkpoint skipped: {err}")
    if _checkpoint_queue:
        _schedule_drain()


class AssistantCharacter(DefaultCharacter):
    """
    An NPC with an LLM mind.

    Attributes:
        db.persona (str): who the NPC is; the first system message of every reply prompt.
        db.journal (dict): ``{"entries": [...], "consolidated_entry_ids": [...]}``
            (shape in :mod:`ai_contrib.memory.journal`).
        db.entity_profiles (dict): ``{entity_name: [observation, ...]}``.

    The NPC hears ``say`` in its room (and ``talk <npc> = <text>``), other AI NPCs' speech
    included; it answers an NPC only when the line names it, at most ``AI_NPC_REPLY_DEPTH``
    NPC replies deep after a player's line and once per ``AI_NPC_REPLY_COOLDOWN`` seconds, so
    two NPCs never talk each other into a loop (``docs/design.md``, "A room of NPCs").
    """

    def at_object_creation(self):
        super().at_object_creation()
        if not self.db.persona:
            self.db.persona = DEFAULT_PERSONA.format(name=self.key)
        self.db.journal = new_journal()
        self.db.entity_profiles = {}
        self.locks.add("get:false();call:false()")
        self.scripts.add(AssistantScript, key=SCRIPT_KEY, autostart=True)

    @property
    def assistant(self):
        """This NPC's :class:`AssistantScript` (or None)."""
        return get_assistant_script(self)

    def msg(self, text=None, from_obj=None, session=None, options=None, **kwargs):
        super().msg(text=text, from_obj=from_obj, session=session, options=options, **kwargs)
        if not text or from_obj is None or from_obj == self:
            return
        if isinstance(from_obj, (list, tuple)):
            from_obj = from_obj[0] if from_obj else None
        if from_obj is None:
            return
        msgtype = None
        if isinstance(text, (list, tuple)):
            text, meta = (text[0], text[1] if len(text) > 1 else {})
            msgtype = (meta or {}).get("type")
        if msgtype == "say":
            # another AI NPC's speech is heard too (docs/design.md, "A room of NPCs"): stored
            # like a player's, answered only when it names this NPC, within the depth limit
            speech = _speech_from_say(text)
            if speech:
                self.at_heard_say(from_obj, speech)
        elif isinstance(from_obj, AssistantCharacter):
            return  # an NPC's poses and moves are no events for another NPC
        elif msgtype in self.observed_types and isinstance(from_obj, DefaultCharacter):
            # a pose or emote, an arrival or a departure, in the room's own words
            # (docs/design.md, "Scene, events and people"); the NPC's own never reach here
            self.at_observed(from_obj, strip_mxp(strip_ansi(str(text or ""))),
                             "pose" if msgtype == "pose" else "move")

    #: message types (Evennia's ``msg`` ``type``) the NPC records as events: poses and emotes
    #: (``"pose"``) and the room's announcements of characters moving (``announce_move_from``
    #: and ``announce_move_to`` send the ``move_type`` of ``move_to``: ``"move"`` by default,
    #: ``"traverse"`` through an exit, ``"teleport"``). A game with moves of its own types
    #: adds them here.
    observed_types = ("pose", "move", "traverse", "teleport")

    def at_observed(self, actor, text, event, audience=None):
        """
        Called when the NPC sees ``actor`` do something in its room: ``text`` is the game's
        line for it (markup stripped), ``event`` ``"pose"``, ``"move"`` or ``"give"``,
        ``audience`` the dbrefs of who else saw it (default: everyone in the room). It is
        recorded as an event (:meth:`AssistantScript.observe`): never a line to answer.
        """
        script = self.assistant
        if script:
            script.observe(actor, text, event, audience=audience)

    def at_post_move(self, source_location, move_type="move", **kwargs):
        """
        The NPC entered a room: it and the AI NPCs of its gossip networks already there trade
        what they learned in public (:func:`ai_contrib.gossip.meet`; ``docs/design.md``,
        "Gossip"). A failure is logged and never stops the move.
        """
        super().at_post_move(source_location, move_type=move_type, **kwargs)
        if self.location is None or self.location == source_location:
            return
        try:
            meet(self, SCRIPT_KEY)
        except Exception:  # gossip is housekeeping: the move has happened whatever it does
            logger.log_trace(f"AI {self}: gossip on meeting failed")

    def at_object_receive(self, moved_obj, source_location, move_type="move", **kwargs):
        """
        A character gave the NPC something: recorded as an event whose audience is the giver
        alone (Evennia's ``give`` tells no one else in the room).
        """
        super().at_object_receive(moved_obj, source_location, move_type=move_type, **kwargs)
        if (move_type == "give" and isinstance(source_location, DefaultCharacter)
                and source_location != self):
            self.at_observed(source_location,
                             f"{source_location.key} gives you {moved_obj.key}.", "give",
                             audience=[source_location.dbref])

    def at_heard_say(self, speaker, speech, to=None, audience=None):
        """
        Called when ``speaker`` says ``speech`` to or near this NPC.

        Args:
            to (Object, optional): whom the line was said to (``talk <npc> = ...``); None for
                a ``say`` to the room. Whether the NPC answers is decided by
                :meth:`AssistantScript.receive_speech`.
            audience (iterable[str], optional): dbrefs of who else heard it (the speaker is
                added); None: the characters in the room. ``talk/private`` gives ``[]``.
        """
        script = self.assistant
        if script:
            script.receive_speech(speaker, speech, audience=audience, to=to)


def player_text(text):
    """
    What a player typed, as the game stores and repeats it: Evennia's colour and MXP codes
    stripped, then :func:`ai_contrib.core.text.normalise_player_text` (one line, no control
    characters, special tokens broken up, at most ``AI_PLAYER_TEXT_MAX_CHARS`` characters).

    The stripping is repeated until nothing changes: one pass turns Evennia's escaped bar
    (``"||/"`` typed) into a bare ``"|/"``, which the next pass (the NPC hearing the line, or
    the room's echo of it) would read as a line break. So the text is the same however often it
    goes through here, and the room hears exactly the line the NPC stores. Each pass that
    changes anything shortens the text, so it ends.

    Returns:
        str: possibly empty.
    """
    text = text or ""
    while True:
        stripped = strip_mxp(strip_ansi(text))
        if stripped == text:
            break
        text = stripped
    return normalise_player_text(text, int(get_setting("PLAYER_TEXT_MAX_CHARS")))


class AssistantScript(DefaultScript):
    """
    The NPC's mind: conversation history, ticks, replies, compaction.

    Configuration Attributes (the contrib's documented names, ``docs/design.md``, "Per-NPC
    Attributes"): ``compact_enabled``, ``compact_sleep_threshold`` (fraction),
    ``compact_emergency_threshold`` (fraction),
    ``compact_preserve_window`` (messages), ``compact_model``, ``compact_prompt``,
    ``max_context_tokens`` (tokens), ``last_compaction`` (ISO time or None),
    ``pre_compact_extraction_enabled``, ``pre_compact_max_iterations``, ``pre_compact_prompt``,
    ``llm_model``, ``operating_mode`` (``"awake"`` or ``"sleep"``), ``compact_strategy``
    (``summary``, ``mask``, ``hybrid``, ``cascade`` or ``replace_all``, see
    :mod:`ai_contrib.strategies`) and ``mask_window`` (turns). Any other option of
    :data:`ai_contrib.settings.DEFAULTS` can be given per NPC the same way (``mask_min_tokens``,
    ``cascade_immediate_window``, ``cascade_recent_window``, ``cascade_pressure_window``,
    ``summary_prompt_style``, ``compact_min_saving_tokens``, ``compact_summary_ratio``, the
    memory options such as ``memory_retrieval_token_budget``): :meth:`cfg` reads the Attribute
    first. No configuration Attribute is set when the script is created, so an option the NPC
    has not overridden follows the game's ``AI_<NAME>`` setting as it is now; NPCs created by
    earlier versions, which copied the settings into Attributes, keep those copies as overrides.

    State Attributes: ``conversation_history`` (checkpoint of the runtime history, list of
    message dicts as in :mod:`ai_contrib.core.messages`), ``checkpoint_seq`` (archive seq the
    checkpoint reflects), ``archive_id``, ``compaction_count``, ``compaction_log`` (last events),
    ``compact_failures`` and ``compact_last_error`` (the circuit breaker).
    """

    def at_script_creation(self):
        self.key = SCRIPT_KEY
        self.desc = "LLM mind of an AI NPC"
        self.persistent = True
        self.interval = max(1, int(get_setting("TICK_INTERVAL")))
        self.start_delay = True
        self.db.last_compaction = None
        self.db.operating_mode = "awake"
        self.db.conversation_history = []
        self.db.checkpoint_seq = -1
        self.db.archive_id = uuid.uuid4().hex[:8]
        self.db.context_signals = {}
        self.db.compaction_count = 0
        self.db.compaction_log = []
        self.db.compact_failures = 0
        self.db.compact_last_error = None

    # -- configuration -------------------------------------------------------------------------

    def cfg(self, name):
        """
        Option ``name`` for this NPC, read now (:func:`ai_contrib.settings.option_value`;
        ``docs/design.md``, "Per-NPC Attributes"): the script's Attribute of that lower-case
        name if set (not None), else the game's ``AI_<NAME>`` setting, else the default in
        :data:`ai_contrib.settings.DEFAULTS`. Any option of that table can be given per NPC,
        memory options (``memory_retrieval_token_budget``, ``memory_rrf_k``, ...) included.

        Args:
            name (str): the option's name, lower case (``"max_context_tokens"``).

        Raises:
            KeyError: ``name`` is not an option of the contrib.
        """
        return option_value(name, self)

    # -- history -------------------------------------------------------------------------------

    def archive_path(self):
        """Path of this NPC's JSONL archive."""
        if not self.db.archive_id:
            self.db.archive_id = uuid.uuid4().hex[:8]
        owner = self.obj.id if self.obj else self.id
        return os.path.join(_archive_dir(), f"npc{owner}-{self.db.archive_id}.jsonl")

    @property
    def archive(self):
        """This NPC's :class:`~ai_contrib.memory.archive.MessageArchive`."""
        return get_archive(self.archive_path())

    @property
    def runtime(self):
        """The :class:`~ai_contrib.memory.runtime.RuntimeHistory`, loaded on first use."""
        runtime = self.ndb.runtime
        if runtime is None:
            runtime = RuntimeHistory(
                self.archive,
                # plain lists/dicts: Evennia returns nested _Saver containers that json refuses
                deserialize(self.db.conversation_history or []),
                self.db.checkpoint_seq,
                model=self.cfg("llm_model"),
            )
            self.ndb.runtime = runtime
            if runtime.archive_behind:
                last, checkpoint = runtime.archive_behind
                notify_admins(
                    f"AI {self.obj}: its archive ({self.archive_path()}) ends at record {last}, "
                    f"but the database was saved at record {checkpoint}: the database was "
                    "restored without the archive folder, or the archive was lost. The "
                    "conversation in context is kept and written back; what was archived before "
                    "it is gone from retrieval and aihistory/raw. Restore the archive folder "
                    "from the same backup as the database (with the server stopped) to get it "
                    "back."
                )
            if runtime.replayed:
                logger.log_info(
                    f"AI {self.obj}: replayed {len(runtime.replayed)} archive records after the "
                    "last checkpoint"
                )
                from .rag_memory import recover_after_replay

                recover_after_replay(self, runtime.replayed)
            if runtime.dirty:
                self.checkpoint()
        return runtime

    @property
    def history(self):
        """The live runtime history (list of message dicts); read it, do not mutate it."""
        return self.runtime.messages

    def add_message(self, role, content, name=None, **fields):
        """
        Add a message to the history: the one way any code adds to it.

        The message is archived first, then appended to the runtime history; the token total is
        updated from this message alone (O(1) in the history length).

        Args:
            role (str): ``system``, ``user``, ``assistant`` or ``tool``.
            content (str): the text.
            name (str, optional): the speaker.
            **fields: other message fields (``tool_calls``, ``tool_call_id``, ``metadata``).

        Returns:
            dict: the stored message, with its unique ``id`` and archive ``seq``.

        Raises:
            ValueError: bad role or content.
            ArchiveError: the archive could not be written; the message is not added.
        """
        msg = make_message(role, content, name=name, **fields)
        return self.runtime.append(msg)

    def token_count(self):
        """Tokens in the runtime history (running total, O(1))."""
        return self.runtime.tokens

    def budget_info(self):
        """
        The NPC's effective history budget and where it comes from
        (:func:`ai_contrib.core.budget.effective_budget`; ``docs/design.md``, "The budget fits
        the model"): ``max_context_tokens``, cut to the model's context window less the reply,
        the system prompt and the memory sections when the window is known. The window is read
        from the LLM client's cache; when it is unknown a discovery request starts in the
        background and the configured budget applies until it answers. O(1) per call: the system
        prompt's tokens are cached per persona text.

        Returns:
            dict: ``{"tokens", "configured", "window", "reserved", "source"}`` (tokens).
        """
        from .llm.client import get_client
        from .world import world_reserve

        client = get_client()
        window = getattr(client, "known_context_window", None)
        if window is None and hasattr(client, "context_window"):
            if not self.ndb.window_asked or time.time() - self.ndb.window_asked > 60:
                self.ndb.window_asked = time.time()
                client.context_window()
        persona = self.obj.db.persona if self.obj else ""
        cached = self.ndb.system_tokens
        if cached is None or cached[0] != persona:
            from .core.prompts import REPLY_INSTRUCTIONS

            name = self.obj.key if self.obj else ""
            text = f"{persona or ''}\n\n{REPLY_INSTRUCTIONS.format(name=name)}"
            cached = (persona, count_tokens(text, self.cfg("llm_model")))
            self.ndb.system_tokens = cached
        memory = self.memory_budget() if self.cfg("memory_enabled") else 0
        return effective_budget(
            self.cfg("max_context_tokens"),
            window=window,
            reply_tokens=int(get_setting("LLM_MAX_REPLY_TOKENS")),
            system_tokens=cached[1],
            memory_tokens=memory,
            window_source=getattr(client, "context_window_source", None),
            world_tokens=world_reserve(self),
        )

    def memory_budget(self):
        """
        Tokens the recall notes of a reply prompt may take
        (:func:`ai_contrib.core.budget.memory_budget`: ``memory_retrieval_token_budget``, at most
        a share of ``max_context_tokens``). O(1).
        """
        from .core.budget import memory_budget

        return memory_budget(self.cfg("memory_retrieval_token_budget"),
                             self.cfg("max_context_tokens"))

    def budget(self):
        """The effective history budget in tokens (see :meth:`budget_info`)."""
        return self.budget_info()["tokens"]

    def token_usage(self):
        """Fraction of the effective budget (:meth:`budget`) the runtime history uses (0.0 - ...)."""
        return self.token_count() / max(1, self.budget())

    def checkpoint(self):
        """
        Save the runtime history into ``db.conversation_history`` and the archive seq it
        reflects into ``db.checkpoint_seq`` (O(n): call sparingly).

        Both Attributes are written in one database transaction: a crash between the two writes
        would pair a compacted history with an older seq, and the next start would replay
        messages a summary already covers after the preserved tail.
        """
        from django.db import transaction

        runtime = self.ndb.runtime
        if runtime is None:
            return
        with transaction.atomic():
            self.db.conversation_history = list(runtime.messages)
            self.db.checkpoint_seq = runtime.archive.last_seq
        runtime.dirty = False
        self.ndb.last_checkpoint = time.time()

    def _checkpoint_due(self):
        runtime = self.ndb.runtime
        if runtime is None or not runtime.dirty or self.ndb.checkpoint_queued:
            return False
        return time.time() - (self.ndb.last_checkpoint or 0) >= get_setting("CHECKPOINT_INTERVAL")

    # -- hearing -------------------------------------------------------------------------------

    def receive_speech(self, speaker, text, audience=None, to=None):
        """
        A player, or another AI NPC, said ``text`` to or near the NPC: record it, and queue an
        answer when the line is addressed to this NPC.

        The user message enters the history at once (so it survives any compaction under way),
        with its audience: who could hear it (``docs/design.md``, "Privacy by audience"). The
        answer comes from the next turn, which is kicked off at once when the NPC is idle; lines
        said while a reply is being written are answered together by the next one.

        The text is normalised first (:func:`ai_contrib.core.text.normalise_player_text`, after
        Evennia's colour and MXP codes are stripped): one line, no control characters, chat
        template special tokens broken up, at most ``AI_PLAYER_TEXT_MAX_CHARS`` characters.

        Whether the line is for this NPC is :meth:`addressed` (``docs/design.md``, "Turns, not
        one call per line"); it is stored as ``metadata["addressed"]``. A line not addressed to
        the NPC is heard and stored with its audience, but queues no answer and does not wake
        the NPC.

        Another AI NPC's line (``docs/design.md``, "A room of NPCs") is stored the same way,
        with ``metadata["npc"] = True`` and ``metadata["depth"]`` (how many NPC replies deep it
        stands after the player's line that started the exchange, read from the speaker's
        ``ndb.speaking``); it is addressed only when it names this NPC and
        :meth:`may_answer_npc` allows it (``AI_NPC_REPLY_DEPTH``, ``AI_NPC_REPLY_COOLDOWN``).

        A line said aloud (no ``audience`` given) in a room carrying the Tag ``public`` of
        category ``gossip`` is stored with ``metadata["said_in_public"] = True``: what the NPC
        learns from it may pass as gossip (``docs/design.md``, "Gossip").

        Args:
            speaker (Object | str): who spoke.
            text (str): the words.
            audience (iterable[str], optional): dbrefs of everyone who heard it; default the
                characters in the NPC's room (:func:`room_listeners`) and the speaker.
            to (Object, optional): whom the line was said to (``talk``); None for a ``say``.

        Returns:
            dict | None: the stored user message (None when nothing is left to store).
        """
        name = speaker.key if hasattr(speaker, "key") else str(speaker)
        dbref = getattr(speaker, "dbref", None)
        text = player_text(text)
        if not text:
            return None
        aloud = audience is None  # said to the whole room, not to a chosen few
        if audience is None:
            audience = list(room_listeners(self.obj))
        audience = normalise_audience(list(audience) + ([dbref] if dbref else []))
        pending = self.pending_ids()  # derived from the history before this line joins it
        addressed = self.addressed(speaker, text, to)  # before this line joins the history
        metadata = {"speaker": dbref, "audience": audience, "addressed": addressed}
        room = getattr(self.obj, "location", None)
        if aloud and room is not None and room.tags.has(PUBLIC_ROOM_TAG, category="gossip"):
            # said aloud in a room marked public: it may pass as gossip even when only the
            # speaker heard it (docs/design.md, "Gossip")
            metadata["said_in_public"] = True
        from_npc = isinstance(speaker, AssistantCharacter)
        if from_npc:
            # how deep in an exchange between NPCs the line stands (docs/design.md, "A room of
            # NPCs"): the speaker says it while it speaks; 1 when it does not
            depth = int((speaker.ndb.speaking or {}).get("depth") or 1)
            metadata.update(npc=True, depth=depth)
            if addressed:
                addressed = metadata["addressed"] = self.may_answer_npc(depth)
        msg = self.add_message("user", text, name=name, metadata=metadata)
        if not addressed:
            return msg
        if from_npc:
            self.ndb.npc_line_ids = (self.ndb.npc_line_ids or set()) | {msg["id"]}
        elif dbref:  # the NPC's record of this person (docs/design.md, "Scene, events and people")
            note_exchange(self, {dbref: name})
        pending.append(msg["id"])
        self.ndb.last_activity = time.time()
        if self.db.operating_mode == "sleep":
            self.wake(reason=f"{name} speaks")
        self.kick()
        return msg

    def observe(self, actor, text, event, audience=None):
        """
        Record something the NPC saw (``docs/design.md``, "Scene, events and people"): an
        *event* record, a ``system`` message whose text is the game's line in parentheses
        (:func:`ai_contrib.core.scene.event_text`, normalised like a player's words) and whose
        ``metadata`` is ``{"kind": "event", "event": event, "actor": dbref, "audience":
        [dbrefs]}``. It is never a line to answer: it joins no turn, wakes no one and kicks no
        tick. Reply prompts show it as ``"(Wren smiles.)"``
        (:func:`ai_contrib.core.prompts.render_for_chat`) to listeners who all saw it.

        At most :data:`ai_contrib.core.scene.EVENTS_PER_MINUTE` events are recorded in any 60
        seconds; the rest of a flood is counted in ``ndb.events_dropped`` and logged once per
        minute.

        Args:
            actor (Object): who did it (not this NPC).
            text (str): the game's line, markup stripped.
            event (str): ``"pose"``, ``"move"``, ``"give"`` or a game's own kind.
            audience (iterable[str], optional): dbrefs of who saw it; default the characters in
                the NPC's room (:func:`room_listeners`) and the actor unless it is an AI NPC.

        Returns:
            dict | None: the stored message; None when nothing was recorded (no text, nobody
            saw it, the actor is the NPC, the flood limit).
        """
        from .core.scene import EVENT_KIND, EVENTS_PER_MINUTE, event_text

        if actor is None or actor == self.obj:
            return None
        content = event_text(text)
        if not content:
            return None
        dbref = getattr(actor, "dbref", None)
        if audience is None:
            audience = list(room_listeners(self.obj))
            if dbref and not isinstance(actor, AssistantCharacter):
                audience.append(dbref)
        audience = normalise_audience(audience)
        if not audience:
            return None  # no player saw it: no reply could ever show it
        now = time.time()
        recent = self.ndb.event_times
        if recent is None:
            recent = self.ndb.event_times = deque(maxlen=EVENTS_PER_MINUTE)
        if len(recent) == recent.maxlen and now - recent[0] < 60:
            dropped = (self.ndb.events_dropped or 0) + 1
            self.ndb.events_dropped = dropped
            if now - (self.ndb.events_dropped_logged or 0) >= 60:
                self.ndb.events_dropped_logged = now
                logger.log_info(f"AI {self.obj}: {dropped} events not recorded (more than "
                                f"{EVENTS_PER_MINUTE} a minute)")
            return None
        recent.append(now)
        return self.add_message(
            "system", content,
            metadata={"kind": EVENT_KIND, "event": event, "actor": dbref, "audience": audience},
        )

    def addressed(self, speaker, text, to=None):
        """
        Whether a line ``speaker`` says is for this NPC to answer: the room's one decision for
        the line (:func:`line_answerers`, the rules of :func:`ai_contrib.core.room_talk.answerers`
        with each NPC's ``answer_when`` policy and the conversation open within
        ``conversation_window`` seconds; ``docs/design.md``, "Turns, not one call per line" and
        "A room of NPCs").

        Args:
            speaker (Object | str | None): the speaker, or its dbref.
            text (str): the normalised words.
            to (Object, optional): whom the line was said to (``talk``); None for a ``say``.

        Returns:
            bool
        """
        npc = self.obj
        if npc is None:
            return True
        chosen, _reason = line_answerers(npc, speaker, text, to)
        return npc.dbref in chosen

    def may_answer_npc(self, depth):
        """
        Whether this NPC may answer a line another AI NPC said to it: the line is at most
        ``npc_reply_depth`` NPC lines deep after the player's line that started the exchange
        (``depth``: 1 for an NPC's reply to a player, 2 for a reply to that, ...), and this
        NPC answered no NPC in the last ``npc_reply_cooldown`` seconds. A yes starts the
        cooldown (``docs/design.md``, "A room of NPCs").

        Args:
            depth (int): the heard line's depth.

        Returns:
            bool
        """
        limit = int(self.cfg("npc_reply_depth") or 0)
        if depth > limit:
            logger.log_info(f"AI {self.obj}: an NPC's line {depth} deep is not answered "
                            f"(AI_NPC_REPLY_DEPTH {limit})")
            return False
        cooldown = float(self.cfg("npc_reply_cooldown") or 0)
        now = time.time()
        last = self.ndb.npc_answered_at
        if last is not None and now - last < cooldown:
            logger.log_info(f"AI {self.obj}: an NPC's line is not answered: answered one "
                            f"{now - last:.0f} s ago (AI_NPC_REPLY_COOLDOWN {cooldown:g})")
            return False
        self.ndb.npc_answered_at = now
        return True

    def give_up_npc_turn(self):
        """
        Give up the reply being written when it answers only AI NPCs' lines: a player's line
        was just said to an NPC of the room, and the model server goes to it first. The lines
        go back to the queue and are answered with the NPC's next turn.

        Returns:
            bool: True when a reply was given up.
        """
        turn = self.ndb.turn
        if turn is None or self.ndb.turn_kind != "npc" or turn.called:
            return False
        self.ndb.turn_given_up = list(self.ndb.answering or [])
        turn.cancel()
        return True

    def players_first(self):
        """
        True when this NPC's queue holds only AI NPCs' lines while some AI NPC in its room
        (itself included) has a player's line queued or is answering one: its turn waits, so
        an NPC's line never delays a player's (``docs/design.md``, "A room of NPCs").
        """
        npc_lines = self.ndb.npc_line_ids or set()
        pending = self.pending_ids()
        if not pending or any(line not in npc_lines for line in pending):
            return False
        for other in room_npcs(self.obj):
            mind = other.assistant
            if mind is None or mind.ndb.pending is None:
                continue
            if mind.ndb.turn_kind == "player":
                return True
            theirs = mind.ndb.npc_line_ids or set()
            if any(line not in theirs for line in mind.ndb.pending):
                return True
        return False

    def pending_ids(self):
        """
        Ids of the lines heard and not yet answered, oldest first (a list to append to).

        Derived from the runtime history when first needed (after a start or a crash): the
        player lines no reply's ``reply_to`` names and no older-style reply follows. The
        history is restored from the checkpoint plus the archive, so nothing acknowledged is
        lost with ``ndb``. Lines older than ``AI_PENDING_MAX_AGE`` seconds are dropped with a
        log line.
        """
        pending = self.ndb.pending
        if pending is None:
            from .core.turns import unanswered_lines

            lines, stale = unanswered_lines(
                self.history, time.time(), float(get_setting("PENDING_MAX_AGE") or 0)
            )
            if stale:
                logger.log_info(
                    f"AI {self.obj}: {len(stale)} lines heard before a restart are older than "
                    f"AI_PENDING_MAX_AGE and will not be answered"
                )
            if lines:
                logger.log_info(f"AI {self.obj}: {len(lines)} lines heard before a restart "
                                "are still to be answered")
            pending = [m["id"] for m in lines]
            self.ndb.pending = pending
        return pending

    def awaiting_answer_ids(self):
        """
        Ids of the player lines that no stored reply answers yet: those of the turn being
        answered now (``ndb.answering``, set by :func:`ai_contrib.replies.answer_turn`) and those
        still queued (:meth:`pending_ids`). Compaction keeps them, and everything after them,
        verbatim (:func:`ai_contrib.core.cuts.hold_cut`).

        Returns:
            list[str]: ids, the turn's first.
        """
        return list(self.ndb.answering or []) + list(self.pending_ids())

    def kick(self):
        """Run a tick soon (next reactor turn) unless one is running."""
        if not self.ndb.busy:
            reactor.callLater(0, self.run_tick)

    # -- ticking -------------------------------------------------------------------------------

    def at_repeat(self, **kwargs):
        if self._needs_tick():
            self.run_tick()

    def _needs_tick(self):
        """The cheap synchronous test before a tick (:func:`ai_contrib.core.tick.tick_needed`):
        idle NPCs cost a few Attribute reads per tick instead of a Deferred chain."""
        return tick_needed(self.tick_state())

    def tick_state(self, room=False, head=False):
        """
        The NPC's state as the tick policy reads it (:class:`ai_contrib.core.tick.TickState`;
        ``docs/design.md``, "The tick"). O(1) unless asked for more: ``room`` adds whether the
        queued lines wait for a player's turn (:meth:`players_first`, a look at the room's
        NPCs), ``head`` whether the start of the reply prompt changed since the NPC's last
        prompt (:func:`ai_contrib.core.prompts.prompt_head`).

        Returns:
            TickState
        """
        now = time.time()
        awake = self.db.operating_mode != "sleep"
        last = self.ndb.last_activity or self.ndb.awake_since
        pending = bool(self.pending_ids())
        cached = self.ndb.cached_head
        return TickState(
            awake=awake,
            usage=self.token_usage(),
            compact_enabled=bool(self.cfg("compact_enabled")),
            emergency_threshold=float(self.cfg("compact_emergency_threshold")),
            pending=pending,
            waiting_for_players=bool(room and pending and self.players_first()),
            listeners=not self.ndb.no_listeners,
            memory_work=self.ndb.memory_work is not None,
            compacting=bool(self.ndb.compacting),
            slept=bool(self.ndb.slept),
            asleep_for=0.0 if awake else now - (self.ndb.asleep_since or now),
            sleep_duration=float(get_setting("SLEEP_DURATION") or 0),
            idle_for=None if last is None else now - last,
            sleep_after_idle=float(get_setting("SLEEP_AFTER_IDLE") or 0),
            checkpoint_due=self._checkpoint_due(),
            busy=bool(self.ndb.busy),
            warming=self.ndb.warming is not None,
            prompted=cached is not None,
            head_changed=bool(head and cached is not None and prompt_head(self.history) != cached),
        )

    def run_tick(self):
        """
        Run one tick: start due memory work in the background, then answer what was heard.

        Memory work (emergency compaction with its fact extraction, the sleep phase) runs
        concurrently with replies and is never waited for by one (``docs/design.md``, "Memory
        work is never starved"): it is started, or found running, at every tick, however much
        speech is queued. Replies are guarded by a busy flag, since Evennia ignores the Deferred
        ``at_repeat`` returns and ticks would otherwise overlap while an LLM call is pending.

        Returns:
            Deferred or None: fires when the tick's reply work is done (None if a reply was
            already being written; memory work may go on after it fires).
        """
        self.start_memory_work()
        if self.ndb.busy:
            return None
        self.ndb.busy = True
        d = defer.maybeDeferred(self._tick)

        def _done(result):
            self.ndb.busy = False
            state = self.tick_state()
            now = due(state)
            if now.bound_in_flight:
                from . import rag_memory

                rag_memory.bound_in_flight(self, self.obj)  # the reply just added counts too
            # NPCs' lines waiting for a player's turn are kicked when that turn ends
            if now.kick and state.awake and not self.ndb.waiting_for_players:
                self.kick()  # lines heard while the reply was written
            else:
                self.warm_if_due()
            return result

        d.addErrback(_log_failure(f"AI {self.obj}: tick"))
        d.addBoth(_done)
        return d

    def start_memory_work(self):
        """
        Start the memory work that is due, unless some is running: the sleep phase when asleep,
        else an emergency compaction at ``compact_emergency_threshold`` (with fact extraction
        first). It runs in the background; replies go on meanwhile, and the compaction's id-range
        splice keeps lines said during it. If the context is still over 100 % of the budget when
        the work ends (the summariser failed or was too slow), the oldest messages leave the
        context for the archive at once, so the context never stays over budget for longer than
        one compaction.

        Returns:
            Deferred or None: the running memory work (None if none is due).
        """
        from . import rag_memory

        running = self.ndb.memory_work
        if running is not None or self.obj is None:
            return running
        character = self.obj
        what = due(self.tick_state()).memory_work
        if what == "sleep":
            self.ndb.slept = True
            work = rag_memory.run_sleep_tick(self, character)

            def _slept(result):
                self.ndb.last_sleep_result = result
                return result

            work.addCallback(_slept)
            # the admin who ran aisleep, and aihistory, get a line about what it did
            work.addBoth(sleep_report.sleep_finished, self)
        elif what == "emergency":
            work = rag_memory.check_emergency_compaction(self, character)
        else:
            return None
        self.ndb.memory_work = work

        def _finished(result):
            self.ndb.memory_work = None
            now = due(self.tick_state())
            if now.evict_overflow:
                rag_memory.evict_overflow(self, character)
            if self.ndb.pending and not self.ndb.no_listeners:
                self.kick()  # a sleeping NPC's tick wakes it to answer
            else:
                self.warm_if_due()
            return result

        work.addErrback(_log_failure(f"AI {character}: memory work"))
        work.addCallback(_finished)
        if work.called:  # finished synchronously (nothing to do)
            return None
        return work

    def warm_if_due(self):
        """
        Warm the reply server's cache when the start of the reply prompt has changed since the
        NPC's last prompt (a compaction or an eviction landed) and the NPC is idle: no reply
        being written, no line waiting, someone in the room (``docs/design.md``, "Warming the
        cache after a compaction"; :mod:`ai_contrib.warmup`). An NPC that has sent no prompt
        since the server started is not warmed, so a restart does not send every NPC's prompt
        at once. ``ndb.warming`` (a Deferred a reply may wait on) and ``ndb.warming_for`` (the
        listeners' dbrefs) are set while it runs; when it ends, a head changed meanwhile is
        warmed in turn. A bad ``AI_PROMPT_CACHE_WARMUP`` is logged and warms nothing.

        Returns:
            Deferred or None: the warm-up (it never errbacks), or None when none is due.
        """
        from .warmup import warm_reply_cache, warmup_enabled

        if self.obj is None or not due(self.tick_state(head=True)).warm_up:
            # no prompt yet, a reply being written or coming at once, a warm-up running, a
            # prompt window still moving (over budget), or the same start as the last prompt
            return None
        head = prompt_head(self.history)
        try:
            if not warmup_enabled():
                return None
        except ValueError as err:
            logger.log_err(f"AI {self.obj}: no cache warm-up: {err}")
            return None
        listeners = room_listeners(self.obj)
        if not listeners:
            return None
        self.ndb.cached_head = head
        warming = defer.Deferred()
        self.ndb.warming = warming
        # a reply waits for the warm-up only when its prompt starts the same way
        self.ndb.warming_for = frozenset(listeners)

        def _warmed(stats):  # warm_reply_cache never errbacks
            self.ndb.warming = self.ndb.warming_for = None
            self.ndb.warming_request = self.ndb.warming_messages = None
            warming.callback(stats)  # a waiting reply goes on here (its tick keeps the NPC busy)
            # a compaction that landed meanwhile changed the head again: warm that one too
            self.warm_if_due()
            return stats

        request = warm_reply_cache(self, self.obj, listeners)
        self.ndb.warming_request = request
        return request.addCallback(_warmed)

    @defer.inlineCallbacks
    def _tick(self):
        from . import rag_memory

        character = self.obj
        if character is None:
            return
        now = due(self.tick_state())
        if now.checkpoint:
            _queue_checkpoint(self)
        if now.wake:
            self.wake(reason=now.wake)
        if now.wake == "rested" or self.db.operating_mode == "sleep":
            return
        now = due(self.tick_state(room=True))
        if now.bound_in_flight:
            # a compaction is under way but its summariser may hang: bounded meanwhile
            rag_memory.bound_in_flight(self, character)
        elif now.evict_overflow:
            # over budget with no compaction under way to bring it back (breaker open)
            rag_memory.evict_overflow(self, character)
        said = 0
        # read by the room's other NPCs (players_first) and when the tick ends
        self.ndb.waiting_for_players = bool(self.pending_ids()) and not now.answer
        if now.answer:
            self.ndb.cached_head = prompt_head(self.history)
            said = yield self._answer_pending(character)
        if said:
            record_usage(self)  # the staff web page's usage chart (ai_contrib.usage_log)
            # micro-compaction after the turn; a cascade cycle's LLM calls run in the background
            self.ndb.after_turn = rag_memory.after_turn_compaction(self, character)
            self.start_memory_work()  # the reply may have crossed the threshold
        now = due(self.tick_state())
        if now.start_clock and self.ndb.awake_since is None:
            self.ndb.awake_since = time.time()
        if now.fall_asleep:
            self.sleep(reason="idle")

    @defer.inlineCallbacks
    def _answer_pending(self, character):
        """
        Answer the queued lines (:func:`ai_contrib.replies.answer_turn`). A turn of AI NPCs'
        lines only is kept in ``ndb.turn`` (``ndb.turn_kind`` ``"npc"``) so that a player's
        line can make it give up (:meth:`give_up_npc_turn`); its lines then go back to the
        queue. After a reply, the room's record of exchanges (:func:`room_exchanges`) notes
        that the NPC spoke with the players it answered.

        Returns:
            Deferred[int]: replies said (0 or 1).
        """
        from .replies import answer_turn

        npc_lines = self.ndb.npc_line_ids or set()
        pending = self.pending_ids()
        kind = "npc" if pending and all(line in npc_lines for line in pending) else "player"
        turn = answer_turn(self, character, room_listeners)
        self.ndb.turn, self.ndb.turn_kind = turn, kind
        try:
            said = yield turn
        except defer.CancelledError:
            given_up = self.ndb.turn_given_up or []
            self.pending_ids()[:0] = [line for line in given_up
                                      if line not in self.pending_ids()]
            logger.log_info(f"AI {character}: a reply to an NPC was given up: a player spoke")
            said = 0
        finally:
            self.ndb.turn = self.ndb.turn_kind = self.ndb.turn_given_up = None
        # only the NPC lines still queued stay marked
        self.ndb.npc_line_ids = (self.ndb.npc_line_ids or set()) & set(self.pending_ids()) or None
        if said:
            reply = self.history[-1] if self.history else {}
            answered = set((reply.get("metadata") or {}).get("reply_to") or ())
            speakers = {(m.get("metadata") or {}).get("speaker")
                        for m in self.history[-(len(answered) + 60):]
                        if m.get("id") in answered and not (m.get("metadata") or {}).get("npc")}
            for speaker in speakers - {None}:
                note_room_exchange(character.location, speaker, [character.dbref])
        for other in room_npcs(character):  # NPC lines that waited for this player's turn
            mind = other.assistant
            if mind is not None and mind.ndb.pending:
                mind.kick()
        return said

    # -- awake / sleep -------------------------------------------------------------------------

    def sleep(self, reason="admin"):
        """Put the NPC to sleep: the next tick runs the sleep phase (memory work, compaction)."""
        if self.db.operating_mode == "sleep":
            return False
        self.db.operating_mode = "sleep"
        self.ndb.slept = False
        self.ndb.asleep_since = time.time()
        logger.log_info(f"AI {self.obj}: falls asleep ({reason})")
        if self.obj and self.obj.location:
            self.obj.location.msg_contents(f"{self.obj.key} dozes off.", exclude=[self.obj])
        self.kick()
        return True

    def wake(self, reason="admin"):
        """Wake the NPC up; queued speech is answered on the next tick."""
        if self.db.operating_mode != "sleep":
            return False
        self.db.operating_mode = "awake"
        self.ndb.awake_since = time.time()
        self.ndb.last_activity = time.time()
        logger.log_info(f"AI {self.obj}: wakes up ({reason})")
        if self.obj and self.obj.location:
            self.obj.location.msg_contents(f"{self.obj.key} wakes up.", exclude=[self.obj])
        if not self.ndb.slept:  # woken before its sleep work started: tell who waits for it
            sleep_report.sleep_finished(None, self)
        return True

    # -- server lifecycle ----------------------------------------------------------------------

    def at_server_start(self):
        """
        Make sure the tick runs after any start. Evennia resumes only the timers an orderly
        stop or reload paused; after a crash (``kill -9``, power loss) it would leave this one
        stopped, and lines heard before the crash would wait for the next speech. Starting a
        running timer again changes nothing; a timer an admin paused stays paused.
        """
        if not self.db._manually_paused:
            self.start()
        if self.db.forget_pending:  # a player staff asked it to forget, cut short by a crash
            from .forget import resume_pending

            resume_pending(self)

    def at_server_reload(self):
        self.checkpoint()

    def at_script_delete(self):
        """
        The NPC, or this script, is being deleted: its archive and index move to
        ``deleted/`` beside the archives and its Mem0 memories are deleted, both in the
        background (:func:`ai_contrib.memory.erase.retire_memory`; ``docs/design.md``,
        "Deleting an NPC").

        Returns:
            bool: True (the deletion goes on whatever happens to the memory files).
        """
        from .memory.erase import retire_memory

        try:
            retire_memory(self)
        except Exception as err:  # housekeeping must never stop a deletion
            logger.log_err(f"AI {self.obj}: could not retire its memory on deletion: {err}")
        return True

    def at_server_shutdown(self):
        self.checkpoint()
