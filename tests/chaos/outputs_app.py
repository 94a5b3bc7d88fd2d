"""The app the stream crash tests run in real worker processes: `tests.chaos.outputs_app:app`
(its store is $DURABLY_STORE).

`numbers(count)` says it began (an event), then one step writes the numbers 0..count-1 to the
stream "numbers" as an LLM step writes tokens: a little at a time, so that a SIGKILL lands in
the middle. A retried attempt writes them all again, from 0: the store keeps each place's
first item, so readers see each number once. The workflow then says it is done and closes
the stream.
"""

from __future__ import annotations

import asyncio
import os

import durably

__all__ = ["STREAM", "app", "build"]

STREAM = "numbers"


def build(app: durably.App) -> durably.App:
    @app.step
    async def count_out(count: int) -> int:
        for n in range(count):
            durably.write_stream(STREAM, n)
            if n % 20 == 19:
                await asyncio.sleep(0.005)  # the model thinks: the items go to the store
        return count

    @app.workflow
    async def numbers(count: int) -> int:
        durably.set_event("phase", "writing")
        written = await count_out(count)
        durably.set_event("phase", "done")
        durably.close_stream(STREAM)
        return written  # type: ignore[no-any-return]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
