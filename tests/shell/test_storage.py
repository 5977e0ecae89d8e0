"""
The archive as write-ahead record and the checkpointed runtime history: what a crash at any
point leaves behind is rebuilt consistently.
"""

import json
import os
import tempfile
import time

from ai_contrib.core.messages import is_marker, make_message
from ai_contrib.memory.archive import ArchiveError, MessageArchive, close_archive
from ai_contrib.memory.runtime import RuntimeHistory

from tests.support.npc_fixtures import NPCTestCase
from tests.support.twisted_util import wait_until


def _archive():
    return MessageArchive(os.path.join(tempfile.mkdtemp(), "npc.jsonl"))


def test_partial_last_line_is_cut_and_appends_continue():
    archive = _archive()
    for i in range(3):
        archive.append_message(make_message("user", f"m{i}"))
    archive.close()
    with open(archive.path, "ab") as fh:
        fh.write(b'{"seq": 3, "kind": "message", "msg": {"id": "x", "con')
    reopened = MessageArchive(archive.path)
    assert reopened.last_seq == 2
    msg = reopened.append_message(make_message("user", "after crash"))
    assert msg["seq"] == 3
    assert [m["content"] for m in reopened.messages()] == ["m0", "m1", "m2", "after crash"]


def test_message_log_reads_only_what_was_appended_and_never_a_partial_line(monkeypatch):
    archive = _archive()
    for i in range(3):
        archive.append_message(make_message("user", f"m{i}"))
    archive.append("evict", ids=["x"], reason="test")
    assert [m["content"] for m in archive.message_log()] == ["m0", "m1", "m2"]
    archive.append_message(make_message("assistant", "m3"))
    # a line still being written (a reader on the memory thread can see one) waits its turn
    archive._fh.write(b'{"seq": 5, "kind": "message", "msg": {"id": "y", "role": "user", ')
    parsed = []
    real_loads = json.loads
    monkeypatch.setattr(json, "loads", lambda line: parsed.append(line) or real_loads(line))
    assert [m["content"] for m in archive.message_log()] == ["m0", "m1", "m2", "m3"]
    assert len(parsed) == 1  # only the new complete line was parsed
    archive._fh.write(b'"content": "m4"}}\n')
    archive.last_seq = 5
    assert [m["content"] for m in archive.message_log()][-1] == "m4"
    assert archive.message_log() == archive.messages()


def test_write_failure_raises_and_adds_nothing():
    archive = _archive()
    runtime = RuntimeHistory(archive, [], -1)
    archive.close()
    try:
        runtime.append(make_message("user", "lost?"))
    except ArchiveError:
        pass
    else:  # pragma: no cover - the assertion below explains
        raise AssertionError("append to a closed archive must raise ArchiveError")
    assert runtime.messages == [] and runtime.tokens == 0


def test_legacy_history_without_ids_is_archived_and_kept():
    archive = _archive()
    legacy = [{"role": "user", "content": "old hello"}, {"role": "assistant", "content": "hi"}]
    runtime = RuntimeHistory(archive, legacy, None)
    assert [m["content"] for m in runtime.messages] == ["old hello", "hi"]
    assert all(m["id"] and m["seq"] is not None for m in runtime.messages)
    assert [m["content"] for m in archive.messages()] == ["old hello", "hi"]


class TestCrashRecovery(NPCTestCase):
    def reload(self):
        """What a server restart does: the ndb cache is gone, the archive is reopened."""
        self.script.ndb.runtime = None
        close_archive(self.script.archive_path())
        return self.script.runtime

    def test_messages_after_last_checkpoint_are_replayed(self):
        self.fill(5)
        self.script.checkpoint()
        late = self.fill(3)
        self.assertEqual(len(self.script.db.conversation_history), 5)
        runtime = self.reload()
        self.assertEqual([m["id"] for m in runtime.messages[-3:]], [m["id"] for m in late])
        self.assertEqual(len(self.script.db.conversation_history), 8)  # re-checkpointed

    def test_compaction_recorded_but_not_checkpointed_is_replayed_once(self):
        added = self.fill(30)
        self.script.checkpoint()
        runtime = self.script.runtime
        marker = make_message("system", "[CONTEXT SUMMARY]\nsummary",
                              metadata={"type": "compaction", "first_id": added[0]["id"],
                                        "last_id": added[9]["id"]})
        runtime.apply_compaction(marker, added[0]["id"], added[9]["id"], trigger="sleep")
        # crash here: neither the checkpoint nor the journal entry were written
        runtime = self.reload()
        self.assertEqual(sum(1 for m in runtime.messages if is_marker(m)), 1)
        self.assertEqual(len(runtime.messages), 21)
        self.assertEqual(runtime.tokens, sum(runtime.token_counts()))
        entries = self.npc.db.journal["entries"]
        self.assertEqual([e["marker_id"] for e in entries], [marker["id"]])
        # a second restart changes nothing
        runtime = self.reload()
        self.assertEqual(len(runtime.messages), 21)
        self.assertEqual(len(self.npc.db.journal["entries"]), 1)


class TestTickScheduling(NPCTestCase):
    def test_a_drain_call_that_never_ran_does_not_stop_later_checkpoints(self):
        from twisted.internet import reactor

        from ai_contrib.typeclasses import _queue_checkpoint

        self.fill(2)
        _queue_checkpoint(self.script)
        for call in reactor.getDelayedCalls():  # the drain is lost (a reactor stopped under it)
            call.cancel()
        self.fill(2)
        _queue_checkpoint(self.script)
        wait_until(lambda: len(self.script.db.conversation_history or []) == 4)
        self.assertEqual(len(self.script.db.conversation_history), 4)

    def test_idle_awake_npc_skips_the_tick_and_due_checkpoint_is_queued(self):
        self.fill(4)
        self.script.checkpoint()
        self.script.ndb.awake_since = self.script.ndb.last_activity = time.time()
        self.assertFalse(self.script._needs_tick())
        self.fill(2)  # dirty, but the checkpoint interval has not passed
        self.assertFalse(self.script._needs_tick())
        self.script.ndb.last_checkpoint = time.time() - 10_000
        self.assertTrue(self.script._needs_tick())
        self.script.at_repeat()
        # the queued checkpoint runs on the reactor's next turns
        wait_until(lambda: len(self.script.db.conversation_history) == 6)
        self.assertEqual(len(self.script.db.conversation_history), 6)
        self.assertFalse(self.script.runtime.dirty)
        self.script.ndb.pending = ["Bob"]
        self.assertTrue(self.script._needs_tick())
