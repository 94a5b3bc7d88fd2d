"""W3's side-effect sink: a SQLite file outside every engine's store, shared by processes.
`apply` records one application of a keyed effect; a key seen twice is a duplicate (the
effect happened twice in the world: a card charged twice).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

__all__ = ["apply", "counts", "create"]

_local = threading.local()


def create(path: str | Path) -> None:
    with sqlite3.connect(path, isolation_level=None) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT NOT NULL)")


def apply(path: str | Path, key: str) -> None:
    """Record one application of the effect named `key` (committed before returning)."""
    db: sqlite3.Connection | None = getattr(_local, "db", None)
    if db is None or getattr(_local, "path", None) != str(path):
        db = sqlite3.connect(path, isolation_level=None, timeout=30)
        db.execute("PRAGMA synchronous = NORMAL")
        _local.db, _local.path = db, str(path)
    db.execute("INSERT INTO effects (key) VALUES (?)", (key,))


def counts(path: str | Path) -> tuple[int, int]:
    """How many distinct effects were applied, and applications beyond the first of a key."""
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT count(DISTINCT key), count(*) FROM effects").fetchone()
    return int(row[0]), int(row[1]) - int(row[0])
