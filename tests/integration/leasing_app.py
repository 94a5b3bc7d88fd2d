"""One run started, claimed, its lease renewed and its first step started on a SQLite file,
each marked on stderr (`@start`, `@claim`, ...) so that a trace of the process's system
calls shows which of them waited for the disk (tests/integration/test_sqlite_fsyncs.py).

    python -m tests.integration.leasing_app PATH SYNCHRONOUS [killed-after-claim | busy-first]

`killed-after-claim`: SIGKILLed once the lease is renewed. `busy-first`: a claim that finds
the file locked by another connection fails first (the store's busy timeout is short).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
from datetime import UTC, datetime, timedelta

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


def main(path: str, synchronous: str, mode: str) -> None:
    store = SQLiteStore(path, synchronous=synchronous, busy_timeout=timedelta(milliseconds=50))
    now = datetime.now(UTC)
    mark("start")
    store.create_run(NewRun(id=RUN, workflow=WORKFLOW, input="{}"), now=now)
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
    if mode == "killed-after-claim":
        os.kill(os.getpid(), signal.SIGKILL)
    mark("step")
    started = Event(claim.events[-1].seq + 1, EventKind.STEP_STARTED, now, 1, "charge_card", 1)
    assert store.commit([Checkpoint(RUN, claim.epoch, (started,))], now=now) == [True]
    mark("end")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
