"""
Building the reply prompt from the runtime history, and cleaning what the model answers.

Prompt order (``docs/design.md``, "Prompt structure"): the persona as a system message, then
the ``[CONTEXT SUMMARY]`` markers, then the recent history, with each retrieved-memory note right
before the lines it was retrieved for: stable parts first, so that the model server can reuse its
cached prefix, volatile parts last. What the listeners could not all have heard is left out;
when the rest is larger than the token budget, the oldest part (summaries included) is left out
first.
"""

from __future__ import annotations

import re

from .actions import event_line
from .audience import heard_by
from .dates import epoch_seconds, short_time
from .messages import ChatMessage, is_marker, shown_speaker, tool_call_ids
from .text import normalise_player_text
from .tokens import PER_MESSAGE_OVERHEAD

REPLY_INSTRUCTIONS = (
    "You are {name}. Stay in character. Answer what was just said to you in one or two short "
    "sentences, as {name} would say it aloud, addressing by name the speakers you answer. "
    "Do not write lines for anyone else."
)
#: seconds of silence after which the prompt shows when the talk resumed (``docs/design.md``,
#: "Prompt structure", "When it was said")
RESUME_SECONDS = 3600
#: the headings of the prompt's own notes: the lore the NPC knows (``core.lore.format_lore``),
#: retrieved memories and past experiences (``memory.retrieval``), its pins (``npc.world``). The
#: model reads them; a reply that writes one has run on into a copy of the prompt
#: (:func:`note_start`)
LORE_HEADING = "WHAT YOU KNOW:"
MEMORIES_HEADING = "RELATED MEMORIES:"
EXPERIENCES_HEADING = "RELATED PAST EXPERIENCES:"
PINS_HEADING = "FACTS YOU MUST NEVER FORGET:"
NOTE_HEADINGS = (LORE_HEADING, MEMORIES_HEADING, EXPERIENCES_HEADING, PINS_HEADING)
#: where a copy of one of the prompt's notes starts in a model's text: a bracketed upper-case tag
#: (``[SCENE]``, ``[CONTEXT SUMMARY]``, ``[CONTEXT SYNTHESIS]``, ``[TOOL OUTPUT ARCHIVED - ``, or
#: a ``[LORE]`` of the model's own making) or one of :data:`NOTE_HEADINGS`
_NOTE_MARK = re.compile(r"\[[A-Z]{2,}(?: [A-Z]{2,})*(?:\]| - )|"
                        + "|".join(re.escape(heading) for heading in NOTE_HEADINGS))
#: a time stamp as a prompt shows it (:func:`resumption_stamps`, a recall note's lines),
#: ``[2026-11-20 14:02]``: groups day and time
TIME_STAMP = re.compile(r"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2})\]")


def render_for_chat(msg) -> ChatMessage | None:
    """
    Turn a history message into an OpenAI chat message for the reply prompt, or None to skip it.

    User messages carry the speaker in their text (``"Bob: hello"``) because many chat templates
    drop the ``name`` field; a line said near the NPC but not to it (``metadata["addressed"]``
    False, :mod:`ai_contrib.core.addressing`) reads ``"Bob (overheard): hello"``, so the model
    knows it but does not take it as a question to answer. An event record (metadata
    ``kind`` ``"event"``: an arrival, a pose, a gift) is a user line of its stored text alone,
    ``"(Wren smiles.)"``. An action's result (metadata ``type`` ``"action"``) is a user line
    too, ``"(You: give key to Wren: done. ...)"`` (:func:`ai_contrib.core.actions.event_line`),
    its call left out. Other tool calls and tool results are the NPC's own bookkeeping
    (journaling during extraction) and are left out of conversational replies.
    """
    role = msg.get("role")
    content = msg.get("content") or ""
    if (msg.get("metadata") or {}).get("kind") == "event":
        # something the NPC saw (ai_contrib.core.scene; docs/design.md, "Scene, events and
        # people"): stored as the game's system line in parentheses, shown as a user line with
        # no speaker prefix, "(Wren arrives from the north.)", so the model reads it as part of
        # the scene in order with the speech, not as an instruction or a line to answer
        return {"role": "user", "content": content} if content else None
    if role == "tool" and (msg.get("metadata") or {}).get("type") == "action":
        # what the NPC did, in the scene's order (docs/design.md, "Actions")
        return {"role": "user", "content": event_line(msg)}
    if role == "tool" or (role == "assistant" and msg.get("tool_calls") and not content):
        return None
    if role == "user":
        speaker = shown_speaker(msg)
        return {"role": "user", "content": f"{speaker}: {content}" if speaker else content}
    if role in ("assistant", "system"):
        return {"role": role, "content": content}
    return None


