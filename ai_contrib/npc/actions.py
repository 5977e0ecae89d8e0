"""
An NPC's actions: the game's commands it runs as itself, in a bounded loop before it speaks
(``docs/design.md``, "Actions").

:func:`ask_acting` stands where a reply asks the model once (:func:`ai_contrib.npc.replies._ask`):
when the NPC has actions, the model may call them (OpenAI tool calls, or an ``ACTION:`` line where
the server takes no tools), is told each result, and then speaks; at most
``action_max_per_turn`` actions a turn, and none offered (no tools sent) for
``action_cooldown`` seconds after a turn that acted. :func:`run_action` runs one: the call checked as data
(:mod:`ai_contrib.core.actions`), looked up in the NPC's actions (``AI_ACTIONS`` or its own
list, of the commands of ``AI_ACTION_CMDSET``), offered to the game's hook
(``character.at_ai_action``), checked against the command's ``cmd`` lock, and run through
Evennia's command handler with the NPC as caller; the recall action (a search of the NPC's own
memories for the turn's listeners, :func:`_recall`) is run here instead. Whatever goes wrong is the action's result,
never the reply's failure. The calls and results are stored in the history as tool-call pairs,
each with the audience of who was shown it.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from evennia.commands.cmdhandler import cmdhandler
from evennia.objects.objects import DefaultCharacter
from evennia.utils import logger
from evennia.utils.ansi import strip_ansi
from evennia.utils.utils import class_from_module
from twisted.internet import defer

from ..core import actions as core_actions
from ..core.actions import DONE, FAILED, INVALID, REFUSED, UNKNOWN
from ..core.lines import speaker_of
from ..core.world_notes import Section
from ..llm.errors import LLMHTTPError
from ..settings import get_setting
from .scene import note_actions

if TYPE_CHECKING:
    from evennia.commands.cmdset import CmdSet

    from ..core.messages import Message

#: text of Evennia's message for a command that raised (``cmdhandler._ERROR_UNTRAPPED``)
_UNTRAPPED = "An untrapped error occurred"
#: base URLs of servers that refused ``tools=`` (asked with the text protocol from then on)
_TOOLS_REFUSED = set()
_CMDSETS = {}
#: seconds a command may take before the action counts as failed
ACTION_SECONDS = 10
_ABSENT = object()


def action_cmdset() -> CmdSet:
    """The cmdset ``AI_ACTION_CMDSET`` names, made once per path. Raises ImportError (or
    AttributeError) when the path names no class."""
    path = get_setting("ACTION_CMDSET")
    if path not in _CMDSETS:
        _CMDSETS[path] = class_from_module(path)()
    return _CMDSETS[path]


def _describe(cmd):
    """A command's description for the model: its help text's first line."""
    lines = [line.strip() for line in (cmd.__doc__ or "").splitlines() if line.strip()]
    return lines[0] if lines else cmd.key


def offered_actions(script) -> list[tuple]:
    """
    The actions the NPC of ``script`` may take now: ``[(name, command)]``, the names of its
    ``actions`` option (``AI_ACTIONS`` or its own list) that name a command (key or alias) of
    :func:`action_cmdset`, in the option's order. A name the cmdset lacks is left out; a
    cmdset that cannot be loaded is logged and offers nothing.
    """
    names = script.cfg("actions") or []
    if not names:
        return []
    try:
        commands = action_cmdset().commands
    except Exception as err:  # noqa: BLE001 - a bad path is the game's error, not the reply's
        logger.log_err(f"AI {script.obj}: AI_ACTION_CMDSET cannot be loaded: {err}")
        return []
    found = []
    for name in names:
        name = str(name).strip().lower()
        for cmd in commands:
            if name in command_names(cmd):
                found.append((name, cmd))
                break
    return found


def command_names(cmd) -> list[str]:
    """The names an action may call ``cmd`` by: its key and aliases, lower case, without
    Evennia's ``@`` staff prefix (an action's name never has one,
    :func:`ai_contrib.core.actions.check_name`)."""
    return [name.lower().lstrip("@") for name in [cmd.key, *cmd.aliases]]


def use_text_protocol() -> bool:
    """Whether the model asks for actions by an ``ACTION:`` line (``AI_ACTION_PROTOCOL``):
    ``"text"``, or ``"auto"`` with the embedded model or a server that refused tools."""
    protocol = get_setting("ACTION_PROTOCOL")
    if protocol != "auto":
        return protocol == "text"
    base = get_setting("LLM_BASE_URL")
    return not base or base in _TOOLS_REFUSED


def _tools_refused(err):
    """Whether an HTTP error is a server refusing ``tools=``."""
    return (isinstance(err, LLMHTTPError) and err.status in (400, 422, 501)
            and "tool" in str(err.body or "").lower())


#: ``{id(obj): (obj, its msg before any tap, [taps listening])}``: each object's ``msg`` is
#: wrapped once however many taps overlap (two NPCs acting in one room), and put back as it was
#: when the last of them closes, in whatever order they close
_TAPPED = {}


class _Tap:
    """
    Who the game told something while an action ran: each character in the NPC's room but the
    NPC has its ``msg`` wrapped for the run (restored by :meth:`close`; overlapping taps share
    one wrapper per object, :data:`_TAPPED`), and the NPC's own messages are collected through
    ``ndb.action_output`` (read by ``AssistantCharacter.msg``; the collector before is put back
    on close).
    """

    def __init__(self, character):
        self.character, self.told, self.output, self.tapped = character, {}, [], []
        self.before_output = character.ndb.action_output
        character.ndb.action_output = self.output
        for obj in list(getattr(character.location, "contents", ())):
            if obj != character and isinstance(obj, DefaultCharacter):
                self._listen(obj)

    def _listen(self, obj):
        entry = _TAPPED.get(id(obj))
        if entry is None:
            # what the instance held before (usually nothing: the class's method) comes back
            entry = _TAPPED[id(obj)] = (obj, obj.__dict__.get("msg", _ABSENT), [])
            original, taps = obj.msg, entry[2]

            def msg(*args, **kwargs):
                for tap in list(taps):
                    tap.told[obj.dbref] = obj.key
                return original(*args, **kwargs)

            obj.msg = msg
        entry[2].append(self)
        self.tapped.append(obj)

    def close(self):
        """Stop listening; an object's ``msg`` is restored once no tap listens to it."""
        if self.character.ndb.action_output is self.output:
            self.character.ndb.action_output = self.before_output
        for obj in self.tapped:
            _, before, taps = _TAPPED[id(obj)]
            taps.remove(self)
            if taps:
                continue
            del _TAPPED[id(obj)]
            if before is _ABSENT:
                obj.__dict__.pop("msg", None)
            else:
                obj.__dict__["msg"] = before
        self.tapped = []

    def text(self):
        """What the NPC was told, one line, markup stripped."""
        parts = []
        for item in self.output:
            if isinstance(item, (list, tuple)):
                item = item[0] if item else ""
            parts.append(strip_ansi(str(item or "")))
        return " ".join(" ".join(parts).split())


