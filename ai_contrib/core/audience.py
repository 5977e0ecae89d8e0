"""
Audience: who could hear a message when it was said, and what may be repeated in front of whom.

A reply is said aloud in a room, so everything its prompt carries (history, summaries, retrieved
memories, journal facts) must be something every current listener could have heard
(``docs/design.md``, "Privacy by audience"). Each message records its audience in
``metadata["audience"]``: the sorted dbrefs (``"#12"``) of the characters that could hear it (the
characters in the room for ``say``/``talk``, the speaker always among them; the NPC itself is not
listed). A derived item (a summary marker, a journal fact, a Mem0 memory) carries the
*intersection* of the audiences of the messages it came from: only those who heard all of them.

``None`` (no ``audience`` field) means public: system text, the persona, an admin's journal
entry, messages archived before audiences were recorded. A player's words never produce ``None``:
speech always records its audience.

All functions are pure.
"""

from __future__ import annotations

from .messages import is_marker

PUBLIC = None


def normalise_audience(audience) -> list | None:
    """
    The canonical form of an audience: a sorted list of unique non-empty strings, or ``None``
    (public).

    Args:
        audience (iterable[str] | None): dbrefs, in any order, possibly repeated.

    Returns:
        list[str] | None
    """
    if audience is None:
        return None
    return sorted({str(member) for member in audience if member})


def audience_of(msg) -> frozenset | None:
    """
    The audience of a message dict or any dict with a ``metadata`` field (journal entry, Mem0
    hit): a frozenset of dbrefs, or ``None`` when it is public. An ``audience`` field at the top
    level is read too (journal entries and Mem0 payloads carry it there).
    """
    meta = msg.get("metadata") or {}
    audience = meta.get("audience", msg.get("audience"))
    if audience is None:
        return None
    return frozenset(str(member) for member in audience)


def heard_by(msg, listeners) -> bool:
    """
    True when every one of ``listeners`` could have heard ``msg`` (or ``msg`` is public).

    Args:
        msg (dict): a message dict (``core/messages.py``) or any dict with an audience.
        listeners (iterable[str] | None): dbrefs of the characters who will hear the reply;
            ``None`` means no filter (admin tools).

    Returns:
        bool
    """
    if listeners is None:
        return True
    audience = audience_of(msg)
    return audience is None or frozenset(listeners) <= audience


def common_audience(items) -> list[str] | None:
    """
    The audience of something derived from ``items`` (message dicts or other dicts with an
    audience): the intersection of their audiences, public ones ignored.

    Returns:
        list[str] | None: sorted dbrefs (possibly empty: nobody heard all of them), or ``None``
        when every item is public.
    """
    common = None
    for item in items:
        audience = audience_of(item)
        if audience is None:
            continue
        common = audience if common is None else common & audience
    return normalise_audience(common)


def may_hear(items, present) -> dict[str, str] | list[str]:
    """
    Who of ``present`` may hear a reply built from ``items``: those who could have heard every
    one of them (``docs/design.md``, "Privacy by audience"). The room can change while a reply
    is written, and a line can be said before someone walks in and answered after: a reply is
    said aloud only when this is everyone present.

    Args:
        items (iterable[dict]): what the reply's prompt was built from: history messages (the
            turn's own lines among them), summary markers, notes (any dict with an audience).
        present (dict | iterable[str]): ``{dbref: name}`` (or dbrefs) of who hears the NPC now.

    Returns:
        dict[str, str] | list[str]: the members of ``present`` (a dict keeps their names,
        ``{dbref: name}``), in its order.
    """
    items = list(items)
    allowed = [member for member in present
               if all(heard_by(item, (member,)) for item in items)]
    if isinstance(present, dict):
        return {member: present[member] for member in allowed}
    return allowed


def _weight(msg):
    """How many lines ``msg`` stands for: a summary marker its ``compacted_count``, else 1."""
    if is_marker(msg):
        return max(1, int((msg.get("metadata") or {}).get("compacted_count") or 1))
    return 1