def build_reply_messages(persona, npc_name, history, token_counts, budget_tokens, memories=None,
                         listeners=None, keep_ids=()) -> list[ChatMessage]:
    """
    Assemble the chat messages for one NPC reply.

    Args:
        persona (str): the NPC's persona text (``character.db.persona``).
        npc_name (str): the NPC's name.
        history (list[dict]): runtime history (message shape in ``core/messages.py``).
        token_counts (list[int]): tokens of each history message, same order.
        budget_tokens (int): tokens allowed for summaries plus history.
        memories (str, optional): a preformatted "RELATED MEMORIES" section, shown right before
            the lines being answered.
        listeners (iterable[str], optional): dbrefs of who will hear the reply: messages and
            summaries not every one of them could have heard are left out
            (:func:`ai_contrib.core.audience.heard_by`; ``docs/design.md``, "Privacy by
            audience"). None: no filter.
        keep_ids (iterable[str]): ids of the lines the reply answers: kept whatever their
            audience (a listener who just walked in hears the answer, not a secret from before).
            The prompt ends with them: messages are in :func:`conversation_order`, and lines
            said after the turn was taken are left for the next turn.

    When the history is larger than the budget, the oldest messages are left out first (they
    stay in the archive, where retrieval can still find them), but the newest one is always
    kept.

    Returns:
        list[dict]: ``[{"role", "content"}, ...]`` ready for ``/chat/completions``.
    """
    keep = list(keep_ids or ())
    notes = None
    if memories:
        anchor = keep[0] if keep else (history[-1].get("id") if history else None)
        notes = [{"anchor": anchor, "text": memories, "tokens": 0, "new": True}]
    return assemble_reply_prompt(persona, npc_name, history, token_counts, budget_tokens,
                                 notes=notes, listeners=listeners, keep_ids=keep)[0]


def conversation_order(history) -> list:
    """
    The history's messages in the order the conversation happened to the NPC: each reply right
    after the last line it answers (``metadata["reply_to"]``), the lines said while it was being
    written after it.

    The runtime history is in storage order, and a reply is stored when the model has written
    it, after any line said meanwhile: ``L1, L2, R1`` where ``R1`` answers ``L1``. Shown in that
    order, the next prompt (answering ``L2``) would end with the NPC's own ``R1``, which
    llama.cpp's server and other chat APIs take as the start of the reply to continue (an
    assistant *prefill*): the model adds an end-of-turn token, and the room hears ``R1`` again.
    It would also differ from the previous prompt at ``L2``, where the server's cache holds
    ``L1, R1``. In conversation order (``L1, R1, L2``) every prompt ends with the lines being
    answered and starts with what the server cached (``docs/design.md``, "Prompt structure").

    Args:
        history (list[dict]): messages oldest first (shape in ``core/messages.py``).

    Returns:
        list[dict]: the same messages, reordered; O(n) in the messages.
    """
    position = {msg.get("id"): i for i, msg in enumerate(history)}
    placed = []  # (sort key, index, msg): a reply sorts right after its last answered line
    call_keys = {}  # tool call id -> its call's sort key: a result stays after its call
    for i, msg in enumerate(history):
        key = float(i)
        if msg.get("role") == "assistant":
            answered = [position[rid] for rid in (msg.get("metadata") or {}).get("reply_to") or ()
                        if rid in position and position[rid] < i]
            if answered:
                key = max(answered) + 0.5
            for call_id in tool_call_ids(msg):
                call_keys[call_id] = key
        elif msg.get("role") == "tool":
            key = call_keys.get(msg.get("tool_call_id"), key)
        placed.append((key, i, msg))
    if all(key == i for key, i, _ in placed):
        return list(history)
    placed.sort(key=lambda entry: (entry[0], entry[1]))
    return [msg for _, _, msg in placed]


