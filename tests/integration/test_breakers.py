"""Circuit breakers on the engine: a failing dependency opens its breaker and steps wait
without spending attempts; a probe closes it again or keeps it open; business failures and
throttles do not count; and every worker on the store obeys the same breaker."""

from __future__ import annotations

from datetime import datetime, timedelta

import durably
from durably import Retry, RunStatus
from durably.core.history import EventKind
from durably.resilience import Breaker, Dependency
from durably.testing import FakeClock

from .conftest import attempts_of, data, events, gate, settle


class Payments:
    """The outside world: a payment service that answers 503 until it is `up`."""

    def __init__(self) -> None:
        self.up = False
        self.calls: list[str] = []

    def charge(self, order: str) -> str:
        self.calls.append(order)
        if not self.up:
            raise ConnectionError("payments: 503")
        return f"ch-{order}"


def payments_app(app: durably.App, payments: Payments) -> None:
    app.dependency("pay", Dependency(breaker=Breaker(threshold=3, window="60s", cooldown="30s")))

    @app.step(dependency="pay", retry=Retry(attempts=10, initial="1s", jitter="none"))
    async def charge(order: str) -> str:
        return payments.charge(order)

    @app.workflow
    async def checkout(order: str) -> str:
        result: str = await charge(order)
        return result


def test_a_failing_dependency_opens_the_breaker_and_steps_wait_without_attempts(
    app: durably.App, clock: FakeClock
) -> None:
    payments = Payments()
    payments_app(app, payments)
    first = [app.start("checkout", f"o{n}", id=f"o{n}") for n in range(3)]
    app.run_until_idle()
    opened = clock.now()

    assert len(payments.calls) == 3
    assert gate(app, "pay").breaker == "open"

    late = app.start("checkout", "late", id="late")
    clock.advance("5s")  # the first three are due for their retries
    app.run_until_idle()
    assert len(payments.calls) == 3  # nobody called the failing service
    for handle in [*first, late]:
        run = app.client.get(handle.id)
        assert run.status is RunStatus.PENDING
        assert run.available_at == opened + timedelta(seconds=30)
    assert attempts_of(app, "late") == 0
    [waiting] = events(app, "late", EventKind.STEP_WAITING)
    assert (waiting.position, waiting.name, waiting.attempt) == (0, "charge", None)
    assert data(waiting) == {
        "waiting": "breaker open",
        "dependency": "pay",
        "until": (opened + timedelta(seconds=30)).isoformat(),
    }
    assert [attempts_of(app, h.id) for h in first] == [1, 1, 1]

    payments.up = True
    settle(app, clock)
    assert gate(app, "pay").breaker == "closed"
    for handle in [*first, late]:
        assert handle.result(timeout=0) == f"ch-{handle.id}"
    assert [attempts_of(app, h.id) for h in first] == [2, 2, 2]  # waiting spent no attempt
    assert attempts_of(app, "late") == 1
    assert len(payments.calls) == 7
    charge_attempts = [e.attempt for e in events(app, "late", EventKind.STEP_STARTED)]
    assert charge_attempts == [1]
    # one event per wait: looking again (at the cooldown's end, finding a probe out) adds none
    waits = [len(events(app, h.id, EventKind.STEP_WAITING)) for h in [*first, late]]
    assert waits == [1, 1, 1, 1]


def test_a_failed_probe_keeps_the_breaker_open(app: durably.App, clock: FakeClock) -> None:
    payments = Payments()
    payments_app(app, payments)
    for n in range(3):
        app.start("checkout", f"o{n}", id=f"o{n}")
    app.run_until_idle()
    clock.advance("30s")

    app.run_until_idle()  # one probe goes out, fails; the breaker opens again
    assert len(payments.calls) == 4
    state = gate(app, "pay")
    assert state.breaker == "open"
    assert state.opened_at == clock.now().timestamp()

    payments.up = True
    settle(app, clock)
    assert len(payments.calls) == 7
    assert all(run.status is RunStatus.COMPLETED for run in app.client.runs().runs)


