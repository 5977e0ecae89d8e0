"""``ai_contrib.web``'s pure parts."""
