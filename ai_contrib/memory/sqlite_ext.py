"""
The SQLite the archive's index file is opened with: one that can load sqlite-vec, for the
archived lines' vectors (``docs/design.md``, "Archived lines' vectors").

Python's own ``sqlite3`` loads extensions only where its build allows it (Debian's does; the
python.org and pyenv builds do not: ``Connection.enable_load_extension`` is missing). Where it
cannot, ``sqlean.py`` (a DB-API twin of ``sqlite3`` with its own SQLite, FTS5 included) is used
instead, so the full-text rows and the vectors share one file and one connection. Where neither
loads sqlite-vec (the ``[memory]`` extra not installed), the index is the full-text one alone.

:data:`sqlite3` is the module chosen; its ``Error`` and ``DatabaseError`` are the ones to catch.
"""

import logging
import sqlite3 as _stdlib

logger = logging.getLogger(__name__)


def _choose():
    if hasattr(_stdlib.Connection, "enable_load_extension"):
        return _stdlib
    try:
        import sqlean
    except ImportError:
        return _stdlib
    return sqlean


#: The DB-API module the index uses (``sqlite3`` or ``sqlean``).
sqlite3 = _choose()

_warned = False


def load_vec(conn) -> bool:
    """
    Load sqlite-vec into ``conn`` (a connection of :data:`sqlite3`).

    Returns:
        bool: True when its functions and ``vec0`` tables are usable on ``conn``; False (logged
        once per process) when sqlite-vec is not installed or cannot be loaded, and the archive
        is then searched by its words alone.
    """
    global _warned
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        try:
            sqlite_vec.load(conn)
        finally:
            conn.enable_load_extension(False)
        return True
    except (ImportError, AttributeError, sqlite3.Error) as err:
        if not _warned:
            _warned = True
            logger.warning("archived lines get no vectors (sqlite-vec unavailable: %s); the "
                           "archive is searched by its words only", err)
        return False
