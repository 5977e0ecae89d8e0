"""
Observation masking: old tool outputs become one-line placeholders that point into the archive.

Sources:

- ``docs/design.md``, "Observation masking": a masked tool message reads
  ``[TOOL OUTPUT ARCHIVED - ...]`` and keeps the original tool name and when it was archived;
  after each turn (micro-compaction) large old tool-result bodies are replaced without an LLM
  call, keeping the tool-call trail, a short status and an archive reference;
- Lindenbauer et al., "The Complexity Trap: Simple Observation Masking Is as Efficient as LLM
  Summarization for Agent Context Management" (JetBrains Research, NeurIPS 2025 DL4Code,
  arXiv:2508.21433): observations older than the last 10 turns are masked; this alone matches
  LLM summarisation at about half the cost.

A *turn* here is one assistant message (one model call: a reply, or a tool-call request) together
with the tool results answering it, as in the JetBrains study's agent turns. Tool results belonging
to the last ``window`` turns are never masked.

A masked message keeps its ``id``, ``seq``, ``role`` (``"tool"``), ``tool_call_id`` and
``timestamp``, so tool calls still pair with their results and an id-range splice still finds it;
only ``content`` changes, to ``"[TOOL OUTPUT ARCHIVED - seq <seq>] <tool>: <status>"``, and
``metadata`` gains ``masked=True``, ``original_tool``, ``archived_at`` (ISO-8601 UTC),
``archive_ref`` (``"seq <seq>"``), ``status`` and ``original_tokens``. The original is the
archive record with that ``seq`` (written when the message was appended), so nothing is lost.
Message shape: :mod:`ai_contrib.core.messages`; sizes in tokens, ``status`` length in characters.
"""

from __future__ import annotations

import re

from .messages import Message, tool_call_ids, utc_now_iso
from .tokens import count_message_tokens

__all__ = [
    "DEFAULT_MASK_WINDOW",
    "MASK_PREFIX",
    "apply_masks",
    "archive_ref",
    "call_trail_intact",
    "is_masked",
    "make_masked",
    "masked_count",
    "parse_archive_ref",
    "plan_masks",
    "protected_start",
    "status_line",
]

DEFAULT_MASK_WINDOW = 10  # turns, as in the JetBrains study
MASK_PREFIX = "[TOOL OUTPUT ARCHIVED - "
STATUS_CHARS = 80  # characters of the original's first line kept as its status
_REF = re.compile(r"^\[TOOL OUTPUT ARCHIVED - seq (\d+)\]")


def archive_ref(seq) -> str:
    """The archive reference of message ``seq`` as shown in a placeholder: ``"seq 42"``."""
    return f"seq {seq}"


def parse_archive_ref(content) -> int | None:
    """The archive ``seq`` a placeholder's ``content`` points to, or None if it is not one."""
    match = _REF.match(content or "")
    return int(match.group(1)) if match else None


def is_masked(msg) -> bool:
    """True if ``msg`` is a masked tool output (a placeholder, not the original)."""
    if msg.get("role") != "tool":
        return False
    return bool((msg.get("metadata") or {}).get("masked")) or parse_archive_ref(
        msg.get("content")
    ) is not None


def masked_count(history) -> int:
    """Number of masked tool outputs in ``history``."""
    return sum(1 for msg in history if is_masked(msg))


def status_line(content, max_chars=STATUS_CHARS) -> str:
    """
    The one-line status kept from a tool output: its first non-blank line, whitespace
    collapsed, cut to ``max_chars`` characters (ending in ``"..."`` when cut); ``"(empty)"``
    for an empty output.
    """
    for line in (content or "").splitlines():
        line = " ".join(line.split())
        if line:
            if len(line) > max_chars:
                line = line[: max(1, max_chars - 3)].rstrip() + "..."
            return line
    return "(empty)"


def protected_start(history, window) -> int:
    """
    Index of the first message of the last ``window`` turns: tool results before it may be
    masked, those from it on may not. With fewer than ``window`` assistant messages nothing may
    be masked (``0``); ``window <= 0`` protects nothing (``len(history)``).
    """
    if window <= 0:
        return len(history)
    seen = 0
    for index in range(len(history) - 1, -1, -1):
        if history[index].get("role") == "assistant":
            seen += 1
            if seen == window:
                return index
    return 0


