"""
Summary fidelity: does a candidate summary say only what its source says?

``docs/design.md``, "Summary fidelity": a small model's "summary" can be log-like junk or invent
names and numbers, and a summary replaces what it summarises (in the context, the journal, Mem0
and every later prompt). Before one is accepted it is scored against its source messages:

- **support**: the summary's *names* (capitalised words not opening a sentence), *numbers*
  (digit runs; the source's number words "one" .. "twenty", "hundred" count as their digits) and
  *content words* (four letters or more, not function words; compared by their first five
  letters, so "promised" matches "promise") that occur in the source; the capitalised words of
  the summary headings ("Who I Spoke With") are not read. ``score`` is the supported
  share of all three; ``unsupported_share`` the share of names and numbers absent from the
  source (at most :data:`MAX_UNSUPPORTED`); whatever it holds, at least :data:`MIN_SUPPORT` of
  its names, numbers and content words must occur in the source (a summary with none of them
  fails when not one of its words does), so a summary about something else fails even without a
  name or number to fail on;
- **length**: no more words than the source; not absurdly short for a long span (under
  ``min(5, source words / 50)`` words once the source has :data:`LONG_SOURCE_WORDS`);
- **no speaker lines**: no unbulleted line opening with a source speaker's name or a role label
  and a colon (``"Mara: ..."`` reads as Mara's words);
- **no markup or log-like junk**: markup symbols (``| # [ ] { } < > = / \\ _ * ~ ^``, runs of
  ``---``) over :data:`MAX_SYMBOL_DENSITY` of the characters and well above the source's own.

:func:`extractive_summary` is the replacement that needs no model: the highest-importance lines
of the span (by an importance function the caller passes, the journal's heuristic in the shell),
in their original order, within a token target. Being made of the source, it passes.

Pure module: no Evennia, Twisted or Django imports. Sizes in words or tokens as named.
"""

from __future__ import annotations

from collections.abc import Iterator

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from .fact_policy import ungrounded_share
from .messages import is_marker
from .structured import SECTIONS
from .summary import format_message_for_compaction
from .speakers import speaker_label
from .text import content_key, quote_words
from .tokens import count_tokens

__all__ = [
    "Fidelity",
    "MAX_REPLACED_SHARE",
    "MAX_UNSUPPORTED",
    "SUMMARY_PROBE_EVERY",
    "SUMMARY_WINDOW",
    "SUMMARY_WRITERS",
    "choose_summary_writer",
    "extractive_summary",
    "fact_problem",
    "items_of",
    "message_texts",
    "same_fact",
    "says_one_of",
    "section_heading",
    "score_summary",
    "source_text",
    "source_vocabulary",
    "speakers_of",
    "unsupported_share",
]

#: Most of a summary's names and numbers that may be absent from its source (a share).
MAX_UNSUPPORTED = 0.2
#: Least share of a summary's content words that must occur in its source, once it has
#: :data:`MIN_CONTENT_WORDS` of them: a summary paraphrases, so only text that shares almost
#: nothing with its source (garbled, or about something else) fails on its words alone.
MIN_CONTENT_SUPPORT = 0.2
MIN_CONTENT_WORDS = 10
#: Least share of *all* a summary's names, numbers and content words (its ``score``) that must
#: occur in its source, whatever it holds: measured on hand-written summaries of a 21-line
#: tavern conversation (``docs/design.md``, "Summary fidelity"), faithful ones that name what
#: was said score 0.80-0.92, summaries of something else 0.12-0.33; only very abstract
#: paraphrases ("guests talked about travel and payment", 0.00-0.29) fall below it too, and
#: those are replaced by an extract of the lines, which says more.
MIN_SUPPORT = 0.4
#: Source words from which a very short summary counts as absurd.
LONG_SOURCE_WORDS = 150
#: Share of markup symbols in the text above which it reads as junk (when the source has far
#: fewer).
MAX_SYMBOL_DENSITY = 0.08

