"""
Pre-compaction fact extraction: the NPC journals what it must not forget while its full context
is still there (``docs/design.md``, "Pre-compaction fact extraction").

The journal-facts call and the compaction-summary call are separate requests with different
payloads: this one sends the full history plus an "extract important facts" prompt and gets
tool calls back; the tool calls run locally (no LLM), and their messages are appended to the
history as the NPC's record of what it journaled: no reply prompt shows them, they cost no
budget, and they leave the context when the compaction they prepared lands
(:meth:`ai_contrib.memory.runtime.RuntimeHistory.drop_extraction_traffic`). The summary call
later sends only the messages being compacted.

The loop (a small ReAct loop with exactly three tools, :mod:`ai_contrib.llm.extraction_tools`):

- entry: ``pre_compact_extraction_enabled`` and at least 5 messages in the history;
- each iteration asks the model, executes its calls, appends the assistant tool-call message
  and one tool result per call via ``script.add_message``;
- it stops on ``noop`` (explicit completion), on a reply without any tool call, on a call to any
  other tool (scope guard: no scope creep during compaction), or after ``max_iterations``
  (5 in sleep, 3 in an emergency);
- ``script.db.context_signals["pre_compaction"]`` is True while it runs.

Every fact and observation must say what one line of the span says (``docs/design.md``, "Facts
you can trust"; :func:`ai_contrib.core.grounding.check_fact`): by ``pre_compact_facts`` a fact
that fails is stored as that line, verbatim and attributed, or dropped (:meth:`_Extraction.ground`).

A fact's speaker and audience are never the model's to choose (``docs/design.md``, "Privacy by
audience"): the request numbers each message with its archive seq, a call cites those numbers
as ``source``, and :func:`ai_contrib.memory.provenance.provenance` takes the speaker from the
cited messages (else from the whole span the request showed) and the audience from everything
the request showed; a ``speaker`` argument or a ``public``/``private`` tag in the call is
ignored. So that a public fact stays public when the span also holds a private line, the span
is read one listener group at a time (:func:`ai_contrib.core.audience.listener_views`).

Backends (``docs/design.md``, "Tool calls"): where structured output is on
(``AI_LLM_STRUCTURED_OUTPUT``, :func:`structured_output_wanted`) each request carries a JSON
schema of the three calls (``response_format``) and no ``tools=``: servers that constrain
decoding to it (the embedded llama.cpp server always does) can only answer with valid calls,
which is what lets the embedded SmolLM2-135M journal anything at all. A server that refuses
``response_format`` (HTTP 400 naming it) is asked again the other way, and the client remembers
the refusal. Otherwise tools are offered natively (``tools=``); a reply without native calls is
read with the text protocol (``TOOL: add_journal_entry {...}`` lines), which the prompt also
teaches, so models without tool support (base models) can take part. A backend that rejects
``tools=`` outright is asked again without it.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from twisted.internet import defer

from ..core.audience import common_audience, heard_by, listener_views
from ..core.cuts import EXTRACTION_TYPE
from ..core.fact_policy import capped_importance, said_by_npc
from ..core.fidelity import fact_problem, says_one_of, source_text
from ..core.grounding import (Grounding, attributed_line, check_fact, line_entity,
                              source_lines, summary_speaker)
from ..core.messages import ChatMessage
from ..core.outcome import FAILED, SUCCESS, ExtractionResult
from ..core.quotes import check_quotes, speaker_lines
from ..core.rule_facts import states_nothing
from ..core.text import MODEL_TEXT_MAX_CHARS, normalise_player_text
from ..core.tokens import count_tokens
from ..llm import extraction_tools as toolspec
from ..memory.entities import find_entity, update_entity_observation
from ..memory.importance import heuristic_importance, score_importance
from ..memory.provenance import (provenance, said_in_public, source_messages,
                                 without_visibility_tags)
from .ai_npcs import ai_npc_names

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

logger = logging.getLogger(__name__)

MIN_HISTORY = 5  # messages; below this there is nothing worth extracting (docs/design.md)
DEFAULT_MAX_ITERATIONS = 5
REPLY_MAX_TOKENS = 256  # tokens per extraction reply: one or two tool calls
TEMPERATURE = 0.2
TAG = EXTRACTION_TYPE  # metadata type of the messages this loop adds to the history

DEFAULT_PRE_COMPACTION_PROMPT = """\
Your older memories of this conversation are about to be condensed into a short summary, and \
details will be lost. Before that happens, review the conversation and record what you must \
not forget: names, promises and debts, plans and dates, preferences, dangers, secrets, and \
facts about the people you talk to.
- Use add_journal_entry for each important fact: one fact per call, written so it makes sense \
on its own ("Bob promised to bring 3 iron ingots by Friday"), with an importance from 1 to 10 \
and, as source, the numbers of the messages it comes from.
- Use update_entity_observation for something you learned about a person, place or thing, \
with its source too.
- Do not record greetings, small talk, or facts already in your journal.
- When nothing more is worth recording, call noop."""

NUDGE = (
    "Review the conversation above and record the next important fact now, "
    "or call noop if nothing is left."
)
#: The nudge of structured-output requests: the grammar already says how to answer, so it asks
#: for one grounded fact (measured with the embedded 135M model: more of its facts are in the
#: conversation than with :data:`NUDGE`).
STRUCTURED_NUDGE = (
    "Write down the most important fact of the conversation above, as one sentence in its own "
    "words naming who, with the numbers of the messages it comes from."
)
JOURNAL_HINT_ENTRIES = 10  # recent journal facts shown so the model does not record them again
NUMBERING_NOTE = (
    "Each message of the conversation starts with its number in brackets, like [12]: "
    "these are the numbers to give as source."
)


def _cfg(script, name, default=None):
    """
    Option ``name`` for the NPC of ``script`` (``script.cfg(name)``: its Attribute, else
    ``AI_<NAME>``, else the default; :func:`ai_contrib.settings.resolve_option`), or ``default``
    where that is None.

    Raises:
        KeyError: ``name`` is not an option of the contrib.
    """
    value = script.cfg(name)
    return default if value is None else value


def _compact_timeout():
    """Seconds one extraction request may take (``AI_COMPACT_TIMEOUT``)."""
    from ..settings import get_setting

    return float(get_setting("COMPACT_TIMEOUT"))


def _plain(value):
    """A plain (non-Attribute-backed) deep copy of a stored dict/list."""
    try:
        from evennia.utils.dbserialize import deserialize

        return deserialize(value)
    except Exception:
        import copy

        return copy.deepcopy(value)


def _render(msg):
    """
    A history message as a chat message for the extraction request (None to leave out), its
    text prefixed with its archive seq (``"[12] Bob: ..."``): the number a tool call cites as
    ``source``, from which the fact's speaker and audience are taken (``memory/provenance.py``;
    ``docs/design.md``, "Privacy by audience"). A message never archived has no number.
    """
    from ..core.prompts import render_for_chat

    chat = render_for_chat(msg)
    if chat is not None and isinstance(msg.get("seq"), int):
        chat = dict(chat, content=f"[{msg['seq']}] {chat['content']}")
    return chat


def extraction_history_budget(max_context_tokens, max_iterations) -> int:
    """
    Tokens of history the first extraction request may carry: the NPC's token budget, but no
    more than the model's context window (``AI_COMPACT_SUMMARIZER_CONTEXT``, the window the
    compaction requests are sized to) leaves once the system prompt and its headroom, and a
    reply plus the tool calls and results each further iteration adds, are set aside; with a
    100k budget and an 8k local model the request would otherwise overflow every time.

    Args:
        max_context_tokens (int): the NPC's token budget.
        max_iterations (int): extraction rounds (each adds a reply and its tool results).

    Returns:
        int: tokens (at least 1).
    """
    from ..llm.summariser import SUMMARY_HEADROOM_TOKENS, summarizer_context

    window = summarizer_context()
    protocol = max(
        toolspec.TEXT_PROTOCOL_INSTRUCTIONS, toolspec.STRUCTURED_PROTOCOL_INSTRUCTIONS, key=len
    )
    reserved = (
        count_tokens(DEFAULT_PRE_COMPACTION_PROMPT + NUMBERING_NOTE + protocol)
        + 2 * REPLY_MAX_TOKENS * max(1, int(max_iterations))
        + SUMMARY_HEADROOM_TOKENS
    )
    return max(1, min(int(max_context_tokens), window - reserved))


def _structured_setting():
    """``AI_LLM_STRUCTURED_OUTPUT`` in lower case (``"auto"`` when unset)."""
    from ..settings import get_setting

    return str(get_setting("LLM_STRUCTURED_OUTPUT") or "auto").strip().lower()


def importance_method() -> str:
    """``AI_IMPORTANCE_SCORING`` in lower case (``"model"`` when unset): who gives a journaled
    fact its importance (``docs/design.md``, "Journal and Mem0")."""
    from ..settings import get_setting

    return str(get_setting("IMPORTANCE_SCORING") or "model").strip().lower()


def structured_output_wanted(client) -> bool:
    """
    Whether extraction requests ask ``client``'s server for structured output
    (``AI_LLM_STRUCTURED_OUTPUT``; ``docs/design.md``, "Tool calls").

    Returns:
        bool: ``"off"``: False; ``"json_schema"``: True; ``"auto"`` (or anything else): True
        until the server refused ``response_format`` once (``client.structured_output_refused``).
    """
    setting = _structured_setting()
    if setting == "off":
        return False
    if setting == "json_schema":
        return True
    return not getattr(client, "structured_output_refused", False)


def extraction_system_message(persona, journal_entries=(), prompt=None, structured=False
                               ) -> ChatMessage:
    """
    The system message of the extraction requests.

    Args:
        persona (str): the NPC's persona.
        journal_entries (list[dict]): the journal's entries (the latest facts are listed).
        prompt (str, optional): replaces :data:`DEFAULT_PRE_COMPACTION_PROMPT`.
        structured (bool): teach the JSON answer of structured output instead of the text
            protocol.

    Returns:
        ChatMessage: ``{"role": "system", "content": str}``: persona, extraction instructions, how
        messages are numbered, how to answer, recent journal facts.
    """
    parts = [(persona or "").strip(), (prompt or DEFAULT_PRE_COMPACTION_PROMPT).strip()]
    parts.append(NUMBERING_NOTE)
    if structured:
        parts.append(toolspec.STRUCTURED_PROTOCOL_INSTRUCTIONS)
    else:
        parts.append(
            "If you cannot call tools directly, use this format instead.\n"
            + toolspec.TEXT_PROTOCOL_INSTRUCTIONS
        )
    recent = [e for e in journal_entries or () if e.get("source_type") == "fact"][
        -JOURNAL_HINT_ENTRIES:
    ]
    if recent:
        parts.append(
            "Already in your journal:\n" + "\n".join(f"- {e.get('content', '')}" for e in recent)
        )
    return {"role": "system", "content": "\n\n".join(part for part in parts if part)}


def build_extraction_messages(
    persona, history, journal_entries=(), prompt=None, budget_tokens=None, model=None,
    structured=False,
) -> list[ChatMessage]:
    """
    The chat messages of the first extraction request.

    Args:
        persona (str): the NPC's persona (``character.db.persona``).
        history (list[dict]): the runtime history (``core/messages.py`` shape).
        journal_entries (list[dict]): the journal's entries; the latest facts are listed so the
            model does not record them again.
        prompt (str, optional): replaces :data:`DEFAULT_PRE_COMPACTION_PROMPT`
            (``script.cfg("pre_compact_prompt")``).
        budget_tokens (int, optional): tokens the rendered history may take; beyond it the
            older non-marker messages are left out, keeping the newest ones contiguous
            (markers always stay). See :func:`extraction_history_budget`.
        model (str, optional): model name for token counting.
        structured (bool): the requests ask for structured output
            (:func:`extraction_system_message`).

    Returns:
        list[dict]: ``[{"role", "content"}, ...]``: a system message
        (:func:`extraction_system_message`), the
        history (tool bookkeeping left out, speakers inlined and archived messages numbered by
        seq as ``"[12] Bob: ..."``), and a final user nudge.
    """
    system = extraction_system_message(persona, journal_entries, prompt, structured)
    rendered = [(msg, _render(msg)) for msg in extraction_span(history, budget_tokens, model)]
    nudge = STRUCTURED_NUDGE if structured else NUDGE
    return [system] + [chat for _msg, chat in rendered] + [{"role": "user", "content": nudge}]


def extraction_span(history, budget_tokens=None, model=None, keep="newest") -> list:
    """
    The history messages the extraction request shows, oldest first: the span a fact is
    attributed within (``memory/provenance.py``; ``docs/design.md``, "Privacy by audience").

    Args:
        history (list[dict]): the runtime history (``core/messages.py`` shape).
        budget_tokens (int, optional): tokens the rendered messages may take; beyond it the
            older non-marker messages are left out, keeping the newest ones contiguous
            (markers always stay). See :func:`extraction_history_budget`.
        model (str, optional): model name for token counting.
        keep (str): ``"newest"`` (the default) or ``"oldest"``: which end a stretch over the
            budget keeps. Before an emergency compaction it is the oldest: those leave the
            context first, and the compaction stops where the reading stopped.

    Returns:
        list[dict]: the messages of ``history`` that are shown (tool bookkeeping is not), the
        same dicts.
    """
    rendered = []
    for msg in history:
        chat = _render(msg)
        if chat is not None:
            rendered.append((msg, chat))
    if budget_tokens:
        from ..core.messages import is_marker
        from ..core.tokens import count_message_tokens

        used = 0
        kept = []
        full = False
        for msg, chat in (rendered if keep == "oldest" else reversed(rendered)):
            tokens = count_message_tokens(chat, model)
            # a contiguous recent stretch: once one message does not fit, older ones are left
            # out too (no gaps that would read as a conversation that never happened)
            full = full or (used + tokens > budget_tokens and bool(kept))
            if full and not is_marker(msg):
                continue
            used += tokens
            kept.append((msg, chat))
        rendered = kept if keep == "oldest" else list(reversed(kept))
    return [msg for msg, _chat in rendered]


def _tools_rejected(failure):
    """True if the backend refused the request because of ``tools=`` (not an overflow)."""
    from ..llm.client import LLMContextOverflowError, LLMHTTPError

    err = failure.value
    return (
        isinstance(err, LLMHTTPError)
        and not isinstance(err, LLMContextOverflowError)
        and getattr(err, "status", None) in (400, 404, 422, 500, 501)
    )


class _Extraction:
    """State of one extraction run (the loop in :func:`run_pre_compaction_extraction`)."""

    def __init__(self, script, character, max_iterations, client, span, views=None,
                 build=None):
        self.script = script
        # structured output first where wanted; the system message for the other protocols
        # replaces the first request's when the server refuses it (set by each view's build)
        self.structured = structured_output_wanted(client)
        self.text_system = None
        # the span read, and the views of it the requests show one after another
        # (core.audience.listener_views); build(view, structured) -> (messages, text_system)
        self.read = list(span)
        self.views = list(views) if views is not None else [self.read]
        self.build = build
        self.character = character
        self._npcs = None  # _npc_names, read once
        self.max_iterations = max_iterations
        self.client = client
        self.model = _cfg(script, "llm_model")
        self.facts = []  # journal ids of facts added
        # of them, the facts of what the game ran (npc/extractor.journal_action_facts), written
        # before the model reads: they do not count as the model having recorded something
        self.game_facts = 0
        self.observations = 0
        self.iterations = 0
        self.modes = []
        self.native_tools = not bool(getattr(script.ndb, "extraction_text_only", False))
        from ..core.messages import tool_call_ids

        # backends (and the test double) reuse ids such as "call_0" on every reply; the history
        # needs them unique so every tool result pairs with exactly one call
        self.used_ids = {cid for msg in script.history for cid in tool_call_ids(msg)}
        self.policy = str(_cfg(script, "pre_compact_facts", "checked")).strip().lower()
        self.checks = {"replaced": 0, "rejected": 0}  # facts the one-line check changed
        # per fact call: stored in the model's words (npc/extractor.py judges the model by it)
        self.outcomes = []
        self.audiences = []  # the audience of each fact recorded by the current reply
        from .erase import erased_facts

        self.refused = erased_facts(character)  # staff erased them (aigossip/erase)
        self.show(self.views[0] if self.views else [])

    def show(self, view):
        """Make ``view`` (messages) what the next requests show and facts are attributed
        within (memory/provenance.py), by the seqs they cite."""
        self.span = list(view)
        self._source_text = None  # the view's text, for the grounding check
        self.lines = source_lines(self.span)  # the lines a fact must be said in
        self._said = None  # who said what in the view, for the quote check
        self.seqs = [msg["seq"] for msg in self.span if isinstance(msg.get("seq"), int)]

    # --- the model -----------------------------------------------------------------------

    def ask(self, messages):
        """
        Deferred[ChatResult]: structured output where wanted (again the other way if the server
        refuses ``response_format``); else native tools first, again without them if the
        backend refuses.
        """
        if not self.structured:
            return self.ask_with_tools(messages)
        from ..llm.client import refuses_response_format

        d = self.client.chat(
            messages, model=self.model, max_tokens=REPLY_MAX_TOKENS, temperature=TEMPERATURE,
            timeout=_compact_timeout(), purpose="extraction",
            response_format=toolspec.structured_response_format(
                # noop once something was recorded: offered before, a small model takes the
                # exit without reading (the loop still ends at max_iterations)
                seqs=self.seqs,
                allow_noop=bool(len(self.facts) > self.game_facts or self.observations),
                # a number the scorer will not read is not asked for
                importance=importance_method() == "model",
            ),
        )

        def _without_schema(failure):
            # "json_schema" means structured output or nothing: the refusal is the error
            if not refuses_response_format(failure.value) or _structured_setting() == "json_schema":
                return failure
            logger.info(
                "LLM backend refused response_format, using tool calls or the text protocol: %s",
                failure.getErrorMessage(),
            )
            self.client.structured_output_refused = True
            self.structured = False
            if self.text_system is not None and messages and messages[0].get("role") == "system":
                messages[0] = self.text_system
            if messages and messages[-1].get("content") == STRUCTURED_NUDGE:
                messages[-1] = {"role": "user", "content": NUDGE}
            return self.ask_with_tools(messages)

        return d.addErrback(_without_schema)

    def ask_with_tools(self, messages):
        """Deferred[ChatResult]: native tools first; again without them if the backend refuses."""
        # background work over the whole history: more time than a reply gets
        timeout = _compact_timeout()
        if not self.native_tools:
            return self.client.chat(
                messages, model=self.model, max_tokens=REPLY_MAX_TOKENS, temperature=TEMPERATURE,
                timeout=timeout, purpose="extraction",
            )
        d = self.client.chat(
            messages,
            model=self.model,
            max_tokens=REPLY_MAX_TOKENS,
            temperature=TEMPERATURE,
            tools=toolspec.TOOL_SCHEMAS,
            timeout=timeout,
            purpose="extraction",
        )

        def _retry_without_tools(failure):
            if not _tools_rejected(failure):
                return failure
            logger.info(
                "LLM backend refused tools=, using the text tool protocol: %s",
                failure.getErrorMessage(),
            )
            self.native_tools = False
            self.script.ndb.extraction_text_only = True
            return self.client.chat(
                messages, model=self.model, max_tokens=REPLY_MAX_TOKENS, temperature=TEMPERATURE,
                timeout=timeout, purpose="extraction",
            )

        return d.addErrback(_retry_without_tools)

    # --- the tools -----------------------------------------------------------------------

    def ungrounded(self, mode, name, args):
        """
        Why a structured call's fact is not in the conversation the request showed, or ``""``
        (:func:`ai_contrib.core.fidelity.fact_problem`): the grammar makes a small model write
        *something*, and an invented fact must not reach the journal. Native and text calls,
        which a model chose to make, skip this word-level check; every call then meets the
        one-line check (:meth:`ground`).
        """
        if mode != "structured" or name not in (
            toolspec.ADD_JOURNAL_ENTRY, toolspec.UPDATE_ENTITY_OBSERVATION
        ):
            return ""
        if self._source_text is None:
            self._source_text = source_text(self.span)
        text = args.get("content") or f"{args.get('entity', '')} {args.get('observation', '')}"
        if toolspec.repeats_example(text):
            return "that is the example, not a fact of this conversation"
        return fact_problem(text, self._source_text)

    def misquoted(self, text):
        """
        Why ``text`` gives as someone's words a line they did not say, or ``""``
        (:func:`ai_contrib.core.quotes.check_quotes` against the span): a fact with an invented
        quote is an invention, refused whatever ``pre_compact_facts`` says.
        """
        if self._said is None:
            self._said = speaker_lines(self.span)
        return check_quotes(text, self._said).reason

    def ground(self, mode, name, args):
        """
        A journal or observation call's arguments as they may be stored (``docs/design.md``,
        "Facts you can trust"): the word-level check (:meth:`ungrounded`), then the one-line
        check (:func:`ai_contrib.core.grounding.check_fact`) on every call. By
        ``pre_compact_facts``: ``"checked"`` keeps a fact that passes and stores the best line,
        verbatim and attributed, for one that fails; ``"verbatim"`` always stores the line;
        ``"reject"`` drops a fact that fails. A fact no line holds (names or numbers the
        conversation never mentions, words it never used, no line about its subject, a quote
        its speaker never said, :meth:`misquoted`) is dropped whatever the setting, and so are
        a fact only an NPC's line says (:meth:`players_verdict`) and a fact, or a line to
        quote, that only asks or greets (``docs/design.md``, "Facts players said").

        Returns:
            tuple: ``(args, problem)``: the arguments to store (a copy, with ``"_grounding"``:
            ``{"support": float, "grounding": "model" | "replaced" | "verbatim",
            "model_support": float, "model_text": str}`` for the entry, and for a fact stored
            as its line ``"_speaker"``: the line's speaker, None for a summary's line) and
            ``""``, or the arguments and why the call is not recorded.
        """
        if name not in (toolspec.ADD_JOURNAL_ENTRY, toolspec.UPDATE_ENTITY_OBSERVATION):
            return args, ""
        # the "_" keys are ours: a model that writes one sets nothing
        args = {key: value for key, value in args.items() if not str(key).startswith("_")}
        text = args.get("content") or f"{args.get('entity', '')}: {args.get('observation', '')}"
        problem = self.ungrounded(mode, name, args) or self.misquoted(text)
        verdict, confirming = self.players_verdict(text, check_fact(text, self.lines))
        # an observation reads as said of its entity ("Carol" "is a weaver")
        said = args.get("content") or f"{args.get('entity', '')} {args.get('observation', '')}"
        if not problem and states_nothing(said):
            problem = "it asks or greets, it says nothing to record"
        self.outcomes.append(not problem and verdict.passed)
        if confirming is not None:
            args = dict(args, source=list(args.get("source") or []) + [confirming])
        if not problem and verdict.passed and self.policy != "verbatim":
            return dict(args, _grounding={"support": verdict.support, "grounding": "model"}), ""
        # a fact with words the conversation never used is an invention, not a misquote
        if problem or verdict.line is None or self.policy == "reject":
            self.checks["rejected"] += 1
            return args, problem or verdict.reason
        line = self.lines[verdict.line]
        if not line.summary and states_nothing(line.text):
            self.checks["rejected"] += 1
            return args, "its line asks or greets, it says nothing to record"
        said = attributed_line(line)
        entity = line_entity(args.get("entity"), line)
        if name == toolspec.UPDATE_ENTITY_OBSERVATION and not entity:
            self.checks["rejected"] += 1
            return args, "its line names no one to file it under"
        grounding = {"support": 1.0, "model_support": verdict.support, "model_text": text,
                     "grounding": "verbatim" if self.policy == "verbatim" else "replaced"}
        self.checks["replaced"] += grounding["grounding"] == "replaced"
        # the fact is now that line: said by whoever said it, not by the players whose words it
        # repeats or the model cited (docs/design.md, "Facts you can trust")
        out = dict(args, _grounding=grounding, _speaker=line.speaker or None)
        seq = self.span[line.index].get("seq") if line.index >= 0 else None
        out["source"] = [seq] if isinstance(seq, int) else out.get("source")
        if name == toolspec.ADD_JOURNAL_ENTRY:
            out["content"] = said
        else:
            out["entity"], out["observation"] = entity, said
        return out, ""

    def players_verdict(self, text, verdict):
        """
        ``verdict`` (:func:`check_fact` of ``text`` on the span) checked again without the NPCs'
        lines (the NPC's own replies, other NPCs' lines, a summary's lines giving an NPC's
        words; ``docs/design.md``, "Facts players said"): an NPC's words are a fact only where
        a player's line says them too, and a fact that fails is replaced only by a line no NPC
        said.

        Returns:
            tuple: ``(verdict, seq)``: the :class:`Grounding` on the other lines (its line an
            index of ``self.lines``), refused when it passes only with the NPCs' lines; and the
            archive seq of its line where that line took the place of an NPC's as the best (the
            fact then cites it), else None.
        """
        npcs = self._npc_names()
        # a summary's line stands for its speaker: "Marta said: ..." is still Marta's words
        others = [i for i, line in enumerate(self.lines)
                  if (summary_speaker(line.text) not in npcs if line.summary
                      else not said_by_npc(self.span[line.index]))]
        if len(others) == len(self.lines):
            return verdict, None
        own = check_fact(text, [self.lines[i] for i in others])
        line = None if own.line is None else others[own.line]
        if verdict.passed and not own.passed:
            return Grounding(own.support, None,
                             "only an NPC said it, and no player's line says it"), None
        switched = own.passed and line is not None and line != verdict.line
        seq = self.span[self.lines[line].index].get("seq") if switched else None
        return Grounding(own.support, line, own.reason), seq if isinstance(seq, int) else None

    def _npc_names(self):
        """The NPCs' names, case-folded: this NPC's, every speaker of an NPC's line in the view
        (:func:`ai_contrib.core.fact_policy.said_by_npc`) and every AI NPC of the game
        (:func:`ai_contrib.npc.ai_npcs.ai_npc_names`, read once per extraction), so that a
        summary quoting an NPC who has left is still that NPC's words."""
        if self._npcs is None:
            names = {str(getattr(self.character, "key", "") or "").casefold()}
            names.update(str(msg.get("name") or "").casefold() for msg in self.span
                         if said_by_npc(msg))
            names.update(ai_npc_names(self.script.key))
            self._npcs = frozenset(names - {""})
        return self._npcs

    @defer.inlineCallbacks
    def execute(self, calls, mode=None):
        """
        Run one reply's calls in order (``mode``: how the reply made them, see
        :meth:`ungrounded`).

        Returns:
            Deferred[tuple]: ``(results: list[str], stop: str | None)``; one result text per
            call, and ``"scope_guard"`` / ``"noop"`` when the loop must end after this reply.
        """
        from ..memory.journal import ensure_journal

        known_names = list(_plain(self.character.db.entity_profiles) or {})
        # scoring may wait on the LLM: it is done before the journal is read, so that nothing
        # written to the Attribute meanwhile is overwritten by a stale copy
        scored = yield self.score(calls, known_names)
        journal = ensure_journal(_plain(self.character.db.journal) or None)
        profiles = _plain(self.character.db.entity_profiles) or {}
        changed = set()  # "journal", "profiles": the Attributes to write back
        results = []
        stop = None
        for i, call in enumerate(calls):
            name = call["name"]
            if name and name not in toolspec.TOOL_NAMES:
                results.append(
                    f"error: {name or 'this tool'} is not available while journaling; stopping."
                )
                stop = "scope_guard"
            elif call["error"]:
                results.append(f"error: {call['error']}")
            elif name == toolspec.NOOP:
                results.append("ok: nothing more to record.")
                stop = stop or "noop"
            else:
                results.append(self.store(mode, call, scored.get(i), journal, profiles,
                                          known_names, changed))
        # one Attribute write per reply: each write re-pickles the whole dict
        if "journal" in changed:
            self.character.db.journal = journal
        if "profiles" in changed:
            self.character.db.entity_profiles = profiles
        return results, stop

    @defer.inlineCallbacks
    def score(self, calls, known_names):
        """
        The importance of each journal call the scorer decides (``AI_IMPORTANCE_SCORING``:
        ``"model"`` keeps the call's own number where it gave one; the scorers score every
        fact).

        Returns:
            Deferred[dict]: ``{index of the call in calls: importance}``.
        """
        method = importance_method()
        scored = {}
        for i, call in enumerate(calls):
            if call["name"] == toolspec.ADD_JOURNAL_ENTRY and not call["error"]:
                given = call["arguments"].get("importance")
                if method != "model" or given is None:
                    scored[i] = yield score_importance(
                        call["arguments"]["content"], method=method, client=self.client,
                        known_names=known_names,
                    )
        return scored

    def store(self, mode, call, importance, journal, profiles, known_names, changed):
        """
        Journal one checked ``add_journal_entry`` or ``update_entity_observation`` call
        (:meth:`ground`); ``importance`` is the scorer's (None: the call's own).

        Returns:
            str: the call's result text.
        """
        name = call["name"]
        args, problem = self.ground(mode, name, call["arguments"])
        if problem:
            return f"error: not recorded: {problem}."
        if name == toolspec.ADD_JOURNAL_ENTRY:
            if importance is None:
                importance = args.get("importance")
            return self.journal_fact(journal, args, importance, changed)
        return self.note_observation(journal, profiles, args, known_names, changed)

    def erased(self, text):
        """True when staff erased ``text`` from this NPC (``aigossip/erase``,
        :func:`ai_contrib.npc.erase.mark_erased`): lines still in context say it, but it is
        not journaled again, nor gossiped from the journal the next night."""
        return says_one_of(text, self.refused)

    def journal_fact(self, journal, args, importance, changed):
        """
        Add an ``add_journal_entry`` call's fact to ``journal`` (a plain copy), its speaker
        taken from the messages it cites and its audience from the view the request showed
        (:func:`provenance`), the speaker of a fact
        stored as its line (:meth:`ground`) that line's; adds ``"journal"`` to the set
        ``changed`` when it wrote.

        Returns:
            str: the call's result text.
        """
        from ..memory.journal import add_entry

        content = args["content"]
        if self.erased(content):
            return "error: not recorded: staff erased this fact from your memory."
        # "_exact": the same words only (a fact of the game's, where "to Wren" and "to Bob"
        # are different facts that the near-duplicate check would take for one)
        if (_exactly_journaled(journal, content) if args.get("_exact")
                else _already_journaled(journal, content)):
            return "ok: already in your journal."
        source = provenance(content, self.span, args.get("source"))
        self.audiences.append({"audience": source["audience"]})
        entry = add_entry(
            journal,
            content,
            capped_importance(importance, source_messages(content, self.span,
                                                          args.get("source"))),
            "fact",
            tags=without_visibility_tags(args.get("tags")),
            speaker=args["_speaker"] if "_speaker" in args else source["speaker"],
            audience=source["audience"],
            visibility=source["visibility"],
            source_ids=source["source_ids"],
            said_in_public=said_in_public(content, self.span, args.get("source")) or None,
            **args.get("_grounding", {}),
        )
        changed.add("journal")
        self.facts.append(entry["id"])
        how = (" in the words of the line it comes from"
               if entry.get("grounding") in ("replaced", "verbatim") else "")
        return (f"ok: recorded in your journal as {entry['id']} (importance "
                f"{entry['importance']}){how}.")

    def note_observation(self, journal, profiles, args, known_names, changed):
        """
        Add an ``update_entity_observation`` call's observation to ``profiles``, and to
        ``journal`` as an observation entry unless it holds it already (both plain copies);
        adds ``"profiles"`` and ``"journal"`` to the set ``changed`` for what it wrote.

        Returns:
            str: the call's result text.
        """
        from ..memory.journal import add_entry
        from ..memory.mem0_config import memory_setting

        entity, observation = args["entity"], args["observation"]
        if self.erased(f"{entity}: {observation}") or self.erased(observation):
            return "error: not recorded: staff erased this fact from your memory."
        added = update_entity_observation(
            profiles,
            entity,
            observation,
            max_observations=memory_setting("MEMORY_ENTITY_MAX_OBSERVATIONS"),
        )
        if not added:
            return f"ok: already noted about {entity}."
        changed.add("profiles")
        self.observations += 1
        shown = find_entity(profiles, entity) or entity
        text = f"{shown}: {observation}"
        if not _already_journaled(journal, text):
            source = provenance(text, self.span, args.get("source"))
            self.audiences.append({"audience": source["audience"]})
            add_entry(
                journal,
                text,
                capped_importance(heuristic_importance(text, known_names),
                                  source_messages(text, self.span, args.get("source"))),
                "observation",
                tags=("observation",),
                entity=shown,
                audience=source["audience"],
                visibility=source["visibility"],
                source_ids=source["source_ids"],
                **args.get("_grounding", {}),
            )
            changed.add("journal")
        return f"ok: noted about {shown}."

    def record(self, calls, results):
        """Append the assistant tool-call message and the tool results to the history."""
        npc_name = getattr(self.character, "key", None)
        calls = [dict(call) for call in calls]
        for call in calls:
            if call["id"] in self.used_ids:
                call["id"] = toolspec.new_call_id()
            self.used_ids.add(call["id"])
        # the calls repeat the facts: they may be heard only by those who may hear the facts
        # (a summary that later replaces them inherits this audience)
        audience = common_audience(self.audiences)
        self.audiences = []
        self.script.add_message(
            "assistant",
            "",
            name=npc_name,
            tool_calls=toolspec.to_openai_tool_calls(calls),
            metadata={"type": TAG, "audience": audience},
        )
        for call, result in zip(calls, results):
            self.script.add_message(
                "tool",
                result,
                tool_call_id=call["id"],
                metadata={"type": TAG, "tool": call["name"], "audience": audience},
            )

    # --- the loop ------------------------------------------------------------------------

    @defer.inlineCallbacks
    def run(self):
        """
        Read each view in turn (widest audience first), leaving one model turn for each view
        still to come; a scope guard ends the whole run.

        Returns:
            Deferred[str]: how the last view's loop stopped.
        """
        stopped_by = "max_iterations"
        for i, view in enumerate(self.views):
            self.show(view)
            messages, self.text_system = self.build(view, self.structured)
            stopped_by = yield self.read_view(messages,
                                              self.max_iterations - (len(self.views) - i - 1))
            if stopped_by == "scope_guard":
                break
        return stopped_by

    @defer.inlineCallbacks
    def read_view(self, messages, until):
        """The tool-call loop over one view, until ``self.iterations`` reaches ``until``."""
        stopped_by = "max_iterations"
        while self.iterations < until:
            self.iterations += 1
            result = yield self.ask(messages)
            calls, mode = toolspec.parse_tool_calls(
                result.tool_calls, result.content, structured=self.structured
            )
            if not calls:
                stopped_by = "no_tool_call"
                break
            self.modes.append(mode)
            results, stop = yield self.execute(calls, mode)
            self.record(calls, results)
            messages = messages + _transcript(calls, results, mode, result.content)
            if stop:
                stopped_by = stop
                break
        return stopped_by


