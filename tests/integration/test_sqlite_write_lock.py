"""A SQLite writer that finds the write lock taken tries again every few milliseconds until
it gets it (write_lock_pauses, in durably.stores.sqlite.connections), rather than leaving the
wait to SQLite's busy handler, whose pauses grow to 100 ms: beside a busy worker, a write from
another process then got the lock between two of the worker's transactions instead of
waiting up to seconds (docs/performance.md). Read from the statements the store's connection
runs (its trace), with the lock held by another connection to the real file."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durably.errors import StoreUnavailable
from durably.stores import NewRun
from durably.stores.sqlite.store import SQLiteStore

TRIES = 20


def _writing(
    store: SQLiteStore, run_id: str, tried: threading.Event, outcome: list[object]
) -> threading.Thread:
    """A thread that creates a run, counting its tries for the write lock."""
    tries = 0

    def traced(statement: str) -> None:
        nonlocal tries
        if statement == "BEGIN IMMEDIATE":
            tries += 1
            if tries == TRIES:
                tried.set()

    def write() -> None:
        store._db.get().set_trace_callback(traced)  # this thread's connection
        try:
            outcome.append(store.create_run(NewRun(run_id, "w", "{}"), now=datetime.now(UTC)))
        except Exception as exc:
            outcome.append(exc)
        outcome.append(tries)

    return threading.Thread(target=write)


def test_a_writer_keeps_trying_for_the_lock_and_gets_it_once_it_is_free(tmp_path: Path) -> None:
    path = tmp_path / "durably.db"
    store = SQLiteStore(path)
    tried, outcome = threading.Event(), list[object]()
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # a worker's transaction, holding the write lock
        writer = _writing(store, "r1", tried, outcome)
        writer.start()
        assert tried.wait(10), "the writer did not try again: it left the wait to SQLite"
        other.execute("ROLLBACK")
        writer.join(10)
    store.close()

    (_, created), tries = outcome
    assert created
    assert tries >= TRIES  # the try under way when the lock was released, or the next, got it


def test_a_writer_gives_up_after_the_busy_timeout_with_the_store_unavailable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "durably.db"
    store = SQLiteStore(path, busy_timeout=timedelta(milliseconds=100))
    tried, outcome = threading.Event(), list[object]()
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        writer = _writing(store, "r1", tried, outcome)
        writer.start()
        writer.join(10)
        other.execute("ROLLBACK")
    error, tries = outcome
    assert isinstance(error, StoreUnavailable)
    assert "database is locked" in str(error)
    assert isinstance(tries, int)
    assert tries > 1
    # nothing was written, and the store writes again once the lock is free
    assert store.get_run("r1") is None
    assert store.create_run(NewRun("r1", "w", "{}"), now=datetime.now(UTC))[1]
    store.close()


def test_a_reader_goes_on_while_another_connection_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "durably.db"
    store = SQLiteStore(path)
    store.create_run(NewRun("r1", "w", "{}"), now=datetime.now(UTC))
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        run = store.get_run("r1")
        other.execute("ROLLBACK")
    store.close()
    assert run is not None


def test_opening_a_file_another_connection_is_writing_waits_then_says_it_is_locked(
    tmp_path: Path,
) -> None:
    """A file not yet in WAL mode, that another connection is writing: switching it to WAL
    waits for the lock like a writer, and past the busy timeout the store cannot be opened;
    once the other is done, it opens."""
    path = tmp_path / "durably.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("CREATE TABLE theirs (n INTEGER)")
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO theirs VALUES (1)")
        began = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"cannot open the SQLite store .*locked"):
            SQLiteStore(path, busy_timeout=timedelta(milliseconds=100))
        assert time.monotonic() - began >= 0.1  # it waited its busy timeout out
        other.execute("COMMIT")
    store = SQLiteStore(path)
    try:
        assert store.create_run(NewRun("r1", "w", "{}"), now=datetime.now(UTC))[1]
    finally:
        store.close()
