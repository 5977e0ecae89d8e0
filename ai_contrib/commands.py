"""
In-game commands: ``talk`` for players, ``aihistory``, ``compact``, ``aisleep``, ``aiwake`` and
``aimemory`` for admins, and the :class:`AIContribCmdSet` that bundles them with the admin
commands of :mod:`ai_contrib.admin.admin_commands` (``ailist``, ``aiconfig``, ``aireset``).
"""

import re
import time

from evennia.commands.cmdset import CmdSet
from evennia.commands.default.muxcommand import MuxCommand
from evennia.utils.ansi import raw
from evennia.utils.utils import wrap

from .admin.command_util import (  # noqa: F401
    HELP_CATEGORY,
    StaffCommand,
    admin_table,
    shown,
    support_text,
    table_width,
    when_cell,
)
from .admin.npcs import find_npc  # any AI NPC, subclasses included
from .admin.read_model import compaction_events, journal_page, npc_summary
from .core.cascade import cascade_status
from .core.compaction import REGISTRY, context_change
from .core.masking import masked_count
from .core.messages import is_marker
from .memory.journal import ensure_journal, synthesis_entries
from .npc.compaction_report import describe_result, format_result  # noqa: F401
from .npc.compaction_runner import STRATEGIES, prompt_style, resolve_strategy
from .npc.replies import describe_reply
from .npc.scene import audience_label
from .rag_memory import compact_conversation_history
from .settings import get_setting
from .typeclasses import player_text, room_npcs


_STRATEGY_ARG = re.compile(r"/?\bstrategy\s*=\s*([\w-]+)", re.IGNORECASE)
RAW_PAGE_SIZE = 20
EVENTS_LISTED = 10  # compaction events in aihistory's overview


def _split_npc_switch(cmd):
    """Accept ``aihistory npc/raw 5 20`` as well as ``aihistory/raw npc 5 20``."""
    words = cmd.args.split()
    switches = list(cmd.switches)
    if words and "/" in words[0]:
        name, *extra = words[0].split("/")
        words[0] = name
        switches.extend(s.lower() for s in extra if s)
    return words, switches


class CmdTalk(MuxCommand):
    """
    Talk to an NPC.

    Usage:
      talk <npc> = <text>
      talk <npc> <text>
      talk/private <npc> = <text>

    Says something to a character in the room; AI NPCs answer in character.
    Saying things with `say` in an NPC's room works too. With /private you
    whisper it: the others in the room see only that you whispered, no other
    NPC hears it, the NPC answers you in a murmur, and it never passes on
    what you told it.
    """

    key = "talk"
    aliases = ["talk to"]
    switch_options = ("private",)
    locks = "cmd:all()"
    help_category = "General"
    # a space or a switch after the name ("talk/private"): "talking" is not talk
    arg_regex = r"(?:/\w+)*(?:\s.+)?$"

    def parse(self):
        super().parse()
        if self.rhs is not None:
            self.target_name, self.speech = self.lhs.strip(), self.rhs.strip()
            return
        # "talk Marta hello there": the longest leading run of words naming something here wins
        words = self.args.split()
        self.target_name, self.speech = None, ""
        location = self.caller.location
        candidates = location.contents if location else []
        for cut in range(len(words) - 1, 0, -1):
            name = " ".join(words[:cut])
            if any(obj.key.lower() == name.lower() or name.lower() in
                   [a.lower() for a in obj.aliases.all()] for obj in candidates):
                self.target_name, self.speech = name, " ".join(words[cut:])
                return
        if len(words) >= 2:
            self.target_name, self.speech = words[0], " ".join(words[1:])

    def func(self):
        caller = self.caller
        # the room hears what the NPC will store: no colours, no forged line breaks
        self.speech = player_text(self.speech)
        if not self.target_name or not self.speech:
            caller.msg(f"Usage: {self.key} <npc> = <text>  (or: {self.key} <npc> <text>)")
            return
        target = caller.search(self.target_name)
        if not target:
            return
        if "private" in self.switches:
            self.whisper(target)
            return
        # ...and repeats it as the data it is: raw() doubles every bar left in it (one that
        # starts no code once stripped), so the room reads exactly the stored line and no
        # markup of the player's (the NPC's replies are shown the same way)
        shown_speech = raw(self.speech)
        caller.msg(f'You say to {target.get_display_name(caller)}, "{shown_speech}"')
        if caller.location:
            caller.location.msg_contents(
                f'{caller.key} says to {target.key}, "{shown_speech}"', exclude=[caller, target]
            )
        if hasattr(target, "at_heard_say"):
            target.at_heard_say(caller, self.speech, to=target)
        else:
            target.msg(f'{caller.key} says to you, "{shown_speech}"', from_obj=caller)
        # the other AI NPCs overhear it: stored with its audience, never answered by them
        # (docs/design.md, "Turns, not one call per line")
        for npc in room_npcs(caller):
            if npc != target:
                npc.at_heard_say(caller, self.speech, to=target)

    def whisper(self, target):
        """
        ``talk/private``: only ``target`` hears the line, stored with the speaker alone as its
        audience, so it is private for every purpose (``docs/design.md``, "Privacy by
        audience", "Gossip"): the reply built from it is murmured, and nothing drawn from it
        ever passes as gossip. Other NPCs in the room do not hear it.
        """
        caller = self.caller
        caller.msg(f'You whisper to {target.get_display_name(caller)}, "{raw(self.speech)}"')
        if caller.location:
            caller.location.msg_contents(f"{caller.key} whispers something to {target.key}.",
                                         exclude=[caller, target])
        if hasattr(target, "at_heard_say"):
            target.at_heard_say(caller, self.speech, to=target, audience=[])
        else:
            target.msg(f'{caller.key} whispers to you, "{raw(self.speech)}"', from_obj=caller)


