"""
``aisleep`` and ``aiwake``: put an AI NPC into its sleep phase (memory work) or wake it
(``docs/design.md``, "Memory work is never starved").
"""

from __future__ import annotations

from ..settings import get_setting
from .command_util import StaffCommand, shown


class _CmdSetMode(StaffCommand):
    """Shared body of aisleep and aiwake: find the NPC, switch its mode, report."""

    done_message = already_message = ""

    def switch(self, script):
        raise NotImplementedError

    def func(self):
        npc, script = self.npc_named(self.args, f"{self.key} <npc>")
        if not npc:
            return
        changed = self.switch(script)
        # the NPC's room sees it doze off or wake up (AssistantScript.sleep/wake); an admin
        # standing there saw that line, so the confirmation would say the same thing twice
        if not changed or self.caller.location != npc.location:
            self.caller.msg(
                (self.done_message if changed else self.already_message).format(npc=npc.key))
        if changed:
            self.after_switch(npc, script)

    def after_switch(self, npc, script):
        """Called once the mode changed; nothing by default."""


class CmdAISleep(_CmdSetMode):
    """
    Put an AI NPC to sleep.

    Usage:
      aisleep <npc>

    A sleeping NPC does its memory work (fact extraction, compaction at the
    sleep threshold, consolidation into long-term memory). It wakes when spoken
    to, after its sleep duration, or with aiwake. When its sleep work ends you
    get one line: the compaction's result, the facts journaled and the journal
    entries consolidated into Mem0 (aihistory shows it too). While a compaction
    runs, its sleep work starts when that ends (you are told so at once); the
    sleep duration counts from the start of the sleep work, so it never wakes
    by itself before that work has started.
    """

    key = "aisleep"
    done_message = "{npc} falls asleep."
    already_message = "{npc} is already asleep."

    def switch(self, script) -> bool:
        return script.sleep(reason=f"put to sleep by {self.caller.key}")

    def after_switch(self, npc, script) -> None:
        from ..npc.memory_wait import memory_under_way
        from ..npc.sleep_watch import watch_sleep

        caller = self.caller
        running = memory_under_way(script)
        if running:
            # the sleep work starts when that ends, and AI_SLEEP_DURATION counts from then
            # (core.tick.due): said now, not when it's over
            duration = float(get_setting("SLEEP_DURATION") or 0)
            caller.msg(f"{npc.key}'s {running} is under way: the sleep work starts when it "
                       "ends" + (f", and {npc.key} sleeps {duration:g} s from then."
                                 if duration else "."))
        watch_sleep(script).addCallback(
            lambda line: caller.msg(f"{npc.key}'s sleep: {shown(line)}"))


class CmdAIWake(_CmdSetMode):
    """
    Wake an AI NPC up.

    Usage:
      aiwake <npc>
    """

    key = "aiwake"
    done_message = "{npc} wakes up."
    already_message = "{npc} is already awake."

    def switch(self, script) -> bool:
        return script.wake(reason=f"woken by {self.caller.key}")
