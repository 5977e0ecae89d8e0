"""
A reply prompt the server can evaluate in time, and the time its request may take
(``docs/design.md``, "Time limits that follow the work").

Before a reply is asked for, the tokens the server must evaluate (what follows the prefix of the
NPC's last prompt, which its cache holds: ``ndb.server_prompt``) are weighed against the
server's measured prompt speed. When they would take longer than ``AI_REPLY_EVALUATION_SECONDS``
the prompt is built from less: first with less of the memories it would show for the first
time (the largest new note halved or left out, one step at a time), then in the short window
the server holds with as many of them as fit, then without them in a shorter history window,
the newest lines that fit, whose start is kept for the next replies (``ndb.short_start_id``)
so that the server's cache covers it again. After a cache warm-up sent in steps stopped for
the reply, those windows keep the leading messages the warm-up left in the server's cache
(``ndb.held_head_id``): the summaries and oldest lines cost nothing to show. The request's time
limit is ``AI_LLM_TIMEOUT`` plus twice the evaluation of the whole prompt, so a slow server
doing the work is waited for, and only one that answers nothing gets the fallback line. After a
reply built from less, the prompt's start the server holds is the short window's
(``ndb.cached_head``), so the whole prompt is warmed once the NPC is idle
(:mod:`ai_contrib.npc.warmup`) and the next replies are whole again. A reply prompt is weighed
by the token counts it was built with (``prompt.sizes``): nothing of it is counted again here,
however many windows are tried and action rounds asked.
"""

from __future__ import annotations

import time

from evennia.utils import logger

from ..core.budget import note_allowance
from ..core.deadline import (
    after_step,
    cached_messages,
    evaluation_tokens,
    grown_head,
    reply_timeout,
    window_start,
)
from ..core.messages import ChatMessage
from ..core.tokens import count_conversation_tokens
from ..llm.client import get_client
from ..settings import auto_or_bool, get_setting
from .held_prompt import held_reply, remember_sent


def warmup_enabled() -> bool:
    """
    Whether compactions are followed by a warm-up: ``AI_PROMPT_CACHE_WARMUP`` True or False, or
    ``"auto"`` (the default): with the embedded model only, since a hosted API bills a
    warm-up's prompt tokens like any request's.

    Raises:
        ValueError: a bad value (:func:`ai_contrib.settings.auto_or_bool`).
    """
    enabled = auto_or_bool("PROMPT_CACHE_WARMUP")
    if enabled == "auto":
        return bool(getattr(get_client(), "embedded", False))
    return enabled


#: the clock warm-ups are timed by (``time.monotonic``)
_monotonic = time.monotonic

#: how many times a shorter window is tried before the shortest one (the turn alone) is taken
MAX_WINDOW_TRIES = 6