def _transcript(calls, results, mode, content):
    """This iteration as the next request sees it: native tool messages, the structured JSON
    answer, or the text-protocol lines; then the results as plain text."""
    if mode == "native":
        out = [
            {
                "role": "assistant",
                # the model's own words go back to it as data (docs/design.md, "Player text
                # is data"); the calls' arguments were normalised when they were parsed
                "content": normalise_player_text(content or "", MODEL_TEXT_MAX_CHARS,
                                                 multiline=True),
                "tool_calls": toolspec.to_openai_tool_calls(calls),
            }
        ]
        out.extend(
            {"role": "tool", "tool_call_id": c["id"], "content": r} for c, r in zip(calls, results)
        )
        return out
    lines = "\n".join(f"{c['name']}: {r}" for c, r in zip(calls, results))
    nudge = NUDGE
    if mode == "structured":
        nudge = STRUCTURED_NUDGE + " Or call noop if nothing is left."
        said = json.dumps(
            {"calls": [{"name": c["name"], "arguments": c["arguments"]} for c in calls]},
            ensure_ascii=False,
        )
    else:
        said = "\n".join(toolspec.format_text_call(c) for c in calls)
    return [
        {"role": "assistant", "content": said},
        {"role": "user", "content": f"TOOL RESULTS:\n{lines}\n\n{nudge}"},
    ]


