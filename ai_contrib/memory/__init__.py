"""
The NPC's memory outside its context window: the append-only archive of raw messages, the
journal of facts and syntheses, and the Mem0 store they are consolidated into.
"""
