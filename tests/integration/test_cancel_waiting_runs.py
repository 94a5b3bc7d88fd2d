"""A cancel takes up a run that waits, on both stores, on the fake clock: asleep, waiting for a
signal, for a retry, parked as a dead letter, waiting for an approval, or paused. The run is
due at once (no clock advance needed), its completed steps are undone once, and it ends
`cancelled`; what it waited for never comes."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.errors import DurablyError
from durably.testing import FakeClock

from .conftest import kinds
from .steering import (
    assert_cancelled,
    step_started,
)


def order_that_cannot_pay(app: durably.App, reserve: durably.Step, retry: Retry) -> list[int]:
    """`order(item)` reserves, then charges, which fails as long as the test lasts; returns
    the list of charge attempts."""
    tries: list[int] = []

    @app.step(retry=retry)
    async def charge(item: str) -> str:
        tries.append(1)
        raise ConnectionError("payment service down")

    @app.workflow
    async def order(item: str) -> str:
        await reserve(item)
        return await charge(item)  # type: ignore[no-any-return]

    return tries


@pytest.mark.parametrize("wait", ["sleep", "signal"])
def test_a_cancel_takes_up_a_waiting_run_now_and_undoes_it(
    app: durably.App,
    clock: FakeClock,
    order: durably.Workflow,
    undone: list[str],
    calls: list[str],
    wait: str,
) -> None:
    app.start("order", "lamp", wait, id="w-1")
    assert app.run_until_idle() == 0
    run = app.client.get("w-1")
    assert run.status is RunStatus.PENDING
    assert run.available_at == (clock.now() + timedelta(days=1) if wait == "sleep" else None)

    steered = app.client.cancel("w-1", reason="out of stock", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.PENDING)
    assert "takes it up now" in steered.note
    assert app.client.get("w-1").available_at == clock.now()  # due now, not in a day
    assert app.run_until_idle() == 1  # no clock advance needed

    assert_cancelled(app, "w-1", "ops", "out of stock")
    assert undone == ["hold-lamp"]
    assert calls == ["reserve lamp"]  # ship never ran
    history = kinds(app.client.history("w-1"))
    assert "timer_fired" not in history
    assert "signal_received" not in history
    assert "message_received" in history  # the cancel, with who sent it

    clock.advance(timedelta(days=2))  # its old timer comes due: nothing more happens
    assert app.run_until_idle() == 0
    assert undone == ["hold-lamp"]


def test_a_cancel_hands_a_dead_lettered_run_back_to_be_undone(
    app: durably.App, reserve: durably.Step, undone: list[str]
) -> None:
    tries = order_that_cannot_pay(app, reserve, Retry(attempts=1))
    app.start("order", "lamp", id="d-1")
    app.run_until_idle()
    assert app.client.get("d-1").status is RunStatus.NEEDS_ATTENTION
    assert [letter.run_id for letter in app.client.dead_letters()] == ["d-1"]

    steered = app.client.cancel("d-1", reason="given up", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.NEEDS_ATTENTION)
    run = app.client.get("d-1")
    assert run.status is RunStatus.PENDING  # handed back to the workers by the cancel
    assert run.lease_owner is None
    assert app.run_until_idle() == 1

    assert_cancelled(app, "d-1", "ops", "given up")
    assert undone == ["hold-lamp"]
    assert tries == [1]  # the failed step was not tried again
    assert app.client.dead_letters() == []
    assert "released" in kinds(app.client.history("d-1"))


def test_a_cancel_of_a_run_waiting_for_a_retry_does_not_wait_for_it(
    app: durably.App, clock: FakeClock, reserve: durably.Step, undone: list[str]
) -> None:
    hourly = Retry(attempts=5, initial="1h", max_delay="1h", jitter="none")
    tries = order_that_cannot_pay(app, reserve, hourly)
    app.start("order", "lamp", id="r-1")
    app.run_until_idle()
    run = app.client.get("r-1")
    assert run.status is RunStatus.PENDING
    assert run.available_at == clock.now() + timedelta(hours=1)  # its next attempt

    steered = app.client.cancel("r-1", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.PENDING)
    assert app.client.get("r-1").available_at == clock.now()
    assert app.run_until_idle() == 1
    assert_cancelled(app, "r-1", "ops", None)
    assert tries == [1]  # no attempt more
    assert undone == ["hold-lamp"]


def test_a_cancel_ends_a_run_waiting_for_an_approval(
    app: durably.App, reserve: durably.Step, undone: list[str]
) -> None:
    asked: list[str] = []

    @app.step
    async def ask(request: durably.ApprovalRequest) -> None:
        asked.append(request.name)

    @app.step
    async def refund(item: str) -> str:
        return "refunded"

    @app.workflow
    async def refund_flow(item: str) -> str:
        await reserve(item)
        decision = await durably.approval("refund", notify=ask, timeout="2d")
        return await refund(item) if decision.approved else "refused"

    app.start("refund_flow", "lamp", id="a-1")
    app.run_until_idle()
    assert app.client.get("a-1").status is RunStatus.NEEDS_ATTENTION
    assert [pending.run_id for pending in app.client.approvals()] == ["a-1"]

    steered = app.client.cancel("a-1", by="ops")
    assert (steered.changed, steered.status) == (True, RunStatus.NEEDS_ATTENTION)
    assert app.client.get("a-1").status is RunStatus.PENDING
    assert app.run_until_idle() == 1

    assert_cancelled(app, "a-1", "ops", None)
    assert undone == ["hold-lamp"]
    assert asked == ["refund"]
    assert app.client.approvals() == []
    with pytest.raises(DurablyError):  # nobody can decide it any more
        app.client.decide("a-1", "refund", by="maria", approved=True)
    assert not step_started(app, "a-1", "refund")


def test_a_cancel_hands_a_paused_run_back_and_undoes_it(
    app: durably.App,
    clock: FakeClock,
    order: durably.Workflow,
    undone: list[str],
    calls: list[str],
) -> None:
    app.start("order", "lamp", "sleep", id="p-1")
    app.run_until_idle()
    app.client.pause("p-1", by="ops")
    app.run_until_idle()
    assert app.client.get("p-1").status is RunStatus.PAUSED

    steered = app.client.cancel("p-1", reason="changed my mind", by="erin")
    assert (steered.changed, steered.status) == (True, RunStatus.PAUSED)
    run = app.client.get("p-1")
    assert (run.status, run.available_at) == (RunStatus.PENDING, clock.now())
    assert app.run_until_idle() == 1
    assert_cancelled(app, "p-1", "erin", "changed my mind")
    assert undone == ["hold-lamp"]
    assert calls == ["reserve lamp"]
    history = kinds(app.client.history("p-1"))
    assert history.index("run_paused") < history.index("released") < history.index("compensating")
