"""The app the transactional-step chaos tests run in real worker processes:
`tests.chaos.ledger_app:app` (its store is $DURABLY_STORE), or, to die at a commit,

    python -m tests.chaos.ledger_app STORE_URL before|after

which runs what is due and exits like a SIGKILL (137) at its first commit: just before the
transaction of the transactional step commits (`before`), or just after (`after`).

`booking(entry, journal)`: a transactional step `book` that inserts `entry` into the app's
own table `ledger` (in the store's database) and journals "book <key>" to the journal file
before it does; then a plain step `notify`, journalled likewise. When the journal holds a
line `linger` (the test writes it), the first attempt of `book` waits after its insert, time
for the test to SIGKILL its worker in the middle of the transaction.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import durably
from durably.testing import Faults
from tests.chaos.control_app import journal, write

__all__ = ["CREATE_LEDGER", "LINGER_SECONDS", "NAME", "app", "build"]

CREATE_LEDGER = "CREATE TABLE ledger (id TEXT PRIMARY KEY)"
LINGER_SECONDS = 30.0
NAME = "ledger-worker"  # a worker restarted under it recovers its runs at once


def build(app: durably.App) -> durably.App:
    @app.transaction
    def book(entry: str, log: str) -> str:
        db = durably.connection()
        write(log, f"book {durably.idempotency_key()}")
        lines = journal(Path(log))
        lingering = "linger" in lines and "lingering" not in lines  # the first attempt only
        mark = "?" if (app.store_url or "").startswith("sqlite") else "%s"
        db.execute(f"INSERT INTO ledger (id) VALUES ({mark})", (entry,))
        if lingering:
            write(log, "lingering")
            time.sleep(LINGER_SECONDS)
        return f"booked {entry}"

    @app.step
    async def notify(entry: str, log: str) -> str:
        write(log, f"notify {durably.idempotency_key()}")
        return f"told {entry}"

    @app.workflow
    async def booking(entry: str, log: str) -> list[str]:
        return [await book(entry, log), await notify(entry, log)]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))

if __name__ == "__main__":
    faults = Faults()
    if sys.argv[2] == "before":
        faults.crash_before_commit()
    else:
        faults.crash_after_commit()
    build(durably.App(sys.argv[1], hooks=[faults])).run_until_idle(name=NAME)