_ROLE_LABELS = {"user", "player", "assistant", "npc", "system", "game", "tool", "human", "ai"}
_STOP = frozenset(
    """
    about above after again against also although among another anyone anything around because
    been before being below between both cannot could does doing down during each either else
    even ever every from further have having here hers herself himself into itself just least
    less like made make many might more most much must myself never next none only other ours
    ourselves over own perhaps quite rather really said same says shall should since some such
    than that their theirs them themselves then there these they this those though through thus
    till under until upon very want wants were what whatever when where whether which while who
    whom whose will with within without would your yours yourself yourselves
    """.split()
)
_NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
    "thirteen": "13", "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17",
    "eighteen": "18", "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40",
    "fifty": "50", "hundred": "100", "thousand": "1000", "dozen": "12",
}
_PRONOUN_I = {"i", "i'm", "i've", "i'll", "i'd"}
# the words of the summary headings ("Who I Spoke With: Bob."): a model writes them inline too
_HEADING_WORDS = frozenset(
    word.casefold() for title in SECTIONS for word in re.findall(r"[A-Za-z]+", title)
)
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'\u2019-]*|\d+")
_HEADING = re.compile(r"^\s*#{1,6}\s.*$", re.MULTILINE)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_SPEAKER_LINE = re.compile(r"^\s*([A-Za-z][\w' .-]{0,40}?)\s*(?:\([a-z]+\))?\s*:\s*\S")
_SYMBOLS = re.compile(r"[|#\[\]{}<>=/\\_*~^]|-{3,}")


@dataclass(frozen=True)
class Fidelity:
    """
    The verdict on one summary (:func:`score_summary`).

    Attributes:
        score (float): supported share of the summary's names, numbers and content words
            (0-1; 1.0 when it has none).
        unsupported_share (float): share of its names and numbers absent from the source (0-1).
        unsupported (tuple[str]): those names and numbers, first occurrence order.
        verdict (str): ``"pass"`` or ``"fail"``.
        reason (str): why it failed (``""`` when it passed).
        words (int): words of the summary. source_words (int): words of the source.
    """

    score: float
    unsupported_share: float
    unsupported: tuple = field(default_factory=tuple)
    verdict: str = "pass"
    reason: str = ""
    words: int = 0
    source_words: int = 0

    @property
    def passed(self) -> bool:
        """True when the verdict is ``"pass"``."""
        return self.verdict == "pass"

    def as_dict(self) -> dict[str, Any]:
        """A plain dict of the fields (``unsupported`` as a list), for logs and Attributes."""
        out = asdict(self)
        out["unsupported"] = list(self.unsupported)
        return out


def source_text(messages) -> str:
    """
    The text a summary of ``messages`` is checked against: their transcript lines
    (:func:`ai_contrib.core.summary.format_message_for_compaction`, speakers' names included).

    Args:
        messages (list[dict]): messages (``core/messages.py`` shape), markers included.

    Returns:
        str
    """
    return "\n".join(format_message_for_compaction(msg) for msg in messages)


def speakers_of(messages) -> set[str]:
    """The names (and role labels) of the speakers of ``messages``: a line of a summary
    opening with one of them and a colon reads as that speaker's words. Returns a set of
    case-folded strings."""
    names = set(_ROLE_LABELS)
    for msg in messages:
        if msg.get("name"):
            names.add(str(msg["name"]).casefold())
    return names


def _stem(word):
    return word[:5]


def _clean(word):
    word = word.replace("\u2019", "'").strip("'-")
    if word.lower().endswith("'s"):
        word = word[:-2]
    return word


#: content-word overlap (Jaccard, over stems) at or above which two facts with the same
#: numbers and negations say the same thing (:func:`same_fact`)
SAME_FACT_OVERLAP = 0.75
#: short words that carry no fact of their own (the long ones are :data:`_STOP`)
_SHORT_FUNCTION_WORDS = frozenset(
    "all and any are but can did for had has her him his how its may our she the too was who "
    "why yet you".split())
_NEGATIONS = frozenset("no not nor never none nothing nobody neither".split())


