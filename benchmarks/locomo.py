"""
LoCoMo memory benchmark: after a long conversation has gone through an NPC's real memory
pipeline, is what the questions ask about still in the prompt the NPC would answer from?

LoCoMo (Maharana et al., ACL 2024; CC BY-NC 4.0, ``data/locomo/NOTICE.txt``) holds very long
two-person conversations (19-32 sessions, weeks apart) and questions about them. Any file in its
format works (``--data``); ``--conversations conv-26,conv-30`` picks samples by ``sample_id``,
``--split tuning`` or ``--split report`` one of the two fixed halves of the shipped file
(:data:`SPLITS`): settings are chosen on the tuning set, figures reported on the report set.

**Replay.** For each compaction strategy of :mod:`ai_contrib.npc.compaction_runner` (``summary``,
``mask``,
``hybrid``, ``cascade``, ``replace_all``: whatever ``strategies.STRATEGIES`` lists), a fresh
``AssistantCharacter`` named after speaker B is created in Evennia's database (Django + Evennia
set up outside a game dir by ``benchmarks/_evennia_env.py``), with
``script.db.compact_strategy`` set to the strategy and ``script.db.max_context_tokens`` to
``--max-context-tokens`` (4,096). Every turn goes through ``script.add_message``: speaker A's
turns as ``user`` messages named as in the data, speaker B's as the NPC's own ``assistant``
messages, verbatim (no reply is generated). A message's content is what was said, as a
player's line in a game; its ``timestamp`` is its session's date and time, the only place the
replay puts it, as a game does (the prompt shows it where the talk resumes:
``core.prompts.resumption_stamps``; a recall note beside each remembered line), its
``metadata`` holds ``session``, ``date_time`` and ``dia_id``; a turn with an image ends with
``[shares <blip_caption>]``.
After each NPC turn the per-turn hook runs (``rag_memory.after_turn_compaction``: masking, a due
cascade cycle), after every message the emergency check (``rag_memory.check_emergency_compaction``:
at 80 % of the budget, fact extraction then compaction). Between sessions, and after the last
one, the NPC is put to sleep and ticks once (``AssistantScript.run_tick`` -> ``run_sleep_tick``:
memory work, compaction at 70 %), then wakes for the next session. The replay reads only the
``conversation`` field of a sample: ``qa``, ``event_summary``, ``observation`` and
``session_summary`` are for scoring only.

Baselines, computed from the same message list by pure functions: ``window25`` (Evennia's own
``contrib/rpg/llm`` NPC: its prompt prefix and the last 25 ``Name: text`` lines, the question
being the last, nothing else), ``truncate`` (our reply prompt over the whole history with the
oldest messages dropped to fit the budget: no summary, no memory) and ``full`` (the whole
conversation, no budget: the ceiling).

**Questions.** For every QA item, the prompt is built exactly as the NPC builds a reply when
speaker A asks the question: the question becomes the newest ``user`` message (not stored),
``replies.prompt_window`` picks the history the prompt shows, ``replies.recall_for_turn``
retrieves with the question as query into a recall note anchored at the question (each question
asked afresh, with no notes from earlier ones), and ``core.prompts.assemble_reply_prompt``
assembles persona, summaries, history and the note within the budget. The model's context
window is asked for before the first replay, so every conversation runs under the same budget.
Scores (:mod:`benchmarks.locomo_metrics`):

* ``evidence_in_prompt`` (the headline, strict): share of the question's evidence turns whose
  own text, as said, is one substring of one message of the
  prompt: history, summaries or recall notes, only the date annotations of remembered lines
  removed before matching. A paraphrase, or the answer's words spread over a note, does not
  count;
* ``answer_in_prompt``: the gold answer is in the prompt (the question itself left out):
  normalised words contiguous in one message, or >= 80 % token recall in one message, a recall
  note counting item by item (:func:`answer_texts`); multi-hop answers part by part;
* ``evidence_verbatim``: share of the evidence turns still verbatim in the prompt's
  conversation messages (summaries and retrieved memories do not count);
* ``prompt_tokens``: tokens of the whole prompt (``core.tokens``, every system counted alike);
* with ``--answer``: the LLM answers from that prompt (temperature 0, ``LLM_SEED``) and the answer
  gets LoCoMo's token F1. A prompt the model cannot take (over its context window) scores 0.

On the game path (``--paths game``: the questions asked one after another in a talk that goes
on, ``docs/benchmarks.md``, "In a game") ``--answer`` makes each turn the NPC's own, as a game
runs it (:meth:`PipelineNPC.say_in_game`): the line is heard (``receive_speech``) and the NPC's
tick answers it with the reply's own request (``replies.answer_turn``: the prompt fitted to
``AI_REPLY_EVALUATION_SECONDS``, ``purpose="reply"``, the reply's sampling and
``AI_LLM_MAX_REPLY_TOKENS``), the cache warm-up included; the rows keep the server's prompt
figures (tokens evaluated and reused) beside the turn's time.

Category 5 (adversarial) is reported apart: ``adversarial_answer`` is what must not be asserted
(its presence in the prompt, and with ``--answer`` whether the answer contains it and whether it
declines the way LoCoMo scores).

**LLM.** By default the embedded model (SmolLM2-135M-Instruct, ``EmbeddedServerProcess``);
``--base-url``/``--model``/``--api-key`` point summaries, extraction and answers at any
OpenAI-compatible server. Temperature 0 for the afresh path's answers (summaries, extraction
and the game path's replies use the contrib's own settings) and a fixed ``--seed``.

Usage::

    .venv/bin/python benchmarks/locomo.py [--data PATH] [--conversations conv-30 | --split report]
        [--systems summary,window25,...] [--max-sessions N] [--spread-questions N]
        [--max-questions N]
        [--max-context-tokens 4096] [--answer] [--base-url URL --model NAME --api-key KEY]
        [--json OUT.json]
    .venv/bin/python benchmarks/locomo.py --merge A.json B.json [--json ALL.json]

``--json`` is rewritten after each system, so an interrupted run keeps what it finished;
``--merge`` prints the tables of runs over disjoint systems or conversations combined (one
process per strategy runs them side by side). Progress bars (tqdm) go to stderr, Markdown
tables to stdout. Nothing is asserted.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections import Counter, OrderedDict
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import locomo_metrics as metrics  # noqa: E402
from benchmarks._cli import positive_int, setting_overrides  # noqa: E402

DEFAULT_DATA = os.path.join(ROOT, "data", "locomo", "locomo_dev.json")


def typing_left(text, wpm, since, now) -> float:
    """
    Seconds a player typing ``text`` at ``wpm`` words a minute (``--typing-wpm``) still types
    at ``now``, having started when the NPC's last reply was stored (``since``; both
    ``time.perf_counter()`` seconds): ``words x 60 / wpm`` less the time gone, at least 0.
    0 for ``wpm`` 0 (lines said at once) or before any reply (``since`` None).
    """
    if not wpm or since is None:
        return 0.0
    return max(0.0, len(text.split()) * 60.0 / float(wpm) - (now - since))
#: the shipped conversations split once, for good: defaults are chosen on the tuning set and
#: the README reports the report set (``--split``), so no reported figure is one a setting was
#: fitted to (``docs/design.md``, "Recall notes")
SPLITS = {
    "tuning": ("conv-26", "conv-41", "conv-43"),
    "report": ("conv-30", "conv-42", "conv-44", "conv-47"),
}
BASELINES = ("window25", "truncate", "full")
FALLBACK_STRATEGIES = ("summary",)
WINDOW_LINES = 25  # Evennia's LLMNPC.max_chat_memory_size
DEFAULT_BUDGET = 4096
DEFAULT_SEED = 1234
ANSWER_MAX_TOKENS = 96
WAIT_TIMEOUT = 3600.0  # seconds one step may take (a compaction is several LLM calls)
# Evennia's contrib/rpg/llm DEFAULT_PROMPT_PREFIX (Evennia 6.1), used if the contrib is missing
EVENNIA_PROMPT_PREFIX = (
    "You are roleplaying as {name}, a {desc} existing in {location}. "
    "Answer with short sentences. Only respond as {name} would. "
    "From here on, the conversation between {name} and {character} begins."
)
PERSONA = (
    "You are {npc}. You have been talking with your friend {player} for many weeks, "
    "in sessions days or weeks apart."
)


# ------------------------------------------------------------------------------------------------
# progress


class Progress:
    """
    Progress on stderr with ``tqdm``: one bar per stage (a system's replay over the turns, then
    its questions) with the LLM calls so far, and time-stamped note lines between bars. Off a
    terminal the bar is redrawn every 30 s, so a log file gets a line now and then.
    """

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.started = time.monotonic()
        self.bar = None

    def stage(self, desc, total, unit):
        """Start a new bar of ``total`` ``unit`` (closing the previous one)."""
        from tqdm import tqdm

        self.close()
        self.bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, dynamic_ncols=True,
                        mininterval=0.5 if self.stream.isatty() else 30.0)

    def update(self, done, **postfix):
        """Move the bar to ``done`` and show ``postfix`` (e.g. ``llm_calls=12``)."""
        if self.bar is None:
            return
        self.bar.n = done
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(0)  # redraws when mininterval has passed

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def note(self, text):
        from tqdm import tqdm

        tqdm.write(f"[{time.monotonic() - self.started:7.1f} s] {text}", file=self.stream)


# ------------------------------------------------------------------------------------------------
# data (pure)


def load_samples(path, wanted=None):
    """
    Read a LoCoMo-format JSON file (a list of samples, or one sample).

    Args:
        path (str): the file.
        wanted (list[str], optional): ``sample_id`` values to keep, in this order.

    Returns:
        list[dict]: the samples.

    Raises:
        SystemExit: when a wanted ``sample_id`` is not in the file.
    """
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, dict):
        data = [data]
    if not wanted:
        return data
    by_id = {str(s.get("sample_id")): s for s in data}
    missing = [w for w in wanted if w not in by_id]
    if missing:
        raise SystemExit(
            f"no sample_id {', '.join(missing)} in {path} (it has: {', '.join(by_id)})"
        )
    return [by_id[w] for w in wanted]


def session_keys(conversation):
    """``[(number, "session_<number>"), ...]`` sorted by number (the date keys are skipped)."""
    found = []
    for key in conversation:
        head, _, number = key.partition("_")
        if head == "session" and number.isdigit():
            found.append((int(number), key))
    return sorted(found)


def parse_session_time(text):
    """``"1:56 pm on 8 May, 2023"`` -> ``"2023-05-08T13:56:00+00:00"``; None if unreadable."""
    cleaned = " ".join(str(text or "").replace(",", " ").split())
    for fmt in ("%I:%M %p on %d %B %Y", "%I:%M %p on %d %b %Y", "%H:%M on %d %B %Y"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=timezone.utc).isoformat()
        except ValueError:
            continue
    return None


def turn_said(turn):
    """What a turn says: its text plus ``" [shares <caption>]"`` for an image."""
    said = str(turn.get("text") or "").strip()
    caption = turn.get("blip_caption")
    if caption:
        said += f" [shares {caption}]"
    return said


def conversation_turns(conversation, max_sessions=None):
    """
    The turns to replay, oldest first. Reads only the ``conversation`` dict of a sample.

    Args:
        conversation (dict): ``{"speaker_a", "speaker_b", "session_<n>": [turn, ...],
            "session_<n>_date_time": str, ...}``; a turn is ``{"speaker", "dia_id", "text",
            "blip_caption"?}``.
        max_sessions (int, optional): replay only the first this many sessions.

    Returns:
        list[dict]: ``{"id" (normalised dia_id or None), "session" (int), "date_time" (str),
        "timestamp" (ISO str or None), "speaker" (str), "role" ("user" for speaker A and
        anyone else, "assistant" for speaker B), "content" (str: :func:`turn_said`)}``.
    """
    npc = conversation.get("speaker_b")
    keys = session_keys(conversation)
    if max_sessions:
        keys = keys[:max_sessions]
    turns = []
    for number, key in keys:
        date_time = str(conversation.get(f"{key}_date_time") or "").strip()
        stamp = parse_session_time(date_time)
        for turn in conversation.get(key) or []:
            speaker = str(turn.get("speaker") or conversation.get("speaker_a") or "")
            turns.append({
                "id": metrics.normalise_dia_id(turn.get("dia_id")),
                "session": number,
                "date_time": date_time,
                "timestamp": stamp,
                "speaker": speaker,
                "role": "assistant" if speaker == npc else "user",
                "content": turn_said(turn),
            })
    return turns


def select_questions(sample, sessions, truncated, max_questions=None, spread=None):
    """
    The QA items to ask, in file order.

    Args:
        sample (dict): a LoCoMo sample (its ``qa`` list).
        sessions (set[int]): the session numbers replayed.
        truncated (bool): True when not every session was replayed: then only questions whose
            evidence all lies in ``sessions`` are asked.
        max_questions (int, optional): ask at most this many, the first in file order.
        spread (int, optional): ask this many of the answerable questions (categories 1-4),
            evenly spaced over them in file order: LoCoMo lists its questions by kind (the
            first ten of a conversation are mostly multi-hop and temporal, single-hop comes
            later), so the first N are no sample of the set, and every N-th is one
            (``docs/benchmarks.md``, "In a game"). Applied before ``max_questions``.

    Returns:
        list[dict]: ``{"index" (position in qa), "question", "category", "gold" (``answer``,
        or ``adversarial_answer`` for category 5), "evidence" (normalised ids)}``. Items of an
        unknown category, and answerable ones without an answer, are left out.
    """
    out = []
    for index, qa in enumerate(sample.get("qa") or []):
        category = qa.get("category")
        if category not in metrics.CATEGORIES or (spread and category == metrics.ADVERSARIAL):
            continue
        evidence = metrics.parse_evidence(qa.get("evidence"))
        if truncated and (
            not evidence or any(metrics.evidence_session(e) not in sessions for e in evidence)
        ):
            continue
        gold = qa.get("adversarial_answer") if category == metrics.ADVERSARIAL else qa.get("answer")
        if gold is None and category != metrics.ADVERSARIAL:
            continue
        out.append({
            "index": index,
            "question": str(qa.get("question") or "").strip(),
            "category": category,
            "gold": gold,
            "evidence": evidence,
        })
    if spread and len(out) > spread:
        # the middle of each of ``spread`` equal stretches of the list
        out = [out[(2 * i + 1) * len(out) // (2 * spread)] for i in range(spread)]
    return out[:max_questions] if max_questions else out


# ------------------------------------------------------------------------------------------------
# baselines (pure)


def history_messages(turns, player, npc):
    """Message dicts (``core.messages.make_message``) for ``turns``, as the replay adds them."""
    from ai_contrib.core.messages import make_message

    return [
        make_message(
            t["role"], t["content"], name=npc if t["role"] == "assistant" else t["speaker"] or player,
            timestamp=t["timestamp"],
            metadata={"session": t["session"], "date_time": t["date_time"], "dia_id": t["id"]},
        )
        for t in turns
    ]


def window25_prompt(history, question_msg, npc, player, prefix=EVENNIA_PROMPT_PREFIX,
                    lines=WINDOW_LINES):
    """
    Evennia's ``LLMNPC`` prompt: its prefix, then the last ``lines`` ``"Name: text"`` lines, the
    question being the last (it is remembered before the prompt is built), as one user message.
    """
    recent = (list(history) + [question_msg])[-lines:]
    text = prefix.format(name=npc, desc="someone", location="the void", character=player)
    text += "\n" + "\n".join(f"{m.get('name')}: {m['content']}" for m in recent)
    return [{"role": "user", "content": text}]


def reply_prompt(history, counts, question_msg, persona, npc, budget, model=None):
    """
    Our reply prompt (``core.prompts.build_reply_messages``) over ``history`` plus the question,
    newest kept first within ``budget`` tokens (None = no budget).
    """
    from ai_contrib.core.prompts import build_reply_messages
    from ai_contrib.core.tokens import count_message_tokens

    messages = list(history) + [question_msg]
    all_counts = list(counts) + [count_message_tokens(question_msg, model)]
    return build_reply_messages(
        persona, npc, messages, all_counts, budget if budget is not None else 10**12
    )


def prompt_tokens(prompt, model=None):
    """Tokens of a chat prompt (list of ``{"role", "content"}``), counted as the contrib counts."""
    from ai_contrib.core.tokens import count_message_tokens

    return sum(count_message_tokens({"role": m["role"], "content": m["content"]}, model)
               for m in prompt)


def context_texts(prompt):
    """The prompt's conversation messages (user/assistant): where a turn can stay verbatim."""
    return [m["content"] for m in prompt if m.get("role") in ("user", "assistant")]