def fit_reply(script, character, prompt, shown) -> tuple[list[ChatMessage], float]:
    """
    The reply prompt to send and its time limit. Called for each request of a turn (each
    action round, the ask after a context overflow): what an earlier one left out for time
    stays counted in ``prompt.cut``.

    Args:
        script (AssistantScript): the NPC's script.
        character: the NPC (for the log line).
        prompt: the turn's prompt builder (``ai_contrib.npc.reply_prompt.ReplyPrompt``):
            called as ``prompt(budget, window)`` it returns chat messages and sets ``sizes`` (their
            tokens, nothing counted here); its ``notes`` (each with ``"new"``) and
            ``turn_ids`` are read, ``notes`` may be cut, and ``cut`` is set to what was left
            out (``{"new_notes": int, "history_from": str | None}``) or None.
        shown (tuple): ``(window, budget)`` of ``ai_contrib.npc.replies.prompt_window``.

    Returns:
        tuple: ``(messages, timeout)``: chat messages and seconds (``AI_LLM_TIMEOUT`` when the
        server's speed is unknown).
    """
    window, budget = shown
    speed = get_client().prompt_speed
    allowance = note_allowance(script.cfg("reply_evaluation_seconds"), speed)
    previous = script.ndb.server_prompt
    # new notes an earlier request of the turn left out stay out: the receipt counts them
    earlier = prompt.cut["new_notes"] if prompt.cut else 0
    messages = _on_held_prompt(script, character, prompt, budget, previous, allowance)
    if messages is not None:
        needed = None
    else:
        messages = prompt(budget, window)
        needed = None if allowance is None \
            else evaluation_tokens(messages, previous, prompt.sizes)
    if needed is None or needed <= allowance:
        script.ndb.short_start_id = script.ndb.held_head_id = None
        prompt.cut = {"new_notes": earlier, "history_from": None} if earlier else None
    else:
        messages = _built_from_less(script, prompt, shown, previous, allowance)
        prompt.cut["new_notes"] += earlier
        logger.log_info(
            f"AI reply {character.key}: {needed} tokens to evaluate at {speed:.0f} tokens/s "
            f"exceed {allowance} ({script.cfg('reply_evaluation_seconds'):g} s): built from "
            f"less ({prompt.cut['new_notes']} new note(s) left out, history "
            f"{'from ' + prompt.cut['history_from'] if prompt.cut['history_from'] else 'whole'})"
            f", {evaluation_tokens(messages, previous, prompt.sizes)} to evaluate")
        if prompt.cut["history_from"]:
            # the server now holds a prompt that starts elsewhere: once the NPC is idle the
            # whole prompt is warmed (npc.ticking.warm_if_due), and the next replies are whole
            script.ndb.cached_head = (prompt.cut["history_from"],)
    script.ndb.server_prompt = messages
    remember_sent(script, prompt, messages)
    return messages, request_timeout(script, messages, prompt.sizes)


def _on_held_prompt(script, character, prompt, budget, previous, allowance):
    """While the memory server warms the next prompt, the reply prompt that extends the one the
    reply server holds (:func:`ai_contrib.npc.held_prompt.held_reply`), or None: none, or it
    would evaluate more than ``allowance`` tokens (then it is built as any)."""
    if not script.ndb.handing_over:
        return None
    messages = held_reply(script, prompt, budget)
    if messages is None or (allowance is not None and
                            evaluation_tokens(messages, previous, prompt.sizes) > allowance):
        return None
    logger.log_info(f"AI reply {character.key}: on the prompt the server holds while the next "
                    f"is warmed ({len(messages)} messages)")
    return messages


def request_timeout(script, messages, sizes=None) -> float:
    """
    Seconds a request of the NPC's prompt ``messages`` (a reply's, a cache warm-up's) may take:
    ``AI_LLM_TIMEOUT`` plus twice the evaluation of all of them at the server's prompt speed
    (:func:`ai_contrib.core.deadline.reply_timeout`); ``AI_LLM_TIMEOUT`` when the speed is
    unknown.

    Args:
        sizes (list[int], optional): the tokens of each message, as the prompt was built with
            them; None: counted (:func:`ai_contrib.core.tokens.count_conversation_tokens`).
    """
    base = float(get_setting("LLM_TIMEOUT"))
    speed = get_client().prompt_speed
    if not speed:
        return base  # nothing to weigh the prompt against: not counted
    tokens = sum(sizes) if sizes is not None \
        else count_conversation_tokens(messages, script.cfg("llm_model"))
    return reply_timeout(tokens, speed, base)


def warm_up_step_tokens(script) -> int | None:
    """
    Prompt tokens one request of a cache warm-up may add to the one before:
    ``AI_PROMPT_CACHE_WARMUP_STEP_SECONDS`` at the server's prompt speed, or None (one request)
    when the speed is unknown or the setting is None.
    """
    seconds = script.cfg("prompt_cache_warmup_step_seconds")
    speed = get_client().prompt_speed
    if not seconds or not speed:
        return None
    return max(1, int(float(seconds) * speed))


