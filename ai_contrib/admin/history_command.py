"""
``aihistory``: an AI NPC's context, compactions, summaries, journal, people and prompt
receipts for admins, from the read model (:mod:`ai_contrib.admin.read_model`).
"""

from __future__ import annotations

import time

from evennia.utils.utils import wrap

from ..core.actions import action_view
from ..core.cascade import cascade_status
from ..core.compaction import REGISTRY
from ..core.masking import masked_count
from ..core.messages import is_marker
from ..core.tick import usage_zone
from ..memory.journal import ensure_journal, synthesis_entries
from ..npc.compaction_runner import prompt_style, resolve_strategy
from ..npc.replies import describe_reply
from ..npc.scene import audience_label
from ..settings import get_setting
from .command_util import (
    StaffCommand,
    admin_table,
    shown,
    split_npc_switch,
    support_tail,
    table_width,
    when_cell,
)
from .npcs import find_npc
from .read_model import compaction_events, journal_page, npc_summary

RAW_PAGE_SIZE = 20
EVENTS_LISTED = 10  # compaction events in aihistory's overview
BAR_WIDTH = 20  # characters of the usage bar
#: the usage bar's colour in each zone of :func:`ai_contrib.core.tick.usage_zone`
ZONE_COLOURS = {"below": "|g", "sleep": "|y", "emergency": "|r"}


def describe_strategy(script) -> str:
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


def describe_benefit(script) -> str:
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


def usage_bar(script, usage) -> str:
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
    colour = ZONE_COLOURS[usage_zone(usage, sleep_at, emergency_at)]
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
        audience = shown(audience_label(script, meta.get("audience")))  # players' names
        if meta.get("left_out"):
            audience += f"; {shown(meta['left_out'])} line(s) left out"
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


def fidelity_cell(event) -> str:
    """A compaction event's summary fidelity for ``aihistory``: ``"0.94"`` (the score of the
    summary used: an extract's when the model's failed and was replaced, which the row says), ``"-"`` when none was scored (``docs/design.md``, "Summary fidelity")."""
    score = event.get("fidelity")
    return "-" if score is None else f"{score:.2f}"


