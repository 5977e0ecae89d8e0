"""
The one read model of an NPC's figures for staff: what ``ailist``, ``aihistory``, ``aiconfig``
and the staff web pages (:mod:`ai_contrib.web.snapshot`) show about its budget, usage,
compactions and journal, as plain JSON-ready dicts (``docs/design.md``, "Seeing the NPC's
mind"). The commands and the pages read these functions, never the script's Attributes
themselves, so a command and the page show the same figures for the same NPC.

Nothing here changes anything. On the website the functions run in the reactor thread
(:func:`ai_contrib.web.bridge.in_reactor`), where the runtime history is changed.
"""

from __future__ import annotations

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


def breaker_view(script) -> dict:
    """The compaction breaker: ``{"state": "closed" | "closed, failing" | "open",
    "failures": int, "last_error": str | None}``."""
    failures = int(script.db.compact_failures or 0)
    if breaker_open(script):
        state = "open"
    elif failures:
        state = "closed, failing"
    else:
        state = "closed"
    return {"state": state, "failures": failures, "last_error": script.db.compact_last_error}


def budget_view(script) -> dict:
    """
    The NPC's effective history budget and why it is what it is
    (:meth:`ai_contrib.npc.budgeting.BudgetHandler.info`; ``docs/design.md``, "The budget fits the
    model"). Starts no request.

    Returns:
        dict: ``{"tokens": int (the effective budget), "configured": int
        (``max_context_tokens``), "window": int | None (the model's context window when
        known), "source": str, "why": str}``: ``source`` is :data:`BUDGET_FROM_WINDOW` when the
        window cut the budget below the configured value, else where ``max_context_tokens``
        comes from (:data:`BUDGET_FROM_NPC`: the NPC's Attribute, :data:`BUDGET_FROM_GAME`:
        ``AI_MAX_CONTEXT_TOKENS``, :data:`BUDGET_FROM_DEFAULT`); ``why`` is one line in words:
        the window's arithmetic (:func:`ai_contrib.core.budget.effective_budget`'s ``source``)
        where it cut the budget, else where ``max_context_tokens`` comes from.
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


def persona_view(npc) -> dict:
    """
    The NPC's persona, the first system message of its reply prompts.

    Returns:
        dict: ``{"text": str, "source": "NPC" | "default"}`` (``default``: the persona a new
        NPC is given, :data:`ai_contrib.typeclasses.DEFAULT_PERSONA`, unchanged).
    """
    from ..typeclasses import DEFAULT_PERSONA

    text = str(npc.db.persona or "")
    default = DEFAULT_PERSONA.format(name=npc.key)
    return {"text": text, "source": "default" if text in ("", default) else "NPC"}


def npc_summary(npc, script) -> dict:
    """
    One NPC's figures: its line on the index page and in ``ailist``, the head of its page and
    of ``aihistory``.

    Returns:
        dict: ``{"id": int, "key": str, "dbref": str, "mode": "awake" | "sleep" | None,
        "tokens": int, "budget": int, "usage": float (fraction of the budget),
        "budget_source": str, "budget_why": str (:func:`budget_view`),
        "sleep_threshold": float, "emergency_threshold": float (fractions), "strategy": str,
        "last_compaction": str | None (ISO time), "compactions": int, "breaker":
        (:func:`breaker_view`), "has_script": bool}``; without a script (a broken NPC) only
        ``id``, ``key``, ``dbref`` and ``has_script`` = False.
    """
    base = {"id": npc.id, "key": npc.key, "dbref": npc.dbref, "has_script": script is not None}
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


def compaction_events(script, count=EVENTS_SHOWN) -> list[dict]:
    """
    The compaction log's last ``count`` events, oldest first.

    Returns:
        list[dict]: ``{"at": str | None, "trigger": str, "strategy": str, "success": bool,
        "before": int | None, "after": int | None (context tokens when recorded, else the
        compacted part's), "messages": int | None, "reduction": float | None (percent of the
        compacted part), "fidelity": float | None, "fidelity_replaced": bool (an extract
        replaced the model's summary), "error": str | None, "context": bool (True when
        before/after are the whole context's tokens)}``.
    """
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


def journal_page(npc, page=1, size=JOURNAL_PAGE_SIZE) -> dict:
    """
    One page of the NPC's journal, newest first: page 1 holds the newest ``size`` entries.

    Args:
        page (int): from 1; a page past the last gives the last.
        size (int): entries a page.

    Returns:
        dict: ``{"entries": [{"id", "importance", "source_type", "who" (the speaker, the
        entity, or for a fact heard from another NPC its chain, "Wren > Marta (1 hop)"),
        "content", "consolidated": bool, "timestamp", "support", "grounding",
        "model_support" (the fact's support by its line, or None)}] (newest first), "page": int,
        "pages": int (at least 1), "total": int, "consolidated": int}``.
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
