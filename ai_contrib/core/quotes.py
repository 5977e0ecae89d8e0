"""
Quotes you can trust: does a line a summary, synthesis or fact gives as someone's words match
what that speaker said?

``docs/design.md``, "Summary fidelity" (quotes). The word-level and one-line checks
(:mod:`ai_contrib.core.fidelity`, :mod:`ai_contrib.core.grounding`) count evidence present: a
summary that quotes, five times, a line nobody said can still pass them, and a quote is the
strongest claim a summary makes ("Bob said: ..." is read back as Bob's words in every later
prompt). So every quote attributed to a speaker is checked verbatim:

- **forms** (:func:`find_quotes`): ``Bob said: text`` (the extract's own form, the rest of the
  line being the quote; ``asked``, ``replied``, ``told Marta`` ... too), ``Bob said "text"``,
  ``Bob said, "text"``, ``Bob told Marta "text"``, ``Bob: "text"``, ``"text," Bob said`` and
  ``"text," said Bob``; straight or curly double quotes; ``I said: ...`` is the NPC's own line
  (an assistant message), ``he said: ...`` anyone's. A quoted string with no speaker is not
  checked against anyone but counts for repeats.
- **match** (:func:`check_quotes`): after normalising case, whitespace, punctuation and
  apostrophes, the quote's words must be a contiguous run of the words of one of the speaker's
  lines (a quote may be part of a line; an ellipsis ``...`` may join parts of one line, in
  order); a paraphrase with one word changed is not a quote.
- **fails**: a quote no line of its speaker holds, said by someone else ("Bob's words, not
  Mara's"), said by no one, or the same quoted passage given to the same speaker (or to anyone:
  a pronoun, no speaker) :data:`MAX_REPEATS` times or more in one text.

Pure module: no Evennia, Twisted or Django imports.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from .fidelity import message_texts
from .speakers import NAME, OBJECT, PRONOUNS, SAID_COLON, VERBS, WHO, speaker_label
from .text import quote_words

__all__ = [
    "MAX_REPEATS",
    "Quote",
    "QuoteCheck",
    "QuoteFailure",
    "check_quotes",
    "find_quotes",
    "quote_words",
    "speaker_lines",
    "without_failed_quotes",
]

#: Times the same quoted passage may appear in one text before it fails (three is a loop, not
#: a summary: the invented quote that started this check stood five times in one summary).
MAX_REPEATS = 3

_OPEN = "\"\u201c"
_CLOSE = "\"\u201d"
#: a quoted string: straight or curly double quotes, on one line
_QUOTED = re.compile(r"[\"\u201c](?P<text>[^\"\u201c\u201d\n]+)[\"\u201d]")
#: what may stand right before a quoted string to attribute it: "Bob said, " / "Bob: "
_BEFORE = re.compile(
    rf"(?:^|(?<=[\s(\-*\u2022]))(?P<who>{WHO})"
    rf"(?: (?:{VERBS}){OBJECT}\s*[,:]?|(?P<label>\s*:))\s*$")
#: and right after it: ", Bob said" / " said Bob"
_AFTER = re.compile(rf"^[,]?\s*(?:(?:{VERBS}) (?P<who1>{NAME})\b|(?P<who2>{WHO}) "
                    rf"(?:{VERBS})\b)")
_ELLIPSIS = re.compile(r"\.\.\.+|\u2026")
#: the labels of lines with no speaker's name: the extract's
# (:func:`ai_contrib.core.fidelity.extractive_summary`) and the transcript's a model may echo
# ("Player (user): ..." becomes "Player said: ...", :func:`ai_contrib.core.summary.clean_summary`)
_UNNAMED = {"user": ("someone", "player"), "system": ("the game", "game"),
            "assistant": ("i", "npc")}
_LABELS = frozenset(label for labels in _UNNAMED.values() for label in labels)


@dataclass(frozen=True)
class Quote:
    """
    One quote in a text (:func:`find_quotes`).

    Attributes:
        speaker (str | None): whose words it gives, case-folded (``"bob"``; ``"i"`` the NPC;
            ``"he"``, ``"she"``, ``"they"``, ``"we"``, ``"someone"``: anyone's); None for a
            quoted string with no speaker.
        text (str): the quoted words as written.
        start, end (int): its character offsets in the text.
        labelled (bool): given as ``Bob: "text"``, a form that is a speaker's words only when
            ``Bob`` is one of the source's speakers (``Note: "..."`` is not anyone's).
    """

    speaker: str | None
    text: str
    start: int
    end: int
    labelled: bool = False


@dataclass(frozen=True)
class QuoteFailure:
    """
    One quote that failed (:func:`check_quotes`).

    Attributes:
        quote (Quote): the quote (its first occurrence, for a repeat).
        reason (str): ``"no one said it"``, ``"<Speaker>'s words, not <speaker>'s"`` or
            ``"repeated N times"``.
    """

    quote: Quote
    reason: str

    def describe(self) -> str:
        """``'"text" (speaker): reason'``, quote cut to 60 characters, for logs and reports."""
        text = " ".join(self.quote.text.split())
        text = text if len(text) <= 60 else text[:57] + "..."
        who = f" ({self.quote.speaker})" if self.quote.speaker else ""
        return f'"{text}"{who}: {self.reason}'


@dataclass(frozen=True)
class QuoteCheck:
    """
    The verdict on a text's quotes (:func:`check_quotes`).

    Attributes:
        quotes (tuple[Quote]): every quote found, in order.
        failures (tuple[QuoteFailure]): the quotes that failed, in order, each passage once.
    """

    quotes: tuple = field(default_factory=tuple)
    failures: tuple = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """True when no quote failed."""
        return not self.failures

    @property
    def reason(self) -> str:
        """Why it failed (the first two failures), ``""`` when it passed."""
        if not self.failures:
            return ""
        shown = "; ".join(f.describe() for f in self.failures[:2])
        more = len(self.failures) - 2
        return ("quotes that are not their speaker's words: " + shown
                + (f" (and {more} more)" if more > 0 else ""))


def _speaker(who) -> str:
    return " ".join(who.split()).casefold()


def _quoted_strings(text):
    """A :class:`Quote` per quoted string, attributed by what stands right before or after
    it on its line."""
    for match in _QUOTED.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        before = _BEFORE.search(text[line_start:match.start()])
        after = _AFTER.match(text[match.end():line_end if line_end >= 0 else len(text)])
        who, labelled = None, False
        if before:
            who, labelled = before.group("who"), before.group("label") is not None
        elif after:
            who = after.group("who1") or after.group("who2")
        yield Quote(_speaker(who) if who else None, match.group("text"), match.start(),
                    match.end(), labelled)


def find_quotes(text) -> list:
    """
    The quotes of ``text`` (module docstring, "forms"), in order of their offsets.

    Args:
        text (str): a summary, a synthesis or a fact.

    Returns:
        list[Quote]: attributed quotes and unattributed quoted strings; a colon form whose rest
        opens with a quote mark gives the quoted string, once.
    """
    text = text or ""
    found = {}
    for quote in _quoted_strings(text):
        found[quote.start] = quote
    for match in SAID_COLON.finditer(text):
        rest = match.group("rest")
        start = match.start("rest")
        if rest[:1] in _OPEN and start in found:
            # the quoted string already found: the colon names its speaker
            quote = found[start]
            found[start] = Quote(_speaker(match.group("who")), quote.text, quote.start,
                                 quote.end)
            continue
        if quote_words(rest):
            found[start] = Quote(_speaker(match.group("who")), rest.strip(), start,
                                 match.end("rest"))
    return [found[key] for key in sorted(found)]


def speaker_lines(messages, extra=()) -> dict[str, list[str]]:
    """
    Who said what in ``messages``: ``{speaker case-folded: [line, ...]}``. A message's speaker
    is its ``name`` (and the name's first word: "Bob" for "Bob Smith"); an assistant's line is
    also ``"i"``'s and ``"npc"``'s (the NPC's own), an unnamed player's ``"someone"``'s and
    ``"player"``'s, the game's ``"the game"``'s and ``"game"``'s. A line of an earlier summary
    gives, to each speaker it quotes (a pronoun included), the quoted words (a quote that
    passed when that summary was checked).

    Args:
        messages (list[dict]): ``core/messages.py`` shape, markers included.
        extra (iterable[tuple[str, str]]): more ``(speaker, line)`` pairs (archived lines).

    Returns:
        dict[str, list[str]]
    """
    out = {}
    for _position, msg, text, summary in message_texts(messages):
        if summary:
            # a pronoun's too ("Someone said: ..." of an earlier extract): a pronoun's quote is
            # checked against everyone's lines, and the line it quoted may be summarised away
            for quote in find_quotes(text):
                if quote.speaker:
                    out.setdefault(quote.speaker, []).append(quote.text)
            continue
        for key in _keys(msg):
            out.setdefault(key, []).append(text)
    for speaker, line in extra:
        out.setdefault(_speaker(speaker), []).append(line)
    return out


def _keys(msg):
    """The speaker keys of one message (:func:`speaker_lines`)."""
    keys = []
    name = " ".join(str(msg.get("name") or "").split()).casefold()
    if name:
        keys += [name, name.split()[0]]
        # and the name as the extract writes it ("old tom" is "Old Tom", "." is "Someone")
        keys.append(_speaker(speaker_label(msg.get("name"))))
    if msg.get("role") == "assistant" or not name:
        keys += _UNNAMED.get(msg.get("role"), _UNNAMED["user"])
    return list(dict.fromkeys(keys))


def _in_line(pieces, line):
    """True when each of ``pieces`` (word tuples) is a run of ``line``, in order."""
    joined = f" {' '.join(line)} "
    at = 0
    for piece in pieces:
        found = joined.find(f" {' '.join(piece)} ", at)
        if found < 0:
            return False
        at = found + len(" ".join(piece)) + 1
    return True


def _said_by(pieces, lines):
    return any(_in_line(pieces, line) for line in lines)


def check_quotes(text, lines, max_repeats=MAX_REPEATS) -> QuoteCheck:
    """
    Check every quote of ``text`` against what its speaker said (module docstring).

    Args:
        text (str): a summary (without the ``[CONTEXT SUMMARY]`` prefix), a synthesis or a
            fact.
        lines (Mapping[str, Iterable[str]]): who said what (:func:`speaker_lines`).
        max_repeats (int): times one passage may stand in ``text`` before it fails.

    Returns:
        QuoteCheck: the quotes found and those that failed (a repeated passage once, with its
        count; otherwise each failed quote).
    """
    quotes = find_quotes(text)
    said = {speaker: [quote_words(line) for line in said_lines]
            for speaker, said_lines in (lines or {}).items()}
    failures, failed_passages = [], set()
    # a passage repeats when it is given again to the same speaker ("Then Mara said" is
    # Mara), or to anyone (a pronoun, no one): three speakers who each said "yes" are three
    # claims, one speaker quoted three times is a loop
    passages = [_passage(quote, said) for quote in quotes]
    counts = Counter(passage for passage in passages if passage[1])
    for quote, passage in zip(quotes, passages):
        if passage[1] and counts[passage] >= max_repeats:
            if passage not in failed_passages:
                failed_passages.add(passage)
                failures.append(QuoteFailure(quote, f"repeated {counts[passage]} times"))
            continue
        reason = _quote_problem(quote, said)
        if reason:
            failures.append(QuoteFailure(quote, reason))
    return QuoteCheck(tuple(quotes), tuple(failures))


def _passage(quote, said):
    """What makes two quotes the same passage: ``(speaker, words)``, the speaker as
    :func:`_resolve` reads it, None for a pronoun or no speaker."""
    who = quote.speaker
    if who is not None:
        who = None if who in PRONOUNS else _resolve(who, said)
    return who, quote_words(quote.text)


def _resolve(speaker, said):
    """The key of ``said`` that ``speaker`` names: itself, else its shortest known tail ("then
    bob" -> "bob": a sentence's opening word read as part of the name), else itself."""
    if speaker in said:
        return speaker
    words = speaker.split()
    for i in range(1, len(words)):
        tail = " ".join(words[i:])
        if tail in said:
            return tail
    return speaker


def _quote_problem(quote, said) -> str:
    """Why one attributed quote is not its speaker's words, or ``""`` (unattributed: ``""``)."""
    if quote.speaker is None:
        return ""
    speaker = _resolve(quote.speaker, said)
    if quote.labelled and speaker not in said:
        return ""  # "Note: ..." names no speaker
    pieces = [quote_words(part) for part in _ELLIPSIS.split(quote.text)]
    pieces = [piece for piece in pieces if piece]
    if not pieces:
        return ""
    if quote.speaker in PRONOUNS:
        return "" if any(_said_by(pieces, lines) for lines in said.values()) \
            else "no one said it"
    if _said_by(pieces, said.get(speaker, ())):
        return ""
    others = [who for who, lines in said.items()
              if who not in PRONOUNS and who not in _LABELS and _said_by(pieces, lines)]
    if others:
        return f"{others[0].title()}'s words, not {speaker.title()}'s"
    return "no one said it"


def without_failed_quotes(text, check) -> str:
    """
    ``text`` without the lines that hold a failed quote of ``check`` (every occurrence of a
    repeated passage), for the repair of what was stored before this check existed.

    Args:
        text (str): the checked text. check (QuoteCheck): :func:`check_quotes` of it.

    Returns:
        str: the lines left, joined by line breaks (``""`` when none is left with a word).
    """
    bad = {quote_words(f.quote.text) for f in check.failures if "repeated" in f.reason}
    spans = [(f.quote.start, f.quote.end) for f in check.failures]
    spans += [(q.start, q.end) for q in check.quotes if quote_words(q.text) in bad]
    kept, offset = [], 0
    for line in (text or "").split("\n"):
        end = offset + len(line)
        if not any(start < end + 1 and stop > offset for start, stop in spans):
            kept.append(line)
        offset = end + 1
    return "\n".join(kept) if any(quote_words(line) for line in kept) else ""
