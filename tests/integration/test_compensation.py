"""Compensation: when a run fails for good, the completed steps are undone in reverse order,
each undo durable and retried, exactly as a step is."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus, Terminal
from durably.core.history import Event, EventKind
from durably.stores import Store
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .conftest import DEAD_LEASE, data, dying_worker, events, settle

RUN = "order-1"


@dataclass
class World:
    """What the steps and their undos did to the outside world, in order."""

    log: list[tuple[object, ...]] = field(default_factory=list)
    refund_failures: int = 0  # the next refunds that fail with a retryable error
    refund_error: Exception = field(default_factory=lambda: ConnectionError("bank unreachable"))


def order_app(app: durably.App, world: World) -> None:
    """`order(sku, amount)`: reserve, charge, book a courier (each undoable), then confirm,
    which the shop refuses for good (Terminal)."""

    @app.step
    async def reserve(sku: str, qty: int) -> str:
        return f"res-{sku}-{qty}"

    @reserve.compensation
    async def unreserve(sku: str, qty: int, reservation: str) -> None:
        world.log.append(("unreserve", sku, qty, reservation, durably.idempotency_key()))

    @app.step(retry=Retry(attempts=3, initial="10s", jitter="none"))
    def charge(amount: int) -> dict[str, int]:  # a sync step, a structured result
        return {"charge_id": 7, "amount": amount}

    @charge.compensation
    def refund(amount: int, charged: dict[str, int]) -> None:
        world.log.append(("refund", amount, charged, durably.idempotency_key()))
        if world.refund_failures:
            world.refund_failures -= 1
            raise world.refund_error

    @app.step
    async def book_courier(sku: str) -> str:
        return f"courier-for-{sku}"

    @book_courier.compensation
    async def cancel_courier(sku: str, booking: str) -> None:
        world.log.append(("cancel_courier", sku, booking))

    @app.step
    async def confirm(sku: str) -> None:
        raise Terminal(f"{sku} is discontinued")

    @confirm.compensation
    async def unconfirm(sku: str, result: None) -> None:
        world.log.append(("unconfirm", sku))  # never: confirm did not complete

    @app.workflow
    async def order(sku: str, amount: int) -> str:
        await reserve(sku, qty=2)
        await charge(amount)
        booking: str = await book_courier(sku)
        await confirm(sku)
        return booking


def compensations(history: list[Event], kind: EventKind) -> list[int | None]:
    return [event.position for event in history if event.kind is kind]


def test_completed_steps_are_undone_in_reverse_order_with_their_input_and_result(
    app: durably.App, clock: FakeClock
) -> None:
    world = World()
    order_app(app, world)
    handle = app.start("order", "lamp", 120, id=RUN)

    assert app.run_until_idle() == 1

    assert world.log == [
        ("cancel_courier", "lamp", "courier-for-lamp"),
        ("refund", 120, {"charge_id": 7, "amount": 120}, f"{step_key(RUN, 1, 'charge')}:undo"),
        ("unreserve", "lamp", 2, "res-lamp-2", f"{step_key(RUN, 0, 'reserve')}:undo"),
    ]
    run = app.client.get(handle.id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert run.error.error_class == "durably.errors.StepFailed"
    assert "lamp is discontinued" in run.error.message
    history = app.client.history(handle.id)
    [compensating] = [e for e in history if e.kind is EventKind.COMPENSATING]
    assert data(compensating)["then"] == "failed"
    assert "lamp is discontinued" in data(compensating)["message"]
    assert compensations(history, EventKind.COMPENSATION_STARTED) == [2, 1, 0]
    assert compensations(history, EventKind.COMPENSATION_COMPLETED) == [2, 1, 0]
    assert history[-1].kind is EventKind.RUN_FAILED
    assert app.client.dead_letters() == []


def test_steps_without_a_compensation_are_skipped(app: durably.App) -> None:
    undone: list[str] = []

    @app.step
    async def a() -> str:
        return "a"

    @a.compensation
    async def undo_a(result: str) -> None:
        undone.append(result)

    @app.step
    async def b() -> str:  # nothing to undo: a read, say
        return "b"

    @app.step
    async def c() -> str:
        return "c"

    @c.compensation
    async def undo_c(result: str) -> None:
        undone.append(result)

    @app.workflow
    async def flow() -> None:
        await a()
        await b()
        await c()
        raise ValueError("the workflow's own check failed")  # fails the run, no retry

    handle = app.start(flow)
    app.run_until_idle()

    assert undone == ["c", "a"]
    history = app.client.history(handle.id)
    assert compensations(history, EventKind.COMPENSATION_STARTED) == [2, 0]
    assert compensations(history, EventKind.COMPENSATION_COMPLETED) == [2, 0]
    run = app.client.get(handle.id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert (run.error.error_class, run.error.message) == (
        "ValueError",
        "the workflow's own check failed",
    )


def test_a_compensation_that_fails_transiently_is_retried_durably(
    app: durably.App, clock: FakeClock
) -> None:
    world = World(refund_failures=1)
    order_app(app, world)
    handle = app.start("order", "desk", 300, id=RUN)
    start = clock.now()

    assert app.run_until_idle() == 0  # waiting to retry the refund
    run = app.client.get(handle.id)
    assert run.status is RunStatus.PENDING
    assert run.available_at == start + timedelta(seconds=10)  # the charge step's policy
    [failed] = events(app, handle.id, EventKind.COMPENSATION_ATTEMPT_FAILED)
    assert (failed.position, failed.attempt) == (1, 1)
    assert data(failed)["error_class"] == "ConnectionError"
    assert data(failed)["retry_at"] == (start + timedelta(seconds=10)).isoformat()
    assert [entry[0] for entry in world.log] == ["cancel_courier", "refund"]

    clock.advance("9s")
    assert app.run_until_idle() == 0
    assert len(world.log) == 2

    clock.advance("1s")
    assert app.run_until_idle() == 1
    assert [entry[0] for entry in world.log] == ["cancel_courier", "refund", "refund", "unreserve"]
    assert world.log[1][3] == world.log[2][3]  # the same idempotency key for the retry
    history = app.client.history(handle.id)
    started = [(e.position, e.attempt) for e in history if e.kind is EventKind.COMPENSATION_STARTED]
    assert started == [(2, 1), (1, 1), (1, 2), (0, 1)]
    assert compensations(history, EventKind.COMPENSATION_COMPLETED) == [2, 1, 0]
    assert handle.status() is RunStatus.FAILED


def test_a_compensation_past_its_timeout_is_retried(app: durably.App, clock: FakeClock) -> None:
    """An undo runs under its step's timeout; one that hangs is abandoned and tried again."""
    undo_calls: list[str] = []

    @app.step(timeout="100ms", retry=Retry(attempts=3, initial="1s", jitter="none"))
    async def book(room: str) -> str:
        return f"booking-{room}"

    @book.compensation
    async def unbook(room: str, booking: str) -> None:
        undo_calls.append(booking)
        if len(undo_calls) == 1:
            await asyncio.Event().wait()  # the hotel's API hangs

    @app.workflow
    async def trip(room: str) -> None:
        await book(room)
        raise ValueError("no flights")

    handle = app.start(trip, "12")
    settle(app, clock)

    assert undo_calls == ["booking-12", "booking-12"]
    assert handle.status() is RunStatus.FAILED
    [failed] = events(app, handle.id, EventKind.COMPENSATION_ATTEMPT_FAILED)
    assert data(failed)["error_class"] == "durably.errors.StepTimeout"
    done = Counter(compensations(app.client.history(handle.id), EventKind.COMPENSATION_COMPLETED))
    assert done == {0: 1}