def assemble_reply_prompt(persona, npc_name, history, token_counts, budget_tokens, notes=None,
                          listeners=None, keep_ids=(), count=None, standing=None,
                          max_tokens=None) -> tuple:
    """
    The reply prompt and an account of its parts (the reply's receipt):
    :func:`assemble_sized_reply_prompt` without the sizes.

    Returns:
        tuple: ``(messages, parts)``.
    """
    return assemble_sized_reply_prompt(
        persona, npc_name, history, token_counts, budget_tokens, notes=notes,
        listeners=listeners, keep_ids=keep_ids, count=count, standing=standing,
        max_tokens=max_tokens)[:2]


def assemble_sized_reply_prompt(persona, npc_name, history, token_counts, budget_tokens,
                                notes=None, listeners=None, keep_ids=(), count=None,
                                standing=None, max_tokens=None) -> tuple:
    """
    The reply prompt, an account of its parts (the reply's receipt) and the tokens of each of
    its messages, from the counts it was built with: nothing is counted again to weigh it
    (``docs/design.md``, "Time limits that follow the work").

    Arguments as :func:`build_reply_messages`, except:

    Args:
        notes (list[dict], optional): retrieved-memory notes to show, each ``{"anchor": str
            (id of the history message it goes before), "text": str, "tokens": int, "new":
            bool}`` (:mod:`ai_contrib.core.recall_notes`; ``docs/design.md``, "Recall notes").
            A note whose anchor is not in the prompt is left out.
        count (callable, optional): ``str -> int`` for the system prompt's tokens (default
            :func:`ai_contrib.core.tokens.count_tokens`).
        standing (list[dict], optional): sections appended to the system message, each
            ``{"part": str ("pins", "lore"), "text": str, "tokens": int, "detail": any}``:
            what the NPC must always have in front of it (``docs/design.md``, "The NPC's
            world"). Notes may also carry ``"part"`` (default ``"memories"``; ``"lore"``,
            ``"scene"``) and ``"detail"``, copied into their receipt part.
        max_tokens (int, optional): what summaries and history may take at most, their time
            stamps included, whatever ``budget_tokens`` lets through (default
            ``budget_tokens``): the oldest messages go first, and a newest message larger than
            it alone is cut to fit (:func:`_newest_within`).

    Returns:
        tuple: ``(messages, parts, sizes, ids)``: ``messages`` as :func:`build_reply_messages`;
        ``parts`` the prompt's parts in order, each ``{"part": "system" | "summary" | "history" |
        "memories" | "turn", "tokens": int}`` plus, for summary, history and turn runs,
        ``"first_seq"``, ``"last_seq"`` (archive seqs, None where unknown) and ``"messages"``,
        and for memories ``"new"`` (first shown in this prompt); ``sizes`` the tokens of each
        message, same order: a history message's ``token_counts`` entry (its time stamp
        added), the system message's and each note's text tokens (the parts') plus
        :data:`ai_contrib.core.tokens.PER_MESSAGE_OVERHEAD`. With the runtime history's counts
        (:func:`ai_contrib.core.tokens.count_message_tokens`) they come within a few tokens a
        message of counting the rendered messages afresh. ``ids`` the history id each message
        shows, same order (None for the system message and the notes): where a prompt's
        leading messages end in the history (a cache warm-up sent in steps).
    """
    if count is None:
        from .tokens import count_tokens as count
    keep = frozenset(keep_ids or ())
    history, token_counts = _prompt_history(history, token_counts, keep, listeners)
    out, parts = _system_message(persona, npc_name, standing, count)
    # the standing sections extend the system message: its size is all the parts so far
    sizes = [PER_MESSAGE_OVERHEAD + sum(part["tokens"] for part in parts)]
    kept = _newest_within(history, token_counts, budget_tokens, count,
                          budget_tokens if max_tokens is None else max_tokens)
    markers = [(msg, rendered, tokens) for msg, rendered, tokens in kept if is_marker(msg)]
    tail = [(msg, rendered, tokens) for msg, rendered, tokens in kept if not is_marker(msg)]
    shows = {}  # message index -> the history id it shows
    for msg, rendered, tokens in markers:
        shows[len(out)] = msg.get("id")
        out.append(rendered)
        sizes.append(tokens)
        _add_part(parts, "summary", msg, tokens)
    # retrieved memories go right before the lines they were retrieved for, and stay there on
    # later replies: what is after the newest reply changes every turn, what is before it can
    # stay a prefix the server reuses from its cache (llama.cpp, vLLM and hosted APIs all cache
    # a common prefix; docs/design.md, "Prompt structure" and "Recall notes")
    by_anchor = _notes_by_anchor(notes, tail)
    for msg, rendered, tokens in tail:
        _show_notes(by_anchor.get(msg.get("id"), ()), out, parts, count, sizes)
        shows[len(out)] = msg.get("id")
        out.append(rendered)
        sizes.append(tokens)
        _add_part(parts, "turn" if msg.get("id") in keep else "history", msg, tokens)
    if not tail:
        _show_notes(by_anchor.get(None, ()), out, parts, count, sizes)
    return out, parts, sizes, [shows.get(i) for i in range(len(out))]


