"""
What the in-game commands share (:mod:`ai_contrib.commands` and
:mod:`ai_contrib.admin.admin_commands`): the help category, admin text made safe to show, and tables
that fit the caller's client.
"""

from __future__ import annotations

from evennia.commands.default.muxcommand import MuxCommand
from evennia.utils.evtable import EvTable
from evennia.utils.ansi import strip_ansi
from evennia.utils.utils import crop

from ..core.text import inert_markup
from .npcs import find_npc

# Evennia lower-cases a command's help_category and shows it title-cased ("AI" reads "Ai",
# "AI NPCs" "Ai Npcs"): a name without acronyms survives both
HELP_CATEGORY = "Non-Player Characters"


class StaffCommand(MuxCommand):
    """The base of the admin commands: Builders and up, listed under :data:`HELP_CATEGORY`."""

    locks = "cmd:perm(Builder)"
    help_category = HELP_CATEGORY

    def npc_named(self, name, usage) -> tuple:
        """
        The AI NPC an admin named (:func:`ai_contrib.admin.npcs.find_npc`, which tells the
        caller when there is none), or, for an empty ``name``, ``"Usage: <usage>"`` to the
        caller.

        Returns:
            tuple: ``(npc, script)``, or ``(None, None)`` when the caller was told why not.
        """
        name = (name or "").strip()
        if not name:
            self.caller.msg(f"Usage: {usage}")
            return None, None
        return find_npc(self.caller, name)

    def table(self, *headers) -> AdminTable:
        """An :func:`admin_table` as wide as this command's caller may take
        (:func:`table_width`), with ``headers``."""
        return admin_table(table_width(self), *headers)


MIN_TABLE_WIDTH = 40  # columns; narrower clients get this and wrap


def shown(text, width=None) -> str:
    """
    Stored text as an admin may see it: markup made inert (``docs/design.md``, "Player text is
    data"), cropped to ``width`` characters (None: whole).
    """
    text = inert_markup(text)
    return crop(text, width) if width else text


def when_cell(iso) -> str:
    """An ISO time for a table cell: ``"2026-01-01 10:00:00"`` (seconds, no zone), so that a
    narrow column wraps it between the date and the time; ``""`` for None."""
    return str(iso or "")[:19].replace("T", " ")


def table_width(cmd) -> int:
    """
    Columns the tables of ``cmd`` may take: the caller's client width
    (:meth:`~evennia.commands.command.Command.client_width`; Evennia's
    ``CLIENT_DEFAULT_WIDTH``, 78, when the client reports none), at least
    :data:`MIN_TABLE_WIDTH`.
    """
    try:
        width = int(cmd.client_width())
    except (AttributeError, TypeError, ValueError):  # no session: a command run by code
        width = 78
    return max(MIN_TABLE_WIDTH, width)


def column_widths(natural, words, room) -> list[int]:
    """
    Widths of a table's columns that wrap text at word boundaries wherever the room allows.

    Each column first gets its longest word (never less than 1); while those minimums do not
    fit ``room``, the widest minimum gives up a column (so only the longest words split, and
    only as far as needed). The room left is shared in proportion to what each column lacks
    of its widest line, a long text counting for no more than a fair share (``room`` over the
    number of columns): a short column ("2026-11-26 22:19", "Marta (1 hop)") is not starved
    by one long text beside it.

    Args:
        natural (list[int]): each column's widest line (characters, no padding or border).
        words (list[int]): each column's longest word (characters).
        room (int): characters the columns' text may take together.

    Returns:
        list[int]: one width per column, summing to at most ``room`` (exactly ``room`` when
        the text is wider than that), none wider than its widest line.
    """
    widths = [max(1, min(w, n)) for w, n in zip(words, natural)]
    while sum(widths) > room and max(widths) > 1:
        widths[widths.index(max(widths))] -= 1
    spare = room - sum(widths)
    fair = room / max(1, len(widths))
    weights = [min(max(0, n - w), fair) for n, w in zip(natural, widths)]
    total = sum(weights)
    if spare <= 0 or not total:
        return widths
    shares = [spare * weight / total for weight in weights]
    given = [min(int(share), n - w) for share, n, w in zip(shares, natural, widths)]
    widths = [w + g for w, g in zip(widths, given)]
    spare -= sum(given)
    # what the rounding left: to the columns that still lack most
    while spare > 0:
        lacking = [(n - w, i) for i, (n, w) in enumerate(zip(natural, widths)) if w < n]
        if not lacking:
            break
        widths[max(lacking)[1]] += 1
        spare -= 1
    return widths


