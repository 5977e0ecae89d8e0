"""
Cache warm-ups evaluated by the embedded memory server and handed to the reply server
(``docs/design.md``, "Warm-ups handed over").

A warm-up evaluated by the reply server holds it for 15-27 s on 2 cores, and a reply asked
meanwhile waits for it. The memory server is the same model in a process of its own, with a
core of its own and as many slots as the reply server: it evaluates the warm-up in its last
slot (memory work keeps the first, ``ai_contrib.llm.client.MEMORY_PURPOSES``), saves the slot's
cache to a file (llama.cpp's ``/slots/<id>?action=save``, about 47 MB for 2,000 tokens of
SmolLM2-135M in 20-55 ms) and the reply server restores it into its least recently used idle
slot (15 ms): the next reply that starts with it evaluates only what follows. llama.cpp
restores a file only into a server whose slots have the same size and number.
"""

from __future__ import annotations

import os
import secrets

from twisted.internet import defer

from ..settings import get_setting
from .client import HANDOVER_PURPOSE, get_client
from .embedded import memory_server_enabled, slot_directory


def handover_available() -> bool:
    """
    Whether cache warm-ups are handed over: ``AI_PROMPT_CACHE_WARMUP_HANDOVER`` on, the client
    on the embedded servers it starts, and memory work on a server of its own
    (``AI_EMBEDDED_MEMORY_SERVER``).

    Raises:
        ValueError: a bad ``AI_EMBEDDED_MEMORY_SERVER``.
    """
    return bool(get_setting("PROMPT_CACHE_WARMUP_HANDOVER")) and get_client().starts_server \
        and memory_server_enabled()


def least_recent_idle(slots) -> int:
    """
    The reply server slot to restore a handed-over cache into, from llama.cpp's ``GET /slots``
    list (dicts with ``"id"``, ``"is_processing"`` and ``"id_task"`` once used): an idle slot,
    the least recently used first (never used before all), as llama.cpp's own choice of a slot
    for a prompt it holds nowhere; with none idle, the least recently used (llama.cpp keeps the
    restore until it is free).

    Raises:
        ValueError: an empty list.
    """
    if not slots:
        raise ValueError("the reply server reported no slots")
    idle = [slot for slot in slots if not slot.get("is_processing")] or slots
    return int(min(idle, key=lambda slot: int(slot.get("id_task", -1)))["id"])


@defer.inlineCallbacks
def warm_and_hand_over(messages, model=None, timeout=None) -> defer.Deferred:
    """
    Have the memory server evaluate ``messages`` (chat messages, one token asked for) in its
    last slot, then restore its cache into a reply server slot (:func:`least_recent_idle`).

    Args:
        messages (list[dict]): ``{"role", "content"}`` chat messages, the reply prompt's start.
        model (str, optional): as for :meth:`ai_contrib.llm.client.LLMClient.chat`.
        timeout (float, optional): seconds each request may take.

    Returns:
        Deferred[tuple]: ``(result, restored)``: the memory server's
        :class:`~ai_contrib.llm.client.ChatResult` (its prompt figures are that server's) and
        the tokens the reply server restored. Errors: those of the client's requests
        (:meth:`~ai_contrib.llm.client.LLMClient.slot_request`); the file is removed whatever
        happens.
    """
    client = get_client()
    warm_slot = max(1, int(get_setting("EMBEDDED_SLOTS") or 1)) - 1
    result = yield client.chat(messages, model=model, max_tokens=1, purpose=HANDOVER_PURPOSE,
                               timeout=timeout, id_slot=warm_slot)
    name = f"warm-{secrets.token_hex(8)}.bin"
    try:
        yield client.slot_request("memory", warm_slot, "save", name, timeout)
        target = least_recent_idle((yield client.slot_request("reply", timeout=timeout)))
        restored = yield client.slot_request("reply", target, "restore", name, timeout)
    finally:
        try:
            os.remove(os.path.join(slot_directory(), name))
        except FileNotFoundError:
            pass
    return result, int(restored.get("n_restored") or 0)
