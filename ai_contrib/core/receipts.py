"""
A reply's receipt: what the model was given for one reply and what it cost (``docs/design.md``,
"Reply receipts"). Pure functions over the receipt dict: the reply writer
(:mod:`ai_contrib.npc.replies`) makes it and keeps the last ones on the NPC's script (and each one
in
its archive); the in-game ``aihistory <npc>/prompt`` and the staff web pages show it.

A *receipt*::

    {"model": str | None, "seconds": float (wall time of the LLM call),
     "prompt_tokens": int | None, "cached_tokens": int | None, "generated_tokens": int | None,
     "listeners": [str names], "seq": int (the reply's archive seq), "at": str (timestamp),
     "parts": [{"part": "system" | "summary" | "history" | "memories" | "turn" | "lore" |
                        "pins" | "scene" | "actions",
                "tokens": int, "first_seq": int | None, "last_seq": int | None,
                "messages": int, "new": bool,
                "detail": {"entries": [{"id", "key"}]} | {"pins": [id]} | {"actions": [name]}},
               ...],
                # in prompt order; keys per part
     "world_skipped": [{"key": str, "part": str,  # world left out: for room ("budget"), or
                        "reason": str}],          # withdrawn by staff (ai_contrib.npc.world)
     "recall": {"asks": "remember" | "past" | "name" | None, "allowance": int | None,
                "left_out": int, "room_limited": bool,  # the new note's time allowance
                "follows": bool,  # a follow-up: retrieval asked about the subject in hand
                "dropped": int},  # earlier notes given up to make room (the prompt after
                                  # the first of them evaluated again)
     "cut_for_time": {"new_notes": int, "history_from": str | None},  # built from less: the
                # server could not evaluate the whole prompt in time (ai_contrib.npc.deadline)
     "memories": [{"source": "archive" | "mem0", "ref": str, "kind": str, "score": float,
                   "text": str, "new": bool}, ...]}

Any key may be missing (a server that reports no usage): every reading function here answers
with None or an empty list for what it cannot know.
"""

from __future__ import annotations

from typing import Any, TypedDict

#: characters of a retrieved memory's text kept in a receipt
RECEIPT_TEXT_CHARS = 200
#: receipts an NPC keeps at hand (``script.db.reply_receipts``); the archive keeps all of them
RECEIPTS_KEPT = 20


class Receipt(TypedDict, total=False):
    """
    A receipt, as kept on the script and shown to staff (module docstring: each field's
    shape); any key may be missing. A plain dict at run time: it is stored in Attributes and
    in the archive as it is.
    """

    model: str | None  #: the model asked
    seconds: float  #: wall time of the LLM call
    prompt_tokens: int | None  #: as the server reported them
    cached_tokens: int | None
    generated_tokens: int | None
    listeners: list[str]  #: who heard the reply, by name
    seq: int | None  #: the reply's archive seq (added when it is kept)
    at: str | None  #: the reply's timestamp (added when it is kept)
    parts: list[dict[str, Any]]  #: the prompt's parts, in prompt order
    world_skipped: list[dict[str, Any]]  #: world left out, with the reason
    recall: dict[str, Any]  #: the new note's allowance and what it left out
    cut_for_time: dict[str, Any]  #: the prompt built from less, for time
    memories: list[dict[str, Any]]  #: retrieved memories (a lean receipt: references only)
    memories_retrieved: int  #: candidates retrieval returned (a lean receipt's)


class RecentPrompt(TypedDict):
    """The exact prompt of a recent reply (``script.ndb.recent_prompts``)."""

    seq: int | None  #: the reply's archive seq
    messages: list[dict[str, Any]]  #: the chat messages sent, ``{"role", "content", ...}``


class TokenFigures(TypedDict):
    """A prompt's cost (:func:`token_figures`), in tokens; None where the server did not say."""

    prompt: int | None  #: the prompt's tokens
    reused: int | None  #: taken from the server's cache
    evaluated: int | None  #: ``prompt - reused``
    generated: int | None  #: the reply's tokens
    parts_total: int  #: the parts' own counts summed (may differ a little from the server's)


