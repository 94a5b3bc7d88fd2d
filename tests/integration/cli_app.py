"""The app the `durably` command loads with --app in test_cli: its store is the URL in
$CLI_APP_STORE (absolute), so that a command run from any directory finds it."""

from __future__ import annotations

import os
from dataclasses import dataclass

import durably
from durably import Retry
from durably.clock import Clock


@dataclass(frozen=True)
class Order:
    id: str
    total: int


def make_app(store: str | None, *, clock: Clock | None = None) -> durably.App:
    app = durably.App(store, clock=clock)

    @app.step(retry=Retry(attempts=1))
    async def charge(order: Order) -> str:
        if order.total < 0:  # a charge that fails for good: the run is parked for a person
            raise ConnectionError("payments refused a negative total")
        return f"ch-{order.id}"

    @app.workflow
    async def fulfil(order: Order) -> str:
        charge_id: str = await charge(order)
        return charge_id

    @app.workflow
    async def count(n: int, *, step: int = 1) -> int:
        return n + step

    @app.workflow
    async def await_approval(order: str) -> str:
        decision = await durably.wait_for_signal("approved")
        return f"{order}: {decision['by']}"

    @app.workflow
    async def await_refund(order: str) -> str:
        decision = await durably.approval("refund", timeout="2d", details={"order": order})
        verdict = "approved" if decision.approved else "rejected"
        return f"{order}: {verdict} by {decision.by} ({decision.comment})"

    return app


app = make_app(os.environ.get("CLI_APP_STORE"))
