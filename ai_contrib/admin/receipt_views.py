"""
Finding reply receipts and prompts of an NPC (``docs/design.md``, "Reply receipts"): the last
receipts are kept on the script (``db.reply_receipts``, each naming its reply's archive seq), the
exact prompts of the last few replies in ``script.ndb.recent_prompts``. Shapes in
:mod:`ai_contrib.core.receipts`.
"""

from __future__ import annotations

from typing import TypedDict

from ..core.receipts import Receipt, RecentPrompt


def receipts_by_seq(script) -> dict[int, Receipt]:
    """``{reply seq: receipt}`` of the receipts the script keeps (the last 20 replies), as plain
    dicts (an Attribute gives nested containers that json refuses)."""
    from evennia.utils.dbserialize import deserialize

    kept = deserialize(script.db.reply_receipts or [])
    return {r.get("seq"): r for r in kept if r.get("seq") is not None}


class AnsweredLine(TypedDict):
    """A line a reply answered, as the archive's message log holds it."""

    seq: int | None  #: its archive seq
    name: str | None  #: who said it
    content: str  #: what was said


class ReplyRecord(TypedDict):
    """A reply of the NPC with its receipt and the lines it answered (:func:`reply_records`)."""

    seq: int  #: the reply's archive seq
    timestamp: str | None  #: ISO-8601 UTC
    content: str  #: what the NPC said
    receipt: Receipt | None  #: None for replies older than the receipts kept
    #: the lines of the reply's ``metadata["reply_to"]`` still in the archive's message log, in
    #: order; empty for a reply that records none
    answered: list[AnsweredLine]


def reply_records(script, count=5) -> list[ReplyRecord]:
    """
    The NPC's last ``count`` replies (archived assistant messages), newest last, each with the
    lines it answered.

    Reads the archive's message log (:meth:`~ai_contrib.memory.archive.MessageArchive.
    message_log`: after the first call, only what was archived since is parsed).

    Returns:
        list[ReplyRecord]: newest last.
    """
    receipts = receipts_by_seq(script)
    log = script.archive.message_log()
    found = []
    for msg in reversed(log):
        if msg.get("role") != "assistant" or not (msg.get("content") or "").strip():
            continue  # tool-calling turns of the journaling loop are not replies
        found.append({
            "seq": msg.get("seq"),
            "timestamp": msg.get("timestamp"),
            "content": msg.get("content") or "",
            "receipt": receipts.get(msg.get("seq")),
            "reply_to": list((msg.get("metadata") or {}).get("reply_to") or ()),
        })
        if len(found) >= count:
            break
    wanted = {line_id for reply in found for line_id in reply["reply_to"]}
    lines = {}
    for msg in reversed(log):  # the answered lines are just before their replies
        if len(lines) == len(wanted):
            break
        if msg.get("id") in wanted:
            lines[msg["id"]] = msg
    for reply in found:
        reply["answered"] = [{"seq": lines[i].get("seq"), "name": lines[i].get("name"),
                              "content": lines[i].get("content") or ""}
                             for i in reply.pop("reply_to") if i in lines]
    found.reverse()
    return found


def recent_prompt(script, seq=None) -> RecentPrompt | None:
    """
    The exact prompt of a recent reply, from ``script.ndb.recent_prompts`` (lost at a server
    restart; at most the last five replies).

    Args:
        seq (int, optional): the reply's archive seq; None for the newest.

    Returns:
        RecentPrompt | None: None when none is kept (of that seq).
    """
    prompts = list(script.ndb.recent_prompts or [])
    if not prompts:
        return None
    if seq is None:
        return prompts[-1]
    for prompt in prompts:
        if prompt.get("seq") == seq:
            return prompt
    return None
