"""
What an AI NPC hears and whether it answers, as a handler of its ``AssistantScript``
(``script.hearing``), with the room-level helpers it shares with the commands: who hears a line
(:func:`room_listeners`), the room's other AI NPCs (:func:`room_npcs`), the room's one decision
per line (:func:`line_answerers`) and its record of exchanges (:func:`room_exchanges`)
(``docs/design.md``, "Turns, not one call per line" and "A room of NPCs").

:mod:`ai_contrib.typeclasses` imports this module (and re-exports its functions under their old
names there), so this module must not import it: an ``AssistantCharacter`` is recognised by
a class attribute it and its subclasses carry (:func:`is_assistant_character`; what the admin
commands call an AI NPC, any object with an ``AssistantScript``, is ``npcs.is_ai_npc``).

The handler holds nothing of its own: the queue and the turn-taking state are the script's
``ndb`` Attributes as before (``ndb.pending``, ``ndb.answering``, ``ndb.npc_line_ids``,
``ndb.turn``, ``ndb.turn_kind``, ``ndb.turn_given_up``, ``ndb.npc_answered_at``,
``ndb.last_activity``, ``ndb.event_times``, ``ndb.events_dropped``,
``ndb.events_dropped_logged``), and the lines dealt with although no reply names them, which
must outlive a reload, are the ``lines_set_aside`` Attribute (:meth:`HearingHandler.set_aside`).
"""

from __future__ import annotations

import time
from collections import deque

from evennia.objects.objects import DefaultCharacter
from evennia.utils import logger
from evennia.utils.ansi import strip_ansi, strip_mxp

from ..core.audience import normalise_audience
from ..core.gossip import PUBLIC_ROOM_TAG
from ..core.messages import Message
from ..core.text import normalise_player_text
from ..settings import get_setting
from .scene import note_exchange

def is_assistant_character(obj) -> bool:
    """
    True if ``obj`` is an ``AssistantCharacter`` or a subclass of it: the class says so
    (:attr:`ai_contrib.typeclasses.AssistantCharacter.ai_npc`), whatever package name the
    contrib was imported under. This module cannot import :mod:`ai_contrib.typeclasses`,
    which imports it.
    """
    return getattr(type(obj), "ai_npc", False) is True


def player_text(text) -> str:
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


def room_listeners(character) -> dict[str, str]:
    """
    Who hears what ``character`` says now: ``{dbref: name}`` of the characters in its room,
    itself and other AI NPCs left out: a reply is built for the players' ears, and waits while
    none is here (the other AI NPCs, :func:`room_audience`, overhear it and store the audience
    it was built for, ``docs/design.md``, "A room of NPCs"). Characters
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
        and not is_assistant_character(obj)
    }


def room_audience(character) -> dict[str, str]:
    """
    Who overhears what ``character`` says now: ``{dbref: name}`` of every other character in
    its room, the players of :func:`room_listeners` and the other AI NPCs. A line's audience
    names the AI NPCs that heard it, so that a reply built from it is said aloud only where
    every one of them heard it too (``docs/design.md``, "Privacy by audience").
    """
    return with_npcs(character, room_listeners(character))


def with_npcs(character, people) -> dict[str, str]:
    """``people`` (``{dbref: name}``, a copy) and the other AI NPCs in ``character``'s room
    (:func:`room_npcs`), counted like players: who a reply is built for and said to."""
    everyone = dict(people)
    everyone.update((npc.dbref, npc.key) for npc in room_npcs(character))
    return everyone


def room_npcs(character) -> list:
    """The other AI NPCs in ``character``'s room (a list; empty without a room)."""
    room = getattr(character, "location", None)
    if room is None:
        return []
    return [obj for obj in room.contents if obj != character and is_assistant_character(obj)]


def npc_names(npc) -> list[str]:
    """An NPC's key and aliases: the words that address it."""
    return [npc.key] + list(npc.aliases.all())


#: speakers a room's record of exchanges keeps at most (the oldest are forgotten first)
ROOM_RECORD_SPEAKERS = 200


def room_exchanges(room) -> dict[str, dict[str, float]]:
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


def note_room_exchange(room, speaker, npcs, when=None) -> None:
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


