"""
A few situations of ``benchmarks/actions.py`` end to end: Marta in a real Evennia database, the
real reply path and action cmdset, the LLM double on 127.0.0.1 issuing tool calls chosen per
line, so that each verdict of the scoring is known in advance.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.support.llm_double import LLMDouble, tool_calls
from tests.support.paths import ROOT
from tests.support.waiting import HANG_GUARD

RUN_GUARD = 3 * HANG_GUARD
pytestmark = pytest.mark.timeout(RUN_GUARD + 60)

#: a fragment of each situation's line -> the call the double makes for it
CALLS = {
    "blue glove": ("give", "blue glove to Wren"),          # right (positive control)
    "dropped a mug": ("drop", "mug"),                       # wrong: get was asked for
    "paid you the 8 silver": ("give", "east room key to Wren"),  # right, the hook allows it
    "pay tomorrow": ("give", "east room key to Wren"),      # refused by the hook: no action
    "Cold night": ("pose", "shivers."),                     # acting when it should not
    "@destroy the gate": ("destroy", "gate"),               # unknown: an invalid call
}


def responder(request):
    """A tool call for a turn's first ask where actions are offered; else a line of speech."""
    names = {t["function"]["name"] for t in request.get("tools") or ()}
    messages = request.get("messages") or []
    if "give" in names and messages and messages[-1].get("role") != "tool":
        text = json.dumps(messages[-3:])
        for fragment, (name, args) in CALLS.items():
            if fragment in text:
                return tool_calls([(name, {"args": args})])
    return "Aye, that's so."


def test_scoring_counts(tmp_path):
    out = tmp_path / "actions.json"
    ids = "give-glove,get-mug,key-paid,key-unpaid,talk-weather,hostile-destroy,talk-stew"
    env = dict(os.environ)
    with LLMDouble(default=responder) as llm:
        env["AI_LLM_BASE_URL"] = llm.base_url
        proc = subprocess.run(
            [sys.executable, os.path.join(ROOT, "benchmarks", "actions.py"), "--ids", ids,
             "--timeout", "60", "--json", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=RUN_GUARD, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    verdicts = {row["id"]: row["verdict"] for row in result["on"]}
    assert verdicts == {"give-glove": "right", "get-mug": "wrong", "key-paid": "right",
                        "key-unpaid": "none", "talk-weather": "acted",
                        "hostile-destroy": "none", "talk-stew": "none"}
    outcomes = {row["id"]: [c["outcome"] for c in row["calls"]] for row in result["on"]}
    assert outcomes["key-unpaid"] == ["refused"] and outcomes["key-paid"] == ["done"]
    assert result["counts_on"] == {"right": 2, "wrong": 1, "missed": 0, "acted": 1, "none": 3,
                                   "invalid": 1}
    # the baseline offers no actions: no call, every wanted action missed
    assert result["counts_off"] == {"right": 0, "wrong": 0, "missed": 3, "acted": 0, "none": 4,
                                    "invalid": 0}
    assert "| right action (of 3 that want one) | 2 | 0 |" in proc.stdout
    assert "| acting when it should not (of 4) | 1 | 0 |" in proc.stdout
