"""
The reply prompt's one builder (``docs/design.md``, "Prompt structure" and "Warming the cache
after a compaction"): a turn's reply (:mod:`ai_contrib.npc.replies`) and the cache warm-up
(:mod:`ai_contrib.npc.warmup`) build their messages with :class:`ReplyPrompt`, so the warm-up is
the start of the next reply's prompt by construction, not by two builders kept in step.

The messages themselves are :func:`ai_contrib.core.prompts.assemble_sized_reply_prompt`'s; this
module chooses what goes in: the NPC's persona and history (or the window of it the prompt shows),
its history budget, the notes in their order, the standing sections and the listeners.
"""

from ..core.audience import heard_by
from ..core.prompts import assemble_sized_reply_prompt
from ..core.tokens import count_message_tokens

#: the order of notes anchored at the same line: memories, then the world, the scene last,
#: right before the lines being answered
NOTE_ORDER = {"memories": 0, "lore": 1, "pins": 2, "scene": 3}


def notes_in_order(recall_notes, world_notes) -> list:
    """Recall notes and world notes as one list for the prompt, by anchor in the order given and
    :data:`NOTE_ORDER` within an anchor."""
    merged = list(recall_notes) + list(world_notes)
    first_seen = {}
    for i, note in enumerate(merged):
        first_seen.setdefault(note["anchor"], i)
    return sorted(merged, key=lambda n: (first_seen[n["anchor"]],
                                         NOTE_ORDER.get(n.get("part") or "memories", 0)))


def window_messages(history, window) -> list:
    """
    The messages of ``history`` a prompt window shows
    (:func:`ai_contrib.npc.replies.prompt_window`): all of them for None, else the head up to
    and including ``window[0]`` and the tail from ``window[1]``. A window whose messages are no
    longer there (a compaction landed meanwhile) shows all.

    Returns:
        list[dict]: the messages, oldest first.
    """
    if window is None:
        return history
    head_last, tail_first = window
    index = {msg.get("id"): i for i, msg in enumerate(history)}
    tail = index.get(tail_first)
    head = index.get(head_last, -1) + 1 if head_last is not None else 0
    if tail is None or (head_last is not None and head == 0) or head > tail:
        return history
    return history[:head] + history[tail:]


class ReplyPrompt:
    """
    The NPC's reply prompt for ``listeners``, built for a history budget and window: called as
    ``prompt(budget, window=None)`` (:func:`ai_contrib.npc.replies._ask` asks again with less),
    it returns the chat messages and keeps what the last build was: ``messages`` (the
    exchanges included), ``parts`` (the receipt's), ``sizes`` (the tokens of each message, from
    the counts the prompt was built with: :func:`ai_contrib.npc.deadline.fit_reply` weighs it
    without counting it again), ``ids`` (the history id each message shows, None for the system
    message, notes and exchanges) and ``sources`` (what the prompt was built from, for
    :func:`ai_contrib.core.audience.may_hear`); all None before the first build. ``exchanges``:
    the chat messages of this turn's actions so far (:func:`ai_contrib.npc.actions.ask_acting`
    extends it), sent after the built prompt; ``acted``: the action messages stored this turn,
    whose audience counts like ``sources``'; ``cut``, what was left out for time
    (:func:`ai_contrib.npc.deadline.fit_reply`). :meth:`opening` is the same prompt with no
    turn, what the cache warm-up sends.

    Args:
        script (AssistantScript): the NPC's script (its history, budgets and token counts).
        character: the NPC (its ``db.persona`` and ``key``).
        turn_ids (list[str]): ids of the lines being answered (kept whatever the budget);
            empty for :meth:`opening`.
        listeners (dict | iterable[str]): ``{dbref: name}`` or dbrefs of who will hear.
        notes (list[dict]): the notes to show (:func:`notes_in_order`).
        standing (list[dict]): the standing sections of the system message.
    """

    def __init__(self, script, character, turn_ids, listeners, notes, standing):
        self.script, self.character = script, character
        self.turn_ids, self.listeners = turn_ids, listeners
        self.notes, self.standing = notes, standing
        self.messages = self.parts = self.sizes = self.sources = self.cut = self.ids = None
        self.exchanges, self.acted = [], []
        self._exchange_sizes = []

    def __call__(self, budget, window=None) -> list:
        history = window_messages(self.script.history, window)
        # the NPC's history budget now, at build time, is what the history may take at most,
        # whatever memory work is doing (a hung summary, an eviction pending)
        messages, parts, sizes, ids = assemble_sized_reply_prompt(
            self.character.db.persona, self.character.key, history,
            self.script.runtime.token_counts(history), budget, notes=self.notes,
            listeners=list(self.listeners), keep_ids=self.turn_ids, standing=self.standing,
            max_tokens=min(budget, self.script.budgeting.tokens()) if window is None
            else self.script.budgeting.tokens())
        # what the prompt was built from, for the check of who may hear the reply when it is
        # spoken (may_hear): what the listeners could all hear, the turn's lines, the notes
        keep = set(self.turn_ids)
        sources = [m for m in history if m.get("id") in keep or heard_by(m, self.listeners)]
        self.messages, self.parts = messages + self.exchanges, parts
        self.ids = ids + [None] * len(self.exchanges)
        self.sizes = sizes + self._exchanges_sized()
        self.sources = sources + list(self.notes)
        return self.messages

    def opening(self) -> list:
        """
        The messages the NPC's next reply prompt starts with: the whole history within the
        NPC's budget (``script.budget()``), no window, and no assistant message after the first
        of a run at the end.

        With no turn the prompt may end with the NPC's replies; llama.cpp refuses two or more
        assistant messages at the end (HTTP 400), and takes one as a reply to continue: the
        opening stops after the first of them, still the start of the next reply's prompt.

        Returns:
            list[dict]: ``{"role", "content"}`` chat messages.
        """
        messages = list(self(self.script.budgeting.tokens()))
        while len(messages) >= 2 and messages[-1]["role"] == "assistant" \
                and messages[-2]["role"] == "assistant":
            messages.pop()
        return messages

    def _exchanges_sized(self):
        """The tokens of each of :attr:`exchanges`, each counted once (they only grow)."""
        del self._exchange_sizes[len(self.exchanges):]  # a loop asked again from the start
        model = self.script.cfg("llm_model")
        for message in self.exchanges[len(self._exchange_sizes):]:
            self._exchange_sizes.append(count_message_tokens(message, model))
        return list(self._exchange_sizes)
