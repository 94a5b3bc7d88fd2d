"""The order workflow. Workers load it as `examples.orders.workflows:app`."""

from __future__ import annotations

from dataclasses import dataclass

import durably
from examples.orders.services import from_environment

app = durably.App()  # $DURABLY_STORE, or ./durably.db
services = from_environment()


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


@app.step
async def charge(order: Order) -> str:
    key = durably.idempotency_key()
    return await services.call("payments", order.id, key, f"ch_{order.id}")


@app.step
async def reserve_stock(order: Order) -> str:
    key = durably.idempotency_key()
    return await services.call("warehouse", order.id, key, f"res_{order.id}")


@app.step
async def create_label(order: Order) -> str:
    key = durably.idempotency_key()
    return await services.call("carrier", order.id, key, f"lbl_{order.id}")


@app.step
async def send_email(order: Order, label: str) -> None:
    key = durably.idempotency_key()
    await services.call("mailer", order.id, key, f"mail_{order.id}_{label}")


@app.workflow
async def fulfil(order: Order) -> Receipt:
    charge_id = await charge(order)
    await reserve_stock(order)
    label = await create_label(order)
    await send_email(order, label)
    return Receipt(order.id, charge_id, label)
