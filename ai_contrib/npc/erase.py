"""
Removing an NPC's memory: ``aireset`` wipes it, deleting the NPC retires it
(``docs/design.md``, "Deleting an NPC").

What an NPC remembers lives in five places: the runtime history and its checkpoint
(``script.db.conversation_history``), the journal and entity profiles on the character, the
JSONL archive with its FTS5 index beside it (:mod:`ai_contrib.memory.archive`,
:mod:`ai_contrib.memory.fulltext`), the NPC's Mem0 memories (:mod:`ai_contrib.memory.mem0_store`),
and the compaction log and counters on the script.

- :func:`reset_memory` empties all five and *deletes* the archive: an admin asked for it (a player
  asking to be forgotten, a persona started over).
- :func:`retire_memory`, run when the NPC or its script is deleted, *keeps* the archive by moving
  it, with its index, into ``deleted/`` beside the archives (the lossless record of what players
  said, which an admin may still need), and deletes the Mem0 memories: they are derived from the
  journal, which goes with the character, and database ids can be reused, so a new NPC with the
  same id would otherwise inherit them.

File work and Mem0 calls run on the memory worker thread (the store's, or retrieval's own when
Mem0 is off), after any search queued there on the same index, so the reactor never waits on a
file lock or on Mem0.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypedDict

from evennia.utils import logger
from twisted.internet import defer

from ..memory.fulltext import index_path
from ..settings import get_setting
from .scene import PEOPLE_CATEGORY, all_people

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

# the index file and SQLite's companions (WAL mode)
_INDEX_SUFFIXES = ("", "-wal", "-shm", "-journal")
DELETED_DIR = "deleted"


def archive_files(archive_path) -> list:
    """
    The files of an archive that exist now: the JSONL file, then its index and its WAL files.

    Returns:
        list[str]: paths.
    """
    index = index_path(archive_path)
    candidates = [archive_path] + [index + suffix for suffix in _INDEX_SUFFIXES]
    return [path for path in candidates if os.path.exists(path)]


def _worker():
    """The thread the NPC's archive index is searched on: the Mem0 store's, else retrieval's."""
    from ..memory.mem0_store import get_store
    from ..memory.retrieval import _worker_for

    return _worker_for(get_store() if get_setting("MEMORY_ENABLED") else None)


def _close(archive_path):
    from ..memory.archive import close_archive

    close_archive(archive_path)  # also closes the index (waits for a search using it)


def _delete_files(archive_path):
    """Close the archive and delete its files (worker thread). Returns the names deleted."""
    _close(archive_path)
    deleted = []
    for path in archive_files(archive_path):
        os.remove(path)
        deleted.append(os.path.basename(path))
    return deleted


def _move_files(archive_path):
    """
    Close the archive and move its files into ``deleted/`` beside it (worker thread).

    Returns:
        list[str]: the new paths.
    """
    _close(archive_path)
    target_dir = os.path.join(os.path.dirname(archive_path), DELETED_DIR)
    moved = []
    for path in archive_files(archive_path):
        os.makedirs(target_dir, exist_ok=True)
        target = os.path.join(target_dir, os.path.basename(path))
        shutil.move(path, target)
        moved.append(target)
    return moved


def _memories_stored(character):
    """
    Whether the NPC may have Mem0 memories: Mem0 is on, and the store is open in this process
    (a game opens it at start) or the journal records a consolidation. A test or a tool that
    never used Mem0 then deletes NPCs without loading it (seconds, and the embedder).
    """
    from ..memory.journal import ensure_journal
    from ..memory.mem0_store import get_store

    if not get_setting("MEMORY_ENABLED"):
        return False
    journal = ensure_journal(dict(character.db.journal or {}))
    return get_store().is_open or bool(journal["consolidated_entry_ids"])


def _delete_memories(agent_id, drop_collection=False):
    """
    Delete the NPC's Mem0 memories on the store's thread.

    Returns:
        Deferred[dict]: ``{"memories": int}`` or ``{"memories": None, "memory_error": str}``;
        never errbacks.
    """
    from ..memory.mem0_store import get_store

    try:
        d = get_store().delete_agent(agent_id, drop_collection=drop_collection)
    except Exception as err:  # misconfigured store: report, do not break the caller
        return defer.succeed({"memories": None, "memory_error": str(err)})
    d.addCallback(lambda count: {"memories": count})
    d.addErrback(lambda failure: {"memories": None, "memory_error": failure.getErrorMessage()})
    return d


def busy_reason(script) -> str | None:
    """
    Why the NPC's memory cannot be reset right now, or None: a reply or memory work under way
    would write into the history being emptied.
    """
    if script.ndb.busy:
        return "a reply is being written"
    if script.ndb.memory_work is not None or script.ndb.compacting or script.ndb.extracting:
        return "memory work is under way"
    return None