def _when(real, game, now):
    """
    A moment of a people record for a table, on three lines: ``"2026-05-01 18:02"`` (UTC),
    ``"(3 days ago)"``, ``"game: evening, day 3 of spring"`` (``"-"`` for none; the game's
    part only where recorded).
    """
    from datetime import datetime, timezone

    from ..core.scene import clock_phrase, relative_time
    from ..npc.scene import clock_at

    if real is None:
        return "-"
    text = (f"{datetime.fromtimestamp(real, timezone.utc):%Y-%m-%d %H:%M}\n"
            f"({relative_time(now - real)})")
    phrase = clock_phrase(clock_at(game)) if game is not None else ""
    return f"{text}\ngame: {phrase}" if phrase else text


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
    or not, by archive sequence number (default: the last 20 messages). An
    action the NPC took shows as its call ("calls give(key to Wren)") and its
    result, with who saw it.

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

    def func(self) -> None:
        words, switches = split_npc_switch(self)
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
        elif "journal" in switches and len(words) > 1 and words[1].isdecimal() \
                and words[1].isascii():
            self.show_journal(npc, int(words[1]))
        elif "journal" in switches and len(words) > 1:
            self.show_journal_entry(npc, words[1])
        elif "journal" in switches:
            self.show_journal(npc)
        else:
            self.show_overview(npc, script)

    def show_overview(self, npc, script) -> None:
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

    def show_prompt(self, npc, script, args, full=False) -> None:
        from .receipt_views import recent_prompt, reply_records

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

    def format_receipt(self, npc, reply) -> str:
        from ..core.receipts import (
            describe_cost,
            describe_cut,
            describe_part,
            describe_recall,
            describe_skipped,
            memory_source,
        )

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
            lines.append(wrap("Left out (why): " + shown(describe_skipped(
                receipt["world_skipped"])), width))
        if receipt.get("recall"):
            lines.append(wrap("Memories: " + shown(describe_recall(receipt["recall"])), width))
        if receipt.get("cut_for_time"):
            lines.append(wrap("Built from less for time: "
                              + shown(describe_cut(receipt["cut_for_time"])), width))
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

    def format_full_prompt(self, npc, reply, prompt) -> str:
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

    def show_record(self, npc, script, args) -> None:
        from .item_views import archive_item, find_archive_record

        if not args:
            self.caller.msg("Usage: aihistory <npc>/show <seq or id>")
            return
        record = find_archive_record(script, args[0])
        if record is None:
            self.caller.msg(f"No archive record or summary '{shown(args[0])}' for {npc.key} "
                            f"(seq 0..{script.archive.last_seq}).")
            return
        self.caller.msg(archive_item(npc, script, record))

    def show_journal_entry(self, npc, entry_id) -> None:
        from .item_views import journal_item
        from ..memory.journal import find_entry

        journal = ensure_journal(npc.db.journal)
        entry = find_entry(journal, id=entry_id)
        if entry is None:
            self.caller.msg(f"No journal entry '{shown(entry_id)}' for {npc.key} "
                            f"(aihistory {npc.key}/journal lists them).")
            return
        consolidated = entry_id in set(journal["consolidated_entry_ids"])
        self.caller.msg(journal_item(npc, entry, consolidated))

    def show_people(self, npc, script) -> None:
        """The people ``npc`` has met (``docs/design.md``, "Scene, events and people")."""
        from ..npc.scene import all_people

        people = all_people(script)
        if not people:
            self.caller.msg(f"{npc.key} has not spoken with anyone yet.")
            return
        now = time.time()
        table = self.table("who", "first met", "last spoke", "lines",
                            "impression")
        did = []
        for record in people:
            table.add_row(
                f"{shown(record.get('name'), 30)} {shown(record.get('dbref'))}",
                _when(record.get("first_met"), record.get("first_met_game"), now),
                _when(record.get("last_spoke"), record.get("last_spoke_game"), now),
                int(record.get("lines") or 0),
                shown(record.get("impression") or "-", 60),
            )
            actions = [shown(a.get("action"), 60) for a in reversed(record.get("actions") or [])]
            if actions:
                did.append(f"  {shown(record.get('name'), 30)}: {'; '.join(actions)}")
        # below the table: a sixth column would wrap every row on a 78-column screen
        done = (f"\n|wWhat {npc.key} did on their words|n (the newest first):\n" + "\n".join(did)
                if did else "")
        self.caller.msg(f"|wPeople {npc.key} has met|n: {len(people)}\n{table}{done}")

    def show_journal(self, npc, page=1) -> None:
        """A page of ``npc``'s journal, newest first (:func:`ai_contrib.admin.read_model.
        journal_page`, the web page's pages)."""
        found = journal_page(npc, page)
        if not found["total"]:
            self.caller.msg(f"{npc.key}'s journal is empty.")
            return
        table = self.table("id", "importance", "source", "who", "in Mem0",
                            "content")
        for entry in found["entries"]:
            table.add_row(
                entry["id"], entry["importance"], entry["source_type"],
                # a fact heard from another NPC: who said it first and the NPCs it passed
                # through (docs/design.md, "Gossip")
                shown(entry["who"] or "-"),
                "yes" if entry["consolidated"] else "no",
                shown(entry["content"], 60) + support_tail(entry),
            )
        pages = found["pages"]
        more = (f"; older: aihistory {npc.key}/journal {found['page'] + 1}"
                if found["page"] < pages else "")
        self.caller.msg(
            f"|wJournal of {npc.key}|n: {found['total']} entries, {found['consolidated']} "
            f"consolidated (page {found['page']} of {pages}, newest first{more})\n{table}"
        )

    def show_raw(self, npc, script, bounds) -> None:
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
        table = self.table("seq", "time", "who", "text", "in context")
        for m in messages:
            # an action's call has no text and its result is named by the command: both read
            # as what the NPC did (core.actions.action_view)
            who, text = action_view(m, npc.key) or (m.get("name") or m.get("role"),
                                                    m.get("content"))
            table.add_row(m.get("seq"), when_cell(m.get("timestamp")), shown(who),
                          shown(text, 60),
                          "yes" if m["id"] in in_context else "no")
        self.caller.msg(
            f"|wArchive of {npc.key}|n: seq {messages[0]['seq']}..{messages[-1]['seq']} "
            f"of 0..{last}\n{table}"
        )
