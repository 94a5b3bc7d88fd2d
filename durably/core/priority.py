"""Run priorities: which due run a worker claims first.

The rule, in one sentence: a due run's *rank* is its due time less one minute per level of
priority, and workers claim the lowest rank first. So a run of priority 5 is claimed ahead of
runs of priority 0 that became due less than five minutes before it, and behind those that
have waited longer: priority buys a head start, never a place that a backlog of lower runs
can be kept out of for good (no starvation). A run is never claimed before it is due.

Priorities run from 0 (the default) to MAX_PRIORITY. None is negative: a run's rank is then
never later than its due time, which is what lets a claim stop reading the index at `now`
(durably.stores.sql.schema.CLAIM_RANK).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from durably.errors import DurablyError

__all__ = ["DEFAULT_PRIORITY", "MAX_PRIORITY", "PRIORITY_STEP_SECONDS", "check_priority", "rank"]

DEFAULT_PRIORITY = 0
MAX_PRIORITY = 1_000  # a head start of 1,000 minutes: about 16.7 hours
PRIORITY_STEP_SECONDS = 60  # what one level of priority is worth, in seconds of waiting


def check_priority(value: object, *, what: str = "priority") -> int:
    """`value` as a priority, or a DurablyError that says what a priority is."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise DurablyError(f"{what} must be a whole number from 0 to {MAX_PRIORITY}, not {value!r}")
    if not 0 <= value <= MAX_PRIORITY:
        raise DurablyError(
            f"{what} must be from 0 (the default) to {MAX_PRIORITY}, not {value}: a level is a "
            "minute's head start over lower runs that became due at the same time"
        )
    return value


def rank(due: datetime, priority: int) -> datetime:
    """When a run due at `due` is claimed, in the order of due times: the rule above."""
    return due - timedelta(seconds=priority * PRIORITY_STEP_SECONDS)
