"""
Warming the reply server's prompt cache after a compaction (``docs/design.md``, "Warming the
cache after a compaction").

A compaction puts a new summary near the start of the reply prompt, so the next reply's prompt
matches the server's cached prefix only as far as the persona, and a CPU evaluates all of it
again: 10-20 s at 1,000-1,500 tokens in the demo, more at a 4,096-token window. Memory work
mostly lands while nobody speaks (the sleep phase, the pause after a reply), so when the start
of the prompt has changed and the NPC is idle, the shell sends the prompt its next reply will
start with, asking for one token: the server evaluates and caches it then, and the next reply
reuses it. A reply that comes while the warm-up is being evaluated, for the same listeners,
waits for it when the rest is within its time allowance instead of evaluating the same prompt
beside it (``ai_contrib.npc.replies``), and its time counts the wait. With
``AI_PROMPT_CACHE_WARMUP_STEP_SECONDS`` set, the prompt is sent in steps of that much
evaluation (each request the leading messages of the last and a few more), so that a reply
past its allowance waits for one step: it then asks the series to stop and is built on the
leading messages the server holds and the newest lines (:mod:`ai_contrib.npc.deadline`); the
series goes on from there once the NPC is idle (``docs/design.md``, "Warm-ups in steps").
"""

from __future__ import annotations

import time

from evennia.utils import logger
from twisted.internet import defer

from ..core.deadline import cached_messages, held_head, warm_up_steps
from ..core.recall_notes import visible_notes
from ..core.tokens import count_message_tokens
from ..llm.client import get_client
from ..llm.handover import handover_available, warm_and_hand_over
from ..settings import get_setting
from .deadline import (request_timeout, warm_up_lost, warm_up_sent, warm_up_step_tokens,
                       warm_up_stopped)
from .fetch_ahead import ahead_message, forget_ahead
from .hearing import room_listeners
from .replies import describe_reply
from .reply_prompt import ReplyPrompt, notes_in_order


def warmup_messages(script, character, listeners) -> list:
    """
    The chat messages the NPC's next reply prompt starts with, for ``listeners``: the reply
    prompt's opening (:meth:`ai_contrib.npc.reply_prompt.ReplyPrompt.opening`, the builder the
    reply uses), with the recall notes and world it shows, and no turn yet.

    Args:
        script (AssistantScript): the NPC's script.
        character: the NPC (its ``db.persona`` and ``key``).
        listeners (iterable[str]): dbrefs of who is in the room to speak next.

    After a question about the past whose reply left candidates out for time, the note of
    them follows (:func:`ai_contrib.npc.fetch_ahead.ahead_message`), where the next turn would
    show it: the opening must then end with the history's last message.

    Returns:
        list[dict]: ``{"role", "content"}`` chat messages.
    """
    return warmup_prompt(script, character, listeners)[0]


def warmup_prompt(script, character, listeners) -> tuple:
    """
    :func:`warmup_messages` with the history id each message shows and its tokens, what a
    warm-up sent in steps is cut by.

    Returns:
        tuple: ``(messages, ids, sizes)``: chat messages; the history id each shows (None for
        the system message and notes); tokens each (:class:`~ai_contrib.npc.reply_prompt.
        ReplyPrompt`'s ``ids`` and ``sizes``).
    """
    from .world import shown_world

    listeners = list(listeners)
    ids = {m.get("id") for m in script.history}
    notes = visible_notes(script.ndb.recall_notes or [], ids, listeners)
    standing, world_notes = shown_world(script, character, listeners, ids)
    prompt = ReplyPrompt(script, character, (), listeners, notes_in_order(notes, world_notes),
                         standing)
    opening = prompt.opening()
    shows, sizes = prompt.ids[:len(opening)], prompt.sizes[:len(opening)]
    ahead = ahead_message(script, listeners, ids)
    # the opening left out NPC replies at its end: the next turn's note would come after them
    if ahead is not None and len(opening) == len(prompt.messages):
        size = count_message_tokens(ahead, script.cfg("llm_model"))
        return opening + [ahead], shows + [None], sizes + [size]
    forget_ahead(script)
    return opening, shows, sizes


