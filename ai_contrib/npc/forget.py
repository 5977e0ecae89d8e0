"""
Making an NPC forget one player (``docs/design.md``, "Forgetting a player"): staff's
``aiforget``, the request players of a long-running game make.

What goes (:func:`ai_contrib.core.forget.forget_plan` decides; this module does it): the
player's lines and the replies that answered only them, out of the runtime history (and its
checkpoint) and out of the archive's full-text index, so retrieval never finds them; the
summaries written from them (dropped whole, not rewritten: the other lines they covered stay in
the archive and retrieval); journal entries told by the player, citing their lines, or
synthesising a dropped summary; the Mem0 memories made from those entries or told by the
player; the NPC's people record of the player (and every other impression is made again
without the facts removed), the entity profile under their name, the pins about them, and the
recall and world notes of the current conversation (they may quote the player; the scene holds
the NPC's impression of them). The JSONL archive itself, the admin's lossless
record, keeps the raw lines until ``aireset`` deletes it.

Safe under crashes: the job is first written to ``script.db.forget_pending`` (an Attribute),
then a ``forget`` archive record takes the lines out of the runtime history (replayed after a
``kill -9`` like an eviction, and read by the full-text index, so a rebuilt index forgets them
again), then the journal, people records and pins change and the checkpoint is written; the
Mem0 deletion runs on the memory worker and the job is cleared only when it finished. A job
left pending by a crash runs again when the server starts (:func:`resume_pending`): every step
is idempotent.
"""

from __future__ import annotations

from datetime import datetime, timezone

from evennia.utils import logger
from evennia.utils.dbserialize import deserialize
from twisted.internet import defer

from ..core.forget import forget_plan
from ..memory.journal import ensure_journal
from ..settings import get_setting
from .erase import _worker, busy_reason
from .fetch_ahead import forget_ahead
from .pins import remove_player_pins
from .scene import PEOPLE_CATEGORY, people_record, update_impressions

__all__ = ["forget_player", "preview_forget", "resume_pending"]


def _read_archive(script):
    """Every archived message, read on the memory worker (the archive may be long)."""
    return _worker().run(script.archive.message_log)


def _plan(script, character, archived, dbref, name):
    journal = ensure_journal(deserialize(character.db.journal) or {})
    return forget_plan(script.history, archived, journal["entries"], dbref, name)


def preview_forget(script, character, dbref, name) -> defer.Deferred:
    """
    What :func:`forget_player` would remove, changing nothing.

    Returns:
        Deferred[dict]: :func:`ai_contrib.core.forget.forget_plan`'s dict plus ``"people"``
        (bool: a people record exists) and ``"pins"`` (int). Errbacks if the archive cannot
        be read.
    """
    def _preview(archived):
        plan = _plan(script, character, archived, dbref, name)
        plan["people"] = people_record(script, dbref) is not None
        plan["pins"] = sum(1 for pin in (character.attributes.get("ai_pins") or [])
                           if pin.get("player") == dbref)
        return plan

    return _read_archive(script).addCallback(_preview)


def _pending(script):
    return [dict(job) for job in (deserialize(script.db.forget_pending) or [])]


def _set_pending(script, jobs):
    script.db.forget_pending = jobs


def _forget_now(script, character, archived, dbref, name):
    """The reactor part: plan, record, remove. Returns ``(report, plan)``."""
    plan = _plan(script, character, archived, dbref, name)
    runtime = script.runtime
    removed = runtime.forget(dbref, plan["context_ids"], plan["seqs"])
    journal = ensure_journal(deserialize(character.db.journal) or {})
    gone = set(plan["journal_ids"])
    journal["entries"] = [e for e in journal["entries"] if e.get("id") not in gone]
    journal["consolidated_entry_ids"] = [
        jid for jid in journal["consolidated_entry_ids"] if jid not in gone]
    character.db.journal = journal
    # and it is not told them again by another NPC (docs/design.md, "Gossip")
    forgotten = [str(n) for n in (character.db.forgotten_players or ())]
    if name.strip().lower() not in {n.strip().lower() for n in forgotten}:
        character.db.forgotten_players = forgotten + [name.strip()]
    had_record = people_record(script, dbref) is not None
    if had_record:
        script.attributes.remove(str(dbref), category=PEOPLE_CATEGORY)
    update_impressions(script, character)  # others' impressions, without the facts removed
    pins = remove_player_pins(character, dbref)
    profiles = dict(deserialize(character.db.entity_profiles) or {})
    lowered = name.strip().lower()
    profile_names = [key for key in profiles if str(key).strip().lower() == lowered]
    for key in profile_names:
        del profiles[key]
    if profile_names:
        character.db.entity_profiles = profiles
    # notes of this conversation may quote them: the recall notes, the scene's impressions,
    # the pins about them
    script.ndb.recall_notes = None
    script.ndb.world_notes = None
    forget_ahead(script)  # a note fetched ahead may quote them too
    if script.ndb.pending:  # their lines still waiting for an answer are not answered
        forgotten = set(plan["context_ids"])
        script.ndb.pending[:] = [i for i in script.ndb.pending if i not in forgotten]
    script.checkpoint()
    report = {
        "lines": len(plan["line_ids"]),
        "index_rows": len(plan["seqs"]),
        "lines_in_context": sum(1 for m in removed if m["id"] not in plan["summary_ids"]),
        "summaries": len([m for m in removed if m["id"] in plan["summary_ids"]]),
        "journal_entries": len(plan["journal_ids"]),
        "people": had_record,
        "pins": len(pins),
        "profiles": len(profile_names),
    }
    return report, plan


