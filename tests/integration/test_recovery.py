"""Recovery after a worker dies, and the lease fencing that keeps a zombie worker harmless."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta

import pytest

import durably
from durably.core.history import Event, EventKind
from durably.stores import Checkpoint, Store
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .conftest import DEAD_LEASE, dead_worker, kinds, started_key, step_events

LEASE = timedelta(seconds=30)


def register_three_steps(app: durably.App, calls: list[tuple[str, int, str]]) -> None:
    """`pipeline(x)`: three steps; each body appends (name, argument, idempotency key)."""

    @app.step
    async def fetch(x: int) -> int:
        calls.append(("fetch", x, durably.idempotency_key()))
        return x + 1

    @app.step
    def transform(x: int) -> int:
        calls.append(("transform", x, durably.idempotency_key()))
        return x * 10

    @app.step
    async def store_it(x: int) -> str:
        calls.append(("store_it", x, durably.idempotency_key()))
        return f"stored {x}"

    @app.workflow
    async def pipeline(x: int) -> str:
        return await store_it(await transform(await fetch(x)))


def test_a_completed_step_never_runs_again(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    calls: list[tuple[str, int, str]] = []
    register_three_steps(app, calls)
    handle = app.start("pipeline", 1, id="run-1")
    dead_worker(store, clock, "pipeline", [("fetch", 2)])

    assert app.run_until_idle() == 0  # the dead worker's lease still holds
    assert handle.status() is durably.RunStatus.RUNNING
    assert calls == []

    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    assert app.run_until_idle() == 1

    assert [(name, x) for name, x, _ in calls] == [("transform", 2), ("store_it", 20)]
    assert handle.result(timeout=0) == "stored 20"
    history = app.client.history(handle.id)
    takeover = [e for e in history if e.kind is EventKind.CLAIMED][-1]
    assert json.loads(takeover.data or "{}")["took_over_from"] == "dead-worker"
    assert step_events(history) == [
        ("step_started", 0, "fetch", 1),
        ("step_completed", 0, "fetch", 1),
        ("step_started", 1, "transform", 1),
        ("step_completed", 1, "transform", 1),
        ("step_started", 2, "store_it", 1),
        ("step_completed", 2, "store_it", 1),
    ]


def test_a_step_started_but_not_completed_runs_again_with_the_same_key(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    calls: list[tuple[str, int, str]] = []
    register_three_steps(app, calls)
    handle = app.start("pipeline", 1, id="run-1")
    dead_worker(store, clock, "pipeline", [("fetch", 2)], unknown="transform")
    dead_key = started_key(store.history(handle.id)[-1])
    assert dead_key == step_key(handle.id, 1, "transform")

    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    assert app.run_until_idle() == 1

    assert calls == [
        ("transform", 2, dead_key),  # the unknown step, again, under the same key
        ("store_it", 20, step_key(handle.id, 2, "store_it")),
    ]
    assert handle.result(timeout=0) == "stored 20"
    steps = step_events(app.client.history(handle.id))
    assert steps == [
        ("step_started", 0, "fetch", 1),
        ("step_completed", 0, "fetch", 1),
        ("step_started", 1, "transform", 1),  # the dead worker's attempt: outcome unknown
        ("attempt_lost", 1, "transform", 1),  # said so by the worker that took the run over
        ("step_started", 1, "transform", 2),
        ("step_completed", 1, "transform", 2),
        ("step_started", 2, "store_it", 1),
        ("step_completed", 2, "store_it", 1),
    ]
    second_attempt = [
        e
        for e in app.client.history(handle.id)
        if e.kind is EventKind.STEP_STARTED and e.attempt == 2
    ]
    assert [started_key(e) for e in second_attempt] == [dead_key]


def test_a_recorded_step_failure_is_replayed_not_retried(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    """The dead worker recorded step 0 as failed; the workflow caught it and went on."""
    calls: list[str] = []
    caught: list[durably.StepFailed] = []

    @app.step
    async def flaky() -> str:
        calls.append("flaky")
        return "should not run"

    @app.step
    async def fallback() -> str:
        calls.append("fallback")
        return "fallback"

    @app.workflow
    async def careful() -> str:
        try:
            return await flaky()
        except durably.StepFailed as failed:
            caught.append(failed)
            return f"{await fallback()} after {failed.message}"

    handle = app.start(careful, id="careful-1")
    [claim] = store.claim("dead-worker", ["careful"], now=clock.now(), lease=DEAD_LEASE, limit=1)
    at = clock.now()
    error = json.dumps({"error_class": "ConnectionError", "message": "reset by peer"})
    events = (
        Event(3, EventKind.STEP_STARTED, at, 0, "flaky", 1, json.dumps({"key": "k"})),
        Event(4, EventKind.STEP_FAILED, at, 0, "flaky", 1, error),
    )
    assert store.commit([Checkpoint(claim.run_id, claim.epoch, events)], now=at) == [True]

    clock.advance(DEAD_LEASE * 2)
    app.run_until_idle()
    assert calls == ["fallback"]
    assert handle.result(timeout=0) == "fallback after reset by peer"
    [failed] = caught
    assert (failed.step, failed.error_class) == ("flaky", "ConnectionError")


# -- fencing ------------------------------------------------------------------------------


def test_a_taken_over_lease_refuses_the_first_owners_writes(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    @app.workflow
    async def job() -> None:
        return None

    handle = app.start(job, id="job-1")
    [first] = store.claim("first", ["job"], now=clock.now(), lease=DEAD_LEASE, limit=1)
    assert store.claim("second", ["job"], now=clock.now(), lease=DEAD_LEASE, limit=1) == []

    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    [second] = store.claim("second", ["job"], now=clock.now(), lease=DEAD_LEASE, limit=1)
    assert second.epoch > first.epoch
    before = store.history(handle.id)

    at = clock.now()
    zombie = Checkpoint(
        handle.id,
        first.epoch,
        (Event(before[-1].seq + 1, EventKind.RUN_COMPLETED, at),),
        status=durably.RunStatus.COMPLETED,
        result="null",
    )
    assert store.commit([zombie], now=at) == [False]
    assert store.renew([first.lease], now=at, lease=DEAD_LEASE) == set()
    assert store.history(handle.id) == before
    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.RUNNING
    assert (run.lease_owner, run.lease_epoch) == ("second", second.epoch)

    owner = Checkpoint(
        handle.id,
        second.epoch,
        (Event(before[-1].seq + 1, EventKind.RUN_COMPLETED, at),),
        status=durably.RunStatus.COMPLETED,
        result="null",
    )
    assert store.commit([owner], now=at) == [True]
    assert handle.result(timeout=0) is None


def test_an_execution_whose_lease_was_taken_over_writes_nothing(
    app: durably.App, store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """While the first worker runs step 0, another worker takes the run over (its lease
    expired, as if the first had stalled). The first worker's next flush is refused with
    LeaseLost; the history is exactly what it was after the takeover."""
    bodies: list[str] = []
    after_takeover: list[list[Event]] = []

    @app.step
    def slow(x: int) -> int:
        bodies.append("slow")
        if len(bodies) == 1:  # the first worker stalls past its lease
            # the thief claims at the moment past the lease first, and only then does the
            # clock get there: the first worker's own loop, polling meanwhile, never sees
            # the lease expired before the thief holds it
            stalled = clock.now() + LEASE + timedelta(seconds=1)
            [thief] = store.claim("thief", ["stalls"], now=stalled, lease=LEASE, limit=1)
            clock.set(stalled)
            after_takeover.append(store.history(thief.run_id))
        return x + 1

    @app.step
    async def after(x: int) -> int:
        bodies.append("after")
        return x * 2

    @app.workflow
    async def stalls(x: int) -> int:
        return await after(await slow(x))

    handle = app.start(stalls, 1, id="stalls-1")
    with caplog.at_level(logging.WARNING, logger="durably"):
        assert app.run_until_idle(lease=LEASE) == 0  # lost, not ended

    assert bodies == ["slow"]  # the step after the lost flush never ran
    [history] = after_takeover
    assert app.client.history(handle.id) == history
    assert kinds(history)[-2:] == ["step_started", "claimed"]
    run = app.client.get(handle.id)
    assert (run.status, run.lease_owner) == (durably.RunStatus.RUNNING, "thief")
    assert any(
        "stalls-1" in r.getMessage() and "taken over" in r.getMessage() for r in caplog.records
    )

    # The thief dies in turn; the next worker finds step 0 unknown and runs it again.
    clock.advance(LEASE + timedelta(seconds=1))
    assert app.run_until_idle(lease=LEASE) == 1
    assert bodies == ["slow", "slow", "after"]
    assert handle.result(timeout=0) == 4
    assert step_events(app.client.history(handle.id)) == [
        ("step_started", 0, "slow", 1),
        ("attempt_lost", 0, "slow", 1),  # recorded at the takeover: where the worker died
        ("step_started", 0, "slow", 2),
        ("step_completed", 0, "slow", 2),
        ("step_started", 1, "after", 1),
        ("step_completed", 1, "after", 1),
    ]


# -- stopping in-process ------------------------------------------------------------------


def test_a_stopping_worker_hands_its_runs_back(app: durably.App, clock: FakeClock) -> None:
    worker = app.worker(stop_grace=0)
    calls: list[str] = []

    @app.step
    async def first() -> str:
        calls.append("first")
        return "one"

    @app.step
    async def hangs() -> str:
        calls.append("hangs")
        if len(calls) == 2:
            worker.stop()  # the worker is told to stop while this step is in flight
            await asyncio.Event().wait()
        return "two"

    @app.workflow
    async def interrupted() -> list[str]:
        return [await first(), await hangs()]

    handle = app.start(interrupted, id="int-1")
    assert worker.run_until_idle() == 0

    run = app.client.get(handle.id)
    assert run.status is durably.RunStatus.PENDING
    assert run.lease_owner is None
    history = app.client.history(handle.id)
    assert kinds(history)[-2:] == ["step_started", "released"]

    assert app.run_until_idle() == 1  # due again at once, without advancing the clock
    assert calls == ["first", "hangs", "hangs"]
    assert handle.result(timeout=0) == ["one", "two"]
