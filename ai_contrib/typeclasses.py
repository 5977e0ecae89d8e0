"""
Typeclasses: the Evennia shell around the compaction core.

``AssistantCharacter`` is the NPC players talk to. ``AssistantScript`` (a persistent Script on
it) holds the conversation history, ticks, answers players through the LLM, and runs sleep and
emergency compaction through :mod:`ai_contrib.rag_memory` (seeds 001 and 002).

Storage: every message goes first to the NPC's append-only archive
(:mod:`ai_contrib.memory.archive`), then into the runtime history held in ``ndb``.
``script.db.conversation_history`` is a checkpoint of that runtime history, written every
``checkpoint_interval`` seconds when it changed, after each compaction and when the server stops;
on load the archive records written after the checkpoint are replayed. So an append costs one
file line, not a re-pickle of the whole list (O(n) per append, measured in the handbook).
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
from evennia.utils.ansi import strip_ansi
from evennia.utils.dbserialize import deserialize

from .core.messages import make_message
from .memory.archive import get_archive
from .memory.journal import new_journal
from .memory.runtime import RuntimeHistory
from .settings import get_setting

DEFAULT_PERSONA = "You are {name}, a friendly inhabitant of this world."
SCRIPT_KEY = "assistant_script"

# Per-NPC Attributes (seed 001, "Configuration Reference"). Each is initialised from the game's
# AI_<NAME> setting when the script is created; set one to None to follow the setting again.
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


def _speech_from_say(text):
    """Extract the spoken words from a say line like ``Bob says, "hello"``."""
    plain = strip_ansi(text or "")
    first, last = plain.find('"'), plain.rfind('"')
    if first == -1 or last <= first:
        return None
    return plain[first + 1 : last].strip() or None


_checkpoint_queue = deque()


def _queue_checkpoint(script):
    """
    Checkpoint ``script`` soon, one script per reactor turn: a checkpoint re-pickles the whole
    history (O(n), ~10-30 ms for long ones), and many NPCs due at once must not stall the
    reactor together.
    """
    script.ndb.checkpoint_queued = True
    _checkpoint_queue.append(script)
    if len(_checkpoint_queue) == 1:
        reactor.callLater(0, _drain_checkpoint_queue)


def _drain_checkpoint_queue():
    if not _checkpoint_queue:
        return
    script = _checkpoint_queue.popleft()
    try:
        script.ndb.checkpoint_queued = False
        script.checkpoint()
    except Exception as err:  # a script deleted meanwhile: nothing left to save
        logger.log_warn(f"AI checkpoint skipped: {err}")
    if _checkpoint_queue:
        reactor.callLater(0, _drain_checkpoint_queue)


class AssistantCharacter(DefaultCharacter):
    """
    An NPC with an LLM mind.

    Attributes:
        db.persona (str): who the NPC is; the first system message of every reply prompt.
        db.journal (dict): ``{"entries": [...], "consolidated_entry_ids": [...]}``
            (shape in :mod:`ai_contrib.memory.journal`).
        db.entity_profiles (dict): ``{entity_name: [observation, ...]}``.

    The NPC hears ``say`` in its room (and ``talk <npc> = <text>``) from characters that are not
    themselves AI NPCs, so two NPCs never talk each other into a loop.
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
        if from_obj is None or isinstance(from_obj, AssistantCharacter):
            return
        msgtype = None
        if isinstance(text, (list, tuple)):
            text, meta = (text[0], text[1] if len(text) > 1 else {})
            msgtype = (meta or {}).get("type")
        if msgtype == "say":
            speech = _speech_from_say(text)
            if speech:
                self.at_heard_say(from_obj, speech)

    def at_heard_say(self, speaker, speech):
        """Called when ``speaker`` says ``speech`` to or near this NPC."""
        script = self.assistant
        if script:
            script.receive_speech(speaker, speech)


