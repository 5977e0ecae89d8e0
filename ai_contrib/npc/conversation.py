"""
The NPC's conversation record, as a handler of its ``AssistantScript`` (``script.conversation``):
the runtime history, the append-only archive behind it, and the checkpoint of one into
``db.conversation_history`` (``docs/design.md``, "The archive" and "Checkpoints").

Every message goes first to the archive (:mod:`ai_contrib.memory.archive`), then into the
runtime history held in ``ndb.runtime`` (:class:`ai_contrib.memory.runtime.RuntimeHistory`).
``db.conversation_history`` is a checkpoint of that runtime history, written every
``AI_CHECKPOINT_INTERVAL`` seconds when it changed (queued, one script per reactor turn), after
each compaction and when the server stops; on load the archive records written after the
checkpoint are replayed. So an append costs one file line, not a re-pickle of the whole list.

The handler holds nothing of its own: the state is the script's ``db`` and ``ndb`` Attributes
as before (``db.conversation_history``, ``db.checkpoint_seq``, ``db.archive_id``,
``ndb.runtime``, ``ndb.last_checkpoint``, ``ndb.checkpoint_queued``). It imports nothing of
:mod:`ai_contrib.typeclasses`, which imports it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import deque
from typing import TYPE_CHECKING

from django.conf import settings
from twisted.internet import reactor

from evennia.utils import logger
from evennia.utils.dbserialize import deserialize

from ..core.messages import Message, make_message
from ..memory.archive import get_archive
from ..memory.runtime import RuntimeHistory
from ..settings import get_setting

if TYPE_CHECKING:
    from ..memory.archive import MessageArchive


def archive_dir() -> str:
    """The folder of the NPCs' archives: ``AI_ARCHIVE_DIR``, else ``<game>/server/ai_archive``."""
    configured = get_setting("ARCHIVE_DIR")
    if configured:
        return configured
    return os.path.join(getattr(settings, "GAME_DIR", os.getcwd()), "server", "ai_archive")


def archive_behind_warning(script, last, checkpoint) -> str:
    """
    The admins' line when ``script``'s archive ends at record ``last`` but the database was
    saved at record ``checkpoint`` (a database restored without its archive folder).

    Returns:
        str
    """
    return (
        f"AI {script.obj}: its archive ({script.conversation.archive_path()}) ends at "
        f"record {last}, but the database was saved at record {checkpoint}: the database was "
        "restored without the archive folder, or the archive was lost. The "
        "conversation in context is kept and written back; what was archived before "
        "it is gone from retrieval and aihistory/raw. Restore the archive folder "
        "from the same backup as the database (with the server stopped) to get it "
        "back."
    )


