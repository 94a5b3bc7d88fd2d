"""Circuit breakers, rate and concurrency limits per dependency: the pure gate logic, then
the engine using it through the store, shared by every worker."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable
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
SLOW_DOWN = timedelta(seconds=1)  # a throttled attempt's retry_after


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


def test_while_the_probe_is_out_everyone_else_waits_in_line() -> None:
    state = open_breaker()
    assert enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD) == Enter()
    answer = enter(BREAKER, state, holder="other:0", now=at(41), hold=HOLD)
    # due when the probe's hold runs out, woken before if it reports back
    assert answer == Wait(at(50), "breaker open", woken=True)
    assert state.waiting == {"other:0": at(41).timestamp()}


@pytest.mark.parametrize("failed", [False, True], ids=["probe succeeds", "probe fails"])
def test_the_end_of_the_probe_wakes_everyone_in_line(failed: bool) -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    for n, when in enumerate((43, 41, 42)):
        enter(BREAKER, state, holder=f"r{n}:0", now=at(when), hold=HOLD)

    woken = leave(BREAKER, state, holder="probe:0", now=at(44), failed=failed)

    assert woken == ["r1:0", "r2:0", "r0:0"]  # longest waiting first
    assert state.waiting == {}
    if failed:  # open again: the woken look once more, and wait for the cooldown, out of line
        assert enter(BREAKER, state, holder="r1:0", now=at(44), hold=HOLD) == Wait(
            at(74), "breaker open"
        )
    else:
        assert enter(BREAKER, state, holder="r1:0", now=at(44), hold=HOLD) == Enter()
    assert state.waiting == {}


def test_an_attempt_that_ends_while_the_breaker_is_closed_wakes_nobody() -> None:
    state = GateState()
    enter(BREAKER, state, holder="a:0", now=at(0), hold=HOLD)
    assert leave(BREAKER, state, holder="a:0", now=at(1), failed=True) == []


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
    assert state.waiting == {}  # the new probe is out of line
    answer = enter(BREAKER, state, holder="s:0", now=at(51), hold=HOLD)
    assert answer == Wait(at(60), "breaker open", woken=True)


def test_the_gate_state_round_trips_through_its_stored_text() -> None:
    state = open_breaker()
    state.waiting = {"r:0": at(3).timestamp()}
    assert GateState.load(state.dump()) == state
    assert GateState.load(None) == GateState()


def test_a_state_stored_before_gates_kept_a_line_still_loads() -> None:
    stored = dict(json.loads(open_breaker().dump()))
    del stored["waiting"]
    assert GateState.load(json.dumps(stored)) == open_breaker()


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
    assert answer == Wait(at(10), "concurrency limit", woken=True)  # nobody gives it back
    assert enter(policy, state, holder="next:0", now=at(10), hold=HOLD) == Enter()
    assert state.waiting == {}


def test_a_slot_given_back_wakes_the_longest_waiting_run() -> None:
    policy = Dependency(breaker=None, concurrency=1)
    state = GateState()
    assert enter(policy, state, holder="a:0", now=at(0), hold=HOLD) == Enter()
    for holder, when in (("b:0", 1), ("c:0", 2), ("d:0", 3)):
        answer = enter(policy, state, holder=holder, now=at(when), hold=HOLD)
        assert answer == Wait(at(10), "concurrency limit", woken=True)  # a's slot expires then
    again = enter(policy, state, holder="c:0", now=at(4), hold=HOLD)  # a look: the same place
    assert again == Wait(at(10), "concurrency limit", woken=True)
    assert list(state.waiting) == ["b:0", "c:0", "d:0"]

    assert leave(policy, state, holder="a:0", now=at(5), failed=False) == ["b:0"]  # one slot
    # a newcomer takes the slot before b comes: b waits again, keeping its place in line
    assert enter(policy, state, holder="x:0", now=at(5), hold=HOLD) == Enter()
    answer = enter(policy, state, holder="b:0", now=at(6), hold=HOLD, since=at(1))
    assert answer == Wait(at(15), "concurrency limit", woken=True)

    assert leave(policy, state, holder="x:0", now=at(7), failed=False) == ["b:0"]
    assert enter(policy, state, holder="b:0", now=at(7), hold=HOLD) == Enter()
    assert leave(policy, state, holder="b:0", now=at(8), failed=False) == ["c:0"]
    assert list(state.waiting) == ["d:0"]
    # an attempt that held no slot frees none, and wakes nobody
    assert leave(policy, state, holder="nobody:0", now=at(9), failed=False) == []


def test_a_run_that_waits_for_a_token_instead_leaves_the_line() -> None:
    policy = Dependency(breaker=None, rate=1.0, burst=1, concurrency=1)
    state = GateState()
    assert enter(policy, state, holder="a:0", now=at(0), hold=HOLD) == Enter()
    assert enter(policy, state, holder="b:0", now=at(0), hold=HOLD) == Wait(
        at(10), "concurrency limit", woken=True
    )
    assert leave(policy, state, holder="a:0", now=at(0.5), failed=False) == ["b:0"]
    # the slot is free, the next token is not: b is due for it, and not in line any more
    assert enter(policy, state, holder="b:0", now=at(0.5), hold=HOLD) == Wait(at(1), "rate limit")
    assert state.waiting == {}


def test_the_line_is_kept_short() -> None:
    policy = Dependency(breaker=None, concurrency=1)
    state = GateState()
    enter(policy, state, holder="a:0", now=at(0), hold=HOLD)
    answers = [enter(policy, state, holder=f"r{n}:0", now=at(1), hold=HOLD) for n in range(1001)]
    assert len(state.waiting) == 1000
    assert "r1000:0" not in state.waiting  # it waits until its due time, for the slot's expiry
    assert answers[-1] == Wait(at(10), "concurrency limit", woken=True)


# -- Throttled: the rate limit's business, not the breaker's -----------------------------------


def test_throttled_attempts_do_not_count_as_breaker_failures() -> None:
    state = GateState()
    for when in range(5):
        enter(BREAKER, state, holder="r:0", now=at(when), hold=HOLD)
        leave(BREAKER, state, holder="r:0", now=at(when), failed=True, throttled=SLOW_DOWN)
    assert (state.breaker, state.failures) == ("closed", 0)
    # nor do they prove the service healthy: failures around them still add up
    attempt(BREAKER, state, 10, failed=True)
    attempt(BREAKER, state, 11, failed=True)
    enter(BREAKER, state, holder="r:0", now=at(12), hold=HOLD)
    leave(BREAKER, state, holder="r:0", now=at(12), failed=True, throttled=SLOW_DOWN)
    attempt(BREAKER, state, 13, failed=True)
    assert state.breaker == "open"


def test_a_throttled_probe_closes_the_breaker_and_wakes_the_line() -> None:
    state = open_breaker()
    enter(BREAKER, state, holder="probe:0", now=at(40), hold=HOLD)
    enter(BREAKER, state, holder="r:0", now=at(41), hold=HOLD)
    pause = timedelta(seconds=5)
    woken = leave(BREAKER, state, holder="probe:0", now=at(42), failed=True, throttled=pause)
    assert woken == ["r:0"]
    assert state.breaker == "closed"


def test_a_throttle_empties_the_bucket_until_retry_after() -> None:
    policy = Dependency(breaker=None, rate=2.0, burst=5)
    state = GateState()
    assert enter(policy, state, holder="a:0", now=at(0), hold=HOLD) == Enter()
    leave(policy, state, holder="a:0", now=at(1), failed=True, throttled=timedelta(seconds=10))

    assert enter(policy, state, holder="b:0", now=at(2), hold=HOLD) == Wait(at(11), "rate limit")
    assert enter(policy, state, holder="b:0", now=at(11), hold=HOLD) == Enter()
    # from there the bucket fills again at the rate
    assert enter(policy, state, holder="c:0", now=at(11), hold=HOLD) == Wait(at(11.5), "rate limit")
    admitted = [enter(policy, state, holder=f"q{n}:0", now=at(100), hold=HOLD) for n in range(6)]
    assert admitted.count(Enter()) == 5


def test_a_throttle_shorter_than_a_token_still_empties_the_bucket() -> None:
    policy = Dependency(breaker=None, rate=0.1, burst=3)  # a token every 10 s
    state = GateState()
    enter(policy, state, holder="a:0", now=at(0), hold=HOLD)
    leave(policy, state, holder="a:0", now=at(0), failed=True, throttled=SLOW_DOWN)
    assert enter(policy, state, holder="b:0", now=at(1), hold=HOLD) == Wait(at(10), "rate limit")


def test_a_throttle_without_a_rate_limit_changes_nothing() -> None:
    policy = Dependency(breaker=None)
    state = GateState()
    enter(policy, state, holder="a:0", now=at(0), hold=HOLD)
    leave(policy, state, holder="a:0", now=at(0), failed=True, throttled=timedelta(seconds=30))
    assert state == GateState()
    assert enter(policy, state, holder="b:0", now=at(0), hold=HOLD) == Enter()


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


# -- waits that cost nothing: woken when the gate opens ---------------------------------------


def set_gate(app: durably.App, name: str, state: GateState) -> None:
    """Leave a gate in `state`, as other workers would have."""
    app.store.update_gate(name, lambda _: (state.dump(), None))


def probed_app(app: durably.App, answer: threading.Event) -> None:
    """A payments service whose probe call (order "probe") hangs until `answer` is set."""
    app.dependency("pay", Dependency(breaker=Breaker(threshold=3, cooldown="30s")))

    @app.step(dependency="pay", timeout="15m")
    async def charge(order: str) -> str:
        if order == "probe":
            assert await asyncio.to_thread(answer.wait, 30)
        return f"ch-{order}"

    @app.workflow
    async def checkout(order: str) -> str:
        result: str = await charge(order)
        return result


def eventually(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Wait (in real time) for another worker's thread to get somewhere."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.01)


def test_a_run_behind_a_probe_in_flight_waits_quietly_and_is_woken_when_it_ends(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    answer = threading.Event()
    probed_app(app, answer)
    probed_app(other_app, answer)
    # the breaker opened a minute ago: its cooldown is over, the next attempt is the probe
    set_gate(app, "pay", GateState(breaker="open", opened_at=clock.now().timestamp() - 60))
    start = clock.now()
    other_app.start("checkout", "probe", id="probe")
    # another worker sends the probe; its call hangs (a lease long enough for the test)
    prober = threading.Thread(target=lambda: other_app.run_until_idle(lease="1h"))
    prober.start()
    try:
        eventually(lambda: gate(app, "pay").breaker == "half_open", "the probe goes out")
        app.start("checkout", "queued", id="queued")
        app.run_until_idle()
        assert app.get_run("queued").available_at == start + timedelta(minutes=15)  # its hold

        for _ in range(20):  # ten minutes pass, in which workers look for due runs
            clock.advance("30s")
            app.run_until_idle()
        kinds = [str(e.kind) for e in events(app, "queued")]
        assert kinds == ["run_started", "claimed", "step_waiting"]  # nobody looked again
        assert app.get_run("queued").status is RunStatus.PENDING
    finally:
        answer.set()  # the probe succeeds
        prober.join(timeout=30)
    assert not prober.is_alive()
    app.run_until_idle()

    assert app.handle("queued").result(timeout=0) == "ch-queued"
    history = events(app, "queued")
    assert [str(e.kind) for e in history] == [
        "run_started",
        "claimed",
        "step_waiting",
        "claimed",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    woken_at = history[3].at
    assert woken_at == start + timedelta(minutes=10) == clock.now()  # not at its due time
    due = start + timedelta(minutes=15)  # recorded as due then; woken before, by the gate
    assert data(history[2]) == {
        "waiting": "breaker open",
        "dependency": "pay",
        "until": due.isoformat(),
    }
    state = gate(app, "pay")
    assert (state.breaker, state.waiting) == ("closed", {})


async def until_waiting(app: durably.App, run_id: str) -> None:
    """In a step body: wait (as a long call would) until `run_id` has handed itself back to
    wait at a gate."""
    deadline = time.monotonic() + 30
    while True:
        history = await asyncio.to_thread(app.history, run_id)
        run = await asyncio.to_thread(app.get_run, run_id)
        waiting = any(e.kind is EventKind.STEP_WAITING for e in history)
        if waiting and run.status is RunStatus.PENDING:
            return
        assert time.monotonic() < deadline, f"{run_id} did not wait"
        await asyncio.sleep(0.01)


def test_runs_behind_a_full_concurrency_limit_are_woken_in_turn_as_the_slot_frees(
    app: durably.App, clock: FakeClock
) -> None:
    app.dependency("warehouse", Dependency(breaker=None, concurrency=1))
    picked: list[str] = []

    @app.step(dependency="warehouse", timeout="10m")
    async def pick(item: str) -> str:
        if item == "first":  # while it holds the slot, three runs queue for it, in turn
            for n in range(3):
                await app.start_async(fulfil, f"item-{n}", id=f"item-{n}")
                await until_waiting(app, f"item-{n}")
        picked.append(item)
        return f"picked {item}"

    @app.workflow
    async def fulfil(item: str) -> str:
        result: str = await pick(item)
        return result

    start = clock.now()
    app.start(fulfil, "first", id="first")
    app.run_until_idle()  # the clock stands still: nobody waits for a slot's hold to run out

    assert picked == ["first", "item-0", "item-1", "item-2"]
    assert clock.now() == start
    for n in range(3):
        assert app.handle(f"item-{n}").result(timeout=0) == f"picked item-{n}"
        history = events(app, f"item-{n}")
        assert [str(e.kind) for e in history] == [
            "run_started",
            "claimed",
            "step_waiting",
            "claimed",
            "step_started",
            "step_completed",
            "run_completed",
        ]
        assert data(history[2])["waiting"] == "concurrency limit"
    state = gate(app, "warehouse")
    assert (state.in_flight, state.waiting) == ({}, {})


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