def _stamp_words(match):
    from ai_contrib.core.dates import as_datetime, day_text

    return f"[{day_text(as_datetime(match.group(1)))} {match.group(2)}]"


def answer_texts(prompt, question_line):
    """
    The texts an answer or an evidence turn is looked for in: every message of the prompt with
    the question line itself taken out, and a recall note (``RELATED MEMORIES``, ``RELATED PAST
    EXPERIENCES``) as its items, one text each: a note of thirty lines that do not hold the
    answer would otherwise "contain" it as often as one that does (its words are spread over
    them). A time stamp (``"[2023-05-08 13:56]"``) reads as the date it names, in the data's
    own words (``"8 May 2023"``), which is how a temporal answer is written.
    """
    from ai_contrib.core.prompts import TIME_STAMP
    from ai_contrib.memory.retrieval import EXPERIENCES_HEADER, MEMORIES_HEADER

    texts = []
    for message in prompt:
        text = TIME_STAMP.sub(_stamp_words, message["content"].replace(question_line, " "))
        if MEMORIES_HEADER in text or EXPERIENCES_HEADER in text:
            texts += [line for line in text.split("\n")
                      if line.strip() and line.strip() not in (MEMORIES_HEADER, EXPERIENCES_HEADER)]
        else:
            texts.append(text)
    return texts


