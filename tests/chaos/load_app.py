"""The app the SQLite load test runs in several real worker processes:
`tests.chaos.load_app:app` (its store is $DURABLY_STORE).

- `chain(seed, log)`: four short steps, each turning the number on (see `expected`);
- `gate(seed, log)`: a step `knock`, then a wait for the signal "go", then a step `enter`
  that returns the signal's payload with the number;
- `doomed(seed, log)`: a step `reserve` (undone by `release`), then a step `hang` that
  waits until the run is cancelled.

Every step, undo and cancelled body appends one line to the journal file `log`:
"<what> <idempotency key> <pid>", so the test sees what ran, how many times, and where.
"""

from __future__ import annotations

import asyncio
import os

import durably
from tests.chaos.control_app import write

__all__ = ["CHAIN", "app", "build", "expected"]

CHAIN = ("add", "double", "subtract", "square")  # chain's steps, in order


def expected(seed: int) -> int:
    """What `chain(seed, ...)` returns."""
    return ((seed + 7) * 2 - 3) ** 2 % 1_000_003


def build(app: durably.App) -> durably.App:
    def note(log: str, what: str) -> None:
        write(log, f"{what} {durably.idempotency_key()} {os.getpid()}")

    @app.step
    async def add(n: int, log: str) -> int:
        note(log, "add")
        return n + 7

    @app.step
    async def double(n: int, log: str) -> int:
        note(log, "double")
        return n * 2

    @app.step
    async def subtract(n: int, log: str) -> int:
        note(log, "subtract")
        return n - 3

    @app.step
    async def square(n: int, log: str) -> int:
        note(log, "square")
        return n * n % 1_000_003

    @app.workflow
    async def chain(seed: int, log: str) -> int:
        n = await add(seed, log)
        n = await double(n, log)
        n = await subtract(n, log)
        return await square(n, log)  # type: ignore[no-any-return]

    @app.step
    async def knock(seed: int, log: str) -> int:
        note(log, "knock")
        return seed

    @app.step
    async def enter(seed: int, word: str, log: str) -> str:
        note(log, "enter")
        return f"{word} {seed}"

    @app.workflow
    async def gate(seed: int, log: str) -> str:
        await knock(seed, log)
        word = await durably.wait_for_signal("go")
        return await enter(seed, word, log)  # type: ignore[no-any-return]

    @app.step
    async def reserve(seed: int, log: str) -> str:
        note(log, "reserve")
        return f"hold-{seed}"

    @reserve.compensation
    async def release(seed: int, log: str, hold: str) -> None:
        note(log, "release")

    @app.step
    async def hang(seed: int, log: str) -> str:
        note(log, "hang")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            note(log, "hang-cancelled")
            raise
        return "never"

    @app.workflow
    async def doomed(seed: int, log: str) -> str:
        await reserve(seed, log)
        return await hang(seed, log)  # type: ignore[no-any-return]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
