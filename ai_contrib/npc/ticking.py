"""
When an AI NPC acts, as a handler of its ``AssistantScript`` (``script.ticking``): the tick
(answer what was heard, wake, fall asleep, bound the history), the start of the memory work
beside it (the sleep phase, an emergency compaction, run by ``script.memory``,
:mod:`ai_contrib.npc.memory_work`), the warm-up of the reply server's cache after a
compaction, and the NPC's mode, awake or asleep (``docs/design.md``, "The tick", "Memory work
is never starved" and "Warming the cache after a compaction").

Every decision asks :func:`ai_contrib.core.tick.due` over :meth:`TickHandler.state`. This is
not Evennia's ``TickerHandler``: the script's own timer calls ``at_repeat``, which comes here.

The handler holds nothing of its own: the state is the script's ``db.operating_mode`` and its
``ndb`` Attributes as before (``ndb.busy``, ``ndb.memory_work``, ``ndb.memory_work_kind``,
``ndb.slept``, ``ndb.sleep_work_since``, ``ndb.awake_since``, ``ndb.last_activity``,
``ndb.waiting_for_players``, ``ndb.cached_head``, ``ndb.warming``, ``ndb.warming_for``,
``ndb.warming_request``, ``ndb.after_turn``, ``ndb.turn``, ``ndb.turn_kind``, and
``ndb.work_began`` and ``ndb.hurried`` kept by :mod:`ai_contrib.npc.hurry`, ...). It calls
its own methods and the other handlers directly (``self.kick()``,
``script.hearing.pending_ids()``, ``script.budgeting.usage()``); a tick's start and the NPC's
falling asleep and waking go through the script's names (``script.run_tick``,
``script.sleep``, ``script.wake``), which a game's subclass or a benchmark may wrap to see
every tick and every change of mode, idle ones included.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from twisted.internet import defer, reactor

from evennia.utils import logger

from ..core.lines import speaker_of
from ..core.prompts import prompt_head
from ..core.recall_notes import give_up_leaving
from ..core.tick import TickState, due, tick_needed
from ..memory.compaction_log import breaker_open
from ..memory.worker import turn_ended, turn_started
from ..settings import get_setting
from . import hurry, sleep_watch
from .conversation import queue_checkpoint
from .hearing import note_room_reply, room_audience, room_listeners, room_npcs
from .scene import note_exchange
from .usage_log import record_usage

if TYPE_CHECKING:
    from collections.abc import Callable


def log_failure(what) -> Callable:
    """
    An errback that logs ``"<what> failed: <error>"`` with the traceback and swallows the
    failure (returns None): background work must never leave an unhandled error in a Deferred.
    """

    def errback(failure):
        """Log ``failure`` and swallow it."""
        logger.log_trace(f"{what} failed: {failure.getErrorMessage()}")

    return errback


def _ended(result):
    """A turn's Deferred ended (:meth:`TickHandler.answer_pending`): passes ``result`` on."""
    turn_ended()
    return result


