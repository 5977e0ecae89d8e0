"""
Staff commands for what NPCs know (``docs/design.md``, "Lore and pins"): ``ailore`` (the
world's lore entries) and ``aipin`` (facts one NPC must never lose). They join the contrib's
cmdset in :mod:`ai_contrib.commands`. Everything stored is shown through
:func:`ai_contrib.admin.command_util.shown`, admin-written text included.
"""

from __future__ import annotations

from evennia.utils.utils import at_search_result

from ..core import lore as core
from ..lore import (
    GAME_SOURCE,
    add_entry,
    delete_entry,
    get_entry,
    get_lore_store,
    load_lore_modules,
    lore_entries,
    lore_for_npc,
    npc_facts,
    update_entry,
)
from ..npc.pins import add_pin, get_pins, remove_pin
from ..settings import option_value
from .command_util import StaffCommand, shown
from .npcs import find_npc

#: the word that makes ``ailore/add`` write a constant entry instead of keys
CONSTANT_WORD = "constant"
#: fields ``ailore/set`` changes
SET_FIELDS = ("keys", "condition", "priority", "text")


def _keys_text(entry):
    return "(constant)" if entry["constant"] else ", ".join(entry["keys"])


def _source_text(entry):
    return "game" if entry["source"] == GAME_SOURCE else entry["source"].rpartition(".")[2]


