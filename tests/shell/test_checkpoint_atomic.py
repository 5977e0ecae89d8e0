"""
The checkpoint is atomic: whatever database write a crash interrupts, the history the NPC comes
back with after a restart is the one it had (checkpoint plus archive replay), in order, with no
message a summary already covers brought back a second time.

Every crash point is tried: each database write of the checkpoint, and none. The crash is made
real inside the database: the n-th ``Attribute`` save of a checkpoint raises,
as a killed process would stop there, and the restart reads the Attributes back from the
database (the handler's cache is dropped) and replays the archive, as a new server process does.
"""

import os
from unittest import mock

from evennia.typeclasses.attributes import Attribute
import itertools

from evennia.utils import create

from ai_contrib.core.summary import make_marker
from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

from tests.support.npc_fixtures import NPCTestCase


class Crash(Exception):
    """The process died here."""


def _crash_on_save(number, calls):
    """Patch ``Attribute.save`` so that its ``number``-th call (from 1) raises :class:`Crash`;
    ``calls["n"]`` counts the calls (the writes the checkpoint attempted)."""
    original = Attribute.save

    def save(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == number:
            raise Crash(f"killed at attribute write {number}")
        return original(self, *args, **kwargs)

    return mock.patch.object(Attribute, "save", save)


def _restart(script):
    """What a new server process sees: Attributes from the database, runtime from them."""
    for attribute in script.attributes.all():
        # Evennia keeps one shared instance per row, which may hold a value never committed:
        # read the row itself (values() builds no instance), as a new process would
        stored = Attribute.objects.filter(pk=attribute.pk).values_list("db_value", flat=True)
        attribute.db_value = stored[0]
    script.attributes.reset_cache()
    script.ndb.runtime = None
    return [m["id"] for m in script.runtime.messages]


class TestAtomicCheckpoint(NPCTestCase):
    def test_a_crash_at_any_checkpoint_write_restores_the_history_in_order(self):
        # every crash point of the checkpoint (each Attribute write, and none) over histories
        # with and without messages after a compaction
        for case in itertools.product((2, 5), (1, 3), (0, 2), (1, 2, 3, None)):
            with self.subTest(before=case[0], compacted=case[1], after=case[2], crash_at=case[3]):
                self._crash_case(*case)

    def _crash_case(self, before, compacted, after, crash_at):
        npc = create.create_object(AssistantCharacter, key="Nell", location=self.room1)
        script = get_assistant_script(npc)
        said = [script.add_message("user", f"early {i}", name="Bob") for i in range(before)]
        script.checkpoint()
        # said after that checkpoint, then compacted: the archive holds them after its seq
        said += [script.add_message("user", f"middle {i}", name="Bob") for i in range(3)]
        compacted = min(compacted + before, len(said) - 1)
        marker = make_marker("Bob said early things.", said[:compacted], 10, 5)
        script.runtime.apply_compaction(marker, said[0]["id"], said[compacted - 1]["id"])
        for i in range(after):
            script.add_message("user", f"late {i}", name="Bob")
        expected = [m["id"] for m in script.runtime.messages]
        calls = {"n": 0}
        crashed = False
        with _crash_on_save(crash_at or 0, calls):
            try:
                script.checkpoint()
            except Crash:
                crashed = True
        # the crash point was a real write: a point past the last write would silently be the
        # no-crash case; the no-crash case wrote at least as many Attributes as points tried
        self.assertEqual(crashed, crash_at is not None, f"{calls['n']} writes")
        if crash_at is None:
            self.assertGreaterEqual(calls["n"], 3)
        self.assertEqual(_restart(script), expected)
        npc.delete()


class RestoredWithoutTheArchive(NPCTestCase):
    """A database restored from a backup without the archive folder: the admins are told, the
    conversation in context is written back, and numbering goes on after the checkpoint."""

    def test_numbering_continues_and_the_admins_are_told(self):
        from ai_contrib.memory.archive import close_archive

        said = self.fill(6)
        self.script.checkpoint()
        checkpoint_seq = self.script.db.checkpoint_seq
        path = self.script.archive_path()
        close_archive(path)
        os.remove(path)  # the backup held the database only
        self.script.ndb.runtime = None
        with mock.patch("ai_contrib.typeclasses.notify_admins") as notify:
            history = self.script.history
        (warning,), _ = notify.call_args
        self.assertIn(f"ends at record -1, but the database was saved at record "
                      f"{checkpoint_seq}", warning)
        self.assertEqual([m["id"] for m in history], [m["id"] for m in said])
        new = self.script.add_message("user", "Still here?", name="Bob")
        self.assertGreater(new["seq"], checkpoint_seq)
        archived = list(self.script.archive.messages())
        self.assertEqual([m["id"] for m in archived], [m["id"] for m in said] + [new["id"]])
        self.assertEqual([m["seq"] for m in archived[:-1]], [m["seq"] for m in said])
        # the next start finds the archive whole again: no second warning
        self.script.ndb.runtime = None
        with mock.patch("ai_contrib.typeclasses.notify_admins") as notify:
            self.assertEqual(len(self.script.history), len(said) + 1)
        notify.assert_not_called()
