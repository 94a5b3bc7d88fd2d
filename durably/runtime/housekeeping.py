"""A worker's housekeeping between its claims: starting the due ticks of the app's schedules,
and deleting the runs that ended longer ago than the app's retention. Until either is due,
each costs a comparison of times."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from durably.clock import Clock
from durably.core.schedules import State
from durably.runtime import schedules
from durably.runtime.committer import Committer
from durably.stores.protocol import Store
from durably.workflow.definitions import Schedule

__all__ = ["Housekeeping"]

log = logging.getLogger("durably.worker")

# How often a worker reads its schedules' state at the least (a pause, a change by another
# worker); it looks at once when one is due.
_SCHEDULES_EVERY = timedelta(minutes=1)
# Retention: runs deleted a transaction at a time; when idle, batch after batch while there is
# more; when busy, a batch a minute; when none was left, a look every five minutes.
_PRUNE_BATCH = 500
_PRUNE_BUSY, _PRUNE_EVERY = timedelta(minutes=1), timedelta(minutes=5)


class Housekeeping:
    """One worker's: `wake_at(t)` has the worker look again at `t` (a schedule's next tick)."""

    def __init__(
        self,
        worker: str,
        store: Store,
        clock: Clock,
        *,
        schedules: Mapping[str, Schedule],
        retention: timedelta | None,
        poll: timedelta,
        wake_at: Callable[[datetime], None],
    ) -> None:
        self._worker = worker
        self._store = store
        self._clock = clock
        self._schedules = schedules
        self._retention = retention
        self._poll = poll
        self._wake_at = wake_at
        self._schedules_at: datetime | None = None  # when to look at the schedules next
        self._prune_at: datetime | None = None  # when to delete old runs next (retention)
        self._prune_more = True  # old runs may be left to delete: go on when idle

    async def run_schedules(self, committer: Committer) -> None:
        """Start the due ticks of the app's schedules (durably.runtime.schedules), when one is
        due: between ticks this costs a comparison of times, and one read a minute."""
        defined, store = self._schedules, self._store
        now = self._clock.now()
        if not defined or (self._schedules_at is not None and now < self._schedules_at):
            return
        states = await committer.call(store.schedules)
        check = now + _SCHEDULES_EVERY
        for name, schedule in defined.items():
            state = State.from_json(states[name]) if name in states else None
            if state is None or state.spec != schedule.spec:  # new, or changed in code
                state = await committer.call(
                    functools.partial(schedules.register, store, schedule, now=now)
                )
            upcoming = state.next_fire(name)
            if state.pending or state.held or (upcoming is not None and upcoming <= now):
                state = await committer.call(
                    functools.partial(schedules.fire, store, schedule, state, now=now)
                )
                upcoming = now + self._poll * 5 if state.held else state.next_fire(name)
            check = check if upcoming is None else min(check, upcoming)
        self._schedules_at = check
        self._wake_at(check)

    async def prune(self, committer: Committer, *, idle: bool) -> None:
        """Delete a batch of runs ended longer ago than the app's retention: in the worker's
        idle passes (nothing claimed, nothing running), a batch each while there is more; when
        it is never idle, a batch a minute all the same."""
        retention, now = self._retention, self._clock.now()
        if retention is None:
            return
        if self._prune_at is None:  # from the worker's start
            self._prune_at = now + _PRUNE_BUSY
        if now < self._prune_at and not (idle and self._prune_more):
            return
        prune = functools.partial(self._store.prune, now - retention, limit=_PRUNE_BATCH)
        deleted = await committer.call(prune)
        self._prune_more = deleted >= _PRUNE_BATCH
        self._prune_at = now + (_PRUNE_BUSY if self._prune_more else _PRUNE_EVERY)
        if deleted:
            log.info(
                "worker %s: deleted %d run(s) ended over %s ago", self._worker, deleted, retention
            )
