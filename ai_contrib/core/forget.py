"""
Forgetting one player (``docs/design.md``, "Forgetting a player"): what of an NPC's memory came
from what that player said, so that staff (``aiforget``) can remove it and nothing else.

What counts as the player's: the lines they said (``metadata["speaker"]``), the events they
did (``metadata["actor"]``: an emote, a gift), and the NPC's replies that answered only those
(``metadata["reply_to"]`` all among them: a reply may quote what it answers), the NPC's actions
of such a turn with them (the call and its result, which go together: a result without its call
would break the pairing chat APIs require, and is what the action's journal fact cites). A reply
to a turn in which others spoke too stays: it was said to them as well.

What was derived from those lines: a summary marker whose archive range holds one of them
and did not leave it out (``metadata["left_out_seqs"]``, ``docs/design.md``, "Summaries by
audience") is dropped whole: rewriting it would need a model call, and the other lines it
covered stay in the archive, where retrieval finds them; a journal entry that cites one of
them (``source_ids``), was told by the player (``speaker``) or heard from another NPC as
gossip the player said first (``origin_speaker``), or is the synthesis of a summary derived
from them.

All functions are pure; message shapes are those of :mod:`ai_contrib.core.messages`, journal
entries those of :mod:`ai_contrib.memory.journal`.
"""

from __future__ import annotations

from typing import TypedDict

from .messages import Message, is_marker

__all__ = ["derived_from", "forget_plan", "forgotten_lines", "forgotten_journal_ids"]


def forgotten_lines(messages, dbref) -> list[Message]:
    """
    The messages of ``messages`` that are the player ``dbref``'s (module docstring), in order.

    Args:
        messages (iterable[dict]): archived or runtime messages, oldest first (a reply comes
            after the lines it answers).
        dbref (str): the player character's dbref, ``"#12"``.

    Returns:
        list[dict]
    """
    dbref = str(dbref)
    ids, found = set(), []
    for msg in messages:
        if is_marker(msg):
            continue
        meta = msg.get("metadata") or {}
        theirs = meta.get("speaker") == dbref or meta.get("actor") == dbref
        if not theirs and msg.get("role") in ("assistant", "tool"):
            answered = [str(i) for i in meta.get("reply_to") or ()]
            theirs = bool(answered) and all(i in ids for i in answered)
        if theirs:
            ids.add(str(msg.get("id")))
            found.append(msg)
    return found


def derived_from(first_seq, last_seq, left_out_seqs, seqs) -> bool:
    """
    True when a summary of the archive range ``first_seq``..``last_seq`` that left out
    ``left_out_seqs`` was written from one of ``seqs`` (a set of archive seqs). A range that is
    not known (None) counts as derived when any ``seqs`` are given: it cannot be shown not to be.
    """
    if not seqs:
        return False
    if first_seq is None or last_seq is None:
        return True
    left_out = set(left_out_seqs or ())
    return any(first_seq <= seq <= last_seq and seq not in left_out for seq in seqs)


def forgotten_journal_ids(entries, name, line_ids, seqs, marker_ids) -> list[str]:
    """
    The ids of journal ``entries`` derived from the player's lines (module docstring).

    Args:
        entries (list[dict]): journal entries.
        name (str): the player's name as the journal records a ``speaker``.
        line_ids (set[str]): ids of the player's lines (:func:`forgotten_lines`).
        seqs (set[int]): their archive seqs.
        marker_ids (set[str]): ids of the summaries being dropped.

    Returns:
        list[str]: in journal order.
    """
    lowered = (name or "").strip().lower()
    found = []
    for entry in entries:
        if entry.get("source_type") == "compaction":
            first, last = (list(entry.get("archive_range") or ()) + [None, None])[:2]
            derived = entry.get("marker_id") in marker_ids or derived_from(
                first, last, entry.get("left_out_seqs"), seqs)
        else:
            # told by the player, or heard as gossip that the player said first
            # (docs/design.md, "Gossip")
            said_by = {str(entry.get(field) or "").strip().lower()
                       for field in ("speaker", "origin_speaker")}
            derived = (bool(set(map(str, entry.get("source_ids") or ())) & line_ids)
                       or (bool(lowered) and lowered in said_by))
        if derived:
            found.append(entry["id"])
    return found


class ForgetPlan(TypedDict):
    """What forgetting a player removes (:func:`forget_plan`)."""

    line_ids: list[str]  #: every line of theirs, archived or in context
    seqs: list[int]  #: their archive seqs: rows of the full-text index
    context_ids: list[str]  #: messages and summaries to take out of the runtime history
    lines_in_context: int  #: their lines among ``context_ids``
    summary_ids: list[str]  #: summaries dropped
    journal_ids: list[str]  #: journal entries derived from their words


def forget_plan(history, archived, journal_entries, dbref, name) -> ForgetPlan:
    """
    Everything to remove for forgetting player ``dbref`` (``name``).

    Args:
        history (list[dict]): the runtime history.
        archived (list[dict]): every archived message, oldest first (the player's lines that
            left the context are still indexed for retrieval).
        journal_entries (list[dict]): the NPC's journal entries.
        dbref (str): the player character's dbref. name (str): their name.

    Returns:
        ForgetPlan
    """
    lines = forgotten_lines(list(archived) + [m for m in history if m.get("seq") is None],
                            dbref)
    line_ids = {str(m.get("id")) for m in lines}
    seqs = sorted({m["seq"] for m in lines if isinstance(m.get("seq"), int)})
    in_context = [m for m in history if str(m.get("id")) in line_ids]
    summaries = []
    for msg in history:
        if is_marker(msg):
            meta = msg.get("metadata") or {}
            if derived_from(meta.get("first_seq"), meta.get("last_seq"),
                            meta.get("left_out_seqs"), set(seqs)):
                summaries.append(msg)
    summary_ids = [str(m["id"]) for m in summaries]
    journal_ids = forgotten_journal_ids(journal_entries, name, line_ids, set(seqs),
                                        set(summary_ids))
    return {
        "line_ids": sorted(line_ids),
        "seqs": seqs,
        "context_ids": [str(m["id"]) for m in in_context] + summary_ids,
        "lines_in_context": len(in_context),
        "summary_ids": summary_ids,
        "journal_ids": journal_ids,
    }
