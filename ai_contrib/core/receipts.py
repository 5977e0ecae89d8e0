"""
A reply's receipt: what the model was given for one reply and what it cost (``docs/design.md``,
"Reply receipts").

Pure functions; the shell (:mod:`ai_contrib.replies`) keeps the last receipts on the NPC's script
and writes each one to its archive.
"""

#: characters of a retrieved memory's text kept in a receipt
RECEIPT_TEXT_CHARS = 200
#: receipts an NPC keeps at hand (``script.db.reply_receipts``); the archive keeps all of them
RECEIPTS_KEPT = 20


def make_receipt(model, seconds, prompt, parts, items, listener_names):
    """
    The receipt of one reply.

    Args:
        model (str | None): the model asked.
        seconds (float): wall time of the LLM call.
        prompt (dict | None): prompt figures as
            :meth:`ai_contrib.llm.client.ChatResult.prompt_stats` returns them
            (``prompt_tokens``, ``cached_tokens``, ``generated_tokens``), None where the server
            reports none.
        parts (list[dict]): the prompt's parts in order
            (:func:`ai_contrib.core.prompts.assemble_reply_prompt`).
        items (list[dict]): this turn's retrieval, best first, each ``{"key", "kind", "line",
            "source", "ref", "score", "new"}`` (``new``: first shown in this reply, else carried
            in a note from an earlier one).
        listener_names (iterable[str]): who heard the reply.

    Returns:
        dict: ``{"model", "seconds", "prompt_tokens", "cached_tokens", "generated_tokens",
        "listeners": [str], "parts": [dict], "memories": [{"source": "archive" | "mem0",
        "ref": str, "kind": str, "score": float, "text": str (at most
        RECEIPT_TEXT_CHARS characters), "new": bool}]}``; the token figures are None where the
        server did not report them.
    """
    prompt = prompt or {}
    memories = []
    for item in items or ():
        text = str(item.get("line") or "")
        if len(text) > RECEIPT_TEXT_CHARS:
            text = text[: RECEIPT_TEXT_CHARS - 1] + "\u2026"
        memories.append({
            "source": item.get("source"),
            "ref": item.get("ref"),
            "kind": item.get("kind"),
            "score": item.get("score"),
            "text": text,
            "new": bool(item.get("new")),
        })
    return {
        "model": model,
        "seconds": round(float(seconds), 3),
        "prompt_tokens": prompt.get("prompt_tokens"),
        "cached_tokens": prompt.get("cached_tokens"),
        "generated_tokens": prompt.get("generated_tokens"),
        "listeners": sorted(listener_names or ()),
        "parts": [dict(part) for part in parts or ()],
        "memories": memories,
    }


def kept_receipts(receipts, receipt, limit=RECEIPTS_KEPT):
    """``receipts`` (oldest first) with ``receipt`` added, the oldest dropped past ``limit``."""
    return (list(receipts or ()) + [receipt])[-limit:]
