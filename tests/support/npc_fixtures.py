"""
A base test case with an AI NPC in Evennia's test world and an LLM double behind it.
"""

import time
from unittest import mock

from django.test import override_settings
from twisted.internet import reactor
from evennia.utils import create
from evennia.utils.test_resources import BaseEvenniaCommandTest

from ai_contrib.llm.client import reset_client
from ai_contrib.typeclasses import AssistantCharacter, get_assistant_script

from .llm_double import LLMDouble
from .twisted_util import cancel_pending_ticks, wait_for, wait_until


def forget_cached_entities():
    """Empty the idmapper caches of objects, scripts and accounts, ndb data and all: nothing a
    test created is found in memory by the next one."""
    from evennia.accounts.models import AccountDB
    from evennia.objects.models import ObjectDB
    from evennia.scripts.models import ScriptDB

    for model in (ObjectDB, ScriptDB, AccountDB):
        model.flush_instance_cache(force=True)


class NPCTestCase(BaseEvenniaCommandTest):
    """
    ``self.npc`` (an AssistantCharacter "Marta" in ``self.room1``), ``self.script`` (its
    AssistantScript) and ``self.llm`` (a started :class:`LLMDouble` that the contrib's client is
    pointed at through ``AI_LLM_BASE_URL``).
    """

    llm_default = None
    #: more arguments of the :class:`LLMDouble` (``{"strict": True}``, a ``model_path``)
    llm_options = {}

    def setUp(self):
        super().setUp()
        # runs last (cleanups run in reverse): objects holding ndb data (a room's ai_line) outlive
        # Evennia's flush_cache, and on PostgreSQL, whose ids do not restart per test, the next
        # test's DEFAULT_HOME "#1" would resolve to this test's cached room1
        self.addCleanup(forget_cached_entities)
        self.llm = LLMDouble(default=self.llm_default, **self.llm_options)
        self.llm.start()
        self.addCleanup(self.llm.stop)
        override = override_settings(AI_LLM_BASE_URL=self.llm.base_url, AI_LLM_API_KEY="test-key")
        override.enable()
        self.addCleanup(override.disable)
        reset_client()
        self.addCleanup(lambda: wait_for(reset_client()))
        self.npc = create.create_object(AssistantCharacter, key="Marta", location=self.room1)
        self.npc.db.persona = "You are Marta, the innkeeper of the Prancing Goat."
        self.script = get_assistant_script(self.npc)
        # runs first: a reply still being written when the test ends would otherwise be saved
        # during the next test, onto a script whose row that test's database never had
        self.addCleanup(self.settle_turns)

    def settle_turns(self, timeout=5.0):
        """Cancel the ticks scheduled (a later cleanup turning the reactor would start them),
        then iterate the reactor until no AI NPC script is in a tick, a cache warm-up or its
        memory work (a sleep that writes its report to the script would otherwise land in the
        next test, onto a row its database never had); past ``timeout`` seconds stop the LLM
        double, so that what it holds fails, and wait again."""
        from evennia.scripts.models import ScriptDB

        cancel_pending_ticks()

        def busy():
            return [script for script in ScriptDB.get_all_cached_instances()
                    if script.ndb.busy or script.ndb.warming is not None
                    or script.ndb.memory_work is not None]

        for attempt in range(2):
            deadline = time.monotonic() + timeout
            while busy() and time.monotonic() < deadline:
                reactor.iterate(0.01)
            if not busy():
                return
            self.llm.stop()

    #: the words of a filled line after its first six ``word<j>``: what the tests' summaries
    #: say, so that a summary of filled lines is supported by them (``docs/design.md``,
    #: "Summary fidelity")
    TAVERN_WORDS = ("Bob asked about rooms Marta offered the east room for two silver Alice "
                    "asked about stew patrons talked ale weather road north rented let costs "
                    "wants people facts").split()

    def fill(self, count, words=20, speaker="Bob"):
        """Add ``count`` alternating user/assistant messages of about ``words`` words each:
        ``"line <i> word0 ... word5"``, then :data:`TAVERN_WORDS` in turn, each with its
        position (``"east7"``: as many tokens as ``"word7"``)."""
        added = []
        for i in range(count):
            text = f"line {i} " + " ".join(
                f"word{j}" if j < 6
                else f"{self.TAVERN_WORDS[(i + j) % len(self.TAVERN_WORDS)]}{j}"
                for j in range(words))
            if i % 2 == 0:
                added.append(self.script.add_message("user", text, name=speaker))
            else:
                added.append(self.script.add_message("assistant", text, name="Marta"))
        return added

    def said(self, cmd, args, until):
        """Run a command and collect what the caller is told, also later (Deferreds), until it
        holds ``until`` (a busy machine is slow, not wrong: :func:`wait_until`)."""
        with mock.patch.object(self.char1, "msg") as msg:
            immediate = self.call(cmd, args)
            wait_until(lambda: until in immediate + " ".join(str(c) for c in msg.call_args_list))
        return immediate + "\n".join(str(c.args[0] if c.args else c.kwargs.get("text"))
                                     for c in msg.call_args_list)