def _words_and_numbers(text):
    """Each token of ``text`` as ``(word casefolded, None)`` or ``(None, number)``, a number
    given in figures (``"07"`` -> ``"7"``); empty words left out."""
    for token in _TOKEN.findall(text or ""):
        if token.isdigit():
            yield None, str(int(token))
        else:
            word = _clean(token).casefold()
            if word:
                yield word, None


def _fact_words(text):
    """``(content stems, numbers, negations)`` of a fact (:func:`same_fact`)."""
    stems, numbers, negations = set(), set(), set()
    for word, number in _words_and_numbers(text):
        if number is not None:
            numbers.add(number)
        elif word in _NEGATIONS or word.endswith("n't"):
            negations.add("not")
        elif word in _NUMBER_WORDS:
            numbers.add(_NUMBER_WORDS[word])
        elif len(word) >= 3 and word not in _STOP and word not in _SHORT_FUNCTION_WORDS:
            stems.add(_stem(word))
    return stems, numbers, negations


def _name_order(text):
    """The capitalised words of ``text`` (sentence starts included, stop words and "I" not),
    case-folded, each once, in order: who does what to whom."""
    names = []
    for token in _TOKEN.findall(text or ""):
        word = _clean(token)
        folded = word.casefold() if word else ""
        if (word and word[0].isupper() and folded not in _STOP and folded not in _PRONOUN_I
                and folded not in _NUMBER_WORDS and folded not in names):
            names.append(folded)
    return names


def _names_in_same_order(a, b):
    """True when the names ``a`` and ``b`` share come in the same order in both."""
    names_a, names_b = _name_order(a), _name_order(b)
    return ([n for n in names_a if n in names_b] == [n for n in names_b if n in names_a])


def same_fact(a, b, overlap=SAME_FACT_OVERLAP) -> bool:
    """
    True when facts ``a`` and ``b`` say the same thing in other words: the same numbers, the
    same negation (or none), the names they share in the same order ("Bob owes Marta 3 silver"
    and "Marta owes Bob 3 silver" are two debts), and content words (stems of words of three
    letters or more, stop words left out) overlapping by at least ``overlap`` (Jaccard). "The
    Kings road is flooded again" and "The Kings road has been flooded again" are one fact;
    "Bob owes 5 silver" and "Bob owes 7 silver", or "Bob is married" and "Bob is not married",
    are two.

    Args:
        a, b (str): facts.
        overlap (float): 0..1.
    """
    stems_a, numbers_a, neg_a = _fact_words(a)
    stems_b, numbers_b, neg_b = _fact_words(b)
    if numbers_a != numbers_b or neg_a != neg_b:
        return False
    if not _names_in_same_order(a, b):  # "Bob owes Marta" is not "Marta owes Bob"
        return False
    if not stems_a or not stems_b:
        return content_key(a) == content_key(b)
    return len(stems_a & stems_b) / len(stems_a | stems_b) >= overlap


def says_one_of(content, facts) -> bool:
    """
    True when ``content`` says what one of ``facts`` says, in these or other words
    (:func:`same_fact`): the one test of "already held" for a fact about to be journaled
    again, and of "erased by staff" for one about to come back (``docs/design.md``, "Gossip").

    Args:
        content (str): a fact.
        facts (iterable[str]): facts held or refused. O(len(facts)) comparisons.
    """
    return any(same_fact(str(fact or ""), content) for fact in facts)


def _source_vocabulary(text):
    """``(words casefolded, stems, numbers)`` of the source."""
    words, stems, numbers = set(), set(), set()
    for word, number in _words_and_numbers(text):
        if number is not None:
            numbers.add(number)
            continue
        words.add(word)
        stems.add(_stem(word))
        if word in _NUMBER_WORDS:
            numbers.add(_NUMBER_WORDS[word])
    return words, stems, numbers


_SECTION_TITLES = frozenset(re.sub(r"[^a-z ]", "", title.casefold()) for title in SECTIONS)


