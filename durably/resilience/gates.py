"""Pure gate logic: given a dependency's state and the time, may an attempt start now?"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

from durably.durations import Duration, parse_duration

__all__ = [
    "Breaker",
    "Dependency",
    "Enter",
    "GateState",
    "Wait",
    "enter",
    "entering",
    "leave",
    "leaving",
]


_RECHECK = 0.5  # seconds: how soon a run that found the gate busy looks again


@dataclass(frozen=True)
class Breaker:
    """Open after `threshold` failures within `window`; after `cooldown`, let one probe
    through (half-open); its success closes the breaker, its failure opens it again."""

    threshold: int = 5
    window: Duration = "60s"
    cooldown: Duration = "30s"

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ValueError("Breaker(threshold=...) must be at least 1")
        parse_duration(self.window, what="window")
        parse_duration(self.cooldown, what="cooldown")


@dataclass(frozen=True)
class Dependency:
    """How calls to one outside service are protected.

    `breaker`: a circuit breaker (None: none). `rate`: attempts per second, with `burst`
    (a token bucket). `concurrency`: attempts in flight at once, across all workers.
    """

    breaker: Breaker | None = field(default_factory=Breaker)
    rate: float | None = None
    burst: int = 1
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if self.rate is not None and self.rate <= 0:
            raise ValueError("Dependency(rate=...) must be positive")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("Dependency(concurrency=...) must be at least 1")


@dataclass(slots=True)
class GateState:
    breaker: str = "closed"  # closed, open, half_open
    failures: int = 0
    window_start: float = 0.0
    opened_at: float = 0.0
    probe_until: float = 0.0  # a half-open probe is under way until then
    tokens: float = -1.0  # -1: a full bucket, not yet used
    refilled_at: float = 0.0
    in_flight: dict[str, float] = field(default_factory=dict)  # holder -> slot expiry

    @classmethod
    def load(cls, text: str | None) -> GateState:
        return cls(**json.loads(text)) if text else cls()

    def dump(self) -> str:
        return json.dumps(asdict(self))


@dataclass(frozen=True, slots=True)
class Enter:
    """The attempt may go ahead (its token and slot are taken)."""


@dataclass(frozen=True, slots=True)
class Wait:
    until: datetime
    reason: str  # "breaker open", "rate limit", "concurrency limit"


def enter(
    policy: Dependency, state: GateState, *, holder: str, now: datetime, hold: timedelta
) -> Enter | Wait:
    """Admit an attempt (taking a token and a slot), or say until when to wait. Mutates state."""
    t = now.timestamp()
    probe = False
    if policy.breaker is not None and state.breaker != "closed":
        cooldown = parse_duration(policy.breaker.cooldown).total_seconds()
        if state.breaker == "open" and t < state.opened_at + cooldown:
            return Wait(_at(state.opened_at + cooldown), "breaker open")
        if state.breaker == "half_open" and t < state.probe_until:  # look again soon
            return Wait(_at(min(state.probe_until, t + _RECHECK)), "breaker open")
        probe = True
    if policy.concurrency is not None:
        state.in_flight = {h: until for h, until in state.in_flight.items() if until > t}
        if holder not in state.in_flight and len(state.in_flight) >= policy.concurrency:
            # slots free when attempts end, which no other worker can announce: look again
            return Wait(_at(min(*state.in_flight.values(), t + _RECHECK)), "concurrency limit")
    if policy.rate is not None:
        tokens = policy.burst if state.tokens < 0 else state.tokens
        tokens = min(policy.burst, tokens + (t - state.refilled_at) * policy.rate)
        if tokens < 1:
            state.tokens, state.refilled_at = tokens, t
            return Wait(_at(t + (1 - tokens) / policy.rate), "rate limit")
        state.tokens, state.refilled_at = tokens - 1, t
    if policy.concurrency is not None:
        state.in_flight[holder] = t + hold.total_seconds()
    if probe:
        state.breaker, state.probe_until = "half_open", t + hold.total_seconds()
    return Enter()


def leave(
    policy: Dependency, state: GateState, *, holder: str, now: datetime, failed: bool
) -> None:
    """An admitted attempt ended: free its slot and tell the breaker. Mutates state."""
    t = now.timestamp()
    state.in_flight.pop(holder, None)
    breaker = policy.breaker
    if breaker is None:
        return
    if not failed:
        if state.breaker == "half_open":
            state.breaker = "closed"
        state.failures = 0
        return
    if state.breaker == "half_open":
        state.breaker, state.opened_at = "open", t
        return
    window = parse_duration(breaker.window).total_seconds()
    if t - state.window_start > window:
        state.window_start, state.failures = t, 0
    state.failures += 1
    if state.failures >= breaker.threshold:
        state.breaker, state.opened_at = "open", t


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def entering(
    policy: Dependency, *, holder: str, now: datetime, hold: timedelta
) -> Callable[[str | None], tuple[str, Enter | Wait]]:
    """The change a store applies under the gate's lock to admit an attempt."""

    def change(text: str | None) -> tuple[str, Enter | Wait]:
        state = GateState.load(text)
        answer = enter(policy, state, holder=holder, now=now, hold=hold)
        return state.dump(), answer

    return change


def leaving(
    policy: Dependency, *, holder: str, now: datetime, failed: bool
) -> Callable[[str | None], tuple[str, None]]:
    """The change a store applies under the gate's lock when an attempt ends."""

    def change(text: str | None) -> tuple[str, None]:
        state = GateState.load(text)
        leave(policy, state, holder=holder, now=now, failed=failed)
        return state.dump(), None

    return change
