"""The order workflow. Workers load it as `durably.demo.workflows:app`."""

from __future__ import annotations

from dataclasses import dataclass

import durably
from durably import Retry
from durably.demo.services import from_environment
from durably.resilience import Breaker, Dependency

app = durably.App(default_retry=Retry(attempts=4, initial="100ms", max_delay="1s"))
services = from_environment()
for _service in ("payments", "warehouse", "carrier", "mailer"):
    # one breaker per service, shared by every worker; tuned for a demo that lasts seconds
    app.dependency(
        _service, Dependency(breaker=Breaker(threshold=25, window="2s", cooldown="500ms"))
    )


@dataclass(frozen=True)
class Order:
    id: str
    total: int  # cents
    email: str


@dataclass(frozen=True)
class Receipt:
    order_id: str
    charge_id: str
    label: str


@app.step(dependency="payments", timeout="500ms", retry=Retry(attempts=5, initial="100ms"))
async def charge(order: Order) -> str:
    return await services.charge(order.id, order.total, durably.idempotency_key())


@charge.reconcile
def find_charge(order: Order) -> str | None:
    """After a timeout or a crash: did the charge go through anyway?"""
    return services.find_charge(order.id)


@charge.compensation
def refund(order: Order, charge_id: str) -> None:
    services.refund(order.id, charge_id)


@app.step(dependency="warehouse")
async def reserve_stock(order: Order) -> str:
    return await services.reserve(order.id, durably.idempotency_key())


@app.step(dependency="carrier")
async def create_label(order: Order) -> str:
    return await services.label(order.id, durably.idempotency_key())


@app.step(dependency="mailer")
async def send_email(order: Order, label: str) -> None:
    await services.email(order.id, durably.idempotency_key(), label)


@app.workflow
async def fulfil(order: Order) -> Receipt:
    charge_id = await charge(order)
    await reserve_stock(order)  # out of stock: terminal, the charge is refunded
    label = await create_label(order)
    await send_email(order, label)
    return Receipt(order.id, charge_id, label)
