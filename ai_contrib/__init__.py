"""
evennia-ai-contrib: NPCs with an LLM mind and a long memory for Evennia 6.

Public names (import them from their modules inside a running game, where Evennia is set up):

- ``ai_contrib.typeclasses``: ``AssistantCharacter`` (the NPC), ``AssistantScript`` (its mind),
  ``get_assistant_script``;
- ``ai_contrib.commands``: ``AIContribCmdSet`` (``talk``, ``aitalk``, ``aihistory``,
  ``compact``, ``aisleep``, ``aiwake``, ``aimemory``, ``ailist``, ``aiconfig``, ``aireset``,
  ``aiforget``, ``destroy``, ``ailore``, ``aipin``, ``aigossip``, ``aiactions``);
- ``ai_contrib.rag_memory``: ``compact_conversation_history``, ``run_sleep_tick``,
  ``run_pre_compaction_extraction``, ``DEFAULT_COMPACTION_PROMPT``;
- ``ai_contrib.llm.summariser``: ``generate_context_summary`` (messages and token counts in,
  a summary out);
- ``ai_contrib.core.tokens``: ``count_tokens``, ``count_conversation_tokens``;
- ``ai_contrib.llm.client``: ``LLMClient``, ``get_client`` and the ``LLMError`` family.

This module imports nothing itself, so ``import ai_contrib`` works before Django is configured
(in settings files, for instance).
"""

__version__ = "0.1.0"
