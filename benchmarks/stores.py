"""The stores measured on: a fresh, empty one per measurement, the store's own commit floor,
and its durability settings for the record.

SQLite is a new file in a temp dir (WAL, synchronous=FULL); PostgreSQL a new schema, or for
engines in processes of their own a new database (DBOS wants one), with
synchronous_commit=on, dropped afterwards. For durably in this process the URL carries the
durability; runner processes set it themselves (benchmarks/runners/__init__.py).
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import durably
from benchmarks.environment import filesystem_of

__all__ = ["POSTGRES_URL", "Store", "open_store", "postgres_problem"]

POSTGRES_URL = os.environ.get("DURABLY_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@dataclass(frozen=True, slots=True)
class Store:
    name: str  # sqlite | postgres: the targets' key, the results file's name
    label: str  # in the tables: the name, and the faster durability mode if asked
    fresh: Callable[[str], AbstractContextManager[str]]  # runner -> the URL of an empty store
    commit_floor: Callable[[int], float]  # seconds for n single-row commits, one at a time
    settings: Callable[[], dict[str, Any]]  # its durability settings, for the record


def open_store(name: str, server: str, *, runner_processes: bool, fast: bool) -> Store:
    """The store `name` (sqlite | postgres), for durably in this process or for runner
    processes (which set the durability, the faster mode if `fast`, themselves)."""
    if name == "sqlite":
        label = "sqlite (synchronous=NORMAL)" if fast else "sqlite"
        fresh = fresh_sqlite_file if runner_processes else lambda _: fresh_sqlite()
        return Store(name, label, fresh, sqlite_floor, lambda: sqlite_settings(fast))
    label = "postgres (synchronous_commit=off)" if fast else "postgres"
    return Store(
        name,
        label,
        (lambda _: fresh_database(server)) if runner_processes else lambda _: fresh_schema(server),
        lambda commits: postgres_floor(server, commits),
        lambda: postgres_settings(server, fast),
    )


# -- SQLite --------------------------------------------------------------------------------


@contextmanager
def fresh_sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="durably-bench-") as tmp:
        yield f"sqlite:///{tmp}/bench.db?synchronous=FULL"


@contextmanager
def fresh_sqlite_file(runner: str) -> Iterator[str]:
    """A file name in a new temp dir; the runner opens it with the durability it is asked."""
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp:
        yield f"sqlite:///{tmp}/{runner}.db"  # tmp is absolute: sqlite:////tmp/...


def sqlite_floor(commits: int) -> float:
    with (
        tempfile.TemporaryDirectory(prefix="durably-bench-") as tmp,
        closing(sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)) as db,
    ):
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
        began = time.perf_counter()
        for i in range(commits):
            db.execute("BEGIN IMMEDIATE")  # as the store's writes do
            db.execute("INSERT INTO floor (id, data) VALUES (?, ?)", (i, "x"))
            db.execute("COMMIT")
        return time.perf_counter() - began


def sqlite_settings(fast: bool) -> dict[str, Any]:
    with fresh_sqlite() as url:
        app = durably.App(url)
        path = app.store.url.removeprefix("sqlite:///")  # opening the store creates the file
        with closing(sqlite3.connect(path)) as db:
            journal_mode = db.execute("PRAGMA journal_mode").fetchone()[0]  # kept in the file
        app.close()
    return {
        "journal_mode": journal_mode,
        "synchronous": "NORMAL" if fast else "FULL",
        "sqlite_version": sqlite3.sqlite_version,
        "filesystem": filesystem_of(tempfile.gettempdir()),
    }


# -- PostgreSQL ----------------------------------------------------------------------------


def postgres_problem(url: str) -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return None
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".strip()


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """The URL of a new schema on the server (synchronous_commit=on), dropped afterwards."""
    import psycopg
    from psycopg import sql

    schema = f"durably_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        separator = "&" if "?" in url else "?"
        options = f"-csearch_path%3D{schema}%20-csynchronous_commit%3Don"
        yield f"{url}{separator}options={options}"
    finally:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new database on the server; dropped afterwards, with any the engine made beside it
    under the same name (a system database, say)."""
    import psycopg
    from psycopg import sql

    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as db:
            made = db.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{name}%",)
            ).fetchall()
            for (database,) in made:
                db.execute(
                    sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(database))
                )


def postgres_floor(url: str, commits: int) -> float:
    import psycopg

    with fresh_schema(url) as schema_url, psycopg.connect(schema_url, autocommit=True) as db:
        db.execute("CREATE TABLE floor (id integer PRIMARY KEY, data text NOT NULL)")
        began = time.perf_counter()
        for i in range(commits):  # autocommit: one round trip, one WAL flush each
            db.execute("INSERT INTO floor (id, data) VALUES (%s, %s)", (i, "x"))
        return time.perf_counter() - began


def postgres_settings(url: str, fast: bool) -> dict[str, Any]:
    import psycopg

    from durably.stores.postgres.store import redact

    names = ["server_version", "synchronous_commit", "fsync", "wal_sync_method", "commit_delay"]
    with fresh_schema(url) as schema_url, psycopg.connect(schema_url) as db:
        rows = {name: db.execute(f"SHOW {name}").fetchone() for name in names}
    settings = {"url": redact(url), **{name: row and row[0] for name, row in rows.items()}}
    return {**settings, "synchronous_commit": "off"} if fast else settings
