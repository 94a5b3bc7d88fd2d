"""The app of the deploy acceptance test, in three deploys chosen by $DEPLOY (v1, v2, v3), all
keeping the workflow's version so that each deploy's workers take the runs of the last:
`tests.chaos.deploy_app:app` (its store is $DURABLY_STORE).

`order(id, journal)`: reserve, then wait for the signal "go", then ship. v2 adds a fraud check
between the reservation and the wait, behind `durably.patched("fraud-check")`; v3 adds it
without the patch (an incompatible change). Steps journal "<step> <order>".
"""

from __future__ import annotations

import os

import durably
from tests.chaos.control_app import write

__all__ = ["VERSION", "app", "build"]

VERSION = "orders-1"


def build(app: durably.App, deploy: str) -> durably.App:
    @app.step
    async def reserve(order: str, log: str) -> str:
        write(log, f"reserve {order}")
        return order

    @app.step
    async def check_fraud(order: str, log: str) -> str:
        write(log, f"check {order}")
        return order

    @app.step
    async def ship(order: str, log: str) -> str:
        write(log, f"ship {order}")
        return f"shipped {order}"

    @app.workflow(version=VERSION)
    async def order(order_id: str, log: str) -> str:
        await reserve(order_id, log)
        if deploy == "v3" or (deploy == "v2" and durably.patched("fraud-check")):
            await check_fraud(order_id, log)
        await durably.wait_for_signal("go")
        return await ship(order_id, log)  # type: ignore[no-any-return]

    return app


app = build(durably.App(os.environ.get("DURABLY_STORE")), os.environ.get("DEPLOY", "v1"))