class RetirementReport(TypedDict, total=False):
    """What became of a deleted NPC's memory (:func:`retire_memory`); a key is there only for
    the part that ran (no archive files: no ``moved``; no Mem0 memories: no ``memories``)."""

    moved: list[str]  #: the archive's files, at their new paths in ``deleted/``
    file_error: str  #: why they could not be moved (``moved`` is then empty)
    memories: int | None  #: Mem0 memories deleted; None when the deletion failed
    memory_error: str  #: why the deletion failed


class ResetPreview(TypedDict):
    """What :func:`reset_memory` would remove (:func:`reset_preview`), shown by ``aireset``
    before it asks to confirm."""

    messages: int  #: in context
    summaries: int  #: summary markers among them
    archive_records: int
    archive_files: list[str]  #: file names
    archive_bytes: int
    journal_entries: int
    entity_profiles: int
    compaction_events: int  #: in the compaction log
    compactions: int  #: the compaction count
    people: list[str]  #: the people records' names, the most recently spoken to first
    memory: bool  #: Mem0 memories will be deleted


def reset_preview(script, character) -> ResetPreview:
    """What :func:`reset_memory` would remove, counted now (O(1) reads, plus one ``stat`` per
    file)."""
    from ..core.messages import is_marker
    from ..memory.journal import ensure_journal

    history = script.history
    path = script.conversation.archive_path()
    files = archive_files(path)
    journal = ensure_journal(dict(character.db.journal or {}))
    return {
        "messages": len(history),
        "summaries": sum(1 for m in history if is_marker(m)),
        "archive_records": script.archive.last_seq + 1,
        "archive_files": [os.path.basename(f) for f in files],
        "archive_bytes": sum(os.path.getsize(f) for f in files),
        "journal_entries": len(journal["entries"]),
        "entity_profiles": len(character.db.entity_profiles or {}),
        "compaction_events": len(script.db.compaction_log or []),
        "compactions": script.db.compaction_count or 0,
        "people": [str(r.get("name") or r.get("dbref") or "?") for r in all_people(script)],
        "memory": bool(get_setting("MEMORY_ENABLED")),
    }


def reset_memory(script, character) -> Deferred:
    """
    Wipe the NPC's memory: runtime history and checkpoint, journal, entity profiles, the people
    records (whom it has met), archive and index files, Mem0 memories, compaction log, counters
    and the last reply/sleep records. Persona, configuration Attributes and mode stay, and so
    do the refusals staff set (``forgotten_players``, ``erased_facts``: :func:`mark_erased`).

    The state is reset at once on the calling (reactor) thread, and the NPC writes to a new
    archive file from then on (a new ``archive_id``); the old files are deleted and the Mem0
    memories removed on the memory worker thread.

    Args:
        script: the ``AssistantScript``; check :func:`busy_reason` first.
        character: the NPC.

    Returns:
        Deferred[dict]: :func:`reset_preview`'s counts, plus ``"deleted_files"`` (names) and
        ``"memories"`` (int, or None when Mem0 is off or failed, with ``"memory_error"``,
        ``"file_error"`` on failure). Never errbacks.
    """
    from ..memory.journal import new_journal
    from ..memory.mem0_payload import npc_agent_id

    # the preview's counts, extended with what the reset did
    report = dict(reset_preview(script, character))
    old_path = script.conversation.archive_path()
    agent_id = npc_agent_id(character)
    # a new file name: nothing the NPC says from now on lands in the file being deleted
    script.db.archive_id = uuid.uuid4().hex[:8]
    script.db.conversation_history = []
    script.db.checkpoint_seq = -1
    for name in ("compaction_count", "compaction_counted_seq", "compact_failures",
                 "reply_failures"):
        script.attributes.add(name, 0)
    for name in ("compaction_log",):
        script.attributes.add(name, [])
    for name in ("last_compaction", "compact_last_error", "last_reply_error", "compact_benefit",
                 "last_sleep"):
        script.attributes.add(name, None)
    script.db.context_signals = {}
    # the notes shown in the prompt quote what is erased: they go with it
    for name in ("runtime", "pending", "last_reply", "last_sleep_result", "after_turn",
                 "recall_notes", "world_notes", "withdrawn_memories", "fetch_ahead",
                 "ahead_note"):
        setattr(script.ndb, name, None)
    character.db.journal = new_journal()
    character.db.entity_profiles = {}
    # whom it met and its impressions of them are memory too (docs/design.md, "Scene, events
    # and people")
    script.attributes.clear(category=PEOPLE_CATEGORY)
    logger.log_info(f"AI {character}: memory reset ({report['archive_records']} archive records, "
                    f"{report['journal_entries']} journal entries)")

    files = _worker().run(_delete_files, old_path)
    files.addCallbacks(lambda names: {"deleted_files": names},
                       lambda failure: {"deleted_files": [],
                                        "file_error": failure.getErrorMessage()})
    memories = (_delete_memories(agent_id) if report["memory"]
                else defer.succeed({"memories": None}))

    def _report(results):
        for _ok, part in results:
            report.update(part)
        return report

    return defer.DeferredList([files, memories]).addCallback(_report)