@pytest.mark.parametrize(
    ("error", "attempts", "reason"),
    [
        (ConnectionError("bank unreachable"), 3, "attempts exhausted"),
        (Terminal("no"), 1, "terminal"),
    ],
    ids=["exhausted", "terminal"],
)
def test_a_compensation_that_cannot_be_done_parks_the_run(
    app: durably.App, clock: FakeClock, error: Exception, attempts: int, reason: str
) -> None:
    world = World(refund_failures=100, refund_error=error)
    order_app(app, world)
    handle = app.start("order", "chair", 80, id=RUN)

    settle(app, clock)

    assert [entry[0] for entry in world.log] == ["cancel_courier", *["refund"] * attempts]
    run = app.client.get(handle.id)
    assert run.status is RunStatus.COMPENSATION_FAILED
    assert run.lease_owner is None
    assert run.error is not None
    assert "compensation of step 'charge' failed" in run.error.message
    history = app.client.history(handle.id)
    [failed] = [e for e in history if e.kind is EventKind.COMPENSATION_FAILED]
    assert (failed.position, failed.attempt) == (1, attempts)
    assert data(failed)["reason"] == reason
    assert history[-1].kind is EventKind.RUN_PARKED
    [letter] = app.client.dead_letters()
    assert (letter.run_id, letter.status) == (RUN, RunStatus.COMPENSATION_FAILED)

    # A person fixes the bank connection and retries: the undo is tried again, then the rest.
    world.refund_failures = 0
    app.client.retry(RUN)
    settle(app, clock)
    assert [entry[0] for entry in world.log][-2:] == ["refund", "unreserve"]
    assert handle.status() is RunStatus.FAILED
    done = Counter(compensations(app.client.history(RUN), EventKind.COMPENSATION_COMPLETED))
    assert done == {2: 1, 1: 1, 0: 1}


