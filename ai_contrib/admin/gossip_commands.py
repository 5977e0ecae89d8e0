"""
``aigossip``: staff look after an NPC's gossip (``docs/design.md``, "Gossip"): its networks, what
its last sleep heard and what others heard from it, switching its gossip off and on, and
erasing a fact everywhere it travelled. Joins the contrib's cmdset in :mod:`ai_contrib.commands`.
"""

from __future__ import annotations

from ..core.gossip import chain_text, origin_of
from ..memory.journal import ensure_journal, find_entry
from ..npc.gossip import erase_everywhere, gossip_on, npc_networks, peers
from .command_util import StaffCommand, admin_table, shown, table_width


class CmdAIGossip(StaffCommand):
    """
    Look after an AI NPC's gossip.

    Usage:
      aigossip <npc>
      aigossip/off <npc>
      aigossip/on <npc>
      aigossip/erase <npc> = <journal id>

    Without a switch: the NPC's gossip networks (its room's zone or the room,
    and its Tags of category "gossip"), the NPCs it shares them with, what it
    heard in its last sleep (with whom from), what it heard the last time it
    met NPCs of its networks in a room, and what other NPCs last heard from
    it (in their sleep or at a meeting). Only what it learned in public
    passes, never what was said to it alone (see the design document,
    "Gossip").

    /off stops the NPC spreading and receiving gossip; /on starts it again.

    /erase removes a fact from every NPC it travelled to: the journal entry
    named (of this NPC; a copy names the fact it came from) and every copy of
    it in any NPC's journal and Mem0 memories.
    """

    key = "aigossip"
    switch_options = ("off", "on", "erase")

    def func(self) -> None:
        caller = self.caller
        name = self.lhs if "erase" in self.switches else self.args
        npc, script = self.npc_named(
            name, "aigossip[/off|/on] <npc>  or  aigossip/erase <npc> = <journal id>")
        if not npc:
            return
        if "off" in self.switches or "on" in self.switches:
            if "off" in self.switches and "on" in self.switches:
                caller.msg("Use /off or /on, not both.")
                return
            npc.db.gossip_off = "off" in self.switches
            caller.msg(f"Gossip of {npc.key} is now "
                       f"{'off: it neither hears nor passes gossip' if npc.db.gossip_off else 'on'}.")
            return
        if "erase" in self.switches:
            self.erase(npc, script)
            return
        self.show(npc, script)

    def erase(self, npc, script) -> None:
        caller = self.caller
        entry_id = (self.rhs or "").strip()
        if not entry_id:
            caller.msg(f"Usage: aigossip/erase {npc.key} = <journal id> "
                       f"(aihistory {npc.key}/journal lists them)")
            return
        entry = find_entry(ensure_journal(npc.db.journal), id=entry_id)
        if entry is None:
            caller.msg(f"No journal entry '{shown(entry_id)}' for {npc.key} "
                       f"(aihistory {npc.key}/journal lists them).")
            return
        origin = origin_of(entry, npc.dbref)
        def _done(report):
            where = ", ".join(f"{name} {jid}" for name, jid in report["journals"]) or "nowhere"
            if report.get("memory_error"):
                memory = f"|rMem0 failed|n: {shown(report['memory_error'])}"
            elif report.get("memories") is None:
                memory = "Mem0: off or nothing stored"
            else:
                memory = f"Mem0: {report['memories']} memories deleted"
            caller.msg(f"Erased fact {shown(origin)} from {len(report['journals'])} journal(s) "
                       f"({shown(where)}); {memory}.")

        erase_everywhere(origin, script.key).addCallback(_done)

    def show(self, npc, script) -> None:
        caller = self.caller
        width = table_width(self)
        try:
            own = sorted(npc_networks(npc))
            others = [peer.key for peer in peers(npc, script.key)]
        except ValueError as err:  # a bad AI_GOSSIP_DEFAULT_NETWORK
            caller.msg(f"|rGossip is misconfigured|n: {shown(str(err))}")
            return
        lines = [
            f"|wGossip of {npc.key}|n: {'on' if gossip_on(npc) else '|roff|n'}",
            f"Networks: {shown(', '.join(own) or 'none')}",
            f"Shares them with: {shown(', '.join(others) or 'no other NPC')}",
        ]
        last = npc.db.gossip_last or {}
        if not last:
            lines.append("No sleep with gossip yet.")
        elif last.get("skipped"):
            lines.append(f"Last sleep ({last.get('at')}): no gossip ({shown(last['skipped'])}).")
        else:
            received = last.get("received") or []
            lines.append(f"Last sleep ({last.get('at')}): heard {len(received)} fact(s) "
                         f"from {last.get('peers', 0)} NPC(s).")
            if received:
                journal = ensure_journal(npc.db.journal)
                table = admin_table(width, "id", "from", "chain", "fact")
                for item in received:
                    entry = find_entry(journal, id=item.get("id")) or item
                    table.add_row(shown(item.get("id")), shown(item.get("from")),
                                  shown(chain_text(entry) or "-"),
                                  shown(item.get("content"), 50))
                lines.append(str(table))
        met = npc.db.gossip_met or {}
        if met:
            lines.append(f"Last meeting ({met.get('at')}): heard "
                         f"{len(met.get('received') or [])} fact(s) from "
                         f"{shown(', '.join(met.get('with') or []))}.")
        passed = npc.db.gossip_passed or []
        if passed:
            table = admin_table(width, "at", "heard by", "how", "fact (origin)")
            for item in passed:
                table.add_row(shown(item.get("at")), shown(item.get("to")),
                              shown(item.get("route") or "sleep"), shown(item.get("origin")))
            lines += [f"Last {len(passed)} fact(s) other NPCs heard from {npc.key}:", str(table)]
        else:
            lines.append(f"No NPC has heard anything from {npc.key} yet.")
        caller.msg("\n".join(lines))
