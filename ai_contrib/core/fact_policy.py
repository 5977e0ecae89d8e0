"""
Whose words a journaled fact may be, and who writes the facts: the model or the rules
(``docs/design.md``, "Facts players said").

- **Players' lines, not the NPC's**: a line is a player's (:func:`said_by_player`) or an NPC's
  (:func:`said_by_npc`: the NPC's own reply, or another NPC's line it heard); an NPC's reply
  is never a fact about the world unless a player's line says it too (the caller checks that
  with :func:`ai_contrib.core.grounding.check_fact` on the players' lines), and an entry that
  only NPC lines stand behind ranks at most :data:`NPC_LINE_MAX_IMPORTANCE`
  (:func:`capped_importance`).
- **The model or the rules**: per model, the outcomes of its last :data:`GROUNDING_WINDOW`
  facts (True: stored in its own words; False: failed the one-line check, or only an NPC said
  it) decide whether extraction asks it at all (:func:`choose_extractor`): once at least
  :data:`GROUNDING_MIN_FACTS` are known and more than :data:`MAX_UNGROUNDED_SHARE` of them
  failed, the rules of :mod:`ai_contrib.core.rule_facts` read the players' lines instead.

Pure module: no Evennia, Twisted or Django imports. Shares are floats 0-1.
"""

from __future__ import annotations

__all__ = [
    "EXTRACTORS",
    "GROUNDING_MIN_FACTS",
    "GROUNDING_WINDOW",
    "MAX_UNGROUNDED_SHARE",
    "NPC_LINE_MAX_IMPORTANCE",
    "capped_importance",
    "choose_extractor",
    "said_by_npc",
    "said_by_player",
    "ungrounded_share",
]

#: Highest importance (1-10) of a journal entry whose sources are NPC lines and no player's:
#: the embedded model journaled its own small talk at importance 10, and recall ranks by it.
NPC_LINE_MAX_IMPORTANCE = 3
#: What ``AI_PRE_COMPACT_EXTRACTOR`` takes.
EXTRACTORS = ("auto", "model", "rule")
#: Facts of one model whose outcomes are kept (the newest).
GROUNDING_WINDOW = 20
#: Outcomes needed before a model is judged (fewer: it is asked).
GROUNDING_MIN_FACTS = 8
#: Share of a model's facts that may fail before the rules take over. Measured with
#: ``benchmarks/journal_replay.py``: SmolLM2-135M fails most of its facts, a model that
#: extracts what players said fails almost none; half is far from both.
MAX_UNGROUNDED_SHARE = 0.5


def _metadata(msg) -> dict:
    return msg.get("metadata") or {}


def said_by_npc(msg) -> bool:
    """True for a line an NPC said: the NPC's own reply (``role`` ``"assistant"``) or another
    NPC's line it heard (``role`` ``"user"`` with ``metadata["npc"]``). ``msg``: a message
    (``core/messages.py`` shape)."""
    role = msg.get("role")
    return role == "assistant" or (role == "user" and bool(_metadata(msg).get("npc")))


def said_by_player(msg) -> bool:
    """True for a line a player said: ``role`` ``"user"``, not an NPC's (:func:`said_by_npc`).
    Summaries and the game's events (``role`` ``"system"``) are neither."""
    return msg.get("role") == "user" and not _metadata(msg).get("npc")


def capped_importance(importance, sources) -> int:
    """
    ``importance`` (1-10), at most :data:`NPC_LINE_MAX_IMPORTANCE` when the entry's
    ``sources`` (its source messages) hold an NPC's line and no player's.

    Args:
        importance (int | None): the scorer's number (None: returned as it is).
        sources (list[dict]): the messages the entry is attributed to.

    Returns:
        int | None
    """
    if importance is None:
        return None
    if any(said_by_player(m) for m in sources) or not any(said_by_npc(m) for m in sources):
        return importance
    return min(int(importance), NPC_LINE_MAX_IMPORTANCE)


def ungrounded_share(outcomes, window=GROUNDING_WINDOW,
                     minimum=GROUNDING_MIN_FACTS) -> float | None:
    """
    The share of a model's recent facts that failed (False), over the last ``window`` of
    ``outcomes`` (bools, oldest first); None when fewer than ``minimum`` are known
    (:func:`ai_contrib.core.fidelity.choose_summary_writer` judges summaries so too).
    """
    recent = list(outcomes)[-window:]
    if len(recent) < minimum:
        return None
    return sum(1 for passed in recent if not passed) / len(recent)


def choose_extractor(setting, outcomes) -> str:
    """
    Who writes an extraction's facts.

    Args:
        setting (str): ``AI_PRE_COMPACT_EXTRACTOR``: ``"model"``, ``"rule"`` or ``"auto"``
            (anything else reads as ``"auto"``).
        outcomes (iterable[bool]): the model's recent facts (:func:`ungrounded_share`).

    Returns:
        str: ``"rule"`` for ``"rule"``, and for ``"auto"`` once the model's facts fail above
        :data:`MAX_UNGROUNDED_SHARE`; else ``"model"``.
    """
    setting = str(setting or "auto").strip().lower()
    if setting in ("model", "rule"):
        return setting
    share = ungrounded_share(outcomes)
    return "rule" if share is not None and share > MAX_UNGROUNDED_SHARE else "model"
