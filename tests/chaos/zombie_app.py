"""The app the zombie tests run in real worker processes: `tests.chaos.zombie_app:app` (its
store is $DURABLY_STORE).

- `haul(ticks, log)`: a long step `grind`, then a quick step `seal`;
- `fan(ticks, log)`: durably.gather of two `grind`s and a `seal`, at most two at once (so the
  `seal` starts when the first `grind` ends).

The steps journal to the file `log` what they do, with their idempotency key and the pid of
the process they run in:

    start <key> <pid>
    tick <key> <pid> <tick> <monotonic time>     every TICK seconds, `ticks` of them
    cancelled <key> <pid> <monotonic time>       if the body is cancelled
    end <key> <pid> <monotonic time>
    seal <key> <pid>

A `grind` ends early, after its current tick, once the journal holds the line
`hurry <key> <pid>` (written by the test for one process's attempt). The steps return the pid
that ran them, so a run's result says which worker did the work. The monotonic clock is the
machine's: the test compares these times with its own.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import durably
from tests.chaos.control_app import journal, write

__all__ = ["TICK", "app", "build", "hurry"]

TICK = 0.05  # seconds between two of grind's journal lines


def hurry(key: str, pid: int) -> str:
    """The journal line that ends the attempt of `grind` with `key` running in process `pid`."""
    return f"hurry {key} {pid}"


def build(app: durably.App) -> durably.App:
    @app.step
    async def grind(ticks: int, log: str) -> str:
        key, pid = durably.idempotency_key(), os.getpid()
        write(log, f"start {key} {pid}")
        try:
            for tick in range(ticks):
                await asyncio.sleep(TICK)
                write(log, f"tick {key} {pid} {tick} {time.monotonic():.3f}")
                if hurry(key, pid) in journal(log):
                    break
        except asyncio.CancelledError:
            write(log, f"cancelled {key} {pid} {time.monotonic():.3f}")
            raise
        write(log, f"end {key} {pid} {time.monotonic():.3f}")
        return f"ground by {pid}"

    @app.step
    async def seal(log: str) -> str:
        write(log, f"seal {durably.idempotency_key()} {os.getpid()}")
        return f"sealed by {os.getpid()}"

    @app.workflow
    async def haul(ticks: int, log: str) -> list[str]:
        return [await grind(ticks, log), await seal(log)]

    @app.workflow
    async def fan(ticks: int, log: str) -> list[Any]:
        return await durably.gather(grind(ticks, log), grind(ticks, log), seal(log), limit=2)

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
