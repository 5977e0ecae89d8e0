"""
The quote repair: invented quotes stored before they were checked are found and taken out
(``docs/design.md``, "Summary fidelity", quotes; a sleep step,
:func:`ai_contrib.npc.sleep_phase.run_sleep_tick`).

A summary, synthesis or fact is checked quote by quote before it is stored
(:func:`ai_contrib.core.quotes.check_quotes`); what was stored before, or by older code, may
still quote a line nobody said, and be read back in every prompt. Each sleep this step checks
at most :data:`REPAIR_ITEMS` stored texts that hold a quote and were not checked yet: the
``[CONTEXT SUMMARY]`` markers in the runtime history and the entries of the journal (facts,
observations, syntheses; not facts heard in gossip, whose lines another NPC's archive holds).
A quote is checked against the archived lines that best match its
words (the archive's full-text index, :data:`SOURCE_HITS` lines a quote, on the memory worker
thread): what it costs grows with the texts checked, not with the archive.

A text with a failed quote loses the lines that hold it
(:func:`ai_contrib.core.quotes.without_failed_quotes`): a marker is replaced by its cleaned copy
(same id; a ``mask`` archive record, replayed like one) or, with nothing left, moved out of the
context (an ``evict`` record); a journal entry is rewritten or, with nothing left, removed, and
the Mem0 memories made from it are deleted, so that the next consolidation stores what is
left. Checked entries carry ``quotes_checked``; checked markers' ids are kept in
``script.db.quotes_checked`` (only those still in the history).
"""

from __future__ import annotations

from evennia.utils import logger
from twisted.internet import defer

from ..core.messages import SUMMARY_PREFIX, is_marker
from ..core.quotes import check_quotes, find_quotes, speaker_lines, without_failed_quotes
from ..memory.fulltext import index_for, match_expression
from ..memory.journal import ensure_journal
from ..settings import get_setting
from .compaction_runner import apply_masks_to_runtime

__all__ = ["REPAIR_ITEMS", "SOURCE_HITS", "repair_quotes"]

#: stored texts with a quote checked per sleep, at most
REPAIR_ITEMS = 20
#: archived lines read per quote: those whose words best match it (BM25)
SOURCE_HITS = 20
#: the headers a stored summary opens with, kept whatever its lines lose
_HEADERS = (SUMMARY_PREFIX, "[CONTEXT SYNTHESIS]")


def _quoted(text):
    """True when ``text`` holds a quote given as someone's words, or a quoted string."""
    return bool(find_quotes(text))


def _pending(script, character, limit):
    """``(markers, entries, unquoted)``: up to ``limit`` unchecked markers and journal entries
    that hold a quote, oldest first, and the unchecked entries without one or heard in gossip
    (marked checked without a look-up)."""
    done = set(script.db.quotes_checked or ())
    markers = [m for m in script.history if is_marker(m) and m["id"] not in done
               and _quoted(m.get("content") or "")][:limit]
    entries, unquoted = [], []
    for entry in ensure_journal(character.db.journal)["entries"]:
        if entry.get("quotes_checked"):
            continue
        # a fact heard in gossip was said to another NPC: this one's archive lacks its lines
        # (it is checked in the journal it was first written in)
        if entry.get("heard_from") or not _quoted(entry.get("content") or ""):
            unquoted.append(entry["id"])
        elif len(markers) + len(entries) < limit:
            entries.append(dict(entry))
    return markers, entries, unquoted


def _source_for(index, texts):
    """On the worker thread: ``{speaker: [line, ...]}`` of the archived lines that best match
    each quote of ``texts``, and the quotes with no word the index searches (not checked)."""
    docs, unsearchable = {}, set()
    for text in texts:
        for quote in find_quotes(text):
            if match_expression(quote.text, index.stop_words) is None:
                unsearchable.add(quote.text)
                continue
            for doc, _score in index.search(quote.text, SOURCE_HITS):
                docs[doc.get("seq")] = doc
    return speaker_lines(list(docs.values())), unsearchable


def _cleaned(text, said, unsearchable):
    """``(text, failures)``: ``text`` without the lines holding a failed quote (None when it
    had none), and how many quotes failed."""
    check = check_quotes(text, said)
    failures = [f for f in check.failures
                if f.quote.text not in unsearchable or f.reason.startswith("repeated")]
    if not failures:
        return None, 0
    check = type(check)(check.quotes, tuple(failures))
    kept = without_failed_quotes(text, check)
    if kept.strip() in _HEADERS:
        kept = ""
    return kept, len(failures)


