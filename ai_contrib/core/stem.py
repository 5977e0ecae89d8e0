"""
Porter's suffix-stripping stemmer (Porter, "An algorithm for suffix stripping", Program 14(3),
1980) with the variations of NLTK's default mode (``nltk.stem.PorterStemmer()``): a few
irregular forms, "-ies"/"-ied" on four-letter words, y -> i only after a consonant, "bli" ->
"ble", "logi" -> "log", "alli" and "fulli", words of one or two letters left alone.

Two users: the archive's full-text index matches a question's words to a remembered line's in
their stemmed forms ("instruments" finds "instrument", "playing" finds "play";
:mod:`ai_contrib.memory.lexical`, ``docs/design.md``, "The archive's full-text index"), and the
LoCoMo benchmark's F1, which LoCoMo computes on NLTK's stems (``benchmarks/locomo_metrics.py``).
Pure functions.
"""

import re
from functools import lru_cache

_VOWELS = frozenset("aeiou")
_IRREGULAR = {
    "skies": "sky", "sky": "sky", "dying": "die", "lying": "lie", "tying": "tie",
    "news": "news", "innings": "inning", "inning": "inning", "outings": "outing",
    "outing": "outing", "cannings": "canning", "canning": "canning", "howe": "howe",
    "proceed": "proceed", "exceed": "exceed", "succeed": "succeed",
}


def _consonants(word):
    """Per letter: True for a consonant. A 'y' is a consonant at the start or after a vowel."""
    flags = []
    for i, ch in enumerate(word):
        if ch in _VOWELS:
            flags.append(False)
        elif ch == "y":
            flags.append(True if i == 0 else not flags[i - 1])
        else:
            flags.append(True)
    return flags


def _measure(stem):
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    pattern = "".join("c" if c else "v" for c in _consonants(stem))
    return len(re.findall(r"v+c+", pattern))


def _has_vowel(stem):
    return not all(_consonants(stem))


def _double_consonant(word):
    return len(word) >= 2 and word[-1] == word[-2] and _consonants(word)[-1]


def _cvc(word):
    """Porter's *o: ends consonant-vowel-consonant, the last not w, x or y (or a two-letter
    vowel-consonant word, NLTK's addition)."""
    flags = _consonants(word)
    if len(word) >= 3 and flags[-3] and not flags[-2] and flags[-1] and word[-1] not in "wxy":
        return True
    return len(word) == 2 and not flags[0] and flags[1]


def _first_rule(word, rules):
    """Apply the first rule whose suffix ``word`` ends with, if its condition holds on the stem;
    a matching suffix whose condition fails stops the search (Porter's rule lists)."""
    for suffix, replacement, condition in rules:
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + replacement if condition(stem) else word
    return word


def _m_positive(stem):
    return _measure(stem) > 0


def _m_above_one(stem):
    return _measure(stem) > 1


def _step1a(word):
    if word.endswith("ies") and len(word) == 4:
        return word[:-3] + "ie"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("ies"):
        return word[:-2]
    if word.endswith("ss"):
        return word
    if word.endswith("s"):
        return word[:-1]
    return word


def _step1b(word):
    if word.endswith("ied"):
        return word[:-3] + ("ie" if len(word) == 4 else "i")
    if word.endswith("eed"):
        stem = word[:-3]
        return stem + "ee" if _measure(stem) > 0 else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            stem = word[: -len(suffix)]
            break
    else:
        return word
    if stem.endswith(("at", "bl", "iz")):
        return stem + "e"
    if _double_consonant(stem):
        return stem if stem[-1] in "lsz" else stem[:-1]
    if _measure(stem) == 1 and _cvc(stem):
        return stem + "e"
    return stem


def _step1c(word):
    if word.endswith("y") and len(word) > 2 and _consonants(word[:-1])[-1]:
        return word[:-1] + "i"
    return word


_STEP2 = [
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"),
    ("izer", "ize"), ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"),
    ("ousli", "ous"), ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"),
    ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"),
    ("iviti", "ive"), ("biliti", "ble"), ("fulli", "ful"),
]


def _step2(word):
    if word.endswith("alli") and _m_positive(word[:-4]):
        return _step2(word[:-4] + "al")
    if word.endswith("logi"):
        # the 'l' stays with the stem, so short stems like "geo" qualify
        return word[:-1] if _m_positive(word[:-3]) else word
    return _first_rule(word, [(s, r, _m_positive) for s, r in _STEP2])


_STEP3 = [("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"),
          ("ful", ""), ("ness", "")]
_STEP4 = ["al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent",
          "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize"]


def _step3(word):
    return _first_rule(word, [(s, r, _m_positive) for s, r in _STEP3])


def _step4(word):
    rules = []
    for suffix in _STEP4:
        if suffix == "ion":
            rules.append((suffix, "", lambda s: _measure(s) > 1 and s[-1:] in ("s", "t")))
        else:
            rules.append((suffix, "", _m_above_one))
    return _first_rule(word, rules)


def _step5(word):
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word[:-1]) > 1:
        word = word[:-1]
    return word


@lru_cache(maxsize=65536)
def stem(word) -> str:
    """
    Porter stem of one word, lower-cased (NLTK's default mode, which LoCoMo's F1 uses); cached,
    since a conversation's vocabulary is small beside the words it indexes.

    Examples: ``"caresses" -> "caress"``, ``"ponies" -> "poni"``, ``"relational" -> "relat"``,
    ``"happy" -> "happi"``, ``"painting" -> "paint"``.
    """
    word = word.lower()
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 2:
        return word
    for step in (_step1a, _step1b, _step1c, _step2, _step3, _step4, _step5):
        word = step(word)
    return word
