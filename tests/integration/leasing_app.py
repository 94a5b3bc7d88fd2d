"""One run started, claimed, its lease renewed and its first step started on a SQLite file,
each marked on stderr (`@start`, `@claim`, ...) so that a trace of the process's system
calls shows which of them waited for the disk (tests/integration/test_sqlite_fsyncs.py).

    python -m tests.integration.leasing_app PATH SYNCHRONOUS [MODE]

MODE `killed-after-claim`: SIGKILLed once the lease is renewed; `killed-after-step`: once the
first step's start is committed; `busy-first`: a claim that finds the file locked by another
connection fails first (the store's busy timeout is short).

The write-ahead log starts empty (truncated once the store is open), and the length it has
after each part is written to PATH.wal-lengths, a JSON object: the bytes a power cut keeps
at least, had it come then, are those up to the length after the last part that synced.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from durably.core.history import Event, EventKind
from durably.errors import StoreUnavailable
from durably.stores import Checkpoint, Lease, NewRun
from durably.stores.sqlite.store import SQLiteStore

RUN = "charge-1"
WORKFLOW = "charge"
OWNER = "worker-a"
LEASE = timedelta(minutes=5)


def mark(what: str) -> None:
    os.write(2, f"@{what}\n".encode())


def note_length(path: str, after: str) -> None:
    """Add the write-ahead log's length now, after the part `after`, to PATH.wal-lengths."""
    notes = Path(f"{path}.wal-lengths")
    lengths = json.loads(notes.read_text()) if notes.exists() else {}
    lengths[after] = Path(f"{path}-wal").stat().st_size
    notes.write_text(json.dumps(lengths))


def main(path: str, synchronous: str, mode: str) -> None:
    store = SQLiteStore(path, synchronous=synchronous, busy_timeout=timedelta(milliseconds=50))
    with closing(sqlite3.connect(path)) as db:  # the log from empty: its length tells
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    now = datetime.now(UTC)
    mark("start")
    store.create_run(NewRun(id=RUN, workflow=WORKFLOW, input="{}"), now=now)
    note_length(path, "start")
    if mode == "busy-first":
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # the write lock, held past the busy timeout
        try:
            store.claim(OWNER, [WORKFLOW], now=now, lease=LEASE, limit=1)
            raise AssertionError("a claim of a locked file succeeded")
        except StoreUnavailable:
            other.execute("ROLLBACK")
    mark("claim")
    [claim] = store.claim(OWNER, [WORKFLOW], now=now, lease=LEASE, limit=1)
    mark("renew")
    assert store.renew([Lease(RUN, claim.epoch)], now=now, lease=LEASE) == {RUN}
    note_length(path, "renew")
    if mode == "killed-after-claim":
        os.kill(os.getpid(), signal.SIGKILL)
    mark("step")
    started = Event(claim.events[-1].seq + 1, EventKind.STEP_STARTED, now, 1, "charge_card", 1)
    assert store.commit([Checkpoint(RUN, claim.epoch, (started,))], now=now) == [True]
    note_length(path, "step")
    if mode == "killed-after-step":
        os.kill(os.getpid(), signal.SIGKILL)
    mark("end")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