def section_heading(line) -> bool:
    """True for a Markdown heading that is one of the fixed section headings of a structured
    summary (:data:`ai_contrib.core.structured.SECTIONS`, ``"## Confirmed Facts"``): structure,
    not a claim. Other headings a model writes (``"## 10:35 AM"``) are text like any line."""
    match = _HEADING.match(line or "")
    if not match:
        return False
    title = re.sub(r"[^a-z ]", "", match.group(0).lstrip("# \t").casefold()).strip()
    return " ".join(title.split()) in _SECTION_TITLES


def items_of(text) -> tuple:
    """
    ``(names, numbers, content_words)`` of ``text`` as the checks read them (module
    docstring): names (capitalised words not opening a sentence) keep their case, numbers are
    figures (``"07"`` -> ``"7"``), content words (four letters or more, not function words) are
    case-folded; headings are not read. Lists, first occurrence order, repeats kept.
    """
    return _items(text)


def source_vocabulary(text) -> tuple:
    """``(words, stems, numbers)`` of a source text: its words case-folded, their five-letter
    stems and its numbers in figures (number words such as "three" included). Sets."""
    return _source_vocabulary(text)


def _items(text):
    """
    ``(names, numbers, content_words)`` of ``text`` (a summary), in order: names keep their
    case, content words are case-folded. Headings (``## ...``) are not read.
    """
    names, numbers, content = [], [], []
    for line in _HEADING.sub("", text or "").splitlines():
        line = _BULLET.sub("", line)
        sentence_start = True
        for match in re.finditer(r"[.!?:;]\s|[.!?:;]$|" + _TOKEN.pattern, line):
            token = match.group(0)
            if token[0] in ".!?:;":
                sentence_start = True
                continue
            if token.isdigit():
                numbers.append(str(int(token)))
                sentence_start = False
                continue
            word = _clean(token)
            if not word:
                continue
            folded = word.casefold()
            # "twenty" is a number as much as "20" is ("one" is as often "the one who")
            if folded in _NUMBER_WORDS and folded != "one":
                numbers.append(str(_NUMBER_WORDS[folded]))
                sentence_start = False
                continue
            if folded in _HEADING_WORDS and word[0].isupper():
                sentence_start = False
                continue
            if word[0].isupper() and not sentence_start and folded not in _PRONOUN_I:
                names.append(word)
            elif len(folded) >= 4 and folded not in _STOP:
                content.append(folded)
            sentence_start = False
    return names, numbers, content


def _known_name(name, words):
    """A name occurs in the source (``words`` case-folded), also as its plural or singular."""
    folded = name.casefold()
    return folded in words or folded.rstrip("s") in words or folded + "s" in words


def unsupported_share(text, source) -> tuple:
    """
    The names and numbers of ``text`` absent from ``source``.

    Args:
        text (str): a summary or a fact. source (str): what it claims to come from.

    Returns:
        tuple: ``(share: float 0-1 (0.0 when ``text`` has none), unsupported: list[str])``.
    """
    words, _stems, source_numbers = _source_vocabulary(source)
    names, numbers, _content = _items(text)
    missing = [n for n in names if not _known_name(n, words)]
    missing += [n for n in numbers if n not in source_numbers]
    total = len(names) + len(numbers)
    return (len(missing) / total if total else 0.0), list(dict.fromkeys(missing))


#: Least share of a fact's content words that must occur in the conversation it comes from.
MIN_FACT_SUPPORT = 0.5


