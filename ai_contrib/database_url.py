"""
Django's ``DATABASES`` from one URL in the environment (``AI_DATABASE_URL``), so that a game
(``game_template/server/conf/settings.py``) or the test suite (``tests/support/settings.py``)
moves from SQLite to PostgreSQL by environment alone (``docs/design.md``, "Scaling out").

Standard library only: settings files import this before Django is set up.

Accepted URLs::

    postgresql://USER:PASSWORD@HOST:PORT/NAME?sslmode=require   (also postgres://)
    sqlite:///relative/path.db3    sqlite:////absolute/path.db3    sqlite:///:memory:

User, password and name are percent-decoded; query parameters become the backend's
``OPTIONS`` (for PostgreSQL they are libpq parameters such as ``sslmode``, ``connect_timeout``).
"""

from urllib.parse import parse_qsl, unquote, urlsplit

#: the environment variable read by :func:`databases_from_env`
ENV_VAR = "AI_DATABASE_URL"

_ENGINES = {
    "postgresql": "django.db.backends.postgresql",
    "postgres": "django.db.backends.postgresql",
    "sqlite": "django.db.backends.sqlite3",
}


def database_from_url(url):
    """
    One Django database entry for ``url``.

    Args:
        url (str): see the module docstring.

    Returns:
        dict: ``{"ENGINE", "NAME", and for PostgreSQL "USER", "PASSWORD", "HOST", "PORT"
        (strings; empty when absent), "OPTIONS" (dict)}``.

    Raises:
        ValueError: an unknown scheme, a PostgreSQL URL without a database name, or a port that
            is not a number. The message never contains the password.
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _ENGINES:
        raise ValueError(
            f"{ENV_VAR}: unknown scheme {scheme!r}; expected one of {sorted(_ENGINES)}"
        )
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    if scheme == "sqlite":
        # sqlite:///game.db3 -> "game.db3", sqlite:////srv/game.db3 -> "/srv/game.db3"
        name = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
        return {"ENGINE": _ENGINES[scheme], "NAME": name or ":memory:", "OPTIONS": options}
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise ValueError(f"{ENV_VAR}: no database name (postgresql://user@host:port/NAME)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{ENV_VAR}: the port is not a number") from None
    return {
        "ENGINE": _ENGINES[scheme],
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(port) if port else "",
        "OPTIONS": options,
    }


def databases_from_env(environ, default):
    """
    Django's ``DATABASES`` setting: ``{"default": database_from_url(environ[ENV_VAR])}`` when
    the variable is set and not empty, else ``default`` unchanged.

    Args:
        environ (Mapping[str, str]): usually ``os.environ``.
        default (dict): the ``DATABASES`` to keep otherwise (the game's SQLite file).

    Returns:
        dict

    Raises:
        ValueError: as :func:`database_from_url`, so a typo stops the server at start.
    """
    url = (environ.get(ENV_VAR) or "").strip()
    if not url:
        return default
    return {"default": database_from_url(url)}
