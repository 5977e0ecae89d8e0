"""
Typeclasses: the Evennia shell around the compaction core.

``AssistantCharacter`` is the NPC players talk to. ``AssistantScript`` (a persistent Script on
it) is the NPC's mind; it reads as its lifecycle (creation, the timer, server start, reload,
shutdown, deletion) plus delegation to five handlers, reached as Evennia reaches its own
(``lazy_property``, like ``CooldownHandler`` or ``TraitHandler``; ``docs/design.md``, "The
script's handlers"):

- ``script.conversation`` (:mod:`ai_contrib.npc.conversation`): the runtime history, the archive
  behind it, the checkpoint and its queue;
- ``script.hearing`` (:mod:`ai_contrib.npc.hearing`): speech and events heard, addressing, the
  queue of lines to answer, turn taking between the AI NPCs of a room;
- ``script.budgeting`` (:mod:`ai_contrib.npc.budgeting`): the token budgets and the discovery of
  the model's context window;
- ``script.ticking`` (:mod:`ai_contrib.npc.ticking`): the tick, the start of memory work, the
  warm-up, sleep and wake;
- ``script.memory`` (:mod:`ai_contrib.npc.memory_work`): the memory work itself, the emergency
  compaction, the sleep phase, eviction and the work after a turn.

Storage: every message goes first to the NPC's append-only archive
(:mod:`ai_contrib.memory.archive`), then into the runtime history held in ``ndb``;
``script.db.conversation_history`` is a checkpoint of it, and on load the archive records
written after the checkpoint are replayed (``docs/design.md``, "The archive", "Checkpoints").
"""

import uuid

from evennia.objects.objects import DefaultCharacter
from evennia.scripts.scripts import DefaultScript
from evennia.utils import logger
from evennia.utils.ansi import strip_ansi, strip_mxp
from evennia.utils.utils import lazy_property

from .admin.sleep_report import describe_sleep
from .memory.journal import new_journal
from .npc.budgeting import BudgetHandler
from .npc.conversation import ConversationHandler, archive_behind_warning
from .npc.delegation import delegate
from .npc.conversation import queue_checkpoint as _queue_checkpoint  # noqa: F401  (re-exported)
from .npc.gossip import meet
from .npc.hearing import HearingHandler
from .npc.hearing import (  # noqa: F401  (re-exported: the commands and the docs name them here)
    ROOM_RECORD_SPEAKERS,
    line_answerers,
    note_room_exchange,
    npc_names,
    player_text,
    room_exchanges,
    room_listeners,
    room_npcs,
)
from .npc.memory_work import MemoryHandler
from .npc.notify import notify_admins
from .npc.ticking import TickHandler
from .settings import get_setting, option_value

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


def _speech_from_say(text):
    """Extract the spoken words from a say line like ``Bob says, "hello"``."""
    plain = strip_ansi(text or "")
    first, last = plain.find('"'), plain.rfind('"')
    if first == -1 or last <= first:
        return None
    return plain[first + 1 : last].strip() or None


