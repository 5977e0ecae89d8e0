"""
Structured summaries and the prompts that ask for them.

``docs/design.md``, "Structured summaries": a compaction summary is working memory for the next
turns, so it has a fixed set of small sections that a program can read back. Adapted to an NPC,
the sections are :data:`SECTIONS`. Models drop sections, rename them ("People" for "Who I Spoke
With") or format their headings differently, so :func:`parse_sections` maps what it finds onto
the fixed names and keeps anything it cannot map under the model's own title: nothing the model
wrote is dropped.

Also here:

- :func:`build_base_summary_request`: the base-model prompt (``docs/design.md``, "Structured
  summaries": no chat wrapper, the transcript, then ``SUMMARY:``), for backends without a
  chat template. It is sent as a single user message because the client speaks only
  ``/chat/completions``; :func:`base_prompt_text` gives the bare text for a ``/completions``
  backend.
- :func:`plan_replace_all`: what the ``replace_all`` strategy replaces (the whole runtime
  history, with no raw tail).

Message shape: :mod:`ai_contrib.core.messages`. Text sizes are in characters unless named tokens.
"""

from __future__ import annotations

import re

from .cuts import hold_cut
from .messages import is_marker
from .summary import format_messages_for_compaction

__all__ = [
    "BASE_SUMMARY_INSTRUCTION",
    "PREAMBLE",
    "SECTIONS",
    "base_prompt_text",
    "build_base_summary_request",
    "canonical_section",
    "normalise_summary",
    "parse_sections",
    "plan_replace_all",
    "render",
    "render_sections",
]

#: The fixed sections of an NPC's compaction summary, in rendering order.
SECTIONS = (
    "Who I Spoke With",
    "Confirmed Facts",
    "Promises and Quests",
    "Decisions Made",
    "Open Questions",
    "Relationship State",
    "Important Names and Places",
)
#: Key of the text a model wrote before its first heading.
PREAMBLE = ""

BASE_SUMMARY_INSTRUCTION = (
    "Summarize these memories as my private notes, in the first person, under the headings "
    + ", ".join(SECTIONS)
    + " (leave out a heading with nothing under it):"
)

# Exact alternative titles (normalised: lower case, no punctuation) seen from models or from
# earlier versions of the prompt ("People, Places and events, Promises, Decisions, Open
# questions") and generic agent headings ("User Goal ... Important References"); see
# docs/design.md, "Structured summaries".
_ALIASES = {
    "people": SECTIONS[0],
    "who i spoke to": SECTIONS[0],
    "who i talked to": SECTIONS[0],
    "who i talked with": SECTIONS[0],
    "people i met": SECTIONS[0],
    "people i spoke with": SECTIONS[0],
    "user goal": SECTIONS[0],
    "facts": SECTIONS[1],
    "key facts": SECTIONS[1],
    "known facts": SECTIONS[1],
    "promises": SECTIONS[2],
    "quests": SECTIONS[2],
    "promises and deals": SECTIONS[2],
    "pending actions": SECTIONS[2],
    "decisions": SECTIONS[3],
    "open issues": SECTIONS[4],
    "questions": SECTIONS[4],
    "relationships": SECTIONS[5],
    "relationship": SECTIONS[5],
    "places": SECTIONS[6],
    "places and events": SECTIONS[6],
    "names and places": SECTIONS[6],
    "important references": SECTIONS[6],
    "names": SECTIONS[6],
}
for _title in SECTIONS:
    _ALIASES[_title.lower()] = _title

# Keyword fallbacks for renamed headings, checked in this order (the first hit wins), so
# "Open questions about people" is an open question, not a person.
_KEYWORDS = (
    (("question", "open issue", "unresolved", "unknown", "to verify", "unclear"), SECTIONS[4]),
    (("promise", "quest", "deal", "debt", "pending", "task", "todo", "to do"), SECTIONS[2]),
    (("decision", "decided"), SECTIONS[3]),
    (("relationship", "attitude", "standing", "trust", "feeling"), SECTIONS[5]),
    (("name", "place", "location", "reference", "where", "event"), SECTIONS[6]),
    (("fact", "known", "confirmed", "learned", "learnt"), SECTIONS[1]),
    (("spoke", "who", "people", "person", "talked", "met", "visitor", "character"), SECTIONS[0]),
)

