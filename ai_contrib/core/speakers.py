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

#: what opens a word of a name (a name is up to four such words): an upper-case letter of any
#: script, or a digit ("3po")
INITIAL = "[" + "".join(re.escape(chr(c)) for c in range(0x10000) if chr(c).isupper()) \
    + "0-9]"
NAME = rf"{INITIAL}[\w'\u2019.-]*(?: {INITIAL}[\w'\u2019.-]*){{0,3}}"
VERBS = (r"said|says|asked|asks|noted|notes|replied|replies|answered|answers|added|adds|"
         r"explained|explains|mentioned|mentions|stated|states|shared|shares|exclaimed|"
         r"remarked|admitted|insisted|promised|recalled|wrote|whispered|shouted|told|tells")
# "told Marta", "said to Marta", "asked Marta" : one optional object of the verb
OBJECT = r"(?: to)?(?: (?!said\b)[A-Z][\w'\u2019-]*| (?:him|her|them|me|us|you|everyone))?"
PRONOUNS = frozenset("he she they we someone".split())
#: who may stand before "said": a name, the extract's label of the game's lines, a pronoun
WHO = rf"{NAME}|[Tt]he game|I|[Hh]e|[Ss]he|[Tt]hey|[Ww]e"
#: ``Bob said: rest of the line`` (the extract's form; its rest may open with a quote mark)
SAID_COLON = re.compile(
    rf"(?:^|(?<=[\s(\-*\u2022]))(?P<who>{WHO}) "
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