#: marks of erased memory sources an NPC keeps at most, the newest: they only need to outlive
#: a retrieval under way when staff erase (notes are checked on every reply)
WITHDRAWN_MARKS = 4096


def withdraw_recall(script, journal_ids=(), keys=()) -> int:
    """
    Staff erased what some of the NPC's memories came from (``aigossip/erase``): its recall
    notes holding one leave now, and the marks stay (``script.ndb.withdrawn_memories``, the
    newest :data:`WITHDRAWN_MARKS`) so that every later reply checks its notes and candidates
    against them (:func:`ai_contrib.core.recall_notes.withdraw`; ``docs/design.md``, "Recall
    notes"): a retrieval already under way may still find a memory being deleted.

    Args:
        script: the NPC's ``AssistantScript``.
        journal_ids (iterable[str]): journal entries erased (their Mem0 memories with them).
        keys (iterable[str]): recall item keys erased (``"m:<memory id>"``, ``"a:<line id>"``).

    Returns:
        int: notes that left now.
    """
    from ..core.recall_notes import withdraw

    marks = dict.fromkeys(script.ndb.withdrawn_memories or ())
    marks.update(dict.fromkeys([f"j:{jid}" for jid in journal_ids] + [str(k) for k in keys]))
    script.ndb.withdrawn_memories = dict.fromkeys(list(marks)[-WITHDRAWN_MARKS:])
    notes, _items, left = withdraw(script.ndb.recall_notes or [], [],
                                   script.ndb.withdrawn_memories)
    script.ndb.recall_notes = notes
    return left


#: erased facts an NPC keeps refusing, the newest (``character.db.erased_facts``)
ERASED_KEPT = 512


def mark_erased(character, contents) -> None:
    """
    Staff erased facts ``contents`` (str each) from ``character`` (``aigossip/erase``): it keeps
    them, the newest :data:`ERASED_KEPT`, in its ``erased_facts`` Attribute and refuses them
    from then on, as ``aiforget``'s ``forgotten_players`` refuses a forgotten player's gossip:
    an extraction that proposes one again from lines still in context journals nothing
    (:meth:`ai_contrib.npc.extraction._Extraction.erased`), and gossip does not bring it back
    (:func:`ai_contrib.core.gossip.select_gossip`; ``docs/design.md``, "Gossip").
    """
    kept = [str(c) for c in (character.db.erased_facts or ())]
    new = [str(c) for c in contents if str(c) not in kept]
    if new:
        character.db.erased_facts = (kept + new)[-ERASED_KEPT:]


def erased_facts(character) -> list:
    """The facts staff erased from ``character`` that it refuses (:func:`mark_erased`):
    list[str], oldest first."""
    return [str(c) for c in (character.db.erased_facts or ())]


#: lists that :func:`watching_retirements` hands out, innermost last: each gets the
#: retirements started while it is open
_watchers = []


@contextmanager
def watching_retirements() -> Iterator[list]:
    """
    Collect the retirements (:func:`retire_memory`) that start inside the ``with`` block, for
    a caller that deletes objects and wants to say what became of their memory (the
    ``destroy`` command: ``docs/design.md``, "Deleting an NPC").

    Yields:
        list[tuple[str, Deferred[dict]]]: ``(the NPC's name, its retirement's report)`` per
        retirement, in order; the reports are :func:`retire_memory`'s.
    """
    found = []
    _watchers.append(found)
    try:
        yield found
    finally:
        _watchers.remove(found)


def retire_memory(script) -> Deferred:
    """
    The NPC (or its script) is being deleted: move its archive and index into ``deleted/``,
    delete its Mem0 memories and per-NPC collection. Both run in the background and are
    logged; nothing waits for them.

    Returns:
        Deferred[RetirementReport]: never errbacks.
    """
    character = script.obj
    path = script.conversation.archive_path()
    jobs = []
    if archive_files(path):
        moved = _worker().run(_move_files, path)
        moved.addCallbacks(lambda paths: {"moved": paths},
                           lambda failure: {"moved": [], "file_error": failure.getErrorMessage()})
        jobs.append(moved)
    if character is not None and _memories_stored(character):
        from ..memory.mem0_payload import npc_agent_id

        jobs.append(_delete_memories(npc_agent_id(character), drop_collection=True))

    def _logged(results):
        report = {}
        for _ok, part in results:
            report.update(part)
        if report:
            logger.log_info(f"AI {character}: deleted; archive kept as {report.get('moved')}, "
                            f"Mem0 memories deleted: {report.get('memories')}"
                            + (f" ({report['file_error']})" if "file_error" in report else "")
                            + (f" ({report['memory_error']})" if "memory_error" in report else ""))
        return report

    done = defer.DeferredList(jobs).addCallback(_logged)
    for found in _watchers:
        report = defer.Deferred()
        found.append((character.key if character is not None else str(script), report))
        done.addCallback(_pass_on, report)
    return done


def _pass_on(result, report):
    """Fire ``report`` (a watcher's Deferred) with a copy of ``result``; return ``result``."""
    report.callback(dict(result))
    return result
