"""
A room of NPCs: which of the AI NPCs in a room answers a line (``docs/design.md``, "A room of
NPCs").

Every NPC in the room hears every line and stores it with its audience; this module decides who
*answers*, once per line, the same way for every NPC, so that a line is answered by the NPC it
was meant for and never by all of them:

1. ``talk <npc> = ...`` is answered by that NPC alone;
2. a line said *to* NPCs, their name in the vocative (:func:`ai_contrib.core.addressing.
   vocatives`: "Marta, is Fenwick always this talkative?" is said to Marta and only mentions
   Fenwick), is answered by them alone; a line that only mentions NPCs continues the
   speaker's open conversation (rule 4) if there is one, else is answered by the NPCs it
   mentions. A line an NPC says is answered by the NPCs it addresses in the vocative and by
   nobody else (NPCs never chat by default);
3. an NPC that is alone in the room answers every line of a player;
4. a line naming nobody continues the speaker's conversation: it is answered by the NPC the
   speaker exchanged with last (:func:`partner`), while that exchange is at most ``window``
   seconds old. Naming another NPC makes that one the partner: the conversation with the
   previous one ends;
5. a line to everyone (:func:`to_everyone`: "Good evening, everyone!", "hello all") is
   answered by exactly one NPC: the one the speaker exchanged with most recently (at any age),
   else the one whose persona shares most words with the line, else the first by dbref;
6. anything else is answered by nobody.

NPCs whose policy is ``"always"`` (``AI_ANSWER_WHEN``) answer every line of a player besides.

Pure functions over plain values.
"""

from __future__ import annotations

import re

from .addressing import mentions, vocatives

#: words of a line said to everyone in the room (a whole phrase, in any case)
EVERYONE_WORDS = ("everyone", "everybody", "all of you", "you all", "y'all", "yall",
                  "each of you", "folks", "one and all")
#: greetings and thanks after which "all" means everyone ("evening, all", "thanks all")
GREETINGS = ("hello", "hi", "hey", "evening", "morning", "afternoon", "night", "day",
             "greetings", "thanks", "thank you", "cheers", "bye", "goodbye", "farewell",
             "welcome", "howdy")

_EVERYONE_RE = re.compile(
    r"(?<!\w)(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in EVERYONE_WORDS)
    + r")(?!\w)", re.IGNORECASE)
_GREETING_ALL_RE = re.compile(
    r"(?<!\w)(?:" + "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in GREETINGS)
    + r")[\s,!.]+all(?!\w)", re.IGNORECASE)
# "..., all!" at the end of a line: a vocative to the room
_TRAILING_ALL_RE = re.compile(r",\s*all\s*[.!?]*\s*$", re.IGNORECASE)

#: words that say nothing about whom a line is for (greetings, pronouns, function words)
STOPWORDS = frozenset("""
a about after all also am an and any are as at be been but by can could did do does for from
good had has have he her here him his how i if in into is it its just me my no not now of on
one or our she so some than that the their them then there these they this those to too up us
very was we were what when where which who why will with would you your yours evening morning
afternoon night hello hi hey everyone everybody folks greetings thanks thank cheers well
""".split())

_WORD_RE = re.compile(r"[a-z][a-z'-]{2,}")


def to_everyone(text) -> bool:
    """
    True when ``text`` is said to everyone in the room: it holds one of :data:`EVERYONE_WORDS`
    as a phrase ("Good evening, everyone!"), or "all" after a greeting ("hello all",
    "thanks, all") or as a closing vocative ("Drinks are on me, all!").
    """
    text = text or ""
    return bool(_EVERYONE_RE.search(text) or _GREETING_ALL_RE.search(text)
                or _TRAILING_ALL_RE.search(text))


def content_words(text) -> set[str]:
    """The words of ``text`` that can tell a role ("forge", "ale"): lower case, three letters
    or more, :data:`STOPWORDS` left out; a set."""
    return {w.strip("'-") for w in _WORD_RE.findall((text or "").lower())} - STOPWORDS - {""}


def role_overlap(text, persona) -> int:
    """How many :func:`content_words` of ``text`` the ``persona`` text also holds (an int; a
    cheap measure of whose role a line fits, no model call)."""
    return len(content_words(text) & content_words(persona))


