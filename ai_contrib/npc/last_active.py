"""
Which AI NPCs replied last, kept over restarts (``docs/design.md``, "Warming the cache after a
restart"): the ids of the last :data:`KEPT` NPCs to reply, latest first, in Evennia's
``ServerConfig`` (:data:`KEY`). After an ``evennia reboot`` or a stop and start the players
reconnect only once the server is up, and the server's stop hooks run after the Portal has
dropped their sessions, so who they were talking to is noted as they talk: one read per reply,
and a write only when another NPC replied last.
"""

from __future__ import annotations

from evennia.utils import logger

#: ``ServerConfig`` key of the ids, latest first
KEY = "ai_contrib_last_active_npcs"
#: how many are kept (more than any embedded server's slots)
KEPT = 8


def note_reply(npc) -> None:
    """Put ``npc`` (an AI NPC that just replied) first among the NPCs that replied last. Never
    raises: a failure is logged and costs only the warm-up after the next restart."""
    from evennia.server.models import ServerConfig

    try:
        ids = list(ServerConfig.objects.conf(KEY, default=None) or ())
        if ids[:1] != [npc.id]:
            ids = ([npc.id] + [i for i in ids if i != npc.id])[:KEPT]
            ServerConfig.objects.conf(KEY, value=ids)
    except Exception as err:  # the reply is said; this is for the next restart
        logger.log_warn(f"AI {npc}: not noted as the last to reply: {err}")


def last_active_ids() -> list[int]:
    """The object ids of the NPCs that replied last, latest first (at most :data:`KEPT`)."""
    from evennia.server.models import ServerConfig

    return list(ServerConfig.objects.conf(KEY, default=None) or ())
