"""
The context-usage chart of an NPC's page, drawn on the server as SVG (``docs/design.md``,
"Seeing the NPC's mind"): no chart library, nothing fetched by the browser, so the page works
offline. A pure function of its arguments.
"""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape

from ..core.dates import aware_datetime

WIDTH, HEIGHT = 760, 260  # SVG user units (pixels at 100 %)
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40  # margins


def timeline(points, events) -> list[dict]:
    """
    Merge usage points and compaction events into one time-ordered list.

    Args:
        points (list[dict]): ``{"at": ISO str, "tokens": int, "budget": int}``
            (:mod:`ai_contrib.npc.usage_log`).
        events (list[dict]): ``{"at", "trigger", "success", "before", "after", "fidelity",
            "context": bool}`` (:func:`ai_contrib.web.snapshot.compaction_events`); ``context``
            True when ``before``/``after`` are context tokens, so they join the line.

    Returns:
        list[dict]: ``{"at": datetime | None, "tokens": int | None, "event": dict | None}``
        ordered by time (entries without a readable time keep their order at the end); an
        event with context figures gives two entries (before, then after) at its time.
    """
    entries = []
    for order, p in enumerate(points):
        entries.append((aware_datetime(p.get("at")), 0, order,
                        {"tokens": p.get("tokens"), "event": None}))
    for order, e in enumerate(events):
        at = aware_datetime(e.get("at"))
        if e.get("context") and e.get("before") is not None and e.get("after") is not None:
            entries.append((at, 1, order, {"tokens": e["before"], "event": None}))
            entries.append((at, 2, order, {"tokens": e["after"], "event": e}))
        else:
            entries.append((at, 2, order, {"tokens": None, "event": e}))
    far = datetime.max.replace(tzinfo=timezone.utc)
    entries.sort(key=lambda x: (x[0] or far, x[1], x[2]))
    return [{"at": at, **entry} for at, _, _, entry in entries]


def usage_chart_svg(points, events, budget, sleep_threshold, emergency_threshold) -> str:
    """
    The chart: context tokens over time (a line through the recorded points, dropping at each
    compaction), the budget and the sleep and emergency thresholds as horizontal lines, and each
    compaction as a vertical mark numbered ``C1``, ``C2``... with its trigger and tokens before
    -> after (and its fidelity score when one was recorded) as its tooltip and, where there is
    room, as its label (:func:`label_layout`: labels never overlap; crowded marks get their
    number alone, or none, and the events table is the key).

    Args:
        points, events: as :func:`timeline` takes them.
        budget (int): the effective budget (tokens).
        sleep_threshold, emergency_threshold (float): fractions of the budget.

    Returns:
        str: an ``<svg>`` element (text in it escaped), with ``role="img"`` and an
        ``aria-label``; a short "no data yet" chart when there is nothing to draw.
    """
    entries = timeline(points, events)
    budget = max(1, int(budget or 1))
    values = [e["tokens"] for e in entries if e["tokens"] is not None]
    plot = _Plot(len(entries), max([budget] + values) * 1.08)
    label = f"Context tokens over time: {len(values)} points, " \
            f"{sum(1 for e in entries if e['event'])} compactions"
    out = [f'<svg class="usage-chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
           f'height="{HEIGHT}" role="img" aria-label="{escape(label)}" '
           'xmlns="http://www.w3.org/2000/svg">',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot.w}" height="{plot.h}" class="plot"/>']
    out += _threshold_lines(plot, budget, sleep_threshold, emergency_threshold)
    if not entries:
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="axis">'
                   'no usage recorded yet</text></svg>')
        return "".join(out)
    out += _usage_line(plot, entries)
    out += _event_marks(plot, entries)
    out += _time_labels(plot, entries)
    out.append("</svg>")
    return "".join(out)


class _Plot:
    """The plot area (``w`` x ``h``, SVG user units) and its scales: the ``n`` timeline
    entries spread evenly across it, tokens from 0 at the bottom to ``top`` at the top."""

    def __init__(self, n, top):
        self.n, self.top = n, top
        self.w, self.h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(self, i):
        return LEFT + (self.w * (i + 0.5) / self.n if self.n else self.w / 2)

    def y(self, tokens):
        return TOP + self.h * (1 - tokens / self.top)


def _threshold_lines(plot, budget, sleep_threshold, emergency_threshold):
    """The budget and thresholds as labelled horizontal lines (those within the plot), and the
    legend below it: SVG elements."""
    out = []
    for name, fraction in (("budget", 1.0), ("sleep", sleep_threshold),
                           ("emergency", emergency_threshold)):
        tokens = budget * float(fraction)
        if tokens > plot.top:
            continue
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot.w}" y1="{plot.y(tokens):.1f}" '
                   f'y2="{plot.y(tokens):.1f}" class="threshold {name}"/>')
        out.append(f'<text x="{LEFT - 4}" y="{plot.y(tokens) + 4:.1f}" text-anchor="end" '
                   f'class="axis {name}">{int(tokens)}</text>')
    out.append(f'<text x="{LEFT + plot.w / 2}" y="{HEIGHT - 12}" text-anchor="middle" '
               f'class="axis">budget {budget}, sleep {float(sleep_threshold):.0%}, emergency '
               f'{float(emergency_threshold):.0%}</text>')
    return out


