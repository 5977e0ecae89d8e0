"""
Retrieved memories as notes that stay where they were first shown (``docs/design.md``, "Recall
notes").

A model server reuses only the common prefix of the previous prompt (llama.cpp's slot cache, vLLM's
prefix cache, hosted APIs' cached-token discount). A memory section rebuilt at the end of every
prompt is therefore evaluated afresh on every reply. Instead, what retrieval returns for a turn is
kept as a *note* anchored at the turn's first line, and later prompts show it at that place again,
unchanged, so it becomes part of the cached prefix. A later turn adds a note only for what is not
already shown; when the notes outgrow the memory budget, the oldest go first.

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


def plan_recall(notes, items, anchor, history_ids, budget_tokens, render, count, listeners=None):
    """
    The notes after a turn's retrieval.

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
        notes dropped for room are gone), ``"shown": list[dict]`` (what the prompt shows, in
        order), ``"new": dict | None`` (the note added for this turn), ``"dropped": int`` (older
        notes given up to make room)}``.
    """
    alive = [note for note in notes if note["anchor"] in history_ids]
    shown = visible_notes(alive, history_ids, listeners)
    dropped = []
    while True:
        keys = {item["key"] for note in shown for item in note["items"]}
        fresh = [item for item in items if item["key"] not in keys]
        text = render(fresh) if fresh else ""
        tokens = count(text) if text else 0
        # dropping the oldest note costs the cache everything after it, once; keeping every
        # note would let the section grow past the budget the history was cut to leave for it
        if not shown or sum(note["tokens"] for note in shown) + tokens <= budget_tokens:
            break
        dropped.append(shown.pop(0))
    gone = {id(note) for note in dropped}
    state = [note for note in alive if id(note) not in gone]
    new = None
    if fresh and text:
        audience = None if listeners is None else sorted(listeners)
        new = {"anchor": anchor, "audience": audience, "items": fresh, "text": text,
               "tokens": tokens}
        state.append(new)
        shown.append(new)
    return {"notes": state, "shown": shown, "new": new, "dropped": len(dropped)}
