"""
Admin commands for looking after several AI NPCs: ``ailist`` (all of them at a glance),
``aiconfig`` (one NPC's effective configuration, with per-NPC changes), ``aireset`` (wipe
one NPC's memory) and ``aiforget`` (make it forget one player). They join the contrib's
cmdset in :mod:`ai_contrib.commands` and share its helpers in :mod:`ai_contrib.admin.command_util`.
"""

from __future__ import annotations

import textwrap

from .npc_config import (
    GAME_WIDE_OPTIONS,
    PER_NPC_OPTIONS,
    SOURCE_NPC_SAME,
    effective_config,
    ignored_attributes,
    parse_value,
    per_npc_record,
)
from ..npc.pins import clear_pins, get_pins
from ..settings import get_setting, resolve_option
from .command_util import StaffCommand, admin_table, shown, table_width
from .npcs import all_ai_npcs, find_npc
from .read_model import budget_view, npc_summary, persona_view

def _tokens(figures):
    """``"1234/8000 15%"``: the history's tokens against the effective budget (``figures``:
    :func:`ai_contrib.admin.read_model.npc_summary`)."""
    return f"{figures['tokens']}/{figures['budget']} {figures['usage']:.0%}"


def _last_reply(script):
    """``"1.2s 812t"``: seconds and prompt tokens of the last reply (``ndb``: since the start)."""
    stats = script.ndb.last_reply
    if not stats:
        return "-"
    prompt = stats.get("prompt") or {}
    tokens = f" {prompt['prompt_tokens']}t" if prompt.get("prompt_tokens") is not None else ""
    return f"{stats['seconds']:.1f}s{tokens}"


def _failures(script, breaker):
    """``"2/1"``: failed replies in a row / failed automatic compactions; ``!`` = breaker open
    (``breaker``: :func:`ai_contrib.admin.read_model.breaker_view`)."""
    text = f"{script.db.reply_failures or 0}/{breaker['failures']}"
    return text + ("!" if breaker["state"] == "open" else "")


class CmdAIList(StaffCommand):
    """
    List the AI NPCs of the game.

    Usage:
      ailist

    One line per NPC: name and dbref, location, mode, tokens in its history
    against its budget (and %), compaction strategy, the last reply's cost
    (seconds, prompt tokens; since the server started), and failures: replies
    failed in a row / automatic compactions failed in a row, "!" when
    automatic compaction is paused (the breaker is open). Game subclasses of
    AssistantCharacter, and any object with an AssistantScript, count.
    """

    key = "ailist"

    def func(self) -> None:
        npcs = all_ai_npcs()
        if not npcs:
            self.caller.msg("There are no AI NPCs.")
            return
        table = self.table("NPC", "where", "mode", "tokens/budget",
                            "strategy", "reply", "fails")
        for npc, script in npcs:
            where = npc.location.key if npc.location else "-"
            name = f"{npc.key} {npc.dbref}"
            if script is None:
                table.add_row(name, where, "no script", "-", "-", "-", "-")
                continue
            figures = npc_summary(npc, script)  # what the staff web page shows
            table.add_row(name, where, figures["mode"], _tokens(figures), figures["strategy"],
                          _last_reply(script), _failures(script, figures["breaker"]))
        self.caller.msg(f"|wAI NPCs|n: {len(npcs)}\n{table}")


PERSONA_SHOWN = 240  # characters of the persona aiconfig shows (aihistory/show has no crop)


def _in_effect(npc, budget, width):
    """``aiconfig``'s first lines: what the NPC works with now and why, where that is not one
    option's value: its history ``budget`` (the model's window may cut ``max_context_tokens``,
    :func:`ai_contrib.admin.read_model.budget_view`) and its persona, each wrapped to ``width`` at
    word boundaries. Lines, not a table: the table below lists options only."""
    persona = persona_view(npc)

    def item(head, text):
        return textwrap.fill(f"{head} {text}", width, initial_indent="  ",
                             subsequent_indent="    ", break_on_hyphens=False)

    return "\n".join([
        "|wIn effect now|n",
        item(f"history budget: {budget['tokens']} tokens, from {budget['source']}:",
             shown(budget["why"])),
        item(f"persona ({persona['source']}):", shown(persona["text"], PERSONA_SHOWN) or "-"),
    ])


