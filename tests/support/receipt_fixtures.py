"""
Replies stored the way the reply writer stores them: the assistant message, its receipt kept by
:func:`ai_contrib.npc.replies.keep_receipt` (shape in :mod:`ai_contrib.core.receipts`), and the
reply's exact prompt in ``script.ndb.recent_prompts``.
"""


def receipt(memory_text="Bob's sister Elena lives in Riverwood.", memory_ref="1f2e3d4c5b6a"):
    return {
        "model": "smollm2-135m", "seconds": 1.234,
        "prompt_tokens": 812, "cached_tokens": 770, "generated_tokens": 31,
        "listeners": ["Bob"],
        "parts": [
            {"part": "system", "tokens": 120},
            {"part": "summary", "tokens": 90, "first_seq": 0, "last_seq": 40},
            {"part": "history", "tokens": 400, "first_seq": 41, "last_seq": 60, "messages": 20},
            {"part": "memories", "tokens": 60, "new": True},
            {"part": "turn", "tokens": 30, "first_seq": 61, "last_seq": 61, "messages": 1},
        ],
        "memories": [
            {"source": "mem0", "ref": memory_ref, "kind": "memory", "score": 0.1667,
             "text": memory_text, "new": True},
            {"source": "archive", "ref": "12", "kind": "message", "score": 0.0833,
             "text": "[2026-11-20 14:02] Bob: \"My sister |rElena|n lives in Riverwood.\"",
             "new": False},
        ],
    }


def add_reply(script, text, receipt_dict=None, prompt=None):
    """
    Store a reply the way the reply writer does (``script.add_message``, then
    :func:`ai_contrib.npc.replies.keep_receipt`), with a receipt unless ``receipt_dict`` is False.

    Returns:
        dict: the stored message.
    """
    from ai_contrib.npc.replies import keep_receipt

    msg = script.add_message("assistant", text, name=script.obj.key)
    if receipt_dict is not False:
        keep_receipt(script, msg, receipt_dict or receipt(), prompt)
    elif prompt is not None:
        prompts = list(script.ndb.recent_prompts or [])
        prompts.append({"seq": msg["seq"], "messages": prompt})
        script.ndb.recent_prompts = prompts[-5:]
    return msg