def journal_hint(entries, view) -> list:
    """
    The journal entries an extraction request over ``view`` may list as already journaled
    (:func:`extraction_system_message`): those every listener of the view heard
    (:func:`ai_contrib.core.audience.heard_by` its :func:`~ai_contrib.core.audience.
    common_audience`), public ones only for a view with no listener. A fact written from
    the view takes the view's audience (``docs/design.md``, "Privacy by audience"): a private
    fact listed beside it could be merged into it and leave with it. A player's words from
    before audiences were recorded (no audience, ``visibility`` ``"private"``) are never
    listed.

    Args:
        entries (list[dict]): journal entries (``memory/journal.py``).
        view (list[dict]): the messages the request shows.

    Returns:
        list[dict]: the entries kept, in their order.
    """
    group = common_audience(view)
    shown = []
    for entry in entries or ():
        if entry.get("audience") is None:
            if entry.get("visibility") != "private":
                shown.append(entry)
        elif group is not None and heard_by(entry, group):
            shown.append(entry)
    return shown


def _already_journaled(journal, content):
    """True when the journal holds ``content`` already, in these or other words
    (:func:`ai_contrib.core.fidelity.same_fact`): a small model journals the same news three
    times over as many compactions."""
    return says_one_of(content, [e.get("content", "") for e in journal.get("entries", [])])