def _prompt_history(history, token_counts, keep, listeners):
    """
    The messages a reply prompt may show, with their token counts: in
    :func:`conversation_order`, without the players' lines said after the last of ``keep`` (the
    turn's line ids), and, where ``listeners`` (dbrefs) is not None, without what they could
    not all have heard except the turn's lines.

    Returns:
        tuple: ``(history, token_counts)``: lists, the same dicts and counts.
    """
    ordered = conversation_order(history)
    if keep:
        # lines said after the turn was taken belong to the next turn: shown now, the prompt
        # would end with a line this reply does not answer, and the model would answer it
        last = max((i for i, m in enumerate(ordered) if m.get("id") in keep), default=None)
        if last is not None:
            ordered = ordered[: last + 1] + [m for m in ordered[last + 1:]
                                             if m.get("role") != "user" or m.get("id") in keep]
    if ordered is not history and ordered != history:
        tokens_of = {id(m): t for m, t in zip(history, token_counts)}
        history, token_counts = ordered, [tokens_of[id(m)] for m in ordered]
    if listeners is not None:
        listeners = frozenset(listeners)
        pairs = [(m, t) for m, t in zip(history, token_counts)
                 if m.get("id") in keep or heard_by(m, listeners)]
        history = [m for m, _ in pairs]
        token_counts = [t for _, t in pairs]
    return history, token_counts