def shared_part(messages) -> tuple:
    """
    Split a compaction span into the lines its shared summary is written from and the lines
    left out of it (``docs/design.md``, "Privacy by audience", "Summaries by audience").

    A summary may be read only by those who heard every line it was made from. Made from a
    whole span in which bob told the NPC a secret alone, it could be read by bob only, and
    folded into the next one with lines only alice heard, by nobody: one private line would
    hide the running summary from everyone. So the summary is written for one listener group
    ``S``: the audience of one of the span's lines, chosen to cover the most
    (lines heard by S) x (members of S), ties going to the larger group, then to the first
    in sorted order. It is made from the lines every member of ``S`` heard (public lines
    among them); the others (a secret told to fewer, a conversation from before someone
    arrived, an earlier summary for a narrower group) are left out of it: they stay in the
    archive, where retrieval finds them for those who heard them, and facts taken from them
    are journaled with their own audience. The summary's audience (the
    :func:`common_audience` of what it was made from) always holds ``S``: it is never
    nobody.

    Args:
        messages (list[dict]): the span, oldest first (markers among them count as the
            lines they summarise, ``metadata["compacted_count"]``).

    Returns:
        tuple: ``(shared, left_out)``: two lists of the span's messages, each in span order.
        ``left_out`` is empty when every line has the same audience, every line is public,
        or no line has a listener at all (then nothing better can be chosen).
    """
    messages = list(messages)
    audiences = {audience_of(msg) for msg in messages}
    groups = audiences - {None, frozenset()}
    if not groups or (len(groups) == 1 and frozenset() not in audiences):
        return messages, []
    best, best_key = None, None
    for group in sorted(groups, key=sorted):
        covered = sum(_weight(msg) for msg in messages if heard_by(msg, group))
        key = (covered * len(group), len(group))
        if best_key is None or key > best_key:
            best, best_key = group, key
    shared = [msg for msg in messages if heard_by(msg, best)]
    left_out = [msg for msg in messages if not heard_by(msg, best)]
    return shared, left_out


def listener_views(messages, limit=None) -> list[list]:
    """
    The views of a span that a fact extraction reads one after another (``docs/design.md``,
    "Privacy by audience"): a fact takes the narrowest audience of everything its request
    showed (it may merge a public line with a private one and cite only the first), so one
    request over a span with a private line in it would make every fact of the span private.
    Each view is written for one listener group ``S`` (the audience of one of the span's
    messages): the messages every member of ``S`` heard, public ones among them. Every message
    someone heard is in the view of its own audience (so no two views are alike).

    The views come in the order they are read, the largest group first (ties to the view
    covering more, then to the first in sorted order): a group is read before every group it
    contains, so a fact of lines a wider group heard is journaled from that group's view, with
    its audience, before a narrower view (a long private talk after it) shows the same lines
    again (the extraction skips a fact its journal holds). With ``limit``, the views kept are
    the ``limit`` covering the most (lines heard by S) x (members of S), ties to the larger
    group, as :func:`shared_part` chooses; a line none of them shows is not read.

    Args:
        messages (list[dict]): the span, oldest first (markers count as the lines they
            summarise).
        limit (int, optional): views at most (one model turn each); default all.

    Returns:
        list[list[dict]]: the views, each in span order; ``[messages]`` when no message has
        a listener (every one public, or nobody's).
    """
    messages = list(messages)
    groups = {audience_of(msg) for msg in messages} - {None, frozenset()}
    if not groups:
        return [messages]
    ranked = []
    for group in groups:
        view = [msg for msg in messages if heard_by(msg, group)]
        covered = sum(_weight(msg) for msg in view)
        ranked.append((covered, group, view))
    ranked.sort(key=lambda item: (-item[0] * len(item[1]), -len(item[1]), sorted(item[1])))
    if limit is not None:
        ranked = ranked[:max(1, int(limit))]
    ranked.sort(key=lambda item: (-len(item[1]), -item[0], sorted(item[1])))
    return [view for _covered, _group, view in ranked]


def describe_audience(audience, names=None) -> str:
    """
    One line naming who may read something with ``audience`` (admin screens: ``aihistory``,
    the NPC's web page): ``"everyone"`` for public (None), ``"nobody"`` for an empty
    audience, else the members' names (``names``: ``{dbref: name}``; a dbref without a name
    is shown as itself), comma-separated, in the audience's order.
    """
    if audience is None:
        return "everyone"
    members = normalise_audience(audience)
    if not members:
        return "nobody"
    names = names or {}
    return ", ".join(f"{names[m]} ({m})" if names.get(m) else m for m in members)
