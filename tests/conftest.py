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