_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_BOLD_HEADING = re.compile(r"^\s*(?:\*\*|__)(.+?)(?:\*\*|__)\s*:?\s*$")
_NUMBER = re.compile(r"^\s*(?:\d+[.)]|[ivx]+[.)])\s+", re.IGNORECASE)
_COLON_ONLY = re.compile(r"^\s*([^\n:*#\-][^\n:]{0,47}):\s*$")
_INLINE = re.compile(r"^\s*(?:\*\*)?([^\n:*#\-][^\n:]{0,47}?)(?:\*\*)?:\s+(\S.*)$")


def _normalise_title(title):
    title = _NUMBER.sub("", title or "")
    title = re.sub(r"[*_#`:]", " ", title)
    title = re.sub(r"\s*\(.*?\)\s*", " ", title)
    return " ".join(title.lower().split())


def canonical_section(title, fuzzy=True) -> str | None:
    """
    Map a heading a model wrote onto one of :data:`SECTIONS`.

    Args:
        title (str): the heading text (markdown marks, numbering and a trailing colon allowed).
        fuzzy (bool): also try keyword matching ("My promises" -> "Promises and Quests");
            False accepts only the exact names and known aliases.

    Returns:
        str or None: the canonical section name, or None when the title matches none.
    """
    norm = _normalise_title(title)
    if not norm:
        return None
    if norm in _ALIASES:
        return _ALIASES[norm]
    if fuzzy:
        for words, section in _KEYWORDS:
            if any(re.search(r"\b" + re.escape(word), norm) for word in words):
                return section
    return None


def _heading(line):
    """``(title, canonical or None, rest_of_line)`` if ``line`` is a heading, else None."""
    for pattern in (_MD_HEADING, _BOLD_HEADING):
        match = pattern.match(line)
        if match:
            title = match.group(1).strip().rstrip(":").strip()
            head, colon, rest = title.partition(":")
            canonical = canonical_section(head, fuzzy=False) if colon else None
            if canonical:  # "## Confirmed Facts: the innkeeper owes me" keeps its text
                return head.strip(), canonical, rest.strip()
            return title, canonical_section(title), ""
    stripped = _NUMBER.sub("", line)
    if stripped != line:
        title = stripped.strip().rstrip(":").strip()
        canonical = canonical_section(title, fuzzy=False)
        if canonical and len(title.split()) <= 6:
            return title, canonical, ""
    match = _COLON_ONLY.match(line)
    if match:
        title = match.group(1).strip()
        canonical = canonical_section(title)
        if canonical and len(title.split()) <= 5:
            return title, canonical, ""
    match = _INLINE.match(line)
    if match:
        canonical = canonical_section(match.group(1), fuzzy=False)
        if canonical:
            return match.group(1).strip(), canonical, match.group(2).strip()
    return None


def parse_sections(text) -> dict[str, str]:
    """
    Split a structured summary into its sections.

    Headings are recognised as markdown headings (``## Confirmed Facts``), bold lines
    (``**Confirmed Facts**``), numbered titles (``1. Confirmed Facts``), a known title alone on a
    line ending in a colon, or a known title followed by text on the same line
    (``Open Questions: none``). Known titles and renamed ones (``People``, ``My promises``) map
    to :data:`SECTIONS`; other markdown or bold headings are kept under their own title. Two
    headings mapping to the same section are merged, in order.

    Args:
        text (str): the summary (``None`` counts as empty).

    Returns:
        dict[str, str]: ``{section title: body text}`` in the order first seen; text before the
        first heading is under :data:`PREAMBLE` (``""``). Bodies are stripped; empty sections
        are left out; an empty ``text`` gives ``{}``.
    """
    sections = {}
    order = []
    current = PREAMBLE
    for line in (text or "").splitlines():
        found = _heading(line)
        if found:
            title, canonical, rest = found
            current = canonical or title
            if current not in sections:
                sections[current] = []
                order.append(current)
            if rest:
                sections[current].append(rest)
            continue
        if current not in sections:
            sections[current] = []
            order.append(current)
        sections[current].append(line)
    out = {}
    for key in order:
        body = "\n".join(sections[key]).strip()
        if body:
            out[key] = body
    return out