def _delete_memories(character, name, plan):
    """Mem0's part, on the store's worker: the memories of the plan's journal entries, told by
    the player, or made from their lines. Deferred[dict]: ``{"memories": int | None}`` (None
    when Mem0 is off) or with ``"memory_error"``; never errbacks."""
    if not get_setting("MEMORY_ENABLED"):
        return defer.succeed({"memories": None})
    from ..memory.mem0_payload import npc_agent_id, player_key
    from ..memory.mem0_store import get_store

    try:
        d = get_store().delete_derived(npc_agent_id(character), plan["journal_ids"],
                                       player_key(name), plan["line_ids"])
    except Exception as err:  # misconfigured store: report it, the rest is done
        return defer.succeed({"memories": None, "memory_error": str(err)})
    d.addCallback(lambda count: {"memories": count})
    d.addErrback(lambda failure: {"memories": None, "memory_error": failure.getErrorMessage()})
    return d


def forget_player(script, character, dbref, name) -> defer.Deferred:
    """
    Make the NPC forget the player ``dbref`` called ``name`` (module docstring).

    Args:
        script (AssistantScript): the NPC's script; check
            :func:`ai_contrib.npc.erase.busy_reason` first (it is checked again once the
            archive has been read).
        character: the NPC. dbref (str): the player character's dbref. name (str): their name.

    Returns:
        Deferred[dict]: ``{"lines": int (their lines and the replies only to them, in the
        archive), "index_rows": int, "lines_in_context": int, "summaries": int (dropped),
        "journal_entries": int, "people": bool, "pins": int, "profiles": int, "memories": int
        | None (None: Mem0 off or failed, then ``"memory_error"``)}``, or ``{"busy": str}``
        when the NPC became busy meanwhile (nothing changed). Errbacks with ArchiveError when
        the archive cannot be read or written (nothing changed but the pending job, which the
        next start runs again).
    """
    job = {"player": str(dbref), "name": name,
           "at": datetime.now(timezone.utc).isoformat()}
    before = _pending(script)
    # written first: a crash from here on leaves a job the next start finishes
    _set_pending(script, [j for j in before if j.get("player") != job["player"]] + [job])

    def _now(archived):
        why = busy_reason(script)
        if why:
            if not any(j.get("player") == job["player"] for j in before):
                _set_pending(script, [j for j in _pending(script)
                                      if j.get("player") != job["player"]])
            return {"busy": why}
        report, plan = _forget_now(script, character, archived, job["player"], name)
        logger.log_info(f"AI {character}: forgot {name} ({dbref}): {report}")

        def _finished(memories):
            report.update(memories)
            if "memory_error" not in memories:
                _set_pending(script, [j for j in _pending(script)
                                      if j.get("player") != job["player"]])
            return report

        return _delete_memories(character, name, plan).addCallback(_finished)

    return _read_archive(script).addCallback(_now)


def resume_pending(script) -> defer.Deferred:
    """
    Run again the forget jobs a crash (or a Mem0 failure) left in ``script.db.forget_pending``
    (called when the server starts). Every step is idempotent.

    Returns:
        Deferred[list[dict]]: the reports; never errbacks (failures are logged and the job
        stays pending).
    """
    jobs = _pending(script)
    if not jobs or script.obj is None:
        return defer.succeed([])
    reports = []

    @defer.inlineCallbacks
    def _run():
        for job in jobs:
            try:
                report = yield forget_player(script, script.obj, job["player"], job["name"])
            except Exception as err:
                logger.log_err(f"AI {script.obj}: forgetting {job['name']} again failed: {err}")
                continue
            logger.log_info(f"AI {script.obj}: finished forgetting {job['name']}: {report}")
            reports.append(report)
        return reports

    return _run()