class CmdAITalk(CmdTalk):
    """
    Talk to an NPC: the same as talk, under a name no other contrib uses.

    Usage:
      aitalk <npc> = <text>
      aitalk <npc> <text>

    Evennia's own LLM contrib has a talk command too; whichever cmdset is added
    last owns talk, and aitalk always reaches this contrib's NPCs.
    """

    key = "aitalk"
    aliases = []


BAR_WIDTH = 20  # characters of the usage bar


def describe_strategy(script):
    """One line for ``aihistory``: the strategy and where it stands (its record's ``status``
    wording, :data:`ai_contrib.core.compaction.REGISTRY`)."""
    strategy = resolve_strategy(script)
    record = REGISTRY[strategy]
    history = script.history
    configured = script.cfg("compact_strategy")
    shown_name = strategy if str(configured).lower() == strategy else (
        f"{strategy} (configured {configured!r} is unknown)")
    names = ("compact_preserve_window", "mask_window", "mask_min_tokens",
             "cascade_immediate_window", "cascade_recent_window")
    values = {name: script.cfg(name) for name in names}
    values["masked"] = masked_count(history)
    if "{raw}" in record.status:  # only the cascade's line needs its status (O(n))
        values.update(cascade_status(
            history, int(values["cascade_immediate_window"]),
            int(values["cascade_recent_window"]),
        ))
    detail = record.status.format(**values)
    if record.summarises:
        detail += f"; {prompt_style(script)} prompts"
    return f"{shown_name} ({detail})"


def describe_benefit(script):
    """One line for ``aihistory``: the last benefit-guard decision, or that none was made."""
    decision = script.db.compact_benefit
    if not decision:
        return "not evaluated yet"
    verdict = "compact" if decision.get("run") else "|yskip|n"
    forced = " (forced by admin)" if decision.get("bypassed") else ""
    return (
        f"{verdict}{forced}: {decision.get('reason')} "
        f"[{decision.get('trigger')}, {(decision.get('at') or '')[:19]}]"
    )


def usage_bar(script, usage):
    """
    A coloured bar of ``usage`` for ``aihistory``: green below the sleep threshold, yellow from
    it up to the emergency threshold, red from that on (``docs/design.md``, "The budget fits the
    model"). Both thresholds stay visible while the bar has not reached them: a yellow ``:``
    marks the sleep threshold's cell and a red ``!`` the emergency threshold's.

    Args:
        script: the NPC's ``AssistantScript`` (its ``compact_sleep_threshold`` and
            ``compact_emergency_threshold``, fractions of the budget, pick the colour and the
            marks).
        usage (float): tokens in context divided by the effective budget; above 1.0 when the
            history overflows.

    Returns:
        str: ``"[" + colour code + "#" * filled + "|n" + rest + "]"``, :data:`BAR_WIDTH`
        characters between the brackets, ``rest`` being dots with the threshold marks, e.g.
        ``"[|g##########|n....|y:|n.|r!|n...]"`` at 50 % with thresholds at 70 % and 80 %; full
        (no marks) at 1.0 and above.
    """
    sleep_at = float(script.cfg("compact_sleep_threshold"))
    emergency_at = float(script.cfg("compact_emergency_threshold"))
    colour = "|g" if usage < sleep_at else "|y" if usage < emergency_at else "|r"
    filled = min(BAR_WIDTH, int(round(usage * BAR_WIDTH)))
    rest = ["."] * (BAR_WIDTH - filled)
    for at, mark in ((sleep_at, "|y:|n"), (emergency_at, "|r!|n")):
        cell = int(at * BAR_WIDTH + 1e-9) - filled
        if 0 <= cell < len(rest):
            rest[cell] = mark
    return f"[{colour}{'#' * filled}|n{''.join(rest)}]"