def _exactly_journaled(journal, content):
    """True when an entry of the journal holds ``content`` word for word (as stored:
    normalised, :func:`ai_contrib.memory.journal.add_entry`)."""
    stored = normalise_player_text(content or "", MODEL_TEXT_MAX_CHARS, multiline=True)
    return any(e.get("content") == stored for e in journal.get("entries", []))


def _set_signal(script, value):
    signals = dict(_plain(script.db.context_signals) or {})
    signals["pre_compaction"] = value
    script.db.context_signals = signals


def run_pre_compaction_extraction(script, character, max_iterations=None, client=None,
                                  span_ids=None) -> Deferred:
    """
    Let the NPC journal important facts before compaction (``docs/design.md``,
    "Pre-compaction fact extraction").

    Args:
        script: the NPC's ``AssistantScript`` (uses ``history``, ``add_message(role, content,
            name=None, **fields)``, ``cfg(name)``, ``db.context_signals``, ``ndb``).
        character: the NPC (``db.journal``, ``db.entity_profiles``, ``db.persona``, ``key``).
        max_iterations (int, optional): model turns at most; default
            ``script.cfg("pre_compact_max_iterations")`` (5; the emergency path passes 3).
        client (LLMClient, optional): default ``ai_contrib.llm.client.get_client()``.
        span_ids (set[str], optional): read only the history messages with these ids (the
            span the compaction after it replaces,
            :func:`ai_contrib.npc.compaction_runner.planned_span`), the oldest first when they are
            more
            than a request holds; default the whole history, the newest first.

    Returns:
        Deferred[ExtractionResult]: never errbacks
        (:class:`~ai_contrib.core.outcome.ExtractionResult`).

        - run: ``success``, with ``read_ids`` (ids of the history messages the requests
          showed), ``facts_recorded``, ``observations_recorded``, ``iterations``,
          ``stopped_by`` (``"noop"`` | ``"no_tool_call"`` | ``"scope_guard"`` |
          ``"max_iterations"``; ``"rule"`` when no model was asked, ``"hurried"`` when the
          model's run was cancelled near the budget, :mod:`ai_contrib.npc.hurry`),
          ``entry_ids`` (journal ids), ``modes`` (``"structured"`` | ``"native"`` |
          ``"text"``, ..., and ``"rule"`` last where facts were read by rule,
          :mod:`ai_contrib.npc.extractor`),
          ``facts_replaced`` and ``facts_rejected`` (calls whose fact failed the one-line
          check, or only an NPC said, and was stored as its source line, or not stored;
          ``docs/design.md``, "Facts you can trust", "Facts players said");
        - skipped, with a ``reason`` (disabled, history under 5 messages, or another
          extraction of this NPC still running);
        - failed, with an ``error``, ``facts_recorded``, ``iterations`` and ``stopped_by:
          "error"`` (facts recorded before the failure stay in the journal).
    """
    try:
        if not _cfg(script, "pre_compact_extraction_enabled", True):
            return _skipped("disabled")
        history = list(script.history)
        if span_ids is not None:
            history = [m for m in history if m.get("id") in span_ids]
        if len(history) < MIN_HISTORY:
            return _skipped(f"history shorter than {MIN_HISTORY} messages")
        if script.ndb.extracting:
            return _skipped("already running")
        run = _start(script, character, history, max_iterations, client,
                     keep="newest" if span_ids is None else "oldest")
    except Exception as err:
        logger.exception("pre-compaction extraction could not start")
        return defer.succeed(
            ExtractionResult(FAILED, error=f"{type(err).__name__}: {err}", stopped_by="error")
        )

    from .extractor import run_extraction

    # by the model, by rule or both (AI_PRE_COMPACT_EXTRACTOR)
    d = defer.maybeDeferred(run_extraction, run)
    return d.addCallbacks(_finished, _failed, callbackArgs=(run,), errbackArgs=(run,)).addBoth(
        _clear, script
    )


