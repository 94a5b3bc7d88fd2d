"""The stores measured on: a fresh, empty one per measurement (SQLite: a new file in a temp
dir; PostgreSQL: a new database, dropped afterwards), durable (runner processes set it
themselves); the store's own commit floor; its settings, for the record; and stores filled in
bulk through the store's own writes, then vacuumed.
"""

import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import durably
from benchmarks.runners.protocol import durable
from durably import RunStatus
from durably.client.ids import new_run_id
from durably.core.history import Event, EventKind
from durably.stores import Checkpoint, Claim, NewRun
from durably.stores import Store as DurablyStore

POSTGRES_URL = os.environ.get("DURABLY_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
LEASE = timedelta(minutes=5)  # of a fill's claims


@dataclass(frozen=True, slots=True)
class Store:
    """The store `name` (sqlite | postgres), for durably here or for runner processes."""

    name: str
    runner_processes: bool
    fast: bool

    @property
    def label(self) -> str:
        """In the tables: the name, and the faster durability mode if asked."""
        mode = "synchronous=NORMAL" if self.name == "sqlite" else "synchronous_commit=off"
        return f"{self.name} ({mode})" if self.fast else self.name

    @contextmanager
    def fresh(self, runner: str, prefix: str = "bench") -> Iterator[str]:
        """A new empty store, for `runner` (PostgreSQL: a database named `prefix`_...): its URL."""
        with fresh_file(runner) if self.name == "sqlite" else fresh_database(prefix) as url:
            yield url if self.runner_processes else durable(url)

    def commit_floor(self, commits: int) -> float:
        """Seconds for `commits` single-row commits, one at a time, durable (SQLite in WAL, each in
        BEGIN IMMEDIATE as the store's writes; PostgreSQL autocommit, one round trip each)."""
        sqlite = self.name == "sqlite"
        fresh = fresh_file("floor") if sqlite else fresh_database()
        with fresh as url, closing(connect(url)) as db:
            db.execute("CREATE TABLE floor (id integer PRIMARY KEY, data text NOT NULL)")
            insert = "INSERT INTO floor (id, data) VALUES " + ("(?, ?)" if sqlite else "(%s, %s)")
            began = time.perf_counter()
            for i in range(commits):
                db.execute(insert, (i, "x"))
                db.commit()
            return time.perf_counter() - began

    def settings(self) -> dict[str, Any]:
        """Its durability settings, read back (SQLite: from a file durably made), for the record."""
        if self.name == "postgres":
            from durably.stores.postgres.store import redact

            names = ["server_version", "synchronous_commit", "fsync", "wal_sync_method"]
            with closing(connect(POSTGRES_URL)) as db:
                read = {n: (db.execute(f"SHOW {n}").fetchone() or [None])[0] for n in names}
            off = {"synchronous_commit": "off"} if self.fast else {}
            return read | {"url": redact(POSTGRES_URL)} | off
        with fresh_file("settings") as url:
            durably.App(url).store.close()
            with closing(sqlite3.connect(url[10:])) as db:
                read = {"journal_mode": db.execute("PRAGMA journal_mode").fetchone()[0]}
        mount = ["findmnt", "-no", "FSTYPE", "--target", tempfile.gettempdir()]  # ext4, tmpfs
        found = shutil.which("findmnt") and subprocess.run(mount, capture_output=True, text=True)
        read["filesystem"] = found.stdout.strip() if found else "?"
        read["sqlite_version"] = sqlite3.sqlite_version
        return read | {"synchronous": "NORMAL" if self.fast else "FULL"}


def connect(url: str) -> Any:
    """A DB-API connection to the store at `url`, at the durable settings."""
    if not url.startswith("sqlite"):
        import psycopg

        return psycopg.connect(url, autocommit=True, options="-c synchronous_commit=on")
    db = sqlite3.connect(url[10:], isolation_level="IMMEDIATE")
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    return db


@contextmanager
def fresh_file(runner: str) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="durably-bench-") as tmp:
        yield f"sqlite:///{tmp}/{runner}.db"  # tmp is absolute: sqlite:////tmp/...


def postgres_problem() -> str | None:
    """None if the server answers, else why not."""
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except Exception as exc:
        return f"{POSTGRES_URL}: {type(exc).__name__}: {exc}".strip()


@contextmanager
def fresh_database(prefix: str = "bench") -> Iterator[str]:
    """A new database, named `prefix`_ and 12 hex digits; dropped afterwards with any the engine
    made beside it (named after it)."""
    from psycopg import sql

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with closing(connect(POSTGRES_URL)) as db:
        db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(POSTGRES_URL)._replace(path=f"/{name}"))
    finally:
        with closing(connect(POSTGRES_URL)) as db:
            made = db.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [name + "%"])
            for (database,) in made.fetchall():
                drop = sql.SQL("DROP DATABASE {} WITH (FORCE)")
                db.execute(drop.format(sql.Identifier(database)))


def fill(store: DurablyStore, workflow: str, count: int, at: datetime, kind: str = "due") -> None:
    """`count` runs of `workflow` started at `at`, a thousand a transaction: due then (priority
    0 to 10), asleep (priority 10, handed back by a worker, due a day later) or ended
    (completed then after three steps, 9 events)."""
    for first in range(0, count, 1_000):
        batch = range(first, min(count, first + 1_000))
        priority = [10 if kind == "asleep" else n % 11 for n in batch]
        runs = [NewRun(new_run_id(), workflow, "[]", priority=p) for p in priority]
        store.create_runs(runs, now=at)
        if kind != "due":
            claims = store.claim("filler", [workflow], now=at, lease=LEASE, limit=len(batch))
            store.commit([handed_back(c, at, kind) for c in claims], now=at)


def handed_back(claim: Claim, at: datetime, kind: str) -> Checkpoint:
    """A claimed run's checkpoint: asleep, due a day later; or completed after three steps."""
    if kind == "asleep":
        due = at + timedelta(days=1)
        return Checkpoint(claim.run_id, claim.epoch, (), RunStatus.PENDING, available_at=due)
    seq, events = claim.events[-1].seq, []
    for n in range(3):
        events.append(Event(seq + 1 + 2 * n, EventKind.STEP_STARTED, at, n, f"step_{n}", 1))
        events.append(Event(seq + 2 + 2 * n, EventKind.STEP_COMPLETED, at, n, f"step_{n}", 1, "1"))
    events.append(Event(seq + 7, EventKind.RUN_COMPLETED, at))
    return Checkpoint(claim.run_id, claim.epoch, tuple(events), RunStatus.COMPLETED, result="1")


def vacuum(url: str) -> None:
    """VACUUM ANALYZE a PostgreSQL store after a fill, as autovacuum would within minutes (else
    claims step over dead index entries); SQLite gets nothing (durably never runs ANALYZE)."""
    if url.startswith("postgresql"):
        with closing(connect(url.split("?")[0])) as db:
            db.execute("VACUUM ANALYZE durably_runs, durably_events")
            db.execute("CHECKPOINT")  # what it dirtied written now, not while timing
