"""
The one read model of an NPC's figures for staff: what ``ailist``, ``aihistory``, ``aiconfig``
and the staff web pages (:mod:`ai_contrib.web.snapshot`) show about its budget, usage,
compactions and journal, as plain JSON-ready dicts whose shapes are declared here as
``TypedDict`` classes (``docs/design.md``, "Seeing the NPC's mind"). The commands and the
pages read these functions, never the script's Attributes themselves, so a command and the page
show the same figures for the same NPC.

Nothing here changes anything. On the website the functions run in the reactor thread
(:func:`ai_contrib.web.bridge.in_reactor`), where the runtime history is changed.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from ..core.gossip import chain_text
from ..memory.journal import ensure_journal
from ..npc.compaction_runner import resolve_strategy
from ..memory.compaction_log import breaker_open
from ..settings import NPC_SOURCE, resolve_option

EVENTS_SHOWN = 50
#: journal entries on one page of the web page and of ``aihistory <npc>/journal``
JOURNAL_PAGE_SIZE = 20

#: where an NPC's effective history budget comes from (:func:`budget_view`'s ``"source"``)
BUDGET_FROM_WINDOW = "model window"
#: ``source`` labels of the configured value (as :func:`ai_contrib.admin.npc_config.effective_config`)
BUDGET_FROM_NPC, BUDGET_FROM_GAME, BUDGET_FROM_DEFAULT = "NPC", "game", "default"


class BreakerView(TypedDict):
    """The compaction breaker (:func:`breaker_view`)."""

    state: str  #: ``"closed"``, ``"closed, failing"`` or ``"open"``
    failures: int  #: automatic compactions failed in a row
    last_error: str | None  #: the last failure's error, None after a success


class BudgetView(TypedDict):
    """The effective history budget and why (:func:`budget_view`)."""

    tokens: int  #: the effective budget
    configured: int  #: ``max_context_tokens``
    window: int | None  #: the model's context window, when known
    #: :data:`BUDGET_FROM_WINDOW` when the window cut the budget below the configured value,
    #: else where ``max_context_tokens`` comes from (:data:`BUDGET_FROM_NPC`: the NPC's
    #: Attribute, :data:`BUDGET_FROM_GAME`: ``AI_MAX_CONTEXT_TOKENS``,
    #: :data:`BUDGET_FROM_DEFAULT`)
    source: str
    #: one line in words: the window's arithmetic
    #: (:func:`ai_contrib.core.budget.effective_budget`'s ``source``) where it cut the budget,
    #: else where ``max_context_tokens`` comes from
    why: str


class PersonaView(TypedDict):
    """The NPC's persona, the first system message of its reply prompts (:func:`persona_view`)."""

    text: str
    #: ``"default"``: the persona a new NPC is given,
    #: :data:`ai_contrib.typeclasses.DEFAULT_PERSONA`, unchanged; else ``"NPC"``
    source: str


class NPCSummary(TypedDict):
    """One NPC's figures (:func:`npc_summary`); without a script (a broken NPC) only ``id``,
    ``key``, ``dbref`` and ``has_script`` = False."""

    id: int
    key: str
    dbref: str
    has_script: bool
    mode: NotRequired[str | None]  #: ``"awake"``, ``"sleep"`` or None
    tokens: NotRequired[int]  #: the context's tokens now
    budget: NotRequired[int]  #: the effective budget (:class:`BudgetView` ``tokens``)
    usage: NotRequired[float]  #: ``tokens`` as a fraction of ``budget``
    budget_source: NotRequired[str]  #: :class:`BudgetView` ``source``
    budget_why: NotRequired[str]  #: :class:`BudgetView` ``why``
    sleep_threshold: NotRequired[float]  #: fraction of the budget
    emergency_threshold: NotRequired[float]  #: fraction of the budget
    strategy: NotRequired[str]  #: the compaction strategy in use
    last_compaction: NotRequired[str | None]  #: ISO time
    compactions: NotRequired[int]
    breaker: NotRequired[BreakerView]


class CompactionEvent(TypedDict):
    """One event of the compaction log as shown (:func:`compaction_events`)."""

    at: str | None  #: ISO time
    trigger: str | None
    strategy: str
    success: bool
    #: context tokens before and after when recorded (``context``), else the compacted part's
    before: int | None
    after: int | None
    messages: int | None  #: messages compacted
    reduction: float | None  #: percent of the compacted part
    fidelity: float | None  #: the summary's fidelity score
    fidelity_replaced: bool  #: an extract replaced the model's summary
    error: str | None
    context: bool  #: True when ``before``/``after`` are the whole context's tokens


class JournalRow(TypedDict):
    """One journal entry as shown (:func:`journal_page`)."""

    id: str
    importance: int | None
    source_type: str | None
    #: the speaker, the entity, or for a fact heard from another NPC its chain,
    #: ``"Wren > Marta (1 hop)"``
    who: str | None
    content: str
    consolidated: bool  #: stored in Mem0
    timestamp: str | None
    support: float | None  #: the fact's support by its line
    grounding: str | None
    model_support: float | None  #: the model's fact's support, where its line replaced it


class JournalPage(TypedDict):
    """One page of the NPC's journal (:func:`journal_page`)."""

    entries: list[JournalRow]  #: newest first
    page: int
    pages: int  #: at least 1
    total: int  #: entries in the journal
    consolidated: int  #: entries stored in Mem0