class TickHandler:
    """
    The NPC's tick, memory work, warm-up and mode (``script.ticking``; ``docs/design.md``,
    "The tick").

    Args:
        script (AssistantScript): the NPC's script (``self.obj``); its ``db``/``ndb`` hold the
            state.
    """

    def __init__(self, script):
        self.obj = script

    # -- the tick ------------------------------------------------------------------------------

    def repeat(self) -> None:
        """
        The script's timer fired (``at_repeat``): hurry the memory work under way when the
        history has reached its hurry point (:mod:`ai_contrib.npc.hurry`; also while a tick is
        writing a reply, when no tick runs), then run a tick when :meth:`needs_tick` says it has
        work, else only start discovering the model's context window if it is unknown
        (:meth:`ai_contrib.npc.budgeting.BudgetHandler.discover_window`; a tick starts it too),
        so that an idle NPC knows its budget before anyone speaks.
        """
        script = self.obj
        state = self.state()
        if due(state).hurry:
            # here too, not only in the tick: a tick waits for the reply it is writing (8-30 s
            # on a busy machine), while the talk goes on adding to the history
            script.memory.hurry()
        if tick_needed(state):
            script.run_tick()  # which starts the discovery itself
        else:
            script.budgeting.discover_window()

    def needs_tick(self) -> bool:
        """The cheap synchronous test before a tick (:func:`ai_contrib.core.tick.tick_needed`):
        idle NPCs cost a few Attribute reads per tick instead of a Deferred chain."""
        return tick_needed(self.state())

    def kick(self) -> None:
        """Run a tick soon (``script.run_tick`` on the next reactor turn) unless one is
        running."""
        if not self.obj.ndb.busy:
            reactor.callLater(0, self.obj.run_tick)

    def state(self, room=False, head=False) -> TickState:
        """
        The NPC's state as the tick policy reads it (:class:`ai_contrib.core.tick.TickState`;
        ``docs/design.md``, "The tick"). O(1) unless asked for more: ``room`` looks at whether
        the queued lines wait for a player's turn (``script.players_first``, a look at the
        room's NPCs; without it, what the last tick found, ``ndb.waiting_for_players``),
        ``head`` whether the start of the reply prompt changed since the NPC's last prompt
        (:func:`ai_contrib.core.prompts.prompt_head`).

        Returns:
            TickState
        """
        script = self.obj
        ndb = script.ndb
        now = time.time()
        awake = script.db.operating_mode != "sleep"
        last = ndb.last_activity or ndb.awake_since
        pending = bool(script.hearing.pending_ids())
        cached = ndb.cached_head
        usage = script.budgeting.usage()
        began, hurried = hurry.work_marks(script, ndb.memory_work is not None or ndb.compacting,
                                          usage)
        return TickState(
            awake=awake,
            usage=usage,
            compact_enabled=bool(script.cfg("compact_enabled")),
            emergency_threshold=float(script.cfg("compact_emergency_threshold")),
            sleep_threshold=float(script.cfg("compact_sleep_threshold")),
            breaker_open=breaker_open(script),
            pending=pending,
            # looked at now, or as the last tick found it
            waiting_for_players=(bool(pending and script.hearing.players_first()) if room
                                 else bool(ndb.waiting_for_players)),
            listeners=not ndb.no_listeners,
            memory_work=ndb.memory_work is not None,
            compacting=bool(ndb.compacting),
            slept=bool(ndb.slept),
            # AI_SLEEP_DURATION counts from the start of the sleep work, not from falling asleep
            slept_for=0.0 if awake else now - (ndb.sleep_work_since or now),
            sleep_duration=float(get_setting("SLEEP_DURATION") or 0),
            idle_for=None if last is None else now - last,
            sleep_after_idle=float(get_setting("SLEEP_AFTER_IDLE") or 0),
            checkpoint_due=script.conversation.checkpoint_due(),
            busy=bool(ndb.busy),
            warming=ndb.warming is not None,
            prompted=cached is not None,
            head_changed=bool(head and cached is not None
                              and prompt_head(script.history) != cached),
            fetch_ahead=ndb.fetch_ahead is not None,
            work_began=began,
            hurried=hurried,
            hurry_enabled=bool(script.cfg("compact_hurry")),
        )

    def run(self) -> defer.Deferred | None:
        """
        Run one tick: start due memory work in the background, then answer what was heard.

        Memory work (emergency compaction with its fact extraction, the sleep phase) runs
        concurrently with replies and is never waited for by one (``docs/design.md``, "Memory
        work is never starved"): it is started, or found running, at every tick, however much
        speech is queued. Replies are guarded by ``ndb.busy``, since Evennia ignores the
        Deferred ``at_repeat`` returns and ticks would otherwise overlap while an LLM call is
        pending. A tick also starts discovering an unknown context window
        (:meth:`ai_contrib.npc.budgeting.BudgetHandler.discover_window`).

        Returns:
            Deferred or None: fires when the tick's reply work is done (None if a reply was
            already being written; memory work may go on after it fires).
        """
        script = self.obj
        script.budgeting.discover_window()
        self.start_memory_work()
        if script.ndb.busy:
            return None
        script.ndb.busy = True
        d = defer.maybeDeferred(self.tick)

        def _done(result):
            script.ndb.busy = False
            now = due(self.state())
            if now.hurry:
                script.memory.hurry()  # the talk outran the model's memory work
            if now.bound_in_flight:
                script.memory.bound_in_flight()  # the reply just added counts too
            # NPCs' lines waiting for a player's turn are kicked when that turn ends
            if now.kick:
                self.kick()  # lines heard while the reply was written
            else:
                self.warm_if_due()
            return result

        d.addErrback(log_failure(f"AI {script.obj}: tick"))
        d.addBoth(_done)
        return d

    @defer.inlineCallbacks
    def tick(self) -> defer.Deferred:
        """
        The tick's own work (``docs/design.md``, "The tick"): queue a due checkpoint, wake a
        rested NPC, bound or trim an over-budget history, answer the queued lines
        (:meth:`answer_pending`), then start the awake clock or fall asleep when idle.

        Returns:
            Deferred: fires when the answer (if any) is done.
        """
        script = self.obj
        character = script.obj
        if character is None:
            return
        now = due(self.state())
        if now.checkpoint:
            queue_checkpoint(script)
        if now.wake:
            script.wake(reason=now.wake)
        if now.wake == "rested" or script.db.operating_mode == "sleep":
            return
        now = due(self.state(room=True))
        if now.hurry:
            script.memory.hurry()  # near the budget: rules and an extract finish it
        if now.bound_in_flight:
            # a compaction is under way but its summariser may hang: bounded meanwhile
            script.memory.bound_in_flight()
        elif now.evict_overflow:
            # over budget with no compaction under way to bring it back (breaker open)
            script.memory.evict_overflow()
        said = 0
        # read by the room's other NPCs (players_first) and when the tick ends
        script.ndb.waiting_for_players = bool(script.hearing.pending_ids()) and not now.answer
        if now.answer:
            script.ndb.cached_head = prompt_head(script.history)
            said = yield self.answer_pending(character)
            _give_up_leaving(script)
        if said:
            record_usage(script)  # the staff web page's usage chart (ai_contrib.npc.usage_log)
            # micro-compaction after the turn; a cascade cycle's LLM calls run in the background
            script.ndb.after_turn = script.memory.after_turn()
            self.start_memory_work()  # the reply may have crossed the threshold
        now = due(self.state())
        if now.start_clock and script.ndb.awake_since is None:
            script.ndb.awake_since = time.time()
        if now.fall_asleep:
            script.sleep(reason="idle")

    @defer.inlineCallbacks
    def answer_pending(self, character) -> defer.Deferred:
        """
        Answer the queued lines (:func:`ai_contrib.npc.replies.answer_turn`). A turn of AI NPCs'
        lines only is kept in ``ndb.turn`` (``ndb.turn_kind`` ``"npc"``) so that a player's
        line can make it give up (:meth:`ai_contrib.npc.hearing.HearingHandler.give_up_npc_turn`);
        its lines then go back to the queue. After a reply, the room's record of exchanges
        (:func:`ai_contrib.npc.hearing.room_exchanges`) notes that the NPC spoke with the players
        it answered, and the room's NPCs with lines waiting for this turn are kicked.

        Returns:
            Deferred[int]: replies said (0 or 1).
        """
        from .replies import answer_turn

        script = self.obj
        ndb = script.ndb
        npc_lines = ndb.npc_line_ids or set()
        pending = script.hearing.pending_ids()
        kind = "npc" if pending and all(line in npc_lines for line in pending) else "player"
        # idle memory work (archived lines' vectors) waits while any turn is under way
        turn_started()
        # an inlineCallbacks function: its errors come in the Deferred, never raised here
        turn = answer_turn(script, character, room_listeners).addBoth(_ended)
        ndb.turn, ndb.turn_kind = turn, kind
        try:
            said = yield turn
        except defer.CancelledError:
            given_up = ndb.turn_given_up or []
            script.hearing.pending_ids()[:0] = [
                line for line in given_up if line not in script.hearing.pending_ids()]
            logger.log_info(f"AI {character}: a reply to an NPC was given up: a player spoke")
            said = 0
        finally:
            ndb.turn = ndb.turn_kind = ndb.turn_given_up = None
        # only the NPC lines still queued stay marked
        ndb.npc_line_ids = (ndb.npc_line_ids or set()) \
            & set(script.hearing.pending_ids()) or None
        if said:
            self._note_answered(character)
        for other in room_npcs(character):  # NPC lines that waited for this player's turn
            mind = other.assistant
            if mind is not None and mind.ndb.pending:
                mind.kick()
        return said

    def _note_answered(self, character):
        """
        After a reply: note in the room's record of exchanges that the NPC spoke with the
        players (not the NPCs) whose lines it answered (``metadata["reply_to"]``), unless they
        turned to another NPC meanwhile (:func:`ai_contrib.npc.hearing.note_room_reply`); and,
        for each AI NPC of the room whose line it answered, that the two spoke with each other,
        in both people records (``docs/design.md``, "Scene, events and people").
        """
        history = self.obj.history
        reply = history[-1] if history else {}
        answered = set((reply.get("metadata") or {}).get("reply_to") or ())
        lines = [m for m in history[-(len(answered) + 60):] if m.get("id") in answered]
        speakers = {speaker_of(m)
                    for m in lines if not (m.get("metadata") or {}).get("npc")}
        for speaker in speakers - {None}:
            note_room_reply(character.location, speaker, character.dbref)
        npcs = {speaker_of(m) for m in lines
                if (m.get("metadata") or {}).get("npc")}
        for other in room_npcs(character):
            mind = other.assistant
            if other.dbref in npcs and mind is not None:
                note_exchange(self.obj, {other.dbref: other.key})
                note_exchange(mind, {character.dbref: character.key})

    # -- memory work and warm-up ---------------------------------------------------------------

    def start_memory_work(self) -> defer.Deferred | None:
        """
        Start the memory work that is due, unless some is running (``ndb.memory_work``): the
        sleep phase when asleep, else an emergency compaction at ``compact_emergency_threshold``
        (with fact extraction first). It runs in the background; replies go on meanwhile, and
        the compaction's id-range splice keeps lines said during it. If the context is still
        over 100 % of the budget when the work ends (the summariser failed or was too slow),
        the oldest messages leave the context for the archive at once, so the context never
        stays over budget for longer than one compaction (``docs/design.md``, "Memory work is
        never starved").

        Returns:
            Deferred or None: the running memory work (None if none is due).
        """
        script = self.obj
        running = script.ndb.memory_work
        if running is not None or script.obj is None:
            return running
        character = script.obj
        what = due(self.state()).memory_work
        if what == "sleep":
            script.ndb.slept = True
            script.ndb.sleep_work_since = time.time()
            work = script.memory.sleep_phase()

            def _slept(result):
                script.ndb.last_sleep_result = result
                return result

            work.addCallback(_slept)
            # the admin who ran aisleep, and aihistory, get a line about what it did
            work.addBoth(sleep_watch.sleep_finished, script)
        elif what == "emergency":
            work = script.memory.emergency()
        else:
            return None
        script.ndb.memory_work = work
        script.ndb.memory_work_kind = what  # what admins are told runs (npc.memory_wait)

        def _finished(result):
            script.ndb.memory_work = script.ndb.memory_work_kind = None
            now = due(self.state())
            if now.evict_overflow:
                script.memory.evict_overflow()
            if now.kick_after_work:
                self.kick()  # a sleeping NPC's tick wakes it to answer
            else:
                self.warm_if_due()
            return result

        work.addErrback(log_failure(f"AI {character}: memory work"))
        work.addCallback(_finished)
        if work.called:  # finished synchronously (nothing to do)
            return None
        return work

    def warm_if_due(self, listeners=None) -> defer.Deferred | None:
        """
        Warm the reply server's cache when the start of the reply prompt has changed since the
        NPC's last prompt (a compaction or an eviction landed, a question's reply gave notes up
        after it: :meth:`tick`) and the NPC is idle: no reply
        being written, no line waiting, someone in the room (``docs/design.md``, "Warming the
        cache after a compaction"; :mod:`ai_contrib.npc.warmup`). An NPC that has sent no prompt
        since the server started is not warmed, so a restart does not send every NPC's prompt
        at once. ``ndb.warming`` (a Deferred a reply may wait on) and ``ndb.warming_for`` (the
        listeners' dbrefs) are set while it runs; when it ends, a head changed meanwhile is
        warmed in turn. A bad ``AI_PROMPT_CACHE_WARMUP`` is logged and warms nothing.

        Args:
            listeners (iterable[str], optional): the dbrefs to build the prompt for, whoever is
                in the room (after a restart, :func:`ai_contrib.npc.warmup.warm_in_turn`);
                default the room's audience, and no warm-up with no player in the room.

        Returns:
            Deferred or None: the warm-up (it never errbacks), or None when none is due.
        """
        from .deadline import warmup_enabled
        from .warmup import warm_reply_cache

        script = self.obj
        if script.obj is None or not due(self.state(head=True)).warm_up:
            # no prompt yet, a reply being written or coming at once, a warm-up running, a
            # prompt window still moving (over budget), or the same start as the last prompt
            return None
        head = prompt_head(script.history)
        try:
            if not warmup_enabled():
                return None
        except ValueError as err:
            logger.log_err(f"AI {script.obj}: no cache warm-up: {err}")
            return None
        if listeners is None:
            if not room_listeners(script.obj):
                return None
            # the reply's prompt is built for the room's AI NPCs too (npc.hearing.with_npcs)
            listeners = room_audience(script.obj)
        script.ndb.cached_head = head
        warming = defer.Deferred()
        script.ndb.warming = warming
        # a reply waits for the warm-up only when its prompt starts the same way
        script.ndb.warming_for = frozenset(listeners)

        def _warmed(stats):  # warm_reply_cache never errbacks
            script.ndb.warming = script.ndb.warming_for = None
            script.ndb.warming_request = script.ndb.warming_messages = None
            script.ndb.warming_step = None
            warming.callback(stats)  # a waiting reply goes on here (its tick keeps the NPC busy)
            # a compaction that landed meanwhile changed the head again: warm that one too
            self.warm_if_due()
            return stats

        request = warm_reply_cache(script, script.obj, listeners)
        script.ndb.warming_request = request
        return request.addCallback(_warmed)

    # -- awake / asleep ------------------------------------------------------------------------

    def sleep(self, reason="admin") -> bool:
        """
        Put the NPC to sleep (``db.operating_mode`` ``"sleep"``): the next tick runs the sleep
        phase (memory work, compaction); the room sees it doze off.

        Returns:
            bool: False when it was asleep already.
        """
        script = self.obj
        npc = script.obj
        if script.db.operating_mode == "sleep":
            return False
        script.db.operating_mode = "sleep"
        script.ndb.slept = False
        script.ndb.sleep_work_since = None
        logger.log_info(f"AI {npc}: falls asleep ({reason})")
        if npc and npc.location:
            npc.location.msg_contents(f"{npc.key} dozes off.", exclude=[npc])
        self.kick()
        return True

    def wake(self, reason="admin") -> bool:
        """
        Wake the NPC up (``db.operating_mode`` ``"awake"``); queued speech is answered on the
        next tick. Woken before its sleep work started, whoever waits for that work is told.

        Returns:
            bool: False when it was awake already.
        """
        script = self.obj
        npc = script.obj
        if script.db.operating_mode != "sleep":
            return False
        script.db.operating_mode = "awake"
        script.ndb.awake_since = time.time()
        script.ndb.last_activity = time.time()
        logger.log_info(f"AI {npc}: wakes up ({reason})")
        if npc and npc.location:
            npc.location.msg_contents(f"{npc.key} wakes up.", exclude=[npc])
        if not script.ndb.slept:  # woken before its sleep work started: tell who waits for it
            sleep_watch.sleep_finished(None, script, woken=reason)
        return True


def _give_up_leaving(script):
    """
    Give up the notes a question kept on loan for its reply
    (:func:`ai_contrib.core.recall_notes.give_up_leaving`; ``docs/design.md``, "Recall notes",
    "Given up after the reply") once the reply is spoken, before the tick weighs the history's
    usage (the loan no longer counts) and whatever the reply's outcome. The prompt after them
    changed, so the start the server cached counts as changed (``ndb.cached_head``): the
    warm-up is due when the NPC is idle, and otherwise the next reply evaluates it.
    """
    notes, given_up = give_up_leaving(script.ndb.recall_notes or [])
    if given_up:
        script.ndb.recall_notes = notes
        script.ndb.cached_head = ()