def _add_context_rows(table, npc, script, history, markers, figures):
    """``aihistory``'s rows about the NPC's context: mode, tokens against the budget and where
    the budget comes from, the thresholds, messages, the archive and compaction (``markers``:
    the summaries in ``history``; ``figures``: :func:`ai_contrib.admin.read_model.npc_summary`, the
    figures the staff web page shows)."""
    tokens, budget, usage = figures["tokens"], figures["budget"], figures["usage"]
    table.add_row("NPC", f"{npc.key} ({npc.dbref})")
    table.add_row("Mode", figures["mode"])
    table.add_row("Tokens", f"{tokens} / {budget} ({usage:.1%}) {usage_bar(script, usage)}")
    table.add_row("Budget", f"{figures['budget_why']} [from {figures['budget_source']}]")
    table.add_row(
        "Thresholds",
        f"sleep {figures['sleep_threshold']:.0%}, "
        f"emergency {figures['emergency_threshold']:.0%}, "
        f"preserve {script.cfg('compact_preserve_window')} messages",
    )
    table.add_row("Messages", f"{len(history)} in context ({len(markers)} summaries)")
    table.add_row("Archived", f"{script.archive.last_seq + 1} records")
    table.add_row("Compaction", "enabled" if script.cfg("compact_enabled") else "DISABLED")
    table.add_row("Strategy", describe_strategy(script))
    table.add_row("Benefit guard", describe_benefit(script))
    table.add_row("Compactions", f"{figures['compactions']} "
                                 f"(last: {figures['last_compaction'] or 'never'})")


def _add_health_rows(table, script, breaker):
    """``aihistory``'s rows about how the NPC is doing: the compaction ``breaker``
    (:func:`ai_contrib.admin.read_model.breaker_view`), failed replies, the last reply and sleep,
    lines heard and not answered yet."""
    if breaker["state"] == "open":
        breaker = f"|rOPEN|n: automatic compaction paused ({shown(breaker['last_error'])})"
    elif breaker["failures"]:
        breaker = (f"closed, {breaker['failures']} recent failure(s): "
                   f"{shown(breaker['last_error'])}")
    else:
        breaker = "closed"
    table.add_row("Breaker", breaker)
    if script.db.reply_failures:
        table.add_row(
            "Replies",
            f"|r{script.db.reply_failures} failed in a row|n (last: "
            f"{shown(script.db.last_reply_error)})",
        )
    elif script.db.last_reply_error:
        table.add_row("Reply error", f"last: {shown(script.db.last_reply_error)} "
                                     "(replies have worked since)")
    if script.ndb.last_reply:
        table.add_row("Last reply", describe_reply(script.ndb.last_reply))
    last_sleep = script.db.last_sleep
    if script.ndb.sleep_watchers or (script.db.operating_mode == "sleep"
                                     and script.ndb.memory_work is not None):
        table.add_row("Last sleep", "sleep work under way")
    elif last_sleep:
        table.add_row("Last sleep",
                      f"{last_sleep['at'][:19]}: {shown(last_sleep['summary'])}")
    pending = script.pending_ids()
    if pending:
        table.add_row("Heard", f"{len(pending)} lines not answered yet")


def _events_section(events, width):
    """``aihistory``'s table of the compaction ``events``
    (:func:`ai_contrib.admin.read_model.compaction_events`, the web page's), numbered as the web
    page's chart numbers them (``C1`` the oldest of those it keeps), as lines (none without
    events)."""
    if not events:
        return []
    ev = admin_table(width, "when, event", "trigger", "result", "messages", "tokens",
                     "reduction")
    first = len(events) - min(len(events), EVENTS_LISTED) + 1
    for number, e in enumerate(events[-EVENTS_LISTED:], first):
        # the chart's number follows the time: the table keeps its six columns
        when = f"{when_cell(e.get('at'))} C{number}"
        if e["success"]:
            fidelity = fidelity_cell(e)
            ev.add_row(
                when, f"{e['trigger']} ({e['strategy']})", "ok", e["messages"],
                f"{e['before']} -> {e['after']}" + ("" if e["context"] else " (part)"),
                f"{e['reduction'] or 0:.1f}%"
                + ("" if fidelity == "-" else f", fidelity {fidelity}")
                + (" (extract)" if e["fidelity_replaced"] else ""),
            )
        else:
            ev.add_row(when, e["trigger"], "failed", "-", "-", shown(e["error"], 40))
    return ["|wCompaction events|n", str(ev)]