def _system_message(persona, npc_name, standing, count):
    """
    The prompt's system message (persona, reply instructions and the ``standing`` sections)
    and its receipt parts.

    Returns:
        tuple: ``(out, parts)``: ``[system message]`` and ``[{"part": "system", "tokens"},
        {"part": section's part, "tokens"[, "detail"]}, ...]``.
    """
    system = (persona or "").strip()
    system = (system + "\n\n" if system else "") + REPLY_INSTRUCTIONS.format(name=npc_name)
    out = [{"role": "system", "content": system}]
    parts = [{"part": "system", "tokens": count(system)}]
    for section in standing or ():
        # what never changes turn to turn (pins, lore every NPC of its kind knows) extends the
        # system message: the start of the prompt, cached once (docs/design.md, "Prompt
        # structure")
        out[0]["content"] += "\n\n" + section["text"]
        part = {"part": section["part"], "tokens": int(section.get("tokens") or 0)
                or count(section["text"])}
        if section.get("detail"):
            part["detail"] = section["detail"]
        parts.append(part)
    return out, parts


def resumption_stamps(history) -> list[str]:
    """
    The time each message of ``history`` is shown with in a prompt: the first player line (a
    ``user`` message: speech or an event) of the history and the first one after a silence of
    :data:`RESUME_SECONDS` or more get their own time (``"2026-11-20 14:02"``), every other
    message ``""`` (``docs/design.md``, "Prompt structure", "When it was said").

    The model sees when the talk it reads took place ("last week you told me..." means
    something), at the cost of one short stamp per resumed conversation, not one per line. The
    NPC's own lines never carry one: a model shown its replies starting with a time starts the
    next one with a time too. A stamp depends only on the messages before it, so a prompt's
    prefix stays what the server cached.

    Args:
        history (list[dict]): messages oldest first (shape in ``core/messages.py``); markers
            (summaries) take no stamp and do not end a silence.

    Returns:
        list[str]: one entry per message, same order.
    """
    stamps = []
    pending, last = True, None
    for msg in history:
        stamp = ""
        when = None if is_marker(msg) else epoch_seconds(msg.get("timestamp"))
        if when is not None:
            if last is not None and when - last >= RESUME_SECONDS:
                pending = True
            last = when
            if pending and msg.get("role") == "user":
                stamp, pending = short_time(msg.get("timestamp")), False
        stamps.append(stamp)
    return stamps


def _stamped(rendered, stamp):
    """A rendered chat message with ``"[stamp] "`` before its text (unchanged without one)."""
    if not stamp:
        return rendered
    return {**rendered, "content": f"[{stamp}] {rendered['content']}"}


def _newest_within(history, token_counts, budget_tokens, count, max_tokens=None):
    """
    The newest messages whose tokens fit ``budget_tokens`` (the newest always), rendered, each
    resumed conversation's first player line with its time (:func:`resumption_stamps`; the
    stamps' tokens, by ``count``, charged to the budget). Whatever ``budget_tokens`` let
    through, the messages and their stamps never take more than ``max_tokens`` (default
    ``budget_tokens``): the oldest go first, and a newest message larger than that alone is
    cut to fit (``docs/design.md``, "Prompt structure"), so no reply prompt's history is over
    its budget whatever the state of memory work.

    Returns:
        list[tuple]: ``(msg, rendered chat message, tokens)``, oldest first.
    """
    # only what is shown counts: a message the prompt does not show (a tool call) neither
    # takes tokens nor bridges a silence, so the stamps charged are the stamps shown
    shown_msgs = []
    for msg, tokens in zip(history, token_counts):
        rendered = {"role": "system", "content": msg["content"]} if is_marker(msg) \
            else render_for_chat(msg)
        if rendered:
            shown_msgs.append((msg, rendered, tokens))
    stamps = resumption_stamps([msg for msg, _, _ in shown_msgs])
    # newest first until the budget is spent: summaries and messages alike, so an overflowing
    # history loses its oldest part, never the turn being answered
    kept = []
    used = 0
    for (msg, rendered, tokens), stamp in zip(reversed(shown_msgs), reversed(stamps)):
        charged = tokens + (count(stamp) + 3 if stamp else 0)  # the brackets and the space
        if used + charged > budget_tokens and kept:
            break
        kept.append((msg, rendered, tokens))
        used += charged
    kept.reverse()
    return _within_max(kept, count, budget_tokens if max_tokens is None else max_tokens)