def make_receipt(model, seconds, prompt, parts, items, listener_names) -> Receipt:
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
        Receipt: ``{"model", "seconds", "prompt_tokens", "cached_tokens", "generated_tokens",
        "listeners": [str], "parts": [dict], "memories": [{"source": "archive" | "mem0",
        "ref": str, "kind": str, "score": float, "text": str (at most
        RECEIPT_TEXT_CHARS characters), "new": bool, "chain"?: str (a fact heard from another
        NPC: who said it first and the NPCs it passed through)}]}``; the token figures are None where the
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
        if item.get("chain"):  # a fact heard from another NPC (docs/design.md, "Gossip")
            memories[-1]["chain"] = str(item["chain"])
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


def lean_receipt(receipt) -> Receipt:
    """
    The receipt as the archive keeps it: every figure and part, the memories first shown in
    this reply by source and reference only (``"source", "ref", "kind", "new"``, and a heard-from
    fact's ``"chain"``), and how many
    candidates retrieval returned (``"memories_retrieved"``). The text is in the archive line
    or Mem0 memory a reference names; a memory carried over in a note is in the receipt of the
    reply that first showed it; the rest were candidates the prompt did not show. Copying all
    of them with their text made a receipt several kilobytes a reply (``docs/design.md``,
    "Reply receipts").

    Returns:
        Receipt: a new dict; ``receipt`` is not changed.
    """
    lean = dict(receipt)
    memories = receipt.get("memories") or ()
    lean["memories"] = [
        {key: memory.get(key) for key in ("source", "ref", "kind", "new", "chain")
         if key != "chain" or memory.get("chain")}
        for memory in memories if memory.get("new")
    ]
    lean["memories_retrieved"] = len(memories)
    return lean


def kept_receipts(receipts, receipt, limit=RECEIPTS_KEPT) -> list[Receipt]:
    """``receipts`` (oldest first) with ``receipt`` added, the oldest dropped past ``limit``."""
    return (list(receipts or ()) + [receipt])[-limit:]


PART_NAMES = {
    "system": "persona and instructions",
    "summary": "summary",
    "history": "history",
    "memories": "retrieved memories",
    "turn": "the turn answered",
    "lore": "lore",
    "pins": "pins",
    "scene": "scene",
    "actions": "actions offered",
}


def seq_span(part) -> str:
    """``"#12-#40"``, ``"#12"`` or ``""``: the archive seqs a prompt part covers."""
    first, last = part.get("first_seq"), part.get("last_seq")
    if first is None and last is None:
        return ""
    if first is None or last is None or first == last:
        return f"#{first if first is not None else last}"
    return f"#{first}-#{last}"


def describe_part(part) -> str:
    """
    One prompt part in words: ``"history #12-#40, 29 messages"``, ``"retrieved memories
    (carried over)"``.

    Args:
        part (dict): one entry of ``receipt["parts"]``.

    Returns:
        str
    """
    name = part.get("part") or "?"
    words = [PART_NAMES.get(name, name)]
    span = seq_span(part)
    if span:
        words.append(span)
    text = " ".join(words)
    if part.get("messages") is not None and name in ("history", "turn"):
        text += f", {part['messages']} messages"
    entries = (part.get("detail") or {}).get("entries") or ()
    if entries:
        text += " " + ", ".join(
            f"{entry.get('id')} ({'key ' + repr(entry['key']) if entry.get('key') else 'constant'})"
            for entry in entries)
    pins = (part.get("detail") or {}).get("pins") or ()
    if pins:
        text += f", {len(pins)} pinned"
    if name in ("memories", "lore", "pins", "scene") and "new" in part:
        text += " (new)" if part["new"] else " (carried over)"
    return text


def describe_skipped(skipped) -> str:
    """
    What of the NPC's world a reply left out, and why, in words: ``"lore:7 (budget), lore:3
    (deleted), scene (budget)"`` (reasons: :func:`ai_contrib.npc.world.plan_world`).

    Args:
        skipped (list[dict]): ``receipt["world_skipped"]``: ``[{"key", "part", "reason"}]``.

    Returns:
        str: ``""`` when nothing was left out.
    """
    return ", ".join(f"{item.get('key')} ({item.get('reason')})" for item in skipped or ())


