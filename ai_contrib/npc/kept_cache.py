"""
The reply server's prompt cache kept over a restart, with what the NPCs know of it
(``docs/design.md``, "Keeping the cache over a restart").

When the game stops, the embedded reply server's slots are saved to files
(:func:`ai_contrib.llm.kept_slots.save_reply_slots`) and one record goes into Evennia's
``ServerConfig`` (:data:`KEY`): the files and the layout they fit, the server's measured prompt
speed, and, for the NPCs players are likely to speak to first, the last prompt each sent and the
start of the history it was built on, and the notes placed in it (:data:`KEPT_NDB`, which
die with the process). When the next reply server is ready, the record is read once and removed:
the files are restored into their slots, and those NPCs know again what the server holds, so
their next reply is weighed by the tokens that follow it (:mod:`ai_contrib.npc.deadline`) and
no warm-up is sent for them. The speed lets the first reply to an NPC whose prompt was not kept
be built from less (a shorter window) rather than wait for a whole cold prompt.
"""

from __future__ import annotations

from evennia.utils import logger
from twisted.internet import defer

from ..llm.client import get_client
from ..llm.kept_slots import cache_layout, forget_kept, restore_reply_slots, save_reply_slots
from ..settings import get_setting

#: ``ServerConfig`` key of the record (a dict: ``"layout"``, ``"slots"``, ``"speed"``,
#: ``"prompts"``: ``{npc id: {name in KEPT_NDB: value}}``)
KEY = "ai_contrib_kept_prompt_cache"

#: what an NPC's next reply prompt is built and weighed by, kept with the cache: the prompt
#: the server holds and the history start it was built on; the recall and world notes placed
#: in the history where they were first shown (shown again there, and not as new notes at its
#: end, the prompt is the one the server holds); the window's kept start, short and held
KEPT_NDB = ("server_prompt", "cached_head", "recall_notes", "world_notes", "prompt_start_id",
            "short_start_id", "held_head_id")


def keeping() -> bool:
    """Whether the cache is kept: ``AI_PROMPT_CACHE_KEEP`` on and the client on the embedded
    servers it starts (an external server keeps its own cache over the game's restart)."""
    return bool(get_setting("PROMPT_CACHE_KEEP")) and \
        bool(getattr(get_client(), "starts_server", False))


def keep_on_stop(pairs) -> defer.Deferred:
    """
    Save the reply server's slots and write the record, before the server stops.

    Args:
        pairs (list[tuple]): ``(npc, script)`` of the NPCs whose last prompt is noted (those
            players are likely to speak to first); an NPC that sent none since the start is
            left out.

    Returns:
        Deferred[list[dict]]: the slots kept (:func:`~ai_contrib.llm.kept_slots.
        save_reply_slots`), [] when none was (not keeping, no server, nothing cached, or a
        failure, logged). Never errbacks: a stop goes on without the cache.
    """
    from evennia.server.models import ServerConfig

    if not keeping():
        return defer.succeed([])
    prompts = {npc.id: {name: getattr(script.ndb, name) for name in KEPT_NDB}
               for npc, script in pairs if script.ndb.server_prompt}

    def saved(kept):
        if not kept:
            ServerConfig.objects.conf(KEY, delete=True)
            return []
        ServerConfig.objects.conf(KEY, value={
            "layout": cache_layout(), "slots": kept, "prompts": prompts,
            "speed": get_client().measured_prompt_speed})
        tokens = sum(entry["tokens"] for entry in kept)
        logger.log_info(f"ai_contrib: {tokens} tokens of prompt cache in {len(kept)} slot(s) "
                        "kept for the next start")
        return kept

    def failed(failure):
        logger.log_warn(f"ai_contrib: the prompt cache was not kept: {failure.getErrorMessage()}")
        return []

    return defer.maybeDeferred(save_reply_slots).addCallback(saved).addErrback(failed)


@defer.inlineCallbacks
def restore_on_start(find) -> defer.Deferred:
    """
    Read and remove the record :func:`keep_on_stop` wrote; when its layout is the running
    server's, restore the slots, seed the client's prompt speed (unless it measured one
    already) and give the NPCs back what they knew of the server's cache.

    Args:
        find (callable): ``find(ids)`` -> ``(npc, script)`` pairs of the AI NPCs among those
            object ids (``ai_contrib.admin.npcs.ai_npcs_with_ids``).

    Returns:
        Deferred[set[int]]: the ids of the NPCs whose prompt is cached again; empty when
        nothing was kept or it could not be restored (logged). Never errbacks.
    """
    from evennia.server.models import ServerConfig

    try:
        record = ServerConfig.objects.conf(KEY, default=None)
        if not record:
            return set()
        ServerConfig.objects.conf(KEY, delete=True)  # tried once, whatever happens
        if not keeping() or record.get("layout") != cache_layout():
            logger.log_info("ai_contrib: the kept prompt cache was not restored: the model or "
                            "its server's layout changed, or keeping it is turned off")
            forget_kept(record.get("slots") or [])
            return set()
        tokens = yield restore_reply_slots(record["slots"])
    except Exception as err:  # a cold cache is slower, never broken
        logger.log_warn(f"ai_contrib: the kept prompt cache was not restored: {err}")
        return set()
    client = get_client()
    if client.measured_prompt_speed is None and record.get("speed"):
        client.measured_prompt_speed = float(record["speed"])
    prompts = record.get("prompts") or {}
    restored = set()
    try:
        for npc, script in find(list(prompts)):
            for name, value in prompts[npc.id].items():
                if name in KEPT_NDB:
                    setattr(script.ndb, name, value)
            restored.add(npc.id)
    except Exception as err:  # the slots hold the prompts; the NPCs weigh them as cold
        logger.log_warn(f"ai_contrib: the NPCs of the kept prompt cache were not found: {err}")
    logger.log_info(f"ai_contrib: {tokens} tokens of prompt cache restored in "
                    f"{len(record['slots'])} slot(s), for {len(restored)} NPC(s)")
    return restored
