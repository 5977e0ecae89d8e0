"""
Replies and commands, polished: a reply cut by the token cap ends at a sentence, a reply that
runs on into the prompt's own notes ends before them, a failed reply writes one server log line, and ``aitalk`` reaches the NPCs whichever ``talk`` wins a merge
with Evennia's LLM contrib.
"""

from unittest import mock

from evennia.commands.cmdset import CmdSet

from ai_contrib.commands import AIContribCmdSet, CmdAITalk, CmdTalk
from ai_contrib.core.prompts import clean_reply, last_sentence

from tests.support.llm_double import http_error, reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_for


def test_a_reply_cut_by_the_token_cap_ends_at_its_last_sentence():
    cut = "Aye, the east room is free. It costs two silver a night, and the"
    assert clean_reply(cut, "Marta", truncated=True) == "Aye, the east room is free."
    assert clean_reply(cut, "Marta") == cut  # a complete reply is left alone
    assert last_sentence('He said "go north!" and then the') == 'He said "go north!"'
    # no sentence end at all: cut at the last whole word
    assert last_sentence("Well, I suppose the road north is") == "Well, I suppose the road north..."
    whole = "Aye. Three ales coming."
    assert clean_reply(whole, "Marta", truncated=True) == whole


def test_a_time_stamp_copied_from_the_prompt_is_not_said():
    # the prompt's resumed lines start with their time; a model may start its reply the same way
    assert clean_reply("[2026-11-20 14:02] Marta: Welcome back, Bob.", "Marta") == (
        "Welcome back, Bob.")
    assert clean_reply("[2026-11-20 14:02] Welcome back.", "Marta") == "Welcome back."
    # a bracket that is no time stamp is what the model said
    assert clean_reply("[laughs] Welcome back.", "Marta") == "[laughs] Welcome back."


def test_a_players_turn_written_in_the_prompts_format_is_not_said():
    # the prompt shows a resumed player line as "[time] Bob: ..."; a model that goes on in that
    # format has stopped speaking as the NPC, on a line of its own or within one
    said = "Aye, the ore is in the cart."
    assert clean_reply(f"{said}\n[2026-11-20 14:05] Bob: Thanks!", "Marta") == said
    assert clean_reply(f"{said} [2026-11-20 14:05] bob: Thanks!", "Marta") == said
    assert clean_reply(f"{said}\nBob (overheard): Thanks!", "Marta") == said
    # a completion that is nothing but another speaker's turn is no reply at all
    assert clean_reply("[2026-11-20 14:05] Bob: Thanks!", "Marta") == ""
    # controls: the NPC's own stamped turn, and a time within what it says, are kept
    assert clean_reply("[2026-11-20 14:05] Marta: Thanks, Bob!", "Marta") == "Thanks, Bob!"
    assert clean_reply(f"{said}\nIt came at [2026-11-20 14:05], late.", "Marta") == (
        f"{said} It came at [2026-11-20 14:05], late.")


class TestReplies(NPCTestCase):
    def test_the_npc_says_whole_sentences_when_the_model_hit_its_cap(self):
        self.llm.enqueue(reply("Welcome, traveller. The stew is hot and the ale is",
                               finish_reason="length"))
        self.script.receive_speech(self.char1, "Evening!")
        wait_for(self.script.run_tick())
        self.assertEqual(self.script.history[-1]["content"], "Welcome, traveller.")

    def test_a_reply_that_runs_on_into_the_prompts_scene_note_is_said_without_it(self):
        self.char1.key = "Wren"
        answer = "Evening, Wren. Sit by the fire."
        self.llm.enqueue(reply(
            f"{answer}\n[SCENE] You are in Room: a room. Present: Wren (you have not met)."))
        self.script.receive_speech(self.char1, "Evening, Marta!")
        with mock.patch.object(self.char1, "msg") as msg:
            wait_for(self.script.run_tick())
        # the prompt showed a scene note, which the model copied after its answer
        sent = self.llm.requests[0]["messages"]
        self.assertTrue(any(m["content"].startswith("[SCENE]") for m in sent), sent)
        self.assertEqual(self.script.history[-1]["content"], answer)
        heard = " ".join(str(c) for c in msg.call_args_list)
        self.assertIn(answer, heard)
        self.assertNotIn("[SCENE]", heard)

    def test_a_failed_reply_is_logged_once(self):
        self.llm.enqueue(http_error(500), http_error(500))
        with mock.patch("ai_contrib.npc.replies.logger") as replies_log, \
                mock.patch("ai_contrib.npc.notify.logger") as notify_log:
            self.script.receive_speech(self.char1, "Hello?")
            wait_for(self.script.run_tick())
            lines = replies_log.log_err.call_args_list + notify_log.log_warn.call_args_list
            self.assertEqual(len(lines), 1, lines)
            self.script.receive_speech(self.char1, "Hello again?")
            wait_for(self.script.run_tick())
            lines = replies_log.log_err.call_args_list + notify_log.log_warn.call_args_list
            self.assertEqual(len(lines), 2, lines)
            self.assertIn("2 in a row", str(replies_log.log_err.call_args))


def _owner(cmdset, key):
    return next(type(cmd) for cmd in cmdset.commands if cmd.key == key)


def test_aitalk_survives_evennia_llm_talk_merged_after_ours():
    from evennia.contrib.rpg.llm import CmdLLMTalk

    theirs_last = CmdSet()
    theirs_last.add(AIContribCmdSet)
    theirs_last.add(CmdLLMTalk())
    assert _owner(theirs_last, "talk") is CmdLLMTalk
    assert _owner(theirs_last, "aitalk") is CmdAITalk
    ours_last = CmdSet()
    ours_last.add(CmdLLMTalk())
    ours_last.add(AIContribCmdSet)
    assert _owner(ours_last, "talk") is CmdTalk
