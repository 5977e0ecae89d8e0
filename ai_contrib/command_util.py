"""
What the in-game commands share (:mod:`ai_contrib.commands` and
:mod:`ai_contrib.admin_commands`): the help category, admin text made safe to show, and tables
that fit the caller's client.
"""

from evennia.commands.default.muxcommand import MuxCommand
from evennia.utils.evtable import EvTable
from evennia.utils.utils import crop

from .core.text import inert_markup

# Evennia lower-cases a command's help_category and shows it title-cased ("AI" reads "Ai",
# "AI NPCs" "Ai Npcs"): a name without acronyms survives both
HELP_CATEGORY = "Non-Player Characters"


class StaffCommand(MuxCommand):
    """The base of the admin commands: Builders and up, listed under :data:`HELP_CATEGORY`."""

    locks = "cmd:perm(Builder)"
    help_category = HELP_CATEGORY
MIN_TABLE_WIDTH = 40  # columns; narrower clients get this and wrap


def shown(text, width=None):
    """
    Stored text as an admin may see it: markup made inert (``docs/design.md``, "Player text is
    data"), cropped to ``width`` characters (None: whole).
    """
    text = inert_markup(text)
    return crop(text, width) if width else text


def table_width(cmd):
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


def admin_table(width, *headers):
    """
    An :class:`EvTable` with cell borders whose lines are at most ``width`` columns. Cells
    are aligned to the top, so a row whose cells wrap onto several lines still starts on
    one line.
    """
    return EvTable(*headers, border="cells", maxwidth=width, valign="t")


def support_text(fields):
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