class CmdAIConfig(StaffCommand):
    """
    Show or change an AI NPC's configuration.

    Usage:
      aiconfig <npc>
      aiconfig <npc>/<option>=<value>
      aiconfig <npc>/<option>=
      aiconfig/reset <npc>/<option>

    Without an option: first what the NPC works with now where no one option
    says it: its history budget in tokens and why (the model's context window
    less the prompt's other parts may cut max_context_tokens: "model window"),
    and its persona (NPC, or the default one). Then every per-NPC option with
    its value, its unit (tokens, seconds, ...) and where it comes from: NPC (an
    Attribute on the NPC's AssistantScript; "= game" when it equals the
    game's value now), game (the AI_<OPTION> setting in the game's
    settings.py) or default (the contrib's). The script's id is shown too
    (#id, for the scripts command).

    <option>=<value> sets the option for this NPC only. The value must be of
    the option's type: yes/no for switches, a whole number, a number
    (fractions as 0.7 or 70%), or text; compact_strategy, answer_when and
    summary_prompt_style take one of their names. An empty value or /reset
    removes the NPC's own value, so the game's setting applies again.
    Game-wide options (the model server, the memory store, gossip...) are
    refused: set AI_<OPTION> in the game's settings instead.
    """

    key = "aiconfig"
    switch_options = ("reset",)

    def func(self) -> None:
        """Parse ``<npc>[/<option>[=<value>]]`` and show, set or clear (see the class doc)."""
        caller = self.caller
        name, _, rest = self.args.strip().partition("/")
        option, equals, value = rest.partition("=")
        option = option.strip().lower()
        npc, script = self.npc_named(name, "aiconfig <npc>[/<option>=<value>]")
        if not npc:
            return
        if not option:
            self.show(npc, script)
        elif "reset" in self.switches or (equals and not value.strip()):
            self.clear(npc, script, option)
        elif equals:
            self.set(npc, script, option, value)
        else:
            caller.msg(f"Usage: aiconfig {npc.key}/{option}=<value>  "
                       f"(or aiconfig/reset {npc.key}/{option})")

    def show(self, npc, script) -> None:
        """
        Tell the caller every per-NPC option of ``npc`` (records with ``per_npc``, table
        order): one row each, option / value (the unit on a second line where the option
        counts something and the value is not None) / from (NPC, NPC (= game), game or
        default); then the game-wide options it holds an ignored Attribute of, if any.
        """
        width = table_width(self)
        budget = budget_view(script)  # the figures ailist, aihistory and the web page show
        effective = _in_effect(npc, budget, width)
        table = admin_table(width, "option", "value", "from")
        for option, value, source in effective_config(script):
            text = repr(value) if value is None or isinstance(value, str) else str(value)
            text = shown(text, 30)
            if option.unit and value is not None:
                text = f"{text}\n{option.unit}"
            if option.attribute == "max_context_tokens" and budget["tokens"] < value:
                text += f"\n(in effect: {budget['tokens']})"
            table.add_row(option.attribute, text, source)
        # whole option names and sources where the client is wide enough to leave the value
        # column (and its units) 20 columns; a narrower one lets EvTable share the width out
        names, sources = max(len(name) for name in PER_NPC_OPTIONS) + 4, len(SOURCE_NPC_SAME) + 3
        if width - names - sources >= 20:
            table.reformat_column(0, width=names)
            table.reformat_column(2, width=sources)
        ignored = ignored_attributes(script)
        note = ""
        if ignored:
            note = ("\n|yNot read|n: Attributes of game-wide options (remove one: "
                    f"aiconfig {npc.key}/<option>=)\n"
                    + "\n".join(f"  {o.attribute}: set {o.setting} instead" for o in ignored))
        self.caller.msg(
            f"|wConfiguration of {npc.key}|n ({npc.dbref}, AssistantScript #{script.id})\n"
            f"{effective}\n{table}\nfrom: NPC = this NPC's own value, game = the game's "
            f"AI_<OPTION> setting,\n      default = the contrib's default.\n"
            f"Change one: aiconfig {npc.key}/<option>=<value>\n"
            f"Back to the game's: aiconfig {npc.key}/<option>={note}"
        )

    def set(self, npc, script, option, text) -> None:
        """
        Set per-NPC ``option`` of ``npc`` to ``text`` parsed by its record
        (:func:`ai_contrib.admin.npc_config.parse_value`), and say what it was before and from where;
        refuse (telling why) an unknown or game-wide option or a bad value, changing nothing.
        """
        try:
            value = parse_value(option, text)
        except ValueError as err:
            self.caller.msg(shown(str(err)))
            return
        before, source = resolve_option(option, script)
        script.attributes.add(option, value)
        note = " Token counts use the new model after a reload." if option == "llm_model" else ""
        self.caller.msg(f"{npc.key}: {option} = {shown(repr(value))} for this NPC "
                        f"(was {shown(repr(before))}, from {source}).{note}")

    def clear(self, npc, script, option) -> None:
        """
        Remove ``npc``'s own value of per-NPC ``option``, so that the game's setting (or the
        default) applies again, and say which. A game-wide option's Attribute, never read, is
        removed too when the NPC has one; otherwise a game-wide or unknown name is refused.
        """
        try:
            per_npc_record(option)
        except ValueError as err:
            if option in GAME_WIDE_OPTIONS and script.attributes.has(option):
                script.attributes.remove(option)
                self.caller.msg(f"{npc.key}: removed its {option} Attribute, which was never "
                                f"read: {option} is game-wide (AI_{option.upper()}).")
            else:
                self.caller.msg(shown(str(err)))
            return
        # removed, not set to None: resolve_option() then names the setting it follows
        script.attributes.remove(option)
        value, source = resolve_option(option, script)
        self.caller.msg(f"{npc.key}: {option} follows the game again: {shown(repr(value))} "
                        f"(from {source}).")


