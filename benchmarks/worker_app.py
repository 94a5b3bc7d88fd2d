"""The app that the benchmarks' `durably worker` processes run, on the store $DURABLY_STORE
(benchmarks.runners.durably_runner.bench_app): its chain's step given x ==
$DURABLY_BENCH_STOP_AT kills the process as a crash would.

    DURABLY_STORE=sqlite:////tmp/x.db durably worker benchmarks.worker_app:app
"""

from __future__ import annotations

import os
import signal

from benchmarks.runners.durably_runner import STOP_AT, bench_app

stop_at = os.environ.get(STOP_AT)
app = bench_app(
    None, None if stop_at is None else int(stop_at), lambda: os.kill(os.getpid(), signal.SIGKILL)
)
