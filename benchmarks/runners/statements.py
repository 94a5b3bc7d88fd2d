"""Counting the SQL statements a process sends to its store, at the driver, whatever engine
sends them (the outputs benchmark's waiting readers): every statement a sqlite3 connection
made after `count()` runs, by sqlite3.connect or sqlite3.dbapi2.connect (SQLAlchemy's)
(its trace callback: BEGIN and COMMIT included), and every
execute and executemany of a psycopg cursor (psycopg 3, which both durably and DBOS use on
PostgreSQL). The count is of this process only: the store's other clients are not in it.
"""

import sqlite3
import sqlite3.dbapi2
import threading
from typing import Any

_lock = threading.Lock()
_count = [0]


def _one(*_: object) -> None:
    with _lock:
        _count[0] += 1


def count() -> None:
    """From now on, count this process's statements (call before the engine connects)."""
    plain = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection: sqlite3.Connection = plain(*args, **kwargs)
        connection.set_trace_callback(_one)
        return connection

    sqlite3.connect = sqlite3.dbapi2.connect = traced  # type: ignore[assignment]
    try:
        import psycopg
    except ImportError:  # SQLite only here
        return
    for method in ("execute", "executemany"):
        original = getattr(psycopg.Cursor, method)
        setattr(psycopg.Cursor, method, _counted(original))


def _counted(original: Any) -> Any:
    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        _one()
        return original(self, *args, **kwargs)

    return counted


def so_far() -> int:
    """Statements counted since `count()`."""
    with _lock:
        return _count[0]
