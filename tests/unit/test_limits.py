"""Rate and concurrency limits of a dependency, pure: a token bucket with its burst, slots
shared and freed (or expired with a dead holder), a line of waiting runs woken in turn, and a
throttle that empties the bucket until its retry_after."""

from __future__ import annotations

from datetime import timedelta

import pytest

import durably
from durably.resilience import Breaker, Dependency, Enter, GateState, Wait
from durably.resilience.gates import enter, leave

from .gates import HOLD, SLOW_DOWN, at


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


@pytest.mark.parametrize("rate", [20.0, 3.0, 7.0, 0.3])
def test_a_run_due_when_its_token_is_enters_then(rate: float) -> None:
    """A token refilled over a fraction of a second comes to 0.99999... in floats: at the
    moment the gate said to come back, the run enters (it is not sent back to that very
    moment again, for ever)."""
    policy = Dependency(breaker=None, rate=rate, burst=1)
    state = GateState()
    assert enter(policy, state, holder="a:0", now=at(0), hold=HOLD) == Enter()
    leave(policy, state, holder="a:0", now=at(0.1), failed=True, throttled=timedelta(seconds=1))
    wait = enter(policy, state, holder="b:0", now=at(0.2), hold=HOLD)
    assert isinstance(wait, Wait)

    assert enter(policy, state, holder="b:0", now=wait.until, hold=HOLD) == Enter()


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
