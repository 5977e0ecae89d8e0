"""The pure parts of ``benchmarks/``."""
