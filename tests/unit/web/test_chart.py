"""The usage chart of the NPC page: a pure function from usage points and compaction events."""

from ai_contrib.web.chart import timeline, usage_chart_svg

POINTS = [{"at": "2026-01-01T10:00:00+00:00", "tokens": 100, "budget": 400},
          {"at": "2026-01-01T10:05:00+00:00", "tokens": 300, "budget": 400},
          {"at": "2026-01-01T10:20:00+00:00", "tokens": 150, "budget": 400}]
EVENT = {"at": "2026-01-01T10:10:00", "trigger": "emergency", "success": True, "before": 330,
         "after": 120, "fidelity": 0.83, "context": True}


def test_a_compaction_drops_the_line_at_its_time():
    tokens = [e["tokens"] for e in timeline(POINTS, [EVENT])]
    assert tokens == [100, 300, 330, 120, 150]  # naive times read as UTC


def test_events_are_labelled_with_trigger_tokens_and_fidelity_and_text_is_escaped():
    svg = usage_chart_svg(POINTS, [EVENT, {**EVENT, "at": "2026-01-01T10:15:00",
                                           "trigger": "<b>", "success": False}], 400, 0.7, 0.8)
    assert "C1 emergency: 330 -&gt; 120 tokens, fidelity 0.83" in svg
    assert "C2 &lt;b&gt;: failed" in svg and "<b>" not in svg
    assert svg.count('class="threshold') == 3  # budget, sleep, emergency


def test_no_data_yet():
    assert "no usage recorded yet" in usage_chart_svg([], [], 400, 0.7, 0.8)


# --- labels never overlap, however many compactions there are --------------------------------

import re  # noqa: E402

from hypothesis import given, settings, strategies as st  # noqa: E402

from ai_contrib.web.chart import CHAR_WIDTH, LABEL_GAP  # noqa: E402

_LABEL = re.compile(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="(start|end)">([^<]*)</text>'
                    r'</g>')


def _labels(svg):
    """``(y, left, right, text)`` of every compaction label drawn (unescaped widths)."""
    out = []
    for x, y, anchor, text in _LABEL.findall(svg):
        width = len(text.replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&")) \
            * CHAR_WIDTH
        left = float(x) if anchor == "start" else float(x) - width
        out.append((float(y), left, left + width, text))
    return out


def _events(minutes, fidelity):
    return [{"at": f"2026-01-01T{10 + m // 60:02d}:{m % 60:02d}:00", "trigger": "emergency",
             "success": True, "before": 3000 + m, "after": 900, "fidelity": fidelity,
             "context": True} for m in minutes]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 600), min_size=1, max_size=150),
       st.one_of(st.none(), st.floats(0, 1)))
def test_compaction_labels_never_overlap(minutes, fidelity):
    events = _events(sorted(minutes), fidelity)
    svg = usage_chart_svg(POINTS, events, 4000, 0.7, 0.8)
    labels = _labels(svg)
    assert labels  # the first compaction always has room
    assert svg.count("<title>") == len(events)  # every mark keeps its full text as a tooltip
    for i, (y, left, right, text) in enumerate(labels):
        for y2, left2, right2, text2 in labels[i + 1:]:
            if y == y2:
                assert right + LABEL_GAP <= left2 or right2 + LABEL_GAP <= left, (text, text2)


def test_crowded_labels_fall_back_to_numbers_and_the_first_keeps_its_text():
    svg = usage_chart_svg(POINTS, _events(range(0, 40), 0.5), 4000, 0.7, 0.8)
    texts = [label[3] for label in _labels(svg)]
    assert texts[0].startswith("C1 emergency: 3000 -&gt; 900 tokens")
    assert any(re.fullmatch(r"C\d+", t) for t in texts), texts  # numbers only where crowded
    assert len(texts) < 40  # not every one of 40 marks side by side can be labelled