def _summaries_section(script, markers, width):
    """``aihistory``'s table of the summary ``markers`` in context, as lines (none without
    them)."""
    if not markers:
        return []
    mt = admin_table(width, "summary", "compacted", "at", "tokens before -> summary",
                     "audience", "archive range")
    for m in markers:
        meta = m.get("metadata") or {}
        # who may hear it (docs/design.md, "Summaries by audience"), and how many
        # lines a narrower group heard were left out of it
        audience = audience_label(script, meta.get("audience"))
        if meta.get("left_out"):
            audience += f"; {meta['left_out']} line(s) left out"
        mt.add_row(
            m["id"], meta.get("compacted_count"), when_cell(meta.get("compacted_at")),
            f"{meta.get('original_token_count')} -> {meta.get('summary_token_count')}",
            audience, f"{meta.get('first_seq')}..{meta.get('last_seq')}",
        )
    return ["|wSummaries in context|n", str(mt)]


def _syntheses_section(npc, width):
    """``aihistory``'s table of the NPC's 3 latest journal syntheses, as lines (none without
    them)."""
    synth = synthesis_entries(ensure_journal(npc.db.journal), limit=3)
    if not synth:
        return []
    jt = admin_table(width, "journal entry", "importance", "content")
    for entry in synth:
        jt.add_row(entry["id"], entry.get("importance"), shown(entry["content"], 70))
    return ["|wRecent journal syntheses|n", str(jt)]