def _ask_hook(character, call, context):
    """
    The game's verdict on ``call`` (``character.at_ai_action``): ``(call, None)`` to run
    ``call`` (the game may have rewritten it) or ``(call, reason)`` to refuse it.
    """
    hook = getattr(character, "at_ai_action", None)
    if hook is None:
        return call, None
    verdict = hook(call.name, call.args, context)
    if verdict is None or verdict is True:
        return call, None
    if isinstance(verdict, str) or verdict is False:
        return call, (verdict or "the game does not allow it")
    name, args = verdict
    return core_actions.make_call(name, args, call.call_id), None


@defer.inlineCallbacks
def run_action(script, character, call, context) -> defer.Deferred:
    """
    Run one action the model asked for, as the NPC.

    Args:
        call (ActionCall): :mod:`ai_contrib.core.actions`.
        context (dict): ``{"listeners": {dbref: name}, "speakers": [dbref], "lines": [str],
            "done": [result dict]}`` (the turn, given to the game's hook as is).

    Returns:
        Deferred[dict]: ``{"call": ActionCall (as run), "status": one of the statuses of
        :mod:`ai_contrib.core.actions`, "text": str (what the model is told,
        :func:`ai_contrib.core.actions.result_text`), "audience": [dbref], "recall": bool (a
        recall action that ran: its text is the NPC's memories, not the game's)}``. Never fails.
    """
    listeners = dict(context.get("listeners") or {})
    try:
        status, call, output, told = yield _run_checked(script, character, call, context)
    except Exception as err:  # noqa: BLE001 - a game's bug is a failed action, not a crash
        logger.log_trace(f"AI {character}: action {call.name} failed: {err}")
        status, output, told = FAILED, "it went wrong", {}
    audience = sorted(told) if told else sorted(listeners)
    cap = (int(script.cfg("action_recall_tokens"))
           if status == DONE and is_recall(dict(offered_actions(script)).get(call.name)) else None)
    return {"call": call, "status": status,
            "text": core_actions.result_text(call, status, output, max_tokens=cap),
            "audience": audience, "recall": cap is not None}


