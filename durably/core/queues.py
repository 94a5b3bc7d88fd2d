"""Queues: which workers take a run, and how many runs of a queue, or of one key in it, run at
once.

Every run is on a queue: the one its start or its workflow names, else the default queue.
A worker serves the queues it is given (`durably worker --queues emails,default`; all of its
app's, by default) and claims runs of those only.

A queue the app declares (`app.queue("emails", concurrency=10, concurrency_per_key=2)`) may
limit how many of its runs hold a worker at once, in all, and per *key* (`start(..., key=
"customer-42")`). A run holds a slot while a worker executes it: from its claim until it ends
or waits (a timer, a signal, an approval, a retry's backoff), so a run that waits two days
for a person blocks nobody. Claims count the slots in use in the store, in the transaction
that leases, so the limits hold across every worker on every machine.

A queue may also limit how many of its runs *begin* (are claimed for the first time) in a
sliding window, in all and per key: `rate="100/minute"`, `rate_per_key="10/minute"`. A run
that already began (woken from a timer, a retry's backoff) is never held back by a rate.

A fair queue (the default for a declared queue) hands out its free slots round-robin
between keys (durably.core.slots): a claim visits the keys with due runs in turn, from where
the last one stopped, and takes one run of each before a second of any. So a customer with
50,000 due runs and a customer with one both make progress: the second one's run is claimed
by the round that reaches its key. Within a key, runs go by rank (durably.core.priority).
Per-key limits need keys in turn: a queue with them is fair.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta

from durably.core.names import check_name
from durably.durations import parse_duration
from durably.errors import ConfigError

__all__ = [
    "DEFAULT_QUEUE",
    "Queue",
    "Rate",
    "check_key",
    "check_slots",
    "parse_rate",
    "served_queues",
]

DEFAULT_QUEUE = "default"  # stored as no queue at all (NULL): the runs of every plain start


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` runs begin in any window of length `per`."""

    count: int
    per: timedelta

    def __str__(self) -> str:
        return f"{self.count}/{self.per.total_seconds():g}s"


# "100/minute", "10/s", "5/30s", "1000/1h": a count, and a period (a unit, or a duration)
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\S+)\s*$")
_PERIODS = {
    "second": "1s",
    "sec": "1s",
    "minute": "1m",
    "min": "1m",
    "hour": "1h",
    "day": "1d",
}


def parse_rate(value: object, what: str) -> Rate | None:
    """A rate as written ("100/minute", "10/s", "5/30s"), or None for none."""
    if value is None:
        return None
    text = value if isinstance(value, str) else ""
    found = _RATE.match(text)
    unit = "" if found is None else found[2].lower()
    period = _PERIODS.get(unit, unit if unit[:1].isdigit() else f"1{unit}")
    try:
        per = None if period is None else parse_duration(period, what=what)
    except ValueError:
        per = None
    if found is None or per is None or int(found[1]) < 1 or per <= timedelta(0):
        raise ConfigError(
            f"{what} is a number of runs per period, like '100/minute', '10/s' or '5/30s', "
            f"not {value!r}"
        )
    return Rate(int(found[1]), per)


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue as an app declares it (`app.queue(...)`); the default queue has no limits."""

    name: str
    concurrency: int | None = None  # runs of the queue holding a worker at once, in all
    concurrency_per_key: int | None = None  # ... of one key
    fair: bool = True  # claims go round-robin between keys
    rate: Rate | None = None  # runs that begin, in all, per window
    rate_per_key: Rate | None = None  # ... of one key

    @property
    def limited(self) -> bool:
        """Whether claims must count this queue's slots or begins, or order it by key."""
        limits = (self.concurrency, self.concurrency_per_key, self.rate, self.rate_per_key)
        return self.fair or any(limit is not None for limit in limits)

    @property
    def stored(self) -> str | None:
        """The name as runs record it: none for the default queue."""
        return None if self.name == DEFAULT_QUEUE else self.name


def check_slots(value: object, what: str) -> int | None:
    """A concurrency limit: None (no limit) or a whole number of at least 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be a whole number of at least 1 (or None), not {value!r}")
    return value


def check_key(value: object) -> str:
    """A run's key (a customer, a tenant, an account): a name."""
    return check_name(value, "a run's key")


def served_queues(declared: Mapping[str, Queue], wanted: Collection[str] | None) -> list[Queue]:
    """The queues a worker serves: `wanted` by name (each declared, or the default), or every
    declared queue and the default one. ConfigError names a queue nobody declared."""
    if isinstance(wanted, str):
        raise ConfigError(f"queues= is a list of queue names, not the string {wanted!r}")
    every = {DEFAULT_QUEUE: Queue(DEFAULT_QUEUE, fair=False), **declared}
    if wanted is None:
        return list(every.values())
    unknown = [name for name in wanted if name not in every]
    if unknown:
        known = ", ".join(sorted(every))
        raise ConfigError(
            f"no queue named {unknown[0]!r} is declared by this app (declared: {known}); "
            "declare it with app.queue(...) or serve another"
        )
    if not wanted:
        raise ConfigError("a worker serves at least one queue: name one (e.g. default)")
    return [every[name] for name in dict.fromkeys(wanted)]
