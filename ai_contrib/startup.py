"""
Server hooks: start the embedded model server and open the memory store with the game, stop and
close them with the game.

Call these from the game's ``server/conf/at_server_startstop.py``::

    from ai_contrib.startup import at_server_start as ai_at_server_start
    from ai_contrib.startup import at_server_stop as ai_at_server_stop

    def at_server_start():
        ai_at_server_start()

    def at_server_stop():
        ai_at_server_stop()

When ``AI_LLM_BASE_URL`` is set nothing is started: the game uses that server. Otherwise the
embedded model starts in the background (a child process, see :mod:`ai_contrib.llm.embedded`), so
the first NPC reply need not wait for it; a request made before it is ready simply waits. Both
hooks are safe to call twice (Evennia calls them on every start, reload and stop). The API key of
the embedded server is never logged.

With ``AI_MEMORY_ENABLED`` the Mem0 store also starts opening at once, on its own worker thread
(:func:`open_memory_store`): opening takes 1.5-3 s, ~8 s with 25,000 stored memories
(``docs/design.md``, "Mem0 per NPC"), and done here no reply pays it once the server has been
up that long. A reply's memory search that
comes earlier queues behind the opening on the same thread; the reactor never waits for either.
"""

from evennia.utils import logger
from twisted.internet import defer

from ai_contrib.core.redact import redact
from ai_contrib.core.tokens import prepare_offline_tiktoken
from ai_contrib.llm.embedded import (
    EmbeddedServerStopped,
    running_server,
    start_embedded_server,
    stop_embedded_server,
)
from ai_contrib.settings import get_setting


def open_memory_store():
    """
    Start opening the process-wide Mem0 store on its worker thread, when memory is enabled.

    Returns at once: the opening (importing Mem0, loading the embedder, reading the stored
    points, moving memories out of an older shared collection) runs on the store's thread
    (:meth:`ai_contrib.memory.mem0_store.Mem0Store.open`), where every later Mem0 call queues
    behind it (``docs/design.md``, "Mem0 per NPC").

    Returns:
        Deferred[bool]: fires with True once the store is open, False if memory is disabled or
        the opening failed (logged, not raised: NPCs then answer from their archive alone and
        the next memory call tries to open it again). Never errbacks.
    """
    from ai_contrib.memory.mem0_store import get_store

    try:
        if not get_setting("MEMORY_ENABLED"):
            return defer.succeed(False)
        store = get_store()
        opening = store.open()
    except Exception as err:  # misconfigured settings must not stop the game
        logger.log_err(f"ai_contrib: the memory store cannot be opened: {err}")
        return defer.succeed(False)

    def opened(_memory):
        seconds = store.timings["open"][-1] if store.timings["open"] else 0.0
        moved = (store.migration or {}).get("memories")
        note = f", {moved} memories moved into one collection per NPC" if moved else ""
        logger.log_info(f"ai_contrib: memory store open in {seconds:.1f} s{note}")
        return True

    def failed(failure):
        logger.log_err(f"ai_contrib: the memory store did not open: {failure.getErrorMessage()}")
        return False

    return opening.addCallbacks(opened, failed)


def load_lore():
    """
    Copy the entries of the game's lore modules (``AI_LORE_MODULES``) into the lore store
    (:func:`ai_contrib.lore.load_lore_modules`; ``docs/design.md``, "Lore and pins"). Runs on
    every start and reload; errors are logged, never raised.

    Returns:
        dict | None: the loading report, None when it failed.
    """
    try:
        from ai_contrib.lore import load_lore_modules

        return load_lore_modules()
    except Exception as err:  # the game starts without its lore rather than not at all
        logger.log_err(f"ai_contrib: the lore modules were not loaded: {err}")
        return None


def at_server_start():
    """
    Start the embedded model server unless ``AI_LLM_BASE_URL`` is set; log where the LLM is.
    Load the lore modules (:func:`load_lore`). Start opening the memory store in the
    background (:func:`open_memory_store`).

    Returns:
        Deferred[EmbeddedServer|None]: fires when the embedded server is ready (``None`` with an
        external server or if the start failed; a failure is logged, not raised, so the game
        still starts and NPCs fall back to their ``FALLBACK_REPLY``).
    """
    # before anything (Mem0 included) asks tiktoken for an encoding: its download has no timeout
    prepare_offline_tiktoken()
    load_lore()
    open_memory_store()
    base_url = get_setting("LLM_BASE_URL")
    if base_url:
        logger.log_info(f"ai_contrib: using the LLM server at {redact(base_url)}")
        from twisted.internet import defer

        return defer.succeed(None)

    def ready(server):
        logger.log_info(
            f"ai_contrib: embedded model server ready at {server.base_url} (pid {server.pid})"
        )
        restore_kept_cache().addCallback(warm_after_restart)
        return server

    def failed(failure):
        message = failure.getErrorMessage()
        if failure.check(EmbeddedServerStopped):  # Evennia's first start restarts once
            logger.log_info(f"ai_contrib: {message} (the server is stopping or restarting, as "
                            "Evennia does once on a game's first start; it starts again with it)")
        else:
            logger.log_err(f"ai_contrib: the embedded model server did not start: {message}")
        return None

    return start_embedded_server().addCallbacks(ready, failed)


