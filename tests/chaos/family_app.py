"""The app the child-workflow chaos tests run in real worker processes:
`tests.chaos.family_app:app` (its store is $DURABLY_STORE), or, to die at a commit,

    python -m tests.chaos.family_app STORE_URL crash

which runs what is due and exits like a SIGKILL (137) before its second checkpoint commit:
the one that records the child's start and creates the child.

`family(log)`: a step (`first`), then a child run of `kid` (one step, `kid`), then a step
that lingers a few seconds (`linger`), then the child's result. Steps journal "<what> <key>"
to the log file, so the test sees what ran, and how many times.
"""

from __future__ import annotations

import asyncio
import os
import sys

import durably
from durably.testing import Faults
from tests.chaos.control_app import write

__all__ = ["LINGER_SECONDS", "NAME", "app", "build"]

LINGER_SECONDS = 2.0
NAME = "family-worker"  # a worker restarted under it recovers its runs at once


def build(app: durably.App) -> durably.App:
    @app.step
    async def note(what: str, log: str) -> str:
        write(log, f"{what} {durably.idempotency_key()}")
        return what

    @app.step
    async def linger(log: str) -> None:
        write(log, f"linger {durably.idempotency_key()}")
        await asyncio.sleep(LINGER_SECONDS)

    @app.workflow
    async def kid(log: str) -> str:
        return f"kid says {await note('kid', log)}"

    @app.workflow
    async def family(log: str) -> str:
        await note("first", log)
        child = await durably.start_child(kid, log)
        await linger(log)
        return await child.result()  # type: ignore[no-any-return]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))

if __name__ == "__main__":
    faults = Faults().crash_before_commit(after=1) if sys.argv[2] == "crash" else None
    build(durably.App(sys.argv[1], hooks=[faults])).run_until_idle(name=NAME)
