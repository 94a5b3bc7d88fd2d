"""The app of test_group_commit's crash: a worker process that dies with a batch of
checkpoints assembled and not yet committed.

    python -m tests.chaos.commit_crash_app STORE_URL ACKED_FILE CRASH(0|1)

Step k of run R appends "R k-1" to ACKED_FILE when it starts: by then the checkpoint of
step k-1 was acknowledged to the run (the run moves on only once its checkpoint is durable).
"""

from __future__ import annotations

import os
import sys

import durably
from durably.testing import Faults

STEPS = 5


def make_app(url: str, acked: str, *, crash: bool) -> durably.App:
    faults = Faults().crash_before_commit(min_batch=4, after=3) if crash else None
    app = durably.App(url, hooks=[faults])

    @app.step
    async def advance(run: str, k: int, total: int) -> int:
        if k > 0:
            line = f"{run} {k - 1}\n".encode()
            fd = os.open(acked, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                os.write(fd, line)  # in the kernel at once: survives the process's death
            finally:
                os.close(fd)
        return total + k

    @app.workflow
    async def counting(run: str) -> int:
        total = 0
        for k in range(STEPS):
            total = await advance(run, k, total)
        return total

    return app


if __name__ == "__main__":
    url, acked, crash = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    make_app(url, acked, crash=crash).run_until_idle(concurrency=16)