class CmdAIHistory(StaffCommand):
    """
    Inspect an AI NPC's conversation history and compaction state.

    Usage:
      aihistory <npc>
      aihistory <npc>/raw [from] [to]
      aihistory/raw <npc> [from] [to]
      aihistory <npc>/journal [<page> | <entry id>]
      aihistory <npc>/people
      aihistory <npc>/show <seq or id>
      aihistory <npc>/prompt [n]
      aihistory <npc>/prompt/full [n]

    Without a switch: token usage against the budget (tokens and %), message
    count, mode, the compaction strategy and where it stands, the last
    benefit-guard decision (estimated saving against the minimum), last
    compaction, each compaction event with its metadata, the summaries now in
    context, the latest journal synthesis entries, the last sleep's result and
    the last reply error.

    /raw pages through the NPC's lossless archive of everything said, compacted
    or not, by archive sequence number (default: the last 20 messages).

    /journal lists the NPC's journal: facts it recorded, compaction syntheses
    and observations, with importance, source and whether they are consolidated
    into long-term memory (Mem0); "who" is who told it, or for a fact heard from
    another NPC who said it first and the NPCs it passed through (aigossip).
    Newest first, 20 a page: a number gives an older page. A checked fact's
    content ends with its "support": the share of its words that the one line
    it comes from holds; "line (0.40)" means the model's fact (0.40) was
    replaced by that line, quoted. With an entry id it shows that entry in
    full.

    /people lists the people the NPC has spoken with: when it first met them and
    last spoke with them (real time and game time), the lines exchanged and its
    impression of them, made from its journal while it sleeps.

    /show shows one archive record in full (text and metadata): a message by its
    archive sequence number or id, a summary by its id (the overview lists them)
    or by the sequence number of its compaction record. Tables crop text; /show
    never does.

    /prompt shows the receipt of the last reply (or of the n-th last): the
    prompt's parts in order with their token counts, the memories retrieved
    with their source, reference and score, the prompt tokens the server
    evaluated and reused, the tokens generated, the latency and the model.
    /prompt/full shows that reply's exact prompt text (kept for the last five
    replies since the server started).
    """

    key = "aihistory"

    def func(self):
        words, switches = _split_npc_switch(self)
        if not words:
            self.caller.msg("Usage: aihistory <npc>[/raw [from] [to] | /journal [<page> | <id>] "
                            "| /people | /show <seq or id> | /prompt[/full] [n]]")
            return
        npc, script = find_npc(self.caller, words[0])
        if not npc:
            return
        if "prompt" in switches:
            self.show_prompt(npc, script, words[1:], full="full" in switches)
        elif "show" in switches:
            self.show_record(npc, script, words[1:])
        elif "raw" in switches:
            self.show_raw(npc, script, words[1:])
        elif "people" in switches:
            self.show_people(npc, script)
        elif "journal" in switches and len(words) > 1 and words[1].isdigit():
            self.show_journal(npc, int(words[1]))
        elif "journal" in switches and len(words) > 1:
            self.show_journal_entry(npc, words[1])
        elif "journal" in switches:
            self.show_journal(npc)
        else:
            self.show_overview(npc, script)

    def show_overview(self, npc, script):
        history = script.history
        markers = [m for m in history if is_marker(m)]
        figures = npc_summary(npc, script)
        count = figures["compactions"]
        width = table_width(self)
        table = admin_table(width)
        _add_context_rows(table, npc, script, history, markers, figures)
        _add_health_rows(table, script, figures["breaker"])
        lines = [f"|wAI history of {npc.key}|n", str(table)]
        if count >= int(get_setting("COMPACT_WARN_AFTER")):
            lines.append("|y" + wrap(
                f"Warning: {count} compactions so far. Each summary folds in the previous one "
                "and detail degrades; check the journal and consider a larger budget.", width
            ) + "|n")
        lines += _events_section(compaction_events(script), width)
        lines += _summaries_section(script, markers, width)
        lines += _syntheses_section(npc, width)
        self.caller.msg("\n".join(lines))

    def show_prompt(self, npc, script, args, full=False):
        from .admin.receipt_views import recent_prompt, reply_records

        try:
            back = max(1, int(args[0])) if args else 1
        except ValueError:
            self.caller.msg("Usage: aihistory <npc>/prompt[/full] [n]  (n: 1 = the last reply)")
            return
        replies = reply_records(script, back)
        if len(replies) < back:
            self.caller.msg(f"{npc.key} has {len(replies)} archived replies; none is {back} back.")
            return
        reply = replies[0]
        if full:
            self.caller.msg(self.format_full_prompt(npc, reply, recent_prompt(script, reply["seq"])))
        else:
            self.caller.msg(self.format_receipt(npc, reply))

    def format_receipt(self, npc, reply):
        from .core.receipts import describe_cost, describe_part, describe_skipped, memory_source

        width = table_width(self)
        head = (f"|wReceipt of {npc.key}'s reply #{reply['seq']}|n "
                f"({(reply.get('timestamp') or '')[:19]}): {shown(reply['content'], 50)}")
        # the line(s) it answered (docs/design.md, "Reply receipts")
        answered = [wrap(f"answering #{line['seq']} {shown(line['name'] or '')}: "
                         f"\"{shown(line['content'], 120)}\"", width)
                    for line in reply.get("answered") or ()]
        head = "\n".join([head] + answered)
        receipt = reply.get("receipt")
        if not receipt:
            return f"{head}\nno receipt (this reply was written before receipts were kept)"
        lines = [head, wrap(shown(describe_cost(receipt)), width)]
        if receipt.get("listeners"):
            lines.append(wrap("heard by " + shown(", ".join(receipt["listeners"])), width))
        parts = admin_table(width, "#", "prompt part", "tokens")
        for i, part in enumerate(receipt.get("parts") or [], 1):
            parts.add_row(i, shown(describe_part(part)), part.get("tokens"))
        lines += ["|wPrompt parts, in order|n", str(parts)]
        if receipt.get("world_skipped"):
            lines.append(wrap("Left out for room: " + shown(describe_skipped(
                receipt["world_skipped"])), width))
        memories = receipt.get("memories") or []
        if memories:
            mt = admin_table(width, "source", "kind", "score", "new", "memory")
            for memory in memories:
                mt.add_row(shown(memory_source(memory)), shown(memory.get("kind")),
                           f"{float(memory.get('score') or 0):.3f}",
                           "yes" if memory.get("new") else "no", shown(memory.get("text"), 60))
            lines += ["|wRetrieved memories|n", str(mt)]
        else:
            lines.append("No memories were retrieved for this reply.")
        return "\n".join(lines)

    def format_full_prompt(self, npc, reply, prompt):
        if prompt is None:
            return (f"The prompt of {npc.key}'s reply #{reply['seq']} is no longer kept (only "
                    "the last five replies since the server started are).")
        width = table_width(self)
        lines = [f"|wPrompt of {npc.key}'s reply #{reply['seq']}|n "
                 f"({len(prompt['messages'])} messages)"]
        for i, msg in enumerate(prompt["messages"], 1):
            lines.append(f"|c--- {i}. {shown(msg.get('role'))} ---|n")
            # line by line: wrapping the whole text would fold its line breaks away
            lines += [wrap(line, width) if line else ""
                      for line in shown(msg.get("content") or "").splitlines()]
        return "\n".join(lines)

    def show_record(self, npc, script, args):
        from .admin.item_views import archive_item, find_archive_record

        if not args:
            self.caller.msg("Usage: aihistory <npc>/show <seq or id>")
            return
        record = find_archive_record(script, args[0])
        if record is None:
            self.caller.msg(f"No archive record or summary '{shown(args[0])}' for {npc.key} "
                            f"(seq 0..{script.archive.last_seq}).")
            return
        self.caller.msg(archive_item(npc, script, record))

    def show_journal_entry(self, npc, entry_id):
        from .admin.item_views import journal_item
        from .memory.journal import find_entry

        journal = ensure_journal(npc.db.journal)
        entry = find_entry(journal, id=entry_id)
        if entry is None:
            self.caller.msg(f"No journal entry '{shown(entry_id)}' for {npc.key} "
                            f"(aihistory {npc.key}/journal lists them).")
            return
        consolidated = entry_id in set(journal["consolidated_entry_ids"])
        self.caller.msg(journal_item(npc, entry, consolidated))

    def show_people(self, npc, script):
        """The people ``npc`` has met (``docs/design.md``, "Scene, events and people")."""
        from .npc.scene import all_people

        people = all_people(script)
        if not people:
            self.caller.msg(f"{npc.key} has not spoken with anyone yet.")
            return
        now = time.time()
        table = admin_table(table_width(self), "who", "first met", "last spoke", "lines",
                            "impression")
        for record in people:
            table.add_row(
                f"{shown(record.get('name'), 30)} {shown(record.get('dbref'))}",
                _when(record.get("first_met"), record.get("first_met_game"), now),
                _when(record.get("last_spoke"), record.get("last_spoke_game"), now),
                int(record.get("lines") or 0),
                shown(record.get("impression") or "-", 60),
            )
        self.caller.msg(f"|wPeople {npc.key} has met|n: {len(people)}\n{table}")

    def show_journal(self, npc, page=1):
        """A page of ``npc``'s journal, newest first (:func:`ai_contrib.admin.read_model.
        journal_page`, the web page's pages)."""
        found = journal_page(npc, page)
        if not found["total"]:
            self.caller.msg(f"{npc.key}'s journal is empty.")
            return
        table = admin_table(table_width(self), "id", "importance", "source", "who", "in Mem0",
                            "content")
        for entry in found["entries"]:
            table.add_row(
                entry["id"], entry["importance"], entry["source_type"],
                # a fact heard from another NPC: who said it first and the NPCs it passed
                # through (docs/design.md, "Gossip")
                shown(entry["who"] or "-"),
                "yes" if entry["consolidated"] else "no",
                shown(entry["content"], 60) + _support_tail(entry),
            )
        pages = found["pages"]
        more = (f"; older: aihistory {npc.key}/journal {found['page'] + 1}"
                if found["page"] < pages else "")
        self.caller.msg(
            f"|wJournal of {npc.key}|n: {found['total']} entries, {found['consolidated']} "
            f"consolidated (page {found['page']} of {pages}, newest first{more})\n{table}"
        )

    def show_raw(self, npc, script, bounds):
        archive = script.archive
        try:
            numbers = [int(b) for b in bounds[:2]]
        except ValueError:
            self.caller.msg("Usage: aihistory <npc>/raw [from] [to]  (archive sequence numbers)")
            return
        last = archive.last_seq
        start = numbers[0] if numbers else max(0, last - 4 * RAW_PAGE_SIZE)
        if len(numbers) > 1:
            end = numbers[1]
        else:  # no upper bound given: the page ends at the newest record
            end = start + 4 * RAW_PAGE_SIZE - 1 if numbers else last
        messages = archive.messages(start, end)[-RAW_PAGE_SIZE:] if not numbers else \
            archive.messages(start, end)[:RAW_PAGE_SIZE]
        if not messages:
            self.caller.msg(f"No archived messages of {npc.key} in {start}..{end} (last seq {last}).")
            return
        in_context = {m["id"] for m in script.history}
        table = admin_table(table_width(self), "seq", "time", "who", "text", "in context")
        for m in messages:
            who = m.get("name") or m.get("role")
            table.add_row(m.get("seq"), when_cell(m.get("timestamp")), shown(who),
                          shown(m.get("content"), 60), "yes" if m["id"] in in_context else "no")
        self.caller.msg(
            f"|wArchive of {npc.key}|n: seq {messages[0]['seq']}..{messages[-1]['seq']} "
            f"of 0..{last}\n{table}"
        )


