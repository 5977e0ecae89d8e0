"""
Property tests for every compaction strategy on a real runtime history with its real JSONL
archive (memory/runtime.py, memory/archive.py), in random order so strategies also switch on a
live history:

- the call trail stays intact (every tool result follows its call; a call keeps all its results);
- archive references resolve (a masked output's ``seq`` is its original in the archive; a
  summary's ``first_seq``..``last_seq`` holds every message it replaced);
- the token count never grows, and the running total matches a recount;
- nothing is lost: every message ever appended is in the context or inside a summary's range;
- replaying the archive from scratch (a crash before any checkpoint) gives the same context.

Summaries are made-up short texts: the LLM is not what is under test here (see
tests/shell/npc/test_compaction_runner.py for the strategies on a real AssistantScript with the LLM
double).
Also: the structured-summary parser (core/structured.py).
"""

import os
import tempfile
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai_contrib.core import cascade, compaction
from ai_contrib.core.compaction import Snapshot, build_markers, get_strategy
from ai_contrib.core.masking import call_trail_intact, is_masked, parse_archive_ref, plan_masks
from ai_contrib.core.messages import is_marker, make_message, tool_call_ids
from ai_contrib.core.structured import (
    PREAMBLE,
    SECTIONS,
    canonical_section,
    normalise_summary,
    parse_sections,
    plan_replace_all,
    render_sections,
)
from ai_contrib.core.summary import make_marker
from ai_contrib.core.tokens import count_conversation_tokens
from ai_contrib.memory.archive import MessageArchive
from ai_contrib.memory.runtime import RuntimeHistory
from ai_contrib.npc.compaction_runner import apply_masks_to_runtime, apply_plan

WORDS = ["silver", "room", "map", "stew", "Bob", "Mara", "well", "forge", "debt", "east"]


# -- building conversations ------------------------------------------------------------------

event = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 40)),
    st.tuples(st.just("reply"), st.integers(1, 40)),
    st.tuples(st.just("tools"), st.lists(st.integers(0, 200), min_size=1, max_size=3)),
    st.tuples(st.just("abandoned"), st.just(0)),
)


def text(size, salt):
    return " ".join(WORDS[(salt + i) % len(WORDS)] for i in range(size))


def append_events(runtime, events, counter):
    for kind, arg in events:
        counter[0] += 1
        n = counter[0]
        if kind == "user":
            runtime.append(make_message("user", text(arg, n), name="Bob"))
        elif kind == "reply":
            runtime.append(make_message("assistant", text(arg, n), name="Marta"))
        elif kind == "abandoned":  # a call whose result never came
            call = {"id": f"a{n}", "type": "function",
                    "function": {"name": "look", "arguments": "{}"}}
            runtime.append(make_message("assistant", "", tool_calls=[call]))
        else:
            calls = [{"id": f"c{n}_{k}", "type": "function",
                      "function": {"name": f"tool{k}", "arguments": "{}"}} for k in range(len(arg))]
            runtime.append(make_message("assistant", "", tool_calls=calls))
            for call, size in zip(calls, arg):
                runtime.append(make_message("tool", text(size, n), tool_call_id=call["id"]))


# -- the strategies, through the engine's own pure plans and judges ----------------------------
# The shell (ai_contrib/npc/compaction_runner.py) runs the same steps: snapshot -> plan -> the LLM
# step ->
# build_markers -> apply_plan; only the LLM step is replaced here, by made-up notes.

OPTIONS = {
    "compact_sleep_threshold": 0.7, "compact_emergency_threshold": 0.8,
    "preserve_fraction": 0.2, "cascade_pressure_window": 0.4, "keep_ids": (),
}


def notes(messages):
    return f"Notes on {len(messages)} messages."


def snapshot(runtime, budget, force, trigger="manual", **options):
    history = list(runtime.messages)
    return Snapshot(history, runtime.token_counts(history), runtime.tokens, budget, trigger,
                    force, dict(OPTIONS, **options))


