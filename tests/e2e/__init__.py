"""End-to-end tests: a real game from ``game_template/`` driven over telnet (and a browser)."""
