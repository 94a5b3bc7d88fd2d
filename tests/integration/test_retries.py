"""Retries: transient failures are retried with a durable, visible backoff; the rest fail fast.

Backoff waits are due times in the store (a waiting run is `pending` with `available_at`),
so the tests move through them by advancing the fake clock between drains.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

import durably
from durably import Retry, RunStatus, Terminal, Throttled
from durably.core.history import EventKind
from durably.testing import FakeClock
from durably.workflow.context import step_key

from .conftest import data, events, keys_started, retry_delays, settle, step_events


def exact(attempts: int) -> Retry:
    """A policy without jitter: waits of exactly 1 s, 2 s, 4 s ..."""
    return Retry(attempts=attempts, initial="1s", backoff=2.0, max_delay="60s", jitter="none")


class Flaky:
    """A service that fails the first `times` calls with `error`, then answers."""

    def __init__(self, times: int, error: Exception | None = None) -> None:
        self.times = times
        self.error = error or ConnectionError("connection reset by peer")
        self.calls: list[str] = []  # the idempotency key of every call

    def __call__(self, x: int) -> int:
        self.calls.append(durably.idempotency_key())
        if len(self.calls) <= self.times:
            raise self.error
        return x * 2


def one_step_app(app: durably.App, service: Flaky, retry: Retry | None = None) -> durably.Workflow:
    """`double(x)`: one step `call` that asks `service` (retry=None: the app's policy)."""

    @app.step(retry=retry)
    async def call(x: int) -> int:
        return service(x)

    @app.workflow
    async def double(x: int) -> int:
        result: int = await call(x)
        return result

    return double


@pytest.mark.parametrize("failures", [1, 3])
def test_a_transient_failure_is_retried_until_the_step_succeeds(
    app: durably.App, clock: FakeClock, failures: int
) -> None:
    service = Flaky(failures)
    workflow = one_step_app(app, service, retry=exact(5))
    handle = app.start(workflow, 21, id="run-1")

    settle(app, clock)

    assert handle.result(timeout=0) == 42
    assert len(service.calls) == failures + 1
    key = step_key("run-1", 0, "call")
    assert service.calls == [key] * (failures + 1)  # one key for every attempt
    history = app.client.history(handle.id)
    assert keys_started(history) == [key] * (failures + 1)
    expected = []
    for attempt in range(1, failures + 1):
        expected += [("step_started", 0, "call", attempt), ("attempt_failed", 0, "call", attempt)]
    expected += [
        ("step_started", 0, "call", failures + 1),
        ("step_completed", 0, "call", failures + 1),
    ]
    assert step_events(history) == expected
    for event in events(app, handle.id, EventKind.STEP_ATTEMPT_FAILED):
        detail = data(event)
        assert detail["error_class"] == "ConnectionError"
        assert detail["message"] == "connection reset by peer"
        assert detail["unknown"] is False
        assert datetime.fromisoformat(detail["retry_at"]) > event.at


def test_a_custom_idempotency_key_is_the_same_for_every_attempt(
    app: durably.App, clock: FakeClock
) -> None:
    seen: list[str] = []

    @app.step(key=lambda order, amount: f"charge-{order}", retry=exact(3))
    async def charge(order: str, amount: int) -> str:
        seen.append(durably.idempotency_key())
        if len(seen) < 3:
            raise ConnectionError("reset")
        return "ok"

    @app.workflow
    async def pay(order: str) -> str:
        result: str = await charge(order, 10)
        return result

    handle = app.start(pay, "o-17")
    settle(app, clock)
    assert handle.result(timeout=0) == "ok"
    assert seen == ["charge-o-17"] * 3
    assert keys_started(app.client.history(handle.id)) == ["charge-o-17"] * 3


def test_each_attempt_starts_when_its_retry_is_due_and_not_before(
    app: durably.App, clock: FakeClock
) -> None:
    service = Flaky(2)
    workflow = one_step_app(app, service, retry=Retry(attempts=5, initial="10s", jitter="none"))
    handle = app.start(workflow, 1)
    start = clock.now()

    assert app.run_until_idle() == 0  # waiting is not ending
    run = app.client.get(handle.id)
    assert run.status is RunStatus.PENDING
    assert run.available_at == start + timedelta(seconds=10)  # the retry state is in the store
    assert run.lease_owner is None

    clock.advance(timedelta(seconds=9.999))
    assert app.run_until_idle() == 0
    assert len(service.calls) == 1  # not due yet

    clock.set(start + timedelta(seconds=10))
    assert app.run_until_idle() == 0
    assert len(service.calls) == 2
    assert app.client.get(handle.id).available_at == start + timedelta(seconds=30)

    clock.set(start + timedelta(seconds=30))
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == 2
    started = events(app, handle.id, EventKind.STEP_STARTED)
    assert [event.at - start for event in started] == [
        timedelta(0),
        timedelta(seconds=10),
        timedelta(seconds=30),
    ]


def test_backoff_grows_by_its_factor_and_is_capped(app: durably.App, clock: FakeClock) -> None:
    service = Flaky(times=100)
    policy = Retry(attempts=7, initial="1s", backoff=2.0, max_delay="10s", jitter="none")
    workflow = one_step_app(app, service, retry=policy)
    handle = app.start(workflow, 1)

    settle(app, clock)

    assert retry_delays(app.client.history(handle.id)) == [1, 2, 4, 8, 10, 10]
    assert len(service.calls) == 7


def test_full_jitter_stays_between_zero_and_the_capped_backoff(
    app: durably.App, clock: FakeClock
) -> None:
    service = Flaky(times=1_000)
    policy = Retry(attempts=6, initial="1s", backoff=2.0, max_delay="5s", jitter="full")
    workflow = one_step_app(app, service, retry=policy)
    handles = [app.start(workflow, n) for n in range(8)]

    settle(app, clock)

    caps = [1, 2, 4, 5, 5]
    delays: list[tuple[float, float]] = []
    for handle in handles:
        waits = retry_delays(app.client.history(handle.id))
        assert len(waits) == len(caps)
        delays += zip(waits, caps, strict=True)
    assert all(0 <= wait <= cap for wait, cap in delays), delays
    assert len({wait for wait, _ in delays}) > len(delays) // 2  # jittered, not fixed
    assert any(wait < cap / 2 for wait, cap in delays)


def test_exhausted_attempts_park_the_run_as_a_dead_letter(
    app: durably.App, clock: FakeClock
) -> None:
    undone: list[int] = []

    @app.step
    async def reserve(x: int) -> int:
        return x

    @reserve.compensation
    async def release(x: int, reserved: int) -> None:
        undone.append(reserved)

    service = Flaky(times=100)

    @app.step(retry=exact(3))
    async def charge(x: int) -> int:
        return service(x)

    @app.workflow
    async def order(x: int) -> int:
        result: int = await charge(await reserve(x))
        return result

    handle = app.start(order, 5, id="order-5")
    settle(app, clock)

    run = app.client.get(handle.id)
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.lease_owner is None
    assert run.error is not None
    assert run.error.error_class == "durably.errors.StepFailed"
    assert "attempts exhausted" in run.error.message
    assert "ConnectionError" in run.error.message
    assert len(service.calls) == 3
    assert undone == []  # parked for a person, not failed: nothing is undone yet
    [failed] = events(app, handle.id, EventKind.STEP_FAILED)
    assert (failed.name, failed.attempt) == ("charge", 3)
    assert data(failed)["reason"] == "attempts exhausted"
    assert data(failed)["attempts"] == 3
    assert data(failed)["error_class"] == "ConnectionError"
    [parked] = events(app, handle.id, EventKind.RUN_PARKED)
    assert data(parked)["reason"] == "attempts exhausted"
    assert [letter.run_id for letter in app.client.dead_letters()] == ["order-5"]
    with pytest.raises(TimeoutError, match="still needs_attention"):
        handle.result(timeout=0)

    clock.advance("30d")
    assert app.run_until_idle() == 0  # it stays parked
    assert len(service.calls) == 3


def test_a_workflow_that_catches_an_exhausted_step_goes_on(
    app: durably.App, clock: FakeClock
) -> None:
    service = Flaky(times=100)

    @app.step(retry=exact(2))
    async def call(x: int) -> int:
        return service(x)

    @app.workflow
    async def tolerant(x: int) -> str:
        try:
            await call(x)
        except durably.StepFailed as failed:
            return f"{failed.step}: {failed.reason} ({failed.error_class})"
        return "no failure"

    handle = app.start(tolerant, 1)
    settle(app, clock)
    assert handle.result(timeout=0) == "call: attempts exhausted (ConnectionError)"


def test_a_budget_gives_up_before_the_attempts_run_out(app: durably.App, clock: FakeClock) -> None:
    service = Flaky(times=100)
    policy = Retry(
        attempts=10, initial="10s", backoff=2.0, max_delay="1h", jitter="none", budget="60s"
    )
    workflow = one_step_app(app, service, retry=policy)
    handle = app.start(workflow, 1)

    settle(app, clock)

    # attempts at 0s, 10s and 30s; the next would start at 70s, past the 60 s budget
    assert len(service.calls) == 3
    run = app.client.get(handle.id)
    assert run.status is RunStatus.NEEDS_ATTENTION
    assert run.error is not None
    assert "budget exhausted" in run.error.message
    [failed] = events(app, handle.id, EventKind.STEP_FAILED)
    assert data(failed)["reason"] == "budget exhausted"
    assert data(failed)["attempts"] == 3
    assert retry_delays(app.client.history(handle.id)) == [10, 20]


class CardDeclined(Terminal):
    """A business rule: retrying cannot help."""


@pytest.mark.parametrize(
    "error",
    [Terminal("card declined"), CardDeclined("card declined")],
    ids=["Terminal", "subclass"],
)
def test_terminal_fails_fast_with_one_attempt_and_compensates(
    app: durably.App, clock: FakeClock, error: Exception
) -> None:
    undone: list[tuple[int, str]] = []

    @app.step
    async def reserve(x: int) -> str:
        return f"reservation-{x}"

    @reserve.compensation
    async def release(x: int, reservation: str) -> None:
        undone.append((x, reservation))

    service = Flaky(times=100, error=error)

    @app.step(retry=exact(5))
    async def charge(x: int) -> int:
        return service(x)

    @app.workflow
    async def order(x: int) -> int:
        await reserve(x)
        result: int = await charge(x)
        return result

    handle = app.start(order, 7)
    assert app.run_until_idle() == 1  # one drain: no backoff, no wait

    assert len(service.calls) == 1
    assert undone == [(7, "reservation-7")]
    with pytest.raises(durably.WorkflowFailed) as failed:
        handle.result(timeout=0)
    assert failed.value.status == "failed"
    assert failed.value.error_class == "durably.errors.StepFailed"
    assert "card declined" in failed.value.message
    history = app.client.history(handle.id)
    assert events(app, handle.id, EventKind.STEP_ATTEMPT_FAILED) == []
    [step_failed] = [e for e in history if e.kind is EventKind.STEP_FAILED]
    assert data(step_failed)["reason"] == "terminal"
    assert data(step_failed)["error_class"].endswith(type(error).__qualname__)
    assert app.client.dead_letters() == []
    clock.advance("1d")
    assert app.run_until_idle() == 0


@pytest.mark.parametrize("jitter", ["none", "full"])
def test_throttled_waits_at_least_retry_after(
    app: durably.App, clock: FakeClock, jitter: str
) -> None:
    service = Flaky(times=1, error=Throttled("slow down", retry_after="30s"))
    workflow = one_step_app(
        app,
        service,
        retry=Retry(attempts=3, initial="1s", jitter=jitter),  # type: ignore[arg-type]
    )
    handle = app.start(workflow, 4)
    start = clock.now()

    app.run_until_idle()
    [failed] = events(app, handle.id, EventKind.STEP_ATTEMPT_FAILED)
    assert data(failed)["error_class"] == "durably.errors.Throttled"
    assert datetime.fromisoformat(data(failed)["retry_at"]) == start + timedelta(seconds=30)
    assert app.client.get(handle.id).available_at == start + timedelta(seconds=30)

    clock.advance("29s")
    app.run_until_idle()
    assert len(service.calls) == 1
    clock.advance("1s")
    assert app.run_until_idle() == 1
    assert handle.result(timeout=0) == 8


def test_a_longer_backoff_beats_a_shorter_retry_after(app: durably.App, clock: FakeClock) -> None:
    service = Flaky(times=1, error=Throttled(retry_after="2s"))
    workflow = one_step_app(app, service, retry=Retry(attempts=3, initial="45s", jitter="none"))
    handle = app.start(workflow, 1)
    settle(app, clock)
    assert retry_delays(app.client.history(handle.id)) == [45]
    assert handle.result(timeout=0) == 2


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (ConnectionError("reset"), True),
        (ConnectionResetError("reset"), True),  # a subclass of a named error
        (ValueError("bad value"), False),
        (FileNotFoundError("gone"), False),  # an OSError, but named in no_retry_on
    ],
    ids=["named", "subclass", "not-named", "excluded"],
)
def test_retry_on_and_no_retry_on_choose_what_is_retried(
    app: durably.App, clock: FakeClock, error: Exception, retried: bool
) -> None:
    service = Flaky(times=1, error=error)
    policy = Retry(
        attempts=3,
        jitter="none",
        retry_on=(ConnectionError, OSError),
        no_retry_on=(FileNotFoundError,),
    )
    workflow = one_step_app(app, service, retry=policy)
    handle = app.start(workflow, 1)
    settle(app, clock)

    if retried:
        assert len(service.calls) == 2
        assert handle.result(timeout=0) == 2
    else:
        assert len(service.calls) == 1
        assert handle.status() is RunStatus.FAILED
        [failed] = events(app, handle.id, EventKind.STEP_FAILED)
        assert data(failed)["reason"] == "terminal"


