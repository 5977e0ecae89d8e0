"""
Which language a text is in, cheaply: by the share of its words that are function words of one
language (``docs/design.md``, "Facts you can trust").

A small model reading an English conversation may write its fact or summary in Spanish ("El
nombre del proyector es el 34 y..."); its words can still pass a word-level check (names and
numbers survive translation). Function words give a language away in a handful of words, need no
model or dependency, and a text too short to tell is not judged.

Pure module: no Evennia, Twisted or Django imports.
"""

from __future__ import annotations

import re

__all__ = ["MIN_FUNCTION_WORDS", "guess_language", "language_problem"]

#: The most frequent function words of each language told apart (case-folded). Words two
#: languages share ("a", "de", "en", "la", "no", "se", "y") are kept where they are the most
#: telling; a tie leaves the language unknown.
_FUNCTION_WORDS = {
    "en": "the and is are was were of to in that it you he she they we i my your his her with "
          "for on at this not be have has had will would what do did an or but so from by as",
    "es": "el la los las es son del y que en un una por para con no lo se su sus pero como "
          "muy está esta estoy tengo yo tu usted nosotros al más fue",
    "fr": "le la les est sont des du et que qui un une pour avec pas ne je tu il elle nous vous "
          "ils dans sur au aux mais ce cette mon ton son",
    "de": "der die das und ist sind ein eine nicht ich du er sie wir ihr mit für auf den dem "
          "des zu von aber auch wie was war",
    "it": "il lo gli è sono della di che un una per con non mi ti si ma come questo questa nel "
          "alla anche ho hai",
    "pt": "o os as é são do da dos das e que um uma por para com não eu você ele ela nós mas "
          "como muito está foi",
    "nl": "de het een en is zijn niet ik je hij zij wij met voor op aan van maar ook wat was",
}
_WORDS = {lang: frozenset(words.split()) for lang, words in _FUNCTION_WORDS.items()}
_TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")

#: Least function words of the winning language a text must hold before its language is
#: judged: a three-word fact ("Bob owes Marta") has too few to tell.
MIN_FUNCTION_WORDS = 3


def guess_language(text) -> str | None:
    """
    The language of ``text`` by its function words (:data:`_FUNCTION_WORDS`), or ``None``
    when it holds fewer than :data:`MIN_FUNCTION_WORDS` of the likeliest language's, or two
    languages tie.

    Args:
        text (str): any text.

    Returns:
        str | None: a two-letter code (``"en"``, ``"es"``, ``"fr"``, ``"de"``, ``"it"``,
        ``"pt"``, ``"nl"``) or None.
    """
    words = [w.casefold() for w in _TOKEN.findall(text or "")]
    counts = sorted(((sum(1 for w in words if w in vocab), lang) for lang, vocab in _WORDS.items()),
                    reverse=True)
    (best, lang), second = counts[0], counts[1][0]
    if best < MIN_FUNCTION_WORDS or best == second:
        return None
    return lang


def language_problem(text, source) -> str:
    """
    Why ``text`` is not in the language of ``source``, or ``""``: both have a language
    (:func:`guess_language`) and they differ. A text or source too short to tell passes.

    Args:
        text (str): a fact or a summary. source (str): what it claims to come from.

    Returns:
        str: e.g. ``"written in es, the conversation in en"``, or ``""``.
    """
    said, heard = guess_language(text), guess_language(source)
    if said and heard and said != heard:
        return f"written in {said}, the conversation in {heard}"
    return ""
