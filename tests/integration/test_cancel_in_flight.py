"""A cancel reaches a run while a step is in flight (in a worker thread of this process, on
both stores): an async step body is cancelled, in a gather every branch, in a sync workflow
too; a sync one may look at durably.cancelled() and stop early; a reconcile hook in flight is
let finish and no attempt follows it. The completed steps, and those cut off in flight, are
undone once, in reverse order, and the run ends `cancelled`."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import durably
from durably import RunStatus, Steered
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import CompensationStarted, StepFailed
from durably.errors import NotInWorkflow, WorkflowFailed
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, dead_worker, events, kinds
from .steering import (
    WAIT,
    Held,
    assert_cancelled,
    join,
    step_started,
    undo_events,
    worker_thread,
)


def test_a_cancel_stops_the_async_step_in_flight_and_undoes_the_completed_ones(
    app: durably.App, reserve: durably.Step, undone: list[str]
) -> None:
    charging = threading.Event()
    seen: list[str] = []

    @app.step
    async def charge(item: str) -> str:
        charging.set()
        try:
            await asyncio.Event().wait()  # the payment service never answers
        except asyncio.CancelledError:
            seen.append("cancelled")  # the cancel lands inside the step
            raise
        return "charged"

    @charge.compensation
    async def refund(item: str, charged: str | None) -> None:
        undone.append(f"refund {charged}")  # cut off in flight: it may have charged

    @app.step
    async def ship(item: str) -> str:
        return "shipped"

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        await charge(item)
        return await ship(item)  # type: ignore[no-any-return]

    handle = app.start("order", "lamp", id="c-1")
    worker = worker_thread(app)
    assert charging.wait(WAIT)
    steered = app.client.cancel("c-1", reason="customer left", by="ops")
    assert isinstance(steered, Steered)
    assert (steered.run_id, steered.action, steered.changed) == ("c-1", "cancel", True)
    assert steered.status is RunStatus.RUNNING
    assert "async step in flight is cancelled" in steered.note
    join(worker)

    assert seen == ["cancelled"]
    # charge was cut off in flight, so it may have taken effect: its undo runs too (first,
    # with no result); then reserve's, once, with its recorded result
    assert undone == ["refund None", "hold-lamp"]
    assert_cancelled(app, "c-1", "ops", "customer left")
    [failed] = events(app, "c-1", EventKind.STEP_FAILED)
    assert (failed.position, failed.name) == (1, "charge")
    payload = read_payload(failed, StepFailed)
    assert (payload.reason, payload.unknown) == ("cancelled", True)
    assert payload.error.error_class == "durably.errors.RunCancelled"
    assert undo_events(app, "c-1") == [
        ("compensation_started", 1, "charge"),
        ("compensation_completed", 1, "charge"),
        ("compensation_started", 0, "reserve"),
        ("compensation_completed", 0, "reserve"),
    ]
    undos = events(app, "c-1", EventKind.COMPENSATION_STARTED)
    assert [read_payload(undo, CompensationStarted).key for undo in undos] == [
        "c-1:1:charge:undo",
        "c-1:0:reserve:undo",
    ]
    assert not step_started(app, "c-1", "ship")
    history = kinds(app.client.history("c-1"))
    assert history.index("step_failed") < history.index("compensating") < len(history) - 1
    with pytest.raises(WorkflowFailed, match=r"cancelled.*RunCancelled: cancelled by ops"):
        handle.result(timeout=0)


def test_a_sync_step_that_looks_at_cancelled_stops_early_and_is_undone_too(
    app: durably.App, reserve: durably.Step, undone: list[Any]
) -> None:
    entered = threading.Event()

    @app.step
    def export(rows: int) -> int:
        """Exports `rows` rows, one at a time; stops early if the run is cancelled."""
        assert not durably.cancelled()
        entered.set()
        done = 0
        deadline = time.monotonic() + WAIT
        while done < rows and time.monotonic() < deadline:
            if durably.cancelled():
                break
            time.sleep(0.01)  # a row's work, in real time: the cancel comes in meanwhile
            done += 1
        return done

    @export.compensation
    def delete_export(rows: int, done: int) -> None:
        undone.append(("delete", done))

    @app.step
    async def publish(item: str) -> str:
        return "published"

    @app.workflow
    async def nightly(item: str) -> str:
        await reserve(item)
        await export(1_000_000)
        return await publish(item)  # type: ignore[no-any-return]

    app.start("nightly", "report", id="s-1")
    worker = worker_thread(app)
    assert entered.wait(WAIT)
    steered = app.client.cancel("s-1", by="ops")
    assert steered.changed
    join(worker)

    assert_cancelled(app, "s-1", "ops", None)
    [completed] = [e for e in events(app, "s-1", EventKind.STEP_COMPLETED) if e.name == "export"]
    done = int(completed.data or "0")
    assert 0 < done < 1_000_000  # it stopped early, and its result was recorded
    assert events(app, "s-1", EventKind.STEP_FAILED) == []  # it was not interrupted
    # it completed, so it is undone too, first (reverse order), with its recorded result
    assert undone == [("delete", done), "hold-report"]
    assert undo_events(app, "s-1") == [
        ("compensation_started", 1, "export"),
        ("compensation_completed", 1, "export"),
        ("compensation_started", 0, "reserve"),
        ("compensation_completed", 0, "reserve"),
    ]
    assert not step_started(app, "s-1", "publish")


def test_cancelled_outside_a_run_is_refused() -> None:
    with pytest.raises(NotInWorkflow, match="outside a run"):
        durably.cancelled()


def test_a_cancel_stops_every_branch_of_a_gather_in_flight(
    app: durably.App, reserve: durably.Step, undone: list[str]
) -> None:
    fetching = threading.Semaphore(0)  # released once by each branch under way
    seen: list[str] = []

    @app.step
    async def fetch(part: str) -> str:
        fetching.release()
        try:
            await asyncio.Event().wait()  # the supplier never answers
        except asyncio.CancelledError:
            seen.append(part)
            raise
        return part

    @app.workflow
    async def assemble(item: str) -> list[str]:
        await reserve(item)
        parts: list[str] = await durably.gather(fetch("a"), fetch("b"), fetch("c"))
        return parts

    app.start("assemble", "lamp", id="g-1")
    worker = worker_thread(app)
    for _ in range(3):
        assert fetching.acquire(timeout=WAIT), "a branch did not start"
    assert app.client.cancel("g-1", by="ops").changed
    join(worker)

    assert sorted(seen) == ["a", "b", "c"]
    assert_cancelled(app, "g-1", "ops", None)
    failed = events(app, "g-1", EventKind.STEP_FAILED)
    assert sorted(e.position or 0 for e in failed) == [1, 2, 3]
    assert {read_payload(e, StepFailed).reason for e in failed} == {"cancelled"}
    assert undone == ["hold-lamp"]


def test_a_cancel_stops_an_async_step_of_a_sync_workflow(app: durably.App) -> None:
    undone: list[str] = []
    charging = threading.Event()
    seen: list[str] = []

    @app.step
    def reserve(item: str) -> str:
        return f"hold-{item}"

    @reserve.compensation
    def release(item: str, hold: str) -> None:
        undone.append(hold)

    @app.step
    async def charge(item: str) -> str:
        charging.set()
        try:
            await asyncio.Event().wait()  # the payment service never answers
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "charged"

    @app.workflow
    def order(item: str) -> str:
        reserve(item)
        return charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="y-1")
    worker = worker_thread(app)
    assert charging.wait(WAIT)
    assert app.client.cancel("y-1", by="ops").changed
    join(worker)
    assert seen == ["cancelled"]
    assert_cancelled(app, "y-1", "ops", None)
    assert undone == ["hold-lamp"]


# -- found while writing these tests (an engine bug, fixed) -----------------------------------


def test_a_cancel_during_a_reconcile_stops_the_attempt_that_follows(
    app: durably.App, clock: FakeClock, held: Held
) -> None:
    seen: list[str] = []

    @app.step
    async def charge(item: str) -> str:
        seen.append("started")  # with the bug, the attempt after the reconcile starts
        return "charged"

    @charge.reconcile
    async def find_charge(item: str) -> str | None:
        await asyncio.to_thread(held.hold)  # in flight until the worker took the cancel in
        return None  # not found: the body would run again

    @app.workflow
    async def order(item: str) -> str:
        return await charge(item)  # type: ignore[no-any-return]

    app.start("order", "lamp", id="rc-1")
    dead_worker(app.store, clock, "order", [], unknown="charge")  # its attempt is unknown
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    worker = worker_thread(app)
    assert held.entered.wait(WAIT)
    assert app.client.cancel("rc-1", by="ops").changed
    held.go_once_taken_in("cancel")
    join(worker)
    assert_cancelled(app, "rc-1", "ops", None)
    assert seen == []  # the attempt after the reconcile never started: the run was cancelled