def test_business_failures_do_not_open_the_breaker(app: durably.App, clock: FakeClock) -> None:
    app.dependency("pay", Dependency(breaker=Breaker(threshold=2, cooldown="30s")))

    @app.step(dependency="pay")
    async def charge(order: str) -> str:
        raise durably.Terminal("card declined")

    @app.workflow
    async def checkout(order: str) -> str:
        result: str = await charge(order)
        return result

    for n in range(5):
        app.start(checkout, f"o{n}")
    app.run_until_idle()
    assert gate(app, "pay").breaker == "closed"
    assert all(run.status is RunStatus.FAILED for run in app.client.runs().runs)


def test_the_breaker_is_shared_by_every_worker_on_the_store(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    """Two Apps on one store are two worker processes: what one learns, the other obeys."""
    payments = Payments()
    payments_app(app, payments)
    payments_app(other_app, payments)
    for n in range(3):
        app.start("checkout", f"o{n}", id=f"o{n}")
    app.run_until_idle()  # worker one opens the breaker
    assert gate(other_app, "pay").breaker == "open"

    other_app.start("checkout", "fresh", id="fresh")
    other_app.run_until_idle()  # worker two does not call the service at all
    assert len(payments.calls) == 3
    assert attempts_of(other_app, "fresh") == 0
    [waiting] = events(other_app, "fresh", EventKind.STEP_WAITING)
    assert data(waiting)["waiting"] == "breaker open"

    payments.up = True
    clock.advance("30s")
    other_app.run_until_idle()  # worker two's probe succeeds and closes it for everyone
    assert gate(app, "pay").breaker == "closed"
    settle(app, clock)
    assert all(run.status is RunStatus.COMPLETED for run in app.client.runs().runs)


def test_throttled_attempts_slow_the_rate_and_do_not_open_the_breaker(
    app: durably.App, clock: FakeClock
) -> None:
    breaker = Breaker(threshold=2, cooldown="30s")
    app.dependency("sms", Dependency(breaker=breaker, rate=1.0, burst=1))
    throttles = {"first": 3}  # more than the breaker's threshold

    @app.step(dependency="sms", retry=Retry(attempts=10, initial="1s", jitter="none"))
    async def text(who: str) -> str:
        if throttles.get(who):
            throttles[who] -= 1
            raise durably.Throttled("429 slow down", retry_after="20s")
        return f"sent to {who}"

    @app.workflow
    async def notify(who: str) -> str:
        result: str = await text(who)
        return result

    app.start(notify, "first", id="first")
    app.run_until_idle()
    throttled_at = clock.now()
    clock.advance("5s")  # the bucket would have refilled by now
    app.start(notify, "second", id="second")
    app.run_until_idle()

    [waiting] = events(app, "second", EventKind.STEP_WAITING)
    assert data(waiting)["waiting"] == "rate limit"
    assert datetime.fromisoformat(data(waiting)["until"]) == throttled_at + timedelta(seconds=20)
    assert attempts_of(app, "second") == 0

    settle(app, clock)
    assert app.handle("first").result(timeout=0) == "sent to first"
    assert app.handle("second").result(timeout=0) == "sent to second"
    assert attempts_of(app, "first") == 4
    assert gate(app, "sms").breaker == "closed"
    histories = [events(app, run_id) for run_id in ("first", "second")]
    waits = [data(e)["waiting"] for h in histories for e in h if e.kind is EventKind.STEP_WAITING]
    assert "breaker open" not in waits
    # no attempt started within 20 s after a throttle, whichever run made it
    throttles_at = [e.at for h in histories for e in h if e.kind is EventKind.STEP_ATTEMPT_FAILED]
    starts = [e.at for h in histories for e in h if e.kind is EventKind.STEP_STARTED]
    assert len(throttles_at) == 3
    assert not [(t, s) for t in throttles_at for s in starts if t < s < t + timedelta(seconds=20)]
