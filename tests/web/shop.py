"""The app the web tests serve: an order that charges a payment service (which a test can
make fail, then fix), a refund that waits for a person's approval, and a delivery that waits
for a signal (to be cancelled)."""

from __future__ import annotations

from dataclasses import dataclass, field

import durably
from durably import Retry
from durably.stores import Store


@dataclass
class Payments:
    """The outside world: a payment service that is down until a test fixes it."""

    down: bool = False
    throttling: bool = False
    charged: list[str] = field(default_factory=list)


def make_shop(store: str | Store, payments: Payments, **options: object) -> durably.App:
    app = durably.App(store, **options)  # type: ignore[arg-type]

    @app.step(retry=Retry(attempts=2, initial="10ms", jitter="none"), dependency="payments")
    async def charge(order: str, total: int) -> str:
        if payments.down:
            raise ConnectionError("payments unreachable")
        payments.charged.append(order)
        return f"ch-{order}"

    @app.workflow
    async def checkout(order: str, total: int) -> str:
        return await charge(order, total)  # type: ignore[no-any-return]

    @app.step(retry=Retry(attempts=3, initial="10ms", jitter="none"), dependency="payments")
    async def capture(order: str) -> str:
        if payments.throttling:
            raise durably.Throttled("429 Too Many Requests from payments", retry_after="10ms")
        return f"cap-{order}"

    @app.workflow
    async def settle_order(order: str) -> str:
        return await capture(order)  # type: ignore[no-any-return]

    @app.step
    async def reserve(order: str) -> str:
        return f"hold-{order}"

    @reserve.compensation
    async def release(order: str, hold: str) -> None:
        raise durably.Terminal(f"the warehouse lost {hold}")

    @app.step(retry=Retry(attempts=1))
    async def bill(order: str) -> str:
        raise durably.Terminal("card declined")

    @app.workflow
    async def book(order: str) -> str:
        await reserve(order)
        return await bill(order)  # type: ignore[no-any-return]

    @app.step(retry=Retry(attempts=1))
    def print_label(order: str) -> str:
        return printer.print(order)  # type: ignore[name-defined, no-any-return]  # noqa: F821  (a newcomer's bug)

    @app.workflow
    def ship_label(order: str) -> str:
        return print_label(order)

    @app.workflow
    async def refund(order: str) -> str:
        decision = await durably.approval("refund", timeout="2d", details={"order": order})
        return "refunded" if decision.approved else "kept"

    @app.workflow
    async def deliver(order: str) -> str:
        where: str = await durably.wait_for_signal("address", timeout="7d")
        return f"{order} to {where}"

    return app
