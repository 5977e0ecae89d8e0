"""
Retrieval for one reply: the thin shell between an NPC and :mod:`ai_contrib.memory.retrieval`.

Two sources are fused (``docs/design.md``, "Prompt structure"; Letta keeps evicted messages
searchable the same way): Mem0 (journal facts and compaction summaries, by vector) and the
lossless archive of raw messages that are no longer verbatim in the runtime context (compacted,
evicted or masked), by BM25 in the archive's full-text index (:mod:`ai_contrib.memory.fulltext`;
``docs/design.md``, "The archive's full-text index").
"""

from .fulltext import ArchiveSearch, index_for
from .mem0_store import npc_agent_id
from .retrieval import retrieval_options, retrieve_memory_context


def archived_out_of_context(script):
    """
    The NPC's archived messages that are no longer verbatim in the context, as a search source.

    Called in the reactor thread, it only snapshots ``{id: content}`` of the runtime history
    (bounded by the context's token budget) and opens nothing; the archive's index is brought up
    to date and queried when the source is searched, on the memory worker thread, at a cost of
    the messages archived since the previous search (never a read of the whole archive).

    Returns:
        ArchiveSearch: for :func:`ai_contrib.memory.retrieval.retrieve_memory_context`.
    """
    in_context = {m["id"]: m.get("content") for m in script.history}
    return ArchiveSearch(index_for(script.archive), in_context)


def related_memory_context(script, character, query, listeners=None):
    """
    Like :func:`related_memories`, but the whole
    :func:`ai_contrib.memory.retrieval.build_memory_context` result (the chosen candidates with
    their scores and sources, and the text). The retrieval options are the NPC's
    (:func:`ai_contrib.memory.retrieval.retrieval_options`: its ``memory_*`` Attributes, else
    the game's settings), the token budget its :meth:`memory_budget`.

    Returns:
        Deferred[dict]: ``{"memories", "experiences", "text", "tokens", ...}``.
    """
    return retrieve_memory_context(
        npc_agent_id(character),
        query,
        archive_docs=archived_out_of_context(script),
        listeners=dict(listeners) if listeners is not None else None,
        **dict(retrieval_options(script), budget_tokens=script.memory_budget()),
    )


def related_memories(script, character, query, listeners=None):
    """
    Retrieve what the NPC remembers about ``query`` for a reply heard by ``listeners``.

    Args:
        script (AssistantScript): the NPC's script (archive, runtime history).
        character (AssistantCharacter): the NPC (its Mem0 ``agent_id``).
        query (str): the words of the turn being answered.
        listeners (dict, optional): ``{dbref: name}`` of the characters who will hear the reply;
            only what every one of them could have heard is returned (``docs/design.md``,
            "Privacy by audience"). None: no audience filter (admin tools, replays).

    Returns:
        Deferred[str | None]: the "RELATED MEMORIES" / "RELATED PAST EXPERIENCES" text for the
        prompt, or None when nothing relevant was found.
    """
    d = related_memory_context(script, character, query, listeners)
    return d.addCallback(lambda context: (context or {}).get("text") or None)
