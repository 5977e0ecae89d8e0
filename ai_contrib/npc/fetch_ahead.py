"""
Memories fetched ahead while the player types (``docs/design.md``, "Recall notes", "Fetched
ahead").

A question about the past gets the note its reply has time to evaluate; what retrieval found and
the allowance left out waits. The player's next line is most often on the same subject, so once
the reply is spoken and the NPC is idle, the cache warm-up (:mod:`ai_contrib.npc.warmup`) sends
the prompt's opening followed by a note of those candidates
(:func:`ai_contrib.core.recall_notes.plan_ahead`): the server evaluates it while the player
types. When the next turn goes on with the subject and begins right where that note was warmed,
the note is shown first, at no cost in the reply's allowance
(:func:`ai_contrib.core.recall_notes.plan_recall`'s ``ahead``); otherwise it is let go and the
cache still holds the opening.

State on ``script.ndb`` (lost on reload, like the notes): ``fetch_ahead`` ``{"items": [item],
"listeners": list[str] | None}`` (the last question's candidates left out for time, until the
warm-up takes them) and ``ahead_note`` (the note warmed, with ``"after"``: the id of the history
message it follows, and ``"head"``: :func:`ai_contrib.core.prompts.prompt_head` then).
"""

from __future__ import annotations

from ..core.messages import ChatMessage
from ..core.prompts import prompt_head
from ..core.recall_notes import RecallNote
from .deadline import warm_up_left, worth_waiting


def remember_left_out(script, items, result, asks, listeners) -> None:
    """
    After a turn's recall plan: keep the candidates a question about the past left out for
    time (``result.room_limited``), for the warm-up to fetch ahead
    (``AI_MEMORY_FETCH_AHEAD``, per NPC); any other turn clears them.

    Args:
        script (AssistantScript): the NPC's script.
        items (list[dict]): the turn's retrieval candidates, best first
            (:func:`ai_contrib.memory.retrieval.note_items`).
        result (RecallPlan): :func:`ai_contrib.core.recall_notes.plan_recall`'s result.
        asks (str | None): why the turn asks about the past (None: it does not).
        listeners (iterable[str] | None): dbrefs of who hears the reply.
    """
    wanted = asks is not None and result.room_limited and result.left_out \
        and script.cfg("memory_fetch_ahead")
    script.ndb.fetch_ahead = {
        "items": list(items), "listeners": None if listeners is None else sorted(listeners),
    } if wanted else None


def ahead_for_turn(script, anchor) -> RecallNote | None:
    """
    The note warmed ahead when the turn whose first line is ``anchor`` begins right after the
    message it was warmed after (so the server's cache holds it where the prompt shows it);
    else None. Either way it is used once: cleared here. O(the turn's lines).

    A player who typed faster than the server evaluates the note finds it still being
    evaluated: the reply waits for the warm-up as for any whose messages start its prompt
    (:func:`ai_contrib.npc.replies._share_warm_up`, within its time allowance), whether it
    shows the note or not, since the server would otherwise evaluate the reply's prompt beside
    it.
    """
    note, script.ndb.ahead_note = script.ndb.ahead_note, None
    # a compaction since moved the prompt's start: the cache holds the note after another one
    if not note or note.get("head") != prompt_head(script.history):
        return None
    # a reply that will not wait for the rest of the fetch would show it uncached
    if script.ndb.warming is not None and not worth_waiting(script):
        return None
    history = script.history
    for i in range(len(history) - 1, 0, -1):
        if history[i].get("id") == anchor:
            return note if history[i - 1].get("id") == note.get("after") else None
    return None


def within_fetch(script, allowance) -> int | None:
    """
    A turn's note allowance (tokens; None: no limit) less what the warm-up fetching a note
    ahead has left to evaluate, as far as the server's measured speed tells
    (:func:`ai_contrib.npc.deadline.warm_up_left`): the reply waits for that first
    (:func:`ahead_for_turn`), so a player who typed faster than the fetch waits no longer
    than the allowance says, and not for the wait and a new note of its own on top.
    Call it before :func:`ahead_for_turn`, which forgets the note.

    Returns:
        int | None: tokens, at least 0.
    """
    if allowance is None or script.ndb.warming is None or not script.ndb.ahead_note \
            or not worth_waiting(script):
        return allowance
    left = warm_up_left(script)
    return allowance if left is None else max(0, int(allowance - left))


def ahead_message(script, listeners, history_ids) -> ChatMessage | None:
    """
    The system message to warm after the prompt's opening for ``listeners``: the note of the
    candidates :func:`remember_left_out` kept, planned beside the shown notes
    (:func:`ai_contrib.core.recall_notes.plan_ahead`, with the room the history can lend);
    recorded as ``ndb.ahead_note`` for the next turn. The kept candidates are taken (a
    warm-up fetches them once).

    Args:
        script (AssistantScript): the NPC's script.
        listeners (iterable[str]): dbrefs the warm-up's prompt is built for.
        history_ids (set[str]): ids of the messages in the runtime history.

    Returns:
        ChatMessage | None: ``{"role": "system", "content": str}``, or None when nothing was
        kept for these listeners, no candidate fits or the memory package is not installed.
    """
    kept, script.ndb.fetch_ahead = script.ndb.fetch_ahead, None
    script.ndb.ahead_note = None
    listeners = sorted(listeners)
    if not kept or kept.get("listeners") not in (None, listeners) or not script.history:
        return None
    try:
        from ..memory.retrieval import render_note
    except ImportError:
        return None
    from ..core.recall_notes import plan_ahead
    from ..core.tokens import count_tokens

    note = plan_ahead(script.ndb.recall_notes or [], kept["items"],
                      history_ids, script.budgeting.memory_budget(),
                      render_note, count_tokens,
                      listeners=None if kept.get("listeners") is None else listeners,
                      lent_tokens=script.budgeting.lendable(),
                      withdrawn=script.ndb.withdrawn_memories)
    if note is None:
        return None
    script.ndb.ahead_note = dict(note, after=script.history[-1].get("id"),
                                 head=prompt_head(script.history))
    return {"role": "system", "content": note["text"]}


def forget_ahead(script) -> None:
    """The warm-up that held the note ahead failed or was cancelled, or what it quotes was
    forgotten (``aiforget``, ``aireset``): the server's cache does not hold it, so the next
    turn must not take it as evaluated, and the candidates kept for it are let go (a warm-up
    that failed before taking them would otherwise be due again at once)."""
    script.ndb.ahead_note = script.ndb.fetch_ahead = None
