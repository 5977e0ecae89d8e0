"""
The benchmarks themselves (``benchmarks/``), each run end to end in a subprocess on small data
with the LLM double: minutes, not seconds, so ``make test`` runs them and ``make test-fast``
does not.
"""
