"""Workflows and steps, async and sync, with typed inputs and results, on both real stores."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

import pydantic
import pytest

import durably
from durably.core.history import EventKind
from durably.testing import FakeClock

from .conftest import started_key, step_events


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int
    unit_cents: int


@dataclass(frozen=True)
class Order:
    id: str
    lines: list[Line]


class Customer(pydantic.BaseModel):
    name: str
    email: str


class Receipt(pydantic.BaseModel):
    order_id: str
    customer: Customer
    total_cents: int
    charge_id: str


@dataclass(frozen=True)
class Charge:
    id: str
    cents: int


ORDER = Order("o-1", [Line("apple", 3, 50), Line("pear", 2, 120)])
ADA = Customer(name="Ada", email="ada@example.com")
EXPECTED = Receipt(order_id="o-1", customer=ADA, total_cents=390, charge_id="ch-o-1-390")


def register_checkout(app: durably.App, *, workflow_is_async: bool, seen: list[object]) -> None:
    """A workflow mixing an async and a sync step; `seen` collects what the workflow receives."""

    @app.step
    async def total(order: Order) -> int:  # async step
        seen.append(order)
        return sum(line.quantity * line.unit_cents for line in order.lines)

    @app.step
    def charge(customer: Customer, cents: int) -> Charge:  # sync step, run in a thread
        seen.append(customer)
        assert threading.current_thread() is not threading.main_thread()
        return Charge(f"ch-{ORDER.id}-{cents}", cents)

    if workflow_is_async:

        @app.workflow(name="checkout")
        async def checkout_async(order: Order, customer: Customer) -> Receipt:
            cents = await total(order)
            charged = await charge(customer, cents)
            seen.append(charged)
            return Receipt(
                order_id=order.id, customer=customer, total_cents=cents, charge_id=charged.id
            )

    else:

        @app.workflow(name="checkout")
        def checkout_sync(order: Order, customer: Customer) -> Receipt:
            cents = total(order)  # a sync workflow gets values, not awaitables
            charged = charge(customer, cents)
            seen.append(charged)
            return Receipt(
                order_id=order.id, customer=customer, total_cents=cents, charge_id=charged.id
            )


@pytest.mark.parametrize(
    "workflow_is_async", [True, False], ids=["async-workflow", "sync-workflow"]
)
def test_typed_inputs_and_results_round_trip(app: durably.App, workflow_is_async: bool) -> None:
    seen: list[object] = []
    register_checkout(app, workflow_is_async=workflow_is_async, seen=seen)
    handle = app.start("checkout", ORDER, ADA, id="checkout-1")
    assert handle.status() is durably.RunStatus.PENDING

    assert app.run_until_idle() == 1

    assert handle.status() is durably.RunStatus.COMPLETED
    result = handle.result(timeout=0)
    assert isinstance(result, Receipt)
    assert result == EXPECTED
    order, customer, charged = seen
    assert isinstance(order, Order)
    assert order == ORDER
    assert isinstance(order.lines[0], Line)
    assert isinstance(customer, Customer)
    assert customer == ADA
    assert isinstance(charged, Charge)  # the step's result, decoded by its return hint
    assert charged == Charge("ch-o-1-390", 390)
    assert step_events(app.client.history(handle.id)) == [
        ("step_started", 0, "total", 1),
        ("step_completed", 0, "total", 1),
        ("step_started", 1, "charge", 1),
        ("step_completed", 1, "charge", 1),
    ]


def test_async_steps_in_a_sync_workflow(app: durably.App) -> None:
    @app.step
    async def double(x: int) -> int:
        return x * 2

    @app.step
    def add(x: int, y: int) -> int:
        return x + y

    @app.workflow
    def arithmetic(x: int) -> list[int]:
        return [double(x), add(x, y=10), double(add(1, 2))]

    handle = app.start(arithmetic, 5)
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == [10, 15, 6]


def test_keyword_and_keyword_only_arguments(app: durably.App) -> None:
    @app.step
    async def greet(name: str, *, greeting: str = "hello") -> str:
        return f"{greeting} {name}"

    @app.workflow
    async def greetings(*names: str, greeting: str) -> list[str]:
        return [await greet(name, greeting=greeting) for name in names]

    handle = app.start(greetings, "ada", "bob", greeting="hi")
    app.run_until_idle()
    assert handle.result(timeout=0) == ["hi ada", "hi bob"]


def test_many_runs_are_drained(app: durably.App) -> None:
    @app.step
    async def square(x: int) -> int:
        return x * x

    @app.workflow
    async def squares(x: int) -> int:
        return await square(x) + await square(x + 1)

    handles = [app.start(squares, n, id=f"sq-{n}") for n in range(25)]
    assert app.run_until_idle() == 25
    assert [h.result(timeout=0) for h in handles] == [n * n + (n + 1) ** 2 for n in range(25)]
    assert app.run_until_idle() == 0


def test_a_run_started_by_another_app_is_executed(app: durably.App, other_app: durably.App) -> None:
    """A client process starts the run; a worker process on the same store executes it."""

    @app.workflow(name="shout", version="1")  # a client's code differs: the same version
    async def shout(word: str) -> str:
        return word.upper()

    @other_app.workflow(name="shout", version="1")
    async def shout_client(word: str) -> str:
        raise AssertionError("the client never executes")

    handle = other_app.start("shout", "hey", id="shout-1")
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == "HEY"


# -- idempotency keys ---------------------------------------------------------------------


def test_the_idempotency_key_is_the_one_the_history_records(app: durably.App) -> None:
    keys: list[tuple[str, str]] = []

    @app.step
    async def charge(label: str) -> str:
        key = durably.idempotency_key()
        assert durably.idempotency_key() == key  # stable within the attempt
        keys.append((label, key))
        return key

    @app.step
    def refund(label: str) -> str:  # sync steps see it too
        key = durably.idempotency_key()
        keys.append((label, key))
        return key

    @app.workflow
    async def pay(order_id: str) -> list[str]:
        return [await charge("first"), await refund("second"), await charge("third")]

    handle = app.start(pay, "o-1", id="pay-1")
    app.run_until_idle()

    returned = handle.result(timeout=0)
    assert [key for _, key in keys] == returned
    assert len(set(returned)) == 3  # every step call has its own key
    started = [e for e in app.client.history(handle.id) if e.kind is EventKind.STEP_STARTED]
    assert [started_key(e) for e in started] == returned
    assert all("pay-1" in key for key in returned)


def test_idempotency_key_outside_a_step_is_a_clear_error() -> None:
    with pytest.raises(
        durably.DurablyError, match=r"idempotency_key\(\) was called outside a step"
    ):
        durably.idempotency_key()


def test_idempotency_key_in_the_workflow_body_fails_the_run(app: durably.App) -> None:
    @app.workflow
    async def sloppy() -> str:
        return durably.idempotency_key()

    handle = app.start(sloppy)
    app.run_until_idle()
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.error_class == "durably.errors.DurablyError"
    assert "outside a step" in failed.value.message


def test_a_step_called_outside_a_workflow_is_a_plain_call(app: durably.App) -> None:
    @app.step
    def add(x: int, y: int) -> int:
        return x + y

    assert add(2, 3) == 5


def test_runs_are_executed_on_the_apps_clock(app: durably.App, clock: FakeClock) -> None:
    @app.workflow
    async def noop() -> None:
        return None

    started_at = clock.now()
    handle = app.start(noop)
    clock.advance("1h")
    app.run_until_idle()
    history = app.client.history(handle.id)
    assert history[0].at == started_at
    assert {event.at for event in history[1:]} == {started_at + timedelta(hours=1)}
    assert handle.result(timeout=0) is None


def test_the_idempotency_key_is_the_same_for_every_attempt(
    app: durably.App, clock: FakeClock
) -> None:
    keys: list[str] = []

    @app.step
    async def flaky() -> str:
        keys.append(durably.idempotency_key())
        if len(keys) == 1:
            raise ConnectionError("reset by peer")  # transient: retried later
        return "ok"

    @app.workflow
    async def retries() -> str:
        return await flaky()

    handle = app.start(retries, id="retries-1")
    app.run_until_idle()
    assert len(keys) == 1
    assert handle.status() is not durably.RunStatus.COMPLETED
    clock.advance("10m")  # past any backoff of the default retry policy
    app.run_until_idle()

    assert handle.result(timeout=0) == "ok"
    assert len(keys) == 2
    assert keys[0] == keys[1]
    started = [e for e in app.client.history(handle.id) if e.kind is EventKind.STEP_STARTED]
    assert [(e.attempt, started_key(e)) for e in started] == [(1, keys[0]), (2, keys[0])]
