"""The app the queue tests run in real worker processes: `tests.chaos.queues_app:app` (its
store is $DURABLY_STORE).

`imported(customer, n, ledger)` runs on the queue `imports` (at most 2 runs of one key at
once, fair between keys); `bulk(customer, n, ledger)` on `bulk` (4 runs at once in all, fair
between keys); `mailed(n, ledger)` on `emails` (no limits). The tests start each run with its
customer as its key. Each one's step writes "begin CUSTOMER N" to the ledger file, holds its
slot a moment, and writes "end CUSTOMER N": the engine never reads the file, so what it
shows is what really ran at once.
"""

from __future__ import annotations

import os
import time

import durably
from tests.chaos.control_app import write

__all__ = ["HOLD_SECONDS", "app", "build"]

HOLD_SECONDS = 0.05  # how long a step holds its run's slot


def build(app: durably.App) -> durably.App:
    app.queue("imports", concurrency_per_key=2)
    app.queue("bulk", concurrency=4)
    app.queue("emails", fair=False)

    @app.step
    def work(customer: str, n: int, ledger: str) -> str:
        write(ledger, f"begin {customer} {n}")
        time.sleep(HOLD_SECONDS)  # the outside service at work
        write(ledger, f"end {customer} {n}")
        return customer

    @app.workflow(queue="imports")
    def imported(customer: str, n: int, ledger: str) -> str:
        return work(customer, n, ledger)

    @app.workflow(queue="bulk")
    def bulk(customer: str, n: int, ledger: str) -> str:
        return work(customer, n, ledger)

    @app.workflow(queue="emails")
    def mailed(n: int, ledger: str) -> str:
        return work("mail", n, ledger)

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