def warm_up_sent(script, messages, step=None) -> None:
    """
    Note a cache warm-up of ``messages`` sent now (:mod:`ai_contrib.npc.warmup`): the server
    holds them next (``ndb.server_prompt``), and evaluates ``ndb.warming_tokens`` of them (what
    it does not hold yet; None when the server's speed is unknown) from ``ndb.warming_since``
    (``time.monotonic()`` seconds), in requests of ``step`` tokens at most
    (``ndb.warming_step``; None: one request).
    """
    script.ndb.warming_tokens = None
    script.ndb.warming_since = _monotonic()
    script.ndb.warming_step = step
    if get_client().prompt_speed:
        held = cached_messages(messages, script.ndb.server_prompt)
        script.ndb.warming_tokens = count_conversation_tokens(messages[held:],
                                                              script.cfg("llm_model"))
    script.ndb.server_prompt = messages


def warm_up_stopped(script, held, head_id) -> None:
    """
    A warm-up sent in steps stopped for a reply: the server holds ``held`` (its leading
    messages) and a reply may be built on them up to the history message ``head_id``
    (``ndb.held_head_id``; :func:`fit_reply`).
    """
    script.ndb.server_prompt = held
    script.ndb.held_head_id = head_id
    # built for the warm-up's listeners: a newcomer's prompt shows other lines
    script.ndb.held_for = script.ndb.warming_for
    script.ndb.warming_tokens = None


def warm_up_lost(script) -> None:
    """A warm-up failed or was cancelled part way: what the server holds is not known."""
    script.ndb.server_prompt = script.ndb.warming_tokens = script.ndb.held_head_id = None


def warm_up_spared(script) -> float | None:
    """
    Seconds of the server's work a cancel of the warm-up under way would spare: its evaluation
    after the step the server is in (:func:`ai_contrib.core.deadline.after_step`, with
    ``get_client().evaluation_step``) at the measured prompt speed. None when that cannot be
    told (the speed or the warm-up's tokens unknown).
    """
    client = get_client()
    left = warm_up_left(script)
    if left is None:
        return None
    tokens = script.ndb.warming_tokens
    # a warm-up in steps stops after the request under way, however the server steps
    step = script.ndb.warming_step or client.evaluation_step
    return after_step(tokens, tokens - left, step) / client.prompt_speed


def warm_up_left(script) -> float | None:
    """
    Tokens the warm-up under way has left to evaluate (``ndb.warming_tokens`` less what the
    measured prompt speed evaluated since ``ndb.warming_since``; at least 0), or None when
    that cannot be told (no warm-up's tokens, no speed).
    """
    speed, since, tokens = get_client().prompt_speed, script.ndb.warming_since, \
        script.ndb.warming_tokens
    if not speed or since is None or tokens is None:
        return None
    return max(0.0, tokens - (_monotonic() - since) * speed)


def warm_up_stoppable(script) -> bool:
    """
    Whether cancelling the warm-up under way would free the server before it ends: it has
    evaluation left after the step the server is in (:func:`warm_up_spared`); True when that
    cannot be told.
    """
    spared = warm_up_spared(script)
    return spared is None or spared > 0


def worth_waiting(script) -> bool:
    """
    Whether a reply whose prompt starts with the warm-up under way may wait for it: what a
    cancel would spare the server (:func:`warm_up_spared`: the rest of its evaluation after the
    step under way, which ends either way; for a warm-up sent in steps, the requests after the
    one under way) is within ``AI_REPLY_EVALUATION_SECONDS`` (always, when either is unknown).
    Otherwise the reply goes on from the prompt it can have in time, and the warm-up is tried
    again when the NPC is idle.
    """
    # a reply built on what a warm-up in steps left evaluates newest lines that the next step
    # evaluates again: with players who speak without pause the warm-up moves one step a
    # reply, so the rest of a short one is waited for (make bench-defaults)
    seconds = script.cfg("reply_evaluation_seconds")
    spared = warm_up_spared(script)
    if seconds is None or spared is None:
        return True
    return spared <= float(seconds)


def _fits(prompt, messages, previous, allowance):
    return evaluation_tokens(messages, previous, prompt.sizes) <= allowance


