"""``ai_contrib.core``: the pure functions."""