def fact_problem(text, source) -> str:
    """
    Why a fact a model wrote is not grounded in the conversation it read, or ``""``: more than
    :data:`MAX_UNSUPPORTED` of its names and numbers absent from ``source``, (with at least
    three content words) fewer than :data:`MIN_FACT_SUPPORT` of them in it, or not one name or
    content word of it in ``source`` (``"<who said what>"``, ``"{4}"``). Used on structured
    output, where a grammar makes a small model write *something* (``docs/design.md``,
    "Summary fidelity").

    Args:
        text (str): the fact. source (str): the conversation (:func:`source_text`).

    Returns:
        str: the reason, ``""`` when grounded.
    """
    words, stems, source_numbers = _source_vocabulary(source)
    names, numbers, content = _items(text)
    missing = [n for n in names if not _known_name(n, words)]
    missing += [n for n in numbers if n not in source_numbers]
    if (names or numbers) and len(missing) / (len(names) + len(numbers)) > MAX_UNSUPPORTED:
        return "names or numbers the conversation does not mention: " + ", ".join(
            dict.fromkeys(missing))
    supported = sum(1 for w in content if w in words or _stem(w) in stems)
    if len(content) >= 3 and supported / len(content) < MIN_FACT_SUPPORT:
        return "words the conversation does not use"
    if not supported and not any(_known_name(n, words) for n in names):
        # numbers alone say nothing ("{4}")
        return "nothing the conversation says"
    return ""


def _symbol_density(text):
    body = _HEADING.sub("", text or "")
    body = "\n".join(_BULLET.sub("", line) for line in body.splitlines())
    visible = sum(1 for ch in body if not ch.isspace())
    if not visible:
        return 0.0
    return sum(len(m.group(0)) for m in _SYMBOLS.finditer(body)) / visible


def score_summary(summary, source, speakers=()) -> Fidelity:
    """
    Score a candidate summary against its source (module docstring; ``docs/design.md``,
    "Summary fidelity").

    Args:
        summary (str): the cleaned summary text (without the ``[CONTEXT SUMMARY]`` prefix).
        source (str): the source's text (:func:`source_text` of the summarised messages).
        speakers (iterable[str]): the source's speakers (:func:`speakers_of`); role labels
            always count.

    Returns:
        Fidelity: the score, the unsupported names and numbers, and the verdict with its reason
        (the first check that failed: empty, too long, too short, speaker line, junk,
        unsupported names/numbers, unsupported content words, too little of it in the source).
    """
    words, stems, source_numbers = _source_vocabulary(source)
    names, numbers, content = _items(summary)
    missing = [n for n in names if not _known_name(n, words)]
    missing += [n for n in numbers if n not in source_numbers]
    content_ok = sum(1 for w in content if w in words or _stem(w) in stems)
    checked = len(names) + len(numbers) + len(content)
    supported = len(names) + len(numbers) - len(missing) + content_ok
    share = len(missing) / (len(names) + len(numbers)) if names or numbers else 0.0
    summary_words = len(_TOKEN.findall(summary or ""))
    source_words = len(_TOKEN.findall(source or ""))
    base = dict(
        score=round(supported / checked, 3) if checked else 1.0,
        unsupported_share=round(share, 3),
        unsupported=tuple(dict.fromkeys(missing)),
        words=summary_words,
        source_words=source_words,
    )
    reason = _failure(summary, source, speakers, summary_words, source_words, share, missing,
                      content, content_ok)
    if not reason:
        reason = _unsupported(summary, words, checked, supported)
    return Fidelity(verdict="fail" if reason else "pass", reason=reason, **base)