def is_recall(cmd) -> bool:
    """Whether ``cmd`` is the recall action (``action_commands.CmdRecall`` or a game's command
    marked ``ai_recall = True``), which the runner performs itself (:func:`_recall`)."""
    return bool(getattr(cmd, "ai_recall", False))


@defer.inlineCallbacks
def _recall(script, character, call, context):
    """
    The recall action: the NPC's own memories of ``call.args``, through the reply's retrieval
    (:func:`ai_contrib.npc.recall.recall_for_action`), only what every listener of the turn
    could have heard; ``(status, call, output, told)`` as :func:`_run_checked`'s, told nobody.
    """
    from .recall import recall_for_action

    if not call.args:
        return INVALID, call, "say what to recall: the words to look for", {}
    found = yield recall_for_action(script, character, call.args,
                                    dict(context.get("listeners") or {}),
                                    int(script.cfg("action_recall_tokens")))
    return DONE, call, found or "you remember nothing about that", {}


@defer.inlineCallbacks
def _run_checked(script, character, call, context):
    """:func:`run_action`'s checks and the run: ``(status, call, output, told {dbref: name})``."""
    if call.error:
        return INVALID, call, call.error, {}
    offered = dict(offered_actions(script))
    if call.name not in offered:
        names = ", ".join(offered) or "none"
        return UNKNOWN, call, f"there is no such action (yours: {names})", {}
    # a guard: the loop offers no actions during the cooldown (cooldown_left)
    wait = cooldown_left(script)
    if wait > 0:
        return REFUSED, call, f"you must wait {wait:.0f} s before acting again", {}
    call, reason = _ask_hook(character, call, context)
    if reason is None and (call.error or call.name not in offered):
        reason = call.error or f"{call.name} is not one of your actions"
    if reason is not None:
        return REFUSED, call, reason, {}
    cmd = offered[call.name]
    if not cmd.access(character, "cmd"):
        return REFUSED, call, f"you may not {call.name}", {}
    if is_recall(cmd):
        # the search needs the turn's listeners, which no command is given
        outcome = yield _recall(script, character, call, context)
        return outcome
    output, told = yield _execute(character, cmd, call)
    if _UNTRAPPED in output:
        logger.log_err(f"AI {character}: the game's command {call.name} raised (see the trace)")
        return FAILED, call, "it went wrong", told
    return DONE, call, output, told


@defer.inlineCallbacks
def _execute(character, cmd, call):
    """Run ``cmd`` with ``call.args`` through Evennia's command handler as ``character``:
    ``(its output to the NPC, {dbref: name} of the others it told)``; a command still running
    after :data:`ACTION_SECONDS` fails with ``twisted.internet.defer.TimeoutError``."""
    from twisted.internet import reactor

    command = cmd.__class__()
    command.obj = character
    tap = _Tap(character)
    try:
        ran = defer.maybeDeferred(cmdhandler, character, f" {call.args}" if call.args else "",
                                  callertype="object", cmdobj=command, cmdobj_key=call.name)
        # a command waiting for input (a menu, a question) would hold the reply for ever
        yield ran.addTimeout(ACTION_SECONDS, reactor)
    finally:
        tap.close()
    return tap.text(), tap.told


def _turn_context(lines, listeners):
    """The hook's context of a turn (see :func:`run_action`)."""
    return {"listeners": dict(listeners),
            "speakers": [speaker_of(m) for m in lines],
            "lines": [m.get("content") or "" for m in lines], "done": []}


def actions_section(script, count) -> Section | None:
    """
    The system message's section on the NPC's actions (:func:`ai_contrib.core.actions.
    actions_section`), as a standing section of :func:`ai_contrib.npc.world.standing_sections`:
    ``{"part": "actions", "key": "actions", "text": str, "tokens": int (by ``count``),
    "detail": {"actions": [name]}}``, or None when the NPC has none. In the system message, it
    is in the cache warm-up's prompt too (``docs/design.md``, "Actions").
    """
    offered = offered_actions(script)
    if not offered:
        return None
    text = core_actions.actions_section([(name, _describe(cmd)) for name, cmd in offered],
                                        use_text_protocol())
    return {"part": "actions", "key": "actions", "text": text, "tokens": count(text),
            "detail": {"actions": [name for name, _ in offered]}}


