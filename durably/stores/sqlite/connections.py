"""The SQLite store's connections, one per thread, and the transactions it runs on them.

Writers take the write lock up front (BEGIN IMMEDIATE), so that a transaction never has to
upgrade a read lock and fail with SQLITE_BUSY half-way. A writer that finds the lock taken
tries again after short pauses, for up to the busy timeout (`write_lock_pauses`).
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from durably.errors import StoreUnavailable
from durably.stores.sqlite.notices import ChangingConnection, Notices

__all__ = ["SYNCHRONOUS", "Connections", "hint", "write_lock_pauses"]

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
# The pauses between a writer's tries for the write lock: from _FIRST_PAUSE, doubling to
# _LONGEST_PAUSE, each drawn within ±50% so that waiting writers do not try in step.
_FIRST_PAUSE = 0.0002
_LONGEST_PAUSE = 0.001
_LOCKED = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def write_lock_pauses(rng: random.Random) -> Iterator[float]:
    """The pauses, in seconds, of a writer waiting for the write lock, one after each try.

    Why not SQLite's own busy handler (the busy timeout): it pauses 1, 2, 5, 10 ... ms, and
    100 ms from the 13th try on. A writer in another process that keeps finding the lock
    taken by a busy worker, whose commits hold it most of the time, then tries ten times a
    second and loses most of them: an `app.start` waited up to 1.6 s beside a worker
    running 20,000 runs (the starts-beside benchmark, docs/performance.md). Python's sqlite3
    cannot set a busy handler of its own (sqlite3_busy_handler), so the writer's tries are
    made here, every millisecond at most, and a writer gets the lock within a few of the
    worker's commits (a cap of 2 ms was measured too: p95 and worst case about half again as
    long)."""
    pause = _FIRST_PAUSE
    while True:
        yield pause * rng.uniform(0.5, 1.5)
        pause = min(pause * 2, _LONGEST_PAUSE)


class Connections:
    """One connection per thread to the file at `path`, and transactions on it: `write`,
    `leasing` (a write that waits for no disk) and `read`. Status changes a write transaction
    made are sent to `notices` after it commits (durably listen)."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: str,
        busy_timeout: timedelta,
        create: bool,
        notices: Notices,
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._busy_ms = round(busy_timeout.total_seconds() * 1000)
        self._create = create
        self._notices = notices
        self._local = threading.local()
        self._connections: list[ChangingConnection] = []
        self._lock = threading.Lock()
        self._rng = random.Random()

    def __len__(self) -> int:
        """How many are open."""
        with self._lock:
            return len(self._connections)

    def get(self) -> ChangingConnection:
        """This thread's connection, opened on first use."""
        db: ChangingConnection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect()
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    def release(self) -> None:
        """Close this thread's connection (the next call here opens another)."""
        db: ChangingConnection | None = getattr(self._local, "db", None)
        if db is None:
            return
        self._local.db = None
        with self._lock:
            if db in self._connections:
                self._connections.remove(db)
        db.close()

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()

    @contextmanager
    def write(self) -> Iterator[ChangingConnection]:
        with self._transaction(write=True) as db:
            yield db

    @contextmanager
    def read(self) -> Iterator[ChangingConnection]:
        with self._transaction(write=False) as db:
            yield db

    @contextmanager
    def leasing(self) -> Iterator[ChangingConnection]:
        """A write transaction that leases runs, committed without waiting for the disk.

        A lease is durable once the lease holder's next commit is: WAL appends each commit
        after the one before, so that commit's fsync takes the lease's pages with it. Until
        then only losing the machine can lose the lease (a process killed leaves its writes to
        the operating system), and it takes every process using this file with it, the
        holder among them; the store is then as if the lease never was, and the run is
        claimed again. Nothing that leaves the process follows a lease before such a commit:
        a step's start, a timer, a run's end are each durable first. So a claim costs no
        fsync of its own, and a run started in one process and claimed in another reaches
        its first step in two fsyncs, not three (docs/performance.md)."""
        if self._synchronous not in ("FULL", "EXTRA"):  # no commit waits for the disk
            with self.write() as db:
                yield db
            return
        db = self.get()
        db.execute("PRAGMA synchronous = NORMAL")  # outside a transaction, as SQLite asks
        try:
            with self.write() as db:
                yield db
        finally:
            db.execute(f"PRAGMA synchronous = {self._synchronous}")

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[ChangingConnection]:
        db = self.get()
        if write and db.gathering != self._notices.changes_listened():
            db.gather_changes(not db.gathering)
        try:
            if write:
                self._begin_writing(db)
            else:
                db.execute("BEGIN")
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(
                f"the SQLite store {self.path!r} is unavailable: {exc}{hint(self.path, exc)}"
            ) from exc
        try:
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            db.changes.clear()  # changes rolled back: none happened
            if db.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise StoreUnavailable(
                    f"the SQLite store {self.path!r} failed: {exc}{hint(self.path, exc)}"
                ) from exc
            raise
        if db.changes:  # after the commit, best effort (durably listen)
            self._notices.changes(db.sent_changes())

    def _begin_writing(self, db: ChangingConnection) -> None:
        """BEGIN IMMEDIATE, waiting for the write lock as `_when_free` does; SQLite's busy
        handler is off meanwhile (it stays on for everything else: a reader waits for a
        recovery)."""
        db.execute("PRAGMA busy_timeout = 0")
        try:
            self._when_free(db, "BEGIN IMMEDIATE")
        finally:
            db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")

    def _when_free(self, db: sqlite3.Connection, statement: str) -> None:
        """Run `statement`, tried again after each of `write_lock_pauses` while another
        connection holds the lock it needs, until the busy timeout."""
        deadline = time.monotonic() + self._busy_timeout.total_seconds()
        pauses = write_lock_pauses(self._rng)
        while True:
            try:
                db.execute(statement)
                return
            except sqlite3.OperationalError as exc:
                # SQLITE_BUSY or SQLITE_LOCKED, or one of their extended codes
                if (exc.sqlite_errorcode or 0) & 0xFF not in _LOCKED:
                    raise
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
            time.sleep(min(next(pauses), left))

    def _connect(self) -> ChangingConnection:
        # mode=rw: a file that does not exist is an error, never created (create=False)
        target = self.path if self._create else f"{Path(self.path).absolute().as_uri()}?mode=rw"
        try:
            db = sqlite3.connect(
                target,
                timeout=self._busy_timeout.total_seconds(),
                isolation_level=None,  # transactions are begun explicitly
                check_same_thread=False,  # only so close() can close every thread's one
                uri=not self._create,
                factory=ChangingConnection,
            )
            if self._create:  # a durably store is in WAL mode already (it persists)
                self._enable_wal(db)
            db.execute(f"PRAGMA synchronous = {self._synchronous}")
            db.execute("PRAGMA foreign_keys = ON")
            db.create_function("durably_status_changed", 4, db.changed)
        except sqlite3.Error as exc:
            raise StoreUnavailable(
                f"cannot open the SQLite store {self.path!r}: {exc}{hint(self.path, exc)}"
            ) from exc
        return db

    def _enable_wal(self, db: sqlite3.Connection) -> None:
        """Switch to WAL. SQLite answers "locked" at once, without its busy handler, while
        another connection writes to a file not yet in WAL mode: wait as a writer does."""
        self._when_free(db, "PRAGMA journal_mode = WAL")


def hint(path: str, error: sqlite3.Error) -> str:
    """What to do about an error of the database's file system, said after SQLite's words."""
    said = str(error).lower()
    folder = Path(path).absolute().parent
    if "disk is full" in said or "disk i/o error" in said:
        return f" (free space on the file system that holds {folder}; durably waits for it)"
    writable = os.access(folder, os.W_OK) and (not Path(path).exists() or os.access(path, os.W_OK))
    if "readonly" in said or "read-only" in said or not writable:
        return (
            f" (the file or its folder {folder} is read-only: durably writes the file and its "
            "-wal and -shm files beside it; make them writable by this process's user)"
        )
    return ""
