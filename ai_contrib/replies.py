"""
Answering players: one LLM call per NPC at a time, queued speech answered in order, an
in-character fallback line when the model fails.
"""

from evennia.utils import logger
from twisted.internet import defer

from .core.prompts import build_reply_messages, clean_reply
from .llm.client import LLMError, get_client
from .settings import get_setting


def memories_for_prompt(script, character, query, speaker):
    """
    Return a Deferred firing the "RELATED MEMORIES" text for ``query`` (or None).

    Retrieval is optional: any failure is logged and the reply goes on without memories.
    """
    try:
        from .memory.recall import related_memories
    except ImportError:
        return defer.succeed(None)
    d = defer.maybeDeferred(related_memories, script, character, query, speaker)

    def _failed(failure):
        logger.log_warn(f"AI {character}: memory retrieval failed: {failure.getErrorMessage()}")
        return None

    return d.addErrback(_failed)


def build_prompt(script, character, memories=None):
    """The chat messages for a reply from ``script``'s current runtime history."""
    history = script.history
    return build_reply_messages(
        character.db.persona,
        character.key,
        history,
        script.runtime.token_counts(history),
        int(script.cfg("max_context_tokens")),
        memories=memories,
    )


@defer.inlineCallbacks
def answer_pending(script, character):
    """
    Answer every queued speaker, oldest first; speech that arrives meanwhile joins the queue.

    Each reply sees the whole history, including lines said while an earlier reply was being
    written. On an LLM error the room sees the fallback line and the log gets the error; no
    traceback reaches a player.

    Returns:
        Deferred firing the number of replies said.
    """
    said = 0
    while script.ndb.pending:
        speaker = script.ndb.pending.pop(0)
        last_user = next(
            (m for m in reversed(script.history) if m.get("role") == "user"), None
        )
        query = last_user["content"] if last_user else ""
        memories = yield memories_for_prompt(script, character, query, speaker)
        messages = build_prompt(script, character, memories)
        try:
            result = yield get_client().chat(messages, model=script.cfg("llm_model"))
            reply = clean_reply(result.content, character.key)
        except LLMError as err:
            logger.log_err(f"AI {character}: reply to {speaker} failed: {err}")
            reply = ""
        if not reply:
            if character.location:
                line = get_setting("FALLBACK_REPLY").format(name=character.key)
                character.location.msg_contents(line, exclude=[character])
            continue
        script.add_message("assistant", reply, name=character.key)
        character.at_say(reply)
        said += 1
    return said
