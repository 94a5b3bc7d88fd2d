"""The app a real `durably worker` process serves in test_graceful_stop: one slow step."""

from __future__ import annotations

import asyncio

import durably


def make_app(store: str | None = None) -> durably.App:
    app = durably.App(store)  # None: $DURABLY_STORE, as the worker process gets it

    @app.step
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}s"

    @app.workflow
    async def sleepy(seconds: float) -> str:
        return await slow(seconds)

    return app


app = make_app()