class AssistantScript(DefaultScript):
    """
    The NPC's mind: conversation history, ticks, replies, compaction.

    Configuration Attributes (names as in seed 001): ``compact_enabled``,
    ``compact_sleep_threshold`` (fraction), ``compact_emergency_threshold`` (fraction),
    ``compact_preserve_window`` (messages), ``compact_model``, ``compact_prompt``,
    ``max_context_tokens`` (tokens), ``last_compaction`` (ISO time or None),
    ``pre_compact_extraction_enabled``, ``pre_compact_max_iterations``, ``pre_compact_prompt``,
    ``llm_model``, ``operating_mode`` (``"awake"`` or ``"sleep"``), ``compact_strategy``
    (``summary``, ``mask``, ``hybrid``, ``cascade`` or ``replace_all``, see
    :mod:`ai_contrib.strategies`) and ``mask_window`` (turns). Any other ``AI_<NAME>`` option can
    be given per NPC the same way (``mask_min_tokens``, ``cascade_immediate_window``,
    ``cascade_recent_window``, ``cascade_pressure_window``, ``summary_prompt_style``, ``compact_min_saving_tokens``,
    ``compact_summary_ratio``): :meth:`cfg` reads the Attribute first.

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
        for name in CONFIG_ATTRIBUTES:
            self.attributes.add(name, get_setting(name.upper()))
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
        Resolve option ``name`` (lower-case Attribute name): the NPC's Attribute if set (not
        None), else the game's ``AI_<NAME>`` setting, else the module default.
        """
        value = self.attributes.get(name)
        if value is None:
            value = get_setting(name.upper())
        return value

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

    def token_usage(self):
        """Fraction of ``max_context_tokens`` the runtime history uses (0.0 - ...)."""
        budget = max(1, int(self.cfg("max_context_tokens")))
        return self.token_count() / budget

    def checkpoint(self):
        """Save the runtime history into ``db.conversation_history`` (O(n): call sparingly)."""
        runtime = self.ndb.runtime
        if runtime is None:
            return
        self.db.conversation_history = list(runtime.messages)
        self.db.checkpoint_seq = runtime.archive.last_seq
        runtime.dirty = False
        self.ndb.last_checkpoint = time.time()

    def _checkpoint_due(self):
        runtime = self.ndb.runtime
        if runtime is None or not runtime.dirty or self.ndb.checkpoint_queued:
            return False
        return time.time() - (self.ndb.last_checkpoint or 0) >= get_setting("CHECKPOINT_INTERVAL")

    def _maybe_checkpoint(self):
        if self._checkpoint_due():
            _queue_checkpoint(self)

    # -- hearing -------------------------------------------------------------------------------

    def receive_speech(self, speaker, text):
        """
        A player said ``text`` to the NPC: record it and queue an answer.

        The user message enters the history at once (so it survives any compaction under way);
        the answer comes from the next tick, which is kicked off immediately when the NPC is idle.
        """
        name = speaker.key if hasattr(speaker, "key") else str(speaker)
        self.add_message(
            "user", text, name=name, metadata={"speaker": getattr(speaker, "dbref", None)}
        )
        pending = self.ndb.pending or []
        pending.append(name)
        self.ndb.pending = pending
        self.ndb.last_activity = time.time()
        if self.db.operating_mode == "sleep":
            self.wake(reason=f"{name} speaks")
        self.kick()

    def kick(self):
        """Run a tick soon (next reactor turn) unless one is running."""
        if not self.ndb.busy:
            reactor.callLater(0, self.run_tick)

    # -- ticking -------------------------------------------------------------------------------

    def at_repeat(self, **kwargs):
        if self._needs_tick():
            self.run_tick()

    def _needs_tick(self):
        """
        The cheap synchronous test before a tick: False when an awake NPC has nothing pending,
        no checkpoint due, is under the emergency threshold and not due to fall asleep. Idle
        NPCs then cost a few Attribute reads per tick instead of a Deferred chain.
        """
        if self.ndb.busy:
            return False
        if self.ndb.pending or self.db.operating_mode != "awake" or self._checkpoint_due():
            return True
        if self.cfg("compact_enabled") and self.token_usage() >= self.cfg(
            "compact_emergency_threshold"
        ):
            return True
        last = self.ndb.last_activity or self.ndb.awake_since
        idle = get_setting("SLEEP_AFTER_IDLE")
        return last is None or bool(idle and time.time() - last >= idle)

    def run_tick(self):
        """
        Run one guarded tick. Evennia ignores the Deferred ``at_repeat`` returns, so ticks would
        overlap while an LLM call is pending: a busy flag makes the extra ones no-ops.

        Returns:
            Deferred or None: fires when the tick is done (None if one was already running).
        """
        if self.ndb.busy:
            return None
        self.ndb.busy = True
        d = defer.maybeDeferred(self._tick)

        def _done(result):
            self.ndb.busy = False
            return result

        def _failed(failure):
            logger.log_trace(f"AI {self.obj}: tick failed: {failure.getErrorMessage()}")
            return None

        d.addErrback(_failed)
        d.addBoth(_done)
        return d

    @defer.inlineCallbacks
    def _tick(self):
        from . import rag_memory
        from .replies import answer_pending

        character = self.obj
        if character is None:
            return
        self._maybe_checkpoint()
        if self.db.operating_mode == "sleep":
            if self.ndb.pending:
                self.wake(reason="spoken to")
            else:
                if not self.ndb.slept:
                    self.ndb.slept = True
                    result = yield rag_memory.run_sleep_tick(self, character)
                    self.ndb.last_sleep_result = result
                duration = get_setting("SLEEP_DURATION")
                asleep_since = self.ndb.asleep_since or time.time()
                if duration and time.time() - asleep_since >= duration:
                    self.wake(reason="rested")
                return
        yield rag_memory.check_emergency_compaction(self, character)
        said = yield answer_pending(self, character)
        if said:
            # micro-compaction after the turn; a cascade cycle's LLM calls run in the background
            self.ndb.after_turn = rag_memory.after_turn_compaction(self, character)
        idle = get_setting("SLEEP_AFTER_IDLE")
        last = self.ndb.last_activity or self.ndb.awake_since or time.time()
        if self.ndb.awake_since is None:
            self.ndb.awake_since = time.time()
        if idle and not self.ndb.pending and time.time() - last >= idle:
            self.sleep(reason="idle")

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
        return True

    # -- server lifecycle ----------------------------------------------------------------------

    def at_server_reload(self):
        self.checkpoint()

    def at_server_shutdown(self):
        self.checkpoint()
