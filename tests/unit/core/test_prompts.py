"""
``core.prompts.clean_reply`` cuts the prompt's own notes from a model's reply (``docs/design.md``,
"Sampling per server and model"): a model that runs on after its answer copies the ``[SCENE]``,
the lore, the memories or a summary it was shown; none of it is said or stored.
"""

import pytest

from ai_contrib.core.lore import format_lore
from ai_contrib.core.masking import MASK_PREFIX
from ai_contrib.core.messages import SUMMARY_PREFIX
from ai_contrib.core.prompts import NOTE_HEADINGS, clean_reply, note_start
from ai_contrib.core.scene import render_scene
from ai_contrib.memory.retrieval import EXPERIENCES_HEADER, MEMORIES_HEADER

ANSWER = "Aye, Wren, the griffin nests on the north crag."


def _notes():
    """Every kind of note the reply prompt shows, as it shows it."""
    return [
        render_scene({"name": "The Sleeping Stag", "desc": "A low-beamed inn."},
                     [{"dbref": "#5", "name": "Wren", "known": True, "last_spoke_ago": "1 day"}],
                     {"time_of_day": "evening", "day": 3, "season": "spring"}),
        format_lore([{"text": "Griffins nest on the north crag."}]),
        f"{MEMORIES_HEADER}\n- Wren likes plum wine (told by Wren)",
        f"{EXPERIENCES_HEADER}\n- We talked about the harvest.",
        f"{SUMMARY_PREFIX}\n- Wren asked about the crag.",
        "[CONTEXT SYNTHESIS]\nWe talked about the harvest.",
        f"{MASK_PREFIX}seq 3] read_ledger: ok",
        "FACTS YOU MUST NEVER FORGET:\n- The well is poisoned.",
        "[LORE] Griffins nest on the north crag.",  # a tag of the model's own making
    ]


@pytest.mark.parametrize("note", _notes())
def test_a_reply_that_runs_on_into_a_note_ends_where_the_note_starts(note):
    # on the next line, as a small model writes it, or on the same line
    assert clean_reply(f"{ANSWER}\n{note}", "Marta") == ANSWER
    assert clean_reply(f"{ANSWER} {note}", "Marta") == ANSWER
    # a reply that is nothing but a note is empty: the NPC says its fallback line
    assert clean_reply(note, "Marta") == ""
    assert clean_reply(f"Marta: {note}", "Marta") == ""


def test_the_headings_are_the_ones_the_prompt_shows():
    assert format_lore([{"text": "x"}]).splitlines()[0] in NOTE_HEADINGS
    assert {MEMORIES_HEADER, EXPERIENCES_HEADER} <= set(NOTE_HEADINGS)


def test_words_that_only_look_like_notes_are_kept():
    kept = [
        ANSWER,
        "[laughs] Welcome back.",              # a stage direction, lower case
        "What you know: the crag is steep.",   # a heading's words, not the heading
        "Use the [Old Road], not the new one.",
        "I said NO to him: never again.",
    ]
    for text in kept:
        assert note_start(text) is None, text
        assert clean_reply(text, "Marta") == text
    # the positive control: the same replies with a note after them lose the note
    for text in kept:
        assert clean_reply(f"{text} [SCENE] You are in the inn.", "Marta") == text


