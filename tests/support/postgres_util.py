"""
What the tests that need PostgreSQL share: the server's URLs from the environment
(``scripts/with_postgres.sh`` sets them for ``make test-postgres``), a skip that says why when
none is configured (a failure instead under ``AI_REQUIRE_POSTGRES=1``, so the PostgreSQL run
cannot pass by skipping them), and throwaway databases on that server.
"""

import os
import uuid
from urllib.parse import urlsplit

import pytest

DATABASE_VAR = "AI_DATABASE_URL"
PGVECTOR_VAR = "AI_MEMORY_PGVECTOR_CONNECTION_STRING"


def postgres_url(var):
    """The PostgreSQL URL in environment variable ``var``, or None when unset or not PostgreSQL."""
    url = (os.environ.get(var) or "").strip()
    return url if url.split("://", 1)[0] in ("postgresql", "postgres") else None


def require_postgres(var):
    """
    The PostgreSQL URL in ``var``; skips the test when there is none, or fails it when
    ``AI_REQUIRE_POSTGRES=1`` (the PostgreSQL run must run every such test).

    Returns:
        str: the URL.
    """
    url = postgres_url(var)
    if url is None:
        reason = (f"no PostgreSQL configured ({var} unset): `make test-postgres` starts one and "
                  "runs the suite against it")
        if os.environ.get("AI_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"AI_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)
    return url


def with_database(url, name):
    """``url`` naming database ``name`` instead of its own."""
    return urlsplit(url)._replace(path="/" + name).geturl()


def create_database(url, prefix, extensions=()):
    """
    Create a new, empty database on the server of ``url`` (whose user may create databases).

    Args:
        url (str): a PostgreSQL URL.
        prefix (str): the start of the database's name (a random suffix follows).
        extensions (tuple[str]): extensions to create in it, e.g. ``("vector",)``.

    Returns:
        str: the new database's URL (drop it with :func:`drop_database`).
    """
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    new = with_database(url, name)
    if extensions:
        with psycopg.connect(new, autocommit=True) as conn:
            for extension in extensions:
                conn.execute(f'CREATE EXTENSION IF NOT EXISTS "{extension}"')
    return new


def drop_database(url):
    """Drop the database named in ``url``, closing its connections first."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
