"""
When a line was said, in the reply prompt: one stamp per resumed conversation
(``core.prompts.resumption_stamps``; ``docs/design.md``, "Prompt structure", "When it was said").
"""

from ai_contrib.core.messages import make_message
from ai_contrib.core.prompts import (
    RESUME_SECONDS, assemble_reply_prompt, build_reply_messages, resumption_stamps)
from ai_contrib.core.tokens import count_message_tokens, count_tokens


def _at(role, text, when, name=None):
    return make_message(role, text, name=name or ("Marta" if role == "assistant" else "Bob"),
                        timestamp=when)


def _talk():
    return [
        _at("user", "A room, please.", "2026-11-20T10:00:00+00:00"),
        _at("assistant", "The east room, Bob.", "2026-11-20T10:00:05+00:00"),
        _at("user", "Thanks.", "2026-11-20T10:40:00+00:00"),  # 40 minutes: the same talk
        # two days later the NPC greets first: its own line takes no stamp, the player's does
        _at("assistant", "Back already?", "2026-11-22T09:00:00+00:00"),
        _at("user", "The road was flooded.", "2026-11-22T09:01:00+00:00", name="Ann"),
        _at("user", "Same here.", "2026-11-22T09:02:00+00:00"),
    ]


def test_the_first_line_and_each_resumed_talk_get_their_time():
    assert resumption_stamps(_talk()) == [
        "2026-11-20 10:00", "", "", "", "2026-11-22 09:01", ""]


def test_a_silence_just_under_the_limit_is_the_same_talk():
    start = "2026-11-20T10:00:00+00:00"
    under = _at("user", "still here", "2026-11-20T10:59:59+00:00")
    at_limit = _at("user", "back", "2026-11-20T11:00:00+00:00")
    assert RESUME_SECONDS == 3600
    assert resumption_stamps([_at("user", "hi", start), under]) == ["2026-11-20 10:00", ""]
    assert resumption_stamps([_at("user", "hi", start), at_limit]) == [
        "2026-11-20 10:00", "2026-11-20 11:00"]


def test_summaries_and_unreadable_times_take_no_stamp():
    marker = {"id": "m1", "seq": None, "role": "system", "timestamp": "2026-11-19T08:00:00",
              "content": "[CONTEXT SUMMARY]\nBob rented a room.", "metadata": {"type": "compaction"}}
    broken = _at("user", "hello", "not a time")
    later = _at("user", "hello again", "2026-11-20T10:00:00+00:00")
    assert resumption_stamps([marker, broken, later]) == ["", "", "2026-11-20 10:00"]


def test_the_prompt_shows_the_stamps_and_the_npc_lines_as_they_are():
    history = _talk()
    prompt = build_reply_messages("An innkeeper.", "Marta", history,
                                  [count_message_tokens(m) for m in history], 10_000)
    shown = [m["content"] for m in prompt[1:]]
    assert shown == [
        "[2026-11-20 10:00] Bob: A room, please.",
        "The east room, Bob.",
        "Bob: Thanks.",
        "Back already?",
        "[2026-11-22 09:01] Ann: The road was flooded.",
        "Bob: Same here.",
    ]


def test_a_prompt_cut_by_the_budget_stamps_its_first_line_and_keeps_its_prefix():
    history = _talk()
    counts = [count_message_tokens(m) for m in history]
    # room for the last three messages (and their one stamp), not for the fourth from the end
    budget = sum(counts[-3:]) + count_tokens("2026-11-22 09:01") + 3
    prompt = build_reply_messages("An innkeeper.", "Marta", history, counts, budget)
    assert [m["content"] for m in prompt[1:]] == [
        "Back already?", "[2026-11-22 09:01] Ann: The road was flooded.", "Bob: Same here."]
    # the stamp's tokens are charged: a budget of exactly the last two lines' own tokens holds
    # only the newest (which, shown first, says when it was said)
    short = build_reply_messages("An innkeeper.", "Marta", history, counts, sum(counts[-2:]))
    assert [m["content"] for m in short[1:]] == ["[2026-11-22 09:02] Bob: Same here."]
    # a line said later leaves every earlier message of the prompt as it was (the cached prefix)
    longer = history + [_at("assistant", "Come in, both.", "2026-11-22T09:02:30+00:00")]
    after = build_reply_messages("An innkeeper.", "Marta", longer,
                                 [count_message_tokens(m) for m in longer], 10_000)
    full = build_reply_messages("An innkeeper.", "Marta", history, counts, 10_000)
    assert after[: len(full)] == full


def test_a_silence_is_measured_between_the_lines_the_prompt_shows():
    # memory work's tool traffic every 40 minutes between lines said two hours apart: it is not
    # shown, so it neither ends a silence nor takes tokens
    def tool(when):
        msg = _at("tool", "ok: journaled.", when)
        msg["tool_call_id"] = "c1"
        return msg

    history = [
        _at("user", "I bring the ore.", "2026-11-20T10:00:00+00:00"),
        tool("2026-11-20T10:40:00+00:00"), tool("2026-11-20T11:20:00+00:00"),
        _at("user", "More ore.", "2026-11-20T12:00:00+00:00"),
        tool("2026-11-20T12:40:00+00:00"), tool("2026-11-20T13:20:00+00:00"),
        _at("user", "The last of it.", "2026-11-20T14:00:00+00:00"),
    ]
    counts = [count_message_tokens(m) for m in history]
    prompt, parts = assemble_reply_prompt("A smith.", "Marta", history, counts, 10_000)
    shown = [m["content"] for m in prompt[1:]]
    assert shown == ["[2026-11-20 10:00] Bob: I bring the ore.",
                     "[2026-11-20 12:00] Bob: More ore.",
                     "[2026-11-20 14:00] Bob: The last of it."]
    # every stamp shown is charged to the history's tokens
    charged = sum(p["tokens"] for p in parts if p["part"] in ("history", "turn"))
    assert charged >= sum(count_tokens(text) for text in shown)
    # control: the same lines with the tool traffic 40 minutes apart in the open are one talk
    close = [_at("user", "I bring the ore.", "2026-11-20T10:00:00+00:00"),
             _at("user", "More ore.", "2026-11-20T10:40:00+00:00")]
    assert [m["content"] for m in build_reply_messages(
        "A smith.", "Marta", close, [count_message_tokens(m) for m in close], 10_000)[1:]] == [
        "[2026-11-20 10:00] Bob: I bring the ore.", "Bob: More ore."]