def breaker_view(script) -> BreakerView:
    """The compaction breaker (:class:`BreakerView`)."""
    failures = int(script.db.compact_failures or 0)
    if breaker_open(script):
        state = "open"
    elif failures:
        state = "closed, failing"
    else:
        state = "closed"
    return {"state": state, "failures": failures, "last_error": script.db.compact_last_error}


def budget_view(script) -> BudgetView:
    """
    The NPC's effective history budget and why it is what it is
    (:meth:`ai_contrib.npc.budgeting.BudgetHandler.info`; ``docs/design.md``, "The budget fits the
    model"). Starts no request.

    Returns:
        BudgetView
    """
    info = script.budget_info()
    _value, origin = resolve_option("max_context_tokens", script)
    configured_from = (BUDGET_FROM_NPC if origin == NPC_SOURCE else
                       BUDGET_FROM_GAME if origin.startswith("AI_") else BUDGET_FROM_DEFAULT)
    configured = {BUDGET_FROM_NPC: "this NPC's own (its Attribute)",
                  BUDGET_FROM_GAME: "the game's AI_MAX_CONTEXT_TOKENS",
                  BUDGET_FROM_DEFAULT: "the contrib's default"}[configured_from]
    if info.tokens < info.configured:
        source = BUDGET_FROM_WINDOW
        why = f"{info.source} (max_context_tokens {info.configured} is {configured})"
    else:
        source = configured_from
        window = (f", within the model context window {info.window}" if info.window
                  else "; the model's context window is not known yet")
        why = f"max_context_tokens {info.configured}, {configured}{window}"
    return {"tokens": int(info.tokens), "configured": int(info.configured),
            "window": info.window, "source": source, "why": why}


def persona_view(npc) -> PersonaView:
    """The NPC's persona, the first system message of its reply prompts (:class:`PersonaView`)."""
    from ..typeclasses import DEFAULT_PERSONA

    text = str(npc.db.persona or "")
    default = DEFAULT_PERSONA.format(name=npc.key)
    return {"text": text, "source": "default" if text in ("", default) else "NPC"}


def npc_summary(npc, script) -> NPCSummary:
    """
    One NPC's figures (:class:`NPCSummary`): its line on the index page and in ``ailist``, the
    head of its page and of ``aihistory``.
    """
    base: NPCSummary = {"id": npc.id, "key": npc.key, "dbref": npc.dbref,
                        "has_script": script is not None}
    if script is None:
        return base
    tokens = int(script.token_count())
    budget = budget_view(script)
    return {
        **base,
        "mode": script.db.operating_mode,
        "tokens": tokens,
        "budget": budget["tokens"],
        "usage": tokens / max(1, budget["tokens"]),
        "budget_source": budget["source"],
        "budget_why": budget["why"],
        "sleep_threshold": float(script.cfg("compact_sleep_threshold")),
        "emergency_threshold": float(script.cfg("compact_emergency_threshold")),
        "strategy": resolve_strategy(script),
        "last_compaction": script.db.last_compaction,
        "compactions": int(script.db.compaction_count or 0),
        "breaker": breaker_view(script),
    }


def compaction_events(script, count=EVENTS_SHOWN) -> list[CompactionEvent]:
    """The compaction log's last ``count`` events, oldest first (:class:`CompactionEvent`)."""
    events = []
    for e in list(script.db.compaction_log or [])[-count:]:
        before = e.get("context_before", e.get("original_tokens"))
        after = e.get("context_after", e.get("new_tokens"))
        events.append({
            "at": e.get("at"), "trigger": e.get("trigger"),
            "strategy": e.get("strategy", "summary"), "success": bool(e.get("success")),
            "before": before, "after": after, "messages": e.get("compacted_messages"),
            "reduction": e.get("reduction_pct"), "fidelity": e.get("fidelity"),
            "fidelity_replaced": bool(e.get("fidelity_replaced")), "error": e.get("error"),
            "context": "context_before" in e and "context_after" in e,
        })
    return events


def journal_page(npc, page=1, size=JOURNAL_PAGE_SIZE) -> JournalPage:
    """
    One page of the NPC's journal, newest first: page 1 holds the newest ``size`` entries.

    Args:
        page (int): from 1; a page past the last gives the last.
        size (int): entries a page.

    Returns:
        JournalPage
    """
    journal = ensure_journal(npc.db.journal)
    done = set(journal["consolidated_entry_ids"])
    newest = list(reversed(journal["entries"]))
    pages = max(1, -(-len(newest) // size))
    page = min(max(1, int(page)), pages)
    entries = [{
        "id": entry["id"], "importance": entry.get("importance"),
        "source_type": entry.get("source_type"),
        # a fact heard from another NPC: who said it first and the NPCs it passed through
        # (docs/design.md, "Gossip")
        "who": chain_text(entry) or entry.get("speaker") or entry.get("entity"),
        "content": entry.get("content") or "", "consolidated": entry["id"] in done,
        "timestamp": entry.get("timestamp"),
        # the fact's support by its line (docs/design.md, "Facts you can trust")
        "support": entry.get("support"), "grounding": entry.get("grounding"),
        "model_support": entry.get("model_support"),
    } for entry in newest[(page - 1) * size: page * size]]
    return {"entries": entries, "page": page, "pages": pages, "total": len(newest),
            "consolidated": len(done)}
