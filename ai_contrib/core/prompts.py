"""
Building the reply prompt from the runtime history, and cleaning what the model answers.

Prompt order (seed 003, "Prompt Structure"; issue order for this project): the persona as a
system message, then retrieved memories, then every ``[CONTEXT SUMMARY]`` marker, then as much of
the recent history as fits the token budget, newest kept first.
"""

import re

from .messages import is_marker

REPLY_INSTRUCTIONS = (
    "You are {name}. Stay in character. Answer the last speaker in one or two short sentences, "
    "as {name} would say it aloud. Do not write lines for anyone else."
)


def render_for_chat(msg):
    """
    Turn a history message into an OpenAI chat message for the reply prompt, or None to skip it.

    User messages carry the speaker in their text (``"Bob: hello"``) because many chat templates
    drop the ``name`` field. Tool calls and tool results are the NPC's own bookkeeping (journaling
    during extraction) and are left out of conversational replies.
    """
    role = msg.get("role")
    content = msg.get("content") or ""
    if role == "tool" or (role == "assistant" and msg.get("tool_calls") and not content):
        return None
    if role == "user":
        name = msg.get("name")
        return {"role": "user", "content": f"{name}: {content}" if name else content}
    if role in ("assistant", "system"):
        return {"role": role, "content": content}
    return None


def build_reply_messages(persona, npc_name, history, token_counts, budget_tokens, memories=None):
    """
    Assemble the chat messages for one NPC reply.

    Args:
        persona (str): the NPC's persona text (``character.db.persona``).
        npc_name (str): the NPC's name.
        history (list[dict]): runtime history (message shape in ``core/messages.py``).
        token_counts (list[int]): tokens of each history message, same order.
        budget_tokens (int): tokens allowed for summaries plus history.
        memories (str, optional): a preformatted "RELATED MEMORIES" section.

    Returns:
        list[dict]: ``[{"role", "content"}, ...]`` ready for ``/chat/completions``.
    """
    system = (persona or "").strip()
    system = (system + "\n\n" if system else "") + REPLY_INSTRUCTIONS.format(name=npc_name)
    out = [{"role": "system", "content": system}]
    if memories:
        out.append({"role": "system", "content": memories})
    used = 0
    for msg, tokens in zip(history, token_counts):
        if is_marker(msg):
            out.append({"role": "system", "content": msg["content"]})
            used += tokens
    tail = []
    for msg, tokens in zip(reversed(history), reversed(token_counts)):
        if is_marker(msg):
            continue
        if used + tokens > budget_tokens and tail:
            break
        rendered = render_for_chat(msg)
        if rendered:
            tail.append(rendered)
            used += tokens
    out.extend(reversed(tail))
    return out


_SPEAKER_LINE = re.compile(r"^\s*[A-Z][\w' -]{0,30}:\s")


def clean_reply(text, npc_name, max_chars=400):
    """
    Make a model's raw completion safe to ``say``: strip a leading ``"<npc_name>:"``, stop at the
    first line where the model starts writing another speaker's turn, drop surrounding quotes and
    cap the length (characters).

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
    if len(text) > max_chars:
        cut = text[:max_chars]
        end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
        text = cut[: end + 1] if end > max_chars // 3 else cut.rstrip() + "..."
    return text
