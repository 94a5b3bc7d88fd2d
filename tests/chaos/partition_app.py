"""The app of the partition test: `tests.chaos.partition_app:app`, its store $DURABLY_STORE.

`haul(log, seconds)`: one step `grind` that ticks every 0.1 s for `seconds`, journalling
"start|tick|end <key> <pid>" (the ledger the test reads), and ends early at its next tick in
the process whose pid a file `<log>.hurry.<pid>` names: the test hurries the worker that took
the runs over, and leaves the cut-off one grinding. Its result is the pid that ran it.
"""

from __future__ import annotations

import asyncio
import os
import time

import durably
from tests.chaos.control_app import write

__all__ = ["app"]

app = durably.App(os.environ.get("DURABLY_STORE"))


@app.step
async def grind(log: str, seconds: float) -> int:
    key, pid = durably.idempotency_key(), os.getpid()
    write(log, f"start {key} {pid}")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not hurried(log, pid):
        await asyncio.sleep(0.1)
        write(log, f"tick {key} {pid}")
    write(log, f"end {key} {pid}")
    return pid


def hurried(log: str, pid: int) -> bool:
    return os.path.exists(f"{log}.hurry.{pid}")


@app.workflow(version="1")  # the test starts its runs with a stand-in of it
async def haul(log: str, seconds: float) -> int:
    return await grind(log, seconds)  # type: ignore[no-any-return]