def score_question(q, prompt, question_line, turn_texts, model=None, said_texts=None):
    """The per-question row without the answer: ``evidence_in_prompt`` (the strict headline,
    :func:`benchmarks.locomo_metrics.evidence_in_prompt` over ``said_texts``),
    ``answer_in_prompt`` (categories 1-4), ``adversarial_in_prompt`` (5),
    ``evidence_verbatim``, ``prompt_tokens``."""
    texts = answer_texts(prompt, question_line)
    row = {
        "evidence_in_prompt": metrics.evidence_in_prompt(q["evidence"], said_texts or {}, texts),
        "evidence_verbatim": metrics.evidence_score(q["evidence"], turn_texts, context_texts(prompt)),
        "prompt_tokens": prompt_tokens(prompt, model),
        "answer_in_prompt": None,
        "adversarial_in_prompt": None,
    }
    if q["category"] == metrics.ADVERSARIAL:
        if q["gold"] is not None:
            score = metrics.answer_score(q["gold"], texts, 4)
            row["adversarial_in_prompt"] = None if score is None else float(score >= 1.0)
    else:
        row["answer_in_prompt"] = metrics.answer_score(q["gold"], texts, q["category"])
    return row


# ------------------------------------------------------------------------------------------------
# the live pipeline (needs Django + Evennia)


def wait(d, timeout=WAIT_TIMEOUT):
    """Drive the reactor until Deferred ``d`` fires (tests/support/twisted_util.wait_for)."""
    from tests.support.twisted_util import wait_for

    return wait_for(d, timeout=timeout)


class AskingView:
    """
    The NPC's script as it is when the question has just been heard: ``history`` is the runtime
    history plus the question message; everything else is the script's own. The question is not
    stored, so one replay serves every question.
    """

    def __init__(self, script, question_msg):
        self._script = script
        self._question = question_msg

    @property
    def history(self):
        return list(self._script.history) + [self._question]

    def __getattr__(self, name):
        return getattr(self._script, name)


#: What a memory-work LLM request was for, from the ``purpose`` its caller tagged it with
#: (``ai_contrib.llm.client.PURPOSES``); an untagged request counts as ``"other"``.
MEMORY_CALL_KINDS = ("summary", "extraction", "importance")


#: purposes of the requests that answer the questions: ``"answer"`` (the afresh path),
#: ``"reply"``, ``"warm"`` and ``"handover"`` (the game path's turns, ``PipelineNPC.say_in_game``)
ANSWER_PURPOSES = frozenset({"answer", "reply", "warm", "handover"})


def memory_call_kind(purpose):
    """``"summary"``, ``"extraction"``, ``"importance"`` or ``"other"`` for a request's ``purpose``."""
    return purpose if purpose in MEMORY_CALL_KINDS else "other"


class CallMeter:
    """
    Counts the LLM requests made through the contrib's process-wide client, per system and
    purpose (``"answer"``: the answers of ``--answer``, requests whose ``purpose`` is in
    :data:`ANSWER_PURPOSES`;
    ``"memory"``: every other request, summaries, extraction and the rest), with their wall
    time; memory work is also split by :func:`memory_call_kind` of the request's ``purpose``
    tag (calls and generated tokens). It also times each
    outermost ``npc.compacting.compact_conversation_history`` (the summary LLM calls and the
    bookkeeping; the fact extraction that runs before it is counted apart, as calls).
    """

    def __init__(self):
        self.system = None
        self.calls = Counter()
        self.seconds = Counter()
        self.tokens = Counter()
        self.kinds = Counter()  # (system, kind, "calls" | "completion")
        self.compaction_seconds = Counter()
        self._compacting = 0
        self.installed = None

    def install(self):
        from ai_contrib.llm.client import get_client
        from ai_contrib.npc import compacting

        client = get_client()
        if self.installed is client:
            return
        for name in ("chat", "complete"):
            setattr(client, name, self._metered(getattr(client, name)))
        # wrapped where it is defined, so the sleep phase's, the emergency's and the per-turn
        # hook's calls are timed too
        compact = compacting.compact_conversation_history

        def timed_compaction(*args, **kwargs):
            # nested calls (hybrid's summary step) are inside the outer one's time
            outer = self._compacting == 0
            self._compacting += 1
            system, start = self.system, time.perf_counter()
            try:
                d = compact(*args, **kwargs)
            except BaseException:
                self._compacting -= 1
                raise

            def _done(result):
                self._compacting -= 1
                if outer:
                    self.compaction_seconds[system] += time.perf_counter() - start
                return result

            return d.addBoth(_done)

        compacting.compact_conversation_history = timed_compaction
        self.installed = client

    def _metered(self, original):
        """``original`` (a client request method) counting its calls, time and tokens."""

        def request(*args, **kwargs):
            tag = kwargs.get("purpose")
            # the game path's replies and cache warm-ups are the answers' work, not memory's
            answering = tag in ANSWER_PURPOSES
            key = (self.system, "answer" if answering else "memory")
            kind = None if answering else memory_call_kind(tag)
            start = time.perf_counter()
            d = original(*args, **kwargs)

            def _done(result):
                self.calls[key] += 1
                self.seconds[key] += time.perf_counter() - start
                usage = getattr(result, "usage", None) or {}
                completion = int(usage.get("completion_tokens") or 0)
                self.tokens[(self.system, "prompt")] += int(usage.get("prompt_tokens") or 0)
                self.tokens[(self.system, "completion")] += completion
                if kind:
                    self.kinds[(self.system, kind, "calls")] += 1
                    self.kinds[(self.system, kind, "completion")] += completion
                return result

            return d.addBoth(_done)

        return request

    def kind_of(self, system, kind, what="calls"):
        """Memory-work LLM ``calls`` (or generated ``completion`` tokens) of one kind."""
        return self.kinds[(system, kind, what)]

    def of(self, system, purpose=None):
        if purpose:
            return self.calls[(system, purpose)]
        return sum(v for (s, _), v in self.calls.items() if s == system)

    def seconds_of(self, system):
        return sum(v for (s, _), v in self.seconds.items() if s == system)


