"""
What the staff pages and their JSON API show about AI NPCs, as plain JSON-ready dicts
(``docs/design.md``, "Seeing the NPC's mind"). The NPC's figures (budget, usage,
compactions, journal) come from :mod:`ai_contrib.admin.read_model`, which the in-game commands read
too, so the page and ``aihistory``/``ailist`` cannot disagree. Every function here reads the
NPC's script and must run in the reactor thread (:func:`ai_contrib.web.bridge.in_reactor`),
where the runtime history is changed; none of them changes anything.

Stored text (what players said, summaries, memories) is returned as it was stored: the HTML
templates escape it (Django's autoescape) and the page's script inserts it as text, never as
markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..admin.npcs import all_ai_npcs
from ..admin.read_model import compaction_events, journal_page, npc_summary, persona_view
from ..admin.receipt_views import receipts_by_seq, reply_records
from ..core.actions import action_view
from ..core.masking import is_masked
from ..core.messages import is_marker
from ..core.receipts import (
    describe_cost,
    describe_part,
    describe_recall,
    describe_skipped,
    memory_source,
    token_figures,
)
from ..npc.usage_log import usage_series

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

ARCHIVE_PAGE_SIZE = 50  # records per page of the raw archive
RECEIPTS_PAGE_SIZE = 5  # replies per page of the receipts


def all_npcs() -> list[dict]:
    """:func:`npc_summary` of every AI NPC, by name (list of dicts)."""
    return [npc_summary(npc, script) for npc, script in all_ai_npcs()]


def find_npc_by_id(npc_id) -> tuple:
    """
    The AI NPC with object id ``npc_id`` and its script.

    Returns:
        tuple: ``(npc, script)``; ``(None, None)`` when no AI NPC has that id (``script`` is
        None for an AI NPC whose script is missing).
    """
    for npc, script in all_ai_npcs():
        if npc.id == int(npc_id):
            return npc, script
    return None, None


def context_messages(script) -> list[dict]:
    """
    The runtime context, message by message, oldest first.

    Returns:
        list[dict]: ``{"seq": int | None, "role": str, "name": str | None, "kind": "summary" |
        "masked" | "action" | "message", "tokens": int | None, "content": str, "timestamp": str
        | None,
        "first_seq": int | None, "last_seq": int | None, "audience": str | None, "left_out":
        int}`` (the seq span for summaries; ``audience`` names who may read a summary,
        :func:`ai_contrib.npc.scene.audience_label`, None for other messages; ``left_out`` the
        lines a narrower group heard that its summary left out). An action's call and result
        (``docs/design.md``, "Actions") are ``"action"``, named and worded as ``aihistory``'s
        ``/raw`` shows them (:func:`ai_contrib.core.actions.action_view`); ``tokens`` counts the
        stored content.
    """
    from ..npc.scene import audience_label
    from ..core.tokens import count_tokens

    model = script.cfg("llm_model")
    out = []
    for msg in script.history:
        meta = msg.get("metadata") or {}
        kind = "summary" if is_marker(msg) else "masked" if is_masked(msg) else "message"
        action = action_view(msg, script.obj.key) if kind == "message" else None
        name, content = action or (msg.get("name"), msg.get("content") or "")
        out.append({
            "seq": msg.get("seq"), "role": msg.get("role"), "name": name,
            "kind": "action" if action else kind,
            "tokens": count_tokens(msg.get("content") or "", model),
            "content": content, "timestamp": msg.get("timestamp"),
            "first_seq": meta.get("first_seq"), "last_seq": meta.get("last_seq"),
            "audience": audience_label(script, meta.get("audience")) if kind == "summary"
            else None,
            "left_out": meta.get("left_out") or 0,
        })
    return out


def receipt_view(reply) -> dict:
    """
    A reply record (:func:`ai_contrib.admin.receipt_views.reply_records`) with its receipt
    described.

    Returns:
        dict: the record plus ``"cost"`` (one line, or None without a receipt),
        ``"figures"`` (:func:`ai_contrib.core.receipts.token_figures` or None), and in the
        receipt each part given a ``"label"``, each memory a ``"where"`` and ``"skipped"`` (what
        of the NPC's world was left out for room, in words) and ``"recall_time"`` (the time the
        reply had for new memories, :func:`ai_contrib.core.receipts.describe_recall`).
    """
    receipt = reply.get("receipt")
    if not receipt:
        return {**reply, "receipt": None, "cost": None, "figures": None}
    receipt = dict(receipt)
    receipt["parts"] = [{**p, "label": describe_part(p)} for p in receipt.get("parts") or []]
    receipt["memories"] = [{**m, "where": memory_source(m)} for m in receipt.get("memories") or []]
    receipt["skipped"] = describe_skipped(receipt.get("world_skipped"))
    receipt["recall_time"] = describe_recall(receipt.get("recall"))
    return {**reply, "receipt": receipt, "cost": describe_cost(receipt),
            "figures": token_figures(receipt)}


def audiences(script) -> list[dict]:
    """
    The audiences a memory search can be made for: every character who ever spoke to the NPC
    (from the archive's message log, so speakers whose lines were compacted count too).

    Returns:
        list[dict]: ``{"dbref": str, "name": str}``, by name.
    """
    names = {}
    for msg in script.archive.message_log():
        meta = msg.get("metadata") or {}
        if msg.get("role") == "user" and meta.get("speaker") and msg.get("name"):
            names[meta["speaker"]] = msg["name"]
    return [{"dbref": d, "name": n} for d, n in sorted(names.items(), key=lambda x: x[1].lower())]


def people_view(script) -> list[dict]:
    """
    The people the NPC has met (``docs/design.md``, "Scene, events and people"), the most
    recently spoken to first.

    Returns:
        list[dict]: ``{"name", "dbref", "first_met", "last_spoke" (ISO times or None),
        "lines" (int), "impression" (str), "actions" (list[str]: what the NPC did on their
        words, the newest first, :func:`ai_contrib.npc.scene.note_actions`)}``.
    """
    from datetime import datetime, timezone

    from ..npc.scene import all_people

    def iso(seconds):
        if not seconds:
            return None
        return datetime.fromtimestamp(float(seconds), timezone.utc).isoformat(timespec="seconds")

    return [{"name": r.get("name"), "dbref": r.get("dbref"), "first_met": iso(r.get("first_met")),
             "last_spoke": iso(r.get("last_spoke")), "lines": int(r.get("lines") or 0),
             "impression": r.get("impression") or "",
             "actions": [a.get("action") or "" for a in reversed(r.get("actions") or [])]}
            for r in all_people(script)]


def journal_view(npc, page=1) -> list[dict]:
    """
    One page of the NPC's journal (:func:`ai_contrib.admin.read_model.journal_page`), oldest first.

    Returns:
        list[dict]: the page's entries, ``{"id", "importance", "source_type", "who",
        "content", "consolidated": bool, "timestamp"}``.
    """
    return list(reversed(journal_page(npc, page)["entries"]))


def receipts_page(script, page=1, size=RECEIPTS_PAGE_SIZE) -> dict:
    """
    One page of the NPC's replies with their receipts (:func:`receipt_view`), newest first:
    page 1 holds the newest ``size``.

    Returns:
        dict: ``{"receipts": [dict], "page": int, "more": bool (an older page exists)}``.
    """
    page = max(1, int(page))
    replies = reply_records(script, page * size + 1)
    more = len(replies) > page * size
    newest = list(reversed(replies))[(page - 1) * size: page * size]
    return {"receipts": [receipt_view(r) for r in newest], "page": page, "more": more}


def npc_detail(npc, script, receipts=1, journal=1) -> dict:
    """
    Everything the NPC's page shows but the archive pages and the memory search.

    Args:
        receipts, journal (int): the page of the replies and of the journal to show (from 1).

    Returns:
        dict: :func:`npc_summary` plus ``"persona"`` (:func:`ai_contrib.admin.read_model.
        persona_view`), ``"usage_series"`` (``[{"at", "tokens", "budget"}]``,
        :mod:`ai_contrib.npc.usage_log`), ``"events"`` (:func:`compaction_events`), ``"context"``
        (:func:`context_messages`), ``"receipts"`` (:func:`receipt_view` of a page of
        replies, newest first) and ``"receipts_page"`` (``{"page", "more"}``), ``"journal"``
        (a page, oldest first) and ``"journal_page"`` (``{"page", "pages", "total",
        "consolidated"}``), ``"people"`` (:func:`people_view`), ``"audiences"``
        (:func:`audiences`) and ``"archive_last_seq"`` (int, -1 if empty).
    """
    detail = npc_summary(npc, script)
    if script is None:
        return detail
    replies = receipts_page(script, receipts)
    journal = journal_page(npc, journal)
    detail.update({
        "persona": persona_view(npc),
        "usage_series": usage_series(script),
        "events": compaction_events(script),
        "context": context_messages(script),
        "receipts": replies["receipts"],
        "receipts_page": {"page": replies["page"], "more": replies["more"]},
        "journal": list(reversed(journal["entries"])),
        "journal_page": {k: journal[k] for k in ("page", "pages", "total", "consolidated")},
        "people": people_view(script),
        "audiences": audiences(script),
        "archive_last_seq": script.archive.last_seq,
    })
    return detail


def archive_page(script, start=None, count=ARCHIVE_PAGE_SIZE) -> dict:
    """
    One page of the raw archive (every kind of record), by seq.

    Args:
        start (int, optional): the first seq; None for the last page.
        count (int): records at most (1 to 200).

    Returns:
        dict: ``{"start": int, "end": int, "last_seq": int, "records": [{"seq": int,
        "kind": str, "role": str | None, "name": str | None, "timestamp": str | None,
        "content": str, "in_context": bool, "has_receipt": bool}]}``; an action's call and
        result are named and worded as ``aihistory``'s ``/raw`` shows them
        (:func:`ai_contrib.core.actions.action_view`), the kind ``"action"``.
    """
    count = max(1, min(200, int(count)))
    archive = script.archive
    last = archive.last_seq
    if start is None:
        start = max(0, last - count + 1)
    start = max(0, int(start))
    end = min(start + count - 1, max(start, last))
    in_context = {m.get("id") for m in script.history}
    receipts = receipts_by_seq(script)
    records = []
    for rec in archive.records(start, end):
        msg = rec.get("msg") or {}
        name, kind = msg.get("name"), rec.get("kind")
        action = action_view(msg, script.obj.key) if kind == "message" else None
        if action:
            (name, content), kind = action, "action"
        elif kind == "message":
            content = msg.get("content") or ""
        elif rec.get("kind") == "compaction":
            content = ((rec.get("marker") or {}).get("content") or "")
        else:
            content = rec.get("reason") or ", ".join(str(x) for x in rec.get("ids") or [])
        records.append({
            "seq": rec["seq"], "kind": kind, "role": msg.get("role"),
            "name": name, "timestamp": msg.get("timestamp"),
            "content": content, "in_context": bool(msg) and msg.get("id") in in_context,
            "has_receipt": msg.get("seq") in receipts,
        })
    return {"start": start, "end": end, "last_seq": last, "records": records}


def search_memories(npc, script, query, audience=None) -> Deferred:
    """
    What the NPC would recall for ``query`` heard by ``audience``, read-only
    (:func:`ai_contrib.npc.recall.recall_preview`: the reply's own retrieval over Mem0 and
    the archive out of context).

    Args:
        audience (list[str], optional): dbrefs of who would hear the reply; None for no
            audience filter (everything the NPC knows).

    Returns:
        Deferred[dict]: ``recall_preview``'s dict with ``"audience"`` (the argument) added.
    """
    from ..npc.recall import recall_preview

    names = {a["dbref"]: a["name"] for a in audiences(script)}
    listeners = None if audience is None else {d: names.get(d, d) for d in audience}
    return recall_preview(script, npc, query, listeners).addCallback(
        lambda found: dict(found, audience=audience))
