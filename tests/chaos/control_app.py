"""The app the control tests run in real worker processes: `tests.chaos.control_app:app`.

Every workflow takes the path of a journal file, and its steps and undos append a line to it
as they go ("<what> <idempotency key>"), so the test process sees what ran, where, and how
many times. Its store is $DURABLY_STORE.

- `order`: reserve (undone by release), then charge, which waits an hour unless it is
  cancelled (journalled), then ship;
- `slow_undo`: reserve, whose undo is slow and journals when it starts and when it is done,
  then a step that hangs until it is cancelled;
- `two_steps`: a step of a few seconds, then another.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import durably
from durably.runtime.execution import RunExecution
from durably.workflow.context import current_execution

__all__ = ["UNDO_SECONDS", "app", "build", "journal"]

UNDO_SECONDS = 3.0  # how long slow_undo's undo takes: time to kill its worker in the middle
SLOW_SECONDS = 2.0  # how long two_steps' first step takes at least
PAUSE_WAIT = 20.0  # its longest wait for the worker to fold a pause in (see slow)


def write(path: str, line: str) -> None:
    """Append one line (a single write of an O_APPEND file: whole, even if killed)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def journal(path: str | Path) -> list[str]:
    """The lines written so far."""
    path = Path(path)
    return path.read_text().splitlines() if path.exists() else []


def build(app: durably.App) -> durably.App:
    @app.step
    async def reserve(item: str, log: str) -> str:
        write(log, f"reserve {durably.idempotency_key()}")
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, log: str, hold: str) -> None:
        write(log, f"release {durably.idempotency_key()} {hold}")

    @app.step
    async def charge(item: str, log: str) -> str:
        write(log, f"charge {durably.idempotency_key()}")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            write(log, f"charge-cancelled {durably.idempotency_key()}")
            raise
        return "charged"

    @app.step
    async def ship(item: str, log: str) -> str:
        write(log, f"ship {durably.idempotency_key()}")
        return f"shipped {item}"

    @app.workflow
    async def order(item: str, log: str) -> str:
        await reserve(item, log)
        await charge(item, log)
        return await ship(item, log)  # type: ignore[no-any-return]

    @app.step
    async def book(item: str, log: str) -> str:
        write(log, f"book {durably.idempotency_key()}")
        return f"booking-{item}"

    @book.compensation
    async def unbook(item: str, log: str, booking: str) -> None:
        key = durably.idempotency_key()
        write(log, f"unbook-started {key} {booking}")
        await asyncio.sleep(UNDO_SECONDS)
        write(log, f"unbook-done {key} {booking}")

    @app.step
    async def hang(item: str, log: str) -> str:
        write(log, f"hang {durably.idempotency_key()}")
        await asyncio.sleep(3600)
        return "never"

    @app.workflow
    async def slow_undo(item: str, log: str) -> str:
        await book(item, log)
        return await hang(item, log)  # type: ignore[no-any-return]

    @app.step
    async def slow(item: str, log: str) -> str:
        """A step of SLOW_SECONDS, which then waits (PAUSE_WAIT at most) until its worker has
        heard of a pause: the worker reads its runs' inboxes every second, so on a loaded
        machine a pause sent during the step could otherwise reach it only after the step
        ended (and the next had started). Its outcome is the same either way."""
        write(log, f"slow {durably.idempotency_key()}")
        await asyncio.sleep(SLOW_SECONDS)
        execution = current_execution()
        assert isinstance(execution, RunExecution)
        deadline = time.monotonic() + PAUSE_WAIT
        while time.monotonic() < deadline:
            if execution.control.pause is not None:
                break
            await asyncio.sleep(0.05)
        write(log, f"slow-done {durably.idempotency_key()}")
        return f"slow {item}"

    @app.step
    async def after(item: str, log: str) -> str:
        write(log, f"after {durably.idempotency_key()}")
        return f"after {item}"

    @app.workflow
    async def two_steps(item: str, log: str) -> str:
        await slow(item, log)
        return await after(item, log)  # type: ignore[no-any-return]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
