"""What the pure tests of gates (breakers, rate and concurrency limits) share: times as
seconds after T0, one whole attempt, and a breaker opened by three failures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durably.resilience import Breaker, Dependency, Enter, GateState, Wait
from durably.resilience.gates import enter, leave

__all__ = ["BREAKER", "HOLD", "SLOW_DOWN", "T0", "at", "attempt", "open_breaker"]

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


def open_breaker() -> GateState:
    """A breaker that three failures at 0, 1 and 2 s opened."""
    state = GateState()
    for when in (0, 1, 2):
        attempt(BREAKER, state, when, failed=True)
    assert (state.breaker, state.opened_at) == ("open", at(2).timestamp())
    return state
