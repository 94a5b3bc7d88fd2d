"""Circuit breakers, rate and concurrency limits per dependency: the pure gate logic, then
the engine using it through the store, shared by every worker."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import UTC, datetime, timedelta

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.history import EventKind
from durably.resilience import Breaker, Dependency, Enter, GateState, Wait
from durably.resilience.gates import enter, leave
from durably.testing import FakeClock

from .conftest import data, events, settle

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOLD = timedelta(seconds=10)
BREAKER = Dependency(breaker=Breaker(threshold=3, window="60s", cooldown="30s"))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def attempt(
    policy: Dependency, state: GateState, when: float, *, failed: bool, holder: str = "run:0"
) -> Enter | Wait:
    """One whole attempt at time `when`: enter, and if admitted, leave with the outcome."""
    answer = enter(policy, state, holder=holder, now=at(when), hold=HOLD)
    if isinstance(answer, Enter):
        leave(policy, state, holder=holder, now=at(when), failed=failed)
    return answer


# -- the breaker, pure ----------------------------------------------------------------------


def test_the_breaker_opens_after_threshold_failures_within_the_window() -> None:
    state = GateState()
    assert attempt(BREAKER, state, 0, failed=True) == Enter()
    assert attempt(BREAKER, state, 10, failed=True) == Enter()
    assert state.breaker == "closed"
    assert attempt(BREAKER, state, 20, failed=True) == Enter()
    assert state.breaker == "open"

    assert enter(BREAKER, state, holder="other:0", now=at(21), hold=HOLD) == Wait(
        at(50), "breaker open"
    )


def test_failures_spread_wider_than_the_window_do_not_open_it() -> None:
    state = GateState()
    for when in (0, 40, 80, 120, 160):  # never three within 60 s
        assert attempt(BREAKER, state, when, failed=True) == Enter()
    assert state.breaker == "closed"


def test_a_success_resets_the_failure_count() -> None:
    state = GateState()
    attempt(BREAKER, state, 0, failed=True)
    attempt(BREAKER, state, 1, failed=True)
    attempt(BREAKER, state, 2, failed=False)
    attempt(BREAKER, state, 3, failed=True)
    attempt(BREAKER, state, 4, failed=True)
    assert state.breaker == "closed"
    attempt(BREAKER, state, 5, failed=True)
    assert state.breaker == "open"


def open_breaker() -> GateState:
    state = GateState()
    for when in (0, 1, 2):
        attempt(BREAKER, state, when, failed=True)
    assert (state.breaker, state.opened_at) == ("open", at(2).timestamp())
    return state


def test_an_open_breaker_waits_until_the_cooldown_ends() -> None:
    state = open_breaker()
    for when in (2, 15, 31.999):
        answer = enter(BREAKER, state, holder="r:0", now=at(when), hold=HOLD)
        assert answer == Wait(at(32), "breaker open")
    answer = enter(BREAKER, state, holder="r:0", now=at(32), hold=HOLD)
    assert answer == Enter()
    assert state.breaker == "half_open"


def test_while_the_probe_is_out_everyone_else_waits() -> None:
    state = open_breaker()
    assert enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD) == Enter()
    answer = enter(BREAKER, state, holder="other:0", now=at(41), hold=HOLD)
    assert isinstance(answer, Wait)
    assert answer.reason == "breaker open"
    assert at(41) < answer.until <= at(50)  # looks again soon, at most when the probe expires


def test_a_successful_probe_closes_the_breaker() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    leave(BREAKER, state, holder="probe:0", now=at(41), failed=False)
    assert state.breaker == "closed"
    assert attempt(BREAKER, state, 42, failed=False, holder="x:0") == Enter()
    # and it takes the full threshold to open it again
    attempt(BREAKER, state, 43, failed=True)
    attempt(BREAKER, state, 44, failed=True)
    assert state.breaker == "closed"


def test_a_failed_probe_opens_the_breaker_for_another_cooldown() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    leave(BREAKER, state, holder="probe:0", now=at(41), failed=True)
    assert state.breaker == "open"
    assert enter(BREAKER, state, holder="r:0", now=at(42), hold=HOLD) == Wait(
        at(71), "breaker open"
    )
    assert enter(BREAKER, state, holder="r:0", now=at(71), hold=HOLD) == Enter()


def test_a_probe_that_never_reports_back_is_replaced_after_its_hold() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="lost:0", now=at(40), hold=HOLD)  # its worker dies
    assert isinstance(enter(BREAKER, state, holder="r:0", now=at(49), hold=HOLD), Wait)
    assert enter(BREAKER, state, holder="r:0", now=at(50), hold=HOLD) == Enter()


def test_the_gate_state_round_trips_through_its_stored_text() -> None:
    state = open_breaker()
    assert GateState.load(state.dump()) == state
    assert GateState.load(None) == GateState()


# -- rate and concurrency limits, pure --------------------------------------------------------


def test_the_token_bucket_allows_a_burst_then_the_rate() -> None:
    policy = Dependency(breaker=None, rate=2.0, burst=3)
    state = GateState()
    answers = [enter(policy, state, holder=f"r{n}:0", now=at(0), hold=HOLD) for n in range(4)]
    assert answers[:3] == [Enter()] * 3
    assert answers[3] == Wait(at(0.5), "rate limit")
    assert enter(policy, state, holder="r3:0", now=at(0.5), hold=HOLD) == Enter()
    assert isinstance(enter(policy, state, holder="r4:0", now=at(0.5), hold=HOLD), Wait)

    # a long quiet spell refills the bucket to its burst, no more
    admitted = [enter(policy, state, holder=f"q{n}:0", now=at(100), hold=HOLD) for n in range(5)]
    assert admitted.count(Enter()) == 3


def test_the_token_bucket_holds_the_rate_over_time() -> None:
    policy = Dependency(breaker=None, rate=5.0, burst=1)
    state = GateState()
    admitted = 0
    for tick in range(1_000):  # ten seconds in steps of 10 ms
        if enter(policy, state, holder=f"r{tick}:0", now=at(tick / 100), hold=HOLD) == Enter():
            admitted += 1
    assert admitted in (50, 51)


def test_concurrency_slots_are_shared_and_freed() -> None:
    policy = Dependency(breaker=None, concurrency=2)
    state = GateState()
    assert enter(policy, state, holder="a:0", now=at(0), hold=HOLD) == Enter()
    assert enter(policy, state, holder="b:0", now=at(0), hold=HOLD) == Enter()
    waiting = enter(policy, state, holder="c:0", now=at(0), hold=HOLD)
    assert isinstance(waiting, Wait)
    assert waiting.reason == "concurrency limit"
    assert enter(policy, state, holder="a:0", now=at(1), hold=HOLD) == Enter()  # its own slot

    leave(policy, state, holder="a:0", now=at(2), failed=False)
    assert enter(policy, state, holder="c:0", now=at(2), hold=HOLD) == Enter()
    assert isinstance(enter(policy, state, holder="d:0", now=at(3), hold=HOLD), Wait)


def test_a_slot_whose_holder_died_frees_itself_after_the_hold() -> None:
    policy = Dependency(breaker=None, concurrency=1)
    state = GateState()
    assert enter(policy, state, holder="dead:0", now=at(0), hold=HOLD) == Enter()
    answer = enter(policy, state, holder="next:0", now=at(5), hold=HOLD)
    assert isinstance(answer, Wait)
    assert answer.until <= at(10)
    assert enter(policy, state, holder="next:0", now=at(10), hold=HOLD) == Enter()


@pytest.mark.parametrize(
    "make",
    [
        lambda: Breaker(threshold=0),
        lambda: Breaker(cooldown="soon"),
        lambda: Dependency(rate=0),
        lambda: Dependency(concurrency=0),
    ],
    ids=["threshold", "cooldown", "rate", "concurrency"],
)
def test_nonsense_policies_are_refused(make: object) -> None:
    with pytest.raises((ValueError, durably.ConfigError)):
        make()  # type: ignore[operator]


# -- the engine -------------------------------------------------------------------------------


class Payments:
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


def gate(app: durably.App, name: str) -> GateState:
    return GateState.load(app.store.gates().get(name))


def attempts_of(app: durably.App, run_id: str) -> int:
    return len(events(app, run_id, EventKind.STEP_STARTED))


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
        run = app.get_run(handle.id)
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
    assert all(run.status is RunStatus.COMPLETED for run in app.runs())


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
    assert all(run.status is RunStatus.FAILED for run in app.runs())


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
    assert all(run.status is RunStatus.COMPLETED for run in app.runs())


def test_a_rate_limit_spaces_attempts_out(app: durably.App, clock: FakeClock) -> None:
    app.dependency("sms", Dependency(breaker=None, rate=1.0, burst=1))
    sent: list[datetime] = []

    @app.step(dependency="sms")
    async def send(text: str) -> None:
        sent.append(clock.now())

    @app.workflow
    async def notify(text: str) -> None:
        await send(text)

    for n in range(4):
        app.start(notify, f"hello {n}")
    settle(app, clock)

    assert len(sent) == 4
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(sent)]
    assert all(gap >= 1.0 for gap in gaps), gaps
    waits = [e for run in app.runs() for e in events(app, run.id, EventKind.STEP_WAITING)]
    assert waits
    assert {data(e)["waiting"] for e in waits} == {"rate limit"}
    assert all(attempts_of(app, run.id) == 1 for run in app.runs())


def test_a_concurrency_limit_caps_attempts_in_flight(app: durably.App, clock: FakeClock) -> None:
    app.dependency("warehouse", Dependency(breaker=None, concurrency=2))
    in_flight = 0
    peak = 0

    @app.step(dependency="warehouse", timeout="5s")
    async def pick(item: str) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return f"picked {item}"

    @app.workflow
    async def fulfil(item: str) -> str:
        result: str = await pick(item)
        return result

    for n in range(6):
        app.start(fulfil, f"item-{n}")
    settle(app, clock)

    assert all(run.status is RunStatus.COMPLETED for run in app.runs())
    assert peak == 2
    waits = [e for run in app.runs() for e in events(app, run.id, EventKind.STEP_WAITING)]
    assert {data(e)["waiting"] for e in waits} == {"concurrency limit"}
    assert json.loads(app.store.gates()["warehouse"])["in_flight"] == {}
