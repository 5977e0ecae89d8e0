"""
Facts you can trust: does a fact say what *one* line of its conversation says?

``docs/design.md``, "Facts you can trust". The word-level check
(:func:`ai_contrib.core.fidelity.fact_problem`) asks whether a fact's names, numbers and words
occur somewhere in the conversation; a small model's fact passes it by gluing words of several
lines into a claim nobody made ("Caroline is a hero! She's taking care of herself..."). A fact
an NPC journals is one thing someone said, so it is checked against the single line that best
supports it:

- **named**: it does not open with a pronoun that points at someone unnamed (a fact that starts
  "You're so lucky..." means nothing once the conversation is gone; "I" is the NPC itself);
- **names and numbers**: every name and number of the fact occurs in the conversation
  (a line's speaker and, for a line that says "you", the person it answers count as its words);
- **one line**: its *support*, the share of its names, numbers and content words found in the
  single best source line, is at least :data:`MIN_LINE_SUPPORT`, and that line holds its
  subject (its first name);
- **language**: it is in the conversation's language (:mod:`ai_contrib.core.language`).

A summary is checked the same way sentence by sentence (:func:`check_summary`): at least
:data:`MIN_SUMMARY_SENTENCES` of its sentences must each be supported by one line at
:data:`MIN_SENTENCE_SUPPORT`; a summary merges lines, so the bar per sentence is lower. But
every name and number in it (headings included, but for the fixed section headings of
:mod:`ai_contrib.core.structured`) must occur in the conversation, and a line it gives as
someone's words (``"- Melanie said: ..."``) is supported only by what that speaker said: it
becomes a synthesis in the journal, and then long-term memory.

A fact that fails can be replaced by its best line, verbatim and attributed
(:func:`attributed_line`: ``"Caroline said: I went to a LGBTQ support group yesterday."``).

Pure module: no Evennia, Twisted or Django imports. Shares are floats 0-1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .fidelity import items_of, message_texts, section_heading, source_vocabulary
from .language import language_problem

__all__ = [
    "Grounding",
    "MIN_LINE_SUPPORT",
    "MIN_SENTENCE_SUPPORT",
    "MIN_SUMMARY_SENTENCES",
    "SourceLine",
    "attributed_line",
    "check_fact",
    "check_summary",
    "fact_support",
    "line_entity",
    "line_support",
    "sentences",
    "source_lines",
    "source_names",
    "summary_speaker",
    "unknown_items",
]

#: Least share of a fact's names, numbers and content words that its best single source line
#: must hold. Measured on 60 labelled facts about LoCoMo conversations (``benchmarks/
#: fact_grounding.py``; ``docs/design.md``, "Facts you can trust").
MIN_LINE_SUPPORT = 0.7
#: The same for each sentence of a summary (a summary may merge two lines into one sentence).
MIN_SENTENCE_SUPPORT = 0.5
#: Least share of a summary's sentences that must reach :data:`MIN_SENTENCE_SUPPORT`.
MIN_SUMMARY_SENTENCES = 0.5

_YOU = frozenset("you you're your yours you'll you've you'd yourself".split())
# capitalised words that open a fact without naming anyone
_NOT_SUBJECTS = frozenset(
    "i i'm i've i'll i'd you you're your he she it we they this that these those there the a an "
    "my his her our their its yes no oh wow hey hi hello thanks so and but she's he's it's "
    "they're we're they'll she'll he'll we'll let's that's there's what".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019-]*")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
#: where a word may open a sentence or clause (an observation is checked as "Entity: text")
_CLAUSE_START = re.compile(r"(?<=[.!?;:])\s+|\n+")
_SUFFIXES = ("ing", "ed", "es", "s")


@dataclass(frozen=True)
class SourceLine:
    """One line of a source: ``speaker`` (str; ``""`` for a summary line or a line with no
    speaker's name, such as the game's), ``text`` (str), ``addressee`` (str: the speaker it
    answers, ``""`` when unknown), ``index`` (int: the position of its message in the list
    :func:`source_lines` read, -1 when not from one) and ``summary`` (bool: a line of an
    earlier summary, whoever's words it holds)."""

    speaker: str
    text: str
    addressee: str = ""
    index: int = -1
    summary: bool = False


@dataclass(frozen=True)
class Grounding:
    """
    The verdict on one fact or summary (:func:`check_fact`, :func:`check_summary`).

    Attributes:
        support (float): share of the fact's names, numbers and content words in its best line
            (for a summary: the share of its sentences that one line supports).
        line (int | None): index of that line in the source lines (None: no line).
        reason (str): why it failed, ``""`` when it passed.
    """

    support: float
    line: object = None
    reason: str = ""

    @property
    def passed(self) -> bool:
        """True when nothing failed."""
        return not self.reason


def source_lines(messages) -> list:
    """
    The lines a fact may come from: one :class:`SourceLine` per message with text (tool
    messages and tool-call bookkeeping left out), each line of an earlier summary with no
    speaker.

    Args:
        messages (list[dict]): ``core/messages.py`` shape.

    Returns:
        list[SourceLine]
    """
    out, last, before = [], "", ""
    for position, msg, text, summary in message_texts(messages):
        if summary:
            out.append(SourceLine("", text, "", position, summary=True))
            continue
        speaker = str(msg.get("name") or "")
        if speaker != last:
            before, last = last, speaker
        out.append(SourceLine(speaker, text, before, position))
    return out


def _stem(word):
    """A word's stem for matching: a plural or tense ending off, then its first five letters
    (``"pays"``, ``"paid"`` no; ``"pays"``, ``"paying"``, ``"pay"`` yes)."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    return word[:5]


def _line_words(line):
    """``(words casefolded, stems, numbers)`` of one line, its speaker (and, where it says
    "you", its addressee) counted among its words."""
    words, _stems, numbers = source_vocabulary(line.text)
    words = set(words)
    if line.speaker:
        words.update(w.casefold() for w in _WORD.findall(line.speaker))
    if line.addressee and words & _YOU:
        words.update(w.casefold() for w in _WORD.findall(line.addressee))
    return words, {_stem(w) for w in words}, numbers


def _opening(text):
    """The opening word of ``text`` case-folded, a possessive "'s" off (``""`` when none)."""
    first = next(iter(_WORD.findall(text or "")), "").casefold().replace("\u2019", "'")
    return first[:-2] if first.endswith("'s") else first


def source_names(lines) -> set:
    """The names of a source, case-folded: its speakers and the capitalised words its lines
    use not opening a sentence (:func:`ai_contrib.core.fidelity.items_of`). A set."""
    names = set()
    for line in lines:
        names.update(w.casefold() for w in _WORD.findall(line.speaker))
        names.update(n.casefold() for n in items_of(line.text)[0])
    return names


def _fact_items(text, known=()):
    """``(subject, names, numbers, content)``: the fact's subject (its opening word when that
    is one of the source's names ``known``, "Caroline went..."; else its first name; ``""``
    when it has none), its names (case-folded, subject included), numbers and content
    words."""
    names, numbers, content = items_of(text)
    names = [n.casefold() for n in names]
    first = _opening(text)
    subject = ""
    if first in known and first not in _NOT_SUBJECTS:
        subject = first
        content = [w for w in content if w != subject]
        names = [subject] + names
    elif names:
        subject = names[0]
    return subject, list(dict.fromkeys(names)), numbers, content


#: words a fact may open with that point at someone it does not name ("You're so lucky...")
_POINTING = frozenset("you you're your he she it they we he's she's it's they're we're they'll "
                      "she'll he'll we'll his her their them this that these those".split())


def _pronoun_led(text):
    """True when ``text`` opens with a pronoun other than "I" (a fact in the NPC's own voice,
    "I promise to pay Bob", says who)."""
    first = next(iter(_WORD.findall(text or "")), "").casefold().replace("\u2019", "'")
    return first in _POINTING


def _known(word, words):
    return word in words or word.rstrip("s") in words or word + "s" in words


def _coverage(items, vocab):
    """Share of ``items`` (``(names, numbers, content)``) found in ``vocab`` (``(words, stems,
    numbers)``)."""
    names, numbers, content = items
    words, stems, source_numbers = vocab
    found = sum(1 for n in names if _known(n, words))
    found += sum(1 for n in numbers if n in source_numbers)
    found += sum(1 for w in content if w in words or _stem(w) in stems)
    total = len(names) + len(numbers) + len(content)
    return found / total if total else 0.0


def line_support(text, lines, subject=None, known=None) -> tuple:
    """
    How well the single best line of ``lines`` supports ``text``.

    Args:
        text (str): a fact or one sentence. lines (list[SourceLine]): :func:`source_lines`.
        subject (str, optional): whom the text is about when it does not name them (a later
            sentence of a fact, "She's taking care of herself"), case-folded.
        known (set[str], optional): the source's names (:func:`source_names`; computed from
            ``lines`` when not given).

    Returns:
        tuple: ``(support: float 0-1, index: int | None)``: the share of the text's names,
        numbers and content words (and its subject) found in the best line holding its
        subject (any line when it has none), and that line's index (None when no line holds
        the subject or the text has nothing to check).
    """
    if known is None:
        known = source_names(lines)
    own, names, numbers, content = _fact_items(text, known)
    if not own and subject:
        own, names = subject, [subject] + names
    items = (names, numbers, content)
    best, index = 0.0, None
    for i, line in enumerate(lines):
        vocab = _line_words(line)
        if own and not _known(own, vocab[0]):
            continue
        share = _coverage(items, vocab)
        if share > best:
            best, index = share, i
    return round(best, 3), index


def fact_support(text, lines) -> tuple:
    """
    The support of a fact of one or more sentences: the least :func:`line_support` of its
    sentences (a sentence that names no one is read as about the fact's subject), so a claim
    glued to a line ("Caroline is a hero! She's taking care of herself") is as weak as its
    weakest sentence.

    Returns:
        tuple: ``(support: float 0-1, index: int | None)``: the index is the best line of the
        first sentence (the one a replacement quotes).
    """
    known = source_names(lines)
    subject = _fact_items(text, known)[0]
    parts = sentences(text) or [text]
    results = [line_support(part, lines, subject, known) for part in parts]
    return min(r[0] for r in results), results[0][1]


def _whole_source(lines):
    words, stems, numbers = set(), set(), set()
    for line in lines:
        w, s, n = _line_words(line)
        words |= w
        stems |= s
        numbers |= n
    return words, stems, numbers


def check_fact(text, lines, min_support=MIN_LINE_SUPPORT) -> Grounding:
    """
    Whether fact ``text`` says what one line of ``lines`` says (module docstring).

    Args:
        text (str): the fact (an observation as ``"Entity: observation"``).
        lines (list[SourceLine]): its source (:func:`source_lines`).
        min_support (float): :data:`MIN_LINE_SUPPORT` unless a caller measures another.

    Returns:
        Grounding: its support and best line, and the first check it failed.
    """
    subject, names, numbers, _content = _fact_items(text, source_names(lines))
    support, index = fact_support(text, lines)
    words, _stems, source_numbers = _whole_source(lines)
    missing = [n for n in names if not _known(n, words)]
    missing += [n for n in numbers if n not in source_numbers]
    # a capitalised opening word the conversation never uses reads as a name it never said
    # ("Gandalf went to the support group"), at the start of the fact and of each sentence or
    # clause in it ("Bob: Gandalf owes ...", "...; Gandalf owes ..."); inside a sentence it is
    # a name already
    openings = []
    for part in [text or ""] + _CLAUSE_START.split(text or "")[1:]:
        first = _opening(part)
        if part.lstrip()[:1].isupper() and first not in _NOT_SUBJECTS \
                and not _known(first, words) and first not in missing + openings:
            openings.append(first)
    missing[:0] = openings
    if missing:
        reason = "names or numbers the conversation does not mention: " + ", ".join(missing)
    elif not subject and _pronoun_led(text):
        reason = "it names no one of the conversation"
    elif index is None:
        reason = f"no line of the conversation says anything of {subject.title()}"
    elif support < min_support:
        reason = f"no one line says it (best line holds {support:.0%} of its words)"
    else:
        reason = language_problem(text, "\n".join(line.text for line in lines))
    return Grounding(support, index, reason)


def sentences(text) -> list:
    """The sentences of a summary or fact: split after ``. ! ? ;`` and at line breaks, the
    fixed section headings (``## Who I Spoke With``: structure, not claims;
    :func:`ai_contrib.core.fidelity.section_heading`), the marks of other headings and of
    bullets left out, empty ones dropped."""
    out = []
    for part in _SENTENCE.split(text or ""):
        if section_heading(part):
            continue
        part = part.strip().lstrip("#-*\u2022 ").strip()
        if _WORD.search(part):
            out.append(part)
    return out


#: a summary line giving someone's words: ``"- Melanie said: ..."`` (the extract's form too)
_SAID = re.compile(r"^(?P<who>[A-Z][\w'.-]*(?: [A-Z][\w'.-]*){0,3}) "
                   r"(?:said|says|asked|asks|noted|notes|replied|answered|told \w+|added)"
                   r"\s*:\s*")
#: the extract's labels for lines with no speaker's name (:func:`attributed_line`)
_UNNAMED = {"the game": "", "someone": ""}
#: openings that name no one: "I said: ..." (the NPC, whose lines carry its name) is checked
#: like a sentence of no one's
_PRONOUNS = frozenset("i we you he she they".split())


def summary_speaker(text) -> str | None:
    """
    Whose words a summary's line gives (``"- Marta said: ..."``, the extract's form too).

    Args:
        text (str): one line of a summary (:attr:`SourceLine.text`).

    Returns:
        str | None: the speaker's name, case-folded (``""`` for the game's lines); None when
        the line gives no one's words or opens with a pronoun ("I said: ...").
    """
    said = _SAID.match((text or "").strip().lstrip("-*\u2022 ").strip())
    if not said:
        return None
    who = said.group("who").casefold()
    return None if who in _PRONOUNS else _UNNAMED.get(who, who)


def _claims(summary):
    """``(speaker, sentence)`` per sentence of ``summary``: ``speaker`` is the case-folded name
    a line opening ``"Name said:"`` gives its words (``""`` for the game's lines), else None."""
    for raw in (summary or "").splitlines():
        body = raw.strip().lstrip("-*\u2022 ").strip()
        said = _SAID.match(body)
        speaker = summary_speaker(body)
        if said:
            body = body[said.end():]
        for sentence in sentences(body):
            yield speaker, sentence


def _supported(speaker, sentence, lines, known):
    """Whether one line supports ``sentence``; a sentence given as ``speaker``'s words only
    by that speaker's lines (summaries' lines, with no speaker, support anyone's)."""
    if speaker is not None:
        lines = [line for line in lines
                 if line.summary or line.speaker.casefold() == speaker]
    return bool(lines) and line_support(sentence, lines, known=known)[0] >= MIN_SENTENCE_SUPPORT


def unknown_items(text, lines) -> list:
    """
    The names and numbers of ``text`` (a summary, a fact; headings included but for the
    section headings) that no line of ``lines`` (:func:`source_lines`) holds.

    Returns:
        list[str]: in order, each once (names as written, numbers as figures).
    """
    words, _stems, numbers = _whole_source(lines)
    body = "\n".join(line.lstrip("# ") for line in (text or "").splitlines()
                     if not section_heading(line))
    names, figures, _content = items_of(body)
    missing = [n for n in names if not _known(n.casefold(), words)]
    missing += [n for n in figures if n not in numbers]
    return list(dict.fromkeys(missing))


def check_summary(summary, lines) -> Grounding:
    """
    Whether a summary says what its lines say (module docstring): no name or number the
    source lacks (headings included, but for the section headings), at least
    :data:`MIN_SUMMARY_SENTENCES` of its sentences each supported by one line at
    :data:`MIN_SENTENCE_SUPPORT` (a sentence naming no one may take any line; one given as
    someone's words, only that speaker's lines), and in the source's language.

    Returns:
        Grounding: ``support`` is the share of supported sentences; ``line`` is None.
    """
    said = list(_claims(summary))
    if not said or not lines:
        return Grounding(0.0, None, "nothing to check" if not said else "no source lines")
    known = source_names(lines)
    supported = sum(1 for speaker, s in said if _supported(speaker, s, lines, known))
    share = round(supported / len(said), 3)
    missing = unknown_items(summary, lines)
    if missing:
        return Grounding(share, None, "names or numbers the conversation does not mention: "
                                      + ", ".join(missing))
    if share < MIN_SUMMARY_SENTENCES:
        return Grounding(share, None, f"only {supported} of its {len(said)} sentences say "
                                      f"what a line of the source says")
    reason = language_problem(summary, "\n".join(line.text for line in lines))
    return Grounding(share, None, reason)


def line_entity(entity, line) -> str:
    """
    Whom an observation stored as ``line`` (a :class:`SourceLine`, in place of the model's
    text) is about: the model's ``entity`` when it is a name the line uses (up to four
    capitalised words of the line, its speaker's name counting, none a pronoun or article
    such as "I" or "The"), else the line's speaker. A model writes
    any text there ("I am grateful to have her in my life. I'"), and an observation is filed
    under its entity.

    Returns:
        str: the entity, ``""`` when neither is one (a summary's line: the caller drops it).
    """
    words = _WORD.findall(entity or "")
    if words and len(words) <= 4 and all(word[0].isupper() for word in words):
        vocab = _line_words(line)[0]
        if all(_known(w.casefold(), vocab) and w.casefold() not in _NOT_SUBJECTS for w in words):
            return " ".join(words)
    return line.speaker


def attributed_line(line) -> str:
    """
    A source line as a fact in its own words, attributed: ``"Caroline said: I went..."``
    (a summary line as it is).

    Args:
        line (SourceLine)

    Returns:
        str
    """
    return f"{line.speaker} said: {line.text}" if line.speaker else line.text