def _not_now(caller, npc, why):
    """Tell ``caller`` that ``npc``'s memory cannot be changed now, and ``why`` (a reply is being
    written, memory work is under way): true when it was told, false when ``why`` is empty."""
    if why:
        caller.msg(f"Not now: {why} for {npc.key}. Try again in a moment.")
    return bool(why)


#: names a reset's line lists at most; the rest are counted
RESET_PEOPLE_SHOWN = 10


def _describe_people(names):
    """``"3 people records (whom it met: Wren, Tamsin, Hilda)"``, at most
    :data:`RESET_PEOPLE_SHOWN` names (safe text) and how many more."""
    shown_names = [shown(name) for name in names[:RESET_PEOPLE_SHOWN]]
    more = len(names) - len(shown_names)
    listed = ", ".join(shown_names) + (f" and {more} more" if more > 0 else "")
    return f"{len(names)} people records" + (f" (whom it met: {listed})" if names else "")


def _describe_reset(npc, report):
    """The line saying what ``aireset`` removed (or will remove, before the callbacks)."""
    files = report.get("deleted_files", report["archive_files"])
    parts = [
        f"{report['messages']} messages in context ({report['summaries']} summaries)",
        f"the archive: {report['archive_records']} records, {report['archive_bytes']} bytes "
        f"in {len(files)} file(s)" + (f" ({', '.join(files)})" if files else ""),
        f"{report['journal_entries']} journal entries",
        f"{report['entity_profiles']} entity profiles",
        _describe_people(report.get("people") or []),
        f"{report['compaction_events']} compaction events and the counters "
        f"({report['compactions']} compactions, failures, last reply and sleep)",
    ]
    return "; ".join(parts)