def _calls_of(result, text_protocol, count):
    """The :class:`ActionCall` list a model's answer asks for (empty: it speaks)."""
    if text_protocol:
        call = core_actions.parse_action_line(result.content, count)
        return [call] if call else []
    return [core_actions.from_tool_call(c, count + i) for i, c in enumerate(result.tool_calls)]


def _exchange(call, outcome, text_protocol, last):
    """The in-turn messages of one action: the model's ask and what it is told."""
    told = outcome["text"] + (" No more actions this turn: speak now." if last else "")
    if text_protocol:
        return [{"role": "assistant",
                 "content": f"{core_actions.ACTION_PREFIX} {call.name} {call.args}".strip()},
                {"role": "user", "content": f"(RESULT: {told})"}]
    return [{"role": "assistant", "content": "", "tool_calls": [_wire_call(call)]},
            {"role": "tool", "tool_call_id": call.call_id, "content": told}]


def _wire_call(call):
    return {"id": call.call_id, "type": "function",
            "function": {"name": call.name, "arguments": json.dumps({"args": call.args})}}


def store_outcomes(script, outcomes, turn_ids) -> list[Message]:
    """
    Store each action of a turn in the history as a tool-call pair: an assistant message with
    the call and a tool message with its result, both ``metadata["type"] == "action"`` with the
    action's ``audience`` and ``reply_to`` (the turn's line ids); the result's also has
    ``action``, ``args`` and ``outcome`` (its status), and ``recall: True`` for a recall
    action's (its text is the NPC's memories: no fact of what the game did). A message the
    archive refuses is logged and not stored (the action has happened; a call left without its
    result is shown in no prompt).

    Returns:
        list[dict]: the stored messages.
    """
    stored = []
    for outcome in outcomes:
        call = outcome["call"]
        meta = {"type": "action", "audience": outcome["audience"], "reply_to": list(turn_ids)}
        try:
            stored.append(script.add_message("assistant", "", tool_calls=[_wire_call(call)],
                                             metadata=dict(meta)))
            stored.append(script.add_message(
                "tool", outcome["text"], name=call.name, tool_call_id=call.call_id,
                metadata=dict(meta, action=call.name, args=call.args,
                              outcome=outcome["status"],
                              **({"recall": True} if outcome.get("recall") else {}))))
        except Exception as err:  # noqa: BLE001 - the world changed; the record is a by-product
            logger.log_err(f"AI {script.obj}: action {call.name} not stored: {err}")
    return stored


#: tokens reserved for one action's exchange in a turn (the call and a cropped result)
EXCHANGE_TOKENS = 120


def actions_reserve(script, count) -> int:
    """
    Tokens an NPC's actions may take in a reply prompt, reserved from its history budget
    (:func:`ai_contrib.npc.world.world_reserve`): the section offering them, as much again for
    the tool schemas where tools are sent, and :data:`EXCHANGE_TOKENS` for each action a turn
    may take, plus ``action_recall_tokens`` each where the recall action is offered (any of
    them may be a recall). 0 without actions; counted once per change of the list, the
    protocol and the two options.
    """
    names = tuple(script.cfg("actions") or ())
    if not names:
        return 0
    text = use_text_protocol()
    key = (names, text, int(script.cfg("action_max_per_turn")),
           int(script.cfg("action_recall_tokens")))
    cached = script.ndb.action_tokens
    if cached is None or cached[0] != key:
        section = actions_section(script, count)
        tokens = section["tokens"] * (1 if text else 2) if section else 0
        recalls = any(is_recall(cmd) for _, cmd in offered_actions(script))
        exchange = EXCHANGE_TOKENS + (key[3] if recalls else 0)
        cached = (key, tokens + exchange * key[2] if section else 0)
        script.ndb.action_tokens = cached
    return cached[1]


