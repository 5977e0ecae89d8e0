"""Tests of the real embedded model (no game)."""
