"""Reconcile: after an attempt whose outcome is unknown (it timed out, or its worker died),
the step's reconcile hook asks "did it already happen?" before another attempt is made."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.history import EventKind
from durably.stores import Store
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .conftest import DEAD_LEASE, data, dying_worker, events, keys_started, settle, step_events

QUICK_RETRY = Retry(attempts=4, initial="1s", jitter="none")
RUN = "checkout-1"
KEY = step_key(RUN, 0, "charge")


@dataclass
class Payments:
    """The outside service: charges by idempotency key, and what each hook saw."""

    charges: dict[str, str] = field(default_factory=dict)
    bodies: list[str] = field(default_factory=list)  # the key of every body call
    lookups: list[tuple[int, str]] = field(default_factory=list)  # reconcile calls
    lookup_failures: int = 0  # the next reconcile calls that fail


def checkout_app(app: durably.App, payments: Payments, *, hang: str | None = None) -> None:
    """`checkout(x)`: charge (with a reconcile hook), then notify.

    hang="after_effect": the first charge attempt charges, then hangs past its timeout.
    hang="before_effect": the first charge attempt hangs before it charges.
    """

    @app.step(timeout="100ms", retry=QUICK_RETRY)
    async def charge(x: int) -> str:
        key = durably.idempotency_key()
        payments.bodies.append(key)
        first = len(payments.bodies) == 1
        if first and hang == "after_effect":
            payments.charges[key] = f"ch-{x}"
            await asyncio.Event().wait()  # the answer never comes back
        if first and hang == "before_effect":
            await asyncio.Event().wait()  # it never answers
        return payments.charges.setdefault(key, f"ch-{x}")

    @charge.reconcile
    async def find_charge(x: int) -> str | None:
        payments.lookups.append((x, durably.idempotency_key()))
        if payments.lookup_failures:
            payments.lookup_failures -= 1
            raise ConnectionError("lookup failed")
        return payments.charges.get(durably.idempotency_key())

    @app.step
    async def notify(charge_id: str) -> str:
        return f"notified {charge_id}"

    @app.workflow
    async def checkout(x: int) -> str:
        result: str = await notify(await charge(x))
        return result


def die_during_charge(store: Store, clock: FakeClock, x: int) -> None:
    """A worker starts the charge attempt of run RUN and dies; its lease then expires."""
    started = json.dumps({"key": KEY, "input": {"args": [x], "kwargs": {}}})
    dying_worker(
        store, clock, ["checkout"], record=[(EventKind.STEP_STARTED, 0, "charge", 1, started)]
    )
    clock.advance(DEAD_LEASE + timedelta(seconds=1))


@pytest.mark.parametrize("cause", ["timeout", "crash"])
def test_reconcile_that_finds_the_effect_completes_the_step_without_the_body(
    app: durably.App, store: Store, clock: FakeClock, cause: str
) -> None:
    payments = Payments()
    checkout_app(app, payments, hang="after_effect" if cause == "timeout" else None)
    handle = app.start("checkout", 1, id=RUN)
    if cause == "crash":
        die_during_charge(store, clock, 1)
        payments.charges[KEY] = "ch-1"  # the dead worker's charge went through

    settle(app, clock)

    assert handle.result(timeout=0) == "notified ch-1"
    assert payments.lookups == [(1, KEY)]  # called with the step's arguments, under its key
    assert payments.bodies == ([KEY] if cause == "timeout" else [])  # not run again
    assert payments.charges == {KEY: "ch-1"}
    history = app.client.history(handle.id)
    charge_events = [e for e in step_events(history) if e[2] == "charge"]
    first = [("step_started", 0, "charge", 1)]
    if cause == "timeout":
        first.append(("attempt_failed", 0, "charge", 1))
    else:  # its worker died: the next one records the attempt lost when it takes the run over
        first.append(("attempt_lost", 0, "charge", 1))
    assert charge_events == [
        *first,
        ("step_started", 0, "charge", 2),
        ("step_reconciled", 0, "charge", 2),
        ("step_completed", 0, "charge", 2),
    ]
    [reconciled] = events(app, handle.id, EventKind.STEP_RECONCILED)
    assert data(reconciled) == {"found": True}
    completed = [e for e in history if e.kind is EventKind.STEP_COMPLETED and e.name == "charge"]
    assert [json.loads(e.data or "null") for e in completed] == ["ch-1"]  # the answer is kept
    assert keys_started(history)[:2] == [KEY, KEY]


@pytest.mark.parametrize("cause", ["timeout", "crash"])
def test_reconcile_that_finds_nothing_runs_the_body_again_with_the_same_key(
    app: durably.App, store: Store, clock: FakeClock, cause: str
) -> None:
    payments = Payments()
    checkout_app(app, payments, hang="before_effect" if cause == "timeout" else None)
    handle = app.start("checkout", 2, id=RUN)
    if cause == "crash":
        die_during_charge(store, clock, 2)  # it died before the charge went through

    settle(app, clock)

    assert handle.result(timeout=0) == "notified ch-2"
    assert payments.lookups == [(2, KEY)]
    assert payments.bodies == [KEY] * (2 if cause == "timeout" else 1)
    assert payments.charges == {KEY: "ch-2"}  # charged once
    history = app.client.history(handle.id)
    charge_events = [e for e in step_events(history) if e[2] == "charge"]
    assert charge_events[-3:] == [
        ("step_started", 0, "charge", 2),
        ("step_reconciled", 0, "charge", 2),
        ("step_completed", 0, "charge", 2),
    ]
    [reconciled] = events(app, handle.id, EventKind.STEP_RECONCILED)
    assert data(reconciled) == {"found": False}
    assert keys_started(history)[:2] == [KEY, KEY]


def test_reconcile_is_not_called_after_a_known_failure_or_on_a_first_attempt(
    app: durably.App, clock: FakeClock
) -> None:
    lookups: list[int] = []
    calls: list[int] = []

    @app.step(retry=QUICK_RETRY)
    async def charge(x: int) -> str:
        calls.append(x)
        if len(calls) == 1:
            raise ConnectionError("refused: nothing was charged")
        return "ch"

    @charge.reconcile
    async def find_charge(x: int) -> str | None:
        lookups.append(x)
        return None

    @app.workflow
    async def pay(x: int) -> str:
        result: str = await charge(x)
        return result

    handle = app.start(pay, 1)
    settle(app, clock)
    assert handle.result(timeout=0) == "ch"
    assert calls == [1, 1]
    assert lookups == []
    assert events(app, handle.id, EventKind.STEP_RECONCILED) == []


def test_a_reconcile_that_fails_leaves_the_attempt_unknown_and_is_asked_again(
    app: durably.App, clock: FakeClock
) -> None:
    payments = Payments(lookup_failures=1)
    checkout_app(app, payments, hang="after_effect")
    handle = app.start("checkout", 3, id=RUN)

    settle(app, clock)

    assert handle.result(timeout=0) == "notified ch-3"
    assert payments.bodies == [KEY]  # never charged twice
    assert payments.lookups == [(3, KEY), (3, KEY)]
    failures = events(app, handle.id, EventKind.STEP_ATTEMPT_FAILED)
    assert [(e.attempt, data(e)["unknown"]) for e in failures] == [(1, True), (2, True)]
    assert data(failures[1])["error_class"] == "ConnectionError"
    [reconciled] = events(app, handle.id, EventKind.STEP_RECONCILED)
    assert (reconciled.attempt, data(reconciled)) == (3, {"found": True})


def test_a_sync_reconcile_hook_after_a_crash(
    app: durably.App, store: Store, clock: FakeClock
) -> None:
    shipped: dict[str, str] = {}
    lookups: list[str] = []

    @app.step
    def ship(order: str) -> str:
        raise AssertionError("the dead worker shipped it already; the body must not run")

    @ship.reconcile
    def find_shipment(order: str) -> str | None:
        lookups.append(order)
        return shipped.get(durably.idempotency_key())

    @app.workflow
    def fulfil(order: str) -> str:
        result: str = ship(order)
        return result

    handle = app.start(fulfil, "o-9", id="fulfil-1")
    key = step_key("fulfil-1", 0, "ship")
    started = json.dumps({"key": key, "input": {"args": ["o-9"], "kwargs": {}}})
    dying_worker(store, clock, ["fulfil"], record=[(EventKind.STEP_STARTED, 0, "ship", 1, started)])
    shipped[key] = "parcel-77"
    assert app.run_until_idle() == 0  # the dead worker's lease still holds
    assert lookups == []

    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "parcel-77"
    assert lookups == ["o-9"]
    assert handle.status() is RunStatus.COMPLETED
