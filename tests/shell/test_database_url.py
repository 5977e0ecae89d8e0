"""
Evennia's database chosen by the environment alone (``AI_DATABASE_URL``,
``ai_contrib.database_url``): the URL parsing, the test settings and the game template's
settings read in fresh processes, and, in the PostgreSQL run, the suite's own connection.
"""

import json
import os
import subprocess
import sys

import pytest

from ai_contrib.database_url import database_from_url, databases_from_env
from tests.support.postgres_util import DATABASE_VAR, require_postgres
from tests.support.paths import ROOT
from tests.support.waiting import HANG_GUARD

SQLITE = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}


def test_postgresql_url_becomes_a_django_database():
    url = "postgresql://evennia:s%40cret@db.example:6543/game?sslmode=require"
    assert database_from_url(url) == {
        "ENGINE": "django.db.backends.postgresql", "NAME": "game", "USER": "evennia",
        "PASSWORD": "s@cret", "HOST": "db.example", "PORT": "6543",
        "OPTIONS": {"sslmode": "require"},
    }
    short = database_from_url("postgres://127.0.0.1/game")
    assert (short["ENGINE"], short["USER"], short["PASSWORD"], short["PORT"]) == (
        "django.db.backends.postgresql", "", "", "")


def test_sqlite_urls():
    assert database_from_url("sqlite:////srv/game/evennia.db3")["NAME"] == "/srv/game/evennia.db3"
    assert database_from_url("sqlite:///evennia.db3")["NAME"] == "evennia.db3"
    assert database_from_url("sqlite:///:memory:")["NAME"] == ":memory:"


def test_unset_or_empty_keeps_the_default_and_bad_urls_stop_with_no_password_shown():
    assert databases_from_env({}, SQLITE) is SQLITE
    assert databases_from_env({DATABASE_VAR: "  "}, SQLITE) is SQLITE
    with pytest.raises(ValueError, match="unknown scheme 'mysql'"):
        databases_from_env({DATABASE_VAR: "mysql://u:hunter2@h/db"}, SQLITE)
    with pytest.raises(ValueError, match="no database name") as err:
        database_from_url("postgresql://u:hunter2@h:5432/")
    assert "hunter2" not in str(err.value)
    with pytest.raises(ValueError, match="port") as err:
        database_from_url("postgresql://u:hunter2@h:port/db")
    assert "hunter2" not in str(err.value)


def _settings_in_fresh_process(code, cwd, environ):
    env = {k: v for k, v in os.environ.items() if k not in (DATABASE_VAR, "DJANGO_SETTINGS_MODULE")}
    env.update(environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("where", ["tests", "game_template"])
def test_settings_pick_postgresql_from_the_environment(where):
    if where == "tests":
        code = "import json, tests.support.settings as s; print(json.dumps(s.DATABASES['default']))"
        cwd = ROOT
    else:
        code = ("import json, sys; sys.path.insert(0, '.'); from server.conf import settings as s;"
                " print(json.dumps(s.DATABASES['default']))")
        cwd = ROOT / "game_template"
    url = "postgresql://evennia:pw@127.0.0.1:5439/tavern"
    chosen = _settings_in_fresh_process(code, cwd, {DATABASE_VAR: url})
    assert chosen["ENGINE"] == "django.db.backends.postgresql"
    assert (chosen["NAME"], chosen["HOST"], chosen["PORT"], chosen["USER"]) == (
        "tavern", "127.0.0.1", "5439", "evennia")
    default = _settings_in_fresh_process(code, cwd, {})
    assert default["ENGINE"] == "django.db.backends.sqlite3"


@pytest.mark.django_db
def test_the_suite_runs_on_the_configured_postgresql():
    """In `make test-postgres` the Evennia objects of every test live in PostgreSQL."""
    require_postgres(DATABASE_VAR)
    from django.db import connection

    from evennia.objects.models import ObjectDB

    assert connection.vendor == "postgresql"
    room = ObjectDB.objects.create(db_key="Cellar")
    with connection.cursor() as cursor:
        cursor.execute("SELECT db_key FROM objects_objectdb WHERE id = %s", [room.id])
        assert cursor.fetchone() == ("Cellar",)
        cursor.execute("SELECT version()")
        assert cursor.fetchone()[0].startswith("PostgreSQL")
