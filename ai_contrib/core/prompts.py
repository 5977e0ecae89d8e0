"""
Building the reply prompt from the runtime history, and cleaning what the model answers.

Prompt order (``docs/design.md``, "Prompt structure"): the persona as a system message, then
the ``[CONTEXT SUMMARY]`` markers, then the recent history, with the retrieved memories right
before the lines being answered: stable parts first, so that the model server can reuse its
cached prefix, volatile parts last. What the listeners could not all have heard is left out;
when the rest is larger than the token budget, the oldest part (summaries included) is left out
first.
"""

import re

from .audience import heard_by
from .messages import is_marker

REPLY_INSTRUCTIONS = (
    "You are {name}. Stay in character. Answer what was just said to you in one or two short "
    "sentences, as {name} would say it aloud, addressing by name the speakers you answer. "
    "Do not write lines for anyone else."
)


def render_for_chat(msg):
    """
    Turn a history message into an OpenAI chat message for the reply prompt, or None to skip it.

    User messages carry the speaker in their text (``"Bob: hello"``) because many chat templates
    drop the ``name`` field; a line said near the NPC but not to it (``metadata["addressed"]``
    False, :mod:`ai_contrib.core.addressing`) reads ``"Bob (overheard): hello"``, so the model
    knows it but does not take it as a question to answer. Tool calls and tool results are the
    NPC's own bookkeeping (journaling during extraction) and are left out of conversational
    replies.
    """
    role = msg.get("role")
    content = msg.get("content") or ""
    if role == "tool" or (role == "assistant" and msg.get("tool_calls") and not content):
        return None
    if role == "user":
        name = msg.get("name")
        if name and (msg.get("metadata") or {}).get("addressed") is False:
            name = f"{name} (overheard)"
        return {"role": "user", "content": f"{name}: {content}" if name else content}
    if role in ("assistant", "system"):
        return {"role": role, "content": content}
    return None


def build_reply_messages(persona, npc_name, history, token_counts, budget_tokens, memories=None,
                         listeners=None, keep_ids=()):
    """
    Assemble the chat messages for one NPC reply.

    Args:
        persona (str): the NPC's persona text (``character.db.persona``).
        npc_name (str): the NPC's name.
        history (list[dict]): runtime history (message shape in ``core/messages.py``).
        token_counts (list[int]): tokens of each history message, same order.
        budget_tokens (int): tokens allowed for summaries plus history.
        memories (str, optional): a preformatted "RELATED MEMORIES" section.
        listeners (iterable[str], optional): dbrefs of who will hear the reply: messages and
            summaries not every one of them could have heard are left out
            (:func:`ai_contrib.core.audience.heard_by`; ``docs/design.md``, "Privacy by
            audience"). None: no filter.
        keep_ids (iterable[str]): ids of the lines the reply answers: kept whatever their
            audience (a listener who just walked in hears the answer, not a secret from before).

    When the history is larger than the budget, the oldest messages are left out first (they
    stay in the archive, where retrieval can still find them), but the newest one is always
    kept.

    Returns:
        list[dict]: ``[{"role", "content"}, ...]`` ready for ``/chat/completions``.
    """
    keep = frozenset(keep_ids or ())
    if listeners is not None:
        listeners = frozenset(listeners)
        pairs = [(m, t) for m, t in zip(history, token_counts)
                 if m.get("id") in keep or heard_by(m, listeners)]
        history = [m for m, _ in pairs]
        token_counts = [t for _, t in pairs]
    system = (persona or "").strip()
    system = (system + "\n\n" if system else "") + REPLY_INSTRUCTIONS.format(name=npc_name)
    out = [{"role": "system", "content": system}]
    # newest first until the budget is spent: summaries and messages alike, so an overflowing
    # history loses its oldest part, never the turn being answered
    kept = []
    used = 0
    for msg, tokens in zip(reversed(history), reversed(token_counts)):
        if used + tokens > budget_tokens and kept:
            break
        rendered = {"role": "system", "content": msg["content"]} if is_marker(msg) \
            else render_for_chat(msg)
        if rendered:
            kept.append((is_marker(msg), rendered, msg.get("id")))
            used += tokens
    kept.reverse()
    out.extend(rendered for marker, rendered, _ in kept if marker)
    tail = [(rendered, msg_id) for marker, rendered, msg_id in kept if not marker]
    # the retrieved memories change every turn: they go last, right before the lines being
    # answered, so the stable part before them stays a prefix the server can reuse from its
    # cache (llama.cpp, vLLM and hosted APIs all cache a common prefix)
    at = next((i for i, (_, msg_id) in enumerate(tail) if msg_id in keep), max(0, len(tail) - 1))
    for i, (rendered, _) in enumerate(tail):
        if memories and i == at:
            out.append({"role": "system", "content": memories})
        out.append(rendered)
    if memories and not tail:
        out.append({"role": "system", "content": memories})
    return out


_SPEAKER_LINE = re.compile(r"^\s*[A-Z][\w' -]{0,30}:\s")
# the end of a sentence: . ! ? or an ellipsis, with any closing quotes or brackets after it
_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"')\]\u201d\u2019]*(?=\s|$)")


def last_sentence(text):
    """
    ``text`` up to the end of its last complete sentence; when it holds none, up to its last
    whole word followed by ``"..."`` (a reply the token cap cut mid-sentence).

    Returns:
        str: possibly ``""`` for empty text.
    """
    text = (text or "").rstrip()
    ends = list(_SENTENCE_END.finditer(text))
    if ends:
        return text[: ends[-1].end()]
    words = text.rsplit(None, 1)[0] if " " in text else text
    return words.rstrip(",;:-\u2014 ") + "..." if words else ""


def clean_reply(text, npc_name, max_chars=400, truncated=False):
    """
    Make a model's raw completion safe to ``say``: strip a leading ``"<npc_name>:"``, stop at the
    first line where the model starts writing another speaker's turn, drop surrounding quotes and
    cap the length (characters).

    Args:
        truncated (bool): the model stopped at its token cap (``finish_reason == "length"``):
            the reply then ends at its last sentence boundary (:func:`last_sentence`) instead
            of mid-sentence.

    Returns:
        str: the cleaned reply, possibly ``""`` (the caller then uses its fallback line).
    """
    text = (text or "").strip()
    prefix = re.compile(rf"^\s*{re.escape(npc_name)}\s*(says)?\s*[:,]\s*", re.IGNORECASE)
    text = prefix.sub("", text)
    kept = []
    for line in text.splitlines():
        if kept and _SPEAKER_LINE.match(line):
            break
        if line.strip():
            kept.append(line.strip())
    text = " ".join(kept).strip().strip('"').strip()
    if truncated and len(text) <= max_chars:
        text = last_sentence(text)
    if len(text) > max_chars:
        cut = text[:max_chars]
        end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
        text = cut[: end + 1] if end > max_chars // 3 else cut.rstrip() + "..."
    return text