def _built_from_less(script, prompt, shown, previous, allowance):
    """The turn's prompt with fewer new notes (:func:`_fewer_notes`); else the short window
    the server holds (the last one kept), with as many of them as fit; else, after a warm-up
    stopped part way, the leading messages it left in the server's cache and the newest lines,
    with as many of them as fit; else a shorter window without them, until what the server
    must evaluate fits ``allowance`` (or only the turn is left). Sets ``prompt.cut``; the new
    notes left out leave the NPC's notes."""
    window, budget = shown
    notes = list(prompt.notes)
    messages = _fewer_notes(prompt, budget, window, notes, previous, allowance)
    history_from = None
    if messages is None:
        history = script.history
        ids = [m.get("id") for m in history]
        turn = set(prompt.turn_ids)
        last_start = next((i for i, line in enumerate(ids) if line in turn), len(ids) - 1)
        head = _held_head(script, ids, last_start, prompt.listeners)
        first = ids.index(head) + 1 if head is not None else 0  # where a window's tail may start
        kept = script.ndb.short_start_id
        if head is None and kept in ids and ids.index(kept) <= last_start:
            # the start of the last short window: the server's cache holds what follows it,
            # so the new notes (what a question about the past needs) may still fit after it
            messages = _fewer_notes(prompt, budget, (head, kept), notes, previous, allowance)
            history_from = kept
        if messages is None and head is not None:
            # the head a stopped warm-up left costs nothing: the newest lines after it, about
            # a warm-up step of them, with the new notes where they fit. The next warm-up step
            # moves the head on and the server evaluates these lines again, so a longer tail
            # costs every reply until the warm-up ends, which would then never catch up
            counts = script.runtime.token_counts(history)
            start = max(first, window_start(counts, _tail_tokens(script, allowance),
                                            last_start))
            # what the allowance leaves goes to the lines after the head, which the server
            # then holds for the next reply: the head moves on at every reply. New notes keep
            # half of it at most; they are trimmed to fit, where the head cannot be
            spare = allowance - sum(counts[start:])
            spare -= min(spare // 2, sum(int(note.get("tokens") or 0) for note in notes
                                         if note.get("new")))
            grown = ids[grown_head(counts, first - 1, start, max(0, spare))]
            messages = _fewer_notes(prompt, budget, (grown, ids[start]), notes, previous,
                                    allowance)
            history_from = script.ndb.short_start_id = ids[start]
            if messages is not None:
                script.ndb.held_head_id = grown  # what the server holds after this reply
        if messages is None:
            prompt.notes = [note for note in notes if not note.get("new")]
            history_from, messages = _shorter_window(script, prompt, budget, ids,
                                                     (head, first, last_start), previous,
                                                     allowance)
            script.ndb.short_start_id = history_from
    else:
        script.ndb.short_start_id = None
    prompt.cut = {"new_notes": len(notes) - len(prompt.notes), "history_from": history_from}
    _keep_trimmed(script, prompt.notes)
    _forget_unshown(script, notes, prompt.notes)
    return messages


def _tail_tokens(script, allowance):
    """Tokens of history a reply built on a held head shows after it: a warm-up step
    (:func:`warm_up_step_tokens`), within ``allowance``."""
    step = warm_up_step_tokens(script)
    return allowance if step is None else min(allowance, step)


def _held_head(script, ids, last_start, listeners):
    """The id of the last history message a warm-up stopped part way left in the server's
    cache (``ndb.held_head_id``), when it is still in the history (``ids``) before the turn's
    first line (index ``last_start``) and the prompt is for the warm-up's ``listeners``
    (``ndb.held_for``, dbrefs); else None."""
    head = script.ndb.held_head_id
    if head is None or head not in ids or ids.index(head) >= last_start:
        return None
    held_for = script.ndb.held_for
    if held_for is not None and frozenset(listeners) != held_for:
        return None
    return head