def _tool_names(history):
    names = {}
    for msg in history:
        for call in msg.get("tool_calls") or []:
            if call.get("id"):
                names[call["id"]] = (call.get("function") or {}).get("name")
    return names


def make_masked(msg, tool_name, original_tokens=None, now=None) -> Message:
    """
    Return the placeholder for tool message ``msg`` (a new dict; ``msg`` is not modified).

    Args:
        msg (dict): a ``tool`` message with an int ``seq`` (archived).
        tool_name (str): the tool that produced it.
        original_tokens (int, optional): tokens of ``msg``, kept in the metadata.
        now (str, optional): ISO-8601 time for ``archived_at`` (default: now, UTC).

    Raises:
        ValueError: if ``msg`` is not a tool message or has no archive ``seq``.
    """
    if msg.get("role") != "tool":
        raise ValueError("only tool outputs are masked")
    seq = msg.get("seq")
    if not isinstance(seq, int):
        raise ValueError("a message that was never archived cannot be masked")
    status = status_line(msg.get("content"))
    masked = {key: value for key, value in msg.items() if key not in ("content", "metadata")}
    masked["content"] = f"{MASK_PREFIX}{archive_ref(seq)}] {tool_name}: {status}"
    masked["metadata"] = {
        **(msg.get("metadata") or {}),
        "masked": True,
        "original_tool": tool_name,
        "archived_at": now or utc_now_iso(),
        "archive_ref": archive_ref(seq),
        "status": status,
        "original_tokens": original_tokens,
    }
    return masked


def plan_masks(history, token_counts, window=DEFAULT_MASK_WINDOW, min_tokens=0, model=None,
               now=None) -> list[Message]:
    """
    Choose the tool outputs to mask and build their placeholders (micro-compaction,
    ``docs/design.md``, "Observation masking").

    A tool message is masked when it lies before the last ``window`` turns, is not masked yet,
    was archived (has an int ``seq``), costs at least ``min_tokens`` tokens, and its placeholder
    costs fewer tokens than it does (so masking never grows the context).

    Args:
        history (list[dict]): the runtime history, oldest first.
        token_counts (list[int]): tokens of each message, same order.
        window (int): turns whose tool outputs stay verbatim.
        min_tokens (int): smallest tool output worth masking, in tokens.
        model (str, optional): model name for counting the placeholders (use the ledger's).
        now (str, optional): ISO-8601 ``archived_at`` for every placeholder.

    Returns:
        list[dict]: the placeholders (same ids as the messages they replace), oldest first.

    Raises:
        ValueError: on mismatched lengths.
    """
    if len(token_counts) != len(history):
        raise ValueError(
            f"token_counts has {len(token_counts)} entries for {len(history)} messages"
        )
    stop = protected_start(history, window)
    names = None
    stamp = now or utc_now_iso()
    out = []
    for index in range(stop):
        msg = history[index]
        tokens = token_counts[index]
        if msg.get("role") != "tool" or is_masked(msg) or tokens < min_tokens:
            continue
        if not isinstance(msg.get("seq"), int):
            continue
        if names is None:
            names = _tool_names(history)
        tool = (
            (msg.get("metadata") or {}).get("tool")
            or names.get(msg.get("tool_call_id"))
            or msg.get("name")
            or "tool"
        )
        masked = make_masked(msg, tool, original_tokens=tokens, now=stamp)
        if count_message_tokens(masked, model) < tokens:
            out.append(masked)
    return out


def apply_masks(history, replacements) -> list:
    """
    Return a NEW list: ``history`` with each message whose id matches a placeholder in
    ``replacements`` swapped for it; order, length and every other message are unchanged, and
    ids not in ``history`` are ignored. Neither argument is modified.
    """
    by_id = {msg["id"]: msg for msg in replacements}
    return [by_id.get(msg.get("id"), msg) for msg in history]


def call_trail_intact(history) -> bool:
    """
    True when every tool message follows an assistant message that made its call (the pairing
    chat APIs require). Used by tests and as a post-condition check.
    """
    made = set()
    for msg in history:
        if msg.get("role") == "assistant":
            made.update(tool_call_ids(msg))
        elif msg.get("role") == "tool" and msg.get("tool_call_id") not in made:
            return False
    return True
