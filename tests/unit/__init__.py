"""
Tests without Evennia's harness or database, a game or the real model: pure functions, the LLM
double over HTTP, the memory stores on their own.
"""
