"""
Who writes the facts of a pre-compaction extraction: the model, or rules over what players
said (``AI_PRE_COMPACT_EXTRACTOR``; ``docs/design.md``, "Facts players said").

``"model"`` runs the model's loop (:mod:`ai_contrib.npc.extraction`); ``"rule"`` asks no model
and journals the facts :func:`ai_contrib.core.rule_facts.rule_facts` reads in the players'
lines of the span; ``"auto"`` (the default) asks the model while its facts pass the one-line
check, and goes by rule once they fail above the measured share
(:func:`ai_contrib.core.fact_policy.choose_extractor`). The outcomes of a model's facts are kept
per client and model name for the life of the client (the process-wide one: until the server
restarts), so a model is judged on its own facts and a new client asks it afresh. A run on which
the model's facts tip the share goes by rule too, after the model, so the first extraction of
a model that cannot extract already journals what players said. Whoever writes those, the
actions the game ran in the span are journaled first, in the game's words
(:func:`journal_action_facts`).
"""

from __future__ import annotations

import weakref
from collections import deque

from evennia.utils import logger
from twisted.internet import defer

from ..core.actions import action_fact
from ..core.fact_policy import GROUNDING_WINDOW, choose_extractor
from ..core.grounding import SourceLine, attributed_line
from ..core.rule_facts import rule_facts
from .hurry import Hurried, hurried, unless_hurried

#: ``{client: {model name: deque of bools}}``: the outcomes of each model's recent facts
_RECORDS = weakref.WeakKeyDictionary()


def grounding_record(client, model) -> deque:
    """
    The outcomes of ``model``'s recent facts on ``client`` (True: stored in the model's words;
    False: failed the one-line check, or only an NPC said it), the newest last, at most
    :data:`~ai_contrib.core.fact_policy.GROUNDING_WINDOW`; an empty one the first time. The
    caller may extend it.
    """
    per_model = _RECORDS.setdefault(client, {})
    return per_model.setdefault(str(model or ""), deque(maxlen=GROUNDING_WINDOW))


def extractor_setting(script) -> str:
    """``AI_PRE_COMPACT_EXTRACTOR`` for the NPC of ``script``, lower case (``"auto"`` unset)."""
    return str(script.cfg("pre_compact_extractor") or "auto").strip().lower()


@defer.inlineCallbacks
def run_extraction(run) -> defer.Deferred:
    """
    Run one extraction (``run``: the extraction's state, :class:`ai_contrib.npc.extraction.
    _Extraction`, which reads its views one listener group at a time) by the model, the rules,
    or both (module docstring).

    Returns:
        Deferred[str]: how it stopped: the model loop's ``stopped_by``, ``"rule"`` when no
        model was asked (also when the NPC's memory work is hurried,
        :mod:`ai_contrib.npc.hurry`), ``"hurried"`` when the model's run was cancelled for it
        and the rules read the span. Errbacks as the model's loop does (the outcomes seen are
        kept).
    """
    setting = extractor_setting(run.script)
    record = grounding_record(run.client, run.model)
    # first, so that the model's views show them journaled and do not ask for them again
    try:
        journal_action_facts(run)
    except Exception as err:  # noqa: BLE001 - the other facts are still to be read
        logger.log_trace(f"AI {run.character}: the facts of its actions were not journaled: "
                         f"{err}")
    if choose_extractor(setting, record) == "rule" or hurried(run.script):
        journal_rule_facts(run)
        return "rule"
    try:
        stopped_by = yield unless_hurried(run.script, run.run())
    except Hurried:
        # the talk outran the model: what it journaled stays, the rules read the span whole;
        # the model's run counts as one failed fact, so that a server too slow for the talk
        # stops being asked (each ask held the memory server some 18 s for nothing)
        record.append(False)
        journal_rule_facts(run)
        return "hurried"
    finally:
        record.extend(run.outcomes)
    if choose_extractor(setting, record) == "rule":
        journal_rule_facts(run)
    return stopped_by


def _plain(value):
    """A plain (non-Attribute-backed) copy of a stored dict."""
    from evennia.utils.dbserialize import deserialize

    return deserialize(value)


