"""
Shared pytest setup: Evennia's flat API (``from evennia import ...``) is only filled in by
``evennia._init()``, which touches the database, so it runs once here with pytest-django's
database blocker lifted.
"""

import pytest


def pytest_configure(config):
    import django

    django.setup()


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
    dirty reactor. Cancel what a non-trial test left behind.
    """
    yield
    from twisted.trial.unittest import TestCase as TrialTestCase

    if request.instance is not None and isinstance(request.instance, TrialTestCase):
        return
    from twisted.internet import reactor

    for call in reactor.getDelayedCalls():
        if call.active():
            call.cancel()
