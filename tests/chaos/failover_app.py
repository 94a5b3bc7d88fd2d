"""The app of the failover test: `tests.chaos.failover_app:app`, its store $DURABLY_STORE (a
URL naming the primary and its standby). `counting(run)`: STEPS steps one after another; step
k appends "<run> <k-1>" to $FAILOVER_ACKED when it starts, for by then the checkpoint of step
k-1 was acknowledged (a step starts only once the last one's outcome is durable)."""

from __future__ import annotations

import asyncio
import os

import durably
from tests.chaos.control_app import write

__all__ = ["STEPS", "app"]

STEPS = 6

app = durably.App(os.environ.get("DURABLY_STORE"))


@app.step
async def advance(run: str, k: int, total: int) -> int:
    if k > 0:
        write(os.environ["FAILOVER_ACKED"], f"{run} {k - 1}")
    await asyncio.sleep(0.05)  # a step that takes a moment: the failover lands among them
    return total + k


@app.workflow(version="1")  # the test starts its runs with a stand-in of it
async def counting(run: str) -> int:
    total = 0
    for k in range(STEPS):
        total = await advance(run, k, total)
    return total