@defer.inlineCallbacks
def ask_acting(script, character, prompt, shown, ask) -> defer.Deferred:
    """
    The model's answer to a turn, acting first where the NPC has actions.

    Args:
        prompt (ai_contrib.npc.reply_prompt.ReplyPrompt): the turn's prompt, ``prompt(budget,
            window=None) -> messages``, passed to ``ask`` as it is so that a prompt over its
            time allowance is built from less and says so (``cut``); each action's exchange
            (the model's call and what it is told) is added to its ``exchanges``, sent after
            it; the stored action messages to its ``acted``, so that who may hear the reply
            counts who saw the actions. It names the turn: ``turn_ids`` (its lines' ids) and
            ``listeners`` (``{dbref: name}``).
        shown (tuple): :func:`ai_contrib.npc.replies.prompt_window`'s ``(window, budget)``.
        ask (callable): ``ask(script, character, prompt, shown, **request) -> Deferred[
            ChatResult]`` (:func:`ai_contrib.npc.replies._ask`).

    Returns:
        Deferred[ChatResult]: the answer that speaks (its ``content`` may be empty). LLM errors
        pass through; the actions already taken are stored first.
    """
    offered = offered_actions(script)
    if not offered:
        result = yield ask(script, character, prompt, shown)
        return result
    text = use_text_protocol()
    wanted = set(prompt.turn_ids)
    lines = [m for m in script.history if m.get("id") in wanted]
    # the turn's actions, kept across a retry under the text protocol: they happened
    outcomes, context = [], _turn_context(lines, prompt.listeners)
    try:
        try:
            result = yield _loop(script, character, prompt, shown, ask, offered, text,
                                 outcomes, context)
        except LLMHTTPError as err:
            if text or not _tools_refused(err):
                raise
            logger.log_warn(f"AI {character}: the model server refused tools; actions are "
                            "asked for by an ACTION: line from now on")
            _TOOLS_REFUSED.add(get_setting("LLM_BASE_URL"))
            result = yield _loop(script, character, prompt, shown, ask, offered, True,
                                 outcomes, context)
    finally:
        if any(outcome["status"] == DONE for outcome in outcomes):
            script.ndb.acted_at = time.monotonic()
        if outcomes:
            acted = store_outcomes(script, outcomes, [m["id"] for m in lines])
            prompt.acted.extend(acted)
            try:
                note_actions(script, context["speakers"], [
                    o for o in outcomes if o["status"] == DONE and not o.get("recall")])
            except Exception as err:  # noqa: BLE001 - a staff view's record, not the reply's
                logger.log_trace(f"AI {character}: the people records of its actions were not "
                                 f"written: {err}")
    return result


def cooldown_left(script) -> float:
    """Seconds until the NPC of ``script`` may act again (``action_cooldown`` counted from the
    last turn that acted, as the option says now); 0 or less when it may."""
    rest = (script.ndb.acted_at or float("-inf")) + float(script.cfg("action_cooldown"))
    return rest - time.monotonic()


@defer.inlineCallbacks
def _loop(script, character, prompt, shown, ask, offered, text, outcomes, context):
    """
    :func:`ask_acting`'s rounds: ask, run what is called, tell the model, until it speaks.
    ``outcomes`` (the turn's results so far, appended to) count against the turn's limit and
    are shown to the model again; during the cooldown the limit is 0 and no tools are sent.
    The turn's prompt itself goes to ``ask``, its exchanges after it in ``prompt.exchanges``
    (the actions' section is in its system message already, actions_section): what is left
    out for time is left out of it, and counted on it for the receipt
    (:func:`ai_contrib.npc.deadline.fit_reply`).
    """
    described = [(name, _describe(cmd)) for name, cmd in offered]
    limit = 0 if cooldown_left(script) > 0 else int(script.cfg("action_max_per_turn"))
    request = {} if text or not limit else {"tools": core_actions.tool_schemas(described)}
    extra = prompt.exchanges
    # a loop asked again (tools refused) shows the actions already done in the new protocol
    extra[:] = [message for done, outcome in enumerate(outcomes, 1)
                for message in _exchange(outcome["call"], outcome, text, done >= limit)]
    while True:
        final = len(outcomes) >= limit
        if final and "tools" in request:
            request["tool_choice"] = "none"
        result = yield ask(script, character, prompt, shown, **request)
        calls = _calls_of(result, text, len(outcomes))
        if not calls or final:
            if calls:
                logger.log_info(f"AI {character}: actions past the turn's limit not run")
                if text:
                    # the action line goes; what the model says after it is still its reply
                    result.content = core_actions.without_action_line(result.content)
            return result
        for call in calls[: limit - len(outcomes)]:
            outcome = yield run_action(script, character, call, context)
            outcomes.append(outcome)
            context["done"].append(outcome)
            extra.extend(_exchange(outcome["call"], outcome, text, len(outcomes) >= limit))
