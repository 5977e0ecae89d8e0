"""
Answering players in turns: one LLM call answers every line heard since the NPC last spoke, with
a prompt built for the people who will hear the answer (``docs/design.md``, "Turns, not one call
per line" and "Privacy by audience").

An overflowing prompt is never final: when the server says it exceeds its context window, the
history part is cut to half and the reply is asked again once. A failed reply shows the room the
in-character fallback line, is counted on the script (``db.reply_failures``,
``db.last_reply_error``, shown by ``aihistory``) and is reported to admins on MudInfo once per run
of failures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evennia.utils import logger
from evennia.utils.ansi import raw
from twisted.internet import defer

from ..core.audience import heard_by, may_hear
from ..core.budget import note_allowance
from ..core.follow_ups import remember_subject, turn_subject
from ..core.lines import line_to_answer
from ..core.past_questions import note_seconds, past_question
from ..core.prompts import clean_reply, conversation_order, overload_window
from ..core.receipts import kept_receipts, lean_receipt, make_receipt
from ..core.tick import OVER_BUDGET, reaches
from ..core.turns import turn_query
from ..llm.client import LLMContextOverflowError, LLMError, get_client
from ..memory.archive import ArchiveError
from ..settings import get_setting
from .actions import ask_acting
from .deadline import fit_reply, warm_up_stoppable, warmup_enabled, worth_waiting
from .fetch_ahead import ahead_for_turn, remember_left_out, within_fetch
from .hearing import is_assistant_character, room_npcs, with_npcs
from .last_active import note_reply
from .notify import notify_admins
from .reply_prompt import ReplyPrompt, notes_in_order, window_messages
from .scene import note_exchange
from .world import TurnWorld, plan_world

if TYPE_CHECKING:
    from twisted.internet.base import DelayedCall

#: while the history is over its budget (:func:`ai_contrib.core.prompts.overload_window`): share
#: of the history budget the oldest messages kept in the prompt may take
OVERLOAD_HEAD_FRACTION = 0.3
#: share of the history budget kept when the prompt's tail moves
OVERLOAD_HISTORY_FRACTION = 0.5
#: share of the history budget the prompt's history may grow to from a kept tail start
OVERLOAD_KEEP_FRACTION = 0.8


@dataclass(frozen=True)
class TurnRecall:
    """
    What a turn recalls (:func:`recall_for_turn`).

    Attributes:
        notes (list[dict]): the recall notes to show, in order
            (:mod:`ai_contrib.core.recall_notes`), each with ``"new": bool`` (first shown now)
            and ``"fetched": bool`` (the note fetched ahead).
        items (list[dict]): the turn's retrieval candidates, best first, each with ``"new":
            bool`` (held by a new note; item shape in
            :func:`ai_contrib.memory.retrieval.note_items`).
        recall (dict | None): the receipt's ``recall`` part, persisted with the receipt
            (:mod:`ai_contrib.core.receipts`): ``{"asks": str | None`` (why the turn asks
            about the past: :func:`ai_contrib.core.past_questions.past_question`),
            ``"allowance": int | None`` (tokens the new note could take for time; None: no
            limit), ``"left_out": int`` (candidates that found no room), ``"room_limited":
            bool`` (left out for time, not for the budget), ``"follows": bool`` (a follow-up:
            retrieval asked about the subject in hand,
            :func:`ai_contrib.core.follow_ups.turn_subject`), ``"dropped": int`` (earlier
            notes given up for room), ``"leaving": int`` (earlier notes kept for this reply,
            given up after it)``}``; None without the memory package.
    """

    notes: list = field(default_factory=list)
    items: list = field(default_factory=list)
    recall: dict | None = None


def _optional_retrieval(character, retrieve):
    """
    ``retrieve(recall)`` -> Deferred, given the :mod:`ai_contrib.npc.recall` module; a
    Deferred firing None when that cannot be imported (the ``memory`` extra is not installed:
    numpy, sqlite-vec). A failure is logged and fires None (a reply goes on without memories).
    """
    try:
        from . import recall
    except ImportError:
        return defer.succeed(None)
    d = defer.maybeDeferred(retrieve, recall)

    def _failed(failure):
        logger.log_warn(f"AI {character}: memory retrieval failed: {failure.getErrorMessage()}")
        return None

    return d.addErrback(_failed)


def recall_for_turn(script, character, query, listeners, anchor, window=None) -> defer.Deferred:
    """
    Retrieve for a turn and update the NPC's recall notes (``docs/design.md``, "Recall notes").

    What retrieval returns is shown as a note before the turn's first line and stays there on
    later replies, so the server's cached prefix covers it; only what no shown note holds is
    added. The notes live in ``script.ndb.recall_notes`` (a reload starts afresh).

    Args:
        listeners (dict | None): ``{dbref: name}`` of who will hear the reply (None: no
            audience filter, for replays and admin tools).
        anchor (str): id of the turn's first line.
        window (tuple, optional): the history messages the prompt shows (:func:`prompt_window`;
            None: all); notes anchored elsewhere cannot be shown and are let go, so they
            neither take the memory budget nor push out the notes the prompt shows.

    Returns:
        Deferred[TurnRecall]: the notes to show and the turn's candidates.
    """
    # a follow-up ("What else comes to mind?") asks about the subject in hand, not its own words
    # (docs/design.md, "Recall notes")
    audience = None if listeners is None else tuple(sorted(listeners))
    query, follows = turn_subject(query, script.ndb.recall_subjects or {}, audience)
    d = _optional_retrieval(character, lambda recall: recall.related_memory_context(
        script, character, query, listeners))

    def plan(context):
        try:
            from ..memory.retrieval import note_items, render_note
            from .recall import mark_answered_questions
        except ImportError:
            return TurnRecall()
        from ..core.recall_notes import anchor_costs, plan_recall
        from ..core.tokens import count_tokens

        items = note_items(context)
        shown = conversation_order(window_messages(script.history, window))
        # a question about the past may evaluate more memories than small talk
        # (docs/design.md, "Recall notes")
        asks = past_question(query, (character.db.entity_profiles or {}).keys(), character.key)
        if asks is not None:
            script.ndb.recall_subjects = remember_subject(script.ndb.recall_subjects, audience,
                                                          query)
            # the question itself is no memory: later retrieval leaves it out
            mark_answered_questions(script, _turn_lines(script.history, anchor))
        allowance = within_fetch(script, note_allowance(
            note_seconds(asks, script.cfg("memory_note_seconds"),
                         script.cfg("memory_question_seconds")),
            get_client().prompt_speed))
        result = plan_recall(
            script.ndb.recall_notes or [], items, anchor, {m["id"] for m in shown},
            script.budgeting.memory_budget(), render_note, count_tokens,
            listeners=None if listeners is None else list(listeners),
            new_tokens=allowance, asking=asks is not None,
            # docs/design.md, "Recall notes", "Room lent by the history"
            lent_tokens=script.budgeting.lendable() if asks is not None else 0,
            anchor_cost=anchor_costs([m["id"] for m in shown],
                                     script.runtime.token_counts(shown)),
            # what staff erased since a note was shown leaves it (npc.erase.withdraw_recall)
            withdrawn=script.ndb.withdrawn_memories, ahead=ahead_for_turn(script, anchor),
            # the warm-up gives them up while the player types (docs/design.md, "Recall
            # notes", "Given up after the reply"); with lines said since the turn began, the
            # next turn comes at once and would pay for it
            give_up_later=_warms_up() and not script.hearing.pending_ids())
        script.ndb.recall_notes = result.notes
        remember_left_out(script, items, result, asks, listeners)
        notes, fresh = _marked(result)
        return TurnRecall(
            notes=notes, items=[dict(item, new=item["key"] in fresh) for item in items],
            recall={"asks": asks, "allowance": allowance, "left_out": result.left_out,
                    "room_limited": result.room_limited, "follows": follows,
                    "dropped": result.dropped, "leaving": result.leaving})

    return d.addCallback(plan)


def _warms_up():
    """Whether the cache warm-ups run (:func:`ai_contrib.npc.deadline.warmup_enabled`); a bad
    ``AI_PROMPT_CACHE_WARMUP`` is logged where the warm-up is due, and here counts as no."""
    try:
        return warmup_enabled()
    except ValueError:
        return False


def _marked(result):
    """
    The notes a turn shows (:func:`ai_contrib.core.recall_notes.plan_recall`'s ``shown``),
    each marked ``new`` when first shown now (the turn's new note, the one fetched ahead) and
    ``fetched`` for the one fetched ahead; and the keys of the items the new ones hold.

    Returns:
        tuple: ``(notes: list[dict], keys: set[str])``.
    """
    ahead = result.ahead
    new = [note for note in (ahead, result.new) if note]
    notes = [dict(note, new=any(note is n for n in new), fetched=note is ahead)
             for note in result.shown]
    return notes, {item["key"] for note in new for item in note["items"]}


def _turn_lines(history, anchor):
    """The messages of ``history`` from the one whose id is ``anchor`` to the end (the turn
    being answered; [] when the anchor is not in the history), found from the end: O(the
    turn's lines)."""
    for i in range(len(history) - 1, -1, -1):
        if history[i].get("id") == anchor:
            return list(history[i:])
    return []


def _redacted(err):
    """The error's text for players' and admins' eyes: the client masks keys in what it raises."""
    return str(err)[:300]


def _record_failure(script, character, err):
    failures = (script.db.reply_failures or 0) + 1
    script.db.reply_failures = failures
    script.db.last_reply_error = _redacted(err)
    if failures == 1:
        # notify_admins writes the server log line too: one line per failure, not two
        notify_admins(
            f"AI {character}: could not answer ({script.db.last_reply_error}); players see "
            f"the fallback line until the model answers again (aihistory {character.key})"
        )
    else:
        logger.log_err(f"AI {character}: reply failed ({failures} in a row): "
                       f"{script.db.last_reply_error}")


def _record_success(script, character):
    if script.db.reply_failures:
        notify_admins(
            f"AI {character}: answering again after {script.db.reply_failures} failed replies"
        )
        script.db.reply_failures = 0


def describe_reply(stats) -> str:
    """
    One line about a reply's cost, for the server log and ``aihistory``:
    ``"1.21 s, prompt 812 tokens, 770 reused (95%), 42 generated"`` (the cache figures only
    where the server reports them), ending ``", 0.80 s of it waiting for the cache warm-up"``
    when the reply waited for one (``docs/design.md``, "Warming the cache after a compaction").

    Args:
        stats (dict): ``{"seconds": float, "prompt": dict | None, "waited": float (optional,
            seconds of ``seconds``)}``, ``prompt`` as
            :meth:`ai_contrib.llm.client.ChatResult.prompt_stats` returns it.
    """
    text = f"{stats['seconds']:.2f} s"
    prompt = stats.get("prompt")
    if prompt:
        share = prompt["cached_tokens"] / max(1, prompt["prompt_tokens"])
        text += (f", prompt {prompt['prompt_tokens']} tokens, {prompt['cached_tokens']} reused "
                 f"({share:.0%})")
        if prompt.get("generated_tokens") is not None:
            text += f", {prompt['generated_tokens']} generated"
    if stats.get("waited", 0) >= 0.01:
        text += f", {stats['waited']:.2f} s of it waiting for the cache warm-up"
    return text


#: exact reply prompts an NPC keeps in memory for ``aihistory <npc>/prompt/full``
RECENT_PROMPTS = 5


def keep_receipt(script, said, receipt, messages) -> None:
    """
    Keep a reply's receipt: in the NPC's archive (a ``receipt`` record naming the reply's seq,
    :func:`ai_contrib.core.receipts.lean_receipt`, unless ``AI_ARCHIVE_RECEIPTS`` is False;
    the full-text index reads only messages), on the script (``db.reply_receipts``, the last
    :data:`ai_contrib.core.receipts.RECEIPTS_KEPT`), and the exact prompt in
    ``ndb.recent_prompts`` (the last :data:`RECENT_PROMPTS`, lost on reload).

    Each kept receipt gains ``"seq"`` (the reply's archive seq) and ``"at"`` (its timestamp).
    A receipt the archive cannot take is logged and kept on the script only.
    """
    if receipt is None:
        return
    receipt = dict(receipt, seq=said.get("seq"), at=said.get("timestamp"))
    if get_setting("ARCHIVE_RECEIPTS"):
        try:
            script.archive.append("receipt", reply_seq=said.get("seq"),
                                  receipt=lean_receipt(receipt))
        except ArchiveError as err:  # the reply is said and stored; its receipt is a by-product
            logger.log_warn(f"AI {script.obj}: the reply's receipt was not archived: {err}")
    script.db.reply_receipts = kept_receipts(script.db.reply_receipts, receipt)
    note_reply(script.obj)  # for the warm-ups after a restart
    prompts = list(script.ndb.recent_prompts or ())
    prompts.append({"seq": said.get("seq"), "messages": messages or []})
    script.ndb.recent_prompts = prompts[-RECENT_PROMPTS:]


def _report_reply(script, character, result, seconds, waited=0.0):
    # one line per reply: what an admin needs to see whether the server's prefix cache works
    stats = {"seconds": seconds, "prompt": result.prompt_stats(), "waited": waited}
    script.ndb.last_reply = stats
    get_client().observe_prompt_speed(stats["prompt"])
    logger.log_info(f"AI reply {character.key}: {describe_reply(stats)}")


def show_thinking_later(character) -> DelayedCall | None:
    """
    Schedule the room's sign that ``character`` is thinking (``AI_THINKING_EMOTE``, said once)
    for when a reply has taken ``AI_THINKING_EMOTE_AFTER`` seconds; the caller cancels it when
    the reply is ready. A player otherwise cannot tell a slow answer from none.

    Returns:
        twisted.internet.base.DelayedCall | None: the scheduled call, or None when the setting
        is 0 or None.
    """
    after = get_setting("THINKING_EMOTE_AFTER")
    if not after or float(after) <= 0:
        return None
    from twisted.internet import reactor

    def emote():
        if character.location:
            text = str(get_setting("THINKING_EMOTE")).format(name=character.key)
            character.location.msg_contents(text, exclude=[character], from_obj=character)

    return reactor.callLater(float(after), emote)


def starts_with(messages, prefix) -> bool:
    """
    Whether chat ``messages`` start with ``prefix`` (a warm-up's messages), its last message
    included: the server's cached prefix then covers all of ``prefix``. False for no prefix.
    """
    if not prefix or len(prefix) > len(messages):
        return False
    return all(a.get("role") == b.get("role") and a.get("content") == b.get("content")
               for a, b in zip(messages, prefix))


def prompt_window(script, turn_ids=()) -> tuple:
    """
    Which history messages the reply prompt shows and the tokens they may take, chosen once
    per turn before retrieval, so that the recall notes are planned for what the prompt shows.

    Within the budget the prompt shows the whole history. Over it (memory work is behind, a
    flood of lines) it shows the oldest messages and a newest stretch whose start stays put for
    several turns (:func:`ai_contrib.core.prompts.overload_window`), so the cached prefix keeps
    matching, and may grow to :data:`OVERLOAD_KEEP_FRACTION` of the budget. The tail never
    starts after the first of ``turn_ids`` (the lines being answered), so a flood's turn is
    not cut at its front.

    Returns:
        tuple: ``(window, budget)``: ``window`` is None (the whole history) or ``(head_last_id,
        tail_first_id)`` (ids; ``head_last_id`` None when there is no head), for
        :func:`window_messages`; ``budget`` the history budget in tokens. The tail's start is
        kept in ``script.ndb.prompt_start_id``.
    """
    budget = script.budgeting.tokens()
    if not reaches(script.budgeting.usage(), OVER_BUDGET):
        script.ndb.prompt_start_id = None
        return None, budget
    history = script.history
    wanted = set(turn_ids)
    first = next((i for i, msg in enumerate(history) if msg.get("id") in wanted), None)
    cut = overload_window(
        history, script.runtime.token_counts(history), budget, script.ndb.prompt_start_id,
        OVERLOAD_HEAD_FRACTION, OVERLOAD_HISTORY_FRACTION, OVERLOAD_KEEP_FRACTION,
        keep_from=first)
    if cut is None:
        script.ndb.prompt_start_id = None
        return None, budget
    head_end, tail_start = cut
    script.ndb.prompt_start_id = history[tail_start]["id"]
    window = (history[head_end - 1]["id"] if head_end else None, history[tail_start]["id"])
    # a flood's turn alone may be larger than the budget
    return window, int(budget * OVERLOAD_KEEP_FRACTION)


@defer.inlineCallbacks
def _ask(script, character, prompt, shown, **request):
    """
    One reply from the model, from a prompt the server can evaluate in time
    (:func:`ai_contrib.npc.deadline.fit_reply`), asking again once with half the history the
    refused prompt showed when the server says it exceeds its context window (our token count
    and the server's can differ), fitted to the time allowance the same way.
    ``prompt`` is the turn's :class:`~ai_contrib.npc.reply_prompt.ReplyPrompt`
    (``prompt(budget, window=None)`` builds the messages :func:`window_messages` gives for
    ``window``, its action exchanges after them); ``shown`` is :func:`prompt_window`'s ``(window, budget)``; ``request`` more fields
    of the request (the actions' ``tools``).
    """
    model = script.cfg("llm_model")
    held = script.ndb.server_prompt
    # a prompt the server cannot evaluate in time is built from less, and the request may take
    # as long as its prompt needs (docs/design.md, "Time limits that follow the work")
    messages, timeout = fit_reply(script, character, prompt, shown)
    try:
        result = yield get_client().chat(messages, model=model, purpose="reply",
                                         timeout=timeout, **request)
    except LLMContextOverflowError as err:
        # half of what the refused prompt's history took: a prompt built from less for time
        # may be smaller than half the NPC's history, and must not be sent again as it was
        sent = sum(part["tokens"] for part in prompt.parts or ()
                   if part["part"] in ("summary", "history", "turn"))
        smaller = min(shown[1], script.conversation.token_count(), sent or shown[1]) // 2
        logger.log_warn(
            f"AI {character}: the reply prompt overflowed the model's context window ({err}); "
            f"asking again with a {smaller}-token history"
        )
        # a server that refuses a prompt evaluates none of it: its cache holds what it held
        script.ndb.server_prompt = held
        messages, timeout = fit_reply(script, character, prompt, (None, smaller))
        result = yield get_client().chat(messages, model=model, purpose="reply",
                                         timeout=timeout, **request)
        if hasattr(script, "ticking"):
            script.ticking.start_memory_work()
    return result


@defer.inlineCallbacks
def answer_turn(script, character, hearers) -> defer.Deferred:
    """
    Answer everything heard since the NPC last spoke, in one reply said aloud in its room.

    The turn takes every queued line (``script.pending_ids()``) whose speaker is still in the
    room; lines whose speakers left are dropped with a log line, and when nobody is in the room
    the lines wait (the next tick tries again). Lines said while the reply is being written
    join the next turn. The prompt is built for the characters in the room now:
    history, summaries and memories they could not all have heard are left out, except the
    turn's own lines. When the reply is ready the room is asked again: it is said aloud only if
    everyone there now could have heard all the prompt was built from, the turn's lines
    included; otherwise it is murmured to those who could (``AI_MURMUR_REPLY``), the others
    seeing only that the NPC murmurs (``AI_MURMUR_SEEN``), and when nobody could it is not said
    at all. The stored reply records ``metadata["reply_to"]`` (the lines it answers),
    ``metadata["audience"]`` (who heard it) and ``metadata["murmured"]`` (True when it was not
    said aloud). On an LLM error the room sees the fallback line
    and the turn's lines count as answered (asking again would repeat the failure for every
    line); no traceback reaches a player.

    Args:
        script (AssistantScript): the NPC's script.
        character (AssistantCharacter): the NPC.
        hearers (callable): ``hearers(character)`` -> ``{dbref: name}`` of who hears the NPC
            now (:func:`ai_contrib.typeclasses.room_listeners`, passed in by the caller so that
            this module stays below the typeclasses; ``docs/design.md``, "Privacy by audience").

    Returns:
        Deferred firing the number of replies said (0 or 1).
    """
    pending = script.hearing.pending_ids()
    if not pending:
        return 0
    listeners = hearers(character)
    script.ndb.no_listeners = not listeners
    if not listeners:
        return 0  # the lines wait for someone to hear the answer (at most AI_PENDING_MAX_AGE)
    wanted = set(pending)
    del pending[:]
    lines = [m for m in script.history if m["id"] in wanted]
    # another AI NPC is no listener (no reply is built for its ears) but may be spoken to
    here = {getattr(obj, "dbref", None) for obj in getattr(character.location, "contents", ())}
    gone = [m for m in lines if _speaker_left(line_to_answer(m), listeners, here)]
    if gone:
        logger.log_info(f"AI {character}: {len(gone)} lines not answered: their speakers left")
        script.hearing.set_aside([m["id"] for m in gone])
    lines = [m for m in lines if m not in gone]
    if not lines:
        return 0
    turn_ids = [m["id"] for m in lines]
    # the turn's lines stay in context until the reply naming them is stored
    script.ndb.answering = turn_ids
    try:
        said = yield _answer(script, character, lines, turn_ids, listeners, hearers)
    finally:
        script.ndb.answering = None
    return said


def _speaker_left(line, listeners, here):
    """Whether the speaker of ``line`` (a :class:`~ai_contrib.core.lines.LineToAnswer`, or None
    for a message that is no line) is gone: no listener, nor an AI NPC still in the room
    (``here``, dbrefs)."""
    if line is None:
        return True
    return line.speaker not in listeners and not (line.from_npc and line.speaker in here)


def world_for_turn(script, character, lines, listeners, anchor, window) -> TurnWorld:
    """
    The NPC's world for one turn's prompt (:func:`ai_contrib.npc.world.plan_world`): standing
    sections, world notes, and what did not fit. A failure is logged and the reply goes on
    without it, as it does without memories.

    Args:
        lines (list[dict]): the turn's lines.
        listeners (dict): ``{dbref: name}``.
        anchor (str): id of the turn's first line.
        window (tuple | None): :func:`prompt_window`'s window.

    Returns:
        TurnWorld: :func:`ai_contrib.npc.world.plan_world`'s result (empty on a failure).
    """
    try:
        history = script.history
        first = next((i for i, m in enumerate(history) if m.get("id") == anchor), len(history))
        shown = window_messages(history, window)
        # the prompt shows these listeners only what they all heard, and the turn: a note
        # anchored at another line is not before them, and what it holds is noted again
        turn = {m.get("id") for m in lines}
        visible = {m.get("id") for m in shown if m.get("id") in turn or heard_by(m, listeners)}
        return plan_world(script, character, lines, history[max(0, first - 40):first],
                          listeners, anchor, {m.get("id") for m in shown}, visible)
    except Exception as err:  # noqa: BLE001 - the world is context, never a reason not to answer
        logger.log_trace(f"AI {character}: the NPC's world could not be put in the prompt: {err}")
        return TurnWorld()


@defer.inlineCallbacks
def _answer(script, character, lines, turn_ids, listeners, hearers=None):
    """
    The LLM call and the stored reply of one turn (:func:`answer_turn`). The prompt is built
    for ``listeners`` and the room's other AI NPCs
    (:func:`ai_contrib.npc.hearing.with_npcs`). When the reply is
    ready, who is in the room is asked again (``hearers``, and the AI NPCs): the reply is said
    aloud only if everyone present, AI NPCs included, could have heard all the prompt was built
    from (its history, notes and the turn's own lines,
    :func:`ai_contrib.core.audience.may_hear`); otherwise it is murmured to those who could
    (:func:`murmur`), and stored with them as its audience. It is not said at all when no
    player could.
    """
    shown = prompt_window(script, turn_ids)
    # the room's AI NPCs overhear the reply: it is built for their ears too, from what they
    # heard as well (docs/design.md, "Privacy by audience")
    listeners = with_npcs(character, listeners)
    recall = yield recall_for_turn(script, character, turn_query(lines), listeners, turn_ids[0],
                                   window=shown[0])
    world = world_for_turn(script, character, lines, listeners, turn_ids[0], shown[0])
    prompt = ReplyPrompt(script, character, turn_ids, listeners,
                         notes_in_order(recall.notes, world.notes), world.standing)
    reply, receipt = yield _write_reply(script, character, prompt, shown, recall, world)
    if not reply:
        if character.location:
            line = get_setting("FALLBACK_REPLY").format(name=character.key)
            character.location.msg_contents(line, exclude=[character])
        # answered by the fallback line: not again after a reload
        script.hearing.set_aside(turn_ids)
        return 0
    _record_success(script, character)
    # the room may have changed while the reply was written, and a line may have been said
    # before someone walked in: only those present now who could hear everything the prompt
    # was built from may hear it (docs/design.md, "Privacy by audience")
    present = with_npcs(character, hearers(character) if hearers is not None else listeners)
    heard = may_hear((prompt.sources or lines) + prompt.acted, present)
    npcs = {npc.dbref for npc in room_npcs(character)}
    if not set(heard) - npcs:
        logger.log_info(f"AI {character}: reply not said: no player in the room now could hear "
                        f"all it was built from ({len(present)} present)")
        script.hearing.set_aside(turn_ids)
        return 0
    # an AI NPC that did not hear all of it counts as a listener who did not: the reply is
    # murmured, so it neither hears nor stores nor passes it on
    aloud = len(heard) == len(present)
    metadata = _reply_metadata(lines, turn_ids, heard, aloud)
    said = script.add_message("assistant", reply, name=character.key, metadata=metadata)
    keep_receipt(script, said, receipt, prompt.messages)
    # the NPC spoke with the people it answered (docs/design.md, "Scene, events and people")
    note_exchange(script, {line.speaker: line.name for line in map(line_to_answer, lines)
                           if line is not None and line.name and line.speaker in heard})
    if aloud:
        _say_aloud(character, reply, metadata.get("depth", 1), heard, metadata.get("thread"))
    else:
        murmur(character, reply, heard, metadata.get("depth", 1), metadata.get("thread"))
    return 1


@defer.inlineCallbacks
def _share_warm_up(script, prompt, shown):
    """
    Before a reply is asked for: wait for a cache warm-up evaluating the start of this
    ``prompt`` (a :class:`~ai_contrib.npc.reply_prompt.ReplyPrompt`; ``shown`` is
    :func:`prompt_window`'s ``(window, budget)``) when what a cancel would spare the server is
    within the reply's time allowance (:func:`ai_contrib.npc.deadline.worth_waiting`: the
    evaluation step under way ends either way); else, for a warm-up sent in steps, ask it to
    stop after the request under way (``ndb.warm_yield``) and wait for that; else cancel it
    when that frees the server sooner (:func:`ai_contrib.npc.deadline.warm_up_stoppable`: it
    has steps left), and leave it to end otherwise (``docs/design.md``, "Warming the cache
    after a compaction").

    Returns:
        Deferred[bool]: whether it waited.
    """
    if script.ndb.warming is None:
        return False
    if script.ndb.handing_over:
        # the memory server evaluates it (ai_contrib.llm.handover): the reply server is free,
        # and the reply extends the prompt it holds (npc.held_prompt) or is fitted as any
        return False
    # the step the server is evaluating ends before it takes the reply, cancelled or not: a
    # cancel spares only what comes after it, and loses what the warm-up leaves in the cache
    if starts_with(prompt(shown[1], shown[0]), script.ndb.warming_messages) \
            and worth_waiting(script):
        # a cache warm-up is evaluating the start of this prompt (ai_contrib.npc.warmup): the
        # server would evaluate the same tokens again beside it, so the reply takes its
        # work instead; the wait counts in the reply's time
        yield script.ndb.warming
        return True
    if script.ndb.warming_step:
        # a warm-up in steps stops after the step under way (ai_contrib.npc.warmup): the
        # server then holds its leading messages, which the reply is built on, and takes the
        # reply with nothing evaluated beside it
        script.ndb.warm_yield = True
        yield script.ndb.warming
        return True
    if script.ndb.warming_request is not None and warm_up_stoppable(script):
        # a prompt that starts otherwise (other listeners, a window, a note given up) gains
        # nothing from it, and one that would wait past its time allowance goes on from what
        # it can have in time (npc.deadline): the warm-up gives the server up to the reply
        script.ndb.warming_request.cancel()
    return False


def _items_shown(items, notes) -> list:
    """The turn's retrieval ``items`` for its receipt, each ``new`` only while a new note the
    prompt shows holds it: a reply built from less for time (:func:`ai_contrib.npc.deadline.
    fit_reply`) may have trimmed a new note or left it out."""
    shown = {item["key"] for note in notes if note.get("new") for item in note.get("items") or ()}
    return [dict(item, new=bool(item.get("new")) and item["key"] in shown) for item in items]


@defer.inlineCallbacks
def _write_reply(script, character, prompt, shown, recall, world):
    """
    The model's reply to the turn ``prompt``
    (:class:`~ai_contrib.npc.reply_prompt.ReplyPrompt`) is built for, cleaned, and
    its receipt; the room is shown that the NPC is thinking when it takes long
    (:func:`show_thinking_later`). An answer with no usable text is asked again once, where the
    turn took no action; a failure (an LLM error, no usable text again) is recorded
    (:func:`_record_failure`).

    Args:
        shown (tuple): :func:`prompt_window`'s ``(window, budget)``.
        recall (TurnRecall): :func:`recall_for_turn`'s result.
        world (TurnWorld): :func:`world_for_turn`'s result.

    Returns:
        Deferred[tuple]: ``(reply, receipt)``: ``reply`` ``""`` when it failed (``receipt``
        then None where no answer came).
    """
    started = time.monotonic()
    waited = 0.0
    # the room is told she is thinking while she waits for a warm-up too
    thinking = show_thinking_later(character)
    receipt = None
    try:
        if (yield _share_warm_up(script, prompt, shown)):
            waited = time.monotonic() - started
        # the NPC may act before it speaks (docs/design.md, "Actions")
        result = yield ask_acting(script, character, prompt, shown, _ask)
        reply = _usable_text(result, character)
        if not reply and not prompt.exchanges:
            # a sampled completion with no words in it (a small model's stray turn, markup)
            # is no dead server: the prompt is cached, so a second sample costs its words only
            logger.log_info(f"AI reply {character.key}: the model returned no usable text; "
                            f"asked again")
            result = yield _ask(script, character, prompt, shown)
            reply = _usable_text(result, character)
        _report_reply(script, character, result, time.monotonic() - started, waited)
        receipt = make_receipt(
            script.cfg("llm_model") or getattr(result, "model", None),
            script.ndb.last_reply["seconds"], script.ndb.last_reply.get("prompt"),
            prompt.parts, _items_shown(recall.items, prompt.notes),
            prompt.listeners.values())
        if world.skipped:
            receipt["world_skipped"] = world.skipped
        if recall.recall:
            receipt["recall"] = recall.recall
        if prompt.cut:
            receipt["cut_for_time"] = prompt.cut
        if not reply:
            _record_failure(script, character, "the model returned no usable text")
    except LLMError as err:
        _record_failure(script, character, err)
        reply = ""
    finally:
        if thinking is not None and thinking.active():
            thinking.cancel()
    return reply, receipt


def _usable_text(result, character) -> str:
    """The words of the model's answer ``result`` (a :class:`~ai_contrib.llm.client.ChatResult`)
    that ``character`` may say (:func:`ai_contrib.core.prompts.clean_reply`), ``""`` when none;
    an answer stopped by ``AI_LLM_MAX_REPLY_TOKENS`` ends at its last full sentence."""
    return clean_reply(result.content, character.key,
                       truncated=getattr(result, "finish_reason", None) == "length")


def _reply_metadata(lines, turn_ids, heard, aloud):
    """
    The stored reply's metadata: ``reply_to`` (``turn_ids``), ``audience`` (the dbrefs of
    ``heard``), ``murmured`` when not said ``aloud``, ``depth`` when it answers another AI
    NPC's line, and ``thread``, the player's line whose replies it counts among
    (docs/design.md, "A room of NPCs").
    """
    metadata = {"reply_to": turn_ids, "audience": sorted(heard)}
    if not aloud:
        metadata["murmured"] = True
    # a reply to another AI NPC's line stands one deeper in their exchange (docs/design.md,
    # "A room of NPCs"); a reply to players is depth 1 and records none
    depth = 1 + max(int((m.get("metadata") or {}).get("depth") or 0) for m in lines)
    if depth > 1:
        metadata["depth"] = depth
    # the player's line whose replies it counts among: the deepest line's, as its depth
    deepest = max(reversed(lines),
                  key=lambda m: int((m.get("metadata") or {}).get("depth") or 0))
    thread = (deepest.get("metadata") or {}).get("thread")
    if thread:
        metadata["thread"] = thread
    return metadata


def _say_aloud(character, reply, depth, heard, thread=None):
    """Say ``reply`` in the NPC's room; the other AI NPCs there hear it at ``depth``, in
    ``thread`` (:func:`ai_contrib.npc.hearing.start_thread`), and store it with ``heard``
    (dbrefs) as its audience, the one it was built for."""
    # the model's words are data too: raw() doubles every | so none becomes a colour or link;
    # the other AI NPCs in the room hear it with its depth, thread and audience (ndb.speaking,
    # read as they hear)
    character.ndb.speaking = {"depth": depth, "audience": sorted(heard), "thread": thread}
    try:
        character.at_say(raw(reply))
    finally:
        character.ndb.speaking = None


def _names(names):
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def murmur(character, reply, heard, depth=1, thread=None) -> None:
    """
    Say ``reply`` to ``heard`` alone (``{dbref: name}``, the characters in the room who may hear
    it): each of them gets ``AI_MURMUR_REPLY``, everyone else in the room ``AI_MURMUR_SEEN``
    (that the NPC murmurs, not what). The reply is escaped like a spoken one (``raw()``), the
    NPC's and listeners' names too. An AI NPC among ``heard`` also hears the reply as speech
    (at ``depth``, in ``thread`` like a reply said aloud, so a murmured exchange between NPCs
    is bounded as a spoken one) with ``heard`` as its audience; one outside it stores nothing.
    """
    room = character.location
    if room is None:
        return
    to = _names(heard.values())
    whisper = str(get_setting("MURMUR_REPLY")).format(name=raw(character.key), to=raw(to),
                                                     reply=raw(reply))
    seen = str(get_setting("MURMUR_SEEN")).format(name=raw(character.key), to=raw(to))
    for obj in room.contents:
        if obj == character:
            continue
        if obj.dbref in heard:
            obj.msg(whisper, from_obj=character)
            if is_assistant_character(obj):
                _overheard(character, obj, reply, heard, depth, thread)
        else:
            obj.msg(seen, from_obj=character)


def _overheard(character, npc, reply, heard, depth, thread=None):
    """``npc`` (an AI NPC) hears ``reply``, murmured by ``character`` to ``heard``, at
    ``depth`` in ``thread`` (read from ``ndb.speaking`` as for a reply said aloud)."""
    character.ndb.speaking = {"depth": depth, "audience": sorted(heard), "thread": thread}
    try:
        npc.at_heard_say(character, reply, audience=list(heard))
    finally:
        character.ndb.speaking = None