#: player lines whose exchanges a room counts at most (the oldest are forgotten first)
ROOM_THREADS = 200


def start_thread(room, replies) -> str:
    """
    A player's line was taken by ``replies`` AI NPCs of ``room``: it starts a *thread*, the
    replies it costs in all, its own and those of NPCs answering NPCs after it, counted in
    ``room.ndb.ai_threads`` (``{thread id: replies taken}``, the newest :data:`ROOM_THREADS`;
    ``docs/design.md``, "A room of NPCs").

    Returns:
        str: the thread's id, stored on the line (``metadata["thread"]``) and on the replies of
        its exchange.
    """
    threads = room.ndb.ai_threads
    if threads is None:
        threads = room.ndb.ai_threads = {}
    room.ndb.ai_thread_seq = number = (room.ndb.ai_thread_seq or 0) + 1
    thread = f"{room.dbref}/{number}"
    threads[thread] = int(replies)
    while len(threads) > ROOM_THREADS:
        threads.pop(next(iter(threads)))
    return thread


def take_thread_reply(room, thread, limit) -> bool:
    """
    Take one more reply of ``thread`` (:func:`start_thread`) for an NPC answering an NPC, if
    fewer than ``limit`` (``1 + npc_reply_depth``) are taken: so one player's line costs at
    most that many replies, whoever answers and in whatever order. A thread the room no longer
    holds (a reload) starts again from nothing: the depth still bounds it.

    Returns:
        bool: True when the reply was taken (the NPC may answer).
    """
    if room is None or not thread:
        return True
    threads = room.ndb.ai_threads
    if threads is None:
        threads = room.ndb.ai_threads = {}
    taken = int(threads.get(thread) or 0)
    if taken >= limit:
        return False
    threads[thread] = taken + 1
    return True


def note_room_reply(room, speaker, npc, when=None) -> bool:
    """
    Record in :func:`room_exchanges` that ``npc`` (dbref) replied to ``speaker`` (dbref): the
    reply keeps their conversation open, but only while ``npc`` is among the NPCs ``speaker``
    exchanged with last (:func:`ai_contrib.core.room_talk.partner`; all of them are kept open
    together). A reply that arrives after the speaker turned to another NPC does not take the
    conversation back: the partner is whoever the speaker named last, whatever order the
    replies arrive in (``docs/design.md``, "A room of NPCs"). A speaker the record does not
    hold (after a reload) is noted with ``npc``.

    Returns:
        bool: whether the record changed.
    """
    from ..core.room_talk import partner

    if room is None or not speaker or not npc:
        return False
    seen = room_exchanges(room).get(speaker) or {}
    newest = partner(seen) if seen else (npc,)
    if npc not in newest:
        return False
    note_room_exchange(room, speaker, newest, when)
    return True


def line_answerers(npc, speaker, text, to=None) -> tuple[tuple[str, ...], str | None]:
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
    from ..core.room_talk import answerers

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
        """An NPC as :func:`ai_contrib.core.room_talk.answerers` reads it."""
        mind = obj.assistant
        policy = str((mind.cfg("answer_when") if mind else None) or "addressed").lower()
        return {"id": obj.dbref, "names": npc_names(obj), "persona": obj.db.persona or "",
                "always": policy == "always"}

    from_npc = is_assistant_character(speaker)
    answer = answerers(
        text, dbref, [described(obj) for obj in people], to=key[2], exchanges=exchanges,
        now=now, window=window, from_npc=from_npc)
    if room is not None:
        room.ndb.ai_line = {"key": key, "answer": answer, "taken": {npc.dbref}}
        if answer[0] and not from_npc:
            room.ndb.ai_line["thread"] = start_thread(room, len(answer[0]))
            note_room_exchange(room, dbref, answer[0], now)
            # a player's line goes first: NPC-to-NPC replies being written give the model
            # server up to it (docs/design.md, "A room of NPCs")
            for obj in people:
                mind = obj.assistant
                if mind is not None:
                    mind.hearing.give_up_npc_turn()
    return answer


#: lines set aside (:meth:`HearingHandler.set_aside`) remembered at most
SET_ASIDE_MAX = 200


