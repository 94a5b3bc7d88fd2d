"""durably.patched and durably.deprecated_patch on both stores: code changed under running
workflows (keeping the workflow's version) lets a run that got past the change before it
existed finish on the old code, while every other run takes the new code; the choice is
recorded once; a retired patch parks the runs that cannot follow the code any more."""

from __future__ import annotations

import pytest

import durably
from durably import DurablyError, NotInWorkflow, RunStatus
from durably.core.history import EventKind
from durably.testing import FakeClock

VERSION = "2025-06"  # every deploy below keeps it: compatible changes


def deploy(app: durably.App, code: str, ran: list[str]) -> None:
    """`order(id)`: reserve, sleep (an hour), ship, sleep an hour. v2 adds a fraud check after
    the first sleep, behind a patch; v3 retires the patch (the check unconditional)."""

    @app.step
    async def reserve(order: str) -> str:
        ran.append(f"reserve {order}")
        return order

    @app.step
    async def check_fraud(order: str) -> str:
        ran.append(f"check {order}")
        return order

    @app.step
    async def ship(order: str) -> str:
        ran.append(f"ship {order}")
        return f"shipped {order}"

    @app.workflow(name="order", version=VERSION)
    async def order(order_id: str, nap: str = "1h") -> str:
        await reserve(order_id)
        await durably.sleep(nap)
        if code == "v2" and durably.patched("fraud-check"):
            await check_fraud(order_id)
        if code == "v3":
            durably.deprecated_patch("fraud-check")
            await check_fraud(order_id)
        shipped: str = await ship(order_id)
        await durably.sleep("1h")  # the courier's hour: the run waits past the patch's point
        return shipped


def decisions(app: durably.App, run_id: str) -> list[tuple[str | None, str | None]]:
    return [
        (e.name, e.data) for e in app.client.history(run_id) if e.kind is EventKind.PATCH_DECIDED
    ]


def test_a_run_past_the_change_keeps_the_old_code_and_new_runs_take_the_new(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    ran: list[str] = []
    deploy(app, "v1", ran)
    old = app.start("order", "old", id="old")
    app.run_until_idle()
    clock.advance("1h")
    app.run_until_idle()  # shipped; its history goes past the patch's point, and it waits

    deploy(other_app, "v2", ran)
    assert other_app.client.runs(patch="fraud-check").runs == []  # nobody took the new side
    new = other_app.start("order", "new", "0s", id="new")
    other_app.run_until_idle()  # checked and shipped, and it waits too
    assert [run.id for run in other_app.client.runs(patch="fraud-check").runs] == ["old"]

    clock.advance("1h")
    other_app.run_until_idle()
    assert old.result(timeout=0) == "shipped old"
    assert new.result(timeout=0) == "shipped new"
    assert ran == ["reserve old", "ship old", "reserve new", "check new", "ship new"]
    assert decisions(other_app, "new") == [("fraud-check", "true")]
    assert decisions(other_app, "old") == [("fraud-check", "false")]
    assert other_app.client.runs(patch="fraud-check").runs == []  # ended: nothing left


def test_a_run_that_had_not_reached_the_change_takes_the_new_code(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    ran: list[str] = []

    @app.step
    async def first() -> None:
        ran.append("first")

    @app.workflow(name="later", version=VERSION)
    async def later_v1() -> str:
        await durably.sleep("1h")  # recorded; nothing after it yet
        await first()
        return "v1"

    handle = app.start("later", id="l-1")
    app.run_until_idle()

    @other_app.step(name="first")
    async def first_again() -> None:
        ran.append("first")

    @other_app.workflow(name="later", version=VERSION)
    async def later_v2() -> str:
        await durably.sleep("1h")
        await first_again()
        return "v2" if durably.patched("ending") and durably.patched("ending") else "v1"

    clock.advance("1h")
    other_app.run_until_idle()
    assert handle.result(timeout=0) == "v2"
    assert decisions(other_app, "l-1") == [("ending", "true")]  # decided once


def test_a_retired_patch_parks_a_run_still_on_the_old_code(
    app: durably.App, other_app: durably.App, clock: FakeClock, store_url: str
) -> None:
    ran: list[str] = []
    deploy(app, "v1", ran)
    app.start("order", "old", "0s", id="old")
    app.start("order", "young", "2h", id="young")
    app.run_until_idle()  # old shipped and waits past the point; young sleeps before it
    deploy(other_app, "v2", ran)
    clock.advance("30m")
    other_app.start("order", "new", "0s", id="new")
    other_app.run_until_idle()
    clock.advance("31m")
    other_app.run_until_idle()  # old replays to its end on the old side; new ends too
    app.start("order", "older", "0s", id="older")  # v1 again: ships, waits past the point
    app.run_until_idle()
    other_app.run_until_idle()
    # not met yet, so either side may be theirs: listed, to be safe
    assert {run.id for run in other_app.client.runs(patch="fraud-check").runs} == {
        "older",
        "young",
    }

    retired = durably.App(store_url, clock=clock)
    try:
        deploy(retired, "v3", ran)
        clock.advance("2h")
        retired.run_until_idle()
        clock.advance("1h")  # the courier's hour
        retired.run_until_idle()
        older, young = retired.client.get("older"), retired.client.get("young")
        assert older.status is RunStatus.NEEDS_ATTENTION
        assert older.error is not None
        assert "NonDeterminismError" in older.error.error_class
        assert "patch 'fraud-check' is retired" in older.error.message
        assert "got past it before the patch existed" in older.error.message
        assert young.status is RunStatus.COMPLETED  # it reached the point on code with the check
        assert ran.count("check young") == 1
    finally:
        retired.close()


def test_patched_works_in_a_sync_workflow_and_nowhere_else(app: durably.App) -> None:
    @app.workflow
    def plain() -> bool:
        return durably.patched("sync-change")

    handle = app.start(plain)
    app.run_until_idle()
    assert handle.result(timeout=0) is True

    with pytest.raises(NotInWorkflow):
        durably.patched("x")
    with pytest.raises(DurablyError, match="non-empty string"):
        durably.patched("")