class AssistantCharacter(DefaultCharacter):
    """
    An NPC with an LLM mind.

    Attributes:
        db.persona (str): who the NPC is; the first system message of every reply prompt.
        db.journal (dict): ``{"entries": [...], "consolidated_entry_ids": [...]}``
            (shape in :mod:`ai_contrib.memory.journal`).
        db.entity_profiles (dict): ``{entity_name: [observation, ...]}``.

    The NPC hears ``say`` in its room (and ``talk <npc> = <text>``), other AI NPCs' speech
    included; it answers an NPC only when the line speaks to it by name, at most ``AI_NPC_REPLY_DEPTH``
    NPC replies deep after a player's line and once per ``AI_NPC_REPLY_COOLDOWN`` seconds, so
    two NPCs never talk each other into a loop (``docs/design.md``, "A room of NPCs").
    """

    #: what :func:`ai_contrib.npc.hearing.is_assistant_character` reads: this class and its
    #: subclasses are AI NPCs (their lines are an NPC's, with its reply depth and cooldown)
    ai_npc = True

    def at_object_creation(self):
        """A new NPC: the default persona unless one is set, an empty journal and entity
        profiles, no getting or calling it, and its :class:`AssistantScript`."""
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
        """
        Evennia's ``msg``, and the NPC's ears: a ``say`` line from someone else goes to
        :meth:`at_heard_say` (the words only), a pose, emote or move of a character (not an AI
        NPC) of :attr:`observed_types` to :meth:`at_observed`. Arguments as Evennia's.
        """
        capture = self.ndb.action_output
        if capture is not None:
            # the NPC is running an action: what the game tells it is the action's result
            # (ai_contrib.npc.actions), whoever sent it
            capture.append(text)
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
            # like a player's, answered only when it speaks to this NPC by name, within the depth limit
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

    def at_observed(self, actor, text, event, audience=None, to_npc=False):
        """
        Called when the NPC sees ``actor`` do something in its room: ``text`` is the game's
        line for it (markup stripped), ``event`` ``"pose"``, ``"move"`` or ``"give"``,
        ``audience`` the dbrefs of who else saw it (default: everyone in the room). It is
        recorded as an event (:meth:`AssistantScript.observe`); one done to the NPC
        (``to_npc``, a gift) is a line to answer, the others are not.
        """
        script = self.assistant
        if script:
            script.observe(actor, text, event, audience=audience, to_npc=to_npc)

    def at_post_move(self, source_location, move_type="move", **kwargs):
        """
        The NPC entered a room: it and the AI NPCs of its gossip networks already there trade
        what they learned in public (:func:`ai_contrib.npc.gossip.meet`; ``docs/design.md``,
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
        alone (Evennia's ``give`` tells no one else in the room), and answered like a line said
        to the NPC.
        """
        super().at_object_receive(moved_obj, source_location, move_type=move_type, **kwargs)
        if (move_type == "give" and isinstance(source_location, DefaultCharacter)
                and source_location != self):
            self.at_observed(source_location,
                             f"{source_location.key} gives you {moved_obj.key}.", "give",
                             audience=[source_location.dbref], to_npc=True)

    def at_ai_action(self, action, args, context):
        """
        The game's say on an action the NPC's model asked for, before it runs
        (``docs/design.md``, "Actions"). A game's subclass overrides it to enforce its rules (no
        key without payment); the default lets every action of the NPC's list run, under the
        command's own locks.

        Args:
            action (str): the command's key as the NPC's actions name it (``"give"``).
            args (str): its arguments, one line of checked text (``"key to Wren"``).
            context (dict): the turn: ``{"listeners": {dbref: name} (who hears the reply),
                "speakers": [dbref] (of the lines answered), "lines": [str] (their text),
                "done": [dict] (this turn's earlier actions: ``"call"``, ``"status"``,
                ``"text"``)}``.

        Returns:
            None to let it run; a str to refuse it (the reason, which the model is told); an
            ``(action, args)`` tuple to run that instead (checked again like the model's own).
        """
        return None

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