class PipelineNPC:
    """
    A real ``AssistantCharacter`` replaying a conversation under one compaction strategy.

    Args:
        strategy (str): ``compact_strategy``.
        npc_name (str), player (DefaultCharacter): who talks.
        budget (int): ``max_context_tokens`` (tokens).
    """

    def __init__(self, strategy, npc_name, player, budget):
        from evennia.utils import create

        from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

        self.strategy = strategy
        self.player = player
        room = player.location
        self.npc = create.create_object(AssistantCharacter, key=npc_name, location=room, home=room)
        self.npc.db.persona = PERSONA.format(npc=npc_name, player=player.key)
        self.script = get_assistant_script(self.npc)
        self.script.db.compact_strategy = strategy
        self.script.db.max_context_tokens = int(budget)
        self.sleeps = []
        self.outcomes = Counter()  # (trigger, "success" | "failed" | "skipped") -> count
        self.errors = Counter()  # error text of failed compactions -> count
        self.skips = Counter()  # reason of skipped compactions -> count
        self.fidelity_rejected = 0  # summaries that failed the fidelity check with no extract
        self.replied_at = None  # when say_in_game last stored a reply (perf_counter seconds)

    def _tally(self, trigger, result):
        """Record what one compaction attempt of the pipeline returned (a ``CompactionResult``,
        read as the dict the report stores, or None)."""
        if hasattr(result, "as_dict"):
            result = result.as_dict()
        if not isinstance(result, dict):
            return
        if result.get("success"):
            self.outcomes[(trigger, "success")] += 1
        elif result.get("skipped"):
            self.outcomes[(trigger, "skipped")] += 1
            self.skips[f"{trigger}: {str(result.get('reason'))[:120]}"] += 1
        elif "error" in result:
            self.outcomes[(trigger, "failed")] += 1
            self.errors[str(result["error"])[:160]] += 1
            if "fidelity check" in str(result["error"]):
                self.fidelity_rejected += 1

    def replay(self, turns, on_message=None):
        """Add every turn through the real pipeline (module docstring); returns nothing."""
        from ai_contrib import rag_memory

        script, npc = self.script, self.npc
        sessions = OrderedDict()
        for turn in turns:
            sessions.setdefault(turn["session"], []).append(turn)
        done = 0
        for number, session_turns in sessions.items():
            if script.db.operating_mode == "sleep":
                script.wake(reason=f"session {number} begins")
            for turn in session_turns:
                name = npc.key if turn["role"] == "assistant" else turn["speaker"]
                metadata = {"session": number, "date_time": turn["date_time"], "dia_id": turn["id"]}
                if turn["role"] == "user":
                    metadata["speaker"] = self.player.dbref
                script.add_message(turn["role"], turn["content"], name=name,
                                   timestamp=turn["timestamp"], metadata=metadata)
                if turn["role"] == "assistant":
                    self._tally("turn", wait(rag_memory.after_turn_compaction(script, npc)))
                self._tally("emergency", wait(rag_memory.check_emergency_compaction(script, npc)))
                done += 1
                if on_message:
                    on_message(done, number)
            # sleep() would schedule a tick of its own, to run at an arbitrary point of the
            # replay: the busy flag stops that, and the tick runs here, to completion
            script.ndb.busy = True
            script.sleep(reason=f"session {number} is over")
            script.ndb.busy = False
            script.ndb.last_sleep_result = None
            wait(script.run_tick())
            if script.ndb.memory_work is not None:  # the sleep phase runs beside the replies
                wait(script.ndb.memory_work)
            sleep_result = script.ndb.last_sleep_result  # SleepResults; the report holds dicts
            sleep_result = sleep_result.as_dict() if sleep_result is not None else {}
            self.sleeps.append(sleep_result)
            self._tally("sleep", sleep_result.get("context_compaction"))
        if script.db.operating_mode == "sleep":
            script.wake(reason="questions")

    def prompt_for(self, question_msg, query, speaker):
        """
        The exact reply prompt for ``question_msg`` and the memory notes' text in it, built the
        way :func:`ai_contrib.npc.replies.answer_turn` builds it: the prompt window first
        (``replies.prompt_window``), then retrieval into recall notes (``replies.recall_for_turn``,
        the question as the turn), then ``assemble_reply_prompt``. Each question is asked
        afresh: no notes from an earlier question.
        """
        from ai_contrib.npc import replies
        from ai_contrib.core.prompts import assemble_reply_prompt

        view = AskingView(self.script, question_msg)
        self.script.ndb.recall_notes = None
        self.script.ndb.prompt_start_id = None
        window, budget = replies.prompt_window(view)
        # the replay's messages carry no audience (public): no listener filter applies
        recall = wait(replies.recall_for_turn(view, self.npc, query, None, question_msg["id"],
                                              window=window))
        history = replies.window_messages(view.history, window)
        messages, _ = assemble_reply_prompt(
            self.npc.db.persona, self.npc.key, history, view.runtime.token_counts(history),
            budget, notes=recall.notes, keep_ids=[question_msg["id"]])
        memories = "\n\n".join(note["text"] for note in recall.notes) or None
        return messages, memories

    def ask_in_game(self, text, answer):
        """
        One turn of the game path: ``text`` said by the player and stored, the reply prompt
        built as :func:`ai_contrib.npc.replies.answer_turn` builds it (the prompt window for the
        turn, then retrieval into the recall notes the talk already shows, under the latency
        allowance the client gives the embedded model), the NPC's reply stored, and the per-turn
        hook and the emergency check run, as in :meth:`replay`.

        Args:
            text (str): the player's line.
            answer (callable): ``prompt -> str``, the NPC's reply to store.

        Returns:
            tuple: ``(prompt, memories text or None, recall)``: ``recall`` is the turn's
            ``recall_for_turn(...).recall`` plus ``"new_tokens"``, the tokens of the note this
            turn added (0 for none).
        """
        from ai_contrib import rag_memory
        from ai_contrib.core.prompts import assemble_reply_prompt
        from ai_contrib.npc import replies

        script, npc = self.script, self.npc
        msg = script.add_message("user", text, name=self.player.key,
                                 metadata={"speaker": self.player.dbref})
        self._tally("emergency", wait(rag_memory.check_emergency_compaction(script, npc)))
        window, budget = replies.prompt_window(script, [msg["id"]])
        recall = wait(replies.recall_for_turn(script, npc, text, None, msg["id"], window=window))
        history = replies.window_messages(script.history, window)
        prompt, _ = assemble_reply_prompt(
            npc.db.persona, npc.key, history, script.runtime.token_counts(history), budget,
            notes=recall.notes, keep_ids=[msg["id"]])
        memories = "\n\n".join(note["text"] for note in recall.notes) or None
        new_tokens = sum(note["tokens"] for note in recall.notes if note.get("new"))
        script.add_message("assistant", answer(prompt), name=npc.key)
        self._tally("turn", wait(rag_memory.after_turn_compaction(script, npc)))
        self._tally("emergency", wait(rag_memory.check_emergency_compaction(script, npc)))
        return prompt, memories, dict(recall.recall or {}, new_tokens=new_tokens)

    def warm_reply_cache(self):
        """
        Before the game path's first question with ``--answer``: the reply server's cache
        warmed with the NPC's reply prompt (:func:`ai_contrib.npc.warmup.warm_reply_cache`, the
        warm-up a game's tick sends after a reply whose prompt start changed, and after a
        restart to the NPCs last spoken to), waited for, where a game warms
        (:func:`ai_contrib.npc.deadline.warmup_enabled`: the embedded model by default). The
        replay stores the lines but sends no reply, so without it the first question would
        meet a server that has never seen the prompt, which no talk under way has; it also
        measures the server's prompt speed, as a game's replies have by then.

        Returns:
            list[dict] | None: the messages warmed (what the server's prefix cache holds now),
            None where a game does not warm.
        """
        from ai_contrib.npc.deadline import warmup_enabled
        from ai_contrib.npc.warmup import warm_reply_cache

        if not warmup_enabled():
            return None
        wait(warm_reply_cache(self.script, self.npc, [self.player.dbref]))
        return list(self.script.ndb.warming_messages or ())

    def type_line(self, text, wpm):
        """
        The player typing ``text`` at ``wpm`` words a minute (``--typing-wpm``) from the moment
        the NPC's last reply was stored (:meth:`say_in_game`): the reactor runs meanwhile, so
        the NPC's warm-ups go on as while a player types; the time already spent waiting for
        the turn's memory work counts. Nothing for 0 or before the first reply.

        Returns:
            float: seconds waited now.
        """
        from twisted.internet import reactor, task

        left = typing_left(text, wpm, self.replied_at, time.perf_counter())
        if left > 0:
            wait(task.deferLater(reactor, left, lambda: None))
        return left

    def say_in_game(self, text):
        """
        One turn of the game path with the model answering (``--answer``), as a game runs it:
        the player says ``text`` to the NPC (``receive_speech``, which stores and queues the
        line) and the NPC's tick answers it (``script.run_tick``: the emergency check, then
        :func:`ai_contrib.npc.replies.answer_turn`, whose prompt is the reply's own
        ``ReplyPrompt`` fitted to ``AI_REPLY_EVALUATION_SECONDS``, sent by the client as a
        ``"reply"`` with the reply's sampling, then the per-turn hook, and the cache warm-up
        when the prompt's start changed). The turn is over when the reply is stored; the memory
        work it started is waited for, the warm-up is not: the next line comes at once, and a
        reply whose prompt starts as the warm-up's waits for it (or gives it up) as in a game.

        Returns:
            tuple: ``(prompt, memories text or None, recall, reply)``: ``prompt`` the messages
            sent, ``recall`` the receipt's ``recall`` plus ``"new_tokens"`` (the tokens of the
            memories first shown in the prompt), ``reply`` ``{"seconds" (the turn's, from
            the line said to the reply stored), "prompt" (the server's prompt figures,
            ``ChatResult.prompt_stats``, or None), "waited" (seconds spent on a warm-up),
            "cut_for_time" (the receipt's, or None), "answered" (bool)}``.
        """
        script = self.script
        started = time.perf_counter()
        msg = script.receive_speech(self.player, text, to=self.npc)
        # the tick receive_speech kicked, run now: its Deferred fires when the reply is stored
        tick = script.run_tick()
        if tick is not None:
            wait(tick)
        self.replied_at = time.perf_counter()
        seconds = self.replied_at - started
        # found before the memory work the turn started ends: a compaction right after the
        # reply may take it out of the history (replace_all takes the whole history)
        said = next((m for m in reversed(script.history[-4:]) if m.get("role") == "assistant"
                     and msg["id"] in ((m.get("metadata") or {}).get("reply_to") or ())), None)
        for work in (script.ndb.after_turn, script.ndb.memory_work):
            if work is not None and not work.called:
                wait(work)
        answered = said is not None
        receipt = next((r for r in reversed(script.db.reply_receipts or ())
                        if answered and r.get("seq") == said.get("seq")), {})
        # the reply's prompt as sent (replies.keep_receipt); ndb.server_prompt may already be
        # the warm-up's that the tick started after the reply
        sent = list(script.ndb.recent_prompts or ())
        prompt = list(sent[-1]["messages"]) if answered and sent else []
        # the recall notes it showed, read from the prompt: notes a question kept for its reply
        # are given up once it is spoken (docs/design.md, "Recall notes")
        from ai_contrib.memory.retrieval import EXPERIENCES_HEADER, MEMORIES_HEADER

        memories = "\n\n".join(
            m["content"] for m in prompt[1:] if m.get("role") == "system"
            and m["content"].startswith((MEMORIES_HEADER, EXPERIENCES_HEADER))) or None
        new_tokens = sum(int(part.get("tokens") or 0) for part in receipt.get("parts") or ()
                         if part.get("part") == "memories" and part.get("new"))
        last = script.ndb.last_reply or {}
        reply = {"seconds": seconds, "prompt": last.get("prompt") if answered else None,
                 "waited": last.get("waited") if answered else None,
                 "cut_for_time": dict(receipt["cut_for_time"]) if receipt.get("cut_for_time")
                 else None, "answered": answered}
        return prompt, memories, dict(receipt.get("recall") or {}, new_tokens=new_tokens), reply

    def stats(self):
        """``{"compactions", "compactions_by_trigger", "evictions", "masks", "facts",
        "facts_rejected", "facts_replaced" (:func:`fact_checks`), "final_tokens",
        "messages_in_context", "summary_fidelity": [score of each summary put in],
        "fidelity_replaced", "fidelity_rejected", "max_unsupported_share",
        "misquoted_summaries", "quotes_repaired", "invented_quotes_context",
        "invented_quotes_journal", ...}`` from the archive, journal, runtime and sleeps."""
        by_trigger = Counter()
        evictions = masks = 0
        fidelity = []  # the fidelity check of every summary put in (docs/design.md)
        for record in self.script.archive.records(kinds=("compaction", "evict", "mask")):
            if record["kind"] == "compaction":
                by_trigger[str(record.get("trigger") or "?")] += 1
                checked = ((record.get("marker") or {}).get("metadata") or {}).get("fidelity")
                if checked:
                    fidelity.append(checked)
            elif record["kind"] == "evict":
                evictions += 1
            else:
                masks += 1
        journal = self.npc.db.journal or {}
        entries = list(journal.get("entries") or [])
        facts = sum(1 for e in entries if e.get("source_type") != "compaction")
        archived = self.script.archive.messages()
        checks = fact_checks(entries, archived)
        scores = [f["score"] for f in fidelity]
        invented = metrics.invented_quotes(self.script.history, archived, entries)
        kinds = metrics.journal_kinds(entries, archived)
        return {
            "summary_fidelity": scores,
            "fidelity_replaced": sum(1 for f in fidelity if f.get("replaced")),
            "fidelity_rejected": self.fidelity_rejected,
            # the worst share of names and numbers absent from the source, of any summary used
            "max_unsupported_share": max((f["unsupported_share"] for f in fidelity),
                                         default=None),
            "attempts": {f"{t} {o}": n for (t, o), n in sorted(self.outcomes.items())},
            "failed_compactions": sum(n for (_, o), n in self.outcomes.items() if o == "failed"),
            "errors": dict(self.errors.most_common(5)),
            "skip_reasons": dict(self.skips.most_common(5)),
            "compactions": sum(by_trigger.values()),
            "compactions_by_trigger": dict(sorted(by_trigger.items())),
            "evictions": evictions,
            "masks": masks,
            "facts": facts,
            "facts_rejected": checks["rejected"],
            "facts_replaced": checks["replaced"],
            "journal_entries": len(entries),
            # invented quotes kept out: summaries refused for one (replaced by an extract) and
            # quotes the sleep's repair took out of stored texts
            "misquoted_summaries": sum(1 for f in fidelity if f.get("model_quote_failures")),
            "quotes_repaired": sum(int((s.get("quote_repair") or {}).get("quotes_removed") or 0)
                                   for s in self.sleeps),
            "invented_quotes_context": invented["context"],
            "invented_quotes_journal": invented["journal"],
            "journal_junk": kinds["junk"],
            "journal_classified": kinds["player"] + kinds["npc"] + kinds["junk"],
            # each fact with its kind, for a check by hand (the --json file's details)
            "journal_facts": kinds["contents"],
            "final_tokens": self.script.token_count(),
            "messages_in_context": len(self.script.history),
        }