def _fewer_notes(prompt, budget, window, notes, previous, allowance):
    """The prompt of ``window`` with ``notes``, the largest new note made smaller one step at a
    time (:func:`_trimmed`: a recall note keeps its best half; a note without items is left
    out: a large world note need not cost a question its memories), until what the server must
    evaluate fits ``allowance``: the messages, ``prompt.notes`` set to those shown; None when
    it does not fit even with no new note."""
    trial = list(notes)
    while True:
        prompt.notes = trial
        messages = prompt(budget, window)
        if _fits(prompt, messages, previous, allowance):
            return messages
        # a note fetched ahead that the server holds costs nothing: trimming it would add
        held = {m.get("content") for m in previous or ()}
        new = [note for note in trial if note.get("new")
               and not (note.get("fetched") and note["text"] in held)]
        if not new:
            return None
        largest = max(new, key=lambda note: int(note.get("tokens") or 0))
        smaller = _trimmed(largest)
        if smaller is None:
            trial = [note for note in trial if note is not largest]
        else:
            trial = [smaller if note is largest else note for note in trial]


def _trimmed(note):
    """A new recall note with the better half of its items (best first), rendered again and
    marked with the text it replaces (``"trimmed_from"``); None for a note of fewer than two
    items or one without items (a world note), or without the memory package."""
    items = note.get("items") or []
    if len(items) < 2:
        return None
    try:
        from ..memory.retrieval import render_note
    except ImportError:
        return None
    from ..core.tokens import count_tokens

    kept = items[:len(items) // 2]
    text = render_note(kept)
    return dict(note, items=kept, text=text, tokens=count_tokens(text),
                trimmed_from=note.get("trimmed_from", note["text"]))


def _shorter_window(script, prompt, budget, ids, bounds, previous, allowance):
    """The newest history window that fits ``allowance``, tried from where the allowance
    says and one message later at a time, at most :data:`MAX_WINDOW_TRIES` times, then the
    turn alone: ``(id of its first message, messages)``. ``bounds`` is ``(head, first,
    last_start)``: the id of the last leading history message the window keeps (None: none),
    the first index its newest lines may start at, the last (the turn's first line)."""
    head, first, last_start = bounds
    counts = script.runtime.token_counts(script.history)
    # less the system message and its standing sections, unless the server holds a head
    tail = allowance - prompt.sizes[0] if head is None else _tail_tokens(script, allowance)
    start = max(first, window_start(counts, max(0, tail), last_start))
    for _ in range(MAX_WINDOW_TRIES):
        messages = prompt(budget, (head, ids[start]))
        if start >= last_start or _fits(prompt, messages, previous, allowance):
            break
        start += 1
    else:
        start = last_start
        messages = prompt(budget, (head, ids[start]))
    return ids[start], messages


def _keep_trimmed(script, shown):
    """Put the trimmed notes the prompt shows (:func:`_trimmed`) in ``ndb.recall_notes`` in
    place of the notes they were made from: the next turn shows them as the server holds
    them."""
    trims = {(note["anchor"], note["trimmed_from"]): note for note in shown
             if note.get("trimmed_from") is not None}
    if not trims:
        return
    kept = []
    for note in script.ndb.recall_notes or []:
        trim = trims.get((note.get("anchor"), note.get("text")))
        kept.append(note if trim is None else {key: value for key, value in trim.items()
                                               if key not in ("new", "trimmed_from")})
    script.ndb.recall_notes = kept


def _forget_unshown(script, notes, shown):
    """Take the new notes a prompt left out of ``ndb.recall_notes`` and ``ndb.world_notes``:
    the next turn must not take them for notes the server's cache holds."""
    left_out = {(note.get("anchor"), note.get("text")) for note in notes if note not in shown}
    if not left_out:
        return
    ndb = script.ndb
    for name in ("recall_notes", "world_notes"):
        kept = getattr(ndb, name)
        if kept:
            setattr(ndb, name, [note for note in kept
                                if (note.get("anchor"), note.get("text")) not in left_out])
