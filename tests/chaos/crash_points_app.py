"""The app of the crash-points chaos test: one workflow per kind of durable moment, and a
command line that runs what is due in a worker process that dies (like SIGKILL) at a chosen
commit, or runs it to the end.

    python -m tests.chaos.crash_points_app STORE_URL JOURNAL before|after|none K

`before K`: the process dies with its (K+1)-th commit assembled, before it is written;
`after K`: just after it is durable, before anything hears so; `none`: no crash. Every step
and undo journals "<what> <idempotency key>" to JOURNAL, the ledger the test reads.

- `timer`: a step, a short durable sleep, a step.
- `signal`: a step, a wait for the signal "go" (sent before the worker runs), a step given
  its payload.
- `approval`: a step, an approval a person decides while the run waits, a step.
- `cancel`: a step with an undo, then a long sleep; the run is cancelled while it sleeps.
- `renew`: continue as new twice, a step in each generation.
"""

from __future__ import annotations

import os
import sys
import time

import durably
from durably.core.status import FINAL
from durably.testing import Faults
from tests.chaos.control_app import write

__all__ = ["NAME", "build", "drain"]

NAME = "crash-points"  # the worker's name: restarted under it, it recovers its runs at once


def build(app: durably.App, log: str) -> durably.App:
    @app.step
    async def mark(what: str) -> str:
        write(log, f"{what} {durably.idempotency_key()}")
        return what

    @mark.compensation
    async def unmark(what: str, marked: str | None) -> None:
        write(log, f"undo {durably.idempotency_key()}")

    @app.workflow
    async def timer() -> str:
        await mark("before")
        await durably.sleep("50ms")
        return await mark("after")  # type: ignore[no-any-return]

    @app.workflow
    async def signal() -> str:
        await mark("before")
        payload = await durably.wait_for_signal("go")
        return await mark(f"got-{payload}")  # type: ignore[no-any-return]

    @app.workflow
    async def approval() -> str:
        await mark("before")
        decision = await durably.approval("ship")
        return await mark(f"approved-{decision.approved}")  # type: ignore[no-any-return]

    @app.workflow
    async def cancel() -> str:
        await mark("reserve")
        await durably.sleep("1h")
        return await mark("never")  # type: ignore[no-any-return]

    @app.workflow
    async def renew(generation: int) -> str:
        await mark(f"generation-{generation}")
        if generation < 2:
            durably.continue_as_new(generation + 1)
        return f"done after {generation}"

    return app


def main(url: str, log: str, mode: str, k: int) -> None:
    faults = Faults()
    if mode == "before":
        faults.crash_before_commit(after=k)
    elif mode == "after":
        faults.crash_after_commit(after=k)
    app = build(durably.App(url, hooks=[faults]), log)
    try:
        drain(app)
    finally:
        app.close()


def drain(app: durably.App, seconds: float = 20.0) -> None:
    """Run what is due until every run has ended (a short sleep comes due meanwhile)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        app.run_until_idle(name=NAME)
        if all(run.status in FINAL for run in app.client.runs(limit=100).runs):
            return
        time.sleep(0.02)  # a timer of 50 ms is due soon: real time is what it waits for


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
    os._exit(0)