class AssistantScript(DefaultScript):
    """
    The NPC's mind: its lifecycle, its configuration, and five handlers that do the work
    (``docs/design.md``, "The script's handlers"): ``conversation`` (history, archive,
    checkpoint), ``hearing`` (speech, addressing, the queue, turn taking), ``budgeting``
    (token budgets, context-window discovery), ``ticking`` (tick, start of memory work,
    warm-up, sleep and wake) and ``memory`` (emergency compaction, sleep phase, eviction, the
    work after a turn). The names below them are delegations
    (:class:`ai_contrib.npc.delegation.delegate`: ``script.budget`` is
    ``script.budgeting.tokens``) kept for the code, tests and games that call them on the
    script. The tick handler calls its own methods and the other handlers directly, but starts
    a tick through ``run_tick`` and changes the NPC's mode through ``sleep`` and ``wake``, so
    that a subclass that wraps them sees every tick and every change, idle ones included.

    Configuration Attributes (the contrib's documented names, ``docs/design.md``, "Per-NPC
    Attributes"): ``compact_enabled``, ``compact_sleep_threshold`` (fraction),
    ``compact_emergency_threshold`` (fraction),
    ``compact_preserve_window`` (messages), ``compact_model``, ``compact_prompt``,
    ``max_context_tokens`` (tokens), ``last_compaction`` (ISO time or None),
    ``pre_compact_extraction_enabled``, ``pre_compact_max_iterations``, ``pre_compact_prompt``,
    ``llm_model``, ``operating_mode`` (``"awake"`` or ``"sleep"``), ``compact_strategy``
    (``summary``, ``mask``, ``hybrid``, ``cascade`` or ``replace_all``, see
    :mod:`ai_contrib.npc.compaction_runner`) and ``mask_window`` (turns). Any other option of
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
    ``compact_failures`` and ``compact_last_error`` (the circuit breaker). The handlers keep
    their state in these and in ``ndb``, never in themselves.
    """

    # -- handlers ------------------------------------------------------------------------------

    @lazy_property
    def conversation(self):
        """:class:`ai_contrib.npc.conversation.ConversationHandler`: history, archive,
        checkpoint."""
        return ConversationHandler(self)

    @lazy_property
    def hearing(self):
        """:class:`ai_contrib.npc.hearing.HearingHandler`: what the NPC hears and answers."""
        return HearingHandler(self)

    @lazy_property
    def budgeting(self):
        """:class:`ai_contrib.npc.budgeting.BudgetHandler`: token budgets, window discovery."""
        return BudgetHandler(self)

    @lazy_property
    def ticking(self):
        """:class:`ai_contrib.npc.ticking.TickHandler`: tick, start of memory work, warm-up,
        sleep."""
        return TickHandler(self)

    @lazy_property
    def memory(self):
        """:class:`ai_contrib.npc.memory_work.MemoryHandler`: emergency compaction, sleep phase,
        eviction, the work after a turn."""
        return MemoryHandler(self)

    # -- lifecycle -----------------------------------------------------------------------------

    def at_script_creation(self):
        """A new NPC's mind: a tick every ``AI_TICK_INTERVAL`` seconds, awake, no history, a new
        archive id; no configuration Attribute (see the class docstring)."""
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

    def at_repeat(self, **kwargs):
        """The script's timer: a tick when one has work (:meth:`TickHandler.repeat
        <ai_contrib.npc.ticking.TickHandler.repeat>`)."""
        self.ticking.repeat()

    def at_runtime_loaded(self, runtime):
        """
        Called by the conversation handler when it has rebuilt the runtime history from the
        checkpoint and the archive (the first use after a start or a crash; ``docs/design.md``,
        "Checkpoints"): the admins are told when the archive ends before the database's
        checkpoint (a database restored without its archive folder), the work a crash
        interrupted is finished for the records replayed
        (:func:`ai_contrib.rag_memory.recover_after_replay`), and a history the load changed is
        checkpointed at once.

        Args:
            runtime (RuntimeHistory): the history just loaded, already in ``ndb.runtime``.
        """
        if runtime.archive_behind:
            notify_admins(archive_behind_warning(self, *runtime.archive_behind))
        if runtime.replayed:
            logger.log_info(f"AI {self.obj}: replayed {len(runtime.replayed)} archive records "
                            "after the last checkpoint")
            from .rag_memory import recover_after_replay

            recover_after_replay(self, runtime.replayed)
        if runtime.dirty:
            self.checkpoint()

    def describe_sleep(self, result, woken=None) -> str:
        """
        The line an admin reads about a sleep phase that ended (``aisleep``'s answer,
        ``aihistory``'s "Last sleep" row, kept in ``db.last_sleep``): by default
        :func:`ai_contrib.admin.sleep_report.describe_sleep`'s; a game's subclass may word it
        its own way.

        Args:
            result (SleepResults | Failure | None): the sleep phase's results
                (:class:`~ai_contrib.core.outcome.SleepResults`); a Failure when it broke off;
                None when the NPC woke before its sleep work started.
            woken (str, optional): why the NPC woke, when ``result`` is None.

        Returns:
            str: one line, markup in it made inert.
        """
        return describe_sleep(result, self.obj.key if self.obj else "the NPC", woken)

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
            from .npc.forget import resume_pending

            resume_pending(self)

    def at_server_reload(self):
        """The server reloads: the runtime history is checkpointed (``ndb`` is lost)."""
        self.checkpoint()

    def at_server_shutdown(self):
        """The server stops: the runtime history is checkpointed."""
        self.checkpoint()

    def at_script_delete(self):
        """
        The NPC, or this script, is being deleted: its archive and index move to
        ``deleted/`` beside the archives and its Mem0 memories are deleted, both in the
        background (:func:`ai_contrib.npc.erase.retire_memory`; ``docs/design.md``,
        "Deleting an NPC").

        Returns:
            bool: True (the deletion goes on whatever happens to the memory files).
        """
        from .npc.erase import retire_memory

        try:
            retire_memory(self)
        except Exception as err:  # housekeeping must never stop a deletion
            logger.log_err(f"AI {self.obj}: could not retire its memory on deletion: {err}")
        return True

    # -- configuration -------------------------------------------------------------------------

    def cfg(self, name):
        """
        Option ``name`` for this NPC, read now (:func:`ai_contrib.settings.option_value`;
        ``docs/design.md``, "Per-NPC Attributes"): the script's Attribute of that lower-case
        name if set (not None), else the game's ``AI_<NAME>`` setting, else the default in
        :data:`ai_contrib.settings.DEFAULTS`. The options whose record says ``per_npc`` are read
        this way (``aiconfig`` lists them); the code asks game-wide options with
        :func:`ai_contrib.settings.get_setting`.

        Args:
            name (str): the option's name, lower case (``"max_context_tokens"``).

        Raises:
            KeyError: ``name`` is not an option of the contrib.
        """
        return option_value(name, self)

    # -- delegations: the conversation ---------------------------------------------------------

    archive_path = delegate("conversation", ConversationHandler.archive_path)
    add_message = delegate("conversation", ConversationHandler.add_message)
    token_count = delegate("conversation", ConversationHandler.token_count)
    checkpoint = delegate("conversation", ConversationHandler.checkpoint)

    @property
    def archive(self):
        """This NPC's :class:`~ai_contrib.memory.archive.MessageArchive`."""
        return self.conversation.archive

    @property
    def runtime(self):
        """The :class:`~ai_contrib.memory.runtime.RuntimeHistory`, loaded on first use."""
        return self.conversation.runtime

    @property
    def history(self):
        """The live runtime history (list of message dicts); read it, do not mutate it."""
        return self.conversation.history

    # -- delegations: budgets ------------------------------------------------------------------

    budget_info = delegate("budgeting", BudgetHandler.info)
    budget = delegate("budgeting", BudgetHandler.tokens)
    memory_budget = delegate("budgeting", BudgetHandler.memory_budget)
    token_usage = delegate("budgeting", BudgetHandler.usage)

    # -- delegations: hearing ------------------------------------------------------------------

    receive_speech = delegate("hearing", HearingHandler.receive_speech)
    observe = delegate("hearing", HearingHandler.observe)
    pending_ids = delegate("hearing", HearingHandler.pending_ids)
    awaiting_answer_ids = delegate("hearing", HearingHandler.awaiting_answer_ids)
    set_aside = delegate("hearing", HearingHandler.set_aside)
    players_first = delegate("hearing", HearingHandler.players_first)

    # -- delegations: ticking ------------------------------------------------------------------

    kick = delegate("ticking", TickHandler.kick)
    _needs_tick = delegate("ticking", TickHandler.needs_tick)
    run_tick = delegate("ticking", TickHandler.run)
    start_memory_work = delegate("ticking", TickHandler.start_memory_work)
    warm_if_due = delegate("ticking", TickHandler.warm_if_due)
    sleep = delegate("ticking", TickHandler.sleep)
    wake = delegate("ticking", TickHandler.wake)
