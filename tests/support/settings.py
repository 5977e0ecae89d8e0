"""
Django settings for running the test suite outside a game dir (pytest-django).

The database is chosen by the environment alone: ``AI_DATABASE_URL`` (see
``ai_contrib.database_url``), SQLite in memory when unset.

``evennia.settings_default`` chdirs upward looking for a game dir when imported, so the working
directory is saved and restored around the import.
"""

import atexit
import os
import shutil
import tempfile

from ai_contrib.database_url import databases_from_env

_cwd = os.getcwd()
try:
    from evennia.settings_default import *  # noqa: F401,F403
finally:
    os.chdir(_cwd)


def _throwaway(prefix):
    """A new directory under the system's temporary directory, removed when this process
    exits (each test process imports these settings once and has directories of its own)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


_LOG_DIR = _throwaway("ai-contrib-test-logs-")
LOG_DIR = _LOG_DIR
SERVER_LOG_FILE = os.path.join(_LOG_DIR, "server.log")
PORTAL_LOG_FILE = os.path.join(_LOG_DIR, "portal.log")
HTTP_LOG_FILE = os.path.join(_LOG_DIR, "http_requests.log")
LOCKWARNING_LOG_FILE = os.path.join(_LOG_DIR, "lockwarnings.log")
CHANNEL_LOG_DIR = _LOG_DIR if "CHANNEL_LOG_DIR" in globals() else None

# SQLite in memory, or the database named by AI_DATABASE_URL (PostgreSQL in `make test-postgres`;
# pytest-django creates and drops test_<name> beside it)
DATABASES = databases_from_env(
    os.environ, {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SECRET_KEY = "ai-contrib-tests-only"

# the archive of raw messages goes to a throwaway directory
AI_ARCHIVE_DIR = _throwaway("ai-contrib-test-archive-")
AI_MEMORY_DIR = _throwaway("ai-contrib-test-memory-")
AI_EMBEDDED_CACHE_DIR = _throwaway("ai-contrib-test-prompt-cache-")
AI_LLM_BASE_URL = "http://127.0.0.1:9/v1"  # tests point this at their own HTTP doubles
AI_TICK_INTERVAL = 3600  # tests drive ticks by hand

# the command sets Evennia's test harness gives its tests (evennia.utils.test_resources,
# DEFAULT_SETTING_RESETS): the harness puts them in place only while a test runs, but Evennia's
# account module read CMDSET_ACCOUNT when imported, so every account a test created looked for a
# game's own `commands` package, failed, and got an error command set instead (each failed
# import also cost a traceback walk of several ms)
CMDSET_UNLOGGEDIN = "evennia.game_template.commands.default_cmdsets.UnloggedinCmdSet"
CMDSET_SESSION = "evennia.game_template.commands.default_cmdsets.SessionCmdSet"
CMDSET_CHARACTER = "evennia.game_template.commands.default_cmdsets.CharacterCmdSet"
CMDSET_ACCOUNT = "evennia.game_template.commands.default_cmdsets.AccountCmdSet"
CMDSET_PATHS = ["evennia.game_template.commands", "evennia", "evennia.contrib"]
