"""
One stored item in full, for the admin commands whose tables crop: an archived message or
summary (``aihistory <npc>/show <seq or id>``), a journal entry (``aihistory <npc>/journal
<id>``), a Mem0 memory (``aimemory <npc>/show <memory id>``).

Every field is shown except secrets (keys named like ``api_key``, ``authorization``,
``password``, ``secret``; values are also passed through the client's redaction,
``docs/design.md``, "Secrets"), and every stored string goes through
:func:`ai_contrib.core.text.inert_markup`: it is data, no markup in it may render
(``docs/design.md``, "Player text is data").
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping, Sequence

from ..core.redact import redact
from ..core.text import inert_markup
from ..memory.archive import ArchiveRecord
from ..settings import get_setting

WIDTH = 80  # columns of the screen the text is wrapped to
_SECRET_KEY = re.compile(r"(?i)api_?key|authori[sz]ation|password|secret")
# the fields shown as the item's text block, after the other fields
_TEXT_FIELDS = ("content", "text")


def safe(value) -> str:
    """``value`` as a string fit for an admin's screen: secrets masked, markup inert."""
    if isinstance(value, Mapping):
        value = dict(value)
    elif isinstance(value, Sequence) and not isinstance(value, str):
        value = list(value)
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return inert_markup(redact(value, (get_setting("LLM_API_KEY") or "",)))


def _flatten(data, prefix=""):
    """``[(dotted key, value), ...]`` of a nested dict, secrets and text fields left out."""
    rows = []
    for key, value in data.items():
        if _SECRET_KEY.search(str(key)) or (not prefix and key in _TEXT_FIELDS):
            continue
        label = f"{prefix}{key}"
        # Attributes come back as Evennia's _SaverDict/_SaverList: test the abstract types
        if isinstance(value, Mapping) and value:
            rows += _flatten(value, f"{label}.")
        elif (isinstance(value, Sequence) and not isinstance(value, str)
              and all(isinstance(v, str) for v in value)):
            rows.append((label, ", ".join(value) if value else "-"))
        else:
            rows.append((label, "-" if value is None else value))
    return rows


def render(title, data, text=None) -> str:
    """
    An item as lines: the title, one ``key: value`` line per field (nested dicts as
    ``metadata.speaker``), then the full text wrapped to :data:`WIDTH` columns.

    Args:
        title (str): the first line (markup allowed: it is ours, not stored text).
        data (dict): the stored item.
        text (str, optional): the text block; default ``data["content"]`` or ``data["text"]``.

    Returns:
        str
    """
    if text is None:
        text = next((data[k] for k in _TEXT_FIELDS if isinstance(data.get(k), str)), None)
    lines = [title]
    for label, value in _flatten(data):
        lines.append(textwrap.fill(f"{label}: {safe(value)}", WIDTH, subsequent_indent="    ",
                                   break_on_hyphens=False))
    if text is not None:
        lines.append("|w--- text ---|n")
        for paragraph in safe(text).split("\n"):
            lines.append(textwrap.fill(paragraph, WIDTH, break_on_hyphens=False) or "")
    return "\n".join(lines)


def find_archive_record(script, key) -> ArchiveRecord | None:
    """
    An archive record of the NPC by ``seq`` (digits) or by the id of a message or summary.

    Summaries (``[CONTEXT SUMMARY]`` markers) have no ``seq`` of their own: they are found by
    the seq of their ``compaction`` record, or by id, in the runtime history first.

    Cost: one pass over the archive file at most; lines that cannot match are not parsed.

    Returns:
        ArchiveRecord | None: a summary in context that the
        archive does not hold (a marker of an older version) as ``{"kind": "summary",
        "marker": <marker>}``.
    """
    key = key.strip()
    archive = script.archive
    if key.isascii() and key.isdecimal():  # "²" is a digit to isdigit(), not to int()
        for record in archive.records(int(key), int(key)):
            return record
        # no such seq: a message id (12 hex characters) may be all digits too
    needle = json.dumps(key).encode()
    for _seq, _start, line, _record in archive.tail(kinds=()):
        if needle not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == "message" and record["msg"].get("id") == key:
            return record
        if record.get("kind") == "compaction" and (record.get("marker") or {}).get("id") == key:
            return record
    for msg in script.history:
        if msg.get("id") == key:
            return {"kind": "summary", "seq": None, "marker": msg}
    return None


def archive_item(npc, script, record) -> str:
    """The full view of an archive record found by :func:`find_archive_record`."""
    in_context = {m["id"] for m in script.history}
    kind = record.get("kind")
    if kind == "message":
        msg = record["msg"]
        where = "in context" if msg.get("id") in in_context else "out of context"
        return render(f"|wArchive record {record['seq']} of {npc.key}|n: message, {where}", msg)
    if kind in ("compaction", "summary"):
        marker = record.get("marker") or {}
        where = "in context" if marker.get("id") in in_context else "folded or out of context"
        fields = {k: v for k, v in record.items() if k not in ("marker", "kind")}
        fields.update({"summary_" + k: v for k, v in marker.items() if k != "content"})
        seq = record.get("seq")
        title = (f"|wArchive record {seq} of {npc.key}|n: summary ({where})" if seq is not None
                 else f"|wSummary of {npc.key}|n ({where}, no archive record)")
        return render(title, fields, marker.get("content") or "")
    fields = {k: v for k, v in record.items() if k != "kind"}
    return render(f"|wArchive record {record.get('seq')} of {npc.key}|n: {kind}", fields, "")


def journal_item(npc, entry, consolidated) -> str:
    """The full view of journal entry ``entry`` (a dict); ``consolidated``: in Mem0 or not."""
    title = (f"|wJournal entry of {npc.key}|n "
             f"({'consolidated into Mem0' if consolidated else 'not in Mem0 yet'})")
    return render(title, dict(entry))


def memory_item(npc, hit) -> str:
    """The full view of a Mem0 memory (:meth:`~ai_contrib.memory.mem0_store.Mem0Store.get`)."""
    data = {k: v for k, v in hit.items() if k not in ("score", "text")}
    return render(f"|wMemory of {npc.key}|n", data, hit.get("text") or "")