def _within_max(kept, count, max_tokens):
    """
    ``kept`` (``(msg, rendered, tokens without a stamp)``, oldest first) stamped as shown (the
    first line shown says when it was said too, whatever came before it) and held to
    ``max_tokens``, stamps included: the oldest leave first; a lone message over it is cut to
    fit.

    Returns:
        list[tuple]: ``(msg, stamped rendered message, tokens with its stamp)``.
    """
    def stamp_tokens(stamp):
        return count(stamp) + 3 if stamp else 0  # the brackets and the space

    bare = kept
    while True:
        shown = resumption_stamps([msg for msg, _, _ in bare])
        out = [(msg, _stamped(rendered, stamp), tokens + stamp_tokens(stamp))
               for (msg, rendered, tokens), stamp in zip(bare, shown)]
        if len(out) <= 1 or sum(tokens for _, _, tokens in out) <= max_tokens:
            break
        bare = bare[1:]
    if out and out[0][2] > max_tokens:
        msg, rendered, tokens = out[0]
        out[0] = (msg, *_cut_to(rendered, max_tokens, count))
    return out


def _cut_to(rendered, max_tokens, count):
    """A rendered message cut at the end to at most ``max_tokens`` by ``count`` (``" ..."``
    marks the cut): ``(rendered, tokens)``."""
    text = rendered.get("content") or ""
    if count(text) <= max_tokens:  # counted longer than it is: nothing to cut
        return rendered, count(text)
    keep = max(0, len(text) * max_tokens // max(1, count(text)))
    while keep > 0 and count(text[:keep] + " ...") > max_tokens:
        keep = keep * 9 // 10
    cut = text[:keep].rstrip() + " ..." if keep else ""
    return {**rendered, "content": cut}, count(cut)


def _notes_by_anchor(notes, tail):
    """
    ``{anchor id: [note, ...]}``: where each note is shown, before which of the ``tail``
    messages (``(msg, rendered, tokens)``); a note left out has no place.
    """
    tail_ids = {msg.get("id") for msg, _, _ in tail}
    # a new note whose lines were cut goes before the newest message (or last, with no history);
    # an older one whose anchor left the prompt goes with it
    fallback = tail[-1][0].get("id") if tail else None
    by_anchor = {}
    for note in notes or ():
        anchor = note["anchor"] if note["anchor"] in tail_ids else (
            fallback if note.get("new") else "")
        if anchor != "":
            by_anchor.setdefault(anchor, []).append(note)
    return by_anchor


def _show_notes(notes, out, parts, count, sizes):
    """Append ``notes`` to the prompt ``out`` as system messages, their receipt parts to
    ``parts`` and their messages' tokens to ``sizes``."""
    for note in notes:
        out.append({"role": "system", "content": note["text"]})
        part = {"part": note.get("part") or "memories", "tokens": int(note.get("tokens") or 0)
                or count(note["text"]), "new": bool(note.get("new"))}
        if note.get("detail"):
            part["detail"] = note["detail"]
        parts.append(part)
        sizes.append(part["tokens"] + PER_MESSAGE_OVERHEAD)


def prompt_head(history) -> tuple:
    """
    The ids at the front of a reply prompt's history: the summary markers and the oldest message
    after them. A compaction or an eviction changes them, and with them the start of every
    later prompt; a new line, or a reply, does not. Costs the number of markers, not the history.

    Args:
        history (list[dict]): the runtime history, oldest first (summary markers first).

    Returns:
        tuple[str]: the ids, oldest first (empty for an empty history).
    """
    head = []
    for msg in history:
        head.append(msg.get("id"))
        if not is_marker(msg):
            break
    return tuple(head)


def overload_window(history, token_counts, budget_tokens, previous_tail_id=None,
                    head_fraction=0.3, refill_fraction=0.5, keep_fraction=0.8,
                    keep_from=None) -> tuple | None:
    """
    Which messages the reply prompt shows while the history is over its token budget (a
    compaction is still being written, or failed): a head that stays put and a tail whose start
    stays put for several turns, so the server's cached prefix keeps matching
    (``docs/design.md``, "Prompt structure").

    The head is the oldest part of the history (the summaries first), up to ``head_fraction``
    of the budget; it changes only when a compaction replaces it, so it stays in the server's
    cache through every move of the tail. The tail is the newest part: its previous start is
    kept while head and tail together fit ``keep_fraction`` of the budget; when they no longer
    do, the tail's new start leaves head and tail ``refill_fraction`` of the budget, room for
    the next turns to grow into. A move re-evaluates only the tail, where cutting at the front
    re-evaluated the whole window. Keeping the first messages and a recent window is the shape
    of StreamingLLM's attention sinks (Xiao et al., 2023), here at the level of messages.
    ``keep_fraction`` stays below 1: a prompt filled to the whole budget leaves no margin for
    the difference between our token counts and the server's.

    Args:
        history (list[dict]): the runtime history, oldest first (summary markers first).
        token_counts (list[int]): tokens of each message.
        budget_tokens (int): the history's token budget.
        previous_tail_id (str, optional): id of the message the last such tail started at.
        head_fraction (float): share of the budget the head may take (0..``refill_fraction``).
        refill_fraction (float): share of the budget head and tail keep when the tail moves.
        keep_fraction (float): share of the budget head and tail may grow to
            (``refill_fraction``..1).
        keep_from (int, optional): index of the first line of the turn being answered: the
            tail never starts after it, so a turn larger than the tail's share is shown whole
            (the prompt assembly still cuts to the budget, oldest first).

    Returns:
        tuple | None: ``(head_end, tail_start)`` indexes: the prompt shows
        ``history[:head_end] + history[tail_start:]`` (``head_end <= tail_start``; equal when
        nothing is left out), or None when the whole history fits the budget.
    """
    n = len(history)
    if n == 0 or sum(token_counts) <= budget_tokens:
        return None
    head_end, head = 0, 0
    while head_end < n - 1 and head + token_counts[head_end] <= budget_tokens * head_fraction:
        head += token_counts[head_end]
        head_end += 1
    previous = None
    if previous_tail_id is not None:
        previous = next((i for i in range(n - 1, head_end - 1, -1)
                         if history[i].get("id") == previous_tail_id), None)
    if previous is not None and head + sum(token_counts[previous:]) <= budget_tokens * keep_fraction:
        start = previous
    else:
        start, used = n, head
        room = budget_tokens * refill_fraction
        while start > head_end and (start == n or used + token_counts[start - 1] <= room):
            start -= 1
            used += token_counts[start]
    if keep_from is not None and head_end <= keep_from < start:
        start = keep_from
    return head_end, start


def _add_part(parts, kind, msg, tokens):
    """Extend the last part when it is a run of the same kind, else start one."""
    seq = msg.get("seq")
    last = parts[-1] if parts else None
    if last is not None and last["part"] == kind and kind != "summary":
        last["tokens"] += tokens
        last["messages"] += 1
        if seq is not None:
            last["last_seq"] = seq
            if last["first_seq"] is None:
                last["first_seq"] = seq
        return
    parts.append({"part": kind, "tokens": tokens, "first_seq": seq, "last_seq": seq,
                  "messages": 1})


# a speaker's turn as the prompt shows one: "Bob: ...", "Bob (overheard): ..."
_SPEAKER_LINE = re.compile(r"^\s*[A-Z][\w' -]{0,30}(?:\([a-z]{1,20}\))?:\s")
# the same after a resumed line's time stamp, anywhere in a line and whatever the name's case:
# a model that copies the prompt's format has started writing someone else's turn there
_STAMPED_TURN = re.compile(
    TIME_STAMP.pattern + r"\s*(?P<name>\w[\w' -]{0,30}?)\s*(?:\([a-z]{1,20}\))?:\s")
# the end of a sentence: . ! ? or an ellipsis, with any closing quotes or brackets after it
_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"')\]\u201d\u2019]*(?=\s|$)")


