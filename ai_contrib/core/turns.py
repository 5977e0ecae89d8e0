"""
Turns: the NPC answers what it heard since it last spoke, in one reply (``docs/design.md``,
"Turns, not one call per line").

A person in a busy tavern does not answer twenty lines one by one. Each player line is a user
message whose ``metadata["speaker"]`` names the speaker's dbref; each reply is an assistant
message whose ``metadata["reply_to"]`` lists the ids of the lines it answers. What is still to
be answered (:mod:`ai_contrib.core.lines`, speech and events alike) is therefore a function of
the history alone, which is restored after a crash from the checkpoint and the archive: the queue needs no storage of its own.

Pure functions over message lists (shape in :mod:`ai_contrib.core.messages`).
"""

from __future__ import annotations

from .dates import epoch_seconds
from .lines import is_line_to_answer


def unanswered_lines(history, now, max_age=0) -> tuple:
    """
    The lines to answer in ``history`` (:func:`ai_contrib.core.lines.line_to_answer`: speech,
    and events with an actor addressed to the NPC) that no reply answered yet, split into those
    still worth answering and those too old.

    A line is answered when a reply's ``metadata["reply_to"]`` names it, or when an assistant
    reply without ``reply_to`` (written before replies recorded it) comes after it. Assistant
    messages that only carry tool calls are bookkeeping, not replies. A line stored with
    ``metadata["addressed"] = False`` was overheard, not said to the NPC
    (:mod:`ai_contrib.core.addressing`): it is never to be answered.

    Args:
        history (list[dict]): the runtime history, oldest first.
        now (float): the current time (Unix seconds).
        max_age (float): seconds; lines older than this are stale (0: none is).

    Returns:
        tuple[list[dict], list[dict]]: ``(to_answer, stale)``, each oldest first.
    """
    answered = set()
    candidates = []
    for msg in history:
        if is_line_to_answer(msg):
            candidates.append(msg)
            continue
        if msg.get("role") != "assistant" or not (msg.get("content") or "").strip():
            continue
        reply_to = (msg.get("metadata") or {}).get("reply_to")
        if reply_to is None:
            answered.update(m["id"] for m in candidates)
        else:
            answered.update(reply_to)
    to_answer, stale = [], []
    for msg in candidates:
        if msg["id"] in answered:
            continue
        said = epoch_seconds(msg.get("timestamp"))
        if max_age and said is not None and now - said > max_age:
            stale.append(msg)
        else:
            to_answer.append(msg)
    return to_answer, stale


def turn_query(lines, max_lines=3, max_chars=600) -> str:
    """
    The retrieval query of a turn: the words of its last ``max_lines`` lines, newest last,
    capped at ``max_chars`` characters (newest words kept), so the cost of a query does not grow
    with a backlog.

    Args:
        lines (list[dict]): the turn's player lines, oldest first.

    Returns:
        str
    """
    words = " ".join((m.get("content") or "").strip() for m in lines[-max_lines:])
    return words[-max_chars:]