# ------------------------------------------------------------------------------------------------
# running


def fact_checks(entries, archived):
    """
    What the one-line fact check (``docs/design.md``, "Facts you can trust") did in a run:
    ``{"rejected": calls answered "error: not recorded" (their facts never reached the journal),
    "replaced": journal entries that are the line a model's fact came from}``.

    Args:
        entries (list[dict]): the journal's entries. archived (list[dict]): the archive's
            messages (fact extraction's tool results among them).
    """
    from ai_contrib.core.cuts import is_extraction_traffic

    rejected = sum(1 for m in archived if m.get("role") == "tool" and is_extraction_traffic(m)
                   and str(m.get("content") or "").startswith("error: not recorded"))
    replaced = sum(1 for e in entries if e.get("grounding") in ("replaced", "verbatim"))
    return {"rejected": rejected, "replaced": replaced}


def available_strategies():
    """Compaction strategies the contrib supports now (``strategies.STRATEGIES``)."""
    try:
        from ai_contrib.npc import compaction_runner

        return tuple(compaction_runner.STRATEGIES)
    except Exception:  # the strategies module is optional for this benchmark
        return FALLBACK_STRATEGIES


def answer_question(prompt, npc_name, model, max_tokens):
    """
    The NPC's answer from ``prompt`` (temperature 0), cleaned as the NPC cleans its replies
    (``core.prompts.clean_reply``, which also drops a time stamp copied from the prompt).

    Returns:
        tuple: ``(answer or None, error text or None)``; an LLM error (e.g. a prompt over the
        model's context window) gives ``(None, error)``.
    """
    from ai_contrib.core.prompts import clean_reply
    from ai_contrib.llm.client import LLMError, get_client

    try:
        result = wait(get_client().chat(prompt, model=model, max_tokens=max_tokens,
                                        temperature=0.0, purpose="answer"))
    except LLMError as err:
        return None, f"{type(err).__name__}: {err}"
    return clean_reply(result.content, npc_name), None


class Conversation:
    """
    One LoCoMo sample, ready to replay and ask: its turns (first ``max_sessions`` sessions), the
    questions about them, the baseline message list, and the speakers as Evennia objects.

    Attributes:
        sample_id (str), player_name (str), npc_name (str), persona (str).
        turns (list[dict]): :func:`conversation_turns`.
        questions (list[dict]): :func:`select_questions`.
        turn_texts (dict): ``{turn id: content}`` for the verbatim-history check.
        said_texts (dict): ``{turn id: the turn's own text}`` for the strict check.
        history (list[dict]), counts (list[int]): the baselines' messages and their tokens.
        player (DefaultCharacter): speaker A, in a room of its own.
    """

    def __init__(self, sample, max_sessions=None, max_questions=None, model=None, spread=None):
        from evennia.utils import create

        from ai_contrib.core.tokens import count_message_tokens

        conversation = sample["conversation"]
        self.sample_id = str(sample.get("sample_id"))
        self.player_name = str(conversation.get("speaker_a") or "Player")
        self.npc_name = str(conversation.get("speaker_b") or "NPC")
        self.persona = PERSONA.format(npc=self.npc_name, player=self.player_name)
        self.session_count = len(session_keys(conversation))
        self.turns = conversation_turns(conversation, max_sessions)
        self.sessions = {t["session"] for t in self.turns}
        self.questions = select_questions(
            sample, self.sessions, len(self.sessions) < self.session_count, max_questions,
            spread)
        self.turn_texts, self.said_texts = {}, {}
        for turn in self.turns:
            if turn["id"] and turn["id"] not in self.turn_texts:
                self.turn_texts[turn["id"]] = turn["content"]
                self.said_texts[turn["id"]] = turn["content"]
        self.model = model
        self.history = history_messages(self.turns, self.player_name, self.npc_name)
        self.counts = [count_message_tokens(m, model) for m in self.history]
        room = create.create_object(
            "evennia.objects.objects.DefaultRoom", key=f"{self.sample_id} room", nohome=True
        )
        self.player = create.create_object(
            "evennia.objects.objects.DefaultCharacter", key=self.player_name, location=room,
            home=room,
        )
        try:
            from evennia.contrib.rpg.llm.llm_npc import DEFAULT_PROMPT_PREFIX
        except Exception:  # the contrib's flat imports need evennia._init(); keep our copy
            DEFAULT_PROMPT_PREFIX = EVENNIA_PROMPT_PREFIX
        self.evennia_prefix = DEFAULT_PROMPT_PREFIX

    def describe(self):
        return (
            f"{self.sample_id}: {len(self.sessions)} of {self.session_count} sessions, "
            f"{len(self.turns)} turns, {len(self.questions)} questions; "
            f"{self.player_name} talks to {self.npc_name}"
        )

    def prompt(self, system, question_msg, npc=None, budget=DEFAULT_BUDGET):
        """
        The prompt ``system`` answers ``question_msg`` from, and the memories text in it.

        Args:
            system (str): a baseline name, or a strategy (then ``npc`` is its replayed
                :class:`PipelineNPC`).
            question_msg (dict): the question as a user message from speaker A.
            budget (int): the token budget (``truncate``).

        Returns:
            tuple: ``(list of {"role", "content"}, str or None)``.
        """
        if npc is not None:
            return npc.prompt_for(question_msg, question_msg["content"], self.player_name)
        if system == "window25":
            return window25_prompt(self.history, question_msg, self.npc_name, self.player_name,
                                   prefix=self.evennia_prefix), None
        return reply_prompt(self.history, self.counts, question_msg, self.persona, self.npc_name,
                            None if system == "full" else budget, self.model), None


