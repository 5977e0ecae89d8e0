"""
The NPC's world in its reply prompt as anchored notes (``docs/design.md``, "The NPC's world").

Lore triggered by a turn and the scene the NPC stands in (place, time, who is present) are shown
in the same reply as the turn that needs them, right before that turn's first line, and stay
there, unchanged, on later replies: like recall notes (:mod:`ai_contrib.core.recall_notes`),
what was shown once becomes part of the prefix the model server caches. A section is added again
only when its text has changed (a new arrival changes the scene) or its note left the history
with a compaction. Pure functions.

A world note is a dict::

    {"anchor": str,            # id of the history message it is shown before
     "key": str,               # what it is about: "scene", "lore:<entry id>", "pins:<dbref>"
     "part": str,              # the receipt part: "scene", "lore", "pins"
     "text": str, "tokens": int,
     "audience": list | None,  # dbrefs it may be shown to together (None: anyone)
     "detail": dict | None}    # for the receipt (which key triggered a lore entry)
"""

from .recall_notes import visible_notes


def plan_world_notes(notes, sections, anchor, history_ids, listeners=None, budgets=None):
    """
    The world notes after a turn.

    Args:
        notes (list[dict]): the NPC's world notes so far, oldest first (module docstring).
        sections (list[dict]): what this turn's prompt should show, each ``{"key", "part",
            "text", "tokens", "audience" (optional), "detail" (optional)}``, in the order to
            show them.
        anchor (str): id of the first line of the turn being answered.
        history_ids (set[str]): ids of the messages the prompt shows.
        listeners (iterable[str], optional): dbrefs of who will hear the reply; a note whose
            ``audience`` does not hold all of them is not shown (None: no filter).
        budgets (dict, optional): ``{part: tokens}``: the shown notes of a part may take at
            most that many tokens together; a new section that does not fit is skipped.

    Returns:
        dict: ``{"notes": list[dict]`` (the new state), ``"shown": list[dict]`` (to show, in
        order), ``"new": list[dict]`` (added for this turn), ``"skipped": [{"key", "part",
        "reason": "budget"}]}``.
    """
    alive = [note for note in notes if note["anchor"] in history_ids]
    shown = visible_notes(alive, history_ids, listeners)
    latest = {}
    used = {}
    for note in shown:
        latest[note["key"]] = note
        used[note["part"]] = used.get(note["part"], 0) + int(note["tokens"])
    new, skipped = [], []
    for section in sections:
        before = latest.get(section["key"])
        if before is not None and before["text"] == section["text"]:
            continue
        part = section["part"]
        tokens = int(section.get("tokens") or 0)
        limit = (budgets or {}).get(part)
        if limit is not None and used.get(part, 0) + tokens > limit:
            skipped.append({"key": section["key"], "part": part, "reason": "budget"})
            continue
        used[part] = used.get(part, 0) + tokens
        note = {"anchor": anchor, "key": section["key"], "part": part, "text": section["text"],
                "tokens": tokens, "audience": section.get("audience"),
                "detail": section.get("detail")}
        new.append(note)
        latest[section["key"]] = note
    return {"notes": alive + new, "shown": shown + new, "new": new, "skipped": skipped}