def journal_rule_facts(run) -> int:
    """
    Journal the facts the players' lines of each of ``run.views`` state
    (:func:`ai_contrib.core.rule_facts.rule_facts`), each citing its line, through the same
    path as the model's facts (``run.journal_fact``: the near-duplicate check, speaker and
    audience from the cited line, one Attribute write); importance by the heuristic, whatever
    ``AI_IMPORTANCE_SCORING`` says (no model is asked). Under ``AI_PRE_COMPACT_FACTS =
    "verbatim"`` a fact is stored as its line, attributed. Adds ``"rule"`` to ``run.modes``.

    Returns:
        int: facts written.
    """
    run.modes.append("rule")

    def facts():
        # one listener group at a time, widest first, as the model reads them: a fact takes
        # the audience of the view its line is in (docs/design.md, "Privacy by audience")
        for view in run.views or [run.span]:
            run.show(view)
            for fact in rule_facts(run.span, listener=getattr(run.character, "key", None)):
                msg = run.span[fact.index]
                seq = msg.get("seq")
                content = fact.content
                if run.policy == "verbatim":
                    content = attributed_line(SourceLine(str(msg.get("name")), msg.get("content")))
                yield {"content": content, "source": [seq] if isinstance(seq, int) else None,
                       "_grounding": {"support": fact.support, "grounding": "rule"}}

    return _journal_facts(run, facts())


def journal_action_facts(run) -> int:
    """
    Journal what the NPC did in the span ``run.read``: one fact for each action the game ran
    (:func:`ai_contrib.core.actions.action_fact`: the command and the game's text, never the
    model's words), whatever extractor writes the other facts, so that what the NPC gave,
    took or opened outlives the compaction of its action's messages and reaches the person's
    impression (``docs/design.md``, "Actions"). Each fact's audience is the action's own (the
    result message alone is shown while it is journaled), its speaker the NPC, its source the
    result's seq; importance by the heuristic. A fact the journal holds word for word is not
    journaled again (the near-duplicate check of the model's facts would take "give key to
    Wren" and "give key to Bob" for one); a recall's result is no fact.

    They are counted in ``run.game_facts``, not as the model having recorded something, and
    their audiences are not the model's first record's (``run.audiences`` is left empty).

    Returns:
        int: facts written.
    """
    npc = _npc_name(run.character)
    done = [(msg, fact) for msg in run.read for fact in [action_fact(msg, npc)] if fact]

    def facts():
        for msg, fact in done:
            run.show([msg])  # the action's audience, not a wider view's
            seq = msg.get("seq")
            yield {"content": fact, "source": [seq] if isinstance(seq, int) else None,
                   "_speaker": npc, "_exact": True, "_grounding": {"grounding": "action"}}

    try:
        run.game_facts = _journal_facts(run, facts()) if done else 0
    finally:
        run.audiences = []  # theirs, not the audience of the model's first record
    return run.game_facts


def _npc_name(character) -> str:
    """The name an action fact gives the NPC (its key)."""
    return str(getattr(character, "key", None) or "The NPC")


def has_action_facts(messages, character) -> bool:
    """Whether any of ``messages`` is the result of an action the game ran that
    :func:`journal_action_facts` would journal (:func:`ai_contrib.core.actions.action_fact`)."""
    npc = _npc_name(character)
    return any(action_fact(msg, npc) for msg in messages)


def _journal_facts(run, facts):
    """
    Journal each of ``facts`` (``add_journal_entry`` arguments; the iterable may move
    ``run`` to the view a fact is attributed within before yielding it) through
    ``run.journal_fact``, importance by the heuristic; one Attribute write at the end.

    Returns:
        int: facts written.
    """
    from ..memory.importance import heuristic_importance
    from ..memory.journal import ensure_journal

    journal = ensure_journal(_plain(run.character.db.journal) or None)
    known = list(_plain(run.character.db.entity_profiles) or {})
    before, changed = len(run.facts), set()
    for args in facts:
        run.journal_fact(journal, args, heuristic_importance(args["content"], known), changed)
    if "journal" in changed:
        run.character.db.journal = journal
    return len(run.facts) - before