def write(plan):
    """The LLM step, made up: one text per span (a promoted tier keeps its summary's text)."""
    texts = []
    for span in plan.spans:
        if span.promote:
            texts.append(cascade.summary_text_of(span.messages[0]))
        elif span.tier == cascade.TIER_LONG:
            texts.append(f"Older: {len(span.messages)} summaries.")
        elif plan.strategy == "replace_all":
            texts.append("## Confirmed Facts\n- " + notes(span.messages))
        else:
            texts.append(notes(span.messages))
    return texts


def run(runtime, name, snap):
    """One summarising compaction of strategy ``name`` through the real plan and judge;
    returns the plan (skipped or applied) and the judge's problem."""
    plan = compaction.plan(get_strategy(name), snap)
    if plan.skipped:
        return plan, None
    markers, _tokens, problem = build_markers(plan, write(plan), min_saving_tokens=1)
    if problem is None:  # the shell refuses summaries that do not save
        apply_plan(runtime, plan, markers, trigger="test")
    return plan, problem


def do_mask(runtime, window, min_tokens):
    plan = plan_masks(runtime.messages, runtime.token_counts(), window=window,
                      min_tokens=min_tokens, model=runtime.ledger.model)
    apply_masks_to_runtime(runtime, plan, trigger="test")


def do_summary(runtime, preserve_window, budget):
    run(runtime, "summary", snapshot(runtime, budget, True,
                                     compact_preserve_window=preserve_window))


def do_cascade(runtime, immediate, recent, force, budget=10**9):
    # trigger "turn": only ``force`` brings a cycle forward (then the window is fitted to
    # cascade_pressure_window of ``budget``)
    run(runtime, "cascade", snapshot(runtime, budget, force, trigger="turn",
                                     cascade_immediate_window=immediate,
                                     cascade_recent_window=recent))


def do_replace_all(runtime, keep_tail):
    # the last ``keep_tail`` messages await an answer: they stay, whatever else is replaced
    waiting = [m["id"] for m in runtime.messages[len(runtime.messages) - keep_tail:]] \
        if keep_tail else []
    run(runtime, "replace_all", snapshot(runtime, 10**9, True, keep_ids=waiting))
    assert set(waiting) <= {m["id"] for m in runtime.messages}


op = st.one_of(
    st.tuples(st.just("append"), st.lists(event, min_size=1, max_size=25)),
    st.tuples(st.just("mask"), st.integers(0, 6), st.integers(0, 60)),
    st.tuples(st.just("summary"), st.integers(0, 10), st.integers(50, 3000)),
    st.tuples(st.just("hybrid"), st.integers(0, 6), st.integers(0, 10), st.integers(50, 3000)),
    st.tuples(st.just("cascade"), st.integers(0, 6), st.integers(1, 6), st.booleans(),
              st.integers(50, 3000)),
    st.tuples(st.just("replace_all"), st.integers(0, 3)),
)


def apply_op(runtime, step, counter):
    name = step[0]
    if name == "append":
        append_events(runtime, step[1], counter)
    elif name == "mask":
        do_mask(runtime, step[1], step[2])
    elif name == "summary":
        do_summary(runtime, step[1], step[2])
    elif name == "hybrid":
        do_mask(runtime, step[1], 0)
        do_summary(runtime, step[2], step[3])
    elif name == "cascade":
        do_cascade(runtime, step[1], step[2], step[3], step[4])
    else:
        do_replace_all(runtime, step[1])


# -- the invariants ------------------------------------------------------------------------------

