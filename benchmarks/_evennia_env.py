"""
Django + Evennia for a benchmark script, outside a game dir.

:func:`setup_evennia` configures Django from ``evennia.settings_default`` (as the test settings
in ``tests/support/settings.py`` do) with a *file* SQLite database in a fresh temporary directory,
creates the tables straight from the models (no migrations: ~1.5 s instead of ~6 s), and runs
``evennia._init()`` so Evennia's flat API (``evennia.create_object``...) is filled in. Logs and
the AI archive go to the same temporary directory. SQLite gets the pragmas a running Evennia
server sets (``settings.SQLITE3_PRAGMAS``).

Call it before importing anything that imports Evennia models (``ai_contrib.typeclasses``,
``evennia.utils.create``...).
"""

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _NoMigrations(dict):
    """``MIGRATION_MODULES`` saying "no migrations" for every app, so tables come from models."""

    def __contains__(self, item):
        return True

    def __getitem__(self, item):
        return None


def apply_server_pragmas():
    """
    Run ``settings.SQLITE3_PRAGMAS`` on the connection, as Evennia's server does at start
    (``EvenniaServerService.sqlite3_prep``: ``synchronous=OFF``, a larger page cache...), so
    database writes cost what they cost in a running game.
    """
    from django.conf import settings
    from django.db import connection

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        return
    with connection.cursor() as cursor:
        for pragma in settings.SQLITE3_PRAGMAS:
            cursor.execute(pragma)


def setup_evennia(workdir=None, **overrides):
    """
    Configure Django with Evennia's default settings and a file SQLite DB, create the tables,
    and initialise Evennia's flat API.

    Args:
        workdir (str, optional): directory for the database, logs and ``AI_ARCHIVE_DIR``;
            default a new temporary directory (left in place: the caller may delete it).
        **overrides: extra settings (``AI_LLM_BASE_URL="http://127.0.0.1:PORT/v1"``...), applied
            last.

    Returns:
        str: the work directory.

    Raises:
        RuntimeError: if Django settings were already configured in this process.
    """
    import django
    from django.conf import settings

    if settings.configured:
        raise RuntimeError("Django settings are already configured in this process")
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    workdir = workdir or tempfile.mkdtemp(prefix="ai-contrib-bench-")
    os.makedirs(workdir, exist_ok=True)

    cwd = os.getcwd()
    try:  # evennia.settings_default chdirs upward looking for a game dir
        import evennia.settings_default as defaults
    finally:
        os.chdir(cwd)

    values = {name: getattr(defaults, name) for name in dir(defaults) if name.isupper()}
    logs = os.path.join(workdir, "logs")
    os.makedirs(logs, exist_ok=True)
    values.update(
        LOG_DIR=logs,
        SERVER_LOG_FILE=os.path.join(logs, "server.log"),
        PORTAL_LOG_FILE=os.path.join(logs, "portal.log"),
        HTTP_LOG_FILE=os.path.join(logs, "http_requests.log"),
        LOCKWARNING_LOG_FILE=os.path.join(logs, "lockwarnings.log"),
        CHANNEL_LOG_DIR=logs,
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": os.path.join(workdir, "bench.db3"),
            }
        },
        MIGRATION_MODULES=_NoMigrations(),
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        SECRET_KEY="ai-contrib-benchmark-only",
        AI_ARCHIVE_DIR=os.path.join(workdir, "archive"),
        # the defaults name a game dir's own modules; without a game dir use Evennia's
        CMDSET_CHARACTER="evennia.commands.default.cmdset_character.CharacterCmdSet",
        CMDSET_ACCOUNT="evennia.commands.default.cmdset_account.AccountCmdSet",
        CMDSET_SESSION="evennia.commands.default.cmdset_session.SessionCmdSet",
        CMDSET_UNLOGGEDIN="evennia.commands.default.cmdset_unloggedin.UnloggedinCmdSet",
        BASE_OBJECT_TYPECLASS="evennia.objects.objects.DefaultObject",
        BASE_CHARACTER_TYPECLASS="evennia.objects.objects.DefaultCharacter",
        BASE_ROOM_TYPECLASS="evennia.objects.objects.DefaultRoom",
        BASE_EXIT_TYPECLASS="evennia.objects.objects.DefaultExit",
        BASE_SCRIPT_TYPECLASS="evennia.scripts.scripts.DefaultScript",
    )
    values.update(overrides)
    settings.configure(**values)
    django.setup()

    from django.core.management import call_command

    call_command("migrate", run_syncdb=True, verbosity=0, interactive=False)
    apply_server_pragmas()

    import evennia

    evennia._init()
    return workdir
