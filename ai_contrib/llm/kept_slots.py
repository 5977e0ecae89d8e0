"""
The embedded reply server's slot caches kept over a restart of the game (``docs/design.md``,
"Keeping the cache over a restart").

A restart starts a new reply server with empty slots, so the first reply to an NPC with a long
history evaluates its whole prompt: 1,211 tokens in 12.9 s on 2 cores, 4.6x a reply before the
restart (``benchmarks/restart.py``). Before the server stops, each of its slots that holds a
prompt is saved to a file (llama.cpp's ``/slots/<id>?action=save``, about 23 KB a token of
SmolLM2-135M, tens of milliseconds) and moved to a directory that outlives the process
(:func:`cache_dir`); once the next server is ready the files are moved back into the servers'
slot directory and restored into the same slots (``action=restore``), and llama.cpp's choice of
a slot by the prompt it holds gives each NPC's next reply its old cache: it evaluates only what
follows. llama.cpp checks a file's size only, so a file is restored only into a server of the
same model file and slot layout (:func:`cache_layout`).
"""

from __future__ import annotations

import os
import secrets
import shutil
from typing import TypedDict

from twisted.internet import defer, threads

from ..settings import get_setting
from .client import get_client
from .embedded import child_config, model_path, running_server, slot_directory

#: seconds a slot's save or restore may take (one of an idle slot takes tens of milliseconds)
SLOT_TIMEOUT = 10.0


def cache_dir() -> str:
    """The directory the kept slot files wait in while the game is down:
    ``AI_EMBEDDED_CACHE_DIR``, else ``<game dir>/server/ai_prompt_cache`` (Evennia's
    ``settings.GAME_DIR``, else the working directory)."""
    configured = get_setting("EMBEDDED_CACHE_DIR")
    if configured:
        return configured
    from django.conf import settings

    return os.path.join(getattr(settings, "GAME_DIR", None) or os.getcwd(), "server",
                        "ai_prompt_cache")


class CacheLayout(TypedDict):
    """What a kept slot file fits (:func:`cache_layout`); a plain dict, stored in the record
    and compared with ``==``."""

    model: str  #: the model file's absolute path
    bytes: int  #: its size
    mtime_ns: int  #: its modification time, nanoseconds
    n_ctx: int  #: tokens of each slot
    slots: int
    flash_attn: str  #: ``"on"``, ``"off"`` or ``"auto"``


def cache_layout() -> CacheLayout:
    """
    What a kept slot file fits: the model file (path, size in bytes, modification time in
    nanoseconds) and the reply server's layout (``n_ctx``, ``slots``, ``flash_attn``, as
    :func:`ai_contrib.llm.embedded.child_config` gives them to the child). A file saved
    under another layout is never restored: llama.cpp would take another model's cache of the
    same size as its own.

    Raises:
        EmbeddedServerError: no model file or no ``xllamacpp`` (:func:`model_path`).
    """
    path = model_path()
    stat = os.stat(path)
    config = child_config("reply")
    return CacheLayout(model=os.path.abspath(path), bytes=stat.st_size,
                       mtime_ns=stat.st_mtime_ns, n_ctx=config["n_ctx"], slots=config["slots"],
                       flash_attn=config["flash_attn"])


@defer.inlineCallbacks
def save_reply_slots(timeout=SLOT_TIMEOUT) -> defer.Deferred:
    """
    Save every idle slot of the running embedded reply server that holds a prompt, and move
    the files to :func:`cache_dir` (a thread does the moving: a slot's file is tens of
    megabytes). Files kept by an earlier stop are replaced.

    Returns:
        Deferred[list[dict]]: one ``{"slot": int, "file": str, "tokens": int}`` per slot
        saved, by slot (``file`` a name in :func:`cache_dir`); [] when no embedded reply server
        runs. Errors (errback): those of :meth:`ai_contrib.llm.client.LLMClient.slot_request`
        and ``OSError`` from the moving; a slot's file is removed if it is not kept.
    """
    client = get_client()
    if not getattr(client, "starts_server", False) or running_server("reply") is None:
        return []
    slots = yield client.slot_request("reply", timeout=timeout)
    saved = []
    try:
        # llama.cpp would hold a busy slot's save until its request ends: a stopping game does
        # not wait for it, and that slot's prompt is lost
        for slot in sorted(int(entry["id"]) for entry in slots
                           if not entry.get("is_processing")):
            name = f"kept-{slot}-{secrets.token_hex(6)}.bin"
            answer = yield client.slot_request("reply", slot, "save", name, timeout)
            saved.append({"slot": slot, "file": name, "tokens": int(answer.get("n_saved") or 0)})
        kept = [entry for entry in saved if entry["tokens"] > 0]
        yield threads.deferToThread(_move_out, [entry["file"] for entry in saved],
                                    [entry["file"] for entry in kept], cache_dir())
    except BaseException:
        yield threads.deferToThread(_remove, slot_directory(), [e["file"] for e in saved])
        raise
    return kept


@defer.inlineCallbacks
def restore_reply_slots(kept, timeout=SLOT_TIMEOUT) -> defer.Deferred:
    """
    Restore the files :func:`save_reply_slots` kept into the same slots of the running
    embedded reply server; the files are removed from :func:`cache_dir` whatever happens (a
    restore is tried once).

    Args:
        kept (list[dict]): :func:`save_reply_slots`'s answer.
        timeout (float): seconds each restore may take.

    Returns:
        Deferred[int]: the tokens restored over all slots. Errors (errback): those of
        :meth:`ai_contrib.llm.client.LLMClient.slot_request` (a file that does not fit its
        slot: ``LLMHTTPError``) and ``OSError`` from the moving.
    """
    names = [entry["file"] for entry in kept]
    try:
        yield threads.deferToThread(_move_in, names, cache_dir(), slot_directory())
        restored = 0
        client = get_client()
        for entry in kept:
            answer = yield client.slot_request("reply", entry["slot"], "restore", entry["file"],
                                               timeout)
            restored += int(answer.get("n_restored") or 0)
    finally:
        yield threads.deferToThread(_remove, slot_directory(), names)
        yield threads.deferToThread(_remove, cache_dir(), names)
    return restored


def forget_kept(kept) -> None:
    """Remove the files of ``kept`` (:func:`save_reply_slots`'s answer) from :func:`cache_dir`:
    a layout that changed (unlinking takes no time worth a thread)."""
    _remove(cache_dir(), [entry["file"] for entry in kept])


def _move_out(saved, kept, directory):
    """Move the ``kept`` files from the slot directory into ``directory`` (emptied of earlier
    kept files first) and remove the other ``saved`` ones."""
    os.makedirs(directory, exist_ok=True)
    _remove(directory, [name for name in os.listdir(directory)
                        if name.startswith("kept-") and name.endswith(".bin")])
    for name in saved:
        source = os.path.join(slot_directory(), name)
        if name in kept:
            shutil.move(source, os.path.join(directory, name))
        else:
            _remove(slot_directory(), [name])


def _move_in(names, directory, target):
    for name in names:
        shutil.move(os.path.join(directory, name), os.path.join(target, name))


def _remove(directory, names):
    for name in names:
        try:
            os.remove(os.path.join(directory, name))
        except FileNotFoundError:
            pass
