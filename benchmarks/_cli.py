"""
Command-line helpers the benchmarks share.
"""

import argparse
import json


def positive_int(text) -> int:
    """
    argparse ``type``: a whole number of at least 1.

    Raises:
        argparse.ArgumentTypeError: anything else.
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"wants a whole number of at least 1, got {text!r}")
    return value


def setting_overrides(pairs) -> dict:
    """
    ``["MEMORY_RETRIEVAL_MAX_ITEMS=12", ...]`` -> ``{"AI_MEMORY_RETRIEVAL_MAX_ITEMS": 12}``:
    values as JSON where they parse (numbers, true/false, null), else as text.

    Raises:
        SystemExit: a pair without ``=``.
    """
    result = {}
    for pair in pairs or ():
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--set wants NAME=VALUE, got {pair!r}")
        name = name.strip().upper()
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        result[name if name.startswith("AI_") else "AI_" + name] = parsed
    return result