def journal_evicted_actions(script, character, messages) -> int:
    """
    Journal what the NPC did among ``messages`` (message dicts with ``id``, ``role``,
    ``metadata``...), which leave its context with no compaction's extraction before them: an
    eviction (``mask`` at the emergency threshold, the last resort of an over-budget history,
    the bound kept while memory work is under way; :mod:`ai_contrib.npc.eviction`). One fact
    for each action the game ran (:func:`ai_contrib.npc.extractor.journal_action_facts`, the
    same facts an extraction journals first), with the action's audience; no LLM call, no
    other fact: what players said stays in the archive for recall, what the NPC gave to whom
    reaches the journal and Mem0 (``docs/design.md``, "Actions").

    Like the extraction, it runs only where ``pre_compact_extraction_enabled`` (per NPC, on by
    default).

    Returns:
        int: facts written (0 when none of ``messages`` is an action's result, or extraction is
        off). Never raises: a failure is logged and the eviction goes on.
    """
    from .extractor import has_action_facts, journal_action_facts

    try:
        if (not _cfg(script, "pre_compact_extraction_enabled", True)
                or not has_action_facts(messages, character)):
            return 0
        return journal_action_facts(_Extraction(script, character, 0, None, messages))
    except Exception as err:  # noqa: BLE001 - the eviction has happened; the archive keeps all
        logger.exception(f"AI {character}: the facts of evicted actions were not journaled: "
                         f"{err}")
        return 0


