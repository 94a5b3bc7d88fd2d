"""The app of test_suggested_commands: a workflow for each situation a run can be in, so that
every command durably suggests about a run can be run, as printed, against the app's store.
`tests.integration.suggested_app:app` (its store: $SUGGESTED_APP_STORE, absolute, so that a
command run from any directory finds it). Its `order` workflow is at version 2, the deployed
code; the test starts its runs at version 1 (`build(app, order_version="1")`)."""

from __future__ import annotations

import os

import durably
from durably import Retry, Terminal

__all__ = ["build"]


def build(app: durably.App, *, order_version: str = "2") -> durably.App:
    @app.step
    def pack(order: str) -> str:
        return f"packed {order}"

    @app.step(retry=Retry(attempts=1))
    def call_courier(order: str) -> str:
        raise ConnectionError("courier unreachable")

    @app.step
    def reserve(order: str) -> str:
        return f"res-{order}"

    @reserve.compensation
    def unreserve(order: str, reservation: str) -> None:
        raise Terminal(f"the warehouse lost {reservation}")

    @app.step
    def refuse(order: str) -> str:
        raise Terminal("card declined")

    @app.workflow
    def quick(order: str) -> str:
        return pack(order)

    @app.workflow
    def sleeps(order: str) -> str:
        durably.sleep("1d")
        return pack(order)

    @app.workflow
    def waits(order: str) -> str:
        return str(durably.wait_for_signal("go ahead"))  # a name a shell would split

    @app.workflow
    def asks(order: str) -> bool:
        return bool(durably.approval("refund").approved)

    @app.workflow
    def escalates(order: str) -> str:
        return str(durably.escalate(f"the address of {order} is unreadable"))

    @app.workflow
    def parks(order: str) -> str:
        return call_courier(order)

    @app.workflow
    def fails(order: str) -> str:
        return refuse(order)

    @app.workflow
    def undo_fails(order: str) -> str:
        reserve(order)
        return refuse(order)

    @app.workflow(name="order", version=order_version)
    def order(order_id: str) -> str:
        reserve(order_id)
        durably.sleep("1d")
        return pack(order_id)

    return app


if "SUGGESTED_APP_STORE" in os.environ:
    app = build(durably.App(os.environ["SUGGESTED_APP_STORE"]))
