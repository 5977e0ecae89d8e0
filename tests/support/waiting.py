"""
The one safety net of the test suite's waits: tests wait on the event they expect (a Deferred
firing, a request reaching the LLM double, a line being said, a gate a test opens), never on a
fixed stretch of wall-clock time. :data:`HANG_GUARD` only ends a wait whose event never comes,
so that a broken test fails with a message instead of hanging until pytest-timeout's 600 s; it
is long enough that no busy machine reaches it, and no test asserts on it
(``docs/development.md``, "Waiting in tests").
"""

#: seconds after which a wait gives up: a hang guard, never the thing a test checks
HANG_GUARD = 300.0
