"""
Everything about a compaction summary except the LLM call: the prompt, the transcript it reads,
chunking for a running summary, the ``[CONTEXT SUMMARY]`` marker, and validation of the result.

Design sources: ``docs/design.md``, "Summary compaction" (default prompt, marker storage
format, the benefit guard: a summary must save at least ``min_saving_tokens``) and "Structured
summaries" (fixed small sections; confirmed facts apart from open questions), Letta (fold the
previous summary into the new one), and the
failure users hate most: summaries that read as if the player said them. Message shape:
:mod:`ai_contrib.core.messages`; all sizes are in tokens.
"""

from __future__ import annotations

import math
import re
from typing import NotRequired, TypedDict

from .audience import common_audience
from .messages import SUMMARY_PREFIX, Message, is_marker, make_message, utc_now_iso
from .text import MODEL_TEXT_MAX_CHARS, normalise_player_text
from .tokens import PER_MESSAGE_OVERHEAD, count_tokens, truncate_to_tokens

__all__ = [
    "DEFAULT_COMPACTION_PROMPT",
    "DEFAULT_SUMMARY_RATIO",
    "benefit_decision",
    "build_summary_request",
    "check_summary",
    "clean_summary",
    "estimate_summary_tokens",
    "format_message_for_compaction",
    "format_messages_for_compaction",
    "make_marker",
    "plan_summary_chunks",
    "split_markers",
]

DEFAULT_COMPACTION_PROMPT = """\
You keep the memory of a character in a text-based multiplayer game (a MUD). You are given part \
of that character's conversation log. Lines marked (assistant) were said or done by the \
character; lines marked (user) were said by players; lines marked (system) are game events or \
earlier notes; lines marked (tool) are results of the character's own actions in the world \
and lookups.

Write the character's private notes about this log, in the first person, so the character can \
carry on later without it. Attribute everything: "Mara told me her brother is missing", \
"I promised Tom a map". Never write a line as a player's words, never start a line with a \
speaker label such as "Mara:" or "User:", and never address the players.

Use these headings, in this order, each written on its own line as "## <heading>" and followed \
by short "- " bullet points; leave out a heading with nothing under it:
- Who I Spoke With: each person, what they want, what I learned about them.
- Confirmed Facts: what is known for certain, with when and where if known.
- Promises and Quests: what I promised whom, what was promised to me, errands and quests, and \
whether each was kept.
- Decisions Made: what I decided and why, and what I did for whom (gave, took, opened, went).
- Open Questions: unanswered questions, unfinished business, and anything unconfirmed (mark it \
"unconfirmed"; never mix it into the confirmed facts).
- Relationship State: how each person and I stand (trust, debts, grudges, friendship).
- Important Names and Places: names, places, objects and numbers needed to carry on.

Leave out greetings, small talk, repetition and the mechanics of lookups (keep what they \
revealed). Keep names, numbers and the exact terms of promises. At most 400 words. Write only \
the notes."""

#: Expected summary tokens per input token, for the benefit estimate (a summary of an NPC's
#: conversation is typically a fifth to a third of it; the cap below bounds it in any case).
DEFAULT_SUMMARY_RATIO = 0.25

