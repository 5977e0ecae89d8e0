"""
The NPC's token budgets, as a handler of its ``AssistantScript`` (``script.budgeting``): the
effective history budget, the recall notes' allowance, how much of the budget the runtime
history uses, and the discovery of the model's context window that the budget is cut to
(``docs/design.md``, "The budget fits the model").

Reading a budget never starts a request: :meth:`BudgetHandler.info` reads the window the LLM
client already knows. :meth:`BudgetHandler.discover_window` is the one call that asks the model
server, in the background; the tick calls it (:mod:`ai_contrib.npc.ticking`), so the budget follows
the server's window from the first tick after it answers.

The handler holds nothing of its own beyond the caches ``ndb`` held before:
``ndb.system_tokens`` (``(persona, tokens)`` of the system prompt) and ``ndb.window_asked``
(Unix seconds of this NPC's last discovery request).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..core.budget import HistoryBudget, effective_budget
from ..core.tokens import count_tokens
from ..settings import get_setting

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

#: seconds before the same NPC starts another discovery of an unknown context window
WINDOW_ASK_INTERVAL = 60


class BudgetHandler:
    """
    The NPC's token budgets (``script.budgeting``; ``docs/design.md``, "The budget fits the
    model"). Every reader is O(1) and starts no request.

    Args:
        script (AssistantScript): the NPC's script (``self.obj``).
    """

    def __init__(self, script):
        self.obj = script

    def discover_window(self) -> Deferred | None:
        """
        Start a request for the model's context window when the LLM client does not know it
        yet (:meth:`ai_contrib.llm.client.LLMClient.context_window`: ``GET /props``, else
        ``GET /v1/models``, in the background), at most once per :data:`WINDOW_ASK_INTERVAL`
        seconds for this NPC (``ndb.window_asked``). Until it answers, the configured budget
        applies. Never raises for a server that does not answer.

        Returns:
            Deferred | None: the discovery (fires with tokens or None, never errbacks), or None
            when the window is known or was asked for less than a minute ago.
        """
        from ..llm.client import get_client

        client = get_client()
        if getattr(client, "known_context_window", None) is not None:
            return None
        if not hasattr(client, "context_window"):
            return None
        ndb = self.obj.ndb
        if ndb.window_asked and time.time() - ndb.window_asked <= WINDOW_ASK_INTERVAL:
            return None
        ndb.window_asked = time.time()
        return client.context_window()

    def info(self) -> HistoryBudget:
        """
        The NPC's effective history budget and where it comes from
        (:func:`ai_contrib.core.budget.effective_budget`): ``max_context_tokens``, cut to the
        model's context window less the reply, the system prompt and the memory sections when
        the window is known to the LLM client, less what the history lends the recall notes
        (:meth:`lent`). Starts no request (see :meth:`discover_window`). O(1) in the history:
        the system prompt's tokens are cached per persona text.

        Returns:
            HistoryBudget: the budget and its parts, in tokens.
        """
        from ..llm.client import get_client
        from .world import world_reserve

        script = self.obj
        client = get_client()
        window = getattr(client, "known_context_window", None)
        memory = self.memory_budget() if script.cfg("memory_enabled") else 0
        return effective_budget(
            script.cfg("max_context_tokens"),
            window=window,
            reply_tokens=int(get_setting("LLM_MAX_REPLY_TOKENS")),
            system_tokens=self._system_tokens(),
            memory_tokens=memory,
            window_source=getattr(client, "context_window_source", None),
            world_tokens=world_reserve(script),
            lent_tokens=self.lent(),
        )

    def _system_tokens(self):
        """Tokens of the reply prompt's system text (persona and instructions), cached in
        ``ndb.system_tokens`` per persona text."""
        script = self.obj
        npc = script.obj
        persona = npc.db.persona if npc else ""
        cached = script.ndb.system_tokens
        if cached is None or cached[0] != persona:
            from ..core.prompts import REPLY_INSTRUCTIONS

            name = npc.key if npc else ""
            text = f"{persona or ''}\n\n{REPLY_INSTRUCTIONS.format(name=name)}"
            cached = (persona, count_tokens(text, script.cfg("llm_model")))
            script.ndb.system_tokens = cached
        return cached[1]

    def memory_budget(self) -> int:
        """
        Tokens the recall notes of a reply prompt may take
        (:func:`ai_contrib.core.budget.memory_budget`: ``memory_retrieval_token_budget``, at most
        a share of ``max_context_tokens``). O(1).
        """
        from ..core.budget import memory_budget

        script = self.obj
        return memory_budget(script.cfg("memory_retrieval_token_budget"),
                             script.cfg("max_context_tokens"))

    def lent(self) -> int:
        """
        Tokens the recall notes a prompt may show take beyond the memory budget, lent by the
        history (:func:`ai_contrib.core.recall_notes.notes_over_budget`; ``docs/design.md``,
        "Recall notes", "Room lent by the history"): the history's budget is that much smaller
        until compaction takes the notes' anchors. O(notes); loads nothing while the NPC has
        no notes.
        """
        from ..core.recall_notes import notes_over_budget

        script = self.obj
        notes = script.ndb.recall_notes
        if not notes:
            return 0
        return notes_over_budget(notes, script.runtime.ledger, self.memory_budget())

    def lendable(self) -> int:
        """
        Tokens the history could lend a question's note now, beside what it lent already
        (:func:`ai_contrib.core.recall_notes.lendable_tokens`, up to the emergency compaction
        threshold): the ``lent_tokens`` of :func:`ai_contrib.core.recall_notes.plan_recall`.
        """
        from ..core.recall_notes import lendable_tokens

        script = self.obj
        info = self.info()
        return info.lent + lendable_tokens(
            info.tokens, script.conversation.token_count(),
            script.cfg("compact_emergency_threshold"))

    def tokens(self) -> int:
        """The effective history budget in tokens (see :meth:`info`)."""
        return self.info().tokens

    def usage(self) -> float:
        """Fraction of the effective budget the runtime history uses (0.0 - ..., O(1))."""
        script = self.obj
        return script.conversation.token_count() / max(1, self.tokens())