def test_the_history_never_takes_more_than_its_budget_stamps_and_a_long_line_included():
    from ai_contrib.core.messages import make_message
    from ai_contrib.core.prompts import assemble_reply_prompt
    from ai_contrib.core.tokens import count_tokens

    def history_tokens(parts):
        return sum(p["tokens"] for p in parts if p["part"] in ("history", "turn", "summary"))

    lines = [make_message("user", f"line {i} " + "word " * 60, name="Bob",
                          metadata={"speaker": "#1"}) for i in range(5)]
    counts = [count_tokens(m["content"]) for m in lines]
    # two lines fit a 140-token budget by their own tokens, not with the first one's stamp
    messages, parts = assemble_reply_prompt("P", "Marta", lines, counts, 140)
    assert history_tokens(parts) <= 140
    assert [m["content"].endswith(lines[4]["content"]) for m in messages[1:]] == [True]
    # the control: with room for the stamp, both are shown
    messages, parts = assemble_reply_prompt("P", "Marta", lines, counts, 160)
    assert len(messages) == 3 and history_tokens(parts) <= 160
    # a window's share of the budget may be passed, never the NPC's whole budget
    messages, parts = assemble_reply_prompt("P", "Marta", lines, counts, 300, max_tokens=100)
    assert len(messages) == 2 and history_tokens(parts) <= 100
    # one line larger than the whole budget is cut at its end, never dropped
    big = make_message("user", "The ferry is late. " + "word " * 600, name="Bob",
                       metadata={"speaker": "#1"})
    messages, parts = assemble_reply_prompt("P", "Marta", [big], [count_tokens(big["content"])],
                                            100)
    assert history_tokens(parts) <= 100 and count_tokens(messages[1]["content"]) <= 100
    assert "The ferry is late." in messages[1]["content"]
    assert messages[1]["content"].endswith(" ...")


def test_a_prompts_sizes_sum_to_what_counting_it_afresh_gives():
    """The deadline weighs a reply prompt by the counts it was built with
    (``assemble_sized_reply_prompt``'s sizes) instead of counting it again: on a prompt with
    every kind of message they stay within a token or two a message of a full count."""
    from ai_contrib.core.messages import SUMMARY_PREFIX, make_message
    from ai_contrib.core.prompts import assemble_reply_prompt, assemble_sized_reply_prompt
    from ai_contrib.core.tokens import count_conversation_tokens, count_message_tokens

    said = [
        make_message("system", f"{SUMMARY_PREFIX}\n- Wren asked about the crag, twice."),
        make_message("user", "Evening, Marta. Is the east room still free tonight?", name="Wren",
                     metadata={"speaker": "#5"}),
        make_message("assistant", "It is, Wren: two silver, breakfast included."),
        make_message("user", "She always says that.", name="Tamsin",
                     metadata={"speaker": "#6", "addressed": False}),
        make_message("user", "(Tamsin smiles.)", metadata={"speaker": "#6", "kind": "event"}),
        make_message("user", "And the griffin on the north crag, have you seen it?", name="Wren",
                     metadata={"speaker": "#5"}),
    ]
    counts = [count_message_tokens(m) for m in said]
    note = f"{MEMORIES_HEADER}\n- Wren likes plum wine (told by Wren)"
    notes = [{"anchor": said[-1]["id"], "text": note, "tokens": 0, "new": True}]
    standing = [{"part": "lore", "text": format_lore([{"text": "Griffins nest on the crag."}]),
                 "tokens": 0}]
    messages, parts, sizes, ids = assemble_sized_reply_prompt(
        "A stout innkeeper.", "Marta", said, counts, 10_000, notes=notes, standing=standing,
        keep_ids=[said[-1]["id"]])
    # the history id each message shows: none for the system message and the note before the
    # turn, which it is anchored at
    assert ids == [None] + [m["id"] for m in said[:-1]] + [None, said[-1]["id"]]
    assert messages[-2]["content"] == note
    assert (messages, parts) == assemble_reply_prompt(
        "A stout innkeeper.", "Marta", said, counts, 10_000, notes=notes, standing=standing,
        keep_ids=[said[-1]["id"]])
    assert len(sizes) == len(messages) == 1 + len(said) + 1  # system, history, the note
    full = [count_message_tokens(m) for m in messages]
    for size, counted, message in zip(sizes, full, messages):
        assert abs(size - counted) <= 3, (size, counted, message["content"])
    total = count_conversation_tokens(messages)
    assert abs(sum(sizes) - total) <= len(messages)
    assert total > 150  # the control: a prompt worth weighing, and every message sized
    # sizes follow the counts the prompt was built with: a count of its own would not
    bigger = assemble_sized_reply_prompt("A stout innkeeper.", "Marta", said,
                                         [c + 10 for c in counts], 10_000)[2]
    assert sum(bigger) == sum(assemble_sized_reply_prompt(
        "A stout innkeeper.", "Marta", said, counts, 10_000)[2]) + 10 * len(said)