def _dbref_key(dbref):
    """Sort key of a dbref: ``"#12"`` by its number, anything else after, by text."""
    text = str(dbref)
    digits = text.lstrip("#")
    return (0, int(digits), text) if digits.isdigit() else (1, 0, text)


def partner(exchanges, now=None, window=None) -> tuple:
    """
    The NPCs the speaker exchanged with last: those whose time in ``exchanges`` is the newest
    (a tuple of dbrefs, sorted; several when one line named several NPCs). With ``window``
    (seconds) and ``now`` (Unix seconds), only if that exchange is at most ``window`` old: a
    window of 0 or less never holds a conversation open.

    Args:
        exchanges (dict): ``{npc_dbref: unix seconds of the speaker's last exchange with it}``
            (a line to it or its reply to the speaker), for the NPCs in the room.

    Returns:
        tuple[str, ...]: possibly empty.
    """
    if not exchanges:
        return ()
    newest = max(exchanges.values())
    if window is not None and (window <= 0 or now - newest > window):
        return ()
    return tuple(sorted((npc for npc, at in exchanges.items() if at == newest), key=_dbref_key))


def answerers(text, speaker, npcs, *, to=None, exchanges=None, now=0.0, window=120.0,
              from_npc=False) -> tuple[tuple[str, ...], str | None]:
    """
    Which AI NPCs in a room answer a line, and why (the rules in the module docstring).

    Args:
        text (str): the line's words (already normalised).
        speaker (str): the speaker's dbref.
        npcs (iterable[dict]): the AI NPCs in the room, each ``{"id": dbref, "names": [key and
            aliases], "persona": str, "always": bool (policy "always")}``; the speaker, when
            it is one of them, is left out.
        to (str | None): the dbref the line was ``talk``-ed to; None for a ``say``.
        exchanges (dict | None): ``{npc_dbref: unix seconds}`` of this speaker's last exchange
            with each NPC (the room's record, see :func:`partner`).
        now (float): Unix seconds.
        window (float): seconds a conversation stays open (``AI_CONVERSATION_WINDOW``).
        from_npc (bool): the speaker is an AI NPC: only the NPCs it addresses in the vocative
            answer.

    Returns:
        tuple[tuple[str, ...], str | None]: ``(dbrefs sorted by number, reason)``; reason is
        ``"talk"``, ``"name"``, ``"only"``, ``"conversation"``, ``"everyone"``, ``"always"``
        or None when nobody answers.
    """
    candidates = {str(n["id"]): n for n in npcs if str(n["id"]) != str(speaker)}

    def result(ids, reason):
        ids = sorted(set(ids), key=_dbref_key)
        return (tuple(ids), reason) if ids else ((), None)

    if to is not None:
        return result([str(to)] if str(to) in candidates else [], "talk")
    named = [npc for npc, n in candidates.items() if mentions(text, n.get("names") or ())]
    said_to = vocatives(text, {npc: candidates[npc].get("names") or () for npc in named})
    if from_npc:
        return result(said_to, "name")
    always = [npc for npc, n in candidates.items() if n.get("always")]
    if said_to:
        return result(list(said_to) + always, "name")
    known = {npc: at for npc, at in (exchanges or {}).items() if npc in candidates}
    talking = partner(known, now, window)
    if named:
        # mentioned, not spoken to: an open conversation goes on with its partner
        return (result(list(talking) + always, "conversation") if talking
                else result(named + always, "name"))
    if len(candidates) == 1:
        return result(candidates, "only")
    if talking:
        return result(list(talking) + always, "conversation")
    if always:
        return result(always, "always")
    if not candidates or not to_everyone(text):
        return (), None
    recent = partner(known)
    if recent:
        return result(recent[:1], "everyone")
    ranked = sorted(candidates, key=_dbref_key)
    scores = {npc: role_overlap(text, candidates[npc].get("persona") or "") for npc in ranked}
    best = max(scores.values())
    if best > 0:
        return result([next(npc for npc in ranked if scores[npc] == best)], "everyone")
    return result(ranked[:1], "everyone")