def question_row(conv, system, q, prompt, memories, answer=None, error=None, answered=False,
                 question_line=None):
    """
    The result row of one question for one system (:func:`score_question` plus identifiers;
    with ``answered``, the answer, its error, LoCoMo's score and, for category 5, whether the
    answer asserts the adversarial answer). ``question_line`` is the prompt's line that asked
    (default: the question as speaker A says it), left out of the answer's search.
    """
    question_line = question_line or f"{conv.player_name}: {q['question']}"
    row = {
        "system": system, "conversation": conv.sample_id, "qa_index": q["index"],
        "category": q["category"], "question": q["question"], "gold": q["gold"],
        "evidence": q["evidence"],
        **score_question(q, prompt, question_line, conv.turn_texts, conv.model,
                         conv.said_texts),
        "memories_tokens": prompt_tokens([{"role": "system", "content": memories}], conv.model)
        if memories else 0,
    }
    if answered:
        row["answer"] = answer
        row["answer_error"] = error
        row["f1"] = metrics.locomo_f1(answer, q["gold"], q["category"])
        if q["category"] == metrics.ADVERSARIAL:
            row["asserted"] = (
                None if q["gold"] is None or answer is None
                else float(metrics.answer_score(q["gold"], [answer], 4) == 1.0)
            )
    return row


def run_system(conv, system, args, meter, progress, rows):
    """
    Replay ``conv`` for one system (nothing to replay for a baseline), then ask every question.

    Returns:
        dict: ``{"replay_s", "qa_s", "answer_errors"}`` plus :meth:`PipelineNPC.stats` and the
        sleep results for a strategy.
    """
    from ai_contrib.core.messages import make_message

    meter.system = system
    started = time.perf_counter()
    npc = None
    if system not in BASELINES:
        npc = PipelineNPC(system, conv.npc_name, conv.player, args.max_context_tokens)
        progress.stage(f"{conv.sample_id} {system} replay", len(conv.turns), "turn")
        npc.replay(conv.turns, on_message=lambda done, session: progress.update(
            done, session=session, llm_calls=meter.of(system)))
    replay_s = time.perf_counter() - started
    started = time.perf_counter()
    errors = 0
    progress.stage(f"{conv.sample_id} {system} questions", len(conv.questions), "q")
    questions = conv.questions if "afresh" in args.paths or npc is None else []
    for i, q in enumerate(questions):
        progress.update(i, llm_calls=meter.of(system))
        question_msg = make_message("user", q["question"], name=conv.player_name)
        prompt, memories = conv.prompt(system, question_msg, npc, args.max_context_tokens)
        answer = error = None
        if args.answer:
            answer, error = answer_question(prompt, conv.npc_name, args.model, args.answer_tokens)
            errors += bool(error)
        row = question_row(conv, system, q, prompt, memories, answer, error, args.answer)
        if args.keep_prompts:
            row["prompt"] = prompt
        rows.append(row)
    progress.update(len(conv.questions), llm_calls=meter.of(system))
    progress.close()
    if npc is not None and "game" in args.paths:
        errors += ask_in_game(conv, system, npc, args, meter, progress, rows)
    result = {"replay_s": replay_s, "qa_s": time.perf_counter() - started, "answer_errors": errors}
    if npc is not None:
        result.update(npc.stats(), sleep_results=npc.sleeps)
        # the next system's NPC talks to the player alone: a turn's reply is built for the
        # room's AI NPCs too, and they hear it
        npc.npc.location = None
    progress.note(
        f"{conv.sample_id} {system}: replay {replay_s:.1f} s, questions {result['qa_s']:.1f} s, "
        f"{meter.of(system)} LLM calls so far"
    )
    return result


#: the two lines that follow each question on the game path: the player stays on the subject,
#: as a player who did not get the whole answer would (the question repeated, so that each turn's
#: retrieval asks about the same subject)
FOLLOW_UPS = ("Can you tell me more about that? {question}",
              "What else comes to mind? {question}")
#: the player's line after each question's follow-ups with ``--small-talk``: a turn that asks
#: about nothing past, the baseline of the reply-time table (``docs/benchmarks.md``)
SMALL_TALK = "Thanks. Is the kitchen still open tonight?"
#: the NPC's stored reply on the game path when answers are not generated (``--answer`` off)
UNANSWERED_REPLY = "Let me think back on that."


def ask_in_game(conv, system, npc, args, meter, progress, rows):
    """
    The game path (``docs/benchmarks.md``): after the replay, the questions are asked one after
    another in the same talk, each followed by :data:`FOLLOW_UPS`, through
    :meth:`PipelineNPC.ask_in_game` (the prompt built as a reply builds it, the stored reply
    :data:`UNANSWERED_REPLY`) or, with ``--answer``, :meth:`PipelineNPC.say_in_game` (the
    NPC's own turn answers: the reply's request, the one a game sends); the lines and replies
    stay in the history and the recall notes shown stay shown, so each turn is one of an
    ongoing conversation. Rows are appended to ``rows`` with ``system``
    :func:`benchmarks.locomo_metrics.game_label` ``(system, turn)`` and the turn's recall
    figures; with ``--answer`` also ``server_prompt`` (the server's prompt figures:
    ``evaluated_tokens``, ``cached_tokens``, ``prompt_ms``...), ``warm_up_waited_s`` and
    ``cut_for_time``.

    Returns:
        int: answers that failed (``--answer``).
    """
    errors = 0
    from ai_contrib.core.tokens import count_message_tokens

    previous = None  # the last prompt: what the server's prefix cache holds
    if args.answer:
        previous = npc.warm_reply_cache()  # a talk under way: its last reply left it warm
    progress.stage(f"{conv.sample_id} {system} in a game", len(conv.questions), "q")
    for i, q in enumerate(conv.questions):
        progress.update(i, llm_calls=meter.of(system))
        lines = (q["question"],) + tuple(f.format(question=q["question"]) for f in FOLLOW_UPS)
        turns = list(enumerate(lines, 1)) + ([(metrics.SMALL_TALK_TURN, SMALL_TALK)]
                                             if args.small_talk else [])
        for turn, line in turns:
            typed = npc.type_line(line, args.typing_wpm) if args.answer else 0.0
            started = time.perf_counter()
            if args.answer:
                prompt, memories, recall, reply = npc.say_in_game(line)
                errors += not reply["answered"]
            else:
                prompt, memories, recall = npc.ask_in_game(line, lambda _: UNANSWERED_REPLY)
                reply = {"seconds": time.perf_counter() - started}
            row = question_row(conv, metrics.game_label(system, turn), q, prompt, memories,
                               answered=False, question_line=f"{conv.player_name}: {line}")
            if args.answer:
                row.update(server_prompt=reply["prompt"], warm_up_waited_s=reply["waited"],
                           cut_for_time=reply["cut_for_time"])
            row.update(turn_s=round(reply["seconds"], 3), typing_s=round(typed, 3),
                       evaluated_tokens=metrics.evaluated_tokens(previous, prompt,
                                                                 count_message_tokens),
                       asks=recall.get("asks"), allowance=recall.get("allowance"),
                       new_memory_tokens=recall.get("new_tokens", 0),
                       left_out_for_time=recall.get("left_out", 0)
                       if recall.get("room_limited") else 0,
                       dropped_notes=recall.get("dropped", 0),
                       leaving_notes=recall.get("leaving", 0))
            if args.keep_prompts:
                row["prompt"] = prompt
            rows.append(row)
            previous = prompt
    progress.update(len(conv.questions), llm_calls=meter.of(system))
    progress.close()
    return errors


