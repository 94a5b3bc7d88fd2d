"""The app that the scaling benchmark's `durably worker` processes run (benchmarks.scaling):
core's chain_3 and long_chain, on the store $DURABLY_STORE names. $DURABLY_BENCH_STOP_AT, if
set, is the long_chain step input at which the process kills itself.

    DURABLY_STORE=sqlite:////tmp/x.db durably worker benchmarks.scaling_app:app
"""

from __future__ import annotations

import os

from benchmarks.scaling import STOP_AT, worker_app

__all__ = ["app"]

_stop_at = os.environ.get(STOP_AT)
app = worker_app(os.environ["DURABLY_STORE"], stop_at=None if _stop_at is None else int(_stop_at))
