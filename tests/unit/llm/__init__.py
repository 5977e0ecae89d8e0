"""``ai_contrib.llm`` against the LLM double."""