def run_conversation(sample, systems, args, meter, progress, rows, stats, details,
                     on_system_done=None):
    """
    Replay one sample for every system and ask its questions: append to ``rows``, add the
    per-system figures to ``stats`` (``{system: Counter}``), put :func:`run_system`'s result
    into ``details[system]``, and call ``on_system_done()`` after each system.
    """
    conv = Conversation(sample, args.max_sessions, args.max_questions, args.model,
                        args.spread_questions)
    progress.note(conv.describe())
    for system in systems:
        result = run_system(conv, system, args, meter, progress, rows)
        details[system] = result
        entry = stats.setdefault(system, Counter())
        entry["conversations"] += 1
        entry["wall_s"] += result["replay_s"] + result["qa_s"]
        for key in ("replay_s", "qa_s", "answer_errors", "compactions", "failed_compactions",
                    "evictions", "masks", "facts", "facts_rejected", "facts_replaced",
                    "final_tokens", "fidelity_replaced", "fidelity_rejected",
                    "misquoted_summaries", "quotes_repaired", "invented_quotes_context",
                    "invented_quotes_journal", "journal_junk", "journal_classified"):
            entry[key] += result.get(key, 0)
        if system not in BASELINES:
            entry.setdefault("summary_fidelity", []).extend(result.get("summary_fidelity", []))
            entry.setdefault("facts_by_conversation", {})[conv.sample_id] = {
                "journaled": result.get("facts", 0), "rejected": result.get("facts_rejected", 0),
                "replaced": result.get("facts_replaced", 0)}
            worst = result.get("max_unsupported_share")
            if worst is not None:
                entry["max_unsupported_share"] = max(entry.get("max_unsupported_share", 0), worst)
        if on_system_done:
            on_system_done()


def finish_stats(stats, meter, systems):
    """Plain per-system dicts for the report (LLM calls and seconds from the meter)."""
    out = {}
    for system in systems:
        entry = dict(stats.get(system, {}))
        if system not in BASELINES and entry.get("conversations"):
            # a mean over conversations: a sum of end states means nothing
            entry["final_tokens"] = round(entry.get("final_tokens", 0) / entry["conversations"])
        else:
            entry.pop("final_tokens", None)
        entry["memory_calls"] = meter.of(system, "memory")
        entry["answer_calls"] = meter.of(system, "answer")
        entry["llm_calls"] = meter.of(system)
        entry["llm_seconds"] = meter.seconds_of(system)
        entry["llm_prompt_tokens"] = meter.tokens[(system, "prompt")]
        entry["llm_completion_tokens"] = meter.tokens[(system, "completion")]
        entry["summary_calls"] = meter.kind_of(system, "summary")
        entry["summary_completion_tokens"] = meter.kind_of(system, "summary", "completion")
        entry["extraction_calls"] = meter.kind_of(system, "extraction")
        entry["importance_calls"] = meter.kind_of(system, "importance")
        entry["compaction_s"] = meter.compaction_seconds[system]
        out[system] = entry
    return out


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="LoCoMo memory benchmark: replay conversations through the NPC memory "
        "pipeline and score the prompts built for the questions.")
    parser.add_argument("--data", default=DEFAULT_DATA, help="LoCoMo-format JSON file")
    parser.add_argument("--conversations", default="",
                        help="comma-separated sample_id values (default: all in the file)")
    parser.add_argument("--split", choices=sorted(SPLITS), default=None,
                        help="the tuning or the report set of the shipped conversations "
                        "(tuning: %s; report: %s)" % (", ".join(SPLITS["tuning"]),
                                                      ", ".join(SPLITS["report"])))
    parser.add_argument("--systems", default="",
                        help="comma-separated systems (default: every compaction strategy, "
                        "then window25, truncate, full)")
    parser.add_argument("--max-sessions", type=int, default=None,
                        help="replay only the first N sessions (questions about later ones "
                        "are skipped)")
    parser.add_argument("--max-questions", type=int, default=None,
                        help="ask at most N questions per conversation (file order)")
    parser.add_argument("--spread-questions", type=positive_int, default=None,
                        help="ask N answerable questions per conversation, evenly spaced over "
                        "its list (every kind in its share; the first N are mostly multi-hop "
                        "and temporal)")
    parser.add_argument("--max-context-tokens", type=int, default=DEFAULT_BUDGET,
                        help="the NPC's token budget (default %(default)s)")
    parser.add_argument("--paths", default="game,afresh",
                        help="how the questions are asked, comma-separated: 'game' (in the "
                        "flow of a talk that goes on, each with two follow-ups) and/or 'afresh' "
                        "(each question alone, no notes from earlier ones); default both")
    parser.add_argument("--answer", action="store_true",
                        help="let the LLM answer from each prompt and score LoCoMo's F1; on "
                        "the game path the NPC's own turn answers, as in a game")
    parser.add_argument("--small-talk", action="store_true",
                        help="on the game path, a line of small talk after each question's "
                        "follow-ups: with --answer, the reply-time table sets the replies to "
                        "questions beside it")
    parser.add_argument("--typing-wpm", type=float, default=0,
                        help="on the game path with --answer, the player types each line at "
                        "this many words a minute after the NPC's reply: the line is said "
                        "that long after the reply was stored, or when the turn's memory work "
                        "ends if later (default 0: at once, the strictest)")
    parser.add_argument("--answer-tokens", type=int, default=ANSWER_MAX_TOKENS,
                        help="max_tokens of each answer on the afresh path (default "
                        "%(default)s; the game path's replies take AI_LLM_MAX_REPLY_TOKENS)")
    parser.add_argument("--base-url", default=None,
                        help="OpenAI-compatible /v1 URL (default: the embedded model)")
    parser.add_argument("--model", default=None, help="model name sent to that server")
    parser.add_argument("--api-key", default=None, help="bearer token for that server")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds per LLM request (default %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads of the embedded model (default AI_EMBEDDED_THREADS)")
    parser.add_argument(
        "--memory-budget", type=int, default=None,
        help="AI_MEMORY_RETRIEVAL_TOKEN_BUDGET for the run (tokens; default: the shipped value)",
    )
    parser.add_argument(
        "--min-relative-score", type=float, default=None,
        help="AI_MEMORY_RETRIEVAL_MIN_RELATIVE_SCORE for the run (default: the shipped value); "
        "0 keeps every candidate that fits the budget",
    )
    parser.add_argument(
        "--context-weights", default=None, metavar="NEIGHBOUR,SESSION",
        help="AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT and _SESSION_WEIGHT for the run, e.g. 0,0 for "
        "the fused ranking alone (default: the shipped values)",
    )
    parser.add_argument(
        "--no-extraction", action="store_true",
        help="AI_PRE_COMPACT_EXTRACTION_ENABLED False for the run: no fact extraction before "
        "compactions (a `mask` replay then makes no LLM call)",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE",
        help="any contrib setting for the run, e.g. --set MEMORY_RETRIEVAL_MAX_ITEMS=12 (the "
        "value read as JSON where it parses, else as text; repeatable)",
    )
    parser.add_argument("--seed", type=int, default=int(os.environ.get("AI_LLM_SEED") or DEFAULT_SEED),
                        help="LLM sampling seed (default $AI_LLM_SEED or %(default)s)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--keep-prompts", action="store_true",
                        help="put every prompt into the JSON (large)")
    parser.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                        help="print the tables of earlier --json results combined (runs over "
                        "disjoint systems or conversations) instead of running")
    parser.add_argument("--workdir", default=None,
                        help="database, archives and Mem0 files (default: a temporary directory, "
                        "removed at the end)")
    args = parser.parse_args(argv)
    args.conversations = [c.strip() for c in args.conversations.split(",") if c.strip()]
    if args.split:
        if args.conversations:
            parser.error("--split and --conversations pick conversations both; give one")
        args.conversations = list(SPLITS[args.split])
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not args.paths or set(args.paths) - {"game", "afresh"}:
        parser.error("--paths takes 'game', 'afresh' or both")
    return args