def likely_first():
    """
    The AI NPCs players are likely to speak to first after a restart: those in a room with a
    connected player (after a ``reload``, the players are still there) and those that replied
    last before it (:func:`ai_contrib.npc.last_active.last_active_ids`), the last to reply
    first, as many as the embedded server has slots (``AI_EMBEDDED_SLOTS``: one more would push
    the first out of its cache).

    Returns:
        list[tuple]: ``(npc, script)`` pairs; [] when they cannot be found (logged).
    """
    from ai_contrib.admin.npcs import ai_npcs_with_ids, by_last_reply, npcs_beside_players
    from ai_contrib.npc.last_active import last_active_ids

    try:
        found = dict((npc.id, (npc, script))
                     for npc, script in ai_npcs_with_ids(last_active_ids()))
        found.update((npc.id, (npc, script)) for npc, script in npcs_beside_players())
        slots = max(1, int(get_setting("EMBEDDED_SLOTS") or 1))
        return by_last_reply(found.values())[:slots]
    except Exception as err:  # a restart must go on whatever the rooms hold
        logger.log_err(f"ai_contrib: the NPCs players may speak to first were not found: {err}")
        return []


def restore_kept_cache():
    """
    Restore the prompt cache the last stop kept (:func:`ai_contrib.npc.kept_cache.
    restore_on_start`; ``docs/design.md``, "Keeping the cache over a restart").

    Returns:
        Deferred[set[int]]: the ids of the NPCs whose prompt is cached again. Never errbacks.
    """
    from ai_contrib.admin.npcs import ai_npcs_with_ids
    from ai_contrib.npc.kept_cache import restore_on_start

    return restore_on_start(ai_npcs_with_ids)


def warm_after_restart(restored=()):
    """
    Warm the new embedded server's cache for the AI NPCs players are likely to speak to first
    (:func:`likely_first`), one after another, leaving out those whose cache the last stop kept
    and this start restored (``docs/design.md``, "Warming the cache after a restart"). An
    external server keeps its cache over the game's restart and is not warmed.

    Args:
        restored (iterable[int]): ids of the NPCs whose prompt is cached again
            (:func:`restore_kept_cache`).

    Returns:
        Deferred[int]: the warm-ups sent (:func:`ai_contrib.npc.warmup.warm_in_turn`); 0, at
        once, when no NPC is to be warmed. Never errbacks.
    """
    from ai_contrib.npc.warmup import warm_in_turn

    restored = set(restored or ())
    chosen = [(npc, script) for npc, script in likely_first() if npc.id not in restored]
    if not chosen:
        return defer.succeed(0)
    logger.log_info("ai_contrib: warming the prompt cache of "
                    f"{', '.join(npc.key for npc, _ in chosen)} after the restart")
    return warm_in_turn([script for _, script in chosen])


#: seconds from the stop hook that a stopping game's reactor may wait for the prompt cache to
#: be kept (Evennia stops the reactor one second after the hook; an idle slot's save takes
#: tens of milliseconds): ``evennia reboot`` and ``reload`` start the new server as soon as the
#: old one has left the Portal, and an old server still running then keeps it from starting
#: (it reconnects to the new Portal), so a save that takes longer is given up
KEEP_HOLD = 1.5


def at_server_stop():
    """
    Keep the embedded reply server's prompt cache for the next start
    (:func:`ai_contrib.npc.kept_cache.keep_on_stop`, for :func:`likely_first`), then stop the
    embedded model servers if they run (a child process also exits by itself when the game
    process dies); close the Mem0 store (embedded Qdrant allows one client per path: release
    it for the next start). Evennia does not wait for a stop hook: the reactor's shutdown is
    held for the keeping alone, at most :data:`KEEP_HOLD` seconds from this call (a
    ``"before"`` ``"shutdown"`` trigger).

    Returns:
        Deferred[None]: fires once the cache is kept, the servers stopped and the store closed;
        never errbacks (a failure is logged).
    """
    from twisted.internet import reactor

    from ai_contrib.memory.mem0_store import get_store
    from ai_contrib.npc.kept_cache import keep_on_stop

    keeping = keep_on_stop(likely_first() if running_server("reply") is not None else [])
    # before the servers' stop joins the chain: the shutdown never waits for them to exit
    held = _held(keeping, KEEP_HOLD)
    if not held.called:
        reactor.addSystemEventTrigger("before", "shutdown", lambda: held)
    servers = keeping.addBoth(lambda _: stop_embedded_server())
    return defer.gatherResults(
        [get_store().close(), servers], consumeErrors=True
    ).addCallbacks(lambda _: None, lambda failure: logger.log_err(
        f"ai_contrib: stopping the memory store or the model server failed: "
        f"{failure.getErrorMessage()}"
    ))


def _held(work, seconds):
    """A Deferred firing with None once ``work`` (a Deferred) has fired or ``seconds`` have
    passed, whichever comes first; ``work``'s result is left to its own callbacks."""
    from twisted.internet import reactor

    held = defer.Deferred()
    timer = reactor.callLater(seconds, lambda: held.called or held.callback(None))

    def done(result):
        if timer.active():
            timer.cancel()
        if not held.called:
            held.callback(None)
        return result

    work.addBoth(done)
    return held
