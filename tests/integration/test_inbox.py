"""Messages from outside a run: sent to its inbox, folded into its history exactly once by
its lease holder, waking a run that waits without making it retry (or undo) early."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

import durably
from durably import Retry, RunStatus, Terminal
from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import MessageReceived
from durably.errors import DurablyError, PayloadError, RunNotFound
from durably.resilience.gates import Dependency
from durably.stores import Store
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, execute_sql, kinds


def messages(app: durably.App, run_id: str) -> list[MessageReceived]:
    return [
        read_payload(e, MessageReceived)
        for e in app.client.history(run_id)
        if e.kind is EventKind.MESSAGE_RECEIVED
    ]


def of_kind(app: durably.App, run_id: str, kind: EventKind) -> list[Event]:
    return [e for e in app.client.history(run_id) if e.kind is kind]


def inbox_rows(store_url: str) -> int:
    """How many messages wait in the inbox (a no-op update's row count: execute_sql gives
    row counts, not rows)."""
    return execute_sql(store_url, "UPDATE durably_inbox SET kind = kind")


def flaky_app(app: durably.App, calls: list[str], *, failures: int = 1) -> None:
    """`job()`: one step that fails `failures` times (retried 10s later), then returns."""

    @app.step(retry=Retry(attempts=5, initial="10s", jitter="none"))
    async def call_bank() -> str:
        calls.append("call_bank")
        if len(calls) <= failures:
            raise ConnectionError("bank unreachable")
        return "paid"

    @app.workflow
    async def job() -> str:
        return await call_bank()  # type: ignore[no-any-return]


def test_a_message_wakes_a_run_in_backoff_and_the_retry_keeps_its_time(
    app: durably.App, clock: FakeClock, store_url: str
) -> None:
    calls: list[str] = []
    flaky_app(app, calls)
    app.start("job", id="run-1")
    app.run_until_idle()
    retry_at = app.client.get("run-1").available_at
    assert retry_at == clock.now() + timedelta(seconds=10)

    clock.advance("2s")
    sent_at = clock.now()
    delivered = app.client.send("run-1", "signal", name="approved", data={"by": "erin"}, by="erin")
    assert delivered.stored
    assert app.client.get("run-1").available_at == clock.now()  # woken
    app.run_until_idle()

    assert calls == ["call_bank"]  # no early attempt
    record = app.client.get("run-1")
    assert record.status is RunStatus.PENDING
    assert record.available_at == retry_at
    assert messages(app, "run-1") == [
        MessageReceived(
            delivered.message_id, "signal", "approved", '{"by":"erin"}', "erin", sent_at
        )
    ]
    assert inbox_rows(store_url) == 0

    clock.advance("10s")
    app.run_until_idle()

    assert calls == ["call_bank", "call_bank"]
    assert app.handle("run-1").result(timeout=0) == "paid"
    assert len(messages(app, "run-1")) == 1
    assert [e.attempt for e in of_kind(app, "run-1", EventKind.STEP_STARTED)] == [1, 2]


def test_a_message_to_a_running_run_is_folded_as_soon_as_the_run_is_handed_back(
    app: durably.App, clock: FakeClock, store_url: str
) -> None:
    """A message that comes while the run is leased is not folded by that lease; the run's
    hand-back to wait (here a retry's backoff) is due at once, so the next claim folds it,
    and the run then waits for its retry as before."""
    calls: list[str] = []

    @app.step(retry=Retry(attempts=3, initial="10s", jitter="none"))
    async def ask() -> str:
        calls.append("ask")
        if len(calls) == 1:  # sent while this run is leased
            sent = app.client.send("run-1", "signal", name="during", by="ops")
            assert app.client.get("run-1").status is RunStatus.RUNNING
            assert sent.stored
            raise ConnectionError("try later")
        return "ok"

    @app.workflow
    async def job() -> str:
        return await ask()  # type: ignore[no-any-return]

    app.start(job, id="run-1")
    app.run_until_idle()
    [received] = messages(app, "run-1")  # folded by the claim that followed the hand-back
    assert (received.name, received.sender) == ("during", "ops")
    assert inbox_rows(store_url) == 0
    assert calls == ["ask"]  # the message did not bring the retry forward
    assert app.client.get("run-1").available_at == clock.now() + timedelta(seconds=10)
    history = kinds(app.client.history("run-1"))
    second_claim = len(history) - 1 - history[::-1].index("claimed")
    assert history[second_claim + 1] == "message_received"  # folded before replay goes on

    clock.advance("10s")
    app.run_until_idle()
    assert app.handle("run-1").result(timeout=0) == "ok"
    assert calls == ["ask", "ask"]


def test_a_worker_that_dies_before_its_first_checkpoint_leaves_the_message_to_the_next(
    app: durably.App, store: Store, clock: FakeClock, store_url: str
) -> None:
    calls: list[str] = []
    flaky_app(app, calls, failures=0)
    app.start("job", id="run-1")
    app.client.send("run-1", "signal", name="go", by="erin")
    # A worker claims the run with its message, then dies without writing anything.
    [dead] = store.claim("dead-worker", ["job"], now=clock.now(), lease=DEAD_LEASE, limit=1)
    assert [d.name for d in dead.inbox] == ["go"]

    assert app.run_until_idle() == 0  # its lease still holds
    clock.advance(DEAD_LEASE + timedelta(seconds=1))
    assert app.run_until_idle() == 1

    assert app.handle("run-1").result(timeout=0) == "paid"
    assert [m.name for m in messages(app, "run-1")] == ["go"]
    assert inbox_rows(store_url) == 0


def test_a_message_to_a_run_waiting_at_a_gate_does_not_ask_the_gate_early(
    app: durably.App, clock: FakeClock
) -> None:
    app.dependency("sms", Dependency(breaker=None, rate=0.1, burst=1))  # one per 10s
    sent: list[str] = []

    @app.step(dependency="sms")
    async def text(who: str) -> None:
        sent.append(who)

    @app.workflow
    async def notify(who: str) -> None:
        await text(who)

    app.start(notify, "ann", id="first")
    app.run_until_idle()
    app.start(notify, "bob", id="second")
    app.run_until_idle()
    [waited] = of_kind(app, "second", EventKind.STEP_WAITING)
    until = app.client.get("second").available_at
    assert until is not None
    assert until > clock.now()

    clock.advance("1s")
    app.client.send("second", "signal", by="ops")
    app.run_until_idle()

    assert sent == ["ann"]
    assert of_kind(app, "second", EventKind.STEP_WAITING) == [waited]  # no new gate check
    assert app.client.get("second").available_at == until
    assert len(messages(app, "second")) == 1

    clock.advance("10s")
    app.run_until_idle()
    assert sent == ["ann", "bob"]


def test_a_message_to_a_run_whose_undo_waits_does_not_undo_early(
    app: durably.App, clock: FakeClock
) -> None:
    refunds: list[str] = []

    @app.step(retry=Retry(attempts=3, initial="10s", jitter="none"))
    async def charge() -> int:
        return 7

    @charge.compensation
    async def refund(charged: int) -> None:
        refunds.append("refund")
        if len(refunds) == 1:
            raise ConnectionError("bank unreachable")

    @app.step
    async def confirm() -> None:
        raise Terminal("the shop said no")

    @app.workflow
    async def order() -> None:
        await charge()
        await confirm()

    app.start(order, id="run-1")
    app.run_until_idle()
    due = app.client.get("run-1").available_at
    assert refunds == ["refund"]
    assert due == clock.now() + timedelta(seconds=10)

    clock.advance("1s")
    app.client.send("run-1", "signal", by="ops")
    app.run_until_idle()

    assert refunds == ["refund"]
    assert app.client.get("run-1").available_at == due
    assert len(of_kind(app, "run-1", EventKind.COMPENSATION_STARTED)) == 1
    assert len(messages(app, "run-1")) == 1

    clock.advance("10s")
    app.run_until_idle()
    assert refunds == ["refund", "refund"]
    assert app.client.get("run-1").status is RunStatus.FAILED


def test_the_client_refuses_what_cannot_be_delivered(app: durably.App, clock: FakeClock) -> None:
    calls: list[str] = []
    flaky_app(app, calls, failures=0)
    app.start("job", id="run-1")

    with pytest.raises(RunNotFound, match="nobody"):
        app.client.send("nobody", "signal", by="erin")
    with pytest.raises(PayloadError):
        app.client.send("run-1", "signal", data={1, 2}, by="erin")  # a set would come back a list
    first = app.client.send("run-1", "signal", by="erin", dedupe_key="approve")
    again = app.client.send("run-1", "signal", by="erin", dedupe_key="approve")
    assert (again.message_id, again.stored) == (first.message_id, False)

    app.run_until_idle()
    assert len(messages(app, "run-1")) == 1
    with pytest.raises(DurablyError, match=r"has finished \(completed\)"):
        app.client.send("run-1", "signal", by="erin")


def test_send_async_delivers_like_send(app: durably.App) -> None:
    calls: list[str] = []
    flaky_app(app, calls, failures=0)
    app.start("job", id="run-1")

    delivered = asyncio.run(app.client.send_async("run-1", "note", by="ops", data=[1, 2]))

    assert delivered.stored
    assert json.loads(_inbox_data(app, delivered.message_id)) == [1, 2]


def _inbox_data(app: durably.App, message_id: int) -> Any:
    store = app.store
    [claim] = store.claim("peek", ["job"], now=app.clock.now(), lease=DEAD_LEASE, limit=1)
    [delivery] = [d for d in claim.inbox if d.id == message_id]
    return delivery.data