def _refusals_note(npc):
    """What ``aireset`` keeps of staff's refusals, ``""`` when none: the players ``aiforget``
    made the NPC forget and the facts ``aigossip/erase`` erased from it (its
    ``forgotten_players`` and ``erased_facts`` Attributes), which it still refuses after a reset
    (``docs/design.md``, "Gossip")."""
    from ..npc.erase import erased_facts

    forgotten, erased = len(npc.db.forgotten_players or ()), len(erased_facts(npc))
    if not forgotten and not erased:
        return ""
    return (f". It still refuses the gossip of the {forgotten} players it was made to forget "
            f"and the {erased} facts erased from it (they stay)")


class CmdAIReset(StaffCommand):
    """
    Wipe an AI NPC's memory.

    Usage:
      aireset <npc>
      aireset/confirm <npc>
      aireset/confirm/pins <npc>

    Without /confirm: says what would be removed. With /confirm: removes the
    NPC's conversation history (context and checkpoint), its journal,
    entity profiles and people records (whom it has met), its archive file
    and full-text index (deleted, not
    kept), its Mem0 memories, its compaction log and counters, and reports
    each. Its persona, configuration, mode and pins (aipin) stay; with
    /pins its pins are removed too. What staff made it refuse stays: the
    players aiforget made it forget, the facts aigossip/erase erased.
    Refused while it is writing a reply or doing memory work: try again a
    moment later.
    """

    key = "aireset"
    switch_options = ("confirm", "pins")

    def func(self) -> None:
        from ..npc.erase import busy_reason, reset_memory, reset_preview

        caller = self.caller
        npc, script = self.npc_named(self.args, "aireset[/confirm] <npc>")
        if not npc:
            return
        pins = len(get_pins(npc))
        clear = "pins" in self.switches
        if clear:
            pin_note = f"; its {pins} pins"
        else:
            pin_note = (f". Its {pins} pins stay (aireset/confirm/pins {npc.key} removes them "
                        "too)" if pins else "")
        if "confirm" not in self.switches:
            report = reset_preview(script, npc)
            memory = "its Mem0 memories" if report["memory"] else "nothing in Mem0 (it is off)"
            switches = "/confirm/pins" if clear else "/confirm"
            caller.msg(
                f"|yThis removes from {npc.key}|n: {_describe_reset(npc, report)}; {memory}"
                f"{pin_note}{_refusals_note(npc)}. It cannot be undone.\nType |waireset{switches} {npc.key}|n to do it."
            )
            return
        if _not_now(caller, npc, busy_reason(script)):
            return
        caller.msg(f"Resetting {npc.key}'s memory...")
        removed_pins = clear_pins(npc) if clear else None

        def _done(report):
            if report.get("memories") is not None:
                memory = f"Mem0: {report['memories']} memories deleted"
            elif report.get("memory_error"):
                memory = f"|rMem0 failed|n: {shown(report['memory_error'])}"
            else:
                memory = "Mem0: off, nothing to delete"
            files = (f"; |rarchive files not deleted|n: {shown(report['file_error'])}"
                     if report.get("file_error") else "")
            kept = (f"; {removed_pins} pins removed" if removed_pins is not None
                    else f"; {pins} pins kept" if pins else "")
            caller.msg(f"Reset {npc.key}: removed {_describe_reset(npc, report)}; {memory}"
                       f"{files}{kept}.")

        reset_memory(script, npc).addCallback(_done)


def _find_player(caller, script, text):
    """
    The player an NPC is to forget: ``(dbref, name)`` from the NPC's people records (name,
    any case, or ``#dbref``), else a character found by a global search; ``(None, None)``
    after telling ``caller`` why.
    """
    from ..npc.scene import all_people

    wanted = text.strip()
    records = [r for r in all_people(script)
               if wanted.lower() in (str(r.get("name") or "").lower(), str(r.get("dbref")))]
    if len(records) > 1:
        caller.msg("Several people of that name: "
                   + ", ".join(f"{shown(r.get('name'))} ({r.get('dbref')})" for r in records)
                   + ". Give the dbref.")
        return None, None
    if records:
        return str(records[0]["dbref"]), str(records[0].get("name") or records[0]["dbref"])
    found = caller.search(wanted, global_search=True, quiet=True) or []
    if len(found) == 1:
        return found[0].dbref, found[0].key
    caller.msg(f"No player '{shown(wanted)}' is known to {script.obj.key}"
               + (" (several characters match)." if found else "."))
    return None, None


