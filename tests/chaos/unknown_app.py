"""The app of the unknown-at-cancel chaos tests: `tests.chaos.unknown_app:app`, its store
$DURABLY_STORE. Every step and undo journals "<what> <idempotency key> [<value>]" to the
journal file it is given, before it returns: the ledger the test reads, which the engine
never touches.

- `order(log)`: `reserve` (undone by `release`), then `charge` (undone by `refund`), which
  journals its effect and then hangs: a worker killed then leaves its outcome unknown.
- `storm(log, pause)`: `book` then `pay`, each undone, each journalling its effect and then
  working for `pause` seconds: kills and cancels land anywhere among them.
"""

from __future__ import annotations

import asyncio
import os

import durably
from tests.chaos.control_app import write

__all__ = ["app", "build"]


def build(app: durably.App) -> durably.App:
    @app.step
    async def reserve(log: str) -> str:
        write(log, f"reserve {durably.idempotency_key()}")
        return "hold-1"

    @reserve.compensation
    async def release(log: str, hold: str) -> None:
        write(log, f"release {durably.idempotency_key()} {hold}")

    @app.step
    async def charge(log: str) -> str:
        write(log, f"charge {durably.idempotency_key()}")
        await asyncio.sleep(3600)  # the service never answers: killed here
        return "ch-1"

    @charge.compensation
    async def refund(log: str, charge_id: str | None) -> None:
        write(log, f"refund {durably.idempotency_key()} {charge_id}")

    @app.workflow
    async def order(log: str) -> str:
        await reserve(log)
        return await charge(log)  # type: ignore[no-any-return]

    @app.step
    async def book(log: str, pause: float) -> str:
        write(log, f"effect {durably.idempotency_key()}")
        await asyncio.sleep(pause)
        return "booked"

    @book.compensation
    async def unbook(log: str, pause: float, booked: str | None) -> None:
        write(log, f"undo {durably.idempotency_key()}")

    @app.step
    async def pay(log: str, pause: float) -> str:
        write(log, f"effect {durably.idempotency_key()}")
        await asyncio.sleep(pause)
        return "paid"

    @pay.compensation
    async def repay(log: str, pause: float, paid: str | None) -> None:
        write(log, f"undo {durably.idempotency_key()}")

    @app.workflow
    async def storm(log: str, pause: float) -> str:
        await book(log, pause)
        await pay(log, pause)
        return "done"

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