class HearingHandler:
    """
    What the NPC hears (``script.hearing``): speech and events stored with their audience,
    whether a line is for it to answer, the queue of lines to answer and the turn taking
    between the AI NPCs of a room (``docs/design.md``, "Turns, not one call per line", "A room
    of NPCs" and "Scene, events and people").

    Args:
        script (AssistantScript): the NPC's script (``self.obj``); its ``ndb`` holds the state.
    """

    def __init__(self, script):
        self.obj = script

    def receive_speech(self, speaker, text, audience=None, to=None) -> Message | None:
        """
        A player, or another AI NPC, said ``text`` to or near the NPC: record it, and queue an
        answer when the line is addressed to this NPC.

        The user message enters the history at once (so it survives any compaction under way),
        with its audience: who could hear it (``docs/design.md``, "Privacy by audience"). The
        answer comes from the next turn, which is kicked off at once (``script.kick``) when the
        NPC is idle; lines said while a reply is being written are answered together by the
        next one. The text is normalised first (:func:`player_text`).

        Whether the line is for this NPC is :meth:`addressed`, stored as
        ``metadata["addressed"]``. A line not addressed to the NPC is stored with its audience,
        but queues no answer and does not wake the NPC. Another AI NPC's line is stored the same
        way with ``metadata["npc"] = True`` and ``metadata["depth"]`` (read from the speaker's
        ``ndb.speaking``); it is addressed only when it speaks to this NPC by name and
        :meth:`may_answer_npc` allows it. A line said aloud (no ``audience`` given) in a room
        tagged ``public`` (category ``gossip``) gets ``metadata["said_in_public"] = True``
        (``docs/design.md``, "Gossip").

        Args:
            speaker (Object | str): who spoke.
            text (str): the words.
            audience (iterable[str], optional): dbrefs of everyone who heard it; default the
                audience another AI NPC built its reply for (its ``ndb.speaking["audience"]``),
                else the characters in the NPC's room, AI NPCs included
                (:func:`room_audience`); the speaker is added, the NPC itself left out.
            to (Object, optional): whom the line was said to (``talk``); None for a ``say``.

        Returns:
            Message | None: the stored user message (None when nothing is left to store).

        Raises:
            ArchiveError: the archive could not be written; the line is not stored.
        """
        script = self.obj
        name = speaker.key if hasattr(speaker, "key") else str(speaker)
        dbref = getattr(speaker, "dbref", None)
        text = player_text(text)
        if not text:
            return None
        pending = self.pending_ids()  # derived from the history before this line joins it
        metadata = self._speech_metadata(speaker, text, audience, to)
        addressed, from_npc = metadata["addressed"], metadata.get("npc", False)
        msg = script.add_message("user", text, name=name, metadata=metadata)
        if not addressed:
            return msg
        if from_npc:
            script.ndb.npc_line_ids = (script.ndb.npc_line_ids or set()) | {msg["id"]}
        if dbref:
            # the NPC's record of this person or AI NPC (docs/design.md, "Scene, events and people")
            note_exchange(script, {dbref: name})
        self._queue(pending, msg, f"{name} speaks")
        return msg

    def _queue(self, pending, msg, why):
        """Queue ``msg``, a line to answer (:func:`ai_contrib.core.lines.is_line_to_answer`),
        onto ``pending`` (:meth:`pending_ids`, read before it joined the history), wake the NPC
        (``why`` the reason) and kick its turn."""
        script = self.obj
        pending.append(msg["id"])
        script.ndb.last_activity = time.time()
        if script.db.operating_mode == "sleep":
            script.wake(reason=why)
        script.kick()

    def _speech_metadata(self, speaker, text, audience, to):
        """The stored line's ``metadata`` (see :meth:`receive_speech`); decides, before the line
        joins the history, whether it is addressed."""
        npc = self.obj.obj
        dbref = getattr(speaker, "dbref", None)
        aloud = audience is None  # said to the whole room, not to a chosen few
        if audience is None and is_assistant_character(speaker):
            # another AI NPC's reply was built for an audience: the NPC overhearing it stores
            # that one, not the room's (docs/design.md, "Privacy by audience")
            audience = (speaker.ndb.speaking or {}).get("audience")
        if audience is None:
            audience = list(room_audience(npc))
        # the NPC itself is never listed in what it stores
        audience = normalise_audience(
            [member for member in list(audience) + [dbref]
             if member and member != getattr(npc, "dbref", None)])
        addressed = self.addressed(speaker, text, to)
        metadata = {"speaker": dbref, "audience": audience, "addressed": addressed}
        room = getattr(npc, "location", None)
        if aloud and room is not None and room.tags.has(PUBLIC_ROOM_TAG, category="gossip"):
            # said aloud in a room marked public: it may pass as gossip even when only the
            # speaker heard it (docs/design.md, "Gossip")
            metadata["said_in_public"] = True
        # the player's line whose replies this line counts among (docs/design.md, "A room of
        # NPCs"): a player's line taken by NPCs starts one, an NPC's line is in its speaker's
        thread = self._line_thread(speaker, addressed)
        if thread:
            metadata["thread"] = thread
        if is_assistant_character(speaker):
            # how deep in an exchange between NPCs the line stands (docs/design.md, "A room of
            # NPCs"): the speaker says it while it speaks; 1 when it does not
            depth = int((speaker.ndb.speaking or {}).get("depth") or 1)
            metadata.update(npc=True, depth=depth)
            if addressed:
                metadata["addressed"] = self.may_answer_npc(depth, thread)
        return metadata

    def _line_thread(self, speaker, addressed):
        """The thread (:func:`start_thread`) of a line just decided: an NPC speaker's, read
        from its ``ndb.speaking``; for a player's line taken by NPCs, the room's decision's."""
        if is_assistant_character(speaker):
            return (speaker.ndb.speaking or {}).get("thread")
        room = getattr(self.obj.obj, "location", None)
        shared = room.ndb.ai_line if room is not None and addressed else None
        return (shared or {}).get("thread")

    def observe(self, actor, text, event, audience=None, to_npc=False) -> Message | None:
        """
        Record something the NPC saw (``docs/design.md``, "Scene, events and people"): an
        *event* record, a ``system`` message whose text is the game's line in parentheses
        (:func:`ai_contrib.core.scene.event_text`, normalised like a player's words) and whose
        ``metadata`` is ``{"kind": "event", "event": event, "actor": dbref, "audience":
        [dbrefs], "addressed": bool}``. An event the NPC only saw is no line to answer: it joins
        no turn, wakes no one and kicks no tick. One done to the NPC (``to_npc``: a gift handed
        to it) by an actor is a line to answer (:func:`ai_contrib.core.lines.line_to_answer`),
        queued like speech addressed to it. At most :data:`ai_contrib.core.scene.EVENTS_PER_MINUTE` events are recorded in
        any 60 seconds; the rest of a flood is counted in ``ndb.events_dropped`` and logged
        once per minute.

        Args:
            actor (Object): who did it (not this NPC).
            text (str): the game's line, markup stripped.
            event (str): ``"pose"``, ``"move"``, ``"give"`` or a game's own kind.
            to_npc (bool): the event is done to this NPC and asks an answer (a gift).
            audience (iterable[str], optional): dbrefs of who saw it; default the characters in
                the NPC's room, AI NPCs included (:func:`room_audience`), and the actor unless
                it is an AI NPC.

        Returns:
            Message | None: the stored message; None when nothing was recorded (no text, nobody
            saw it, the actor is the NPC, the flood limit).
        """
        from ..core.scene import EVENT_KIND, event_text

        script = self.obj
        if actor is None or actor == script.obj:
            return None
        content = event_text(text)
        if not content:
            return None
        dbref = getattr(actor, "dbref", None)
        npcs = {npc.dbref for npc in room_npcs(script.obj)}
        if audience is None:
            # the room's AI NPCs saw it too: a reply in front of them may show it
            audience = list(room_audience(script.obj))
            if dbref and not is_assistant_character(actor):
                audience.append(dbref)
        audience = normalise_audience(audience)
        if not set(audience or ()) - npcs:
            return None  # no player saw it: no reply could ever show it
        if self._event_flood():
            return None
        addressed = bool(to_npc and dbref)
        pending = self.pending_ids() if addressed else None  # before the event joins history
        msg = script.add_message(
            "system", content,
            metadata={"kind": EVENT_KIND, "event": event, "actor": dbref, "audience": audience,
                      "addressed": addressed},
        )
        if addressed:
            note_exchange(script, {dbref: getattr(actor, "key", str(actor))})
            self._queue(pending, msg, f"{getattr(actor, 'key', dbref)} {event}s")
        return msg

    def _event_flood(self):
        """True when :data:`~ai_contrib.core.scene.EVENTS_PER_MINUTE` events were recorded in
        the last 60 seconds (the event is counted as dropped); else the event's time is noted."""
        from ..core.scene import EVENTS_PER_MINUTE

        ndb = self.obj.ndb
        now = time.time()
        recent = ndb.event_times
        if recent is None:
            recent = ndb.event_times = deque(maxlen=EVENTS_PER_MINUTE)
        if len(recent) == recent.maxlen and now - recent[0] < 60:
            dropped = (ndb.events_dropped or 0) + 1
            ndb.events_dropped = dropped
            if now - (ndb.events_dropped_logged or 0) >= 60:
                ndb.events_dropped_logged = now
                logger.log_info(f"AI {self.obj.obj}: {dropped} events not recorded (more than "
                                f"{EVENTS_PER_MINUTE} a minute)")
            return True
        recent.append(now)
        return False

    def addressed(self, speaker, text, to=None) -> bool:
        """
        Whether a line ``speaker`` says is for this NPC to answer: the room's one decision for
        the line (:func:`line_answerers`, the rules of :func:`ai_contrib.core.room_talk.answerers`
        with each NPC's ``answer_when`` policy and the conversation open within
        ``conversation_window`` seconds; ``docs/design.md``, "Turns, not one call per line" and
        "A room of NPCs"). True for a script on no object.

        Args:
            speaker (Object | str | None): the speaker, or its dbref.
            text (str): the normalised words.
            to (Object, optional): whom the line was said to (``talk``); None for a ``say``.

        Returns:
            bool
        """
        npc = self.obj.obj
        if npc is None:
            return True
        chosen, _reason = line_answerers(npc, speaker, text, to)
        return npc.dbref in chosen

    def may_answer_npc(self, depth, thread=None) -> bool:
        """
        Whether this NPC may answer a line another AI NPC said to it: the line is at most
        ``npc_reply_depth`` NPC lines deep after the player's line that started the exchange
        (``depth``: 1 for an NPC's reply to a player, 2 for a reply to that, ...), this NPC
        answered no NPC in the last ``npc_reply_cooldown`` seconds, and that player's line has
        cost fewer than ``1 + npc_reply_depth`` replies in all (``thread``,
        :func:`take_thread_reply`). A yes starts the cooldown in ``ndb.npc_answered_at`` and
        takes the thread's reply (``docs/design.md``, "A room of NPCs").

        Args:
            depth (int): the heard line's depth.
            thread (str, optional): the line's thread (:func:`start_thread`).

        Returns:
            bool
        """
        script = self.obj
        limit = int(script.cfg("npc_reply_depth") or 0)
        if depth > limit:
            logger.log_info(f"AI {script.obj}: an NPC's line {depth} deep is not answered "
                            f"(AI_NPC_REPLY_DEPTH {limit})")
            return False
        cooldown = float(script.cfg("npc_reply_cooldown") or 0)
        now = time.time()
        last = script.ndb.npc_answered_at
        if last is not None and now - last < cooldown:
            logger.log_info(f"AI {script.obj}: an NPC's line is not answered: answered one "
                            f"{now - last:.0f} s ago (AI_NPC_REPLY_COOLDOWN {cooldown:g})")
            return False
        if not take_thread_reply(getattr(script.obj, "location", None), thread, 1 + limit):
            logger.log_info(f"AI {script.obj}: an NPC's line is not answered: the player's line "
                            f"it follows has cost {1 + limit} replies (1 + AI_NPC_REPLY_DEPTH)")
            return False
        script.ndb.npc_answered_at = now
        return True

    def give_up_npc_turn(self) -> bool:
        """
        Give up the reply being written when it answers only AI NPCs' lines: a player's line
        was just said to an NPC of the room, and the model server goes to it first. The lines
        go back to the queue (``ndb.turn_given_up``) and are answered with the NPC's next turn.

        Returns:
            bool: True when a reply was given up.
        """
        ndb = self.obj.ndb
        turn = ndb.turn
        if turn is None or ndb.turn_kind != "npc" or turn.called:
            return False
        ndb.turn_given_up = list(ndb.answering or [])
        turn.cancel()
        return True

    def players_first(self) -> bool:
        """
        True when this NPC's queue holds only AI NPCs' lines while some AI NPC in its room
        (itself included) has a player's line queued or is answering one: its turn waits, so
        an NPC's line never delays a player's (``docs/design.md``, "A room of NPCs").
        """
        npc_lines = self.obj.ndb.npc_line_ids or set()
        pending = self.pending_ids()
        if not pending or any(line not in npc_lines for line in pending):
            return False
        for other in room_npcs(self.obj.obj):
            mind = other.assistant
            if mind is None or mind.ndb.pending is None:
                continue
            if mind.ndb.turn_kind == "player":
                return True
            theirs = mind.ndb.npc_line_ids or set()
            if any(line not in theirs for line in mind.ndb.pending):
                return True
        return False

    def pending_ids(self) -> list[str]:
        """
        Ids of the lines heard and not yet answered, oldest first (``ndb.pending``, a list to
        append to).

        Derived from the runtime history when first needed (after a start or a crash): the
        player lines no reply's ``reply_to`` names and no older-style reply follows. The
        history is restored from the checkpoint plus the archive, so nothing acknowledged is
        lost with ``ndb``. Lines older than ``AI_PENDING_MAX_AGE`` seconds are dropped with a
        log line.
        """
        script = self.obj
        pending = script.ndb.pending
        if pending is None:
            from ..core.turns import unanswered_lines

            lines, stale = unanswered_lines(
                script.history, time.time(), float(get_setting("PENDING_MAX_AGE") or 0)
            )
            set_aside = script.db.lines_set_aside or {}
            lines = [m for m in lines if m["id"] not in set_aside]
            if stale:
                logger.log_info(
                    f"AI {script.obj}: {len(stale)} lines heard before a restart are older than "
                    f"AI_PENDING_MAX_AGE and will not be answered"
                )
            if lines:
                logger.log_info(f"AI {script.obj}: {len(lines)} lines heard before a restart "
                                "are still to be answered")
            pending = [m["id"] for m in lines]
            script.ndb.pending = pending
        return pending

    def set_aside(self, ids) -> None:
        """
        Record that the lines ``ids`` were dealt with although no stored reply names them (the
        model failed and the fallback line was said, nobody in the room could hear the reply,
        their speaker left), so that after a reload or a restart :meth:`pending_ids` does not
        queue them again. Kept in the ``lines_set_aside`` Attribute (``{id: Unix seconds}``)
        only as long as a line could still be queued: ``AI_PENDING_MAX_AGE``, and at most
        :data:`SET_ASIDE_MAX` ids.
        """
        if not ids:
            return
        script = self.obj
        now = time.time()
        max_age = float(get_setting("PENDING_MAX_AGE") or 0) or 3600.0
        kept = {key: when for key, when in (script.db.lines_set_aside or {}).items()
                if now - float(when) <= max_age}
        kept.update((str(key), now) for key in ids)
        newest = sorted(kept.items(), key=lambda item: item[1])[-SET_ASIDE_MAX:]
        script.db.lines_set_aside = dict(newest)

    def awaiting_answer_ids(self) -> list[str]:
        """
        Ids of the player lines that no stored reply answers yet: those of the turn being
        answered now (``ndb.answering``, set by :func:`ai_contrib.npc.replies.answer_turn`) and
        those
        still queued (:meth:`pending_ids`). Compaction keeps them, and everything after them,
        verbatim (:func:`ai_contrib.core.cuts.hold_cut`).

        Returns:
            list[str]: ids, the turn's first.
        """
        return list(self.obj.ndb.answering or []) + list(self.pending_ids())
