"""The app the wait tests run in real worker processes: a workflow that sleeps, and one that
takes signals one by one, each followed by a step. Its store is $DURABLY_STORE."""

from __future__ import annotations

import os

import durably


def build(app: durably.App) -> durably.App:
    @app.step
    async def note(item: int) -> int:
        return item

    @app.workflow
    async def nap(seconds: float) -> str:
        await durably.sleep(seconds)
        return "woke"

    @app.workflow
    async def collect(count: int) -> list[int]:
        items = []
        for _ in range(count):
            item = await durably.wait_for_signal("item")
            items.append(await note(item))
        return items

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
