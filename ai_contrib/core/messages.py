"""
The message model: the one place where the shape of a history entry is defined.

A *message* is a plain ``dict`` (JSON- and pickle-safe) holding:

``id`` (str)
    Stable unique identifier (12 hex characters), never reused. Compaction replaces a range of
    ids, so messages appended while a summary is being written survive the splice.
``seq`` (int)
    Position in the NPC's append-only archive (0, 1, 2, ...). Monotonic per NPC; ``None`` for
    messages that were never archived (entries written by older code).
``role`` (str)
    ``"system"``, ``"user"``, ``"assistant"`` or ``"tool"`` (OpenAI chat roles).
``content`` (str)
    The text. May be ``""`` for an assistant message that only carries ``tool_calls``.
``name`` (str, optional)
    Who spoke: the player's character name for ``user`` messages, the NPC's for ``assistant``.
``timestamp`` (str)
    ISO-8601 UTC time the message entered the history.
``tool_calls`` (list, optional)
    OpenAI-style calls on an assistant message:
    ``[{"id": str, "type": "function", "function": {"name": str, "arguments": str(JSON)}}]``.
``tool_call_id`` (str, optional)
    On a ``tool`` message: the ``id`` of the call it answers.
``metadata`` (dict, optional)
    Extra data. A compaction marker (a ``system`` message whose content starts with
    ``[CONTEXT SUMMARY]``) has ``metadata["type"] == "compaction"`` plus ``compacted_count``,
    ``compacted_at``, ``original_token_count``, ``summary_token_count`` and the archive range it
    replaces (``first_id``, ``last_id``, ``first_seq``, ``last_seq``) (``docs/design.md``,
    "Summary compaction").

Entries written by older code (``{"role", "content"}`` only) are accepted everywhere:
:func:`normalise_message` fills in the missing fields without changing role or content.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, NotRequired, TypedDict

ROLES = ("system", "user", "assistant", "tool")
SUMMARY_PREFIX = "[CONTEXT SUMMARY]"
MARKER_TYPE = "compaction"


class Message(TypedDict):
    """
    A history entry (the module docstring gives each field's meaning): a plain dict at run
    time, since it is stored in Attributes and in the archive as it is.
    """

    id: str  #: 12 hex characters, never reused
    seq: int | None  #: the archive position; None until archived
    role: str  #: one of :data:`ROLES`
    content: str  #: the text, ``""`` for an assistant message of tool calls only
    timestamp: str  #: ISO-8601 UTC; ``""`` when unknown (older entries)
    name: NotRequired[str]  #: the speaker
    tool_calls: NotRequired[list[dict[str, Any]]]  #: OpenAI-style calls (module docstring)
    tool_call_id: NotRequired[str]  #: on a ``tool`` message, the call it answers
    metadata: NotRequired[dict[str, Any]]  #: extra data; a marker's range and counts


class ChatMessage(TypedDict):
    """
    A message as a chat request takes it (OpenAI chat format): the role and the text, with the
    speaker's API-safe name and the tool fields where the message has them. Prompts are built
    of these; they are never stored.
    """

    role: str  #: one of :data:`ROLES`
    content: str  #: the text
    name: NotRequired[str]  #: the speaker, API-safe
    tool_calls: NotRequired[list[dict[str, Any]]]  #: on an assistant message
    tool_call_id: NotRequired[str]  #: on a ``tool`` message


def new_message_id() -> str:
    """Return a fresh message id: 12 lower-case hex characters (48 random bits)."""
    return uuid.uuid4().hex[:12]


def utc_now_iso() -> str:
    """Return the current UTC time as an ISO-8601 string with ``+00:00``."""
    return datetime.now(timezone.utc).isoformat()


def make_message(role, content, name=None, **fields) -> Message:
    """
    Build a new message dict with a fresh ``id`` and ``timestamp``.

    Args:
        role (str): one of :data:`ROLES`.
        content (str): the text (``None`` is stored as ``""``).
        name (str, optional): the speaker.
        **fields: any other message field (``tool_calls``, ``tool_call_id``, ``metadata``,
            ``timestamp`` to override the clock, ``seq``).

    Returns:
        Message: the message (shape in the module docstring); ``seq`` is ``None`` until
        archived.

    Raises:
        ValueError: if ``role`` is not a chat role or ``content`` is not a string.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise ValueError(f"content must be a string, got {type(content).__name__}")
    msg = {
        "id": fields.pop("id", None) or new_message_id(),
        "seq": fields.pop("seq", None),
        "role": role,
        "content": content,
        "timestamp": fields.pop("timestamp", None) or utc_now_iso(),
    }
    if name:
        msg["name"] = str(name)
    for key, value in fields.items():
        if value is not None:
            msg[key] = value
    return msg


def normalise_message(msg) -> Message:
    """
    Return ``msg`` with every required field present, for entries written by older code.

    Missing ``id`` gets a fresh one, missing ``timestamp`` becomes ``""`` (unknown), missing
    ``seq`` becomes ``None``; role and content are kept as they are. The dict is modified in
    place and returned, so callers holding it see the same object.
    """
    if "id" not in msg or not msg["id"]:
        msg["id"] = new_message_id()
    msg.setdefault("seq", None)
    msg.setdefault("timestamp", "")
    if msg.get("content") is None:
        msg["content"] = ""
    return msg


def is_marker(msg) -> bool:
    """True if ``msg`` is a ``[CONTEXT SUMMARY]`` compaction marker."""
    if msg.get("role") != "system":
        return False
    meta = msg.get("metadata") or {}
    return meta.get("type") == MARKER_TYPE or (msg.get("content") or "").startswith(SUMMARY_PREFIX)


def shown_speaker(msg) -> str | None:
    """
    Who a reply prompt names before a player's line (``"Bob"``, ``"Bob (overheard)"`` for a line
    not said to the NPC: ``metadata["addressed"]`` False), or None for a line shown without a
    name (another role, an event record, no name). The prompt shows ``"<speaker>: <text>"``
    (:func:`ai_contrib.core.prompts.render_for_chat`) and the token count charges the same
    (:func:`ai_contrib.core.tokens.count_message_tokens`).
    """
    meta = msg.get("metadata") or {}
    name = msg.get("name")
    if msg.get("role") != "user" or meta.get("kind") == "event" or not name:
        return None
    return f"{name} (overheard)" if meta.get("addressed") is False else str(name)


def tool_call_ids(msg) -> list:
    """Return the ids of the tool calls an assistant message makes (empty list if none)."""
    return [call.get("id") for call in (msg.get("tool_calls") or []) if call.get("id")]
