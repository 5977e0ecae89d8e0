"""
What is due is decided once (``docs/design.md``, "The tick"): no module of ``ai_contrib`` but
``core/tick.py`` compares a history's usage with a threshold (the sleep and emergency
thresholds, the budget); the others ask :mod:`ai_contrib.core.tick` (``reaches``, ``due``,
``usage_zone``). Read from the source with ``ast``, as the function-size test reads it.

A comparison counts when one of its operands names a usage (``usage``, ``token_usage()``,
``state.usage``...) or a threshold of memory work (``sleep_threshold``,
``emergency_threshold``, ``OVER_BUDGET``).
"""

import ast

from tests.support.paths import ROOT

PACKAGE = ROOT / "ai_contrib"
#: the one module allowed to make them
POLICY = "ai_contrib/core/tick.py"
#: words in an operand that make a comparison a threshold test of usage
MARKS = ("usage", "sleep_threshold", "emergency_threshold", "over_budget")


def threshold_comparisons(source, name="<source>"):
    """``["name:line comparison"]`` for each comparison of ``source`` that tests usage or a
    memory-work threshold."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Compare):
            operands = [ast.unparse(part).lower() for part in (node.left, *node.comparators)]
            if any(mark in operand for operand in operands for mark in MARKS):
                found.append(f"{name}:{node.lineno} {ast.unparse(node)}")
    return found


def _scan():
    """``{path relative to the checkout: [comparison, ...]}`` over the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        hits = threshold_comparisons(path.read_text(encoding="utf-8"), relative)
        if hits:
            found[relative] = hits
    return found


def test_only_the_tick_policy_compares_usage_with_a_threshold():
    found = _scan()
    # positive control: the scan sees the policy's own comparisons
    assert any("usage >= threshold" in hit for hit in found.get(POLICY, ()))
    wrong = [hit for path, hits in found.items() if path != POLICY for hit in hits]
    assert not wrong, "threshold comparisons outside core/tick.py:\n" + "\n".join(wrong)


def test_the_check_flags_a_threshold_test_and_passes_other_comparisons():
    source = (
        "if script.token_usage() >= script.cfg('compact_sleep_threshold'):\n    pass\n"
        "over = usage >= 1.0\n"
        "late = state.emergency_threshold < 0.5\n"
        "n = len(x) > 3\n"
    )
    assert threshold_comparisons(source) == [
        "<source>:1 script.token_usage() >= script.cfg('compact_sleep_threshold')",
        "<source>:3 usage >= 1.0",
        "<source>:4 state.emergency_threshold < 0.5",
    ]
