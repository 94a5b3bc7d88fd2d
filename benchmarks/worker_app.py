"""The app that the benchmarks' `durably worker` processes run, on the store $DURABLY_STORE:
chain_3 (3 trivial steps), hop, and long_chain, whose step given x ==
$DURABLY_BENCH_STOP_AT kills the process as a crash would.

    DURABLY_STORE=sqlite:////tmp/x.db durably worker benchmarks.worker_app:app
"""

from __future__ import annotations

import os
import signal

from benchmarks.runners.durably_runner import STOP_AT, add_hop, add_long_chain, chain_app

__all__ = ["app"]

app, _ = chain_app(None, 3)
add_hop(app)
stop_at = os.environ.get(STOP_AT)
add_long_chain(
    app,
    stop_at=None if stop_at is None else int(stop_at),
    on_stop=lambda: os.kill(os.getpid(), signal.SIGKILL),
)
