"""
The functional core: pure functions over plain message lists.

Nothing in this package imports Evennia, Twisted or Django, so it can be property-tested in
isolation and reused outside a game. The message shape is documented once, in
:mod:`ai_contrib.core.messages`.
"""
