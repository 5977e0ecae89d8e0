"""The staff web pages on Evennia's test harness."""
