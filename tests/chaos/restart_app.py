"""The app the PostgreSQL restart tests' workers run: `tests.chaos.restart_app:app`.

One workflow of a few short steps folds a seed into a number. The steps do not commute, so a
step skipped, repeated into the result or run out of order shows in the result.
"""

from __future__ import annotations

import asyncio

import durably

__all__ = ["STEPS", "WORKFLOW", "app", "build_app", "expected_result"]

WORKFLOW = "fold"
STEPS = 4
STEP_SECONDS = 0.02  # long enough that a restart lands while runs are in flight


def _fold(value: int, position: int) -> int:
    return (value * 31 + position + 1) % 1_000_003


def expected_result(seed: int) -> int:
    value = seed
    for position in range(STEPS):
        value = _fold(value, position)
    return value


def build_app(store: str | None = None) -> durably.App:
    """The app on `store` (None: $DURABLY_STORE, as a worker process gets it)."""
    app = durably.App(store)

    @app.step
    async def fold_in(value: int, position: int) -> int:
        await asyncio.sleep(STEP_SECONDS)
        return _fold(value, position)

    @app.workflow(name=WORKFLOW)
    async def fold(seed: int) -> int:
        value = seed
        for position in range(STEPS):
            value = await fold_in(value, position)
        return value

    return app


app = build_app()
