"""
The effective token budget of an NPC's conversation history: never more than its model can take.

The history is only one part of a reply prompt. The model's context window must also hold the
system prompt (persona and standing instructions), the retrieved-memory sections and the reply the
model generates, plus the chat template's framing. So the history may use at most the window minus
those, and never more than the configured ``max_context_tokens`` (``docs/design.md``, "The budget
fits the model"). With the embedded model (4,096 tokens a request) and the default
100,000-token setting, the window decides; with a hosted 128k model, the setting does.

Pure functions: the shell (:meth:`ai_contrib.typeclasses.AssistantScript.budget_info`) supplies
the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

#: tokens kept free for the chat template's framing of the system and memory messages and the
#: generation prompt (a few tokens per message; llama.cpp's ChatML adds 3-5 each)
TEMPLATE_HEADROOM_TOKENS = 64
#: the smallest history budget an NPC can work with: below it the window is misconfigured, and
#: this floor keeps compaction thresholds meaningful rather than zero
MIN_HISTORY_BUDGET = 256
#: share of ``max_context_tokens`` the recall notes may take at most: an NPC configured with a
#: small budget keeps most of it for its own conversation
MEMORY_SHARE_CAP = 0.4


def memory_budget(memory_tokens, configured) -> int:
    """
    Tokens the retrieved-memory notes of a reply prompt may take: ``memory_tokens``
    (``AI_MEMORY_RETRIEVAL_TOKEN_BUDGET``), at most :data:`MEMORY_SHARE_CAP` of ``configured``
    (``max_context_tokens``) (``docs/design.md``, "The budget fits the model").

    Returns:
        int: tokens, at least 0.
    """
    return max(0, min(int(memory_tokens or 0), int(int(configured) * MEMORY_SHARE_CAP)))


@dataclass(frozen=True)
class HistoryBudget:
    """
    An NPC's history budget and where it comes from (:func:`effective_budget`).

    Attributes:
        tokens (int): the budget: ``min(configured, window - reserved)`` less ``lent``, at
            least :data:`MIN_HISTORY_BUDGET`.
        configured (int): ``max_context_tokens``.
        window (int | None): the model's context window in tokens, None while unknown.
        reserved (int): tokens of the prompt that are not history: the reply, the system
            prompt, the memory and world sections and :data:`TEMPLATE_HEADROOM_TOKENS`.
        lent (int): tokens lent to the recall notes beyond their budget.
        source (str): a one-line human-readable account of ``tokens``.
    """

    tokens: int
    configured: int
    window: int | None
    reserved: int
    lent: int
    source: str


def effective_budget(configured, window=None, reply_tokens=0, system_tokens=0, memory_tokens=0,
                     window_source=None, world_tokens=0, lent_tokens=0) -> HistoryBudget:
    """
    The history budget of an NPC, in tokens, and where it comes from.

    Args:
        configured (int): ``max_context_tokens`` (the NPC's Attribute or ``AI_MAX_CONTEXT_TOKENS``).
        window (int | None): the model's context window in tokens, or None when unknown.
        reply_tokens (int): tokens the reply may generate (``AI_LLM_MAX_REPLY_TOKENS``).
        system_tokens (int): tokens of the system prompt (persona and instructions).
        memory_tokens (int): tokens the retrieved-memory sections may take
            (``AI_MEMORY_RETRIEVAL_TOKEN_BUDGET``; 0 when memory is off).
        window_source (str, optional): where ``window`` came from, for the description
            (``"llama.cpp /props"``, ``"AI_LLM_CONTEXT_WINDOW"``, ...).
        world_tokens (int): tokens the NPC's world may take (lore, pins, scene:
            :func:`ai_contrib.npc.world.world_reserve`; ``docs/design.md``, "The NPC's world").
        lent_tokens (int): tokens the recall notes shown now take beyond ``memory_tokens``
            (:func:`ai_contrib.core.recall_notes.notes_over_budget`): the history lends them,
            so its budget is that much smaller until compaction takes the notes' anchors
            (``docs/design.md``, "Recall notes", "Room lent by the history").

    Returns:
        HistoryBudget

    Raises:
        ValueError: ``configured`` below 1, or a negative part.
    """
    configured = int(configured)
    if configured < 1:
        raise ValueError(f"max_context_tokens must be at least 1, got {configured}")
    parts = (reply_tokens, system_tokens, memory_tokens, world_tokens, lent_tokens)
    if any(int(p) < 0 for p in parts):
        raise ValueError("reply, system, memory, world and lent tokens must not be negative")
    info = _fitted(configured, window, reply_tokens, system_tokens, memory_tokens,
                   window_source, world_tokens)
    lent = int(lent_tokens)
    if lent:
        info["tokens"] = max(MIN_HISTORY_BUDGET, info["tokens"] - lent)
        info["source"] += f" - {lent} lent to recall notes over their budget"
    return HistoryBudget(lent=lent, **info)


def _fitted(configured, window, reply_tokens, system_tokens, memory_tokens, window_source,
            world_tokens):
    """:func:`effective_budget` before any tokens are lent to the recall notes, as the
    :class:`HistoryBudget` fields but ``lent`` in a dict."""
    reserved = (int(reply_tokens) + int(system_tokens) + int(memory_tokens) + int(world_tokens)
                + TEMPLATE_HEADROOM_TOKENS)
    info = {"tokens": configured, "configured": configured, "window": None, "reserved": reserved,
            "source": "AI_MAX_CONTEXT_TOKENS (model context window unknown)"}
    if not window:
        return info
    window = int(window)
    info["window"] = window
    fitted = max(MIN_HISTORY_BUDGET, window - reserved)
    where = f" ({window_source})" if window_source else ""
    if fitted < configured:
        info["tokens"] = fitted
        info["source"] = (
            f"model context window {window}{where} - {reply_tokens} reply - {system_tokens} "
            f"system prompt - {memory_tokens} memories - "
            + (f"{world_tokens} world - " if world_tokens else "")
            + f"{TEMPLATE_HEADROOM_TOKENS} framing"
        )
    else:
        info["source"] = f"AI_MAX_CONTEXT_TOKENS (within the model context window {window}{where})"
    return info


#: evaluations smaller than this many tokens say more about a request's fixed cost than about the
#: server's prompt speed, and are not measured
MIN_MEASURED_TOKENS = 64
#: weight of a new measurement in the running prompt speed
SPEED_WEIGHT = 0.3


def updated_prompt_speed(previous, evaluated_tokens, prompt_ms) -> float | None:
    """
    The reply server's prompt evaluation speed after one more response: an exponential moving
    average of ``evaluated_tokens / prompt seconds``, over responses that evaluated at least
    :data:`MIN_MEASURED_TOKENS` (``docs/design.md``, "Recall notes").

    Args:
        previous (float | None): tokens per second so far, or None.
        evaluated_tokens (int | None): tokens the server evaluated (not taken from its cache).
        prompt_ms (float | None): milliseconds it spent on them.

    Returns:
        float | None: tokens per second (``previous`` when the response says nothing usable).
    """
    if not evaluated_tokens or not prompt_ms or evaluated_tokens < MIN_MEASURED_TOKENS \
            or prompt_ms <= 0:
        return previous
    speed = float(evaluated_tokens) / (float(prompt_ms) / 1000.0)
    if previous is None:
        return speed
    return (1.0 - SPEED_WEIGHT) * float(previous) + SPEED_WEIGHT * speed


def note_allowance(seconds, tokens_per_second) -> int | None:
    """
    Tokens a reply may spend evaluating memories it shows for the first time: ``seconds`` of
    the server's prompt evaluation (``AI_MEMORY_NOTE_SECONDS``; ``docs/design.md``, "Recall
    notes").

    Args:
        seconds (float | None): the allowance in seconds; None: no limit.
        tokens_per_second (float | None): the server's prompt speed; None (unknown): no limit.

    Returns:
        int | None: tokens, or None for no limit.
    """
    if seconds is None or tokens_per_second is None:
        return None
    return max(0, int(float(seconds) * float(tokens_per_second)))