def last_sentence(text) -> str:
    """
    ``text`` up to the end of its last complete sentence; when it holds none, up to its last
    whole word followed by ``"..."`` (a reply the token cap cut mid-sentence).

    Returns:
        str: possibly ``""`` for empty text.
    """
    text = (text or "").rstrip()
    ends = list(_SENTENCE_END.finditer(text))
    if ends:
        return text[: ends[-1].end()]
    words = text.rsplit(None, 1)[0] if " " in text else text
    return words.rstrip(",;:-\u2014 ") + "..." if words else ""


def note_start(text) -> int | None:
    """
    Where a copy of one of the prompt's own notes starts in ``text`` (a ``[SCENE]``, a
    ``WHAT YOU KNOW:``...: ``_NOTE_MARK``), or None when it holds none.

    Returns:
        int | None: a character index.
    """
    match = _NOTE_MARK.search(text or "")
    return match.start() if match else None


def clean_reply(text, npc_name, max_chars=400, truncated=False) -> str:
    """
    Make a model's raw completion safe to ``say`` and to store: strip a leading time stamp
    (``"[2026-11-20 14:02]"``, copied from the prompt's resumed lines: :func:`resumption_stamps`)
    and ``"<npc_name>:"``, stop where the model starts writing another speaker's turn (a line
    ``"Bob: ..."`` or ``"Bob (overheard): ..."``, or a time-stamped ``"[2026-11-20 14:05] Bob:"``
    anywhere, as the prompt shows a resumed line) or a copy of one of the prompt's own notes
    (``[SCENE]``, ``WHAT YOU KNOW:``...: :func:`note_start`; ``docs/design.md``, "Sampling per
    server and model"), normalise it as player text is
    (:func:`ai_contrib.core.text.normalise_player_text`: control and invisible characters
    dropped, chat-template special tokens broken up), drop surrounding quotes and cap the
    length (characters).

    Args:
        truncated (bool): the model stopped at its token cap (``finish_reason == "length"``):
            the reply then ends at its last sentence boundary (:func:`last_sentence`) instead
            of mid-sentence.

    Returns:
        str: the cleaned reply, possibly ``""`` (the caller then uses its fallback line), as
        when the completion starts with another speaker's time-stamped turn.
    """
    text = (text or "").strip()
    start = _STAMPED_TURN.match(text)
    if start and start.group("name").strip().lower() != npc_name.strip().lower():
        return ""  # the whole completion is another speaker's turn
    echo = TIME_STAMP.match(text)
    if echo:
        text = text[echo.end():].lstrip()
    prefix = re.compile(rf"^\s*{re.escape(npc_name)}\s*(says)?\s*[:,]\s*", re.IGNORECASE)
    text = prefix.sub("", text)
    note = note_start(text)
    if note is not None:
        text = text[:note]  # the model ran on into the prompt's notes: what follows is theirs
    kept = []
    for line in text.splitlines():
        if kept and _SPEAKER_LINE.match(line):
            break
        turn = _STAMPED_TURN.search(line)
        if turn:
            line = line[:turn.start()]
        if line.strip():
            kept.append(line.strip())
        if turn:
            break
    # the model's words are data like a player's (docs/design.md, "Player text is data"): a
    # chat template's control token it wrote must not come back as one in the next prompt
    text = normalise_player_text(" ".join(kept)).strip('"').strip()
    if truncated and len(text) <= max_chars:
        text = last_sentence(text)
    if len(text) > max_chars:
        cut = text[:max_chars]
        end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
        text = cut[: end + 1] if end > max_chars // 3 else cut.rstrip() + "..."
    return text
