"""The app of the network-fault chaos tests: `tests.chaos.network_app:app`, its store
$DURABLY_STORE (the fault proxy's URL). Every step and undo journals "<what> <idempotency
key>" to the journal file it is given: the ledger the test reads.

`parcel(log, n)`: `pack` (undone by `unpack`), a short durable sleep (a timer firing), a wait
for the signal "go" (sent by the test), a child run `label` (a child start) with one step,
then `ship`. Its result is f"shipped {n}".
"""

from __future__ import annotations

import os

import durably
from tests.chaos.control_app import write

__all__ = ["app", "build"]


def build(app: durably.App) -> durably.App:
    @app.step
    async def pack(log: str, n: int) -> int:
        write(log, f"effect {durably.idempotency_key()}")
        return n

    @pack.compensation
    async def unpack(log: str, n: int, packed: int | None) -> None:
        write(log, f"undo {durably.idempotency_key()}")

    @app.step
    async def print_label(log: str, n: int) -> str:
        write(log, f"effect {durably.idempotency_key()}")
        return f"label {n}"

    @app.workflow
    async def label(log: str, n: int) -> str:
        return await print_label(log, n)  # type: ignore[no-any-return]

    @app.step
    async def ship(log: str, n: int) -> str:
        write(log, f"effect {durably.idempotency_key()}")
        return f"shipped {n}"

    @app.workflow
    async def parcel(log: str, n: int) -> str:
        await pack(log, n)
        await durably.sleep("300ms")
        await durably.wait_for_signal("go", timeout="1m")
        await label(log, n)
        return await ship(log, n)  # type: ignore[no-any-return]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")))
