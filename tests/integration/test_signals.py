"""Signals: durably.wait_for_signal in a workflow, app.client.signal / `durably signal` from any
process. On both stores, on the fake clock: a waiting run holds no worker, a signal wakes
it, one sent early is kept, several of one name queue up, and a timeout wakes it alone."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

import durably
from durably import RunStatus, SignalTimeout
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import SignalReceived
from durably.errors import DurablyError, PayloadError, RunNotFound
from durably.testing import FakeClock

from .conftest import kinds


def approval_app(app: durably.App, shipped: list[Any]) -> None:
    @app.step
    async def ship(order: str, note: str) -> str:
        shipped.append((order, note))
        return f"{order} shipped"

    @app.workflow
    async def order_flow(order: str) -> str:
        decision = await durably.wait_for_signal("approved")
        return await ship(order, decision["note"])  # type: ignore[no-any-return]


def test_a_signal_wakes_a_run_that_waits_for_it(app: durably.App, clock: FakeClock) -> None:
    shipped: list[Any] = []
    approval_app(app, shipped)
    handle = app.start("order_flow", "o-1", id="o-1")
    assert app.run_until_idle() == 0
    run = app.client.get("o-1")
    assert run.status is RunStatus.PENDING
    assert run.available_at is None  # no time ends this wait: only a signal
    assert run.lease_owner is None

    delivered = app.client.signal("o-1", "approved", {"note": "fragile"}, by="erin")
    assert delivered.stored
    assert app.client.get("o-1").available_at == clock.now()  # woken: due now
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "o-1 shipped"
    assert shipped == [("o-1", "fragile")]

    history = app.client.history("o-1")
    assert "signal_waiting" in kinds(history)
    [received] = [e for e in history if e.kind is EventKind.SIGNAL_RECEIVED]
    payload = read_payload(received, SignalReceived)
    assert (received.name, payload.sender) == ("durably.signal:approved", "erin")
    assert json.loads(payload.data or "null") == {"note": "fragile"}


def test_a_signal_sent_before_the_wait_is_kept_until_it_waits(
    app: durably.App, clock: FakeClock
) -> None:
    shipped: list[Any] = []

    @app.step
    async def pack(order: str) -> str:
        return f"{order} packed"

    @app.workflow
    async def early(order: str) -> list[Any]:
        await pack(order)
        await durably.sleep("1h")
        first = await durably.wait_for_signal("note")
        second = await durably.wait_for_signal("note")
        shipped.append((first, second))
        return [first, second]

    handle = app.start(early, "o-2", id="o-2")
    app.run_until_idle()  # asleep, before its waits
    app.client.signal("o-2", "note", "one")
    app.client.signal("o-2", "note", "two")
    app.run_until_idle()  # the signals wake it: it folds them, then sleeps on
    assert app.client.get("o-2").status is RunStatus.PENDING
    clock.advance("1h")
    app.run_until_idle()
    assert handle.result(timeout=0) == ["one", "two"]  # in the order they were sent


def test_several_waits_of_one_name_each_take_one_signal(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    async def collect(count: int) -> list[int]:
        return [await durably.wait_for_signal("vote") for _ in range(count)]

    handle = app.start(collect, 3, id="c-1")
    app.run_until_idle()
    app.client.signal("c-1", "vote", 1)
    app.run_until_idle()
    app.client.signal("c-1", "vote", 2)
    app.client.signal("c-1", "other", "ignored")  # another name: not taken by these waits
    app.client.signal("c-1", "vote", 3)
    app.run_until_idle()
    assert handle.result(timeout=0) == [1, 2, 3]
    taken = [e for e in app.client.history("c-1") if e.kind is EventKind.SIGNAL_RECEIVED]
    assert len({read_payload(e, SignalReceived).message for e in taken}) == 3


def test_a_timeout_wakes_the_run_with_signal_timeout(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    async def reminder() -> str:
        try:
            await durably.wait_for_signal("paid", timeout="3d")
        except SignalTimeout as exc:
            return f"chase: {exc}"
        return "paid"

    started = clock.now()
    handle = app.start(reminder, id="p-1")
    app.run_until_idle()
    assert app.client.get("p-1").available_at is not None
    clock.advance("3d")  # nobody sends anything
    assert app.run_until_idle() == 1
    result = handle.result(timeout=0)
    assert result.startswith("chase: no signal 'paid' came by ")
    assert "signal_timed_out" in kinds(app.client.history("p-1"))
    assert app.client.get("p-1").updated_at == started + timedelta(days=3)  # woken on time


def test_an_uncaught_signal_timeout_fails_the_run(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    async def strict() -> str:
        await durably.wait_for_signal("go", timeout="1m")
        return "went"

    handle = app.start(strict, id="s-1")
    app.run_until_idle()
    clock.advance("1m")
    app.run_until_idle()
    run = app.client.get("s-1")
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.error_class == "durably.errors.SignalTimeout"
    with pytest.raises(durably.WorkflowFailed, match="no signal 'go' came"):
        handle.result(timeout=0)


def test_a_timed_out_wait_replays_as_a_timeout_even_if_the_signal_comes_later(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    def define(target: durably.App) -> None:
        @target.workflow(name="late")
        async def late() -> str:
            try:
                await durably.wait_for_signal("go", timeout="1m")
            except SignalTimeout:
                await durably.sleep("1h")
                return "timed out"
            return "signalled"

    define(app)
    define(other_app)
    handle = app.start("late", id="l-1")
    app.run_until_idle()
    clock.advance("1m")
    app.run_until_idle()  # timed out, now sleeping
    app.client.signal("l-1", "go")  # too late for that wait
    clock.advance("1h")
    other_app.run_until_idle()
    assert handle.result(timeout=0) == "timed out"


def test_a_sync_workflow_waits_for_a_signal_by_blocking(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    def sync_wait() -> Any:
        return durably.wait_for_signal("data")

    handle = app.start(sync_wait, id="y-1")
    app.run_until_idle()
    app.client.signal("y-1", "data", [1, 2])
    app.run_until_idle()
    assert handle.result(timeout=0) == [1, 2]


def test_signals_that_cannot_be_delivered_are_refused_with_the_reason(
    app: durably.App, clock: FakeClock
) -> None:
    @app.workflow
    async def quick() -> str:
        return "done"

    with pytest.raises(RunNotFound, match="nobody"):
        app.client.signal("nobody", "approved")
    app.start(quick, id="q-1")
    with pytest.raises(PayloadError):
        app.client.signal("q-1", "approved", {1, 2})  # a set would come back a list
    with pytest.raises(DurablyError, match="name"):
        app.client.signal("q-1", "")
    app.run_until_idle()
    with pytest.raises(DurablyError, match=r"has finished \(completed\), so the signal 'x'"):
        app.client.signal("q-1", "x")


def test_a_signal_to_a_run_waiting_behind_a_deadline_still_arrives(
    app: durably.App, clock: FakeClock
) -> None:
    """The wait has no timeout of its own; the run's deadline bounds it."""

    @app.workflow(deadline="1d")
    async def bounded() -> str:
        return str(await durably.wait_for_signal("go"))

    handle = app.start(bounded, id="d-1")
    app.run_until_idle()
    assert app.client.get("d-1").available_at == clock.now() + timedelta(days=1)
    app.client.signal("d-1", "go", "now")
    app.run_until_idle()
    assert handle.result(timeout=0) == "now"
