"""Timeouts: an attempt that runs past its timeout is unknown and retried; a workflow that
passes its deadline is compensated and ends `timed_out`.

Per-attempt timeouts and deadlines shorter than the test are real time (that is the point of
them), kept to tenths of a second. A body that hangs waits for an event nobody sets (the test
sets `release` as it ends): were it not cut off, the drain would never end, and the test's
timeout would fail it; nothing here waits on the clock for something to happen.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.history import EventKind
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .conftest import data, events, keys_started, let_abandoned_threads_end, settle, step_events

QUICK_RETRY = Retry(attempts=3, initial="1s", jitter="none")
WAIT = 30.0  # seconds: generous, for a loaded machine; nothing here is timed


def test_an_async_step_past_its_timeout_is_unknown_and_retried(
    app: durably.App, clock: FakeClock
) -> None:
    calls: list[str] = []

    @app.step(timeout="100ms", retry=QUICK_RETRY)
    async def fetch(x: int) -> int:
        calls.append(durably.idempotency_key())
        if len(calls) == 1:
            await asyncio.Event().wait()  # the service hangs
        return x + 1

    @app.workflow
    async def flow(x: int) -> int:
        result: int = await fetch(x)
        return result

    handle = app.start(flow, 1, id="flow-1")
    assert app.run_until_idle() == 0  # abandoned after its timeout

    [failed] = events(app, handle.id, EventKind.STEP_ATTEMPT_FAILED)
    detail = data(failed)
    assert detail["error_class"] == "durably.errors.StepTimeout"
    assert "timeout" in detail["message"]
    assert detail["unknown"] is True  # it may have happened: the next attempt reconciles
    assert app.client.get(handle.id).status is RunStatus.PENDING

    settle(app, clock)
    assert handle.result(timeout=0) == 2
    key = step_key("flow-1", 0, "fetch")
    assert calls == [key, key]
    assert keys_started(app.client.history(handle.id)) == [key, key]
    assert step_events(app.client.history(handle.id)) == [
        ("step_started", 0, "fetch", 1),
        ("attempt_failed", 0, "fetch", 1),
        ("step_started", 0, "fetch", 2),  # no reconcile hook: the body runs again
        ("step_completed", 0, "fetch", 2),
    ]


def test_a_hung_sync_step_is_abandoned_and_recorded_timed_out(
    app: durably.App, clock: FakeClock, release: threading.Event
) -> None:
    calls: list[str] = []

    @app.step(timeout="100ms", retry=QUICK_RETRY)
    def lookup(x: int) -> int:
        calls.append(durably.idempotency_key())  # the step's context reaches its thread
        if len(calls) == 1:
            release.wait()  # a blocking call that never returns (until the test ends)
        return x * 3

    @app.workflow
    async def flow(x: int) -> int:
        result: int = await lookup(x)
        return result

    handle = app.start(flow, 2, id="flow-2")
    assert app.run_until_idle() == 0  # the drain did not wait for the abandoned thread

    [failed] = events(app, handle.id, EventKind.STEP_ATTEMPT_FAILED)
    assert data(failed)["error_class"] == "durably.errors.StepTimeout"
    assert data(failed)["unknown"] is True

    settle(app, clock)
    assert handle.result(timeout=0) == 6
    assert calls == [step_key("flow-2", 0, "lookup")] * 2


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_hung_step_does_not_block_other_runs_on_the_same_worker(
    app: durably.App, clock: FakeClock, release: threading.Event, sync: bool
) -> None:
    hanging = threading.Event()  # set while the hung attempt is in flight
    seen_while_hanging: list[bool] = []

    def stuck_sync() -> str:
        hanging.set()
        try:
            release.wait()  # until the test ends
        finally:
            hanging.clear()
        return "late"

    async def stuck_async() -> str:
        hanging.set()
        try:
            await asyncio.Event().wait()
        finally:
            hanging.clear()
        return "late"

    stuck = app.step(name="stuck", timeout="200ms", retry=QUICK_RETRY)(
        stuck_sync if sync else stuck_async
    )

    @app.workflow
    async def slow_flow() -> str:
        result: str = await stuck()
        return result

    @app.step
    async def hop(x: int) -> int:
        if x == 0:  # let the hung run go first
            await asyncio.to_thread(hanging.wait, WAIT)
        seen_while_hanging.append(hanging.is_set())
        return x + 1

    @app.workflow
    async def fast_flow() -> int:
        x = 0
        for _ in range(3):
            x = await hop(x)
        return x

    stuck_run = app.start(slow_flow)
    fast_run = app.start(fast_flow)
    assert app.run_until_idle() == 1  # the fast run ended in the same drain, which did not
    # wait for the abandoned attempt either

    assert fast_run.result(timeout=0) == 3
    assert len(seen_while_hanging) == 3
    assert seen_while_hanging[0]  # it went on while the other run hung
    assert stuck_run.status() is RunStatus.PENDING
    [failed] = events(app, stuck_run.id, EventKind.STEP_ATTEMPT_FAILED)
    assert data(failed)["unknown"] is True


def order_with_deadline(
    app: durably.App, undone: list[str], charges: list[int], *, deadline: str, sync: bool
) -> durably.Workflow:
    """reserve (undone by release), then charge, which the service keeps failing; the
    workflow is a plain `def` if `sync`."""

    @app.step
    async def reserve(x: int) -> str:
        return f"reservation-{x}"

    @reserve.compensation
    async def release_it(x: int, reservation: str) -> None:
        undone.append(reservation)

    @app.step(retry=Retry(attempts=10, initial="2h", max_delay="3h", jitter="none"))
    async def charge(x: int) -> str:
        charges.append(x)
        raise ConnectionError("payment service down")

    async def order_async(x: int) -> str:
        await reserve(x)
        result: str = await charge(x)
        return result

    def order_sync(x: int) -> str:
        reserve(x)
        result: str = charge(x)
        return result

    return app.workflow(name="order", deadline=deadline)(order_sync if sync else order_async)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_passed_deadline_compensates_and_ends_timed_out(
    app: durably.App, clock: FakeClock, sync: bool
) -> None:
    undone: list[str] = []
    charges: list[int] = []
    workflow = order_with_deadline(app, undone, charges, deadline="1h", sync=sync)
    handle = app.start(workflow, 9)
    start = clock.now()

    app.run_until_idle()
    run = app.client.get(handle.id)
    assert run.status is RunStatus.PENDING
    assert run.available_at == start + timedelta(hours=1)  # the wait ends at the deadline
    clock.advance("59m")
    assert app.run_until_idle() == 0
    assert undone == []

    clock.advance("1m")
    ended = app.run_until_idle()
    let_abandoned_threads_end()
    assert ended == 1
    assert charges == [9]  # no new attempt after the deadline
    assert undone == ["reservation-9"]
    run = app.client.get(handle.id)
    assert run.status is RunStatus.TIMED_OUT
    assert run.error is not None
    assert run.error.error_class == "durably.errors.DeadlineExceeded"
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.status == "timed_out"
    [compensating] = events(app, handle.id, EventKind.COMPENSATING)
    assert data(compensating)["then"] == "timed_out"
    assert [e.kind for e in app.client.history(handle.id)][-3:] == [
        EventKind.COMPENSATION_STARTED,
        EventKind.COMPENSATION_COMPLETED,
        EventKind.RUN_FAILED,
    ]
    assert app.client.dead_letters() == []


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_run_first_claimed_after_its_deadline_runs_no_step(
    app: durably.App, clock: FakeClock, sync: bool
) -> None:
    undone: list[str] = []
    charges: list[int] = []
    workflow = order_with_deadline(app, undone, charges, deadline="1h", sync=sync)
    handle = app.start(workflow, 3)
    clock.advance("2h")  # every worker was down for two hours

    ended = app.run_until_idle()
    let_abandoned_threads_end()
    assert ended == 1
    assert (charges, undone) == ([], [])
    assert handle.status() is RunStatus.TIMED_OUT
    assert events(app, handle.id, EventKind.STEP_STARTED) == []


def test_a_deadline_that_passes_while_a_step_is_in_flight_stops_the_run(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []

    @app.step
    async def reserve(x: int) -> str:
        return f"reservation-{x}"

    @reserve.compensation
    async def release_it(x: int, reservation: str) -> None:
        undone.append(reservation)

    @app.step
    async def wait_for_stock(x: int) -> str:
        await asyncio.Event().wait()  # the stock never comes
        return "in stock"

    @app.workflow(deadline="200ms")
    async def order(x: int) -> str:
        await reserve(x)
        result: str = await wait_for_stock(x)
        return result

    handle = app.start(order, 4)
    assert app.run_until_idle() == 1  # cut off at the deadline

    assert undone == ["reservation-4"]
    run = app.client.get(handle.id)
    assert run.status is RunStatus.TIMED_OUT
    assert run.error is not None
    assert run.error.error_class == "durably.errors.DeadlineExceeded"


def test_a_sync_workflow_past_its_deadline_starts_no_further_step(
    app: durably.App, clock: FakeClock
) -> None:
    """The deadline passes while a sync workflow's thread waits for a step. The run goes on
    to compensate; the abandoned thread must not start the next step behind its back."""
    log: list[str] = []
    undoing = threading.Event()
    workflow_threads: list[threading.Thread] = []

    @app.step
    def reserve() -> str:
        log.append("reserve")
        return "reservation"

    @reserve.compensation
    async def release(reservation: str) -> None:
        log.append("release")
        undoing.set()
        # the undo takes until the abandoned thread has gone on from slow_check, and ended
        [thread] = workflow_threads
        await asyncio.to_thread(thread.join, WAIT)

    @app.step
    def slow_check() -> str:
        assert undoing.wait(WAIT)  # still running when the deadline passes
        return "checked"

    @app.step
    def charge() -> str:
        log.append("charge")  # a side effect the run has given up on
        return "charged"

    @app.workflow(deadline="150ms")
    def order() -> str:
        workflow_threads.append(threading.current_thread())
        reserve()
        slow_check()
        result: str = charge()
        return result

    handle = app.start(order)
    app.run_until_idle()
    let_abandoned_threads_end()

    assert handle.status() is RunStatus.TIMED_OUT
    assert "charge" not in log, log
    history = app.client.history(handle.id)
    [compensating] = [e for e in history if e.kind is EventKind.COMPENSATING]
    after = history[history.index(compensating) :]
    assert [e for e in after if e.kind is EventKind.STEP_STARTED] == []
