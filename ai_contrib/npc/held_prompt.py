"""
A reply on the prompt the reply server holds while the memory server warms the next one
(``docs/design.md``, "Warm-ups handed over").

After a compaction the NPC's next prompt starts otherwise, and its cache warm-up is evaluated
by the memory server (:mod:`ai_contrib.llm.handover`). Until it is handed over, a reply for the
listeners of the NPC's last prompt extends that prompt, which the reply server holds: the last
prompt as sent, then the history messages after the last one it showed (the NPC's reply, the
lines said since, the turn, with the notes anchored at them), rendered by the reply prompt's
own builder. So the reply evaluates only what is new, as between two compactions; it shows
the lines the compaction summarised as they were, which the listeners heard. It is used while
its history stays within the NPC's history budget and its notes within the memory budget; a
prompt for other listeners is built as any other (:mod:`ai_contrib.npc.deadline`).
"""

from __future__ import annotations

from typing import TypedDict

from evennia.utils import logger

from ..core.messages import ChatMessage
from ..core.tokens import PER_MESSAGE_OVERHEAD


class SentPrompt(TypedDict):
    """A reply prompt as it was sent (``ndb.sent_prompt``): its chat ``messages`` and, same
    order, the history id each shows (``ids``, None for the system message and notes) and their
    tokens (``sizes``); the receipt's ``parts`` and the audience check's ``sources``
    (:class:`~ai_contrib.npc.reply_prompt.ReplyPrompt`'s); the ``listeners`` it was built for
    (dbrefs) and whether action exchanges followed its turn (``acted``)."""

    messages: list[ChatMessage]
    ids: list
    sizes: list[int]
    parts: list[dict]
    sources: list[dict]
    listeners: frozenset
    acted: bool


def remember_sent(script, prompt, messages) -> None:
    """Note the reply prompt ``messages`` that ``prompt`` (a
    :class:`~ai_contrib.npc.reply_prompt.ReplyPrompt`, just built) sends now
    (``ndb.sent_prompt``, a :class:`SentPrompt`)."""
    script.ndb.sent_prompt = SentPrompt(
        messages=messages, ids=list(prompt.ids), sizes=list(prompt.sizes),
        parts=list(prompt.parts or ()), sources=list(prompt.sources or ()),
        listeners=frozenset(prompt.listeners), acted=bool(prompt.exchanges))


def held_reply(script, prompt, budget) -> list[ChatMessage] | None:
    """
    The reply prompt that extends the one the reply server holds, built with ``prompt``
    (a :class:`~ai_contrib.npc.reply_prompt.ReplyPrompt`, whose ``messages``, ``ids``,
    ``sizes``, ``parts`` and ``sources`` are then the whole prompt's), or None when there is
    none: no warm-up handed over under way (``ndb.handing_over``), the server's cache is not
    the NPC's last reply prompt (``ndb.server_prompt``), that prompt was for other listeners or
    ended with action exchanges, nothing was said since, or its history would exceed
    ``budget`` (tokens) or its notes the NPC's memory budget.
    """
    sent = script.ndb.sent_prompt
    if not script.ndb.handing_over or sent is None or sent["acted"] \
            or script.ndb.server_prompt is not sent["messages"] \
            or sent["listeners"] != frozenset(prompt.listeners):
        return None
    shown = [i for i in sent["ids"] if i is not None]
    history = script.history
    at = next((i for i, msg in enumerate(history) if shown and msg.get("id") == shown[-1]), None)
    if at is None or at + 1 >= len(history):
        return None
    # the builder's own rendering of the messages after it: its system message, then them
    tail = prompt(budget, (None, history[at + 1]["id"]))[1:]
    ids, sizes = sent["ids"] + prompt.ids[1:], sent["sizes"] + prompt.sizes[1:]
    # what the builder holds the summaries and history to (their time stamps included), and
    # the notes to theirs: each turn's new notes stay in the prompt held from then on
    lines = sum(size for size, shows in zip(sizes, ids) if shows is not None)
    notes = sum(sizes[1:]) - lines
    allowed = script.budgeting.memory_budget()
    if lines > budget or notes > allowed:
        logger.log_info(f"AI reply {script.obj.key}: the prompt the server holds would show "
                        f"{lines} tokens of history and {notes} of notes, over their budgets "
                        f"of {budget} and {allowed}: built anew")
        return None
    prompt.messages = sent["messages"] + tail
    prompt.ids, prompt.sizes = ids, sizes
    prompt.parts = sent["parts"] + _after_system(prompt.parts, prompt.sizes[0])
    prompt.sources = sent["sources"] + prompt.sources
    return prompt.messages


def _after_system(parts, system_size) -> list[dict]:
    """The receipt ``parts`` after the system message's, whose tokens are ``system_size``
    less the message overhead (:func:`ai_contrib.core.prompts.assemble_sized_reply_prompt`: the
    standing sections extend it)."""
    left, start = system_size - PER_MESSAGE_OVERHEAD, 0
    while start < len(parts) and left > 0:
        left -= parts[start]["tokens"]
        start += 1
    return parts[max(1, start):]
