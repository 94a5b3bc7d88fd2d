"""The app of the poison-pill test's worker processes: `tests.chaos.poison_app:app`.

`healthy` runs nap for a moment; a `poison` run's step kills its worker process outright
(`os._exit(137)`, as a segfault or the OOM killer would), every time it runs.
"""

from __future__ import annotations

import os
import time

import durably

__all__ = ["LIMIT", "app", "build_app"]

LIMIT = 3  # the poison workflow's max_recoveries


def build_app(store: str | None = None) -> durably.App:
    """The app on `store` (None: $DURABLY_STORE)."""
    app = durably.App(store)

    @app.step
    def nap(x: int) -> int:
        time.sleep(0.3)
        return x * 2

    @app.step
    def explode(x: int) -> int:
        os._exit(137)

    @app.workflow(max_recoveries=LIMIT)
    def healthy(x: int) -> int:
        result: int = nap(x)
        return result

    @app.workflow(max_recoveries=LIMIT)
    def poison(x: int) -> int:
        result: int = explode(x)
        return result

    return app


app = build_app()
