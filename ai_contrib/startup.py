"""
Server hooks: start the embedded model server with the game, stop it with the game.

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
"""

from evennia.utils import logger
from twisted.internet import defer

from ai_contrib.core.tokens import prepare_offline_tiktoken
from ai_contrib.llm.embedded import (
    EmbeddedServerStopped,
    start_embedded_server,
    stop_embedded_server,
)
from ai_contrib.settings import get_setting


def at_server_start():
    """
    Start the embedded model server unless ``AI_LLM_BASE_URL`` is set; log where the LLM is.

    Returns:
        Deferred[EmbeddedServer|None]: fires when the embedded server is ready (``None`` with an
        external server or if the start failed; a failure is logged, not raised, so the game
        still starts and NPCs fall back to their ``FALLBACK_REPLY``).
    """
    # before anything (Mem0 included) asks tiktoken for an encoding: its download has no timeout
    prepare_offline_tiktoken()
    base_url = get_setting("LLM_BASE_URL")
    if base_url:
        logger.log_info(f"ai_contrib: using the LLM server at {base_url}")
        from twisted.internet import defer

        return defer.succeed(None)

    def ready(server):
        logger.log_info(
            f"ai_contrib: embedded model server ready at {server.base_url} (pid {server.pid})"
        )
        return server

    def failed(failure):
        message = failure.getErrorMessage()
        if failure.check(EmbeddedServerStopped):  # Evennia's first start restarts once
            logger.log_info(f"ai_contrib: {message}")
        else:
            logger.log_err(f"ai_contrib: the embedded model server did not start: {message}")
        return None

    return start_embedded_server().addCallbacks(ready, failed)


def at_server_stop():
    """
    Close the Mem0 store (embedded Qdrant allows one client per path: release it for the next
    start) and stop the embedded model server if it runs (its child process also exits by
    itself when the game process dies). Returns a Deferred firing once both are done.
    """
    from ai_contrib.memory.mem0_store import get_store

    return defer.gatherResults(
        [get_store().close(), stop_embedded_server()], consumeErrors=True
    ).addErrback(lambda failure: logger.log_err(
        f"ai_contrib: stopping the memory store or the model server failed: "
        f"{failure.getErrorMessage()}"
    ))
