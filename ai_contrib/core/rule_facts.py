"""
Facts by rule: what players said about themselves and the world, read from their own lines
without a model (``docs/design.md``, "Facts players said").

A sentence of a player's line (:func:`ai_contrib.core.fact_policy.said_by_player`) is a fact
when it is a statement, not a question, a greeting or an order, and it holds something worth
keeping: a name, a number, a place ("on the north road"), a time or a plan ("I'll bring...
on Friday"), a relative ("my sister Anwen") or what the player is ("I'm a drover"). It is
kept in the player's own words, but for the first person, which is rewritten to the speaker's
name so that the fact makes sense on its own:

- ``"I'm Carol, a weaver from Eastwick"`` -> ``"Carol is a weaver from Eastwick."``;
- ``"my sister Anwen is coming"`` (Carol) -> ``"Carol's sister Anwen is coming."``;
- ``"I saw a black bear on the north road"`` (Bob) -> ``"Bob saw a black bear on the north
  road."``; ``"I owe you 3 silver"`` (Dave, to Marta) -> ``"Dave owes Marta 3 silver."``.

"You" becomes the NPC the line was said to; a sentence that says "you" to no one known, or
"we", is left out (whom it means is not in the line). Every fact is checked against its own
line (:func:`ai_contrib.core.grounding.check_fact`) and left out if it fails, so a fact by rule
says what one line says by construction; each cites its line (:attr:`RuleFact.index`), from
which the caller takes its speaker and audience as for the model's facts.

Pure module: no Evennia, Twisted or Django imports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .fact_policy import said_by_player
from .grounding import SourceLine, check_fact

__all__ = ["RuleFact", "line_facts", "rule_facts", "states_nothing"]

#: a sentence longer than this is talk, not a statement worth a fact
MAX_WORDS = 30
MIN_WORDS = 3

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
_OPENERS = re.compile(
    r"^(?:(?:hi|hello|hey|greetings|well|oh|ah|ha|haha|hah|hm|hmm|aha|wow|ooh|so|yes|yeah|aye|"
    r"no|nay|listen|look|say|"
    r"good (?:morning|evening|day|afternoon|night)|(?:nice|pleased|glad|good) to (?:meet|see) "
    r"you(?: again)?|thanks|thank you)\b[\s,!.:-]*)+", re.IGNORECASE)
_QUESTION_WORDS = frozenset(
    "what who whom whose where when why how which do does did is are was were can could would "
    "will shall should may might have has had am isn't aren't don't doesn't didn't won't "
    "wouldn't couldn't".split())
#: words that open an order ("Tell me...", "Give me a room"), not a statement
_ORDERS = frozenset(
    "give tell bring show let get take come go look pour fetch send keep help make put "
    "remember please don't do try wait stop sit stay find ask".split())
# the opening words in any case, the name capitalised
_INTRO = re.compile(
    r"^(?i:i'm|i am|my name is|my name's|name's|call me|they call me)\s+"
    r"(?P<name>[A-Z][a-z][\w'-]*(?:\s+[A-Z][a-z][\w'-]*)?)(?P<rest>.*)$")
_RELATIVES = (
    "sister brother mother father mum mom dad son daughter wife husband cousin uncle aunt "
    "niece nephew grandmother grandfather grandma grandpa friend partner master apprentice "
    "boss wife's husband's child children kids family").split()
_RELATIVE = re.compile(r"\bmy\s+(?:(?:older|younger|little|big|elder|late)\s+)?(?:"
                       + "|".join(_RELATIVES) + r")\b", re.IGNORECASE)
_NUMBER = re.compile(
    r"\b\d+\b|\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|"
    r"forty|fifty|hundred|thousand|dozen)\b", re.IGNORECASE)
_TIME = re.compile(
    r"\b(?:tomorrow|tonight|yesterday|next (?:week|month|year|spring|summer|autumn|winter)|"
    r"last (?:week|month|year|night)|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"dawn|dusk|noon|midnight|nightfall)\b", re.IGNORECASE)
_PLAN = re.compile(r"\b(?:i'll|i will|i'm going to|i am going to|i plan to|i intend to|"
                   r"i mean to|i promise|i promised|i swear)\b", re.IGNORECASE)
_PLACE = re.compile(
    r"\b(?:in|at|on|near|from|by|behind|past|across|outside|inside|under|over|beyond|along)"
    r"\s+(?:(?:the|a|an|my|our|his|her|their)\s+)?(?:[a-z]+\s+)?(?P<noun>[A-Za-z]{3,})"
    # "to" and "into" open infinitives too ("to see"): a place after them is named or has
    # an article
    r"|\b(?:to|towards?|into)\s+(?:(?:the|a|an|my|our|his|her|their)\s+(?:[a-z]+\s+)?"
    r"(?P<thing>[A-Za-z]{3,})|(?P<town>[A-Z][a-z]+))", re.IGNORECASE)
#: nouns after a preposition that make an idiom, not a place ("in a hurry", "on my way")
_NOT_PLACES = frozenset(
    "way hurry fact case time moment mood love trouble mind turn general particular course "
    "sort bit lot while fine time least last first deal peace pain rush earnest truth "
    "doubt danger luck need debt favour favor honour honor order advance all once length "
    "heart ease odds times bed "
    # pronouns and determiners are no place ("by myself", "from me")
    "myself yourself himself herself itself themselves ourselves you him her them its this "
    "that these those there here what which who".split())
_OBJECT = re.compile(r"\b(?:the|a|an|some|my|your)\s+[a-z]{3,}", re.IGNORECASE)
#: "I'm a bit tired": "a" + these is not what the player is
_NOT_WHAT = frozenset("bit little lot touch tad few fan fool mess wreck".split())
_WHAT = re.compile(r"^i(?:'m| am)\s+(?:a|an)\s+(?P<noun>[a-z]+)\b", re.IGNORECASE)
#: capitalised words that name no one (compared case-folded)
_NOT_NAMES = frozenset(
    "i i'm i've i'll i'd the a an this that these those he she it we they you my your his her "
    "our their its there here yes no oh well and but so or if when then what who why how "
    "where which today tomorrow tonight yesterday sir madam lady lord mister maybe perhaps "
    "just also some nobody everyone someone anyone everything nothing something all every "
    "each any one once now soon later never always still even please sorry thanks okay ok "
    "sure fine great good nice alas indeed actually honestly anyway besides however sadly "
    "luckily apparently clearly really".split())
_FIRST = frozenset("i i'm i've i'll i'd my mine".split())
_WE = frozenset("we we're we've we'll we'd us our ours ourselves".split())
_YOU = frozenset("you you're you've you'll you'd your yours yourself".split())
#: "you" said to more than the listener ("you two", "you both", "y'all"): rewritten to the
#: listener's name alone it would be false, so such a sentence is left out, as "we" is
_PLURAL_YOU = re.compile(
    r"\b(?:you\s+(?:two|three|both|all|guys|folks|lot)|y'all|yourselves)\b", re.IGNORECASE)
_ADVERBS = frozenset(
    "never just also really still often always usually only already sometimes even recently "
    "once finally actually truly barely hardly certainly definitely probably rarely seldom "
    "soon too all both".split())
_KEEP = frozenset(
    "will would can could shall should may might must won't wouldn't can't couldn't "
    "shouldn't didn't wasn't weren't used ought".split())
_PAST = frozenset(
    "saw met found lost got had went came took gave made heard left bought sold told said "
    "knew thought brought caught fought built sent spent paid won ran rode wrote broke fell "
    "felt kept slept stood sat ate drank swam began grew flew threw drew wore tore hid led "
    "fed held hung lay laid lit meant set put cut hit let shut quit hurt cost became forgot "
    "chose drove rose woke spoke stole froze struck sang rang sank shook taught sought bound "
    "dug stuck swung spun did was".split())
#: verbs whose present ends in "ed" ("I need 2 silver")
_PRESENT_ED = frozenset("need feed bleed breed heed proceed succeed exceed speed seed shed "
                        "wed shred embed".split())
#: a capitalised opening word followed by a verb agreeing with it ("Anwen is", "Wilfred sells")
_SUBJECT = re.compile(r"^([A-Z][\w'-]*)\s+(?:is|was|has|had|will|can|could|must|would|"
                      r"[a-z]+s|[a-z]+ed)\b")
#: words after which "you" is the subject of what follows ("I think you know...")
_BEFORE_SUBJECT = (",", "that", "if", "when", "and", "but", "because", "since", "think",
                   "know", "hope", "believe", "guess", "heard", "bet", "said", "say")
_AGREE = {"am": "is", "are": "is", "were": "was", "have": "has", "do": "does",
          "don't": "doesn't", "haven't": "hasn't", "aren't": "isn't", "go": "goes"}


@dataclass(frozen=True)
class RuleFact:
    """One fact a rule read: ``content`` (str, a sentence ending in ``.``), ``index`` (int:
    the position, in the list :func:`rule_facts` read, of the message it comes from) and
    ``support`` (float 0-1: its support by that line,
    :func:`ai_contrib.core.grounding.check_fact`)."""

    content: str
    index: int
    support: float = 1.0


def _third_person(verb):
    """``verb`` as "he/she ..." says it (``"owe"`` -> ``"owes"``; a past or modal form, or a
    word not a verb, as it is)."""
    low = verb.casefold()
    if low in _AGREE:
        return _AGREE[low]
    past = low.endswith("ed") and low not in _PRESENT_ED
    if low in _KEEP or low in _PAST or past or low.endswith(("ing", "n't")) or len(low) < 2:
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if low.endswith("y") and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


#: a pronoun (case-folded) -> (its replacement given the person's name, whether a verb follows
#: that must agree with a third person)
def _person_forms(name):
    return {"i": (name, True), "i'm": (f"{name} is", False), "i've": (f"{name} has", False),
            "i'll": (f"{name} will", False), "i'd": (f"{name} would", False),
            "me": (name, False), "myself": (name, False), "my": (f"{name}'s", False),
            "mine": (f"{name}'s", False)}


def _listener_forms(name, subject):
    forms = {"you're": (f"{name} is", False), "you've": (f"{name} has", False),
             "you'll": (f"{name} will", False), "you'd": (f"{name} would", False),
             "your": (f"{name}'s", False), "yours": (f"{name}'s", False),
             "yourself": (name, False)}
    forms["you"] = (name, subject)
    return forms


def _rewrite(sentence, speaker, listener):
    """``sentence`` with the first person made ``speaker`` and "you" made ``listener``, verbs
    after them agreeing (module docstring)."""
    out, last, agree = [], 0, False
    for match in _WORD.finditer(sentence):
        word = match.group(0)
        low = word.casefold()
        new = word
        if agree and low not in _ADVERBS:
            new, agree = _third_person(word), False
        elif low in _FIRST or low in ("me", "myself"):
            new, agree = _person_forms(speaker)[low]
        elif low in _YOU:
            before = sentence[:match.start()].strip().casefold()
            subject = not before or before.endswith(_BEFORE_SUBJECT)
            new, agree = _listener_forms(listener, subject)[low]
        out.append(sentence[last:match.start()] + new)
        last = match.end()
    out.append(sentence[last:])
    return "".join(out)


def _names(sentence, listener):
    """Capitalised words of ``sentence`` that name someone or something (the listener's name
    and the words of :data:`_NOT_NAMES` not counted; the opening word only where it is the
    subject of a verb that follows it, "Wilfred sells...", since any word opens a sentence)."""
    words = _WORD.findall(sentence)
    skip = {(listener or "").casefold()} | _NOT_NAMES
    names = [w for w in words[1:] if w[0].isupper() and w.casefold() not in skip]
    subject = _SUBJECT.match(sentence)
    if subject and subject.group(1).casefold() not in skip | _QUESTION_WORDS | _ORDERS:
        names.insert(0, subject.group(1))
    return names


def _has_place(sentence):
    for match in _PLACE.finditer(sentence):
        noun = match.group("noun") or match.group("thing") or match.group("town") or ""
        if noun.casefold() not in _NOT_PLACES and (match.group("town") is None
                                                   or noun[0].isupper()):
            return True
    return False


def _worth_keeping(sentence, listener):
    """True when ``sentence`` holds a name, a number, a place, a time, a relative, what the
    speaker is, or a plan with something to do (module docstring)."""
    what = _WHAT.match(sentence)
    if what and what.group("noun").casefold() not in _NOT_WHAT:
        return True
    if _names(sentence, listener) or _NUMBER.search(sentence) or _TIME.search(sentence):
        return True
    if _RELATIVE.search(sentence) or _has_place(sentence):
        return True
    return bool(_PLAN.search(sentence) and _OBJECT.search(sentence))


def _cleaned(sentence, listener):
    """``sentence`` without the greeting or the listener's name it opens with, and without a
    trailing vocative ("..., Marta.")."""
    text = _OPENERS.sub("", sentence.strip().replace("\u2019", "'"))
    if listener:
        name = re.escape(listener)
        text = re.sub(rf"^{name}\b[\s,!:-]*", "", text)
        text = _OPENERS.sub("", text)
        text = re.sub(rf",\s*{name}\s*(?=[.!]*$)", "", text)
    return text.strip()


def _introduction(text, speaker):
    """The fact of an introduction (``"I'm Carol, a weaver from Eastwick"`` -> ``"Carol is a
    weaver from Eastwick"``), None when ``text`` is not one, ``""`` when it says no more than
    the speaker's own name; then the words after it that say more (or ``""``)."""
    intro = _INTRO.match(text)
    if not intro or intro.group("name").split()[0].casefold() in _NOT_NAMES:
        return None, text
    name, rest = intro.group("name"), intro.group("rest").lstrip(" ,-:").rstrip(" .!")
    first = rest.split(" ", 1)[0].casefold()
    if first in ("a", "an", "the", "from", "of", "in", "at"):
        return f"{name} is {rest}", ""
    said = f"{speaker} is {name}" if name.casefold() != speaker.casefold() else ""
    return said, rest[len(first):].strip() if first == "and" else ""


def _statement(text, speaker, listener):
    """The fact of one cleaned sentence (first person rewritten), or None when it is none."""
    words = [w.casefold() for w in _WORD.findall(text)]
    if not MIN_WORDS <= len(words) <= MAX_WORDS or text.endswith("?"):
        return None
    if words[0] in _QUESTION_WORDS or words[0] in _ORDERS or words[0] in _YOU:
        return None
    if set(words) & _WE or (set(words) & _YOU and not listener) or _PLURAL_YOU.search(text):
        return None
    first_person = bool(set(words) & _FIRST)
    if not first_person and not _names(text, listener) and not _NUMBER.search(text) \
            and words[0] not in ("there", "there's"):
        return None  # a third person's statement must say whom or how many it is about
    if not _worth_keeping(text, listener):
        return None
    personal = first_person or set(words) & (_YOU | {"me", "myself"})
    return _rewrite(text, speaker, listener) if personal else text


def states_nothing(text) -> bool:
    """True when every sentence of ``text`` (a line) is a question, a greeting or under
    :data:`MIN_WORDS` words ("How's the stew tonight?", "Good evening, Marta!"): quoted as a
    fact, it says nothing."""
    for sentence in _SENTENCE.split(" ".join(str(text or "").split())):
        cleaned = _cleaned(sentence, None)
        words = [w.casefold() for w in _WORD.findall(cleaned)]
        if len(words) >= MIN_WORDS and not cleaned.endswith("?") \
                and words[0] not in _QUESTION_WORDS:
            return False
    return True


def _finished(fact):
    fact = fact.strip().rstrip(" .!;:,-")
    return fact[:1].upper() + fact[1:] + "." if fact else ""


def line_facts(text, speaker, listener=None) -> list:
    """
    The facts one player's line states (module docstring).

    Args:
        text (str): the line. speaker (str): the player's name (the first person's).
        listener (str, optional): whom the line was said to ("you"); None: sentences saying
            "you" are left out.

    Returns:
        list[str]: sentences ending in ``.``, in the line's order, each checked against the
        line (:func:`ai_contrib.core.grounding.check_fact`); ``[]`` for none.
    """
    return list(_checked_facts(text, speaker, listener))


def _checked_facts(text, speaker, listener):
    """``{fact: support}`` of one line (:func:`line_facts`), in order."""
    if not speaker or not text:
        return {}
    line = SourceLine(speaker, " ".join(str(text).split()), listener or "")
    found = {}
    for sentence in _SENTENCE.split(line.text):
        cleaned = _cleaned(sentence, listener)
        said, cleaned = _introduction(cleaned, speaker)
        for fact in (said, _statement(cleaned, speaker, listener) if cleaned else None):
            fact = _finished(fact or "")
            verdict = check_fact(fact, [line]) if fact and fact not in found else None
            if verdict is not None and verdict.passed:
                found[fact] = verdict.support
    return found


def rule_facts(messages, listener=None) -> list:
    """
    The facts the players' lines of ``messages`` state (:func:`line_facts`).

    Args:
        messages (list[dict]): ``core/messages.py`` shape; only players' lines with a speaker's
            ``name`` are read (:func:`ai_contrib.core.fact_policy.said_by_player`).
        listener (str, optional): the NPC's name: whom "you" means in a line said to it (not
            in a line whose ``metadata["addressed"]`` is False, said to someone else).

    Returns:
        list[RuleFact]: in order, each fact once.
    """
    out, seen = [], set()
    for index, msg in enumerate(messages):
        if not said_by_player(msg) or not msg.get("name"):
            continue
        to = None if (msg.get("metadata") or {}).get("addressed") is False else listener
        facts = _checked_facts(msg.get("content") or "", str(msg["name"]), to)
        for fact, support in facts.items():
            if fact.casefold() not in seen:
                seen.add(fact.casefold())
                out.append(RuleFact(fact, index, support))
    return out