class CmdAILore(StaffCommand):
    """
    Write the world's lore: what NPCs know and when they recall it.

    Usage:
      ailore
      ailore/show <id>
      ailore/add <key>[, <key>...] = <text>
      ailore/add constant = <text>
      ailore/set <id>/<field> = <value>
      ailore/edit <id> = <text>
      ailore/del <id>
      ailore/test <npc> = <what a player says>
      ailore/reload

    An entry is a short text an NPC is given when one of its keys is said
    (the line it answers or the last few before it), or always when it is
    constant. Keys are words or phrases, separated by commas, matched as
    whole words in any case: "ale" matches "Ale!", not "sale". A key holds
    letters, digits, spaces, hyphens and apostrophes only: it is never a
    pattern, and one like ^griffin$ or (a+)+ is refused.

    /set changes one field of an entry:
      keys       words or phrases, comma-separated ("constant": always)
      condition  who knows it, comma-separated; any one clause is enough:
                   all              every NPC (the default)
                   npc:<name>       one NPC (or npc:#<dbref>)
                   location:<room>  NPCs in that room (or location:#<dbref>)
                   zone:<zone>      NPCs whose room has Tag <zone>, category
                                    zone
                   tag:<tag>        NPCs with Tag <tag> (no category)
                   <category>:<tag> NPCs with Tag <tag> of that category,
                                    e.g. faction:watch
      priority   a whole number; higher entries are given first when the
                 lore budget (AI_LORE_TOKEN_BUDGET tokens) is short
      text       the same as /edit

    /test shows which entries that NPC would get for that line, which are
    left out for the budget, and which its condition keeps from it.
    Entries from the game's lore modules (AI_LORE_MODULES) are edited in
    their module; /reload loads the modules again.
    """

    key = "ailore"
    switch_options = ("show", "add", "set", "edit", "del", "test", "reload")

    def func(self) -> None:
        switch = self.switches[0] if self.switches else None
        args = self.args.strip()
        left, equals, right = args.partition("=")
        left, right = left.strip(), right.strip()
        target = (left or args).partition("/")[0].strip()
        try:
            if switch is None and not args:
                self.list()
            elif switch in (None, "show") and args:
                self.show(args)
            elif switch == "add" and equals and left and right:
                self.add(left, right)
            elif switch == "set" and equals and "/" in left:
                entry_id, _, field = left.partition("/")
                self.set(entry_id.strip(), field.strip().lower(), right)
            elif switch == "edit" and equals and left and right:
                self.done("Changed", update_entry(left, by=self.caller.key, text=right))
            elif switch == "del" and args:
                entry = delete_entry(args)
                self.caller.msg(f"Deleted lore entry {entry['id']} "
                                f"({shown(_keys_text(entry), 40)}).")
            elif switch == "test" and equals and left:
                self.test(left, right)
            elif switch == "reload":
                self.reload()
            else:
                self.caller.msg("Usage: ailore, ailore/show <id>, ailore/add <keys> = <text>, "
                                "ailore/set <id>/<field> = <value>, ailore/edit <id> = <text>, "
                                "ailore/del <id>, ailore/test <npc> = <text>, ailore/reload "
                                "(help ailore)")
        except KeyError:
            self.caller.msg(f"No lore entry '{shown(target, 40)}' (ailore lists them).")
        except ValueError as err:
            self.caller.msg(shown(str(err)))

    def list(self) -> None:
        entries = lore_entries()
        if not entries:
            self.caller.msg("There is no lore yet. Add some: ailore/add <keys> = <text>")
            return
        table = self.table("id", "keys", "who knows", "prio", "text", "from")
        for entry in entries:
            table.add_row(shown(entry["id"]), shown(_keys_text(entry), 24),
                          shown(", ".join(entry["condition"]), 20), entry["priority"],
                          shown(entry["text"], 40), shown(_source_text(entry), 12))
        self.caller.msg(f"|wLore|n: {len(entries)} entries\n{table}\n"
                        "ailore/show <id> for one in full, help ailore for the rest.")

    def show(self, entry_id) -> None:
        entry = get_entry(entry_id)
        if entry is None:
            raise KeyError(entry_id)
        lines = [f"|wLore entry {shown(entry['id'])}|n",
                 f"keys: {shown(_keys_text(entry))}",
                 f"who knows: {shown(', '.join(entry['condition']))}",
                 f"priority: {entry['priority']}",
                 f"from: {shown(entry['source'])}"
                 + (f", by {shown(entry['by'])}" if entry.get("by") else "")
                 + (f" at {shown(entry['at'])}" if entry.get("at") else ""),
                 f"text: {shown(entry['text'])}"]
        self.caller.msg("\n".join(lines))

    def done(self, what, entry) -> None:
        self.caller.msg(f"{what} lore entry {entry['id']}: {shown(_keys_text(entry), 40)}; "
                        f"who knows: {shown(', '.join(entry['condition']))}; "
                        f"priority {entry['priority']}.")

    def add(self, keys, text) -> None:
        constant = keys.strip().lower() == CONSTANT_WORD
        entry = add_entry(text, keys=None if constant else keys, constant=constant,
                          by=self.caller.key)
        self.done("Added", entry)
        self.caller.msg(f"Who knows it: ailore/set {entry['id']}/condition = <clauses> "
                        "(default: all).")

    def set(self, entry_id, field, value) -> None:
        if field not in SET_FIELDS:
            self.caller.msg(f"Fields: {', '.join(SET_FIELDS)} (not '{shown(field, 20)}').")
            return
        if field == "keys" and value.strip().lower() == CONSTANT_WORD:
            entry = update_entry(entry_id, by=self.caller.key, constant=True)
        else:
            entry = update_entry(entry_id, by=self.caller.key, **{field: value})
        self.done("Changed", entry)

    def test(self, name, text) -> None:
        npc, _script = find_npc(self.caller, name)
        if not npc:
            return
        result = lore_for_npc(npc, [text])
        table = self.table("id", "given", "key", "prio", "tokens")
        for item in result["chosen"]:
            table.add_row(shown(item["id"]), "yes", shown(item["key"] or "(constant)", 24),
                          item["priority"], item["tokens"])
        for item in result["skipped"]:
            table.add_row(shown(item["id"]), f"no: {item['reason']}",
                          shown(item["key"] or "(constant)", 24), item["priority"],
                          item["tokens"])
        facts = npc_facts(npc)
        hidden = []
        for entry in lore_entries():
            if core.may_know(entry, facts):
                continue
            if entry["constant"] or core.key_found(entry, [text]):
                hidden.append(f"{entry['id']} ({shown(', '.join(entry['condition']), 40)})")
        budget = option_value("LORE_TOKEN_BUDGET", getattr(npc, "assistant", None))
        given = sum(item["tokens"] for item in result["chosen"])
        out = [f"|wLore {npc.key} would get|n for: {shown(text, 60)}",
               f"{len(result['chosen'])} given ({given}/{budget} tokens), "
               f"{len(result['skipped'])} left out for the budget."]
        if result["chosen"] or result["skipped"]:
            out.append(str(table))
        if hidden:
            out.append(f"Not known to {npc.key} (condition): {', '.join(hidden)}")
        self.caller.msg("\n".join(out))

    def reload(self) -> None:
        report = load_lore_modules()
        errors = "".join(f"\n|r{shown(error)}|n" for error in report["errors"])
        store = get_lore_store()
        total = len(lore_entries(store)) if store else 0
        self.caller.msg(f"Lore modules loaded: {len(report['added'])} added, "
                        f"{len(report['updated'])} updated, {len(report['removed'])} removed, "
                        f"{report['unchanged']} unchanged; {total} entries in all.{errors}")


