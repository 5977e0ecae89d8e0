"""
Retrieved memories as notes that stay where they were first shown (``docs/design.md``, "Recall
notes").

A model server reuses only the common prefix of the previous prompt (llama.cpp's slot cache, vLLM's
prefix cache, hosted APIs' cached-token discount). A memory section rebuilt at the end of every
prompt is therefore evaluated afresh on every reply. Instead, what retrieval returns for a turn is
kept as a *note* anchored at the turn's first line, and later prompts show it at that place again,
unchanged, so it becomes part of the cached prefix. The first note may fill the memory budget; a
later turn adds a note only for what is not already shown, within the room the budget has left
and at most half of it; a change of subject gives up the newest notes until half the budget is
free.

A note is a dict::

    {"anchor": str,            # id of the history message it is shown before
     "audience": list | None,  # dbrefs who heard the reply it was made for (None: no filter)
     "items": [{"key": str, "kind": str, "line": str}, ...],  # retrieval candidates, best first
     "text": str,              # the rendered section(s), frozen so the prefix never changes
     "tokens": int}

Pure functions: the shell renders items and counts tokens (``render`` and ``count`` arguments).
"""


def visible_notes(notes, history_ids, listeners=None):
    """
    The notes a prompt may show, in order.

    Args:
        notes (list[dict]): notes (module docstring), oldest first.
        history_ids (set[str]): ids of the messages in the runtime history.
        listeners (iterable[str], optional): dbrefs of who will hear the reply; a note is shown
            only if every one of them heard the reply it was made for (its items were filtered
            for that audience; ``docs/design.md``, "Privacy by audience"). None: no filter.

    Returns:
        list[dict]: the notes whose anchor is still in the history and whose audience covers the
        listeners.
    """
    wanted = None if listeners is None else frozenset(listeners)
    shown = []
    for note in notes:
        if note["anchor"] not in history_ids:
            continue
        audience = note.get("audience")
        if wanted is not None and audience is not None and not wanted <= frozenset(audience):
            continue
        shown.append(note)
    return shown


#: the turn's best candidates looked at to tell a change of subject (none of them shown yet)
TOPIC_ITEMS = 3

#: share of the memory budget a note added beside shown notes may take, and a change of subject
#: frees by giving up the newest notes first: the next subject then finds room without giving
#: up the oldest note, which costs the cache nearly the whole prompt
TOPIC_ROOM = 0.5


def plan_recall(notes, items, anchor, history_ids, budget_tokens, render, count, listeners=None):
    """
    The notes after a turn's retrieval.

    Shown notes stay as they are, since any change costs the server's cache everything after
    it. This turn's candidates that no shown note holds are added as a new note, best first, as
    far as the room left in the budget allows: all of it when no note is shown, else at most
    :data:`TOPIC_ROOM` of the budget. When none of the turn's best
    :data:`TOPIC_ITEMS` candidates is shown, the subject has changed: the newest shown notes are
    given up, one at a time, until :data:`TOPIC_ROOM` of the budget is free. The newest first,
    because giving up a note costs the cache everything after its anchor, and the newest anchor
    has the least after it; older notes stay in the cached prefix until compaction takes their
    anchors (``docs/design.md``, "Recall notes").

    Args:
        notes (list[dict]): the NPC's notes so far, oldest first.
        items (list[dict]): this turn's retrieval candidates ``{"key", "kind", "line"}``, best
            first, already chosen within the memory budget.
        anchor (str): id of the first line of the turn being answered.
        history_ids (set[str]): ids of the messages in the runtime history.
        budget_tokens (int): tokens all shown notes may take together
            (``AI_MEMORY_RETRIEVAL_TOKEN_BUDGET``).
        render (callable): ``list[item] -> str``, the prompt text of a note.
        count (callable): ``str -> int``, tokens of a text.
        listeners (iterable[str], optional): dbrefs of who will hear the reply (see
            :func:`visible_notes`).

    Returns:
        dict: ``{"notes": list[dict]`` (the new state: notes whose anchor left the history and
        notes given up are gone), ``"shown": list[dict]`` (what the prompt shows, in order),
        ``"new": dict | None`` (the note added for this turn), ``"dropped": int`` (notes given
        up), ``"left_out": int`` (new candidates that found no room)}``.
    """
    alive = [note for note in notes if note["anchor"] in history_ids]
    shown = visible_notes(alive, history_ids, listeners)
    keys = {item["key"] for note in shown for item in note["items"]}
    dropped = []
    if shown and items and not any(item["key"] in keys for item in items[:TOPIC_ITEMS]):
        while shown and budget_tokens - sum(note["tokens"] for note in shown) \
                < budget_tokens * TOPIC_ROOM:
            dropped.append(shown.pop())
        keys = {item["key"] for note in shown for item in note["items"]}
    # the first note may take the whole budget: a memory question asked afresh gets all the
    # room there is; beside other notes, one takes at most TOPIC_ROOM, so that the next subject
    # finds room without giving a note up
    room = budget_tokens - sum(note["tokens"] for note in shown)
    if shown:
        room = min(room, budget_tokens * TOPIC_ROOM)
    chosen, text, tokens = [], "", 0
    fresh = [item for item in items if item["key"] not in keys]
    for item in fresh:
        trial = render(chosen + [item])
        cost = count(trial)
        if cost <= room:
            chosen, text, tokens = chosen + [item], trial, cost
    gone = {id(note) for note in dropped}
    state = [note for note in alive if id(note) not in gone]
    new = None
    if chosen:
        audience = None if listeners is None else sorted(listeners)
        new = {"anchor": anchor, "audience": audience, "items": chosen, "text": text,
               "tokens": tokens}
        state.append(new)
        shown = shown + [new]
    return {"notes": state, "shown": shown, "new": new, "dropped": len(dropped),
            "left_out": len(fresh) - len(chosen)}
