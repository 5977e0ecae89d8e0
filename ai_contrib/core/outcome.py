"""
The one shape of a step of memory work's outcome (``docs/design.md``, "Summary compaction",
result dicts): a compaction (:class:`ai_contrib.core.compaction.CompactionResult`), a fact
extraction (:class:`ExtractionResult`), a journal consolidation into Mem0
(:class:`ConsolidationResult`) or a housekeeping step of a sleep (:class:`StepResult`) either ran
(``"success"``), declined to run (``"skipped"``, with a ``reason`` in words) or broke off
(``"failed"``, with an ``error``). Every path that declines says so the same way; the results
travel as objects and become dicts only where they are stored or sent (:meth:`as_dict`).

Nothing here imports Evennia, Twisted or Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SUCCESS, SKIPPED, FAILED = "success", "skipped", "failed"


class Outcome:
    """What a result with an ``outcome`` field (:data:`SUCCESS`, :data:`SKIPPED`,
    :data:`FAILED`) reads as."""

    outcome: str

    @property
    def success(self) -> bool:
        """True when the step ran to its end."""
        return self.outcome == SUCCESS

    @property
    def skipped(self) -> bool:
        """True when the step declined to run (``reason`` says why)."""
        return self.outcome == SKIPPED

    @property
    def failed(self) -> bool:
        """True when the step broke off (``error`` says why)."""
        return self.outcome == FAILED


@dataclass
class ExtractionResult(Outcome):
    """
    What one pre-compaction fact extraction did (``docs/design.md``, "Pre-compaction fact
    extraction"; :func:`ai_contrib.npc.extraction.run_pre_compaction_extraction`).

    ``reason`` says why a skipped one did not start (disabled, history too short, another one
    of the NPC running), ``error`` why a failed one broke off (what it journaled before stays).
    ``read_ids`` are the ids of the history messages its requests showed (None when it did not
    run to its end); ``stopped_by`` is ``"noop"``, ``"no_tool_call"``, ``"scope_guard"``,
    ``"max_iterations"``, ``"error"``, ``"rule"`` (no model asked), ``"hurried"`` (the model's
    run cancelled near the budget, the rules read the span) or None (skipped);
    ``modes`` the request modes used (``"structured"``, ``"native"``, ``"text"``; ``"rule"``
    where facts were read by rule, ``docs/design.md``, "Facts players said"). ``facts_replaced`` and ``facts_rejected``
    count the calls whose fact failed the one-line check and was stored as its source line, or
    not stored (``docs/design.md``, "Facts you can trust").
    """

    outcome: str
    reason: str | None = None
    error: str | None = None
    facts_recorded: int = 0
    observations_recorded: int = 0
    iterations: int = 0
    stopped_by: str | None = None
    entry_ids: list = field(default_factory=list)
    read_ids: list | None = None
    modes: list | None = None
    facts_replaced: int = 0
    facts_rejected: int = 0

    @classmethod
    def skip(cls, reason) -> ExtractionResult:
        """An extraction that did not start, because of ``reason`` (str)."""
        return cls(SKIPPED, reason=reason)

    def as_dict(self) -> dict[str, Any]:
        """
        The documented dict (logs, tests of the format): ``{"success": True, "read_ids",
        "facts_recorded", "observations_recorded", "iterations", "stopped_by", "entry_ids",
        "modes", "facts_replaced", "facts_rejected"}`` for a run, ``{"success": True,
        "skipped": True, "reason", "facts_recorded": 0, "iterations": 0, "stopped_by": None}``
        for a skip, ``{"success": False, "error", "facts_recorded", "observations_recorded",
        "iterations", "stopped_by": "error", "entry_ids", "facts_replaced",
        "facts_rejected"}`` for a failure.
        """
        if self.skipped:
            return {"success": True, "skipped": True, "reason": self.reason,
                    "facts_recorded": 0, "iterations": 0, "stopped_by": None}
        if self.failed:
            out = {"success": False, "error": self.error}
        else:
            out = {"success": True, "read_ids": list(self.read_ids or [])}
        out.update(facts_recorded=self.facts_recorded,
                   observations_recorded=self.observations_recorded,
                   iterations=self.iterations, stopped_by=self.stopped_by,
                   entry_ids=list(self.entry_ids), facts_replaced=self.facts_replaced,
                   facts_rejected=self.facts_rejected)
        if self.success:
            out["modes"] = list(self.modes or [])
        return out


@dataclass
class ConsolidationResult(Outcome):
    """
    What one journal -> Mem0 consolidation did (``docs/design.md``, "Journal and Mem0";
    :func:`ai_contrib.memory.consolidation.consolidate_journal`): ``added`` entries stored now,
    ``already_stored`` ones Mem0 held already (both marked consolidated). A skipped one did not
    run (``reason``: Mem0 is off); a failed one marked nothing (``error``), so the next sleep
    retries.
    """

    outcome: str
    reason: str | None = None
    error: str | None = None
    added: int = 0
    already_stored: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The documented dict: ``{"success": bool, "added": int, "skipped": int}`` (``skipped``:
        :attr:`already_stored`), with ``"disabled": True`` when Mem0 is off and ``"error"`` when
        it failed."""
        out = {"success": not self.failed, "added": self.added, "skipped": self.already_stored}
        if self.skipped:
            out["disabled"] = True
        if self.failed:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class StepResult(Outcome):
    """
    What one housekeeping step of a sleep did (``docs/design.md``, "Sleep phase";
    :class:`ai_contrib.npc.sleep_phase.SleepStep`): it ran (``figures``, its counts by name),
    declined to run (``reason``) or broke off (``error``).

    ``figures`` by step: ``entity_consolidation`` the entity stats
    (:func:`ai_contrib.memory.housekeeping.consolidate_entities`), ``episodic_prune``
    ``{"pruned": int}``, ``gossip`` ``{"received": int, "peers": int, "networks": [str]}``,
    ``quote_repair`` ``{"checked": int, "quotes_removed": int, "summaries": int, "entries":
    int}``, ``archive_vectors`` ``{"embedded": int}`` (archived lines given vectors),
    ``people_impressions`` ``{"people": int, "updated": int}``.
    """

    outcome: str = SUCCESS
    figures: dict = field(default_factory=dict)
    reason: str | None = None
    error: str | None = None

    @classmethod
    def of(cls, value) -> StepResult:
        """
        The record of what a step's function returned: a :class:`StepResult` as it is; an int
        (a count of lines embedded) as ``{"embedded": n}``; a dict with ``"success": False``
        as a failure (its ``"error"``), with ``"skipped": True`` as a skip (its ``"reason"``),
        else as the figures (``"success"`` left out); None as no figures.
        """
        if isinstance(value, StepResult):
            return value
        if isinstance(value, int):
            return cls(figures={"embedded": value})
        data = dict(value or {})
        if data.get("success") is False:
            return cls(FAILED, error=str(data.get("error") or "failed"))
        data.pop("success", None)
        if data.get("skipped") is True:  # a step's count of things it skipped is a figure
            data.pop("skipped")
            return cls(SKIPPED, data, reason=data.pop("reason", None))
        return cls(SUCCESS, data)

    @classmethod
    def fail(cls, error) -> StepResult:
        """A step that broke off, because of ``error`` (str)."""
        return cls(FAILED, error=str(error))

    def count(self, name) -> int:
        """The figure ``name`` as an int (0 when the step gave none)."""
        return int(self.figures.get(name) or 0)

    def as_dict(self) -> dict[str, Any]:
        """The stored dict: the figures for a run, ``{"success": True, "skipped": True,
        "reason": str, ...figures}`` for a skip, ``{"success": False, "error": str}`` for a
        failure."""
        if self.failed:
            return {"success": False, "error": self.error}
        if self.skipped:
            return {"success": True, "skipped": True, "reason": self.reason, **self.figures}
        return dict(self.figures)


@dataclass
class SleepResults:
    """
    What each step of a sleep phase did (``docs/design.md``, "Sleep phase";
    :func:`ai_contrib.npc.sleep_phase.run_sleep_tick`), in the order the steps run. A step not run
    is None (the fact extraction runs only when compaction is due or enough was said). Each
    housekeeping step gives a :class:`StepResult` (its figures by step there):
    ``entity_consolidation``, ``episodic_prune``, ``gossip``
    (``ai_contrib.npc.gossip.receive_gossip``), ``quote_repair``
    (``ai_contrib.npc.quote_repair.repair_quotes``), ``archive_vectors``
    (``ai_contrib.npc.recall.embed_archive``), ``people_impressions``
    (``ai_contrib.npc.scene.update_impressions``).
    """

    entity_consolidation: StepResult | None = None
    episodic_prune: StepResult | None = None
    pre_compaction_extraction: ExtractionResult | None = None
    context_compaction: Any = None  # a CompactionResult (core/compaction.py imports this module)
    gossip: StepResult | None = None
    quote_repair: StepResult | None = None
    memory_consolidation: ConsolidationResult | None = None
    archive_vectors: StepResult | None = None
    people_impressions: StepResult | None = None

    def as_dict(self) -> dict[str, dict[str, Any]]:
        """``{step: result dict}`` for each step run, in the order they ran."""
        out = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is not None:
                out[name] = value.as_dict() if hasattr(value, "as_dict") else value
        return out