class CmdCompact(StaffCommand):
    """
    Compact an AI NPC's conversation history now.

    Usage:
      compact <npc>
      compact/force <npc>
      compact <npc>/strategy=<name>
      compact/strategy=<name> <npc>
      compact/set <npc>/strategy=<name>

    Compacts with the NPC's strategy (see aihistory), or runs the named one
    once; /set makes the named one the NPC's strategy from now on (compacting
    nothing now; safe on a live NPC: summaries already in its history stay and
    are folded in later):
{strategies}
    Without /force a summary only runs above the NPC's sleep threshold (a
    cascade cycle also when one is due); /force ignores the threshold and the
    benefit guard (never the preserve window). Reports what was done and tokens
    before -> after, or why nothing was done. Everything removed from the
    context stays in the archive (aihistory /raw).
    """

    key = "compact"
    switch_options = ("force", "set")

    def parse(self):
        # "strategy=<name>" may come as a switch or after the NPC's name; take it out before
        # MuxCommand sees it (it would drop it as an unknown switch)
        match = _STRATEGY_ARG.search(self.args)
        self.strategy = match.group(1).lower() if match else None
        if match:
            rest = self.args[: match.start()] + " " + self.args[match.end():]
            self.args = rest.lstrip() if rest.lstrip().startswith("/") else " " + rest.strip()
        super().parse()

    def func(self):
        caller = self.caller
        words, switches = _split_npc_switch(self)
        if not words:
            caller.msg("Usage: compact[/force|/set] <npc>[/strategy=<name>]")
            return
        if self.strategy is not None and self.strategy not in STRATEGIES:
            caller.msg(f"Unknown strategy '{self.strategy}'. Choose one of: {', '.join(STRATEGIES)}.")
            return
        npc, script = find_npc(caller, words[0])
        if not npc:
            return
        if "set" in switches:
            if self.strategy is None:
                caller.msg("Usage: compact/set <npc>/strategy=<name>")
                return
            before = resolve_strategy(script)
            script.db.compact_strategy = self.strategy
            caller.msg(f"{npc.key} now compacts with strategy {self.strategy} (was {before}).")
            return
        force = "force" in switches
        how = f" with strategy {self.strategy}" if self.strategy else ""
        caller.msg(f"Compacting {npc.key}'s history{how}{' (forced)' if force else ''}...")
        d = compact_conversation_history(
            script, npc, force=force, trigger="manual", strategy=self.strategy
        )
        d.addCallback(lambda result: caller.msg(format_compaction_result(npc, result)))
        d.addErrback(lambda failure: caller.msg(f"Compaction of {npc.key} failed: "
                                                f"{shown(failure.getErrorMessage())}"))


