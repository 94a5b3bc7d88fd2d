"""Retry policies and the pure decision of what to do after a failed attempt.

Backoff is exponential with full jitter by default (a random delay between 0 and the capped
exponential), which spreads the retries of many runs hitting the same outage.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from durably.durations import Duration, parse_duration
from durably.errors import ConfigError, NotInWorkflow, PayloadError, Terminal, Throttled

__all__ = [
    "NEVER_RETRIED",
    "Classification",
    "GiveUp",
    "Retry",
    "RetryAt",
    "classify",
    "decide",
]

# Errors that another attempt cannot fix, unless a step's retry_on names them.
NEVER_RETRIED: tuple[type[BaseException], ...] = (
    Terminal,
    ConfigError,  # a definition or setting is wrong: no attempt sets it right
    PayloadError,
    NotInWorkflow,
    AssertionError,
    NotImplementedError,
    TypeError,
    NameError,
    AttributeError,
)


@dataclass(frozen=True)
class Retry:
    """How a step retries: up to `attempts` attempts, `initial` delay growing by `backoff`,
    capped at `max_delay`, with full jitter; optionally give up once `budget` has passed
    since the first attempt."""

    attempts: int = 3
    initial: Duration = "1s"
    backoff: float = 2.0
    max_delay: Duration = "60s"
    jitter: Literal["full", "none"] = "full"
    budget: Duration | None = None
    retry_on: Sequence[type[BaseException]] = ()  # if set: only these are retried
    no_retry_on: Sequence[type[BaseException]] = ()  # never retried, fail fast
    _initial: timedelta = field(init=False, repr=False, compare=False)
    _max_delay: timedelta = field(init=False, repr=False, compare=False)
    _budget: timedelta | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("Retry(attempts=...) must be at least 1")
        if self.backoff < 1:
            raise ValueError("Retry(backoff=...) must be at least 1.0")
        if self.jitter not in ("full", "none"):
            raise ValueError("Retry(jitter=...) must be 'full' or 'none'")
        object.__setattr__(self, "_initial", parse_duration(self.initial, what="initial"))
        object.__setattr__(self, "_max_delay", parse_duration(self.max_delay, what="max_delay"))
        budget = None if self.budget is None else parse_duration(self.budget, what="budget")
        object.__setattr__(self, "_budget", budget)

    def delay(self, attempt: int, rng: random.Random) -> timedelta:
        """The wait after failed attempt number `attempt` (1-based)."""
        capped = min(self._initial * (self.backoff ** (attempt - 1)), self._max_delay)
        return capped * rng.random() if self.jitter == "full" else capped


@dataclass(frozen=True, slots=True)
class Classification:
    retryable: bool
    throttled_for: timedelta | None = None  # Throttled: wait at least this long


@dataclass(frozen=True, slots=True)
class RetryAt:
    due: datetime


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: Literal["terminal", "attempts exhausted", "budget exhausted"]


def classify(error: BaseException, policy: Retry) -> Classification:
    """Is another attempt worth making after `error`?"""
    if isinstance(error, (Terminal, *policy.no_retry_on)):
        return Classification(False)
    if isinstance(error, Throttled):
        return Classification(True, error.retry_after)
    if policy.retry_on:
        return Classification(isinstance(error, tuple(policy.retry_on)))
    return Classification(not isinstance(error, NEVER_RETRIED))


def decide(
    policy: Retry,
    classification: Classification,
    *,
    attempt: int,
    first_attempt_at: datetime,
    now: datetime,
    rng: random.Random,
) -> RetryAt | GiveUp:
    """Retry at a due time, or give up, after failed attempt number `attempt`."""
    if not classification.retryable:
        return GiveUp("terminal")
    if attempt >= policy.attempts:
        return GiveUp("attempts exhausted")
    wait = policy.delay(attempt, rng)
    if classification.throttled_for is not None:
        wait = max(wait, classification.throttled_for)
    due = now + wait
    if policy._budget is not None and due - first_attempt_at > policy._budget:
        return GiveUp("budget exhausted")
    return RetryAt(due)