def render_sections(sections) -> str:
    """
    Render ``{section: body}`` as text: the preamble first (no heading), then the sections of
    :data:`SECTIONS` in their fixed order, then any other sections in the given order, each as
    ``"## Title"`` followed by its body, separated by blank lines. Empty bodies are left out.
    ``parse_sections(render_sections(s))`` gives ``s`` back (up to order) when the bodies are
    stripped, non-empty and hold no heading lines, and every extra title is one that
    :func:`canonical_section` does not map.
    """
    blocks = []
    preamble = (sections.get(PREAMBLE) or "").strip()
    if preamble:
        blocks.append(preamble)
    ordered = [title for title in SECTIONS if title in sections]
    ordered += [title for title in sections if title not in SECTIONS and title != PREAMBLE]
    for title in ordered:
        body = (sections.get(title) or "").strip()
        if body:
            blocks.append(f"## {title}\n{body}")
    return "\n\n".join(blocks)


render = render_sections


def normalise_summary(text) -> str:
    """
    Return a summary with its recognised sections under their canonical headings, in the fixed
    order. A summary with no recognised section (a custom prompt's free text, a 2-3 sentence
    summary) is returned stripped and otherwise unchanged.
    """
    text = (text or "").strip()
    sections = parse_sections(text)
    if not any(title in SECTIONS for title in sections):
        return text
    return render_sections(sections)


def base_prompt_text(messages, instruction=None, previous_summary=None) -> str:
    """
    The completion-style prompt for a base model (``docs/design.md``, "Structured summaries"):
    ``instruction``, a blank line, the transcript (one ``"Name (role): text"`` line per
    message; earlier summaries as ``"Earlier summary: ..."``), then ``"SUMMARY:"`` on its own
    line for the model to continue. A ``previous_summary`` comes first as ``"Earlier notes:"``
    so it is folded in.

    Args:
        messages (list[dict]): the messages to summarise.
        instruction (str, optional): default :data:`BASE_SUMMARY_INSTRUCTION`.
        previous_summary (str, optional): notes so far (a running summary).

    Returns:
        str: the prompt, ending in ``"\\nSUMMARY:\\n"``.

    Raises:
        ValueError: if there is neither a message nor a previous summary.
    """
    if not messages and not previous_summary:
        raise ValueError("nothing to summarise")
    parts = [(instruction or BASE_SUMMARY_INSTRUCTION).strip(), ""]
    if previous_summary:
        parts += ["Earlier notes:", previous_summary.strip(), ""]
    if messages:
        parts.append(format_messages_for_compaction(messages))
    return "\n".join(parts) + "\nSUMMARY:\n"


def build_base_summary_request(messages, instruction=None, previous_summary=None) -> list:
    """
    :func:`base_prompt_text` wrapped as a chat request of one user message (no system prompt),
    for an OpenAI-compatible ``/chat/completions`` endpoint serving a model without a chat
    template.

    Returns:
        list[dict]: ``[{"role": "user", "content": <prompt text>}]``.
    """
    return [{"role": "user", "content": base_prompt_text(messages, instruction, previous_summary)}]


def plan_replace_all(history, keep_tail=0, keep_ids=()) -> tuple:
    """
    What the ``replace_all`` strategy replaces: the whole runtime history, to become one
    structured summary, with no raw messages kept after it.

    Args:
        history (list[dict]): the runtime history, oldest first.
        keep_tail (int): trailing messages still waiting for an answer (players whose speech
            the NPC has not answered yet) that stay verbatim so the reply can see them; the cut
            is then moved earlier to a safe cut (a tool call stays with its results).
        keep_ids (iterable[str]): ids of messages that stay verbatim with everything after them
            (the lines awaiting an answer, :func:`ai_contrib.core.cuts.hold_cut`).

    Returns:
        tuple: ``(to_compact, kept, reason)``: ``to_compact`` is ``history[:cut]`` and ``kept``
        ``history[cut:]``; ``reason`` is None when there is something to compact, else
        ``"no history"`` or ``"nothing to compact"`` (only one summary, or nothing but
        unanswered messages).
    """
    if not history:
        return [], [], "no history"
    cut = hold_cut(history, max(0, len(history) - max(0, int(keep_tail))), keep_ids)
    to_compact, kept = list(history[:cut]), list(history[cut:])
    if not to_compact or (len(to_compact) == 1 and is_marker(to_compact[0])):
        return [], list(history), "nothing to compact"
    return to_compact, kept, None