def test_no_retry_on_makes_a_normally_retried_error_fail_fast(
    app: durably.App, clock: FakeClock
) -> None:
    service = Flaky(times=1, error=KeyError("no such order"))
    workflow = one_step_app(app, service, retry=Retry(attempts=3, no_retry_on=(KeyError,)))
    handle = app.start(workflow, 1)
    settle(app, clock)
    assert len(service.calls) == 1
    assert handle.status() is RunStatus.FAILED


def test_no_retry_on_wins_over_throttled(app: durably.App, clock: FakeClock) -> None:
    """A step that names Throttled in no_retry_on asked for it to fail fast."""
    service = Flaky(times=1, error=Throttled(retry_after="10s"))
    workflow = one_step_app(app, service, retry=Retry(attempts=3, no_retry_on=(Throttled,)))
    handle = app.start(workflow, 1)
    settle(app, clock)
    assert len(service.calls) == 1
    assert handle.status() is RunStatus.FAILED


@pytest.mark.parametrize(
    ("error", "attempts"),
    [
        (ConnectionError("reset"), 3),
        (TimeoutError("read timed out"), 3),
        (OSError("network unreachable"), 3),
        (RuntimeError("HTTP 503"), 3),
        (ValueError("bad response"), 3),
        (TypeError("unsupported operand"), 1),
        (AssertionError("invariant broken"), 1),
        (NotImplementedError("todo"), 1),
        (AttributeError("no such attribute"), 1),
        (NameError("no such name"), 1),
        (Terminal("refused"), 1),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_the_documented_defaults_decide_what_is_retried(
    app: durably.App, clock: FakeClock, error: Exception, attempts: int
) -> None:
    service = Flaky(times=100, error=error)
    workflow = one_step_app(app, service)  # the app's default policy: Retry()
    handle = app.start(workflow, 1)
    settle(app, clock)

    assert len(service.calls) == attempts
    [failed] = events(app, handle.id, EventKind.STEP_FAILED)
    if attempts == 1:
        assert data(failed)["reason"] == "terminal"
        assert handle.status() is RunStatus.FAILED
    else:
        assert data(failed)["reason"] == "attempts exhausted"
        assert handle.status() is RunStatus.NEEDS_ATTENTION


def test_the_apps_default_retry_applies_to_steps_without_their_own(
    store_url: str, clock: FakeClock
) -> None:
    app = durably.App(
        store_url, clock=clock, seed=1, default_retry=Retry(attempts=2, initial="5s", jitter="none")
    )
    plain = Flaky(times=100)
    own = Flaky(times=100)

    @app.step
    async def uses_default(x: int) -> int:
        return plain(x)

    @app.step(retry=Retry(attempts=4, initial="1s", jitter="none"))
    async def uses_own(x: int) -> int:
        return own(x)

    @app.workflow
    async def first(x: int) -> int:
        result: int = await uses_default(x)
        return result

    @app.workflow
    async def second(x: int) -> int:
        result: int = await uses_own(x)
        return result

    try:
        a = app.start(first, 1)
        b = app.start(second, 1)
        settle(app, clock)
        assert len(plain.calls) == 2
        assert retry_delays(app.client.history(a.id)) == [5]
        assert len(own.calls) == 4
        assert retry_delays(app.client.history(b.id)) == [1, 2, 4]
    finally:
        app.close()


def test_a_retry_wait_survives_the_worker(store_url: str, clock: FakeClock) -> None:
    """The first worker fails an attempt and goes away; a new process (a new App on the same
    store) picks the run up when its retry is due, not before, and finishes it."""
    calls: list[tuple[str, str]] = []

    def build(name: str) -> durably.App:
        app = durably.App(store_url, clock=clock, seed=1)

        @app.step(retry=Retry(attempts=3, initial="20s", jitter="none"))
        async def call(x: int) -> int:
            calls.append((name, durably.idempotency_key()))
            if name == "first":
                raise ConnectionError("reset")
            return x + 1

        @app.workflow
        async def flow(x: int) -> int:
            result: int = await call(x)
            return result

        return app

    first = build("first")
    handle = first.start("flow", 1, id="flow-1")
    assert first.run_until_idle() == 0
    first.close()
    started = clock.now()

    second = build("second")
    try:
        run = second.client.get(handle.id)
        assert (run.status, run.available_at) == (
            RunStatus.PENDING,
            started + timedelta(seconds=20),
        )
        clock.advance("19s")
        assert second.run_until_idle() == 0
        assert [who for who, _ in calls] == ["first"]

        clock.advance("1s")
        assert second.run_until_idle() == 1
        assert second.handle(handle.id).result(timeout=0) == 2
        key = step_key("flow-1", 0, "call")
        assert calls == [("first", key), ("second", key)]
        claims = events(second, handle.id, EventKind.CLAIMED)
        assert len(claims) == 2
        assert data(claims[0])["owner"] != data(claims[1])["owner"]
        assert "took_over_from" not in data(claims[1])  # handed back, not taken over
    finally:
        second.close()
