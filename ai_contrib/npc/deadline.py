"""
A reply prompt the server can evaluate in time, and the time its request may take
(``docs/design.md``, "Time limits that follow the work").

Before a reply is asked for, the tokens the server must evaluate (what follows the prefix of the
NPC's last prompt, which its cache holds: ``ndb.server_prompt``) are weighed against the
server's measured prompt speed. When they would take longer than ``AI_REPLY_EVALUATION_SECONDS``
the prompt is built from less: first without the memories it would show for the first time,
then with a shorter history window, the newest lines that fit, whose start is kept for the next
replies (``ndb.short_start_id``) so that the server's cache covers it again. The request's time
limit is ``AI_LLM_TIMEOUT`` plus twice the evaluation of the whole prompt, so a slow server
doing the work is waited for, and only one that answers nothing gets the fallback line. After a
reply built from less, the prompt's start the server holds is the short window's
(``ndb.cached_head``), so the whole prompt is warmed once the NPC is idle
(:mod:`ai_contrib.npc.warmup`) and the next replies are whole again.
"""

import time

from evennia.utils import logger

from ..core.budget import note_allowance
from ..core.deadline import evaluation_tokens, prompt_tokens, reply_timeout, window_start
from ..core.tokens import count_tokens
from ..llm.client import get_client
from ..settings import get_setting

#: how many times a shorter window is tried before the shortest one (the turn alone) is taken
MAX_WINDOW_TRIES = 6


def fit_reply(script, character, prompt, shown):
    """
    The reply prompt to send and its time limit.

    Args:
        script (AssistantScript): the NPC's script.
        character: the NPC (for the log line).
        prompt: the turn's prompt builder (``ai_contrib.npc.replies._TurnPrompt``): called as
            ``prompt(budget, window)`` it returns chat messages; its ``notes`` (each with
            ``"new"``) and ``turn_ids`` are read, ``notes`` may be cut, and ``cut`` is set to
            what was left out (``{"new_notes": int, "history_from": str | None}``) or None.
        shown (tuple): ``(window, budget)`` of ``ai_contrib.npc.replies.prompt_window``.

    Returns:
        tuple: ``(messages, timeout)``: chat messages and seconds (``AI_LLM_TIMEOUT`` when the
        server's speed is unknown).
    """
    window, budget = shown
    speed = get_client().prompt_speed
    allowance = note_allowance(script.cfg("reply_evaluation_seconds"), speed)
    model = script.cfg("llm_model")

    def count(text):
        return count_tokens(text, model)

    previous = script.ndb.server_prompt
    messages = prompt(budget, window)
    prompt.cut = None
    needed = None if allowance is None else evaluation_tokens(messages, previous, count)
    if needed is None or needed <= allowance:
        script.ndb.short_start_id = None
    else:
        messages = _built_from_less(script, prompt, shown, previous, allowance, count)
        logger.log_info(
            f"AI reply {character.key}: {needed} tokens to evaluate at {speed:.0f} tokens/s "
            f"exceed {allowance} ({script.cfg('reply_evaluation_seconds'):g} s): built from "
            f"less ({prompt.cut['new_notes']} new note(s) left out, history "
            f"{'from ' + prompt.cut['history_from'] if prompt.cut['history_from'] else 'whole'})"
            f", {evaluation_tokens(messages, previous, count)} to evaluate")
        if prompt.cut["history_from"]:
            # the server now holds a prompt that starts elsewhere: once the NPC is idle the
            # whole prompt is warmed (npc.ticking.warm_if_due), and the next replies are whole
            script.ndb.cached_head = (prompt.cut["history_from"],)
    script.ndb.server_prompt = messages
    return messages, request_timeout(script, messages)


def request_timeout(script, messages) -> float:
    """
    Seconds a request of the NPC's prompt ``messages`` (a reply's, a cache warm-up's) may take:
    ``AI_LLM_TIMEOUT`` plus twice the evaluation of all of them at the server's prompt speed
    (:func:`ai_contrib.core.deadline.reply_timeout`); ``AI_LLM_TIMEOUT`` when the speed is
    unknown.
    """
    base = float(get_setting("LLM_TIMEOUT"))
    speed = get_client().prompt_speed
    if not speed:
        return base  # nothing to weigh the prompt against: not counted
    model = script.cfg("llm_model")
    return reply_timeout(prompt_tokens(messages, lambda text: count_tokens(text, model)),
                         speed, base)


def warm_up_sent(script, messages):
    """
    Note a cache warm-up of ``messages`` sent now (:mod:`ai_contrib.npc.warmup`): the server
    holds them next (``ndb.server_prompt``), and its evaluation of what it does not hold yet is
    expected to end at ``ndb.warming_until`` (``time.monotonic()`` seconds; None when the
    server's speed is unknown).
    """
    speed = get_client().prompt_speed
    script.ndb.warming_until = None
    if speed:
        model = script.cfg("llm_model")
        tokens = evaluation_tokens(messages, script.ndb.server_prompt,
                                   lambda text: count_tokens(text, model))
        script.ndb.warming_until = time.monotonic() + tokens / speed
    script.ndb.server_prompt = messages


def warm_up_lost(script):
    """A warm-up failed or was cancelled part way: what the server holds is not known."""
    script.ndb.server_prompt = script.ndb.warming_until = None


def worth_waiting(script) -> bool:
    """
    Whether a reply whose prompt starts with the warm-up under way may wait for it: the rest of
    its evaluation is expected within ``AI_REPLY_EVALUATION_SECONDS`` (always, when either is
    unknown). Otherwise the reply goes on from the prompt it can have in time, and the warm-up
    is tried again when the NPC is idle.
    """
    seconds = script.cfg("reply_evaluation_seconds")
    until = script.ndb.warming_until
    if seconds is None or until is None:
        return True
    return until - time.monotonic() <= float(seconds)


def _fits(messages, previous, allowance, count):
    return evaluation_tokens(messages, previous, count) <= allowance


def _built_from_less(script, prompt, shown, previous, allowance, count):
    """The turn's prompt without its new notes, then with a shorter window, until what the
    server must evaluate fits ``allowance`` (or only the turn is left). Sets ``prompt.cut``."""
    window, budget = shown
    notes = list(prompt.notes)
    prompt.notes = [note for note in notes if not note.get("new")]
    prompt.cut = {"new_notes": len(notes) - len(prompt.notes), "history_from": None}
    _forget_unshown(script, notes, prompt.notes)
    messages = prompt(budget, window)
    if _fits(messages, previous, allowance, count):
        script.ndb.short_start_id = None
        return messages
    history = script.history
    ids = [m.get("id") for m in history]
    turn = set(prompt.turn_ids)
    last_start = next((i for i, line in enumerate(ids) if line in turn), len(ids) - 1)
    kept = script.ndb.short_start_id
    if kept in ids and ids.index(kept) <= last_start:
        # the start of the last short window: the server's cache holds what follows it
        messages = prompt(budget, (None, kept))
        if _fits(messages, previous, allowance, count):
            prompt.cut["history_from"] = kept
            return messages
    counts = script.runtime.token_counts(history)
    system = prompt_tokens(messages[:1], count)
    start = window_start(counts, max(0, allowance - system), last_start)
    for _ in range(MAX_WINDOW_TRIES):
        messages = prompt(budget, (None, ids[start]))
        if start >= last_start or _fits(messages, previous, allowance, count):
            break
        start += 1
    else:
        start = last_start
        messages = prompt(budget, (None, ids[start]))
    script.ndb.short_start_id = prompt.cut["history_from"] = ids[start]
    return messages


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
