"""Debounced starts: starts of one workflow with one debounce key that come close together
make one run, which begins once they stop, with the input of the last of them.

`start(workflow, ..., debounce="30s", debounce_key="customer-42", max_wait="5m")`: the first
start makes a pending run due in 30 s that *gathers* the starts of its key; each later start
with that workflow and key, while the run gathers, gives it its own input and pushes its due
time to 30 s after it, but never later than 5 minutes after the first start (`max_wait`), so
that a steady stream of starts still runs. Every caller gets the handle of that one run
(`Started.created` is True for the first only). A run gathers until a worker claims it: the
next start with its key makes a new run. The store keeps at most one gathering run per
workflow and key (a unique index), so starts that race, from any process, never make two.

Only the input and the due time change: the run keeps the rest of its first start (its
priority, queue, key, correlation id). Pure: the checks and the due times, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from durably.core.names import check_name
from durably.durations import Duration, parse_duration
from durably.errors import ConfigError

__all__ = ["Debounce", "debounce_of"]


@dataclass(frozen=True, slots=True)
class Debounce:
    """How a start is debounced: on `key`, each start pushing the run's due time `window`
    after it, never later than `max_wait` after the first (None: no cap)."""

    key: str
    window: timedelta
    max_wait: timedelta | None = None

    def due(self, now: datetime) -> datetime:
        """When a run this start makes is due: the window's end, or the cap if earlier."""
        wait = self.window if self.max_wait is None else min(self.window, self.max_wait)
        return now + wait

    def due_by(self, now: datetime) -> datetime | None:
        """The latest a run this start makes may become due, however many starts join it."""
        return None if self.max_wait is None else now + self.max_wait


def debounce_of(
    window: Duration | None,
    key: str | None,
    max_wait: Duration | None,
    *,
    id: str | None = None,
    delayed: bool = False,
) -> Debounce | None:
    """The debounce a start asks for (None: none), checked. `id`: the run id it names (a
    debounced start may not); `delayed`: whether it asks for a delay or a start time too."""
    if window is None:
        if key is not None or max_wait is not None:
            given = "debounce_key" if key is not None else "max_wait"
            raise ConfigError(
                f"{given}= is given without debounce=: say how long the window is "
                '(debounce="30s"), or leave both out for a plain start'
            )
        return None
    if key is None:
        raise ConfigError(
            "debounce= needs a debounce_key=: the starts with the same workflow and key "
            "coalesce into one run (a customer's id, a document's); give every start the same "
            "key to debounce the workflow as a whole"
        )
    if id is not None:
        raise ConfigError(
            f"a debounced start cannot name its run's id ({id!r}): several starts share one "
            "run, and the next run of the key is another; leave id= out and follow the run "
            "by the handle each start returns"
        )
    if delayed:
        raise ConfigError(
            "a debounced start is due when its window ends: give debounce= or delay=/start_at=, "
            "not both"
        )
    span = _positive(window, "debounce")
    cap = None if max_wait is None else _positive(max_wait, "max_wait")
    return Debounce(check_name(key, "a debounce key"), span, cap)


def _positive(value: Duration, what: str) -> timedelta:
    try:
        span = parse_duration(value, what=what)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if span <= timedelta(0):
        raise ConfigError(
            f"{what} must be longer than 0 (got {value!r}): a start that should not wait "
            "is a plain start"
        )
    return span