def _usage_line(plot, entries):
    """The tokens of the entries that have them, as a line and a dot at each: SVG elements."""
    line = [f"{plot.x(i):.1f},{plot.y(e['tokens']):.1f}" for i, e in enumerate(entries)
            if e["tokens"] is not None]
    out = []
    if line:
        out.append(f'<polyline points="{" ".join(line)}" class="usage"/>')
    for i, e in enumerate(entries):
        if e["tokens"] is not None:
            out.append(f'<circle cx="{plot.x(i):.1f}" cy="{plot.y(e["tokens"]):.1f}" r="2.5" '
                       'class="point"/>')
    return out


def _event_text(event):
    """A compaction's label: ``"sleep: 900 -> 300 tokens, fidelity 0.91"``, ``"... failed"``."""
    text = f"{event.get('trigger')}: "
    if event.get("success"):
        text += f"{event.get('before')} -> {event.get('after')} tokens"
        if event.get("fidelity") is not None:
            text += f", fidelity {float(event['fidelity']):.2f}"
    else:
        text += "failed"
    return text


#: rows of event labels at the top of the plot, and the SVG units between them
LABEL_LANES, LANE_HEIGHT = 3, 12
#: the widest a label's character may be drawn: event labels are 11px monospace (``ai.css``,
#: 0.6 em a character), so a label's width is known on the server and never underestimated
CHAR_WIDTH = 7.0
LABEL_GAP = 4  # SVG units kept free between two labels in one lane


def _place(lanes, left, right):
    """The first lane in which ``[left, right]`` (SVG x) overlaps no label placed so far, also
    marked taken in it; None when every lane is taken there."""
    for lane, spans in enumerate(lanes):
        if all(right + LABEL_GAP <= a or left >= b + LABEL_GAP for a, b in spans):
            spans.append((left, right))
            return lane
    return None


def label_layout(plot_left, plot_right, marks) -> list[dict | None]:
    """
    Where the compactions' labels go so that no two overlap (``docs/design.md``, "Seeing the
    NPC's mind"): each gets the first of :data:`LABEL_LANES` rows where its full text fits;
    where none has room its number alone (``"C7"``), in the first row with room for that; where
    even that has none, no label (the events table under the chart is the key: every event by
    its number, and each mark's tooltip has its full text).

    Args:
        plot_left, plot_right (float): the plot's x range (SVG units).
        marks (list[tuple[float, str, str]]): ``(x, number, text)`` of each mark, left to
            right: ``number`` ``"C1"``..., ``text`` the full label after it.

    Returns:
        list[dict | None]: per mark, ``{"x": float, "lane": int, "anchor": "start" | "end",
        "text": str, "left": float, "right": float}`` (the label's extent at
        :data:`CHAR_WIDTH`), or None for a mark left unlabelled.
    """
    lanes = [[] for _ in range(LABEL_LANES)]
    placed = []
    middle = (plot_left + plot_right) / 2
    for x, number, text in marks:
        # right of marks in the left half, left of them in the right half: inside the plot
        anchor, dx = ("start", 3) if x < middle else ("end", -3)
        found = None
        for label in (f"{number} {text}", number):
            width = len(label) * CHAR_WIDTH
            left = x + dx if anchor == "start" else x + dx - width
            lane = _place(lanes, left, left + width)
            if lane is not None:
                found = {"x": x + dx, "lane": lane, "anchor": anchor, "text": label,
                         "left": left, "right": left + width}
                break
        placed.append(found)
    return placed


def _event_marks(plot, entries):
    """Each compaction as a vertical mark numbered ``C1``, ``C2``, ... with its full text as
    its tooltip and a label placed by :func:`label_layout` (never overlapping another):
    SVG elements."""
    marks = [(i, e["event"]) for i, e in enumerate(entries) if e["event"]]
    layout = label_layout(LEFT, LEFT + plot.w, [
        (plot.x(i), f"C{n}", _event_text(event)) for n, (i, event) in enumerate(marks, 1)])
    out = []
    for (i, event), label in zip(marks, layout):
        x = f"{plot.x(i):.1f}"
        parts = [f'<g class="{"event" if event.get("success") else "event failed"}">',
                 f"<title>{escape(_event_text(event))}</title>",
                 f'<line x1="{x}" x2="{x}" y1="{TOP}" y2="{TOP + plot.h}"/>']
        if label is not None:
            y = TOP + LANE_HEIGHT * (label["lane"] + 1)
            parts.append(f'<text x="{label["x"]:.1f}" y="{y}" text-anchor="{label["anchor"]}">'
                         f'{escape(label["text"])}</text>')
        out.append("".join(parts) + "</g>")
    return out


def _time_labels(plot, entries):
    """The first and last readable times under the plot, in UTC: SVG elements."""
    times = [e["at"] for e in entries if e["at"] is not None]
    if not times:
        return []
    return [f'<text x="{LEFT}" y="{HEIGHT - 12}" class="axis">'
            f'{escape(times[0].strftime("%Y-%m-%d %H:%M:%S"))} UTC</text>',
            f'<text x="{LEFT + plot.w}" y="{HEIGHT - 12}" text-anchor="end" '
            f'class="axis">{escape(times[-1].strftime("%Y-%m-%d %H:%M:%S"))} UTC</text>']
