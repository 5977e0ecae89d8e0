"""
``aimemory``: what an AI NPC would recall for a query, from its journal, the archive and Mem0
(``docs/design.md``, "Retrieval and embedders").
"""

from __future__ import annotations

from .command_util import StaffCommand, shown, split_npc_switch, support_tail
from .npcs import find_npc


class CmdAIMemory(StaffCommand):
    """
    Show what an AI NPC would recall for a query.

    Usage:
      aimemory <npc> <query>
      aimemory <npc> = <query>
      aimemory/for <npc>, <player> = <query>
      aimemory/mem0 <npc> <query>
      aimemory <npc>/show <memory id>

    Runs the NPC's own retrieval, as a reply to the query would: its
    long-term memories (Mem0) and its archived lines that left the context,
    fused and ranked, with their scores. Without /for there is no audience
    filter: everything the NPC knows. With /for, only what it would say with
    that player listening (what the player heard, or was told in public).

    /mem0 lists the NPC's Mem0 memories instead, every one, by similarity to
    the query (private ones included and marked).

    A journaled fact's text ends with its support by the line it
    comes from ("(support 0.86)"; as in aihistory <npc>/journal).

    /show shows one memory in full with all its metadata; give its id as the
    table shows it (the first 8 characters are enough).
    """

    key = "aimemory"
    switch_options = ("for", "mem0", "show")

    def func(self) -> None:
        caller = self.caller
        words, switches = split_npc_switch(self)
        if "show" in switches:
            self.show_memory(words)
            return
        if self.rhs is not None:
            name, query = self.lhs.split("/")[0].strip(), self.rhs.strip()
        else:  # "aimemory Marta/mem0 the road" as well as "aimemory/mem0 Marta the road"
            name, query = (words[0] if words else ""), " ".join(words[1:])
        listener = None
        if "for" in switches:
            if self.rhs is None or len(self.lhslist) != 2:
                caller.msg("Usage: aimemory/for <npc>, <player> = <query>")
                return
            name, listener_name = (part.strip() for part in self.lhslist)
            listener = caller.search(listener_name, global_search=True)
            if not listener:
                return
        if not name or not query.strip():
            caller.msg("Usage: aimemory <npc> <query>  (or: aimemory/for <npc>, <player> = "
                       "<query>, aimemory/mem0 <npc> <query>, aimemory <npc>/show <memory id>)")
            return
        npc, script = find_npc(caller, name)
        if not npc:
            return
        if "mem0" in switches:
            self.list_mem0(npc, query.strip())
        else:
            self.recall(npc, script, query.strip(), listener)

    def recall(self, npc, script, query, listener) -> None:
        from ..npc.recall import recall_preview

        caller = self.caller
        listeners = {listener.dbref: listener.key} if listener is not None else None
        heard_by = f"heard by {listener.key}" if listener is not None else "no audience filter"

        def _show(found):
            if not found["results"]:
                caller.msg(f"{npc.key} would recall nothing for '{shown(query, 30)}' "
                           f"({heard_by}).")
                return
            table = self.table("source", "ref", "score", "kind", "memory")
            for item in found["results"]:
                table.add_row(item["source"], shown(str(item["ref"])[:8]),
                              f"{float(item.get('score') or 0):.3f}",
                              shown(item["kind"]),
                              shown(item["text"], 60) + support_tail(item.get("grounding") or {}))
            caller.msg(f"|wWhat {npc.key} would recall for '{shown(query, 30)}'|n\n"
                       f"({heard_by}; the archive and Mem0, as a reply reads them)\n{table}")

        recall_preview(script, npc, query, listeners).addCallbacks(
            _show, lambda failure: caller.msg(
                f"Memory search failed: {shown(failure.getErrorMessage())}"))

    def list_mem0(self, npc, query) -> None:
        from ..memory.mem0_payload import npc_agent_id
        from ..memory.mem0_store import get_store

        caller = self.caller
        d = get_store().search(npc_agent_id(npc), query, include_private=True, threshold=0.0)

        def _show(hits):
            if not hits:
                caller.msg(f"{npc.key} remembers nothing about '{shown(query)}'.")
                return
            table = self.table("id", "score", "source", "visibility", "memory")
            for hit in hits:
                meta = hit.get("metadata") or {}
                table.add_row(str(meta.get("memory_id") or "-")[:8],
                              f"{hit.get('score', 0):.3f}",
                              meta.get("source_type", "-"), meta.get("visibility", "-"),
                              shown(hit.get("text"), 60) + support_tail(meta))
            caller.msg(f"|wMemories of {npc.key} for '{shown(query)}'|n\n{table}")

        d.addCallbacks(_show, lambda failure: caller.msg(
            f"Memory search failed: {shown(failure.getErrorMessage())}"))

    def show_memory(self, words) -> None:
        caller = self.caller
        if len(words) < 2:
            caller.msg("Usage: aimemory <npc>/show <memory id>")
            return
        npc, _script = find_npc(caller, words[0])
        if not npc:
            return
        from .item_views import memory_item
        from ..memory.mem0_payload import npc_agent_id
        from ..memory.mem0_store import get_store

        wanted = words[1]

        def _show(hit):
            if hit is None:
                caller.msg(f"{npc.key} has no memory '{shown(wanted)}'.")
            else:
                caller.msg(memory_item(npc, hit))

        # Mem0 runs on the store's thread: the reactor only waits for the answer's callback
        d = get_store().get(npc_agent_id(npc), wanted)
        d.addCallbacks(_show, lambda failure: caller.msg(
            f"Memory lookup failed: {shown(failure.getErrorMessage())}"))
