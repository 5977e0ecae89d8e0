"""Memory modules on an NPC in Evennia's test harness."""
