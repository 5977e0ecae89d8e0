"""
Finding reply receipts and prompts of an NPC (``docs/design.md``, "Reply receipts"): the
receipts live in the archive with the replies, the exact prompts of the last few replies in
``script.ndb.recent_prompts``. Shapes in :mod:`ai_contrib.core.receipts`.
"""


def reply_records(script, count=5):
    """
    The NPC's last ``count`` replies (archived assistant messages), newest last.

    Reads the archive's message log (:meth:`~ai_contrib.memory.archive.MessageArchive.
    message_log`: after the first call, only what was archived since is parsed).

    Returns:
        list[dict]: ``{"seq": int, "timestamp": str | None, "content": str,
        "receipt": dict | None}`` (None for replies written before receipts were kept).
    """
    found = []
    for msg in reversed(script.archive.message_log()):
        if msg.get("role") != "assistant" or not (msg.get("content") or "").strip():
            continue  # tool-calling turns of the journaling loop are not replies
        found.append({
            "seq": msg.get("seq"),
            "timestamp": msg.get("timestamp"),
            "content": msg.get("content") or "",
            "receipt": (msg.get("metadata") or {}).get("receipt"),
        })
        if len(found) >= count:
            break
    found.reverse()
    return found


def recent_prompt(script, seq=None):
    """
    The exact prompt of a recent reply, from ``script.ndb.recent_prompts`` (lost at a server
    restart; at most the last five replies).

    Args:
        seq (int, optional): the reply's archive seq; None for the newest.

    Returns:
        dict | None: ``{"seq": int, "messages": [{"role", "content"}, ...]}``.
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
