"""What the tests share: the Django settings, the LLM double, NPC and end-to-end game fixtures,
reactor helpers and the other fixtures more than one test module uses."""
