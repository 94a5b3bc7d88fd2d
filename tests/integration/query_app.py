"""The app of the query tests: an order that prices its items one step each, may hold in a
step until a file appears (a step in flight that the test controls), then waits for approval.
Its queries read the order's state: `total()`, `lines(first=0)`. A real `durably worker`
process serves it in test_queries_worker; the CLI and the API load it with --app."""

from __future__ import annotations

import time
from pathlib import Path

import durably

RAN: list[str] = []  # the step bodies this process ran (a query must add none)


def define(
    app: durably.App,
    ran: list[str],
    *,
    version: str = "1",
    versions: tuple[str, ...] = (),
    queries: bool = True,
) -> None:
    """Register the order workflow and its steps on `app`; each step body appends to `ran`.
    `queries=False`: the same code without its query handlers (as deployed before them)."""

    @app.step
    async def price(item: dict[str, int]) -> int:
        ran.append(f"price {item['sku']}")
        return item["price"]

    @app.step
    def hold(gate: str) -> str:
        """Until the file `gate` exists: a step in flight for as long as the test wants."""
        ran.append("hold")
        deadline = time.monotonic() + 60
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "held"

    @app.workflow(name="order", version=version, versions=versions)
    async def order(items: list[dict[str, int]], gate: str = "") -> dict[str, int]:
        priced: list[int] = []

        if queries:

            @durably.query
            def total() -> int:
                return sum(priced)

            @durably.query("lines")
            def lines(first: int = 0) -> list[int]:
                return priced[first:]

        for item in items:
            priced.append(await price(item))
        if gate:
            await hold(gate)
            priced.append(await price({"sku": 99, "price": 1000}))
        while True:  # items added until the signal "add" brings none: the order is approved
            added = await durably.wait_for_signal("add")
            if added is None:
                return {"total": sum(priced)}
            priced.append(await price(added))


app = durably.App()  # the store: --store, or $DURABLY_STORE (a worker process's)
define(app, RAN)
