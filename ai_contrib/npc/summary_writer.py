"""
Who writes a compaction's summary: the summariser or an extract of the span
(``AI_COMPACT_SUMMARY_WRITER``; ``docs/design.md``, "Summary fidelity").

``"model"`` always asks the summariser, whose summary the fidelity guard may still replace;
``"extract"`` asks no model (:func:`ai_contrib.npc.compaction_runner.extract_instead`);
``"auto"`` (the default) asks the model while its summaries pass the guard, and writes the
extract once more than half of its recent ones failed, asking it again every fifth summary
(:func:`ai_contrib.core.fidelity.choose_summary_writer`). As with the fact extractor
(:mod:`ai_contrib.npc.extractor`), the outcomes are kept per client and model name for the
life of the client (the process-wide one: until the server restarts), so every NPC that
shares a summariser learns from its summaries, and a new client asks it afresh.
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass, field

from ..core.fidelity import SUMMARY_WINDOW, choose_summary_writer
from ..llm.client import get_client

#: ``{client: {model name: SummaryRecord}}``
_RECORDS = weakref.WeakKeyDictionary()


@dataclass
class SummaryRecord:
    """One model's recent summaries on one client."""

    #: True: kept; False: replaced by an extract; the newest last, at most
    #: :data:`~ai_contrib.core.fidelity.SUMMARY_WINDOW`
    outcomes: deque = field(default_factory=lambda: deque(maxlen=SUMMARY_WINDOW))
    #: extracts written without asking the model since it was last asked
    skipped: int = 0

    def asked(self, kept) -> None:
        """The model was asked and its summary ``kept`` (bool) or replaced."""
        self.outcomes.append(bool(kept))
        self.skipped = 0

    def not_asked(self) -> None:
        """An extract was written without asking the model."""
        self.skipped += 1


def summary_record(model) -> SummaryRecord:
    """The :class:`SummaryRecord` of ``model`` on the process's client (an empty one the first
    time)."""
    per_model = _RECORDS.setdefault(get_client(), {})
    return per_model.setdefault(str(model or ""), SummaryRecord())


def summary_writer(script, model) -> tuple[str, str | None]:
    """
    Who writes the NPC's next summary (``AI_COMPACT_SUMMARY_WRITER`` of ``script`` and
    ``model``'s :class:`SummaryRecord`). It changes nothing: the caller tells the record
    what was written (:meth:`SummaryRecord.asked`, :meth:`SummaryRecord.not_asked`).

    Returns:
        tuple: ``(writer, why)``: ``"model"`` and None, or ``"extract"`` and why the model is
        not asked (the fidelity's ``"model_reason"``).
    """
    setting = str(script.cfg("compact_summary_writer") or "auto").strip().lower()
    record = summary_record(model)
    if choose_summary_writer(setting, record.outcomes, record.skipped) == "model":
        return "model", None
    if setting == "extract":
        return "extract", 'not asked (AI_COMPACT_SUMMARY_WRITER is "extract")'
    failed = sum(1 for kept in record.outcomes if not kept)
    return "extract", (f"not asked: {failed} of the model's last {len(record.outcomes)} "
                       f"summaries failed the fidelity check")
