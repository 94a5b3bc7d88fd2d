"""The app of the upgrade tests, in three deploys chosen by $UPGRADE_CODE: `first`, the code
runs start on; `edited`, the same behaviour written differently (a new default version);
`diverging`, a fraud check added before the shipment (its runs in flight no longer replay).
`tests.integration.upgrade_app:app` (its store: $UPGRADE_STORE, else $DURABLY_STORE).

`order(id)`: reserve, wait an hour, then ship. Steps record their calls in `calls`."""

from __future__ import annotations

import os

import durably

__all__ = ["build", "calls"]

calls: list[str] = []


def build(app: durably.App, code: str) -> durably.App:
    @app.step
    async def reserve(order: str) -> str:
        calls.append(f"reserve {order}")
        return f"res-{order}"

    @app.step
    async def check_fraud(order: str) -> bool:
        calls.append(f"check {order}")
        return True

    @app.step
    async def ship(order: str) -> str:
        calls.append(f"ship {order}")
        return f"shipped {order}"

    async def first(order_id: str) -> str:
        await reserve(order_id)
        await durably.sleep("1h")
        return await ship(order_id)  # type: ignore[no-any-return]

    async def edited(order_id: str) -> str:
        await reserve(order_id)
        await durably.sleep("1h")  # the same calls, in the same order
        label: str = await ship(order_id)
        return label

    async def diverging(order_id: str) -> str:
        await check_fraud(order_id)
        await reserve(order_id)
        await durably.sleep("1h")
        return await ship(order_id)  # type: ignore[no-any-return]

    bodies = {"first": first, "edited": edited, "diverging": diverging}
    app.workflow(name="order")(bodies[code])
    return app


if "UPGRADE_CODE" in os.environ:  # its store: $UPGRADE_STORE, else $DURABLY_STORE
    app = build(durably.App(os.environ.get("UPGRADE_STORE")), os.environ["UPGRADE_CODE"])