def warm_in_turn(scripts) -> defer.Deferred:
    """
    Warm the reply server's cache for each of ``scripts`` (``AssistantScript``) in turn, the
    next once the server has evaluated the one before (``docs/design.md``, "Warming the cache
    after a restart"): a restarted server's cache is empty, and the first reply to an NPC with a
    long history would evaluate its whole prompt. Each NPC's prompt start is taken as new
    (``ndb.cached_head`` empty, as if its last prompt had started otherwise), so the warm-up
    goes through :meth:`ai_contrib.npc.ticking.TickHandler.warm_if_due` and its rules: an NPC
    that is busy, has a line to answer or nobody in its room now warms itself at its first idle
    tick with someone to hear it. One with nobody in its room now (after a stop and start, the
    players are not back yet) is warmed for the listeners of its last reply
    (:func:`last_audience`).

    Returns:
        Deferred[int]: fires, once the last warm-up sent has ended, with how many were sent
        now; never errbacks (a failure is logged).
    """
    waiting, sent = list(scripts), []

    def next_one(_=None):
        while waiting:
            script = waiting.pop(0)
            script.ndb.cached_head = ()
            # nobody back in the room yet (a stop and start): the prompt of the listeners of
            # its last reply, who are likely to come back to it
            listeners = None if room_listeners(script.obj) else last_audience(script) or None
            warming = script.ticking.warm_if_due(listeners=listeners)
            if warming is not None:
                sent.append(script)
                return warming.addBoth(next_one)
        return len(sent)

    def failed(failure):
        logger.log_warn(f"AI cache warm-ups after the restart stopped: {failure.value}")
        return len(sent)

    return defer.maybeDeferred(next_one).addErrback(failed)


def last_audience(script) -> list:
    """The dbrefs the NPC's last reply in its history was built for (its
    ``metadata["audience"]``), or [] when it holds no reply. Costs the messages after it."""
    for message in reversed(script.history):
        if message.get("role") == "assistant":
            audience = (message.get("metadata") or {}).get("audience")
            if audience:
                return list(audience)
    return []


def warm_reply_cache(script, character, listeners) -> defer.Deferred:
    """
    Send :func:`warmup_messages` to the reply server with ``max_tokens`` 1 (``purpose``
    ``"warm"``): in one request, or, with ``AI_PROMPT_CACHE_WARMUP_STEP_SECONDS`` set, in steps
    (:func:`ai_contrib.core.deadline.warm_up_steps`, of
    :func:`~ai_contrib.npc.deadline.warm_up_step_tokens`): each request is the prompt's leading
    messages, the next adding what the one before did not hold, so that a reply that comes
    meanwhile waits for one step (``docs/design.md``, "Warm-ups in steps"). Setting
    ``ndb.warm_yield`` stops the series after the step under way: the server then holds its
    leading messages (``ndb.server_prompt``), the last history message among them is
    ``ndb.held_head_id`` (a reply is built from them and the newest lines,
    :mod:`ai_contrib.npc.deadline`), and the start of the prompt counts as not warmed
    (``ndb.cached_head``), so the next warm-up goes on from there. One line is logged
    (``"AI cache warm-up Marta: 9.80 s in 6 steps, prompt 1132 tokens, 140 reused (12%), 6
    generated"``; without ``in 6 steps`` for one request).

    Cancelling the returned Deferred aborts the request under way (a reply whose prompt does
    not start with the warm-up's needs the server more).

    Returns:
        Deferred[dict | None]: the server's prompt figures over the steps sent
        (:meth:`ai_contrib.llm.client.ChatResult.prompt_stats`'s keys), or None when the server
        gave none or the request failed. It never errbacks: a failed warm-up costs only the
        next reply's cache, and is logged as a warning.
    """
    started = time.monotonic()
    sent = []  # each step's prompt figures
    d = _send_in_steps(script, character, listeners, sent)

    def done(figures):
        stats = {"seconds": time.monotonic() - started, "prompt": figures}
        logger.log_info(f"AI cache warm-up {character.key}: {describe_warm_up(stats, len(sent))}")
        return figures

    def failed(failure):
        warm_up_lost(script)
        forget_ahead(script)
        if failure.check(defer.CancelledError):
            logger.log_info(f"AI cache warm-up {character.key}: cancelled after "
                            f"{time.monotonic() - started:.2f} s (a reply needed the server)")
            return None
        # the client masks keys in what it raises
        logger.log_warn(f"AI cache warm-up {character.key} failed: {failure.value}")
        return None

    return d.addCallback(done).addErrback(failed)