def resolve_systems(requested):
    """The systems to run: ``requested`` checked against what exists, or all of them."""
    known = list(available_strategies()) + list(BASELINES)
    if not requested:
        return known
    unknown = [s for s in requested if s not in known]
    if unknown:
        raise SystemExit(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return list(dict.fromkeys(requested))


def run(args):
    """Set up Evennia and the LLM, run every conversation, return the result dict."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    samples = load_samples(args.data, args.conversations)
    workdir = args.workdir or tempfile.mkdtemp(prefix="ai-contrib-locomo-")
    os.environ.setdefault("MEM0_DIR", os.path.join(workdir, "mem0"))
    overrides = {
        "AI_LLM_BASE_URL": args.base_url,
        "AI_LLM_API_KEY": args.api_key,
        "AI_LLM_TIMEOUT": args.timeout,
        "AI_LLM_SEED": args.seed,
        "AI_MAX_CONTEXT_TOKENS": args.max_context_tokens,
        "AI_TICK_INTERVAL": 10**7,  # seconds: the replay drives every tick itself
        "AI_SLEEP_AFTER_IDLE": 0,  # sleep only between sessions
        "AI_SLEEP_DURATION": 0,  # until woken by the next session
        "AI_MEMORY_DIR": os.path.join(workdir, "memory"),
    }
    if args.model:
        overrides["AI_LLM_MODEL"] = args.model
    if args.memory_budget is not None:
        overrides["AI_MEMORY_RETRIEVAL_TOKEN_BUDGET"] = args.memory_budget
    if args.min_relative_score is not None:
        overrides["AI_MEMORY_RETRIEVAL_MIN_RELATIVE_SCORE"] = args.min_relative_score
    if args.no_extraction:
        overrides["AI_PRE_COMPACT_EXTRACTION_ENABLED"] = False
    if args.context_weights is not None:
        neighbour, session = (float(x) for x in args.context_weights.split(","))
        overrides["AI_MEMORY_RETRIEVAL_NEIGHBOUR_WEIGHT"] = neighbour
        overrides["AI_MEMORY_RETRIEVAL_SESSION_WEIGHT"] = session
    if args.threads:
        overrides["AI_EMBEDDED_THREADS"] = args.threads
    overrides.update(setting_overrides(args.set))
    from benchmarks._evennia_env import setup_evennia

    setup_evennia(workdir, **overrides)
    from django.conf import settings

    from ai_contrib.llm.client import reset_client
    from ai_contrib.settings import get_setting

    systems = resolve_systems(args.systems)
    args.model = args.model or get_setting("LLM_MODEL")
    progress = Progress()
    embedded = None
    if not args.base_url:
        from ai_contrib.llm.client import LLMClient, use_client
        from ai_contrib.llm.embedded import EmbeddedServerProcess

        progress.note("starting the embedded model server")
        embedded = EmbeddedServerProcess()
        server = embedded.start()
        settings.AI_LLM_BASE_URL = server.base_url
        settings.AI_LLM_API_KEY = server.api_key
        wait(reset_client())
        # known for the embedded model, as in a game: its prompt speed (the recall notes'
        # latency allowance), its context window and its sampling
        use_client(LLMClient(base_url=server.base_url, api_key=server.api_key, embedded=True))
    # the NPCs' budget fits the model's window (docs/design.md, "The budget fits the model"):
    # known before the first replay, so that every conversation runs under the same budget
    from ai_contrib.llm.client import get_client

    window = wait(get_client().context_window())
    progress.note(f"model context window: {window or 'unknown'} tokens")
    meter = CallMeter()
    meter.install()
    with open(args.data, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    data_path = os.path.abspath(args.data)
    config = {
        "data": os.path.relpath(data_path, ROOT) if data_path.startswith(ROOT) else args.data,
        "data_sha256": digest,
        "conversations": [str(s.get("sample_id")) for s in samples],
        "systems": systems,
        "max_context_tokens": args.max_context_tokens,
        "max_sessions": args.max_sessions,
        "max_questions": args.max_questions,
        "spread_questions": args.spread_questions,
        "answer": args.answer,
        "small_talk": args.small_talk,
        "typing_wpm": args.typing_wpm,
        "llm": args.base_url or "embedded",
        "model": args.model,
        "seed": args.seed,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                   f"Python {platform.python_version()}",
    }
    rows, stats, per_conversation = [], {}, {}
    started = time.perf_counter()

    def snapshot():
        done = [s for s in systems if s in stats]
        return {
            # tokens/s the latency allowance of the game path was reckoned with (assumed for
            # the embedded model until a reply measures it)
            "config": dict(config, systems_done=done, prompt_speed=get_client().prompt_speed),
            "wall_s": time.perf_counter() - started,
            "summary": metrics.aggregate(rows),
            "stats": finish_stats(stats, meter, done),
            "per_conversation": per_conversation,
            "questions": rows,
        }

    def save():  # after each system, so an interrupted run keeps what it finished
        if args.json:
            write_json(args.json, snapshot())

    try:
        for sample in samples:
            details = per_conversation.setdefault(str(sample.get("sample_id")), {})
            run_conversation(sample, systems, args, meter, progress, rows, stats, details, save)
    finally:
        if embedded is not None:
            embedded.stop()
        if not args.workdir:  # a temporary directory of our own: database, archives, Mem0
            shutil.rmtree(workdir, ignore_errors=True)
    return snapshot()


def write_json(path, result):
    """Write ``result`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = f"{path}.part"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1, ensure_ascii=False, default=str)
    os.replace(tmp, path)


def merge_results(results):
    """
    Combine results of runs over disjoint (system, conversation) pairs of the same data and
    budget (e.g. one process per system): question rows concatenated, per-system figures
    summed (``final_tokens`` averaged over conversations).

    Args:
        results (list[dict]): :func:`run` results (loaded from ``--json`` files).

    Returns:
        dict: a result of the same shape; ``wall_s`` is the longest run's, ``config["runs"]``
        lists each run's systems, conversations and wall time.

    Raises:
        SystemExit: when the runs used different data, budgets or models, or overlap.
    """
    if not results:
        raise SystemExit("nothing to merge")
    first = results[0]["config"]
    for result in results[1:]:
        config = result["config"]
        for key in ("data_sha256", "max_context_tokens", "max_sessions", "max_questions",
                    "spread_questions", "model", "seed", "answer"):
            if config.get(key) != first.get(key):
                raise SystemExit(f"cannot merge runs with different {key}: "
                                 f"{first.get(key)!r} and {config.get(key)!r}")
    seen, rows, stats, per_conversation, runs = set(), [], {}, {}, []
    systems, conversations = [], []
    for result in results:
        config = result["config"]
        done = config.get("systems_done", config["systems"])
        runs.append({"systems": done, "conversations": config["conversations"],
                     "wall_s": result.get("wall_s")})
        for row in result["questions"]:
            if metrics.label_system(row["system"]) in done:  # the game path's rows too
                rows.append(row)
        for conv_id, details in result.get("per_conversation", {}).items():
            for system, detail in details.items():
                if (system, conv_id) in seen:
                    raise SystemExit(f"{system} on {conv_id} is in more than one run")
                seen.add((system, conv_id))
                per_conversation.setdefault(conv_id, {})[system] = detail
        for system in done:
            entry = dict(result["stats"].get(system, {}))
            merged = stats.setdefault(system, {})
            n_before = merged.get("conversations", 0)
            n_new = entry.get("conversations", 0)
            tokens_before = merged.get("final_tokens")
            for key, value in entry.items():
                if key == "max_unsupported_share":
                    merged[key] = max(merged.get(key) or 0, value or 0)
                elif isinstance(value, list):
                    merged.setdefault(key, []).extend(value)
                elif isinstance(value, dict):
                    merged.setdefault(key, {}).update(value)
                elif isinstance(value, (int, float)) and key != "final_tokens":
                    merged[key] = merged.get(key, 0) + value
            if entry.get("final_tokens") is not None:
                total = (tokens_before or 0) * n_before + entry["final_tokens"] * n_new
                merged["final_tokens"] = round(total / max(1, n_before + n_new))
            if system not in systems:
                systems.append(system)
        for conv_id in config["conversations"]:
            if conv_id not in conversations:
                conversations.append(conv_id)
    # strategies first, in the order met, then the baselines in their usual order
    systems = [s for s in systems if s not in BASELINES] + [b for b in BASELINES if b in systems]
    config = dict(first, systems=systems, systems_done=systems, conversations=conversations,
                  runs=runs)
    return {
        "config": config,
        "wall_s": max((r.get("wall_s") or 0) for r in results),
        "summary": metrics.aggregate(rows),
        "stats": stats,
        "per_conversation": per_conversation,
        "questions": rows,
    }


def main(argv=None):
    args = parse_args(argv)
    if args.merge:
        results = []
        for path in args.merge:
            with open(path, encoding="utf-8") as fh:
                results.append(json.load(fh))
        result = merge_results(results)
    else:
        result = run(args)
    config = result["config"]
    systems = config.get("systems_done", config["systems"])
    report = metrics.format_report(result["summary"], systems, result["stats"], config["answer"],
                                   result["questions"])
    runs = config.get("runs")
    wall = (f"{len(runs)} runs merged, wall " + ", ".join(f"{r['wall_s']:.0f} s" for r in runs)
            if runs else f"total wall {result['wall_s']:.0f} s")
    print(f"# LoCoMo memory benchmark\n\n"
          f"{', '.join(config['conversations'])}; budget {config['max_context_tokens']} tokens; "
          f"LLM {config['llm']} ({config['model']}); seed {config['seed']}; "
          f"{config['machine']}; {wall}\n")
    print(report)
    sys.stdout.flush()
    if args.json:
        write_json(args.json, result)
        print(f"results written to {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