def _describe_forget(report):
    """The parts of what ``aiforget`` removes (or would remove)."""
    memories = report.get("memories")
    parts = [
        f"{report['lines']} of their lines and replies only to them (out of the search index: "
        f"{report['index_rows']} rows; {report['lines_in_context']} in context)",
        f"{report['summaries']} summaries made from them (dropped)",
        f"{report['journal_entries']} journal entries",
        f"{report['pins']} pins",
        "the people record" if report["people"] else "no people record",
    ]
    if "profiles" in report:
        parts.append(f"{report['profiles']} entity profile(s)")
    if memories is not None:
        parts.append(f"{memories} Mem0 memories")
    return "; ".join(parts)


class CmdAIForget(StaffCommand):
    """
    Make an AI NPC forget one player.

    Usage:
      aiforget <npc> = <player>
      aiforget/confirm <npc> = <player>

    Without /confirm: says what would be removed. With /confirm: removes
    everything the player said to the NPC and what was derived from it:
    their lines (and the NPC's replies to them alone) from its context and
    from the search index of its archive, the summaries written from those
    lines (dropped whole; the other lines they covered stay searchable), the
    journal entries and Mem0 memories told by them or made from their lines,
    the NPC's people record and entity profile of them, and the pins about
    them; then reports each. The archive file keeps the raw lines for staff
    until aireset. <player> is a name or #dbref the NPC knows, or any
    character. Refused while the NPC is writing a reply or doing memory
    work: try again a moment later.
    """

    key = "aiforget"
    switch_options = ("confirm",)

    def func(self) -> None:
        from ..npc.forget import forget_player, preview_forget
        from ..npc.erase import busy_reason

        caller = self.caller
        if not self.lhs or not self.rhs:
            caller.msg("Usage: aiforget[/confirm] <npc> = <player>")
            return
        npc, script = find_npc(caller, self.lhs.strip())
        if not npc:
            return
        dbref, name = _find_player(caller, script, self.rhs)
        if not dbref:
            return
        who = f"{shown(name)} ({dbref})"

        def _failed(failure):
            caller.msg(f"|rCould not make {npc.key} forget {who}|n: "
                       f"{shown(failure.getErrorMessage())}")

        if "confirm" not in self.switches:
            def _preview(plan):
                report = {"lines": len(plan["line_ids"]), "index_rows": len(plan["seqs"]),
                          "lines_in_context": plan["lines_in_context"],
                          "summaries": len(plan["summary_ids"]),
                          "journal_entries": len(plan["journal_ids"]),
                          "people": plan["people"], "pins": plan["pins"]}
                memory = ("and their Mem0 memories" if get_setting("MEMORY_ENABLED")
                          else "nothing in Mem0 (it is off)")
                caller.msg(f"|yThis makes {npc.key} forget {who}|n: {_describe_forget(report)}; "
                           f"{memory}. It cannot be undone.\nType |waiforget/confirm "
                           f"{npc.key} = {dbref}|n to do it.")

            preview_forget(script, npc, dbref, name).addCallbacks(_preview, _failed)
            return
        if _not_now(caller, npc, busy_reason(script)):
            return
        caller.msg(f"Making {npc.key} forget {who}...")

        def _done(report):
            # the NPC became busy before the work began (forget_player checks again)
            if "busy" in report:
                _not_now(caller, npc, report["busy"])
                return
            error = (f"; |rMem0 failed|n: {shown(report['memory_error'])} (it is tried again "
                     "when the server starts)" if report.get("memory_error") else "")
            caller.msg(f"{npc.key} forgot {who}: removed {_describe_forget(report)}{error}.")

        forget_player(script, npc, dbref, name).addCallbacks(_done, _failed)
