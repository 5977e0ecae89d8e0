"""Where the tests find the checkout's files, wherever in ``tests/`` a test module lives."""

from pathlib import Path

#: the checkout's root: ``ai_contrib/``, ``benchmarks/``, ``docs/``, ``tests/`` ...
ROOT = Path(__file__).resolve().parents[2]