class AdminTable(EvTable):
    """
    An :class:`EvTable` that wraps its cells at word boundaries: where the table is wider than
    its ``maxwidth``, the columns get :func:`column_widths` (each at least its longest word
    where the width allows) instead of EvTable's own sharing, which splits words anywhere
    ("impor|tance", timestamps). Columns given a width by the caller
    (:meth:`~EvTable.reformat_column`) keep EvTable's sharing.
    """

    def _balance(self):
        columns = self.table
        if (not self.maxwidth or not columns
                or any("width" in column.options for column in columns)):
            return super()._balance()
        natural, words = [], []
        for column in columns:
            lines = [strip_ansi(str(line)) for cell in column for line in cell.data]
            natural.append(max((len(line) for line in lines), default=0))
            words.append(max((len(word) for line in lines for word in line.split(" ")),
                             default=0))
        # each cell: one column of padding either side and its right border; the first column
        # also has the left border
        frame = 3 * len(columns) + 1
        if sum(natural) + frame <= self.maxwidth:
            return super()._balance()
        widths = column_widths(natural, words, self.maxwidth - frame)
        for column, width in zip(columns, widths):
            column.options["width"] = width + 3
        columns[0].options["width"] += 1
        try:
            return super()._balance()
        finally:
            for column in columns:
                column.options.pop("width", None)


def admin_table(width, *headers) -> AdminTable:
    """
    An :class:`AdminTable` with cell borders whose lines are at most ``width`` columns. Cells
    are aligned to the top, so a row whose cells wrap onto several lines still starts on
    one line, and wrap at word boundaries (:func:`column_widths`).
    """
    return AdminTable(*headers, border="cells", maxwidth=width, valign="t")


def support_text(fields) -> str:
    """
    A journal entry's or Mem0 memory's one-line support for admin tables (``docs/design.md``,
    "Facts you can trust"): ``"0.86"``; ``"line (0.40)"`` where the model's fact (support 0.40)
    was replaced by the line it comes from; ``"-"`` where it was not checked (syntheses, facts
    from before the check).

    Args:
        fields (dict): the entry, or the memory's metadata.

    Returns:
        str
    """
    support = fields.get("support")
    if support is None:
        return "-"
    if fields.get("grounding") in ("replaced", "verbatim"):
        model = fields.get("model_support")
        return "line" if model is None else f"line ({float(model):.2f})"
    return f"{float(support):.2f}"


def split_npc_switch(cmd) -> tuple:
    """Accept ``aihistory npc/raw 5 20`` as well as ``aihistory/raw npc 5 20``: returns
    ``(words, switches)``, two lists of str (the switches lower-cased)."""
    words = cmd.args.split()
    switches = list(cmd.switches)
    if words and "/" in words[0]:
        name, *extra = words[0].split("/")
        words[0] = name
        switches.extend(s.lower() for s in extra if s)
    return words, switches


def support_tail(fields) -> str:
    """`` (support 0.86)`` after a checked fact's text (its support by its line,
    :func:`~ai_contrib.admin.command_util.support_text`; ``docs/design.md``, "Facts you can
    trust"), ``""`` for anything unchecked: the tables keep their columns."""
    support = support_text(fields)
    return "" if support == "-" else f" (support {support})"