def check_invariants(runtime, archive):
    messages = runtime.messages
    archived = {m["id"]: m for m in archive.messages()}
    # call trail: results follow their calls, and a call in context keeps all its results
    assert call_trail_intact(messages)
    in_context = {m["id"] for m in messages}
    results_of = {}
    for msg in archived.values():
        if msg["role"] == "tool":
            results_of.setdefault(msg["tool_call_id"], []).append(msg["id"])
    for msg in messages:
        for call_id in tool_call_ids(msg):
            assert set(results_of.get(call_id, [])) <= in_context
    # archive refs resolve to the originals
    for msg in messages:
        if is_masked(msg):
            (original,) = archive.messages(msg["seq"], msg["seq"])
            assert parse_archive_ref(msg["content"]) == msg["seq"] == original["seq"]
            assert original["id"] == msg["id"] and not is_masked(original)
            assert original["tool_call_id"] == msg["tool_call_id"]
    # nothing lost: each archived message is in context or inside a summary's archive range
    ranges = [((m["metadata"] or {}).get("first_seq"), (m["metadata"] or {}).get("last_seq"))
              for m in messages if is_marker(m)]
    for msg_id, msg in archived.items():
        if msg_id in in_context:
            continue
        assert any(lo is not None and lo <= msg["seq"] <= hi for lo, hi in ranges), msg
    # the runtime holds no message that was never archived (markers are in compaction records)
    assert all(is_marker(m) or m["id"] in archived for m in messages)
    # the running total is right
    assert runtime.tokens == count_conversation_tokens(messages, runtime.ledger.model)


