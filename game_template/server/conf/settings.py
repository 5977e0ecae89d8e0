r"""
Evennia settings for the AI tavern: a small game whose innkeeper, Marta, is an LLM-driven NPC
of `ai_contrib` (``ai_contrib.typeclasses.AssistantCharacter``).

Only what differs from Evennia's defaults is set here (see
https://www.evennia.com/docs/latest/Setup/Settings-Default.html). Paths to files use GAME_DIR;
Python paths are relative to the game dir.

Environment variables (read once, when the server or portal process imports this file):

- ``EVENNIA_PORT_BASE`` (int, default 4000): telnet listens on the base port, the web server on
  base+1, the webclient websocket on base+2, Django's internal web port is base+5 and the
  portal/server AMP link base+6. Two games (or a test run and a developer's game) can so run side
  by side by choosing bases at least 7 apart.
- ``AI_<NAME>`` for every option of ``ai_contrib.settings.DEFAULTS`` (e.g. ``AI_MAX_CONTEXT_TOKENS``,
  ``AI_SLEEP_AFTER_IDLE``, ``AI_LLM_BASE_URL``, ``AI_LLM_API_KEY``, ``AI_LLM_MODEL``): overrides the
  value below. An empty variable counts as unset. Values are parsed to the type of the default:
  int (float where the text has a fraction), float, bool (1/0/true/false/yes/no/on/off);
  options whose default is None are strings, except ``AI_LLM_SEED`` and ``AI_LLM_REPEAT_LAST_N``
  (int) and ``AI_LLM_REPEAT_PENALTY`` (float).

- ``AI_DATABASE_URL`` (e.g. ``postgresql://evennia:secret@127.0.0.1:5432/evennia``): Evennia's
  database instead of the SQLite file ``server/evennia.db3`` (``ai_contrib.database_url``;
  PostgreSQL needs ``pip install "psycopg[binary]"``). Mem0's vector store moves with
  ``AI_MEMORY_PGVECTOR_CONNECTION_STRING`` or ``AI_MEMORY_QDRANT_URL`` (docs/scaling-out.md).

Settings in secret_settings.py override this file; the environment overrides both, because it is
what a single run (the demo, a test) chooses.
"""

import os

# Use the defaults from Evennia unless explicitly overridden
from evennia.settings_default import *  # noqa: F401,F403

######################################################################
# Evennia base server config
######################################################################

SERVERNAME = "The Sleeping Stag"

######################################################################
# Network: loopback only, ports from EVENNIA_PORT_BASE
######################################################################

# The game is a local demo of an LLM NPC: nothing should be reachable from other machines.
_PORT_BASE = int(os.environ.get("EVENNIA_PORT_BASE") or 4000)

TELNET_PORTS = [_PORT_BASE]
TELNET_INTERFACES = ["127.0.0.1"]
WEBSERVER_PORTS = [(_PORT_BASE + 1, _PORT_BASE + 5)]
WEBSERVER_INTERFACES = ["127.0.0.1"]
WEBSOCKET_CLIENT_PORT = _PORT_BASE + 2
WEBSOCKET_CLIENT_INTERFACE = "127.0.0.1"
# "localhost" may resolve to ::1 first; the AMP link must use the interface it listens on.
AMP_HOST = "127.0.0.1"
AMP_PORT = _PORT_BASE + 6
AMP_INTERFACE = "127.0.0.1"
SERVER_HOSTNAME = "127.0.0.1"

# Scripted players (the demo, the end-to-end tests) connect and create accounts in a burst from
# the one loopback address; Evennia's defaults (2 connections/s, 2 accounts per 10 minutes per IP)
# are meant for a public server.
MAX_CONNECTION_RATE = 20
CREATION_THROTTLE_LIMIT = None

######################################################################
# ai_contrib: the LLM NPC
######################################################################

# Game-wide AI_* options (defaults in ai_contrib/settings.py). None = the embedded local model
# (SmolLM2-135M-Instruct, started by ai_contrib.startup.at_server_start); point these at any
# OpenAI-compatible server (Ollama, llama-server, vLLM, LiteLLM, a hosted API) to use another model.
AI_LLM_BASE_URL = None
AI_LLM_API_KEY = None
# What the NPCs know of their world (world/lore.py), loaded into the game on every start; staff
# add more in the game with `ailore` (docs/design.md of the contrib, "Lore and pins")
AI_LORE_MODULES = ["world.lore"]
# The commands an NPC may be given as actions (`aiactions`): the contrib's defaults, the town
# gate's `unlock` (commands/gate.py), which Bram's hook allows for the watchword at night only,
# and `lead` (commands/lead.py), with which Marta shows a guest up to the east room
AI_ACTION_CMDSET = "commands.lead.TavernActionCmdSet"

######################################################################
# Settings given in secret_settings.py override those in this file.
######################################################################
try:
    from server.conf.secret_settings import *  # noqa: F401,F403
except ImportError:
    print("secret_settings.py file not found or failed to import.")

######################################################################
# AI_* overrides from the environment (after secret_settings: a run's choice wins)
######################################################################


def _ai_settings_from_env(environ):
    """
    Read ``AI_<NAME>`` environment variables for the options of ``ai_contrib.settings.DEFAULTS``.

    Args:
        environ (Mapping[str, str]): usually ``os.environ``.

    Returns:
        dict: ``{"AI_<NAME>": value}`` for every set, non-empty variable, the value parsed to the
        type of the option's default (see the module docstring).

    Raises:
        ValueError: a numeric or boolean option given a value that does not parse, so a typo
            stops the server at start instead of silently using the default.
    """
    from ai_contrib.settings import DEFAULTS

    truthy, falsy = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
    numeric_when_set = {"LLM_SEED": int, "LLM_REPEAT_PENALTY": float, "LLM_REPEAT_LAST_N": int}
    parsed = {}
    for name, default in DEFAULTS.items():
        raw = environ.get(f"AI_{name}", "").strip()
        if not raw:
            continue
        if isinstance(default, bool):
            if raw.lower() not in truthy | falsy:
                raise ValueError(f"AI_{name}={raw!r}: expected one of {sorted(truthy | falsy)}")
            value = raw.lower() in truthy
        elif isinstance(default, int):
            # seconds and intervals may sensibly be fractional even where the default is whole
            value = int(raw) if raw.lstrip("+-").isdigit() else float(raw)
        elif isinstance(default, float):
            value = float(raw)
        elif default is None and name in numeric_when_set:
            value = numeric_when_set[name](raw)
        else:
            value = raw
        parsed[f"AI_{name}"] = value
    return parsed


globals().update(_ai_settings_from_env(os.environ))


def _databases_from_env(environ, default):
    """``DATABASES`` from ``AI_DATABASE_URL`` when set (``ai_contrib.database_url``), else
    ``default``; raises ValueError for a URL it cannot read."""
    from ai_contrib.database_url import databases_from_env

    return databases_from_env(environ, default)


DATABASES = _databases_from_env(os.environ, DATABASES)  # noqa: F405 (Evennia's default: SQLite)