def _skipped(reason):
    """The result of an extraction that did not start (:func:`run_pre_compaction_extraction`)."""
    return defer.succeed(ExtractionResult.skip(reason))


def _start(script, character, history, max_iterations, client, keep):
    """
    Prepare one extraction run over ``history`` (the messages it may read) and mark the NPC as
    extracting (``ndb.extracting``, ``context_signals["pre_compaction"]``).

    Args:
        max_iterations (int | None), client (LLMClient | None): as
            :func:`run_pre_compaction_extraction` takes them (None: the defaults).
        keep (str): which end of ``history`` a span over the budget keeps
            (:func:`extraction_span`).

    Returns:
        _Extraction: the run, its views chosen (:func:`ai_contrib.core.audience.listener_views`).
    """
    if max_iterations is None:
        max_iterations = _cfg(script, "pre_compact_max_iterations", DEFAULT_MAX_ITERATIONS)
    max_iterations = max(1, int(max_iterations))
    if client is None:
        from ..llm.client import get_client

        client = get_client()
    # the span is chosen once: what the model reads is what its facts are attributed within
    span = extraction_span(
        history,
        budget_tokens=extraction_history_budget(
            script.budget() if hasattr(script, "budget")
            else _cfg(script, "max_context_tokens"),
            max_iterations,
        ),
        model=_cfg(script, "llm_model"),
        keep=keep,
    )
    persona = getattr(character.db, "persona", None)
    prompt = _cfg(script, "pre_compact_prompt")

    def build(view, structured):
        # the journal as it is now: what an earlier view recorded is not asked for again;
        # only what the view's listeners may hear, as the request shows it
        entries = journal_hint(
            (_plain(character.db.journal) or {}).get("entries", []), view)
        messages = build_extraction_messages(
            persona, view, entries, prompt=prompt, structured=structured
        )
        return messages, (extraction_system_message(persona, entries, prompt)
                          if structured else None)

    # one view per listener group, each fact taking the audience of all its view shows
    # (docs/design.md, "Privacy by audience"); at most one view per model turn
    views = listener_views(span, limit=max_iterations)
    run = _Extraction(script, character, max_iterations, client, span, views, build)
    script.ndb.extracting = True
    _set_signal(script, True)
    return run


