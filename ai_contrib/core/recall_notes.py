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

A note is a plain dict (kept in ``script.ndb.recall_notes``) whose fields :class:`RecallNote`
declares.

A note is checked against its source each time it is shown: staff who erase what an item came
from (``aigossip/erase``, ``aiforget``, ``aireset``) leave *marks* of it (:func:`item_marks`),
and a note holding a marked item is let go on the next reply (:func:`plan_recall`'s
``withdrawn``), as is a marked candidate a retrieval under way still found.

Pure functions: the shell renders items and counts tokens (``render`` and ``count`` arguments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict


class NoteItem(TypedDict):
    """
    One memory of a note: a retrieval candidate as the prompt shows it
    (:func:`ai_contrib.memory.retrieval.note_items`).
    """

    key: str  #: the candidate's key, unique among the NPC's memories
    kind: str  #: ``"message"`` (an archived line), ``"memory"`` (Mem0) or ``"experience"``
    line: str  #: the prompt bullet
    source: NotRequired[str]  #: ``"archive"`` or ``"mem0"``
    ref: NotRequired[str]  #: the archive seq, or the Mem0 or journal id
    score: NotRequired[float]  #: the fused retrieval score
    stamp: NotRequired[str]  #: an archived line's time, shown once for lines said together
    said: NotRequired[str]  #: an archived line's bullet without its time
    seq: NotRequired[int]  #: an archived line's archive seq
    journal_id: NotRequired[str]  #: a Mem0 memory's journal entry
    chain: NotRequired[str]  #: a fact heard from another NPC: its provenance


class RecallNote(TypedDict):
    """A note (module docstring)."""

    anchor: str | None  #: id of the history message it is shown before (None: the turn to come)
    audience: list[str] | None  #: dbrefs who heard the reply it was made for (None: no filter)
    items: list[NoteItem]  #: retrieval candidates, best first
    text: str  #: the rendered section(s), frozen so the prefix never changes
    tokens: int  #: ``text``'s tokens
    #: a note planned ahead (:func:`plan_ahead`, ``ai_contrib.npc.fetch_ahead``): the id of the
    #: message it was warmed after, and the prompt's start then
    after: NotRequired[str | None]
    head: NotRequired[Any]


def visible_notes(notes, history_ids, listeners=None) -> list:
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
    return [note for note in notes
            if note["anchor"] in history_ids and _covers(note.get("audience"), listeners)]


def item_marks(item) -> set:
    """
    What identifies the source of a recall item (module docstring): its key (``"m:<memory
    id>"``, ``"a:<line id>"``) and, for a Mem0 memory made from a journal entry, ``"j:<journal
    id>"``.

    Returns:
        set[str]
    """
    marks = {str(item.get("key"))}
    if item.get("journal_id") is not None:
        marks.add(f"j:{item['journal_id']}")
    return marks


def withdraw(notes, items, withdrawn) -> tuple:
    """
    The notes and candidates less those whose source was erased: a note holding an item one
    of whose :func:`item_marks` is in ``withdrawn`` leaves whole (its text is frozen: it cannot
    lose one line), a marked candidate is not shown again. O(items of the notes + items).

    Args:
        notes (list[dict]): notes (module docstring), oldest first.
        items (list[dict]): this turn's candidates.
        withdrawn (set[str] | dict | None): marks of erased sources (looked up, never
            scanned); None or empty: nothing to check.

    Returns:
        tuple: ``(notes, items, count)``: new lists, and how many notes left.
    """
    if not withdrawn:
        return list(notes), list(items), 0

    def erased(item):
        return any(mark in withdrawn for mark in item_marks(item))

    kept = [note for note in notes if not any(erased(item) for item in note["items"])]
    return kept, [item for item in items if not erased(item)], len(notes) - len(kept)


#: the turn's best candidates looked at to tell a change of subject (none of them shown yet)
TOPIC_ITEMS = 3

#: what a question about the past may spend giving up other subjects' notes (the prompt after
#: them evaluated again), in note allowances, beside the allowance of its own note: taken from
#: the note's, the notes of subjects a few questions back, once newer notes sit after them,
#: cost more to give up than is left and keep half the budget for good. Twice gained a little
#: evidence and doubled the tokens the second reply on a subject evaluates (docs/design.md,
#: "Recall notes")
QUESTION_DROP_SHARE = 1

#: share of the memory budget a note added beside shown notes may take, and a change of subject
#: frees by giving up the newest notes first: the next subject then finds room without giving
#: up the oldest note, which costs the cache nearly the whole prompt
TOPIC_ROOM = 0.5


def anchor_costs(history_ids, token_counts) -> dict[str, int]:
    """
    What giving up a note anchored at each message costs the server's cache: the tokens of the
    prompt from that message to the end, which the server evaluates again once the note before
    them is gone.

    Args:
        history_ids (list[str]): ids of the messages the prompt shows, in prompt order.
        token_counts (list[int]): their tokens, same order.

    Returns:
        dict[str, int]: ``{id: tokens}``; O(n) in the messages.
    """
    costs, total = {}, 0
    for msg_id, tokens in zip(reversed(history_ids), reversed(token_counts)):
        total += int(tokens)
        costs[msg_id] = total
    return costs


#: marks of lost notes kept at most (one per audience, the newest): what tells a conversation
#: that goes on from one asked afresh
LOST_MARKS = 16


def lost_marks(gone) -> list[RecallNote]:
    """
    Marks of notes a conversation lost, one per audience (the newest last), at most
    :data:`LOST_MARKS`.

    A mark is a note with no anchor and no items, ``{"anchor": None, "audience": list | None,
    "items": [], "text": "", "tokens": 0, "lost": True}``: never shown, it stays in the NPC's
    notes so that every later turn of the same listeners knows the conversation went on past
    notes they were shown (:func:`plan_recall`). The notes live on ``ndb``: a reload forgets
    the marks, and the next turn is asked afresh.

    Args:
        gone (list[dict]): notes whose anchor left the history (a compaction took it, or the
            prompt window moved past it), notes given up, and earlier marks, oldest first.

    Returns:
        list[dict]: the marks, oldest first.
    """
    marks = {}
    for note in gone:
        audience = note.get("audience")
        key = None if audience is None else tuple(sorted(audience))
        marks.pop(key, None)  # the newest last
        marks[key] = {"anchor": None, "audience": audience, "items": [], "text": "",
                      "tokens": 0, "lost": True}
    return list(marks.values())[-LOST_MARKS:]


def notes_over_budget(notes, history_ids, budget_tokens) -> int:
    """
    Tokens the notes a prompt may show take beyond the memory budget: the most, over the
    audiences of the ``notes`` anchored in the history, that the notes :func:`visible_notes`
    gives one audience hold above ``budget_tokens`` (a question's note may borrow that room
    from the history, :func:`plan_recall`'s ``lent_tokens``; ``docs/design.md``, "Recall
    notes", "Room lent by the history"). O(notes x audiences); a few dozen notes at most.

    Args:
        notes (list[dict]): the NPC's notes (module docstring).
        history_ids (container[str]): ids of the messages in the runtime history (``in`` only).
        budget_tokens (int): the memory budget (``AI_MEMORY_RETRIEVAL_TOKEN_BUDGET``).

    Returns:
        int: tokens, 0 when every audience's notes fit the budget.
    """
    alive = [note for note in notes if note["anchor"] in history_ids]
    audiences = {None if note.get("audience") is None else tuple(sorted(note["audience"]))
                 for note in alive}
    most = max((sum(note["tokens"] for note in alive if _covers(note.get("audience"), who))
                for who in audiences), default=0)
    return max(0, int(most) - int(budget_tokens))


def lendable_tokens(history_budget, history_tokens, threshold) -> int:
    """
    Tokens the history can lend a question's note beyond the memory budget
    (:func:`plan_recall`'s ``lent_tokens``): what its budget can lose before ``history_tokens``
    reach ``threshold`` of it (the emergency compaction threshold), so a loan never starts a
    compaction by itself; the compaction it brings nearer takes the notes' anchors and pays
    it back (``docs/design.md``, "Recall notes", "Room lent by the history").

    Args:
        history_budget (int): the history's budget now, less what it lent already (tokens).
        history_tokens (int): the history's tokens.
        threshold (float): the fraction of the budget at which compaction is due, above 0.

    Returns:
        int: tokens, at least 0.
    """
    return max(0, int(history_budget - history_tokens / float(threshold)) - 1)


def _covers(audience, listeners):
    """Whether every listener heard what ``audience`` heard (None on either side: no filter,
    yes): the one test of :func:`visible_notes` and of a lost note (:func:`plan_recall`)."""
    if audience is None or listeners is None:
        return True
    return frozenset(listeners) <= frozenset(audience)


def plan_ahead(notes, items, history_ids, budget_tokens, render, count, listeners=None,
               lent_tokens=0, withdrawn=None) -> RecallNote | None:
    """
    The note a follow-up on the subject in hand would show, fetched ahead while the player
    types (``docs/design.md``, "Recall notes", "Fetched ahead"): the last question's
    candidates that no shown note holds (the ones left out for time), best first, within the
    room a note beside the shown ones has (:data:`TOPIC_ROOM` of the budget, and what is left
    of it and of ``lent_tokens``), with no time limit. The shell has the server evaluate it
    after the prompt's opening; the next turn shows it first if it goes on with the subject
    (:func:`plan_recall`'s ``ahead``).

    Args:
        notes, items, history_ids, budget_tokens, render, count, listeners, lent_tokens,
            withdrawn: as :func:`plan_recall` (``items``: the last turn's candidates).

    Returns:
        RecallNote | None: with ``"anchor": None`` (the turn to come), or None when no
        candidate fits.
    """
    notes, items, _ = withdraw(notes, items, withdrawn)
    _alive, _gone, _compacted, shown = _split(notes, history_ids, listeners)
    keys = _shown_keys(shown)
    fresh = [item for item in items if item["key"] not in keys]
    room = _note_room(budget_tokens, shown, float("inf"), True, [], 0, max(0, int(lent_tokens)))
    chosen, text, tokens = _fill(fresh, room, render, count)
    if not chosen:
        return None
    return {"anchor": None, "audience": None if listeners is None else sorted(listeners),
            "items": chosen, "text": text, "tokens": tokens}


def _ready(ahead, items, anchor, listeners, withdrawn, shown_keys):
    """The note fetched ahead (:func:`plan_ahead`), anchored at ``anchor``, when the turn goes
    on with its subject (most of its items among the turn's ``items``), it was made for the
    ``listeners``, nothing in it was erased and no shown note holds its items (an ahead
    note is shown once); else None."""
    if not ahead or not ahead.get("items"):
        return None
    audience = None if listeners is None else sorted(listeners)
    if ahead.get("audience") != audience or not withdraw([ahead], [], withdrawn)[0]:
        return None
    if _shown_keys([ahead]) & shown_keys or not _on_subject(ahead, {i["key"] for i in items}):
        return None
    return dict(ahead, anchor=anchor)


@dataclass(frozen=True)
class RecallPlan:
    """
    The notes after a turn's retrieval (:func:`plan_recall`).

    Attributes:
        notes (list[dict]): the new state, oldest first (module docstring): notes whose anchor
            left the history and notes given up are gone, marked by :func:`lost_marks`; notes
            given up after the reply (``leaving``) stay, marked ``"leaving"``.
        shown (list[dict]): what the prompt shows, in order.
        new (dict | None): the note added for this turn.
        ahead (dict | None): the note fetched ahead, shown at the turn's anchor.
        dropped (int): notes given up for room, and notes an earlier question kept on loan
            that were not given up since (of any audience).
        left_out (int): new candidates that found no room.
        withdrawn (int): notes that left because their source was erased.
        room_limited (bool): the allowance (``new_tokens``), not the budget, left candidates
            out: the reply had no time to evaluate them.
        leaving (int): notes a question gives up after its reply rather than before it
            (``give_up_later``): still shown, marked ``"leaving"`` in ``notes``.
    """

    notes: list
    shown: list
    new: dict | None
    ahead: dict | None
    dropped: int
    left_out: int
    withdrawn: int
    room_limited: bool
    leaving: int = 0


def plan_recall(notes, items, anchor, history_ids, budget_tokens, render, count, listeners=None,
                new_tokens=None, anchor_cost=None, asking=False, withdrawn=None,
                lent_tokens=0, ahead=None, give_up_later=False) -> RecallPlan:
    """
    The notes after a turn's retrieval.

    Shown notes stay as they are, since any change costs the server's cache everything after
    it. This turn's candidates that no shown note holds are added as a new note, best first, as
    far as the room left in the budget allows: all of it when no note is shown and none was lost
    (a question asked afresh pays once for what the NPC remembers), else at most
    :data:`TOPIC_ROOM` of the budget and ``new_tokens``, the tokens a reply may spend evaluating
    memories (``docs/design.md``, "Recall notes": the latency allowance), also on every turn
    after a compaction took notes these listeners were shown (:func:`lost_marks`). When
    none of the turn's best :data:`TOPIC_ITEMS` candidates is shown and no shown note is
    mostly among its candidates, the subject has changed: the newest shown notes are given
    up, one at a time, until :data:`TOPIC_ROOM` of the budget is free, but only while what
    giving one up costs (``anchor_cost``: the prompt after its anchor, evaluated again) fits
    the allowance (for a question about the past, :data:`QUESTION_DROP_SHARE` allowances of
    its own, beside its note's); the newest first (:func:`_make_room`).

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
        listeners (iterable[str], optional): who will hear the reply (:func:`visible_notes`).
        new_tokens (int, optional): tokens this reply may newly evaluate for memories: the new
            note and the prompt after any note given up (None: no limit, for a fast server).
        anchor_cost (dict, optional): ``{anchor id: tokens after it}`` (:func:`anchor_costs`);
            None: giving up a note costs nothing.
        asking (bool): the turn asks about the past (:mod:`ai_contrib.core.past_questions`).
        withdrawn (set[str], optional): marks of sources staff erased (:func:`withdraw`): the
            notes holding one leave, and such a candidate is not added.
        lent_tokens (int): tokens the history lends a question about the past beyond
            ``budget_tokens`` (:func:`lendable_tokens`), within the same allowance.
        ahead (dict, optional): a note fetched ahead (:func:`plan_ahead`), evaluated by the
            server right before this turn's first line: shown first, outside ``new_tokens``,
            when the turn goes on with its subject (:func:`_ready`); else let go.
        give_up_later (bool): a question keeps the notes it gives up shown, on loan within
            ``lent_tokens``, marked ``"leaving"`` (:func:`_given_up`), given up once the reply
            is spoken (:func:`give_up_leaving`).

    Returns:
        RecallPlan: the new state and what the prompt shows.
    """
    notes, items, erased = withdraw(notes, items, withdrawn)
    # kept on loan by the last question and not given up since: due, whatever it costs, and
    # marked as lost like any note given up
    notes, late = give_up_leaving(notes)
    allowance = float("inf") if new_tokens is None else max(0, int(new_tokens))
    alive, gone, compacted, shown = _split(notes, history_ids, listeners)
    ready = _ready(ahead, items, anchor, listeners, withdrawn, _shown_keys(shown))
    alive, shown = (alive + [ready], shown + [ready]) if ready else (alive, shown)
    before = shown
    shown, dropped, spent = _room_for_turn(shown, items, asking, budget_tokens, allowance,
                                           anchor_cost)
    keys = _shown_keys(shown)
    fresh = [item for item in items if item["key"] not in keys]
    lent = max(0, int(lent_tokens)) if asking else 0
    rooms = [_note_room(budget_tokens, shown, limit, compacted, dropped, spent, lent)
             for limit in (allowance, float("inf"))]
    chosen, text, tokens = _fill(fresh, rooms[0], render, count)
    timed = rooms[0] < rooms[1]  # the allowance, not the budget, set the room: for the receipt
    later = bool(give_up_later and asking and dropped) and (
        sum(note["tokens"] for note in before) + tokens <= budget_tokens + lent)
    state, shown, given_up = _given_up(alive, gone, dropped, before if later else shown, later)
    new = {"anchor": anchor, "audience": None if listeners is None else sorted(listeners),
           "items": chosen, "text": text, "tokens": tokens} if chosen else None
    state, shown = (state + [new], shown + [new]) if new else (state, shown)
    return RecallPlan(notes=state, shown=shown, new=new, ahead=ready,
                      dropped=given_up + late, left_out=len(fresh) - len(chosen),
                      withdrawn=erased, room_limited=bool(timed and len(fresh) > len(chosen)),
                      leaving=len(dropped) - given_up)


def _given_up(alive, gone, dropped, shown, later):
    """
    The notes' state once the ``dropped`` notes are given up (:func:`plan_recall`): now, their
    marks beside those of the ``gone`` ones (:func:`lost_marks`); or, ``later``, kept in the
    state and in ``shown`` (the prompt before they were given up) marked ``"leaving"``, so
    the reply's prompt keeps them where the server cached them and only its note is new.

    Returns:
        tuple: ``(state, shown, given_up)``: the notes without the new one, what the prompt
        shows, and how many were given up now.
    """
    out = {id(note) for note in dropped}
    if later:
        alive = [dict(note, leaving=True) if id(note) in out else note for note in alive]
        shown = [dict(note, leaving=True) if id(note) in out else note for note in shown]
        return lost_marks(gone) + alive, shown, 0
    return (lost_marks(gone + dropped) + [note for note in alive if id(note) not in out],
            shown, len(dropped))


def give_up_leaving(notes) -> tuple:
    """
    Give up the notes a question kept on loan for its reply (:func:`plan_recall`'s
    ``give_up_later``), once the reply is spoken: the shell calls it then, and its cache
    warm-up has the server evaluate the prompt after them again while the player types
    (``docs/design.md``, "Recall notes", "Given up after the reply"); :func:`plan_recall`
    calls it first for notes still leaving.

    Args:
        notes (list[dict]): the NPC's notes, oldest first (module docstring).

    Returns:
        tuple: ``(notes, given_up)``: the new state (the ones given up marked by
        :func:`lost_marks`, as any note given up) and how many there were; the same notes and
        0 when none is leaving.
    """
    leaving = [note for note in notes if note.get("leaving")]
    if not leaving:
        return list(notes), 0
    marks = [note for note in notes if note.get("lost")]
    rest = [note for note in notes if not note.get("lost") and not note.get("leaving")]
    return lost_marks(marks + leaving) + rest, len(leaving)


def _room_for_turn(shown, items, asking, budget_tokens, allowance, anchor_cost):
    """
    The notes given up for the turn (:func:`plan_recall`): on a change of subject or a
    question about the past, :func:`_make_room`; a question gives notes up from its own
    :data:`QUESTION_DROP_SHARE` allowances, so what it spends there is not taken from its
    note's.

    Returns:
        tuple: ``(shown, dropped, spent)``: as :func:`_make_room`, ``spent`` being what the new
        note's room pays for (0 for a question).
    """
    top = {item["key"] for item in items[:TOPIC_ITEMS]}
    candidates = {item["key"] for item in items}
    # else the subject has changed; a follow-up whose wording moves the best three still
    # goes on when a shown note is mostly this turn's candidates
    going_on = bool(top & _shown_keys(shown)) or any(
        _on_subject(note, candidates) for note in shown)
    if not (shown and items and (asking or not going_on)):
        return shown, [], 0
    # a change of subject, or a question about the past: the subject's notes stay
    shown, dropped, spent = _make_room(
        shown, budget_tokens, allowance * QUESTION_DROP_SHARE if asking else allowance,
        anchor_cost, candidates)
    return shown, dropped, 0 if asking else spent


def _split(notes, history_ids, listeners):
    """
    The ``notes`` whose anchor is in the history (``alive``) and the others (``gone``: marks
    are too), whether a note these ``listeners`` were shown is gone (``compacted``), and the
    notes the prompt shows them (:func:`plan_recall`).

    Returns:
        tuple: ``(alive, gone, compacted, shown)``.
    """
    alive = [note for note in notes if note["anchor"] in history_ids]
    gone = [note for note in notes if note["anchor"] not in history_ids]
    # the talk goes on past a compaction (or a move of the prompt window) that took notes
    # these listeners were shown: not a question asked afresh, on this turn or any later one
    compacted = any(_covers(note.get("audience"), listeners) for note in gone)
    return alive, gone, compacted, visible_notes(alive, history_ids, listeners)


def _shown_keys(shown):
    """The keys of the items the ``shown`` notes hold."""
    return {item["key"] for note in shown for item in note["items"]}


def _on_subject(note, subject_keys):
    """Whether a shown ``note`` is on the turn's subject: most of its items are among
    ``subject_keys`` (the turn's candidates), as the notes of the subject's earlier turns are.
    One shared item is not enough: the best candidate of many questions is the same few
    lines, and a note kept for one of them keeps the older notes behind it, which then cost
    more to give up than a reply may evaluate; the item itself comes back in the new note."""
    held = _shown_keys([note])
    return 2 * len(held & subject_keys) > len(held) > 0


def _make_room(shown, budget_tokens, allowance, anchor_cost, subject_keys=frozenset()):
    """
    On a change of subject or a question about the past: give up the newest ``shown`` notes,
    one at a time, until :data:`TOPIC_ROOM` of ``budget_tokens`` is free, while what giving one
    up costs (the tokens after its anchor, ``anchor_cost``, and of the notes kept after it;
    None: nothing) stays under ``allowance`` (:func:`plan_recall`). A note on the turn's
    subject (:func:`_on_subject` of ``subject_keys``, the turn's candidates) stays. So a run
    of questions on one subject gathers its notes turn after turn, up to the whole budget.
    The newest first, because giving up a note costs the cache everything after its anchor
    and the newest anchor has the least after it; older notes stay in the cached prefix until
    compaction takes their anchors.

    Returns:
        tuple: ``(shown, dropped, spent)``: the notes still shown (a new list), those given up
        (newest first), and the tokens giving them up costs (the most any one costs: the
        prompt after the oldest anchor given up is evaluated again once).
    """
    shown, dropped, spent, kept_after = list(shown), [], 0, 0
    for note in reversed(list(shown)):
        if budget_tokens - sum(n["tokens"] for n in shown) >= budget_tokens * TOPIC_ROOM:
            break
        if _on_subject(note, subject_keys):
            kept_after += note["tokens"]  # evaluated again if an older note is given up
            continue
        cost = (anchor_cost or {}).get(note["anchor"], 0) + kept_after \
            if anchor_cost is not None else 0
        if cost >= allowance:
            break  # evaluating the prompt after it again costs more than the note is worth
        spent = max(spent, cost)
        shown.remove(note)
        dropped.append(note)
    return shown, dropped, spent


def _note_room(budget_tokens, shown, allowance, compacted, dropped, spent, lent=0):
    """
    Tokens the turn's new note may take (:func:`plan_recall`), beside the ``shown`` notes:
    ``compacted`` when the listeners lost notes before, ``dropped`` the notes just given up,
    which cost ``spent`` of the ``allowance``, ``lent`` the tokens the history lends beyond
    the budget.

    Returns:
        float: tokens (possibly negative: no room).
    """
    # the first note may take the whole budget: a memory question asked afresh gets all the
    # room there is; beside other notes, one takes at most TOPIC_ROOM, so that the next subject
    # finds room without giving a note up; neither takes more than the reply may evaluate
    room = budget_tokens - sum(note["tokens"] for note in shown)
    if shown or compacted:
        # the history lends room only beside shown notes: a first note has the whole budget
        room = min(room + (lent if shown else 0), budget_tokens * TOPIC_ROOM, allowance)
    if dropped:
        room = min(room, allowance - spent)
    return room


def _fill(fresh, room, render, count):
    """
    The new note's items: each of the ``fresh`` candidates (best first) whose note, rendered
    with those chosen before it, still fits ``room`` tokens.

    Returns:
        tuple: ``(chosen, text, tokens)``: the items, the rendered note and its tokens
        (``([], "", 0)`` when none fits).
    """
    chosen, text, tokens = [], "", 0
    for item in fresh:
        trial = render(chosen + [item])
        cost = count(trial)
        if cost <= room:
            chosen, text, tokens = chosen + [item], trial, cost
    return chosen, text, tokens