_LABELS = {"user": "Player", "assistant": "NPC", "system": "Game", "tool": "Tool"}
_ROLES = "user|assistant|system|tool"
# A speaker label at the start of the text, as the model may echo it from the transcript.
_LEADING_LABEL = re.compile(
    r"^\s*(?:\[CONTEXT SUMMARY\]|earlier summary\s*:|summary\s*:|notes\s*:"
    rf"|(?:{_ROLES})\s*:|[^\n:()]{{1,40}}\((?:{_ROLES})\)\s*:)[ \t]*\n?",
    re.IGNORECASE,
)
_TRANSCRIPT_LINE = re.compile(rf"^([ \t]*)([^\n:()]{{1,40}}?) \(({_ROLES})\):[ \t]*", re.MULTILINE)
_VERBS = {"user": "said", "assistant": "said", "system": "noted", "tool": "noted"}
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[\w-]*\n(.*)\n```$", re.DOTALL)


def _marker_text(msg):
    text = msg.get("content") or ""
    if text.startswith(SUMMARY_PREFIX):
        text = text[len(SUMMARY_PREFIX) :]
    return text.strip()


def _body(msg):
    if is_marker(msg):
        return _marker_text(msg)
    parts = [(msg.get("content") or "").strip()]
    for call in msg.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(f"[calls {function.get('name', '?')}({function.get('arguments', '')})]")
    return " ".join(part for part in parts if part)


def format_message_for_compaction(msg) -> str:
    """
    Return one transcript line for ``msg``: ``"Name (role): text"``, the name defaulting to
    Player/NPC/Game/Tool by role; a marker becomes ``"Earlier summary: text"``; tool calls are
    shown as ``[calls name(arguments)]``. Continuation lines are indented, so text a player
    typed can never pose as another speaker's line.
    """
    body = _body(msg).replace("\n", "\n  ")
    if is_marker(msg):
        return f"Earlier summary: {body}"
    role = msg.get("role") or "user"
    label = msg.get("name") or _LABELS.get(role, role.capitalize())
    return f"{label} ({role}): {body}".rstrip()


def format_messages_for_compaction(messages) -> str:
    """Return the transcript of ``messages`` (list of dicts): one line per message, oldest
    first (see :func:`format_message_for_compaction`)."""
    return "\n".join(format_message_for_compaction(msg) for msg in messages)


def split_markers(messages) -> tuple:
    """
    Separate earlier ``[CONTEXT SUMMARY]`` markers from the rest.

    Returns:
        tuple: ``(previous_summary, others)``: the markers' texts (prefix removed) joined by a
        blank line, or None if there were none; and the other messages in order. Pass both to
        :func:`build_summary_request` for a running summary.
    """
    texts = [_marker_text(msg) for msg in messages if is_marker(msg)]
    others = [msg for msg in messages if not is_marker(msg)]
    return ("\n\n".join(text for text in texts if text) or None), others


def build_summary_request(messages, prompt=None, previous_summary=None) -> list:
    """
    Build the chat messages asking a model to summarise ``messages``.

    Args:
        messages (list[dict]): the messages to compact (markers among them are shown as
            earlier summaries).
        prompt (str, optional): system prompt; default :data:`DEFAULT_COMPACTION_PROMPT`.
        previous_summary (str, optional): notes from earlier compactions (or the previous
            chunk); the request asks to fold them into the new notes (running summary).

    Returns:
        list[dict]: ``[{"role": "system", ...}, {"role": "user", ...}]``, ready for a chat
        completion. The transcript is fenced in ``<transcript>`` tags so it reads as data.

    Raises:
        ValueError: if there is neither a message nor a previous summary.
    """
    if not messages and not previous_summary:
        raise ValueError("nothing to summarise")
    transcript = format_messages_for_compaction(messages)
    if previous_summary:
        user = (
            "My notes so far:\n<notes>\n"
            f"{previous_summary.strip()}\n</notes>\n\n"
            f"What happened since:\n<transcript>\n{transcript}\n</transcript>\n\n"
            "Rewrite my notes as one set: keep every fact from the notes that is still true, "
            "add what is new, update what changed, and mark promises that were kept as done."
        )
    else:
        user = (
            f"Conversation log:\n<transcript>\n{transcript}\n</transcript>\n\n"
            "Write my notes now."
        )
    return [
        {"role": "system", "content": prompt or DEFAULT_COMPACTION_PROMPT},
        {"role": "user", "content": user},
    ]


def _line_cost(msg, model):
    # +1 for the newline that joins it to the next line of the transcript.
    return count_tokens(format_message_for_compaction(msg), model) + 1


def _truncated_copy(msg, budget, model):
    """A copy of ``msg`` whose transcript line fits ``budget`` tokens, ending in a note of what
    was left out. Raises ValueError when even an empty line with the note does not fit."""
    body = _body(msg)
    total = count_tokens(body, model)
    metadata = {**(msg.get("metadata") or {}), "truncated_for_summary": True}
    keep = budget
    while keep > 0:
        kept = truncate_to_tokens(body, keep, model)
        omitted = max(0, total - count_tokens(kept, model))
        note = f" [... {omitted} of {total} tokens left out to fit the summary request]"
        copy = {key: value for key, value in msg.items() if key != "tool_calls"}
        copy["content"] = (SUMMARY_PREFIX + "\n" if is_marker(msg) else "") + kept + note
        copy["metadata"] = metadata
        cost = _line_cost(copy, model)
        if cost <= budget:
            return copy, cost
        keep = min(keep - 1, keep - (cost - budget))
    raise ValueError(f"input_budget_tokens={budget} cannot hold even one truncated message")


def plan_summary_chunks(messages, token_counts, input_budget_tokens, *,
                        model=None) -> list[list[Message]]:
    """
    Split ``messages`` into consecutive chunks whose transcripts each fit the summariser's input.

    The caller summarises chunk 1, then each next chunk with the previous result as
    ``previous_summary`` (a running summary), so a history larger than the summariser's context
    window is still compacted whole rather than dropped (Codex CLI drops the oldest items; here
    nothing is lost).

    Args:
        messages (list[dict]): messages to compact, oldest first.
        token_counts (list[int] or None): the caller's per-message counts. A message costs the
            larger of its count and its transcript line's own count, so a chunk fits under both
            accountings (they differ when the caller counts with another model's encoding).
        input_budget_tokens (int): tokens allowed for one chunk's transcript (the summariser's
            context minus the prompt, the previous summary and the reply).
        model (str, optional): model name for counting the transcript.

    Returns:
        list[list[dict]]: the chunks; together they hold every message, in order. A message
        whose line alone exceeds the budget is replaced by a truncated copy (same ``id``,
        ``metadata["truncated_for_summary"] = True``, a note saying how much was left out).

    Raises:
        ValueError: on mismatched lengths, or a budget too small for one truncated line.
    """
    if token_counts is not None and len(token_counts) != len(messages):
        raise ValueError(
            f"token_counts has {len(token_counts)} entries for {len(messages)} messages"
        )
    chunks, current, used = [], [], 0
    for index, msg in enumerate(messages):
        cost = _line_cost(msg, model)
        if token_counts is not None:
            cost = max(cost, token_counts[index])
        if cost > input_budget_tokens:
            msg, cost = _truncated_copy(msg, input_budget_tokens, model)
        if current and used + cost > input_budget_tokens:
            chunks.append(current)
            current, used = [], 0
        current.append(msg)
        used += cost
    if current:
        chunks.append(current)
    return chunks


def _seq_range(compacted):
    seqs = []
    for msg in compacted:
        meta = msg.get("metadata") or {}
        if is_marker(msg):
            seqs += [meta.get("first_seq"), meta.get("last_seq")]
        seqs.append(msg.get("seq"))
    seqs = [seq for seq in seqs if isinstance(seq, int)]
    return (min(seqs), max(seqs)) if seqs else (None, None)


def make_marker(summary_text, compacted, original_token_count, summary_token_count, *,
                source=None, **meta) -> Message:
    """
    Build the ``[CONTEXT SUMMARY]`` marker that replaces ``compacted`` (``docs/design.md``,
    "Summary compaction").

    Args:
        summary_text (str): the cleaned summary.
        compacted (list[dict]): the messages it replaces, oldest first (non-empty).
        original_token_count (int): tokens of ``compacted``.
        summary_token_count (int): tokens of the marker (or of ``summary_text``).
        **meta: extra metadata (e.g. ``trigger="sleep"``, ``model=...``).

    Returns:
        Message: a ``system`` message with content ``"[CONTEXT SUMMARY]\\n" + summary_text``
        (normalised, :func:`ai_contrib.core.text.normalise_player_text` with line breaks) and
        ``metadata`` ``type="compaction"``, ``compacted_count``, ``compacted_at`` (ISO-8601 UTC),
        ``original_token_count``, ``summary_token_count``, ``first_id``/``last_id`` (ids of the
        first and last compacted message) and ``first_seq``/``last_seq`` (archive range,
        widened to cover earlier markers folded in; None when unknown), ``audience``
        (:func:`ai_contrib.core.audience.common_audience` of ``source``), plus ``meta``; when
        ``source`` left lines of ``compacted`` out, ``left_out`` (how many) and
        ``left_out_seqs`` (their archive seqs, where they stay retrievable).
        source (list[dict], optional): the messages of ``compacted`` the summary was written
            from (:func:`ai_contrib.core.audience.shared_part`); default all of them.

    Raises:
        ValueError: if ``compacted`` is empty.
    """
    if not compacted:
        raise ValueError("a marker must replace at least one message")
    first_seq, last_seq = _seq_range(compacted)
    metadata = dict(meta)
    metadata.update(
        type="compaction",
        compacted_count=len(compacted),
        compacted_at=utc_now_iso(),
        original_token_count=original_token_count,
        summary_token_count=summary_token_count,
        first_id=compacted[0].get("id"),
        last_id=compacted[-1].get("id"),
        first_seq=first_seq,
        last_seq=last_seq,
    )
    # a summary may repeat anything it replaces: only those who heard all of it may hear it
    # (docs/design.md, "Privacy by audience"); None when all of it was public
    source = compacted if source is None else source
    metadata["audience"] = common_audience(source)
    if len(source) < len(compacted):
        # lines a narrower group heard are not in this summary (docs/design.md, "Summaries by
        # audience"): the archive keeps them, and retrieval finds them for those who heard them
        kept = {id(msg) for msg in source}
        left_out = [msg for msg in compacted if id(msg) not in kept]
        metadata["left_out"] = len(left_out)
        metadata["left_out_seqs"] = [msg.get("seq") for msg in left_out]
    # whatever wrote it (a model, an extract), the stored summary is data: no control token
    # of a chat template survives into the prompts it is shown in
    summary_text = normalise_player_text(summary_text, MODEL_TEXT_MAX_CHARS, multiline=True)
    return make_message("system", f"{SUMMARY_PREFIX}\n{summary_text}", metadata=metadata)


def clean_summary(raw_text) -> str:
    """
    Return the model's summary made safe to store as a marker: reasoning (``<think>`` blocks)
    and a surrounding code fence removed, leading echoes of ``[CONTEXT SUMMARY]``, "Summary:"
    or speaker labels stripped, transcript-style lines ``"Mara (user): ..."`` rewritten as
    ``"Mara said: ..."`` so no line reads as a player speaking, and the text normalised as
    player text is, line breaks kept (:func:`ai_contrib.core.text.normalise_player_text`).
    ``None`` gives ``""``.
    """
    text = _THINK.sub("", raw_text or "").strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    previous = None
    while text != previous:
        previous = text
        text = _LEADING_LABEL.sub("", text, count=1).strip()
    text = _TRANSCRIPT_LINE.sub(lambda m: f"{m[1]}{m[2]} {_VERBS[m[3].lower()]}: ", text)
    # model-written text is data (docs/design.md, "Player text is data"): it comes back as the
    # previous summary of the next request and in every later reply prompt
    return normalise_player_text(text, MODEL_TEXT_MAX_CHARS, multiline=True)


def check_summary(summary_text, summary_tokens, replaced_tokens, min_saving_tokens) -> str | None:
    """
    Validate a summary before it replaces history (``docs/design.md``, "Summary compaction";
    OpenCode's stall check).

    Args:
        summary_text (str): the cleaned summary.
        summary_tokens (int): tokens the marker will cost.
        replaced_tokens (int): tokens of the messages it replaces.
        min_saving_tokens (int): the smallest saving worth a compaction.

    Returns:
        None if the summary may be used, else a one-line reason (empty; not shorter than what
        it replaces; saves too little).
    """
    if not summary_text or not summary_text.strip():
        return "empty summary"
    if summary_tokens >= replaced_tokens:
        return (
            f"summary ({summary_tokens} tokens) is not shorter than the "
            f"{replaced_tokens} tokens it replaces"
        )
    saving = replaced_tokens - summary_tokens
    if saving < min_saving_tokens:
        return f"summary saves only {saving} tokens (minimum {min_saving_tokens})"
    return None


def estimate_summary_tokens(input_tokens, max_output_tokens, ratio=DEFAULT_SUMMARY_RATIO) -> int:
    """
    Estimate the tokens a ``[CONTEXT SUMMARY]`` marker will cost before asking for it
    (``docs/design.md``, "Summary compaction": the benefit guard estimates the summary first).

    Args:
        input_tokens (int): tokens of the messages to be summarised.
        max_output_tokens (int): the most the summariser may generate (``max_tokens``).
        ratio (float): expected summary tokens per input token.

    Returns:
        int: ``min(max_output_tokens, ceil(input_tokens * ratio))`` plus the marker's overhead
        (per-message overhead and the ``[CONTEXT SUMMARY]`` prefix line).
    """
    body = min(int(max_output_tokens), math.ceil(input_tokens * ratio))
    return max(0, body) + PER_MESSAGE_OVERHEAD + count_tokens(SUMMARY_PREFIX + "\n")


class BenefitDecision(TypedDict):
    """
    The benefit guard's decision (:func:`benefit_decision`), all token counts; kept as a plain
    dict in ``script.db.compact_benefit`` for ``aihistory``, where the runner adds the
    ``NotRequired`` fields (:func:`ai_contrib.npc.compaction_runner.check_benefit`).
    """

    run: bool  #: compact (True) or skip
    current_tokens: int  #: tokens the summary would replace
    estimated_summary_tokens: int  #: the summary's expected size
    estimated_saving: int  #: ``current_tokens - estimated_summary_tokens``
    min_saving_tokens: int  #: the smallest saving worth an LLM call
    reason: str  #: ``"<current> - <estimate> = <saving> >= <min> tokens"`` (or ``<``)
    at: NotRequired[str]  #: when it was decided (ISO-8601 UTC)
    trigger: NotRequired[str]  #: what asked for the compaction
    bypassed: NotRequired[bool]  #: an admin's ``compact/force`` ran it though it would skip


def benefit_decision(current_tokens, estimated_summary_tokens, min_saving_tokens
                     ) -> BenefitDecision:
    """
    The benefit guard (``docs/design.md``, "Summary compaction"): compact only when
    ``current_tokens - estimated_summary_tokens >= min_saving_tokens``.

    Args:
        current_tokens (int): tokens the summary would replace (the whole history for
            the ``replace_all`` strategy; the part before the preserve window otherwise).
        estimated_summary_tokens (int): see :func:`estimate_summary_tokens`.
        min_saving_tokens (int): the smallest saving worth an LLM call.

    Returns:
        BenefitDecision: without its ``NotRequired`` fields.
    """
    saving = int(current_tokens) - int(estimated_summary_tokens)
    run = saving >= int(min_saving_tokens)
    reason = (
        f"{current_tokens} - {estimated_summary_tokens} = {saving} "
        f"{'>=' if run else '<'} {min_saving_tokens} tokens"
    )
    return {
        "run": run,
        "current_tokens": int(current_tokens),
        "estimated_summary_tokens": int(estimated_summary_tokens),
        "estimated_saving": saving,
        "min_saving_tokens": int(min_saving_tokens),
        "reason": reason,
    }