def _finished(stopped_by, run):
    """The result of a run that ended (:func:`run_pre_compaction_extraction`)."""
    return ExtractionResult(
        SUCCESS,
        read_ids=[m.get("id") for m in run.read],
        facts_recorded=len(run.facts),
        observations_recorded=run.observations,
        iterations=run.iterations,
        stopped_by=stopped_by,
        entry_ids=list(run.facts),
        modes=list(run.modes),
        facts_replaced=run.checks["replaced"],
        facts_rejected=run.checks["rejected"],
    )


def _failed(failure, run):
    """The result of a run that failed; what it journaled before stays."""
    logger.warning("pre-compaction extraction failed: %s", failure.getErrorMessage())
    return ExtractionResult(
        FAILED,
        error=f"{failure.type.__name__}: {failure.getErrorMessage()}",
        facts_recorded=len(run.facts),
        observations_recorded=run.observations,
        iterations=run.iterations,
        stopped_by="error",
        entry_ids=list(run.facts),
        facts_replaced=run.checks["replaced"],
        facts_rejected=run.checks["rejected"],
    )


def _clear(result, script):
    """Lower the NPC's extracting marks, whatever the run's result (passed on)."""
    try:
        script.ndb.extracting = False
        _set_signal(script, False)
    except Exception as err:  # the result matters more than the flag
        logger.warning("could not clear the pre_compaction signal: %s", err)
    return result
