"""
The context-usage chart of an NPC's page, drawn on the server as SVG (``docs/design.md``,
"Seeing the NPC's mind"): no chart library, nothing fetched by the browser, so the page works
offline. A pure function of its arguments.
"""

from datetime import datetime, timezone
from html import escape

WIDTH, HEIGHT = 760, 260  # SVG user units (pixels at 100 %)
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40  # margins


def _when(text):
    try:
        at = datetime.fromisoformat(str(text))
    except (TypeError, ValueError):
        return None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def timeline(points, events):
    """
    Merge usage points and compaction events into one time-ordered list.

    Args:
        points (list[dict]): ``{"at": ISO str, "tokens": int, "budget": int}``
            (:mod:`ai_contrib.usage_log`).
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
        entries.append((_when(p.get("at")), 0, order, {"tokens": p.get("tokens"), "event": None}))
    for order, e in enumerate(events):
        at = _when(e.get("at"))
        if e.get("context") and e.get("before") is not None and e.get("after") is not None:
            entries.append((at, 1, order, {"tokens": e["before"], "event": None}))
            entries.append((at, 2, order, {"tokens": e["after"], "event": e}))
        else:
            entries.append((at, 2, order, {"tokens": None, "event": e}))
    far = datetime.max.replace(tzinfo=timezone.utc)
    entries.sort(key=lambda x: (x[0] or far, x[1], x[2]))
    return [{"at": at, **entry} for at, _, _, entry in entries]


def usage_chart_svg(points, events, budget, sleep_threshold, emergency_threshold):
    """
    The chart: context tokens over time (a line through the recorded points, dropping at each
    compaction), the budget and the sleep and emergency thresholds as horizontal lines, and each
    compaction as a vertical mark labelled with its trigger and tokens before -> after (and its
    fidelity score when one was recorded), also as the mark's tooltip.

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
    top = max([budget] + values) * 1.08
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = len(entries)

    def x(i):
        return LEFT + (plot_w * (i + 0.5) / n if n else plot_w / 2)

    def y(tokens):
        return TOP + plot_h * (1 - tokens / top)

    label = f"Context tokens over time: {len(values)} points, " \
            f"{sum(1 for e in entries if e['event'])} compactions"
    out = [f'<svg class="usage-chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
           f'height="{HEIGHT}" role="img" aria-label="{escape(label)}" '
           'xmlns="http://www.w3.org/2000/svg">',
           f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="plot"/>']
    for name, fraction in (("budget", 1.0), ("sleep", sleep_threshold),
                           ("emergency", emergency_threshold)):
        tokens = budget * float(fraction)
        if tokens > top:
            continue
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(tokens):.1f}" '
                   f'y2="{y(tokens):.1f}" class="threshold {name}"/>')
        out.append(f'<text x="{LEFT - 4}" y="{y(tokens) + 4:.1f}" text-anchor="end" '
                   f'class="axis {name}">{int(tokens)}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 12}" text-anchor="middle" '
               f'class="axis">budget {budget}, sleep {float(sleep_threshold):.0%}, emergency '
               f'{float(emergency_threshold):.0%}</text>')
    if not entries:
        out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="axis">'
                   'no usage recorded yet</text></svg>')
        return "".join(out)
    line = [f"{x(i):.1f},{y(e['tokens']):.1f}" for i, e in enumerate(entries)
            if e["tokens"] is not None]
    if line:
        out.append(f'<polyline points="{" ".join(line)}" class="usage"/>')
    for i, e in enumerate(entries):
        if e["tokens"] is not None:
            out.append(f'<circle cx="{x(i):.1f}" cy="{y(e["tokens"]):.1f}" r="2.5" '
                       'class="point"/>')
    number = 0
    for i, e in enumerate(entries):
        event = e["event"]
        if not event:
            continue
        number += 1
        text = f"{event.get('trigger')}: "
        if event.get("success"):
            text += f"{event.get('before')} -> {event.get('after')} tokens"
            if event.get("fidelity") is not None:
                text += f", fidelity {float(event['fidelity']):.2f}"
        else:
            text += "failed"
        css = "event" if event.get("success") else "event failed"
        # labels right of marks in the left half, left of them in the right half: inside the plot
        left_half = x(i) < LEFT + plot_w / 2
        anchor, dx = ("start", 3) if left_half else ("end", -3)
        out.append(f'<g class="{css}"><title>{escape(text)}</title>'
                   f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{TOP}" y2="{TOP + plot_h}"/>'
                   f'<text x="{x(i) + dx:.1f}" y="{TOP + 12 + 12 * ((number - 1) % 3)}" '
                   f'text-anchor="{anchor}">C{number} {escape(text)}</text></g>')
    times = [e["at"] for e in entries if e["at"] is not None]
    if times:
        out.append(f'<text x="{LEFT}" y="{HEIGHT - 12}" class="axis">'
                   f'{escape(times[0].strftime("%Y-%m-%d %H:%M:%S"))} UTC</text>')
        out.append(f'<text x="{LEFT + plot_w}" y="{HEIGHT - 12}" text-anchor="end" '
                   f'class="axis">{escape(times[-1].strftime("%Y-%m-%d %H:%M:%S"))} UTC</text>')
    out.append("</svg>")
    return "".join(out)
