"""The app the debounce chaos test runs in a real `durably worker` process:
`tests.chaos.debounce_app:app` (its store is $DURABLY_STORE).

`reindex(n, log)`: a step that appends "reindex <n>" to the journal file `log`, the side
effect outside the engine whose count the test checks.
"""

from __future__ import annotations

import os

import durably
from tests.chaos.control_app import write

__all__ = ["app", "build"]


def build(app: durably.App) -> durably.App:
    @app.step
    async def rebuild(n: int, log: str) -> int:
        write(log, f"reindex {n}")
        return n

    @app.workflow
    async def reindex(n: int, log: str) -> int:
        return await rebuild(n, log)

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
