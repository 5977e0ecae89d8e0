"""
Shared pytest setup: Evennia's flat API (``from evennia import ...``) is only filled in by
``evennia._init()``, which touches the database, so it runs once here with pytest-django's
database blocker lifted.

The offline embedder keeps each text's vector for the rest of the process
(``tests/support/embedder_memo.py``): the vectors are the real model's, each computed once.

On PostgreSQL (``AI_DATABASE_URL``, ``make test-postgres``) every end-to-end module's game gets
databases of its own (:func:`_e2e_databases`).
"""

import pytest

from tests.support import embedder_memo
from tests.support.postgres_util import (
    DATABASE_VAR,
    PGVECTOR_VAR,
    create_database,
    drop_database,
    postgres_url,
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "sqlite_game: the module's game keeps a SQLite file even on PostgreSQL "
        "(it copies or restores the database file)",
    )
    import django
    from twisted.trial import util as trial_util

    from tests.support.waiting import HANG_GUARD

    # trial's own limit on a test (120 s) would end a slow test on a busy machine: its test
    # cases wait on their events under the suite's one hang guard instead
    trial_util.DEFAULT_TIMEOUT_DURATION = HANG_GUARD
    embedder_memo.install()
    django.setup()


@pytest.hookimpl(trylast=True)  # after ``-k``/``-m`` deselection, which also runs in this hook
def pytest_collection_modifyitems(items):
    """
    pytest-django sets up the test database only when a collected test asks for one, but
    ``_evennia_init`` below always needs it: without one it would run against the configured
    database itself (empty on PostgreSQL). A run of tests that use no database gets the marker
    on its first test, so the test database exists for every run.
    """
    wants_db = {"db", "transactional_db", "django_db_reset_sequences",
                "django_db_serialized_rollback"}
    if items and not any(
        item.get_closest_marker("django_db") or wants_db & set(getattr(item, "fixturenames", ()))
        for item in items
    ):
        items[0].add_marker(pytest.mark.django_db)


@pytest.fixture(scope="session", autouse=True)
def _evennia_init(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        import evennia

        evennia._init()
    yield


@pytest.fixture(autouse=True)
def _clean_reactor(request):
    """
    Evennia's test harness starts a LoopingCall per Script and never stops it, and NPC tests
    schedule ticks with callLater; trial test cases that run afterwards would report those as a
    dirty reactor. Cancel what a non-trial test left behind, and close the process-wide LLM
    client, so that a request it still has under way cannot leave a pooled connection's idle
    timer in a later trial test.
    """
    yield
    from twisted.trial.unittest import TestCase as TrialTestCase

    if request.instance is not None and isinstance(request.instance, TrialTestCase):
        return
    from twisted.internet import reactor

    from ai_contrib.llm.client import reset_client

    reset_client()

    for call in reactor.getDelayedCalls():
        if call.active():
            call.cancel()


@pytest.fixture(scope="module", autouse=True)
def _e2e_databases(request):
    """
    A game started by an end-to-end module reads ``AI_DATABASE_URL`` and
    ``AI_MEMORY_PGVECTOR_CONNECTION_STRING`` from the environment (``game_template``). On
    PostgreSQL each such module gets fresh databases (the vector one with pgvector), as each
    gets a fresh SQLite file otherwise: games of different modules must not meet in one
    database. Dropped after the module's game has stopped. A module marked ``sqlite_game``
    works on the game's SQLite file itself: its game keeps SQLite (its memories still go to
    pgvector when configured, in a database of their own).
    """
    database = postgres_url(DATABASE_VAR)
    if request.node.get_closest_marker("e2e") is None or database is None:
        yield
        return
    created = []
    with pytest.MonkeyPatch.context() as patch:
        try:
            if request.node.get_closest_marker("sqlite_game") is not None:
                patch.delenv(DATABASE_VAR)  # the game's own server/evennia.db3
            else:
                created.append(create_database(database, "e2e_game"))
                patch.setenv(DATABASE_VAR, created[-1])
            vectors = postgres_url(PGVECTOR_VAR)
            if vectors is not None:
                created.append(create_database(vectors, "e2e_memory", extensions=("vector",)))
                patch.setenv(PGVECTOR_VAR, created[-1])
            yield
        finally:
            for url in created:
                drop_database(url)


@pytest.fixture(autouse=True)
def _dead_tasks_dropped():
    """
    Evennia's test harness logs its session in during ``setUp`` with the task handler's
    ``deferLater`` mocked, so the login's ``utils.delay`` task never runs and stays in
    ``TASK_HANDLER.tasks``, holding the session, its account, their characters and command sets.
    Every test's world stayed reachable, and every later ``gc.collect()`` (Evennia's
    ``flush_cache`` runs one in each test's ``tearDown``) walked all of them: a test's teardown
    cost grew with the number of tests run before it. A non-persistent task still there when
    the test is over can no longer run (its call is cancelled or was never scheduled), so it is
    dropped; persistent ones are the handler's to keep.
    """
    from evennia.scripts.taskhandler import TASK_HANDLER

    before = set(TASK_HANDLER.tasks)
    yield
    for task_id, task in list(TASK_HANDLER.tasks.items()):
        if task_id not in before and not task[4]:  # (date, callback, args, kwargs, persistent, d)
            del TASK_HANDLER.tasks[task_id]


@pytest.fixture(autouse=True)
def _survivors_frozen():
    """
    What outlives a collection between two tests (modules, their caches, the memory stack's
    clients) lives for the rest of the process, yet every ``gc.collect()`` walked all of it
    again: Evennia's ``flush_cache`` runs one in each test's ``tearDown``, 0.15 s each over
    the 300,000 objects of a worker's imports. Frozen here, before the test makes anything
    (the last test's objects were let go at its teardown), a collection walks only what was
    made since; reference counting still frees what the frozen objects let go of.
    """
    import gc

    gc.collect()
    gc.freeze()
    yield
