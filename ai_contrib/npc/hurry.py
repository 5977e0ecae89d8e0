"""
Memory work hurried near the budget (``docs/design.md``, "Hurried near the budget"): once the
history of an NPC whose compaction is under way reaches
:func:`ai_contrib.core.tick.hurry_threshold` (the talk outran the model), the model's fact
extraction and summary are no longer waited for. The requests in flight are cancelled (the
client aborts them, so the memory server stops evaluating them), the extraction journals the
span's facts by rule (:func:`ai_contrib.npc.extractor.journal_rule_facts`) and the summary is
an extract of the span (:func:`ai_contrib.npc.compaction_runner.extract_instead`): both take
milliseconds, so the compaction lands before the history passes its budget.

The model's requests register here while they run (:func:`unless_hurried`); the tick, which
decides when (:attr:`ai_contrib.core.tick.Due.hurry`, from the usage at which the work began,
:func:`ai_contrib.core.tick.hurry_at`), calls :func:`hurry`. The marks live in the script's
``ndb`` (a restart ends the work with them): ``work_began`` (that usage), ``hurried`` (True from
the hurry to the end of the work: the end of a compaction, :func:`work_ended`, or no work under
way) and ``hurry_waiters`` (the requests' cancellers).
"""

from __future__ import annotations

from evennia.utils import logger
from twisted.internet import defer

from ..core.tick import due

__all__ = ["Hurried", "HURRIED", "hurried", "hurry", "unless_hurried", "work_ended",
           "work_marks"]

#: why the model's work was not used (the fact extraction's ``stopped_by`` detail, the
#: summary's ``model_reason``)
HURRIED = "the history neared its budget while the model was writing"


class Hurried(Exception):
    """The model's request was cancelled because the NPC's memory work was hurried
    (:func:`hurry`); its caller finishes the work without the model."""


def work_marks(script, in_flight, usage) -> tuple[float | None, bool]:
    """
    The marks of the memory work of ``script``'s NPC for its tick state
    (:meth:`ai_contrib.npc.ticking.TickHandler.state`): with work ``in_flight``, the usage at
    which it began (``usage``, the current one, on the first look since it began) and whether
    it was hurried; with none, the marks are cleared for the next work.

    Returns:
        tuple: ``(work_began, hurried)`` (:class:`ai_contrib.core.tick.TickState`).
    """
    ndb = script.ndb
    if not in_flight:
        work_ended(script)
        return None, False
    if ndb.work_began is None:
        ndb.work_began = usage
    return ndb.work_began, bool(ndb.hurried)


def work_ended(script) -> None:
    """Clear the marks of the memory work of ``script``'s NPC at the end of a compaction (its
    fact extraction before it keeps them), so that the next one counts from its own start."""
    script.ndb.work_began = None
    script.ndb.hurried = False


def hurried(script) -> bool:
    """Whether the memory work of ``script``'s NPC is to be finished without the model now
    (:attr:`ai_contrib.core.tick.Due.hurry`; O(1): the running token total)."""
    return due(script.ticking.state()).hurry


def hurry(script) -> int:
    """
    Hurry the memory work of ``script``'s NPC to its end, and cancel the model's requests it is
    waiting for (registered by :func:`unless_hurried`); each waiter errbacks with
    :class:`Hurried`.

    Returns:
        int: requests cancelled (0 when none was in flight).
    """
    script.ndb.hurried = True  # to the end of the work: its summary is not asked for either
    waiters = list(script.ndb.hurry_waiters or ())
    if waiters:
        # read first: a cancelled request's caller finishes the compaction before this returns
        logger.log_warn(f"AI {script.obj}: context at {script.budgeting.usage():.0%} of its "
                        f"budget while memory work was under way: {len(waiters)} request(s) "
                        f"to the model cancelled; rules and an extract finish the compaction")
    for cancel in waiters:
        cancel()
    return len(waiters)


def unless_hurried(script, request) -> defer.Deferred:
    """
    ``request`` (a Deferred of the model's work for ``script``'s NPC, cancellable: the client's
    requests abort their connection) raced against :func:`hurry`: the Deferred returned fires
    with its result, or errbacks with :class:`Hurried` when the work is hurried first, and
    ``request`` is cancelled. Already hurried (:func:`hurried`), it is cancelled at once.

    Returns:
        Deferred: as ``request``, or errbacks with :class:`Hurried`.
    """
    waiters = script.ndb.hurry_waiters
    if waiters is None:
        waiters = script.ndb.hurry_waiters = set()
    out = defer.Deferred(lambda _: request.cancel())

    def cancel():
        waiters.discard(cancel)
        if not out.called:
            out.errback(Hurried(HURRIED))
        request.cancel()

    def settled(result):
        waiters.discard(cancel)
        if not out.called:
            out.callback(result)  # a Failure errbacks it
        return None  # the outcome of a hurried request is nobody's

    waiters.add(cancel)
    request.addBoth(settled)
    if hurried(script):
        cancel()
    return out
