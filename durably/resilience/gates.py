"""Pure gate logic: given a dependency's state and the time, may an attempt start now?

A run that must wait gets a due time. Behind an open breaker or an empty token bucket that
time is exact (the cooldown's end, the next token). Behind a half-open breaker whose probe is
out, or a full concurrency limit, the gate opens when an attempt ends, which no clock can
tell: the run waits in the gate's line (`GateState.waiting`), due at the latest when the
probe's or the slot's hold runs out, and `leave` names whom to wake when the gate opens.
"""

from __future__ import annotations

import json
import math
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

# Attempts a gate keeps in line to wake. The state is one document read and written under the
# gate's lock at every attempt, so it stays small; a run past this many relies on its due time.
_MOST_WAITING = 1000


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
    refilled_at: float = 0.0  # later than now after a throttle: no token comes before then
    in_flight: dict[str, float] = field(default_factory=dict)  # holder -> slot expiry
    waiting: dict[str, float] = field(default_factory=dict)  # holder -> since, to wake

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
    woken: bool = False  # the run waits in line, woken when the gate opens: `until` at the latest


def enter(
    policy: Dependency,
    state: GateState,
    *,
    holder: str,
    now: datetime,
    hold: timedelta,
    since: datetime | None = None,
) -> Enter | Wait:
    """Admit an attempt (taking a token and a slot), or say until when to wait. A wait that
    ends when the gate opens puts `holder` in line, in the order of `since` (when it began
    waiting; by default now); any other answer takes it out. Mutates state."""
    answer = _admit(policy, state, holder=holder, t=now.timestamp(), hold=hold.total_seconds())
    if isinstance(answer, Wait) and answer.woken:
        if holder in state.waiting or len(state.waiting) < _MOST_WAITING:
            state.waiting.setdefault(holder, (since or now).timestamp())
    else:
        state.waiting.pop(holder, None)
    return answer


def leave(
    policy: Dependency,
    state: GateState,
    *,
    holder: str,
    now: datetime,
    failed: bool,
    throttled: timedelta | None = None,
) -> list[str]:
    """An admitted attempt ended: free its slot and tell the breaker how it went. A throttled
    attempt (the service said to slow down for `throttled`) is no failure: it empties the
    token bucket instead. Returns the holders in line to wake, for whom the gate opened:
    everyone when a probe ended, else the longest waiting one for the slot freed. Mutates
    state."""
    t = now.timestamp()
    freed = state.in_flight.pop(holder, None) is not None
    probe_ended = policy.breaker is not None and state.breaker == "half_open"
    if throttled is not None:
        _throttle(policy, state, t, throttled.total_seconds())
    else:
        _tell_breaker(policy.breaker, state, t, failed=failed)
    if probe_ended:  # closed, or open again: all look again (for the cooldown, if open)
        return _wake(state, len(state.waiting))
    return _wake(state, 1 if freed else 0)


def _admit(
    policy: Dependency, state: GateState, *, holder: str, t: float, hold: float
) -> Enter | Wait:
    probe = False
    if policy.breaker is not None and state.breaker != "closed":
        cooldown = parse_duration(policy.breaker.cooldown).total_seconds()
        if state.breaker == "open" and t < state.opened_at + cooldown:
            return Wait(_at(state.opened_at + cooldown), "breaker open")
        if state.breaker == "half_open" and t < state.probe_until:  # woken when it ends
            return Wait(_at(state.probe_until), "breaker open", woken=True)
        probe = True
    if policy.concurrency is not None:
        state.in_flight = {h: until for h, until in state.in_flight.items() if until > t}
        if holder not in state.in_flight and len(state.in_flight) >= policy.concurrency:
            # woken when a slot is given back; due when the first one expires, in case its
            # holder died and cannot give it back
            return Wait(_at(min(state.in_flight.values())), "concurrency limit", woken=True)
    if policy.rate is not None:
        refilled_at = max(state.refilled_at, t)
        tokens = policy.burst if state.tokens < 0 else state.tokens
        tokens = min(policy.burst, tokens + (refilled_at - state.refilled_at) * policy.rate)
        state.tokens, state.refilled_at = tokens, refilled_at
        if tokens + _SLACK * policy.rate < 1:
            return Wait(_at(refilled_at + (1 - tokens) / policy.rate), "rate limit")
        state.tokens = max(0.0, tokens - 1)
    if policy.concurrency is not None:
        state.in_flight[holder] = t + hold
    if probe:
        state.breaker, state.probe_until = "half_open", t + hold
    return Enter()


def _tell_breaker(breaker: Breaker | None, state: GateState, t: float, *, failed: bool) -> None:
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


def _throttle(policy: Dependency, state: GateState, t: float, pause: float) -> None:
    """The service said "slow down" for `pause` seconds: that is the rate limit's business
    (an empty bucket whose next token comes no sooner), not a failure for the breaker. It
    did answer, so a probe that was throttled closes the breaker; the bucket spaces out
    those it lets through."""
    if policy.breaker is not None and state.breaker == "half_open":
        state.breaker, state.failures = "closed", 0
    if policy.rate is not None:
        state.tokens = 0.0
        state.refilled_at = max(state.refilled_at, t, t + pause - 1 / policy.rate)


def _wake(state: GateState, count: int) -> list[str]:
    """Take the `count` longest waiting holders out of line, to be woken."""
    if count <= 0 or not state.waiting:
        return []
    woken = sorted(state.waiting, key=state.waiting.__getitem__)[:count]
    for holder in woken:
        del state.waiting[holder]
    return woken


# Times are seconds since 1970 as floats (steps of about 0.24 microseconds today) and
# datetimes keep microseconds: a token that is due at a moment can come to 0.999999 then.
# It counts as whole if it would be within two microseconds; else the run would be sent back
# to that very moment, claimed again, and never enter.
_SLACK = 2e-6


def _at(seconds: float) -> datetime:
    """The moment, rounded up to the microsecond a datetime keeps (never before it)."""
    return datetime.fromtimestamp(math.ceil(seconds * 1_000_000) / 1_000_000, UTC)


def entering(
    policy: Dependency,
    *,
    holder: str,
    now: datetime,
    hold: timedelta,
    since: datetime | None = None,
) -> Callable[[str | None], tuple[str, Enter | Wait]]:
    """The change a store applies under the gate's lock to admit an attempt."""

    def change(text: str | None) -> tuple[str, Enter | Wait]:
        state = GateState.load(text)
        answer = enter(policy, state, holder=holder, now=now, hold=hold, since=since)
        return state.dump(), answer

    return change


def leaving(
    policy: Dependency,
    *,
    holder: str,
    now: datetime,
    failed: bool,
    throttled: timedelta | None = None,
) -> Callable[[str | None], tuple[str, list[str]]]:
    """The change a store applies under the gate's lock when an attempt ends; its answer is
    the holders to wake."""

    def change(text: str | None) -> tuple[str, list[str]]:
        state = GateState.load(text)
        woken = leave(policy, state, holder=holder, now=now, failed=failed, throttled=throttled)
        return state.dump(), woken

    return change