def _pin_budget(npc):
    from ..core.tokens import count_tokens

    script = getattr(npc, "assistant", None)
    model = option_value("LLM_MODEL", script)
    return option_value("PINS_TOKEN_BUDGET", script), lambda text: count_tokens(text, model)


class CmdAIPin(StaffCommand):
    """
    Pin facts an NPC must never lose.

    Usage:
      aipin <npc>
      aipin <npc> = <text>
      aipin/player <npc>:<player> = <text>
      aipin/del <npc> = <number>

    A pin is a fact given to the NPC with every reply, whatever it has
    forgotten: it is kept on the NPC, not in its conversation, so no
    summary can drop it, and aireset keeps it (aireset/pins clears pins).
    /player pins a fact about one player (their debt, their quest): it is
    given only while that player is among those who hear the reply.
    Without text, lists the NPC's pins with their numbers. Pins are
    limited to AI_PINS_TOKEN_BUDGET tokens: the NPC's own plus one
    player's.
    """

    key = "aipin"
    switch_options = ("player", "del")

    def func(self) -> None:
        caller = self.caller
        left, equals, text = self.args.partition("=")
        left, text = left.strip(), text.strip()
        player_name = None
        if "player" in self.switches:
            left, _, player_name = left.partition(":")
            left, player_name = left.strip(), player_name.strip()
            if not player_name or not text:
                caller.msg("Usage: aipin/player <npc>:<player> = <text>")
                return
        if not left or (equals and not text):
            caller.msg("Usage: aipin <npc>, aipin <npc> = <text>, "
                       "aipin/player <npc>:<player> = <text>, aipin/del <npc> = <number>")
            return
        npc, _script = find_npc(caller, left)
        if not npc:
            return
        if "del" in self.switches:
            pin = remove_pin(npc, text) if text else None
            if pin is None:
                caller.msg(f"{npc.key} has no pin '{shown(text, 20)}' (aipin {npc.key} "
                           "lists them).")
            else:
                caller.msg(f"Removed pin {pin['id']} of {npc.key}: {shown(pin['text'], 60)}")
            return
        if not equals:
            self.list(npc)
            return
        player = None
        if player_name:
            found = caller.search(player_name, global_search=True, quiet=True) or []
            player = at_search_result(found, caller, query=player_name)
            if not player:
                return
        budget, count = _pin_budget(npc)
        try:
            pin = add_pin(npc, text, player=player.dbref if player else None, by=caller.key,
                          budget_tokens=budget, count=count)
        except ValueError as err:
            caller.msg(shown(str(err)))
            return
        about = f" about {player.key}" if player else ""
        caller.msg(f"Pinned on {npc.key}{about} as {pin['id']}: {shown(pin['text'], 60)}")

    def list(self, npc) -> None:
        pins = get_pins(npc)
        if not pins:
            self.caller.msg(f"{npc.key} has no pins. Add one: aipin {npc.key} = <text>")
            return
        from evennia.utils.search import search_object

        table = self.table("n", "about", "text", "by", "at")
        for pin in pins:
            about = "-"
            if pin.get("player"):
                found = search_object(pin["player"])
                about = f"{found[0].key} {pin['player']}" if found else pin["player"]
            table.add_row(pin["id"], shown(about, 20), shown(pin["text"]),
                          shown(pin.get("by") or "-", 12), shown((pin.get("at") or "")[:10]))
        self.caller.msg(f"|wPins of {npc.key}|n: {len(pins)}\n{table}")
