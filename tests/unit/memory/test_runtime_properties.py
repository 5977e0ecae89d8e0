"""
Property tests for the storage shell: :class:`RuntimeHistory` over a real JSONL
:class:`MessageArchive` in a temporary directory (no Evennia needed).

A hypothesis state machine runs random sequences of

- appends (chat lines, tool-call groups, text with any characters),
- compactions, split as in ``rag_memory``: a plan is made over a snapshot (``plan_compaction``),
  other operations may run while "the summary is being written", then a marker is spliced over
  the planned range (``apply_compaction``) -- or refused, when the range is gone,
- evictions of messages (never summaries, as ``evict_overflow`` does),
- checkpoints (a deep copy of the runtime list and the archive seq, as
  ``AssistantScript.checkpoint`` pickles it), and
- crashes: the runtime is dropped, sometimes with a torn half-written record at the end of the
  archive, and rebuilt from a checkpoint taken at a random earlier point plus the archive.

After every step (source: ``docs/design.md``, "The archive": lossy in runtime, lossless in
persistence):

- every archived message is in the runtime context (with the archived content), or inside
  exactly one in-context summary's ``[first_seq, last_seq]`` range, or was evicted (an evict
  record names it); no message in context lies inside a summary's range;
- order is kept: the context reads as increasing archive ranges;
- no id (summary or message) appears twice;
- the running token total equals a full recount;
- a rebuild after a crash equals the state before the crash.
"""

import copy
import json
import os
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ai_contrib.core.cuts import plan_compaction
from ai_contrib.core.messages import is_marker, make_message
from ai_contrib.core.splice import SpliceError
from ai_contrib.core.summary import make_marker
from ai_contrib.core.tokens import count_conversation_tokens, count_tokens
from ai_contrib.memory.archive import MessageArchive
from ai_contrib.memory.runtime import RuntimeHistory

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
words = st.lists(st.sampled_from(["ale", "room", "silver", "Bob", "map", "stew"]), max_size=12)


def _frozen(messages):
    """The messages as they survive a round trip through JSON (what a rebuild reads back)."""
    return json.loads(json.dumps(messages, ensure_ascii=False, default=str))


def _snapshot(runtime):
    """Everything a crash must not change: the messages (deep), the total, the archive end."""
    return _frozen(runtime.messages), runtime.tokens, runtime.archive.last_seq


def _is_summary(msg):
    """A marker made by a compaction. A system line that merely starts with
    ``[CONTEXT SUMMARY]`` (``is_marker`` accepts those, for histories from older code) is an
    archived message like any other, with a seq and no range."""
    return is_marker(msg) and (msg.get("metadata") or {}).get("type") == "compaction"


def _span(msg):
    if _is_summary(msg):
        meta = msg["metadata"]
        return meta["first_seq"], meta["last_seq"]
    return msg["seq"], msg["seq"]


