"""``ai_contrib.memory`` without Evennia."""