@contextmanager
def archived_runtime():
    """An empty runtime history over a message archive in a temporary folder, as ``(path of the
    archive, archive, runtime)``; the archive is closed and the folder removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "npc.jsonl")
        archive = MessageArchive(path)
        try:
            yield path, archive, RuntimeHistory(archive, [], -1)
        finally:
            archive.close()


def replayed(path):
    fresh = MessageArchive(path)
    try:
        return RuntimeHistory(fresh, [], -1).messages
    finally:
        fresh.close()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, min_size=1, max_size=40), st.lists(op, min_size=1, max_size=8))
def test_every_strategy_in_any_order_keeps_the_invariants(first, steps):
    with archived_runtime() as (path, archive, runtime):
        counter = [0]
        append_events(runtime, first, counter)
        check_invariants(runtime, archive)
        for step in steps:
            before = runtime.tokens
            apply_op(runtime, step, counter)
            if step[0] != "append":
                assert runtime.tokens <= before, step
            check_invariants(runtime, archive)
        # a crash before any checkpoint: the archive alone rebuilds the same context
        again = replayed(path)
        assert [(m["id"], m["content"]) for m in again] == [
            (m["id"], m["content"]) for m in runtime.messages]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(event, min_size=1, max_size=20), min_size=1, max_size=6),
       st.integers(0, 6), st.integers(1, 6), st.booleans())
def test_cascade_cycles_shrink_tier_correctly_and_replay(batches, immediate, recent, force):
    with archived_runtime() as (path, archive, runtime):
        counter = [0]
        for batch in batches:
            append_events(runtime, batch, counter)
            before = runtime.tokens
            raw_before = cascade.raw_count(runtime.messages)
            do_cascade(runtime, immediate, recent, force)
            check_invariants(runtime, archive)
            assert runtime.tokens <= before
            tiers = [cascade.tier_of(m) for m in runtime.messages if is_marker(m)]
            assert tiers.count(cascade.TIER_SHORT) <= 1 and tiers.count(cascade.TIER_LONG) <= 1
            if cascade.TIER_LONG in tiers:  # the long-term summary comes first
                assert tiers[0] == cascade.TIER_LONG
            # markers only ever lead the history; the immediate window stays verbatim
            flags = [is_marker(m) for m in runtime.messages]
            assert flags == sorted(flags, reverse=True)
            assert cascade.raw_count(runtime.messages) >= min(immediate, raw_before)
        assert [m["id"] for m in replayed(path)] == [m["id"] for m in runtime.messages]


# -- structured summaries ------------------------------------------------------------------------

line = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ,.", min_size=1, max_size=30).map(
    lambda s: "- " + s.strip() + "x")
bodies = st.lists(line, min_size=1, max_size=4).map("\n".join)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(SECTIONS), bodies, max_size=7), st.one_of(st.none(), bodies))
def test_render_then_parse_gives_the_sections_back(sections, preamble):
    if preamble:
        sections = {PREAMBLE: preamble, **sections}
    assert parse_sections(render_sections(sections)) == sections


heading_styles = st.sampled_from(["## {}", "**{}**", "{}:", "### {}:", "1. {}", "**{}:**"])
renamings = st.sampled_from([
    ("People", SECTIONS[0]), ("Who I talked to", SECTIONS[0]), ("Facts", SECTIONS[1]),
    ("Key facts", SECTIONS[1]), ("Promises", SECTIONS[2]), ("Quests", SECTIONS[2]),
    ("Decisions", SECTIONS[3]), ("Open issues", SECTIONS[4]), ("Questions", SECTIONS[4]),
    ("Relationships", SECTIONS[5]), ("Places and events", SECTIONS[6]),
    ("Important references", SECTIONS[6]),
] + [(title, title) for title in SECTIONS])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(renamings, heading_styles, bodies), min_size=1, max_size=6))
def test_renamed_or_restyled_sections_map_to_the_fixed_names_and_lose_no_text(parts):
    text = "\n".join(style.format(title) + "\n" + body for (title, _), style, body in parts)
    parsed = parse_sections(text)
    assert set(parsed) == {canonical for (_, canonical), _, _ in parts}
    out = normalise_summary(text)
    for (_, canonical), _, body in parts:
        assert f"## {canonical}" in out
        for body_line in body.splitlines():
            assert body_line in parsed[canonical] and body_line in out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(line, st.sampled_from(["", "Notes", "Bob: hi", "## Misc"])), max_size=12))
def test_normalising_never_drops_a_content_line(lines):
    text = "\n".join(lines)
    out = normalise_summary(text)
    for ln in lines:
        if ln.startswith("- "):
            assert ln in out


def test_parser_examples():
    text = (
        "Here are my notes.\n"
        "## People\n- Bob wants a room\n"
        "**Promises and deals:**\n- I promised Bob the east room\n"
        "Open Questions: who stole the map\n"
        "## Weather\n- rain\n"
        "## Who I met\n- Mara"
    )
    assert parse_sections(text) == {
        PREAMBLE: "Here are my notes.",
        SECTIONS[0]: "- Bob wants a room\n- Mara",
        SECTIONS[2]: "- I promised Bob the east room",
        SECTIONS[4]: "who stole the map",
        "Weather": "- rain",
    }
    assert normalise_summary(text).splitlines()[:3] == [
        "Here are my notes.", "", "## Who I Spoke With"]
    assert normalise_summary("Bob: hello\nI sold a map.") == "Bob: hello\nI sold a map."
    assert parse_sections("") == {} and normalise_summary(None) == ""
    assert canonical_section("Open questions about people") == SECTIONS[4]
    assert canonical_section("Weather") is None
    assert canonical_section("## Confirmed Facts:") == SECTIONS[1]


def test_base_prompt_and_replace_all_plan_examples():
    from ai_contrib.core.structured import BASE_SUMMARY_INSTRUCTION, base_prompt_text

    msgs = [make_message("user", "I lost my ring", name="Mara"),
            make_message("assistant", "I will look for it.", name="Marta")]
    text = base_prompt_text(msgs, previous_summary="Mara owes me 3 silver.")
    assert text == (
        f"{BASE_SUMMARY_INSTRUCTION}\n\nEarlier notes:\nMara owes me 3 silver.\n\n"
        "Mara (user): I lost my ring\nMarta (assistant): I will look for it.\nSUMMARY:\n"
    )
    assert base_prompt_text(msgs, "Summarize these memories in 2-3 sentences:").startswith(
        "Summarize these memories in 2-3 sentences:\n\nMara (user)")
    # replace_all: everything, or everything but speech still waiting for an answer
    assert plan_replace_all([]) == ([], [], "no history")
    assert plan_replace_all(msgs) == (msgs, [], None)
    assert plan_replace_all(msgs, keep_tail=1) == (msgs[:1], msgs[1:], None)
    assert plan_replace_all(msgs, keep_tail=2)[2] == "nothing to compact"
    marker = make_marker("notes", msgs, 20, 2)
    assert plan_replace_all([marker])[2] == "nothing to compact"
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    pending = msgs + [make_message("assistant", "", tool_calls=[call])]
    # a call still waiting for its result stays with the tail (it would be orphaned otherwise)
    assert plan_replace_all(pending) == (msgs, pending[2:], None)