@defer.inlineCallbacks
def _send_in_steps(script, character, listeners, sent):
    """:func:`warm_reply_cache`'s requests, each step's prompt figures appended to ``sent``;
    fires with them as one request's (:func:`_series_figures`). The prompt is built inside the
    Deferred: an error while building it is a failed warm-up like any other, never a Deferred
    left pending for the reply that waits on it."""
    messages, shows, sizes = warmup_prompt(script, character, listeners)
    # a reply compares its prompt with these: it waits for the warm-up only when they are the
    # start of its own prompt (ai_contrib.npc.replies); a note fetched ahead is left out, so
    # that a reply on another subject waits too, rather than have the server evaluate its
    # whole prompt beside the warm-up in a slot that holds none of it
    ahead = script.ndb.ahead_note
    shared = messages[:-1] if ahead and messages[-1]["content"] == ahead["text"] else messages
    script.ndb.warming_messages = shared
    step = warm_up_step_tokens(script)
    if step is None and handover_available():
        # the memory server evaluates it and hands it over: the reply server stays free
        return (yield _hand_over(script, character, messages, sizes, sent))
    held = cached_messages(messages, script.ndb.server_prompt)
    # a system message after the first that shows no history message is a note
    notes = [i > 0 and line is None for i, line in enumerate(shows)]
    ends = warm_up_steps(sizes, [m["role"] for m in messages], held, step, notes) \
        or [len(messages)]
    script.ndb.warm_yield = False
    # what the server's cache holds next, and when: a reply's time is weighed against it
    # (ai_contrib.npc.deadline)
    warm_up_sent(script, messages, step)
    client = get_client()
    evaluated_to = 0  # leading messages the server has evaluated
    for end in ends:
        if evaluated_to and script.ndb.warm_yield:
            _stopped_at(script, messages, shows, evaluated_to)
            break
        # a long prompt on a slow server is work, not a dead server (npc.deadline)
        result = yield client.chat(messages[:end], model=script.cfg("llm_model"), max_tokens=1,
                                   purpose="warm",
                                   timeout=request_timeout(script, messages[:end], sizes[:end]))
        figures = result.prompt_stats()
        client.observe_prompt_speed(figures)
        sent.append(figures)
        evaluated_to = end
    else:
        script.ndb.held_head_id = None  # the whole prompt is warm: replies are whole again
    return _series_figures(sent)


@defer.inlineCallbacks
def _hand_over(script, character, messages, sizes, sent):
    """:func:`_send_in_steps` by the memory server (:func:`ai_contrib.llm.handover.
    warm_and_hand_over`): meanwhile a reply extends the prompt the reply server holds
    (``ndb.handing_over``, :mod:`ai_contrib.npc.held_prompt`) and never waits for it; once the
    cache is restored the reply server holds ``messages`` (``ndb.server_prompt``). One that
    fails leaves the reply server's cache as it was: it is logged and fires with None."""
    script.ndb.handing_over = True
    # memory-server work beside summaries, at a lower priority than replies: it may take as
    # long as one of them (AI_COMPACT_TIMEOUT), and the replies meanwhile do not wait for it
    timeout = max(request_timeout(script, messages, sizes), float(get_setting("COMPACT_TIMEOUT")))
    try:
        result, restored = yield warm_and_hand_over(messages, model=script.cfg("llm_model"),
                                                    timeout=timeout)
    except defer.CancelledError:
        raise
    except Exception as err:  # the client masks keys in what it raises
        logger.log_warn(f"AI cache warm-up {character.key} by the memory server failed: {err}")
        return None
    finally:
        script.ndb.handing_over = False
    script.ndb.server_prompt = messages
    script.ndb.held_head_id = None
    sent.append(result.prompt_stats())
    logger.log_info(f"AI cache warm-up {character.key}: evaluated by the memory server, "
                    f"{restored} tokens handed to the reply server")
    return _series_figures(sent)


def _stopped_at(script, messages, shows, done):
    """A reply asked the warm-up to stop (``ndb.warm_yield``) once ``done`` leading
    ``messages`` were evaluated: the server holds those, the next reply may be built on them,
    and the rest is warmed when the NPC is idle again."""
    head = held_head([m.get("id") for m in script.history], {i for i in shows if i},
                     {i for i in shows[:done] if i})
    warm_up_stopped(script, messages[:done], head)
    script.ndb.cached_head = ()


def _series_figures(steps):
    """The prompt figures of a warm-up's steps as one request's: the last step's prompt
    tokens, the tokens evaluated, generated and the milliseconds summed, the rest reused; None
    when a step reported none."""
    if not steps or any(figures is None for figures in steps):
        return None
    evaluated = sum(figures["evaluated_tokens"] for figures in steps)
    prompt = steps[-1]["prompt_tokens"]

    def total(key):
        values = [figures.get(key) for figures in steps]
        return None if any(v is None for v in values) else sum(values)

    return {"prompt_tokens": prompt, "cached_tokens": max(0, prompt - evaluated),
            "evaluated_tokens": evaluated, "generated_tokens": total("generated_tokens"),
            "prompt_ms": total("prompt_ms"), "generation_ms": total("generation_ms")}


def describe_warm_up(stats, steps) -> str:
    """The log line of a warm-up of ``steps`` requests: :func:`~ai_contrib.npc.replies.
    describe_reply`'s, with ``" in 6 steps"`` after the seconds when there were several
    (``"9.80 s in 6 steps, prompt 1132 tokens, 140 reused (12%), 6 generated"``)."""
    text = describe_reply(stats)
    if steps <= 1:
        return text
    seconds, _, rest = text.partition(",")
    return f"{seconds} in {steps} steps," + rest if rest else f"{seconds} in {steps} steps"