class RuntimeMachine(RuleBasedStateMachine):
    """Drives one NPC's runtime history and archive through random operations."""

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="ai-runtime-prop-")
        self.path = os.path.join(self.dir, "npc.jsonl")
        self.archive = MessageArchive(self.path)
        self.runtime = RuntimeHistory(self.archive, [], -1)
        self.checkpoints = [([], -1)]
        self.pending = []  # compaction plans whose summary is "being written"
        self.markers_made = 0

    def teardown(self):
        self.archive.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- operations ------------------------------------------------------------------------

    @initialize(lines=st.integers(0, 8))
    def some_history(self, lines):
        for i in range(lines):
            self.runtime.append(make_message("user" if i % 2 == 0 else "assistant", f"line {i}"))

    @rule(role=st.sampled_from(["user", "assistant", "system"]), content=texts,
          name=st.sampled_from([None, "Bob", "Marta", "Old Tom"]))
    def append(self, role, content, name):
        msg = self.runtime.append(make_message(role, content, name=name))
        assert msg["seq"] == self.archive.last_seq

    @rule(results=st.integers(0, 2), answered=st.booleans())
    def append_tool_group(self, results, answered):
        calls = [
            {"id": f"call{self.archive.last_seq + 1}_{k}", "type": "function",
             "function": {"name": "journal_add", "arguments": json.dumps({"k": k})}}
            for k in range(max(1, results))
        ]
        self.runtime.append(make_message("assistant", "", tool_calls=calls))
        for call in calls[: results if answered else results // 2]:
            self.runtime.append(make_message("tool", "ok", tool_call_id=call["id"]))

    @rule(window=st.integers(0, 6), budget=st.integers(0, 400),
          fraction=st.sampled_from([0.0, 0.1, 0.2, 0.5]))
    def plan(self, window, budget, fraction):
        history = list(self.runtime.messages)
        plan = plan_compaction(history, self.runtime.token_counts(history), budget, window,
                               preserve_fraction=fraction)
        if not plan.skipped:
            self.pending.append(plan)

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), summary=words)
    def apply(self, data, summary):
        plan = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        text = " ".join(summary) or "nothing"
        marker = make_marker(text, plan.to_compact, original_token_count=plan.compact_tokens,
                             summary_token_count=count_tokens(text), trigger="sleep")
        first, last = plan.to_compact[0]["id"], plan.to_compact[-1]["id"]
        ids = [m["id"] for m in self.runtime.messages]
        can_splice = first in ids and last in ids and ids.index(first) <= ids.index(last)
        before = _snapshot(self.runtime)
        try:
            removed = self.runtime.apply_compaction(marker, first, last, trigger="sleep")
        except SpliceError:
            # the range went away while the summary was pending: nothing may change
            assert not can_splice
            assert _snapshot(self.runtime) == before
            return
        assert can_splice
        self.markers_made += 1
        assert [m["id"] for m in removed] == ids[ids.index(first) : ids.index(last) + 1]
        records = list(self.archive.records(start_seq=self.archive.last_seq))
        assert records[0]["kind"] == "compaction" and records[0]["marker"]["id"] == marker["id"]

    @precondition(lambda self: any(not is_marker(m) for m in self.runtime.messages))
    @rule(data=st.data())
    def evict(self, data):
        candidates = [m["id"] for m in self.runtime.messages if not is_marker(m)]
        chosen = data.draw(st.lists(st.sampled_from(candidates), min_size=1, unique=True))
        before = len(self.runtime.messages)
        removed = self.runtime.evict(chosen, reason="context full")
        assert sorted(m["id"] for m in removed) == sorted(chosen)
        assert len(self.runtime.messages) == before - len(chosen)
        assert self.archive.records(start_seq=self.archive.last_seq).__next__()["kind"] == "evict"

    @rule()
    def checkpoint(self):
        # the Attribute is a pickled copy: later changes to the live list must not reach it
        self.checkpoints.append((copy.deepcopy(self.runtime.messages), self.archive.last_seq))

    @rule(data=st.data(), torn=st.booleans())
    def crash(self, data, torn):
        before = _snapshot(self.runtime)
        messages, seq = self.checkpoints[data.draw(st.integers(0, len(self.checkpoints) - 1))]
        self.archive.close()
        if torn:
            # kill -9 in the middle of writing the next record
            with open(self.path, "ab") as fh:
                fh.write(b'{"seq": %d, "kind": "message", "msg": {"id": "torn", "con'
                         % (self.archive.last_seq + 1))
        self.archive = MessageArchive(self.path)
        self.runtime = RuntimeHistory(self.archive, copy.deepcopy(messages), seq)
        self.pending = []  # the summary calls died with the process
        assert _snapshot(self.runtime) == before

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def ids_are_unique(self):
        ids = [m["id"] for m in self.runtime.messages]
        assert len(ids) == len(set(ids))

    @invariant()
    def ledger_matches_recount(self):
        assert self.runtime.tokens == count_conversation_tokens(self.runtime.messages)
        assert len(self.runtime.ledger) == len(self.runtime.messages)

    @invariant()
    def order_is_kept(self):
        spans = [_span(m) for m in self.runtime.messages]
        for (lo, hi), (next_lo, _) in zip(spans, spans[1:]):
            assert lo <= hi < next_lo, spans

    @invariant()
    def nothing_is_lost(self):
        context = {m["id"]: m for m in self.runtime.messages}
        ranges = [_span(m) for m in self.runtime.messages if _is_summary(m)]
        evicted = set()
        archived = []
        for record in self.archive.records():
            if record["kind"] == "evict":
                evicted.update(record["ids"])
            elif record["kind"] == "message":
                archived.append(record["msg"])
        assert len(archived) == len({m["id"] for m in archived})
        for msg in archived:
            covering = sum(1 for lo, hi in ranges if lo <= msg["seq"] <= hi)
            if msg["id"] in context:
                assert covering == 0, msg
                assert _frozen(context[msg["id"]]) == msg
            else:
                assert covering == 1 or (covering == 0 and msg["id"] in evicted), msg
        # everything in context that is not a summary came from the archive
        archived_ids = {m["id"] for m in archived}
        assert all(m["id"] in archived_ids for m in self.runtime.messages if not _is_summary(m))


RuntimeMachine.TestCase.settings = settings(
    max_examples=1000,
    stateful_step_count=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestRuntimeHistoryProperties = RuntimeMachine.TestCase
