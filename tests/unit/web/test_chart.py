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
