"""
What memory work an NPC is doing now, and when it is done: what ``aisleep`` and ``compact`` tell
an admin at once when they come while a compaction runs, and what ``compact`` waits for
(``docs/design.md``, "Memory work is never starved").

A second compaction beside a running one competes with it for the memory server, and the two
then time out together; a sleep asked for meanwhile starts its work only when the running one
ends (:func:`ai_contrib.core.tick.due`). So the admin is told what runs and what will happen,
and ``compact`` runs after it instead of beside it.

Reads the script's ``ndb`` only: ``memory_work`` (the NPC's own memory work, a Deferred),
``memory_work_kind`` (``"sleep"`` or ``"emergency"``, set beside it by
:meth:`ai_contrib.npc.ticking.TickHandler.start_memory_work`) and ``compacting`` (a compaction
of any origin is being written, or the fact extraction before an admin's ``compact`` runs:
:func:`ai_contrib.npc.compacting.compact_after_extraction` sets it from the extraction's start).
"""

from twisted.internet import defer

#: seconds between two looks at a compaction that is not the NPC's own memory work (an admin's
#: ``compact``, a cascade cycle): it holds no Deferred to wait on, only ``ndb.compacting``
POLL_SECONDS = 1.0

_KINDS = {"sleep": "sleep work", "emergency": "emergency compaction"}


def memory_under_way(script) -> str | None:
    """
    The memory work the NPC is doing now, in words for an admin, or None when it does none.

    Returns:
        str | None: ``"emergency compaction"``, ``"sleep work"``, ``"memory work"`` (its own,
        of no known kind) or ``"compaction"`` (another's: an admin's, a cascade cycle); what
        :func:`ai_contrib.core.tick.due` waits for before a sleep's work starts.
    """
    ndb = script.ndb
    if ndb.memory_work is not None:
        return _KINDS.get(ndb.memory_work_kind, "memory work")
    if ndb.compacting:
        return "compaction"
    return None


def when_memory_idle(script, reactor=None) -> defer.Deferred:
    """
    A Deferred that fires (with None) once :func:`memory_under_way` says nothing runs: at once
    when nothing does, else when the NPC's own memory work ends (its Deferred), looking again
    every :data:`POLL_SECONDS` for a compaction that is not. It errbacks only when cancelled
    (``CancelledError``), which stops the wait.
    """
    if reactor is None:
        from twisted.internet import reactor
    pending = []  # the scheduled next look, if any

    def cancel(_done):
        for call in pending:
            if call.active():
                call.cancel()

    done = defer.Deferred(cancel)

    def look():
        pending.clear()
        if done.called:  # cancelled meanwhile
            return
        work = script.ndb.memory_work
        if memory_under_way(script) is None:
            done.callback(None)
        elif work is not None:
            # the work's result goes on untouched: others chain on it too
            work.addBoth(lambda result: (pending.append(reactor.callLater(0, look)), result)[1])
        else:
            pending.append(reactor.callLater(POLL_SECONDS, look))

    look()
    return done