def _repair_markers(script, markers, said, unsearchable):
    """Replace or move out the markers with a failed quote (archive record first). Returns
    ``(quotes removed, markers changed)``. Raises ArchiveError (that marker unchanged)."""
    removed = changed = 0
    for marker in markers:
        kept, failed = _cleaned(marker.get("content") or "", said, unsearchable)
        if kept is None:
            continue
        removed, changed = removed + failed, changed + 1
        if kept:
            meta = dict(marker.get("metadata") or {}, quotes_removed=failed)
            apply_masks_to_runtime(script.runtime, [dict(marker, content=kept, metadata=meta)],
                                   reason="quotes no one said")
        else:
            script.runtime.evict([marker["id"]], reason="quotes no one said")
    return removed, changed


def _repair_entries(character, entries, unquoted, said, unsearchable):
    """Rewrite or remove the journal entries with a failed quote and mark the rest checked.
    Returns ``(quotes removed, ids of the entries changed)``."""
    journal = ensure_journal(character.db.journal)
    verdicts = {e["id"]: _cleaned(e.get("content") or "", said, unsearchable) for e in entries}
    removed, changed, kept_entries = 0, [], []
    for entry in journal["entries"]:
        if entry["id"] in unquoted or entry["id"] in verdicts:
            kept, failed = verdicts.get(entry["id"], (None, 0))
            entry = dict(entry, quotes_checked=True)
            if kept is not None:
                removed += failed
                changed.append(entry["id"])
                if not kept:
                    continue
                entry["content"] = kept
        kept_entries.append(entry)
    journal["entries"] = kept_entries
    # a changed entry is consolidated into Mem0 again, as it now reads
    journal["consolidated_entry_ids"] = [
        jid for jid in journal["consolidated_entry_ids"] if jid not in set(changed)]
    if entries or unquoted:
        character.db.journal = journal
    return removed, changed


def _forget_memories(character, journal_ids):
    """Delete the Mem0 memories made from ``journal_ids``; Deferred[int | None] (None: Mem0
    off, or it failed: logged by the caller's report)."""
    if not journal_ids or not get_setting("MEMORY_ENABLED"):
        return defer.succeed(None)
    from ..memory.mem0_payload import npc_agent_id
    from ..memory.mem0_store import get_store

    d = get_store().delete_derived(npc_agent_id(character), journal_ids)
    return d.addErrback(lambda _failure: None)


def _worker():
    """The thread the archive's index is searched on: the Mem0 store's, else retrieval's."""
    from ..memory.mem0_store import get_store
    from ..memory.retrieval import _worker_for

    return _worker_for(get_store() if get_setting("MEMORY_ENABLED") else None)


@defer.inlineCallbacks
def repair_quotes(script, character, limit=REPAIR_ITEMS) -> defer.Deferred:
    """
    Check up to ``limit`` stored texts with a quote (module docstring) and take out the
    quotes that are not their speaker's words.

    Args:
        script (AssistantScript): the NPC's script. character: the NPC.
        limit (int): stored texts with a quote checked at most.

    Returns:
        Deferred[dict]: ``{"checked": int (texts looked up), "quotes_removed": int,
        "summaries": int (markers changed), "entries": int (journal entries changed),
        "memories": int | None (Mem0 memories deleted; None when none was asked or Mem0 is
        off)}``; when a quote was removed, one server line says how many. Errbacks on an
        archive or index that cannot be read or written (ArchiveError, FullTextError): what
        was done before stays done.
    """
    markers, entries, unquoted = _pending(script, character, limit)
    report = {"checked": len(markers) + len(entries), "quotes_removed": 0, "summaries": 0,
              "entries": 0, "memories": None}
    said, unsearchable = {}, set()
    if markers or entries:
        index = index_for(script.archive)
        texts = [m.get("content") or "" for m in markers] + [e["content"] for e in entries]
        said, unsearchable = yield _worker().run(_source_for, index, texts)
    removed, report["summaries"] = _repair_markers(script, markers, said, unsearchable)
    if markers:
        done = set(script.db.quotes_checked or ()) | {m["id"] for m in markers}
        # only the markers still in the history: the list stays as short as the context
        script.db.quotes_checked = [m["id"] for m in script.history
                                    if is_marker(m) and m["id"] in done]
        if report["summaries"]:
            script.checkpoint()
    more, changed = _repair_entries(character, entries, unquoted, said, unsearchable)
    report.update(quotes_removed=removed + more, entries=len(changed))
    report["memories"] = yield _forget_memories(character, changed)
    if report["quotes_removed"]:
        logger.log_info(f"AI quote repair {character}: {report['quotes_removed']} quote(s) "
                        f"not their speaker's words removed ({report['summaries']} summaries, "
                        f"{report['entries']} journal entries)")
    return report