def _failure(summary, source, speakers, summary_words, source_words, share, missing, content,
             content_ok):
    if not (summary or "").strip() or not summary_words:
        return "empty summary"
    if summary_words > source_words:
        return f"longer than its source ({summary_words} > {source_words} words)"
    least = min(5, source_words // 50)
    if source_words >= LONG_SOURCE_WORDS and summary_words < least:
        return f"too short for its source ({summary_words} words for {source_words})"
    labels = {str(s).casefold() for s in speakers} | _ROLE_LABELS
    for line in (summary or "").splitlines():
        if _BULLET.match(line):
            continue
        match = _SPEAKER_LINE.match(line)
        if match and match.group(1).strip().casefold() in labels:
            return f"a line reads as {match.group(1).strip()}'s words"
    density = _symbol_density(summary)
    if density > MAX_SYMBOL_DENSITY and density > 2 * _symbol_density(source) + 0.02:
        return f"markup or log-like text ({density:.0%} symbols)"
    if share > MAX_UNSUPPORTED:
        shown = ", ".join(list(dict.fromkeys(missing))[:5])
        return f"{share:.0%} of its names and numbers are not in the source ({shown})"
    if len(content) >= MIN_CONTENT_WORDS and content_ok / len(content) < MIN_CONTENT_SUPPORT:
        return f"only {content_ok / len(content):.0%} of its words occur in the source"
    return ""


def _unsupported(summary, source_words, checked, supported):
    """Why a summary is not supported by its source as a whole, or ``""``: under
    :data:`MIN_SUPPORT` of its names, numbers and content words occur there, or (with none of
    them) not one of its words does."""
    if checked:
        if supported / checked < MIN_SUPPORT:
            return (f"only {supported}/{checked} of its names, numbers and words occur in the "
                    f"source (at least {MIN_SUPPORT:.0%} must)")
        return ""
    said = {_clean(token).casefold() for token in _TOKEN.findall(summary or "")}
    if not said & source_words:
        return "not one of its words occurs in the source"
    return ""


def _candidate_lines(messages):
    """``(text, line)`` per line an extract may take: each message as ``"Name said: text"``
    (the fact, scored, and the line as shown), each line of an earlier summary as it is."""
    out = []
    seen = set()
    for text, line in _message_lines(messages):
        # a line said again ("yes", "yes", "yes") is taken once, whatever its case, marks or
        # verb: the same words given to the same speaker three times is what the quote check
        # fails as a loop (core.quotes.MAX_REPEATS)
        key = quote_words(_SAID_VERB.sub(" said ", line, count=1))
        if key not in seen:
            seen.add(key)
            out.append((text, line))
    return out


def message_texts(messages) -> Iterator[tuple]:
    """
    The texts a summary or fact may be made of, in order: ``(position, msg, text, summary)``
    per line of an earlier summary (``summary`` True; its bullets' marks off, headings left
    out) and per message of talk with text (``user``, ``assistant``, ``system``; whitespace
    collapsed; tool messages and tool-call bookkeeping left out). ``position`` is the
    message's index in ``messages``.
    """
    for position, msg in enumerate(messages):
        if is_marker(msg):
            body = format_message_for_compaction(msg)[len("Earlier summary: "):]
            for line in body.splitlines():
                line = _BULLET.sub("", line.strip())
                if line and not _HEADING.match(line):
                    yield position, msg, line, True
            continue
        if msg.get("role") not in ("user", "assistant", "system"):
            continue
        text = " ".join(str(msg.get("content") or "").split())
        if text:
            yield position, msg, text, False


_SAID_VERB = re.compile(r" (?:said|noted): ")
#: the double quotes inside a line, written as double primes in an extract: the line is its
#: speaker's words, and what it quotes is not a quote of the summary's own, to be attributed
#: to whoever a word beside it names (core.quotes). Not single quotes: an apostrophe joins
#: the words beside it (core.text.quote_words), and 'said"stop"' would no longer be the line
_INNER_QUOTES = str.maketrans({'"': "\u2033", "\u201c": "\u2033", "\u201d": "\u2033"})


def _message_lines(messages):
    out = []
    for _position, msg, text, summary in message_texts(messages):
        if summary:
            out.append((text, text))
            continue
        # a name as the quote check reads a speaker ("old tom said: ..." names no one)
        name = speaker_label(msg["name"]) if msg.get("name") else \
            {"user": "Someone", "system": "The game"}.get(msg["role"], "I")
        verb = "noted" if msg["role"] == "system" else "said"
        out.append((text, f"{name} {verb}: {text.translate(_INNER_QUOTES)}"))
    return out


def extractive_summary(messages, target_tokens, importance, model=None) -> str:
    """
    A summary of ``messages`` made of their own lines, without a model: the highest-importance
    lines (``importance(text) -> number``; ties keep the earlier line), shown in their original
    order as ``"- Name said: text"`` bullets (each word of the name capitalised, the double
    quotes inside a line written as double primes, a line said again by the same speaker once),
    as many as fit ``target_tokens``; when not even the best line fits, it is cut at a word
    boundary. Lines that read as markup (more than :data:`MAX_SYMBOL_DENSITY` symbols) are
    taken only when the span has no other.

    Args:
        messages (list[dict]): the span (``core/messages.py`` shape; markers' lines are taken
            as they are, tool messages and tool-call bookkeeping left out).
        target_tokens (int): tokens the summary may take.
        importance (callable): ``importance(text) -> int | float``, e.g. the journal's
            ``memory.importance.heuristic_importance``.
        model (str, optional): model name for token counting.

    Returns:
        str: the summary, or ``""`` when the span has no line to take.
    """
    candidates = _candidate_lines(messages)
    # a line that reads as markup or a log (a small model's "<pre>" or table, said by the NPC)
    # would make the extract fail the junk check of score_summary, and with it the compaction:
    # such lines are left out while the span has others
    plain = [c for c in candidates if _symbol_density(c[1]) <= MAX_SYMBOL_DENSITY]
    candidates = plain or candidates
    if not candidates or target_tokens <= 0:
        return ""
    ranked = sorted(range(len(candidates)), key=lambda i: (-importance(candidates[i][0]), i))
    chosen = []
    used = 0
    for i in ranked:
        cost = count_tokens("- " + candidates[i][1] + "\n", model)
        if used + cost <= target_tokens:
            chosen.append(i)
            used += cost
    if not chosen:
        words = ("- " + candidates[ranked[0]][1]).split()
        while words and count_tokens(" ".join(words), model) > target_tokens:
            words.pop()
        return " ".join(words)
    return "\n".join("- " + candidates[i][1] for i in sorted(chosen))


# -- who writes the summary -----------------------------------------------------------------------

#: What ``AI_COMPACT_SUMMARY_WRITER`` takes.
SUMMARY_WRITERS = ("auto", "model", "extract")
#: A model's summaries whose outcomes are kept (the newest).
SUMMARY_WINDOW = 10
#: Outcomes needed before a model's summaries are judged (fewer: it is asked).
SUMMARY_MIN = 4
#: Share of a model's summaries that may be replaced before the extract is written without
#: asking it. The embedded SmolLM2-135M's summaries failed the checks 22 times in 24 (a village
#: evening and a LoCoMo replay, ``docs/design.md``, "Summary fidelity"); half is far from that.
MAX_REPLACED_SHARE = 0.5
#: While the extract is written for a failing model, every this many-th summary asks it again,
#: so a model whose summaries pass again (another span, another kind of talk) gets back to
#: writing them: the record only learns from summaries the model wrote.
SUMMARY_PROBE_EVERY = 5


def choose_summary_writer(setting, outcomes, skipped=0) -> str:
    """
    Who writes a compaction's summary (``docs/design.md``, "Summary fidelity").

    Args:
        setting (str): ``AI_COMPACT_SUMMARY_WRITER``: ``"model"``, ``"extract"`` or ``"auto"``
            (anything else reads as ``"auto"``).
        outcomes (iterable[bool]): the model's recent summaries, oldest first (True: kept;
            False: failed the checks and replaced by an extract).
        skipped (int): extracts written without asking it since it was last asked.

    Returns:
        str: ``"extract"`` for ``"extract"``, and for ``"auto"`` once more than
        :data:`MAX_REPLACED_SHARE` of the last :data:`SUMMARY_WINDOW` (at least
        :data:`SUMMARY_MIN` known) were replaced, but for every
        :data:`SUMMARY_PROBE_EVERY`-th summary; else ``"model"``.
    """
    setting = str(setting or "auto").strip().lower()
    if setting in ("model", "extract"):
        return setting
    share = ungrounded_share(outcomes, window=SUMMARY_WINDOW, minimum=SUMMARY_MIN)
    failing = share is not None and share > MAX_REPLACED_SHARE
    return "extract" if failing and skipped < SUMMARY_PROBE_EVERY - 1 else "model"