def _when(real, game, now):
    """
    A moment of a people record for a table, on three lines: ``"2026-05-01 18:02"`` (UTC),
    ``"(3 days ago)"``, ``"game: evening, day 3 of spring"`` (``"-"`` for none; the game's
    part only where recorded).
    """
    from datetime import datetime, timezone

    from .core.scene import clock_phrase, relative_time
    from .npc.scene import clock_at

    if real is None:
        return "-"
    text = (f"{datetime.fromtimestamp(real, timezone.utc):%Y-%m-%d %H:%M}\n"
            f"({relative_time(now - real)})")
    phrase = clock_phrase(clock_at(game)) if game is not None else ""
    return f"{text}\ngame: {phrase}" if phrase else text


def _strategy_help(width=78, indent=6, column=13):
    """The strategy list of the ``compact`` help, from each record's ``description``."""
    lines = []
    for record in REGISTRY.values():
        text = wrap(record.description, width - indent - column, indent=0).splitlines()
        lines.append(" " * indent + record.name.ljust(column) + text[0])
        lines.extend(" " * (indent + column) + more for more in text[1:])
    return "\n".join(lines)


CmdCompact.__doc__ = CmdCompact.__doc__.replace("{strategies}", _strategy_help())


def fidelity_cell(event):
    """A compaction event's summary fidelity for ``aihistory``: ``"0.94"`` (the score of the
    summary used: an extract's when the model's failed and was replaced, which the row says), ``"-"`` when none was scored (``docs/design.md``, "Summary fidelity")."""
    score = event.get("fidelity")
    return "-" if score is None else f"{score:.2f}"


def format_compaction_result(npc, result):
    """One line for an admin describing a compaction result (a
    :class:`~ai_contrib.core.compaction.CompactionResult`, see ``rag_memory``)."""
    return describe_result(
        npc.key, result,
        skipped=lambda r: f"Compaction of {npc.key} skipped: {r.reason}.",
        failed=lambda r: (f"Compaction of {npc.key} failed: {shown(r.error)}. "
                          "History unchanged."),
        done=lambda r: _summary_line(npc.key, r),
    )


def _summary_line(npc_key, result):
    return (
        f"Compacted {npc_key}: {result.compacted_messages} messages -> summary, "
        f"{result.original_tokens} -> {result.new_tokens} tokens "
        f"({result.reduction_pct:.1f}% reduction), {result.get('preserved_messages')} kept"
        + context_change(result)
        + (f"; fidelity {fidelity_cell(result)}"
           + (" (the model's summary failed the check: an extract of the span replaced it)"
              if result.get("fidelity_replaced") else "")
           if result.get("fidelity") is not None else "")
        + "."
    )


