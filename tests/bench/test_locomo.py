"""
One small run of ``benchmarks/locomo.py`` end to end: a two-session conversation in LoCoMo's
format (``tests/support/locomo_sample.py``), replayed through real NPCs in a real Evennia
database, with the LLM double answering on 127.0.0.1.
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import locomo_metrics as m

from tests.support.llm_double import LLMDouble, tool_calls
from tests.support.locomo_sample import SENTINEL, synthetic_sample
from tests.support.paths import ROOT
from tests.support.waiting import HANG_GUARD

#: seconds the benchmark's run may take before it is ended: a hang guard (a run takes minutes on
#: a busy 2-core machine), above pytest-timeout's 600 s for this module alone
RUN_GUARD = 3 * HANG_GUARD
pytestmark = pytest.mark.timeout(RUN_GUARD + 60)


def double_responder(request):
    """Noop for fact extraction, a refusal for answers, a one-line summary for the rest."""
    if request.get("tools"):
        return tool_calls([("noop", {})])
    first = (request.get("messages") or [{}])[0].get("content") or ""
    if "talking with your friend" in first or first.startswith("You are roleplaying"):
        return "No information available."
    return "Alice and Bob caught up on cats, trips and plans."


def test_benchmark_end_to_end(tmp_path):
    data = tmp_path / "tiny_locomo.json"
    data.write_text(json.dumps([synthetic_sample()]))
    workdir = tmp_path / "work"
    out = tmp_path / "result.json"
    budget = 1200
    with LLMDouble(default=double_responder, expected_api_key="bench-key") as llm:
        proc = subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", "locomo.py"), "--data", str(data),
             "--max-context-tokens", str(budget), "--answer", "--base-url", llm.base_url,
             "--api-key", "bench-key", "--model", "double", "--json", str(out),
             "--workdir", str(workdir)],
            cwd=ROOT, capture_output=True, text=True, timeout=RUN_GUARD,
        )
        requests = llm.requests
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())

    from ai_contrib.npc.compaction_runner import STRATEGIES

    systems = list(STRATEGIES) + ["window25", "truncate", "full"]
    assert result["config"]["systems"] == systems
    for system in systems:
        assert f"| {system} | all 1-4 | 5 |" in proc.stdout
        assert result["summary"][system]["1-4"]["n"] == 5
        assert result["summary"][system]["5"]["n"] == 1

    assert "## Against the whole conversation (categories 1-4)" in proc.stdout
    assert "| full | " not in proc.stdout.split("## Against")[1].split("## Category 5")[0]
    full = result["summary"]["full"]
    assert full["1-4"]["answer_in_prompt"] == 1.0  # every answer is verbatim in the data
    assert full["1-4"]["evidence_verbatim"] == 1.0
    window = result["summary"]["window25"]
    assert window["1-4"]["prompt_tokens"] < full["1-4"]["prompt_tokens"]
    assert window["1-4"]["evidence_verbatim"] < 1.0  # session 1 is long gone from 25 lines
    truncate = result["summary"]["truncate"]
    assert truncate["1-4"]["prompt_tokens"] <= budget + 150  # + persona and instructions
    assert full["1-4"]["prompt_tokens"] > budget

    for system in systems:
        # the adversarial answer is nowhere in the conversation, and the double declines
        assert result["summary"][system]["5"]["adversarial_in_prompt"] == 0.0
        assert result["summary"][system]["5"]["f1"] == 1.0
        assert result["summary"][system]["1-4"]["f1"] == 0.0
        # a strategy is asked in a game too: each question and its two follow-ups answered
        answers = 6 if system in ("window25", "truncate", "full") else 6 + 6 * 3
        assert result["stats"][system]["answer_calls"] == answers
    # the game path beside the afresh one, reply by reply, for every strategy only
    game = proc.stdout.split("## In a game")[1].split("## ")[0]
    for system in STRATEGIES:
        for path in ("afresh", "game, reply 1", "game, reply 2", "game, reply 3"):
            assert f"| {system} | {path} | 5 |" in game
        assert result["summary"][m.game_label(system, 3)]["1-4"]["n"] == 5
    assert "| full |" not in game
    # each game-path turn is the NPC's own reply, sent as a game sends it: at the reply's
    # temperature (the afresh answers' is 0), the follow-up line the newest of its prompt
    follow_ups = [r for r in requests if not r.get("tools")
                  and "talking with your friend" in str(r["messages"][0].get("content"))
                  and r["messages"][-1].get("role") == "user"
                  and "What else comes to mind?" in str(r["messages"][-1].get("content"))]
    assert len(follow_ups) == 6 * len(STRATEGIES)  # the five questions and the adversarial one
    assert all(r["temperature"] == 0.7 for r in follow_ups)
    assert all(r["max_tokens"] == 96 for r in follow_ups)
    game_rows = [r for r in result["questions"] if " in a game" in r["system"]]
    assert all(r["prompt_tokens"] > 0 for r in game_rows)
    summary_stats = result["stats"]["summary"]
    assert summary_stats["compactions"] >= 1
    assert summary_stats["memory_calls"] >= 1
    assert summary_stats["final_tokens"] <= budget
    # every compaction wrote its summary through the metered client, and took time
    assert summary_stats["summary_calls"] >= summary_stats["compactions"]
    assert summary_stats["summary_completion_tokens"] > 0
    assert summary_stats["compaction_s"] > 0
    assert summary_stats["summary_calls"] + summary_stats["extraction_calls"] <= \
        summary_stats["memory_calls"]
    assert result["stats"]["mask"]["summary_calls"] == 0  # masking needs no LLM
    assert result["stats"]["full"]["memory_calls"] == 0

    # the replay never read the scoring-only fields: the sentinel reached no LLM request and
    # no file the NPCs wrote (it only appears as the adversarial answer in the results)
    assert requests
    assert not any(SENTINEL in json.dumps(r) for r in requests)
    for folder, _dirs, files in os.walk(workdir):
        for name in files:
            with open(os.path.join(folder, name), "rb") as fh:
                assert SENTINEL.encode() not in fh.read(), name