def test_compensation_goes_on_in_a_new_worker_after_the_first_went_away(
    store_url: str, clock: FakeClock
) -> None:
    """The first worker's refund fails once and the process ends; a new process (a new App
    on the same store) finishes the compensation: nothing is undone twice."""
    first_world = World(refund_failures=1)
    first = durably.App(store_url, clock=clock, seed=1)
    order_app(first, first_world)
    first.start("order", "sofa", 900, id=RUN)
    assert first.run_until_idle() == 0
    first.close()
    assert [entry[0] for entry in first_world.log] == ["cancel_courier", "refund"]

    second_world = World()
    second = durably.App(store_url, clock=clock, seed=2)
    order_app(second, second_world)
    try:
        settle(second, clock)
        assert [entry[0] for entry in second_world.log] == ["refund", "unreserve"]
        assert second.client.get(RUN).status is RunStatus.FAILED
        history = second.client.history(RUN)
        done = Counter(compensations(history, EventKind.COMPENSATION_COMPLETED))
        assert done == {2: 1, 1: 1, 0: 1}
    finally:
        second.close()


def test_compensation_survives_a_worker_dying_mid_undo(
    app: durably.App, store: Store, clock: FakeClock, other_app: durably.App
) -> None:
    """A worker takes the waiting run, starts the refund again and dies before recording its
    outcome. Another worker takes it over once the lease expires and finishes the job."""
    world = World(refund_failures=1)
    order_app(app, world)
    app.start("order", "bed", 500, id=RUN)
    assert app.run_until_idle() == 0
    clock.advance("10s")  # the refund's retry is due

    key = f"{step_key(RUN, 1, 'charge')}:undo"
    dying_worker(
        store,
        clock,
        ["order"],
        record=[(EventKind.COMPENSATION_STARTED, 1, "charge", 2, json.dumps({"key": key}))],
    )
    other_world = World()
    order_app(other_app, other_world)
    assert other_app.run_until_idle() == 0  # its lease still holds
    assert other_world.log == []
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    settle(other_app, clock)

    assert [entry[0] for entry in other_world.log] == ["refund", "unreserve"]
    assert other_world.log[0][3] == key  # the same key as the attempt that may have happened
    history = other_app.client.history(RUN)
    assert other_app.client.get(RUN).status is RunStatus.FAILED
    done = Counter(compensations(history, EventKind.COMPENSATION_COMPLETED))
    assert done == {2: 1, 1: 1, 0: 1}
    started = [(e.position, e.attempt) for e in history if e.kind is EventKind.COMPENSATION_STARTED]
    assert started == [(2, 1), (1, 1), (1, 2), (1, 3), (0, 1)]
    takeovers = [
        e for e in history if e.kind is EventKind.CLAIMED and "took_over_from" in (e.data or "")
    ]
    assert len(takeovers) == 1


def test_a_step_a_person_skipped_is_undone_with_the_result_they_gave(
    app: durably.App, clock: FakeClock
) -> None:
    refunds: list[tuple[str, str]] = []

    @app.step(retry=Retry(attempts=2, initial="1s", jitter="none"))
    async def charge(order: str) -> str:
        raise ConnectionError("bank down")

    @charge.compensation
    async def refund(order: str, charge_id: str) -> None:
        refunds.append((order, charge_id))

    @app.step
    async def ship(order: str) -> str:
        raise Terminal("no carrier")

    @app.workflow
    async def fulfil(order: str) -> str:
        await charge(order)
        result: str = await ship(order)
        return result

    handle = app.start(fulfil, "A-1")
    settle(app, clock)
    assert handle.status() is RunStatus.NEEDS_ATTENTION

    app.client.skip_step(handle.id, result="ch-by-phone")  # charged by hand, over the phone
    settle(app, clock)

    assert refunds == [("A-1", "ch-by-phone")]
    assert handle.status() is RunStatus.FAILED


def test_a_workflow_that_catches_the_failure_undoes_nothing(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[str] = []

    @app.step
    async def reserve(order: str) -> str:
        return f"res-{order}"

    @reserve.compensation
    async def release(order: str, reservation: str) -> None:
        undone.append(reservation)

    @app.step
    async def express(order: str) -> str:
        raise Terminal("no express courier today")

    @app.step
    async def standard(order: str) -> str:
        return f"standard-{order}"

    @app.workflow
    async def ship(order: str) -> str:
        await reserve(order)
        try:
            result: str = await express(order)
        except durably.StepFailed:
            result = await standard(order)  # the fallback
        return result

    handle = app.start(ship, "B-2")
    settle(app, clock)
    assert handle.result(timeout=0) == "standard-B-2"
    assert undone == []
    assert events(app, handle.id, EventKind.COMPENSATING) == []