class _CmdSetMode(StaffCommand):
    """Shared body of aisleep and aiwake: find the NPC, switch its mode, report."""

    done_message = already_message = ""

    def switch(self, script):
        raise NotImplementedError

    def func(self):
        name = self.args.strip()
        if not name:
            self.caller.msg(f"Usage: {self.key} <npc>")
            return
        npc, script = find_npc(self.caller, name)
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
    entries consolidated into Mem0 (aihistory shows it too).
    """

    key = "aisleep"
    done_message = "{npc} falls asleep."
    already_message = "{npc} is already asleep."

    def switch(self, script):
        return script.sleep(reason=f"put to sleep by {self.caller.key}")

    def after_switch(self, npc, script):
        from .npc.sleep_report import watch_sleep

        caller = self.caller
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

    def switch(self, script):
        return script.wake(reason=f"woken by {self.caller.key}")


def _support_tail(fields):
    """`` (support 0.86)`` after a checked fact's text (its support by its line,
    :func:`~ai_contrib.admin.command_util.support_text`; ``docs/design.md``, "Facts you can
    trust"), ``""`` for anything unchecked: the tables keep their columns."""
    support = support_text(fields)
    return "" if support == "-" else f" (support {support})"


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

    def func(self):
        caller = self.caller
        words, switches = _split_npc_switch(self)
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

    def recall(self, npc, script, query, listener):
        from .npc.recall import recall_preview

        caller = self.caller
        width = table_width(self)
        listeners = {listener.dbref: listener.key} if listener is not None else None
        heard_by = f"heard by {listener.key}" if listener is not None else "no audience filter"

        def _show(found):
            if not found["results"]:
                caller.msg(f"{npc.key} would recall nothing for '{shown(query, 30)}' "
                           f"({heard_by}).")
                return
            table = admin_table(width, "source", "ref", "score", "kind", "memory")
            for item in found["results"]:
                table.add_row(item["source"], shown(str(item["ref"])[:8]),
                              f"{float(item.get('score') or 0):.3f}",
                              shown(item["kind"]),
                              shown(item["text"], 60) + _support_tail(item.get("grounding") or {}))
            caller.msg(f"|wWhat {npc.key} would recall for '{shown(query, 30)}'|n\n"
                       f"({heard_by}; the archive and Mem0, as a reply reads them)\n{table}")

        recall_preview(script, npc, query, listeners).addCallbacks(
            _show, lambda failure: caller.msg(
                f"Memory search failed: {shown(failure.getErrorMessage())}"))

    def list_mem0(self, npc, query):
        from .memory.mem0_store import get_store, npc_agent_id

        caller = self.caller
        width = table_width(self)
        d = get_store().search(npc_agent_id(npc), query, include_private=True, threshold=0.0)

        def _show(hits):
            if not hits:
                caller.msg(f"{npc.key} remembers nothing about '{shown(query)}'.")
                return
            table = admin_table(width, "id", "score", "source", "visibility", "memory")
            for hit in hits:
                meta = hit.get("metadata") or {}
                table.add_row(str(meta.get("memory_id") or "-")[:8],
                              f"{hit.get('score', 0):.3f}",
                              meta.get("source_type", "-"), meta.get("visibility", "-"),
                              shown(hit.get("text"), 60) + _support_tail(meta))
            caller.msg(f"|wMemories of {npc.key} for '{shown(query)}'|n\n{table}")

        d.addCallbacks(_show, lambda failure: caller.msg(
            f"Memory search failed: {shown(failure.getErrorMessage())}"))

    def show_memory(self, words):
        caller = self.caller
        if len(words) < 2:
            caller.msg("Usage: aimemory <npc>/show <memory id>")
            return
        npc, _script = find_npc(caller, words[0])
        if not npc:
            return
        from .admin.item_views import memory_item
        from .memory.mem0_store import get_store, npc_agent_id

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


class AIContribCmdSet(CmdSet):
    """The contrib's commands; add it to the game's ``CharacterCmdSet``."""

    key = "ai_contrib"

    def at_cmdset_creation(self):
        self.add(CmdTalk())
        self.add(CmdAITalk())  # survives a talk of another cmdset merged over this one
        self.add(CmdAIHistory())
        self.add(CmdCompact())
        self.add(CmdAISleep())
        self.add(CmdAIWake())
        self.add(CmdAIMemory())
        # imported here, as the admin commands are only wanted with the cmdset
        from .admin.admin_commands import CmdAIConfig, CmdAIForget, CmdAIList, CmdAIReset
        from .admin.destroy_command import CmdDestroy
        from .admin.gossip_commands import CmdAIGossip
        from .admin.lore_commands import CmdAILore, CmdAIPin

        self.add(CmdAIList())
        self.add(CmdAIConfig())
        self.add(CmdAIReset())
        self.add(CmdAIForget())
        # Evennia's destroy, which also says what became of an NPC's archive and memories
        self.add(CmdDestroy())
        self.add(CmdAILore())
        self.add(CmdAIPin())
        self.add(CmdAIGossip())