class ConversationHandler:
    """
    The conversation record of one NPC (``script.conversation``): its runtime history, archive
    and checkpoint (``docs/design.md``, "The archive" and "Checkpoints").

    Args:
        script (AssistantScript): the NPC's script (``self.obj``); its ``db``/``ndb`` hold
            the state.
    """

    def __init__(self, script):
        self.obj = script

    def archive_path(self) -> str:
        """Path of this NPC's JSONL archive (``db.archive_id`` is given one if it has none)."""
        script = self.obj
        if not script.db.archive_id:
            script.db.archive_id = uuid.uuid4().hex[:8]
        owner = script.obj.id if script.obj else script.id
        return os.path.join(archive_dir(), f"npc{owner}-{script.db.archive_id}.jsonl")

    @property
    def archive(self) -> MessageArchive:
        """This NPC's :class:`~ai_contrib.memory.archive.MessageArchive` (opened once per path)."""
        return get_archive(self.archive_path())

    @property
    def runtime(self) -> RuntimeHistory:
        """
        The :class:`~ai_contrib.memory.runtime.RuntimeHistory` in ``ndb.runtime``, loaded on
        first use from ``db.conversation_history`` plus the archive records after
        ``db.checkpoint_seq``; the script's :meth:`at_runtime_loaded` hook then handles what the
        load found (an archive behind the database, records replayed, a history to write back).

        Raises:
            ArchiveError: the archive could not be read or written while loading.
        """
        script = self.obj
        runtime = script.ndb.runtime
        if runtime is None:
            runtime = RuntimeHistory(
                self.archive,
                # plain lists/dicts: Evennia returns nested _Saver containers that json refuses
                deserialize(script.db.conversation_history or []),
                script.db.checkpoint_seq,
                model=script.cfg("llm_model"),
            )
            # set before the hook: what it runs (recovery, a checkpoint) reads it back
            script.ndb.runtime = runtime
            script.at_runtime_loaded(runtime)
        return runtime

    @property
    def history(self) -> list[Message]:
        """The live runtime history (list of message dicts); read it, do not mutate it."""
        return self.runtime.messages

    def add_message(self, role, content, name=None, **fields) -> Message:
        """
        Add a message: archived first, then appended to the runtime history; the token total is
        updated from this message alone (O(1) in the history length).

        Args:
            role (str): ``system``, ``user``, ``assistant`` or ``tool``.
            content (str): the text.
            name (str, optional): the speaker.
            **fields: other message fields (``tool_calls``, ``tool_call_id``, ``metadata``).

        Returns:
            Message: the stored message, with its unique ``id`` and archive ``seq``.

        Raises:
            ValueError: bad role or content.
            ArchiveError: the archive could not be written; the message is not added.
        """
        msg = make_message(role, content, name=name, **fields)
        return self.runtime.append(msg)

    def token_count(self) -> int:
        """Tokens in the runtime history (running total, O(1))."""
        return self.runtime.tokens

    def checkpoint(self) -> None:
        """
        Save the runtime history into ``db.conversation_history`` and the archive seq it
        reflects into ``db.checkpoint_seq`` (O(n): call sparingly). Nothing happens before the
        runtime history was loaded.

        Both Attributes are written in one database transaction: a crash between the two writes
        would pair a compacted history with an older seq, and the next start would replay
        messages a summary already covers after the preserved tail.
        """
        from django.db import transaction

        script = self.obj
        runtime = script.ndb.runtime
        if runtime is None:
            return
        with transaction.atomic():
            script.db.conversation_history = list(runtime.messages)
            script.db.checkpoint_seq = runtime.archive.last_seq
        runtime.dirty = False
        script.ndb.last_checkpoint = time.time()

    def checkpoint_due(self) -> bool:
        """True when the history changed since the last checkpoint, none is queued, and
        ``AI_CHECKPOINT_INTERVAL`` seconds have passed since it (O(1))."""
        ndb = self.obj.ndb
        runtime = ndb.runtime
        if runtime is None or not runtime.dirty or ndb.checkpoint_queued:
            return False
        return time.time() - (ndb.last_checkpoint or 0) >= get_setting("CHECKPOINT_INTERVAL")


# -- the checkpoint queue -----------------------------------------------------------------------

_checkpoint_queue = deque()
_drain_call = None  # the pending drain (an IDelayedCall), if any


def queue_checkpoint(script) -> None:
    """
    Checkpoint ``script`` soon, one script per reactor turn: a checkpoint re-pickles the whole
    history (O(n), ~10-30 ms for long ones), and many NPCs due at once must not stall the
    reactor together. The drain calls ``script.checkpoint()``.
    """
    script.ndb.checkpoint_queued = True
    _checkpoint_queue.append(script)
    _schedule_drain()


def _schedule_drain():
    # keyed on the pending call, not on the queue's length: a drain call that never ran (a
    # reactor stopped or its calls cancelled) must not leave the queue stuck for good
    global _drain_call
    if _drain_call is None or not _drain_call.active():
        _drain_call = reactor.callLater(0, _drain_checkpoint_queue)


def _drain_checkpoint_queue():
    if not _checkpoint_queue:
        return
    script = _checkpoint_queue.popleft()
    try:
        script.ndb.checkpoint_queued = False
        # a script deleted since it was queued has no row left to write Attributes for (on
        # PostgreSQL the write fails the whole transaction when it commits)
        if script.id is None or not type(script).objects.filter(id=script.id).exists():
            raise LookupError(f"script #{script.id} no longer exists")
        script.checkpoint()
    except Exception as err:  # a script deleted meanwhile: nothing left to save
        logger.log_warn(f"AI checkpoint skipped: {err}")
    if _checkpoint_queue:
        _schedule_drain()
