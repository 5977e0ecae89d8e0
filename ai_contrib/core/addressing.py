"""
Answer only when addressed: which heard lines an NPC answers (``docs/design.md``, "Turns, not
one call per line").

Three NPCs in one tavern must not give three replies to one line. Every NPC still hears every
line (it goes into its history with its audience), but a line triggers a reply from an NPC only
when it is meant for that NPC:

1. said to it with ``talk <npc> = ...`` (a line ``talk``-ed to someone else is for them only);
2. the policy is ``"always"`` (every NPC answers every ``say``, the behaviour before this rule);
3. it names the NPC: its key or an alias appears as a word ("Marta, an ale", "thanks marta");
4. it names another AI NPC in the room and not this one: it is for that one;
5. the NPC is the only AI NPC in the room;
6. it continues a conversation: the same speaker said the last line addressed to this NPC, and
   that line or the NPC's reply after it is at most ``window`` seconds old (default 120 s, a
   pause in a conversation; after it a player must name the NPC again).

The decision is stored on the line (``metadata["addressed"]``, a bool); lines stored False are
heard but never pending (:func:`ai_contrib.core.turns.unanswered_lines`).

Pure functions over strings and message lists (shape in :mod:`ai_contrib.core.messages`).
"""

from __future__ import annotations

import re

from .dates import epoch_seconds

#: policies of ``AI_ANSWER_WHEN``
POLICIES = ("addressed", "always")

#: seconds a conversation stays open after its last exchange (``AI_CONVERSATION_WINDOW``)
DEFAULT_WINDOW = 120.0


def names_pattern(names) -> re.Pattern | None:
    """
    A compiled regex matching any of ``names`` as a whole word, case-insensitively; the words
    of a multi-word name may be separated by any whitespace. None when no name is usable.

    Args:
        names (iterable[str]): an NPC's key and aliases.
    """
    parts = sorted({n.strip().lower() for n in names if n and n.strip()}, key=len, reverse=True)
    if not parts:
        return None
    alternatives = "|".join(r"\s+".join(re.escape(w) for w in p.split()) for p in parts)
    # (?<!\w) / (?!\w) rather than \b: a name may start or end with punctuation ("Mr. Oak")
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def mentions(text, names) -> bool:
    """True when ``text`` holds one of ``names`` as a word ("thanks marta" names "Marta")."""
    pattern = names_pattern(names)
    return bool(pattern and pattern.search(text or ""))


#: greetings and thanks: a name right after them is said to someone whatever follows
#: ("hey Marta what news", "thanks marta", "good evening Marta and Hilda")
GREETING_OPENERS = ("hello", "hi", "hey", "heya", "hiya", "yo", "oi", "ahoy", "greetings",
                    "welcome", "good", "evening", "morning", "afternoon", "night", "day",
                    "thanks", "thank", "you", "cheers", "bye", "goodbye", "farewell", "howdy",
                    "dear")
#: interjections: a name after them is said to someone when a comma or the end follows
#: ("well, Marta, what now?", "oh Marta!"), not in "yes, Marta is here"
OPENERS = GREETING_OPENERS + ("oh", "ah", "aye", "ok", "okay", "well", "so", "now", "sorry",
                              "pardon", "excuse", "me", "please", "listen", "look", "say",
                              "yes", "no", "nay", "right", "alright", "mistress", "master",
                              "madam", "sir", "miss", "friend", "my", "lady", "lord", "and")

# a placeholder for a name in the line, so that the patterns below see a name as one character
_NAME = "\x00"
_RUN = rf"{_NAME}(?:\s*(?:,|and|&|or)\s*{_NAME})*"  # "Marta", "Marta and Hilda", "Marta, Hilda"
_ANY = r"(?:(?:" + "|".join(OPENERS) + r")[\s,!]+)*"
_GREETING = r"(?:" + "|".join(GREETING_OPENERS) + r")[\s,!]+"
_CLAUSE = r"(?:^|[.!?;:])\s*"
_AFTER = r"(?=\s*(?:[,!?.;:]|$))"
_VOCATIVE_RES = (
    # "Marta, ...", "Marta and Hilda, a word", "Marta!", "Good. Marta, an ale.", "oh Marta!"
    re.compile(rf"{_CLAUSE}{_ANY}({_RUN}){_AFTER}", re.IGNORECASE),
    # "hey Marta what news", "thanks marta", "good evening Marta and Hilda"
    re.compile(rf"{_CLAUSE}{_ANY}{_GREETING}{_ANY}({_RUN})", re.IGNORECASE),
    # "..., Marta?", "Tell me, Marta, is it true?", "Play us a tune, the smith"
    re.compile(rf",\s*({_RUN}){_AFTER}"),
)


