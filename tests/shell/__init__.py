"""Tests on Evennia's test harness and database: typeclasses, commands, scripts (no real game)."""
