"""
Who a speaker is in a text that says "Bob said: ...": the pattern of a speaker's name, and the
label an extract gives a speaker so that this pattern reads it back (``docs/design.md``,
"Summary fidelity", quotes). Shared by :mod:`ai_contrib.core.quotes` (which reads quotes) and
:func:`ai_contrib.core.fidelity.extractive_summary` (which writes them).

Pure module: no Evennia, Twisted or Django imports.
"""

from __future__ import annotations

import re

__all__ = ["NAME", "OBJECT", "PRONOUNS", "SAID_COLON", "VERBS", "WHO", "speaker_label"]


def _initials():
    """A character class of what may open a word of a name: a letter that is not lower-case
    (an upper-case one of any script, or one of a script without case: 李, محمد), or a digit."""
    ranges, start, last = [], None, None
    for code in range(0x10000):
        char = chr(code)
        if char.isalpha() and not char.islower():
            if start is None:
                start = code
            last = code
        elif start is not None:
            ranges.append((start, last))
            start = None
    if start is not None:
        ranges.append((start, last))
    body = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
                   for a, b in ranges)
    return f"[{body}0-9]"


#: what opens a word of a name (a name is up to four such words; ``_initials``)
INITIAL = _initials()
NAME = rf"{INITIAL}[\w'\u2019.-]*(?: {INITIAL}[\w'\u2019.-]*){{0,3}}"
VERBS = (r"said|says|asked|asks|noted|notes|replied|replies|answered|answers|added|adds|"
         r"explained|explains|mentioned|mentions|stated|states|shared|shares|exclaimed|"
         r"remarked|admitted|insisted|promised|recalled|wrote|whispered|shouted|told|tells")
# "told Marta", "said to Marta", "asked Marta" : one optional object of the verb
OBJECT = r"(?: to)?(?: (?!said\b)[A-Z][\w'\u2019-]*| (?:him|her|them|me|us|you|everyone))?"
PRONOUNS = frozenset("he she they we someone".split())
#: who may stand before "said": a name or a pronoun
WHO = rf"{NAME}|I|[Hh]e|[Ss]he|[Tt]hey|[Ww]e"
#: ``Bob said: rest of the line`` (the extract's form; its rest may open with a quote mark);
#: the extract's ``The game noted: ...`` too (an action's "The game said: ..." is the game's
#: answer to a command, not a line of the talk, and is not read as a quote)
SAID_COLON = re.compile(
    rf"(?:^|(?<=[\s(\-*\u2022]))(?P<who>{WHO}|[Tt]he game(?= noted)) "
    rf"(?:{VERBS}){OBJECT}\s*:[ \t]*(?P<rest>[^\n]*)")


def speaker_label(name) -> str:
    """
    ``name`` as an extract writes a speaker: its whitespace collapsed and each word's first
    letter capitalised (``"old tom"`` -> ``"Old Tom"``), when the quote check then reads the
    whole of it as the speaker of ``"<label> said: ..."``; else ``"Someone"`` (a name such as
    ``"."`` or ``"a:"``, which no reader could take for one).
    """
    label = " ".join(word[:1].upper() + word[1:] for word in str(name or "").split())
    read = SAID_COLON.match(f"{label} said: x") if label else None
    return label if read and read.group("who") == label else "Someone"
