"""The retry math on its own: backoff, caps, jitter, budgets and classification. Pure
functions of the policy, the attempt number, the times and a seeded RNG."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from durably.core.retry import (
    NEVER_RETRIED,
    Classification,
    GiveUp,
    Retry,
    RetryAt,
    classify,
    decide,
)
from durably.errors import PayloadError, Terminal, Throttled

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class _Fixed(random.Random):
    """An RNG whose random() is always `value`: pins full jitter to a known point."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()


@pytest.mark.parametrize(
    ("attempt", "expected"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (7, 60.0), (30, 60.0)]
)
def test_backoff_grows_exponentially_up_to_its_cap(attempt: int, expected: float) -> None:
    policy = Retry(initial="1s", backoff=2.0, max_delay="60s", jitter="none")
    assert seconds(policy.delay(attempt, random.Random(0))) == expected


def test_full_jitter_is_uniform_between_zero_and_the_capped_delay() -> None:
    policy = Retry(initial="1s", backoff=3.0, max_delay="10s")
    assert seconds(policy.delay(2, _Fixed(0.0))) == 0.0
    assert seconds(policy.delay(2, _Fixed(0.5))) == 1.5
    assert seconds(policy.delay(5, _Fixed(0.999))) == pytest.approx(9.99)
    rng = random.Random(42)
    delays = [seconds(policy.delay(3, rng)) for _ in range(2_000)]
    assert min(delays) >= 0.0
    assert max(delays) <= 9.0
    assert 4.0 < sum(delays) / len(delays) < 5.0  # the mean of U(0, 9) is 4.5


def test_the_same_seed_gives_the_same_delays() -> None:
    policy = Retry(initial="1s")
    first = [policy.delay(n, random.Random(7)) for n in range(1, 5)]
    again = [policy.delay(n, random.Random(7)) for n in range(1, 5)]
    assert first == again


def test_a_retryable_failure_is_retried_at_now_plus_the_delay() -> None:
    policy = Retry(attempts=3, initial="2s", jitter="none")
    now = T0 + timedelta(seconds=5)
    decision = decide(
        policy, Classification(True), attempt=2, first_attempt_at=T0, now=now, rng=random.Random(0)
    )
    assert decision == RetryAt(now + timedelta(seconds=4))


def test_the_last_attempt_gives_up() -> None:
    policy = Retry(attempts=3)
    decision = decide(
        policy, Classification(True), attempt=3, first_attempt_at=T0, now=T0, rng=random.Random(0)
    )
    assert decision == GiveUp("attempts exhausted")


def test_a_retry_due_past_the_budget_gives_up() -> None:
    policy = Retry(attempts=10, initial="10s", jitter="none", budget="30s")
    inside = decide(
        policy,
        Classification(True),
        attempt=1,
        first_attempt_at=T0,
        now=T0 + timedelta(seconds=15),
        rng=random.Random(0),
    )
    assert inside == RetryAt(T0 + timedelta(seconds=25))
    past = decide(
        policy,
        Classification(True),
        attempt=1,
        first_attempt_at=T0,
        now=T0 + timedelta(seconds=25),
        rng=random.Random(0),
    )
    assert past == GiveUp("budget exhausted")


def test_throttled_waits_at_least_its_retry_after() -> None:
    policy = Retry(attempts=5, initial="1s", jitter="none")
    slow_down = classify(Throttled("429", retry_after="30s"), policy)
    assert slow_down == Classification(True, timedelta(seconds=30))
    decision = decide(
        policy, slow_down, attempt=1, first_attempt_at=T0, now=T0, rng=random.Random(0)
    )
    assert decision == RetryAt(T0 + timedelta(seconds=30))


def test_a_terminal_failure_is_never_retried() -> None:
    policy = Retry(attempts=5)
    decision = decide(
        policy,
        classify(Terminal("declined"), policy),
        attempt=1,
        first_attempt_at=T0,
        now=T0,
        rng=random.Random(0),
    )
    assert decision == GiveUp("terminal")


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (ConnectionError("reset"), True),
        (TimeoutError(), True),
        (RuntimeError("5xx"), True),
        (Terminal("no"), False),
        (PayloadError("bad value"), False),
        (AssertionError(), False),
        (TypeError(), False),
        (AttributeError(), False),
        (NotImplementedError(), False),
    ],
)
def test_the_documented_defaults(error: BaseException, retryable: bool) -> None:
    assert classify(error, Retry()).retryable is retryable


def test_retry_on_and_no_retry_on_override_the_defaults() -> None:
    only_resets = Retry(retry_on=[ConnectionError])
    assert classify(ConnectionError(), only_resets).retryable
    assert not classify(RuntimeError(), only_resets).retryable
    never_lookups = Retry(no_retry_on=[LookupError])
    assert not classify(KeyError("x"), never_lookups).retryable
    assert classify(Throttled("slow"), only_resets).retryable  # a "slow down" always waits


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attempts": 0}, "attempts"),
        ({"backoff": 0.5}, "backoff"),
        ({"jitter": "some"}, "jitter"),
        ({"initial": "soon"}, "initial"),
    ],
)
def test_a_policy_that_makes_no_sense_is_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Retry(**options)  # type: ignore[arg-type]


def test_full_jitter_is_uniform_over_the_capped_backoff() -> None:
    policy = Retry(initial="2s", backoff=3.0, max_delay="20s", jitter="full")
    rng = random.Random(7)
    for attempt, cap in [(1, 2.0), (2, 6.0), (3, 18.0), (4, 20.0), (9, 20.0)]:
        waits = [policy.delay(attempt, rng).total_seconds() for _ in range(4_000)]
        assert min(waits) >= 0
        assert max(waits) <= cap
        assert sum(waits) / len(waits) == pytest.approx(cap / 2, rel=0.05)
    fixed = Retry(initial="2s", backoff=3.0, max_delay="20s", jitter="none")
    assert [fixed.delay(n, rng).total_seconds() for n in range(1, 6)] == [2, 6, 18, 20, 20]


def test_the_default_policy_is_three_attempts_with_capped_full_jitter() -> None:
    policy = Retry()
    assert (policy.attempts, policy.backoff, policy.jitter) == (3, 2.0, "full")
    assert policy.delay(1, random.Random(1)) <= timedelta(seconds=1)
    assert policy.delay(30, random.Random(1)) <= timedelta(seconds=60)
    assert {TypeError, AssertionError, Terminal} <= set(NEVER_RETRIED)