#: why a turn was taken for a question about the past, in words (core/past_questions.REASONS)
ASKS_WORDS = {"remember": "asks to remember", "past": "asks about the past",
              "name": "asks about someone by name"}


def describe_recall(recall) -> str:
    """
    The time a reply had for new memories, in words: ``"asks about the past: new memories up
    to 450 tokens; 6 left out for time; 2 earlier note(s) given up"`` (``"given up after the
    reply"`` for those kept on loan for it), ending ``"; a follow-up of the subject in hand"``
    for a follow-up (``docs/design.md``, "Recall notes").

    Args:
        recall (dict | None): ``receipt["recall"]``: ``{"asks", "allowance", "left_out",
            "room_limited", "follows"?, "dropped"?, "leaving"?}``.

    Returns:
        str: ``""`` for a receipt without it.
    """
    if not recall:
        return ""
    asks = ASKS_WORDS.get(recall.get("asks"), "small talk")
    allowance = recall.get("allowance")
    room = "no time limit" if allowance is None else f"new memories up to {allowance} tokens"
    text = f"{asks}: {room}"
    if recall.get("room_limited") and recall.get("left_out"):
        text += f"; {recall['left_out']} left out for time"
    if recall.get("dropped"):
        text += f"; {recall['dropped']} earlier note(s) given up"
    if recall.get("leaving"):
        text += f"; {recall['leaving']} earlier note(s) given up after the reply"
    if recall.get("follows"):
        text += "; a follow-up of the subject in hand"
    return text


def describe_cut(cut) -> str:
    """
    What a reply's prompt left out because the server could not evaluate it in time, in words:
    ``"2 new note(s) left out; only the newest lines"`` (``docs/design.md``, "Time limits that
    follow the work").

    Args:
        cut (dict | None): ``receipt["cut_for_time"]``: ``{"new_notes": int, "history_from":
            str | None}``.

    Returns:
        str: ``""`` for a receipt without it.
    """
    if not cut:
        return ""
    words = [f"{int(cut.get('new_notes') or 0)} new note(s) left out"]
    if cut.get("history_from"):
        words.append("only the newest lines")
    return "; ".join(words)


def token_figures(receipt) -> TokenFigures:
    """
    The prompt's cost: tokens the server evaluated vs reused from its cache, and generated.

    Args:
        receipt (dict): a receipt (see the module docstring).

    Returns:
        TokenFigures: ``evaluated`` only when ``prompt`` and ``reused`` are both known.
    """
    prompt = receipt.get("prompt_tokens")
    reused = receipt.get("cached_tokens")
    evaluated = prompt - reused if prompt is not None and reused is not None else None
    return {
        "prompt": prompt,
        "reused": reused,
        "evaluated": evaluated,
        "generated": receipt.get("generated_tokens"),
        "parts_total": sum(int(p.get("tokens") or 0) for p in receipt.get("parts") or []),
    }


def describe_cost(receipt) -> str:
    """
    One line: ``"model smollm2, 1.21 s, prompt 812 tokens (42 evaluated, 770 reused), 31
    generated"``; unknown figures are left out.
    """
    figures = token_figures(receipt)
    words = [f"model {receipt.get('model') or 'default'}"]
    if receipt.get("seconds") is not None:
        words.append(f"{float(receipt['seconds']):.2f} s")
    if figures["prompt"] is not None:
        text = f"prompt {figures['prompt']} tokens"
        if figures["evaluated"] is not None:
            text += f" ({figures['evaluated']} evaluated, {figures['reused']} reused)"
        words.append(text)
    else:
        words.append(f"prompt about {figures['parts_total']} tokens (not reported)")
    if figures["generated"] is not None:
        words.append(f"{figures['generated']} generated")
    return ", ".join(words)


def memory_source(memory) -> str:
    """Where a retrieved memory came from: ``"archive #12"``, ``"mem0 3f2a9c1e"``, or for a fact
    heard from another NPC ``"mem0 3f2a9c1e, heard: Wren > Marta (1 hop)"``."""
    source = memory.get("source") or "?"
    ref = str(memory.get("ref") if memory.get("ref") is not None else "?")
    if source == "archive":
        return f"archive #{ref}"
    heard = f", heard: {memory['chain']}" if memory.get("chain") else ""
    return f"{source} {ref[:8]}{heard}"