def vocatives(text, names) -> set:
    """
    The people ``text`` is said *to*: those whose name stands in the vocative, not merely in
    the line (``docs/design.md``, "A room of NPCs"). "Marta, is Fenwick always this talkative?"
    is said to Marta and mentions Fenwick. A name is in the vocative when it opens the line or
    a sentence, after interjections or not, and a comma or the end follows ("Marta, ...",
    "Marta!", "Marta and Hilda, a word", "oh Marta!"; :data:`OPENERS`), when a greeting or
    thanks comes before it ("hey Marta what news", "thanks marta";
    :data:`GREETING_OPENERS`), or when it stands after a comma at the end of the line or
    between commas ("..., Marta?", "Tell me, Marta, is it true?").

    Args:
        text (str): the line.
        names (dict): ``{key: [names]}``: each person's key and aliases, by any hashable key.

    Returns:
        set: the keys of ``names`` addressed in the vocative (empty when nobody is).
    """
    text = text or ""
    spans = []
    for key, own in names.items():
        pattern = names_pattern(own)
        if pattern is not None:
            spans.extend((m.start(), m.end(), key) for m in pattern.finditer(text))
    # the longest name wins where two overlap ("Old Tom" over "Tom")
    spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    chosen, end = [], -1
    for start, stop, key in spans:
        if start >= end:
            chosen.append((start, stop, key))
            end = stop
    if not chosen:
        return set()
    pieces, keys, position = [], [], 0
    for start, stop, key in chosen:
        pieces.append(text[position:start].replace(_NAME, " "))
        pieces.append(_NAME)
        keys.append(key)
        position = stop
    pieces.append(text[position:].replace(_NAME, " "))
    masked = "".join(pieces)
    offsets = [i for i, ch in enumerate(masked) if ch == _NAME]  # the n-th name's place
    found = set()
    for pattern in _VOCATIVE_RES:
        for match in pattern.finditer(masked):
            start, stop = match.span(1)
            found.update(keys[n] for n, at in enumerate(offsets) if start <= at < stop)
    return found


def conversation_partner(history, now, window=DEFAULT_WINDOW, max_scan=200) -> str | None:
    """
    The speaker (dbref) the NPC is in a conversation with, or None.

    That is the speaker of the newest line addressed to the NPC, while that line or a reply of
    the NPC after it is at most ``window`` seconds old. Lines stored with
    ``metadata["addressed"] = False`` are skipped; lines without the key (stored before the rule)
    count as addressed. The scan walks back from the newest message; it stops at the first
    message older than the window when no recent reply was seen, and after ``max_scan``
    messages in any case, so its cost does not grow with the history.

    Args:
        history (list[dict]): the runtime history, oldest first.
        now (float): the current time (Unix seconds).
        window (float): seconds; 0 or less: no conversation is ever open.
        max_scan (int): messages looked at, at most.

    Returns:
        str | None
    """
    if not window or window <= 0:
        return None
    replied = None  # time of the newest reply, once the walk back has passed it
    for msg in history[: -max_scan - 1 : -1]:
        said = epoch_seconds(msg.get("timestamp"))
        recent = said is not None and now - said <= window
        if said is not None and not recent and replied is None:
            return None  # everything further back is older still
        meta = msg.get("metadata") or {}
        role = msg.get("role")
        if role == "assistant":
            if replied is None and (msg.get("content") or "").strip():
                replied = said
                if said is not None and not recent:
                    return None  # the NPC last spoke long ago: no conversation is open
            continue
        if role != "user" or not meta.get("speaker") or meta.get("addressed") is False:
            continue
        if recent or (replied is not None and now - replied <= window):
            return meta["speaker"]
        return None
    return None


def decide(text, speaker, *, own_names, other_npc_names=(), to_me=None, policy="addressed",
           partner=None) -> str | None:
    """
    Whether a heard line is addressed to this NPC, and why.

    Args:
        text (str): the line's words.
        speaker (str): the speaker's dbref.
        own_names (iterable[str]): this NPC's key and aliases.
        other_npc_names (iterable[str]): keys and aliases of the other AI NPCs in the room
            (empty: this NPC is the only one).
        to_me (bool | None): True for ``talk <this npc> = ...``, False for a line ``talk``-ed
            to someone else, None for a ``say`` to the room.
        policy (str): ``"addressed"`` or ``"always"`` (an unknown value acts as
            ``"addressed"``).
        partner (str | None): :func:`conversation_partner` of this NPC.

    Returns:
        str | None: the reason (``"talk"``, ``"always"``, ``"name"``, ``"only"``,
        ``"conversation"``) or None when the line is not for this NPC.
    """
    if to_me is True:
        return "talk"
    if to_me is False:
        return None
    if policy == "always":
        return "always"
    if mentions(text, own_names):
        return "name"
    other_names = list(other_npc_names)
    if not other_names:
        return "only"
    if mentions(text, other_names):
        return None
    if partner is not None and partner == speaker:
        return "conversation"
    return None
