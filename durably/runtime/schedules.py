"""Schedules in a store: a worker's pass over its app's schedules (`fire`), and what a person
or a script does with them (`Schedules`: list, pause, resume, trigger, backfill; the same for
`app.schedules` and `durably schedules`). The arithmetic is durably.core.schedules; here are
the store calls around it, in the order that loses no tick and starts none twice:

1. under the schedule's lock, plan the due ticks and remember them as `pending`;
2. create their runs (ids fixed by the ticks: a second creation finds the run);
3. under the lock again, forget the ticks whose runs exist.
A worker that dies between 1 and 3 leaves `pending` to the next pass, which does 2 and 3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from durably.clock import Clock
from durably.core.audit import Action, Via, audit_of
from durably.core.schedules import Plan, State, plan, run_id, ticks
from durably.core.status import FINAL
from durably.errors import DurablyError, UnknownSchedule
from durably.stores.protocol import Store
from durably.stores.records import NewRun
from durably.workflow.definitions import Schedule
from durably.workflow.registry import Registry

__all__ = ["MAX_BACKFILL", "ScheduleInfo", "Schedules", "fire", "register"]

MAX_BACKFILL = 10_000  # ticks one backfill starts at most


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as `durably schedules list` shows it."""

    name: str
    workflow: str
    when: str  # "cron 0 * * * * (Europe/Berlin)" or "every 900s"
    overlap: str
    catchup: str
    paused: bool
    last_tick: datetime | None
    last_run: str | None
    next_fire: datetime | None
    fired: int
    skipped: int
    defined: bool  # by the app at hand (False: only its state is in the store)


def register(store: Store, schedule: Schedule, *, now: datetime) -> State:
    """Make the store's state of `schedule` match its definition in code: a new schedule
    starts with the ticks after `now`; a changed one keeps its progress and takes the new
    spec."""

    def change(current: str | None) -> tuple[str, State]:
        if current is None:
            state = State(schedule.spec, since=now)
        else:
            state = State.from_json(current)
            if state.spec != schedule.spec:
                state = replace(state, spec=schedule.spec)
        return state.to_json(), state

    return store.update_schedule(schedule.name, change)


def fire(store: Store, schedule: Schedule, state: State, *, now: datetime) -> State:
    """One pass over `schedule` (whose state was read as `state`) at `now`: start its due
    ticks as the policies say. The state after the pass."""
    if state.pending:
        state = _start(store, schedule, state.pending, now=now)
    upcoming = state.next_fire(schedule.name)
    if state.held is None and (upcoming is None or upcoming > now):
        return state
    previous = None if state.last_run is None else store.get_run(state.last_run)
    ended = previous is None or previous.status in FINAL
    seen = state

    def change(current: str | None) -> tuple[str, Plan | None]:
        latest = State.from_json(current) if current else seen
        if (latest.last_tick, latest.last_run, latest.held) != (
            seen.last_tick,
            seen.last_run,
            seen.held,
        ):  # another worker moved it on meanwhile: its pass did this one's work
            return latest.to_json(), None
        decided = plan(schedule.name, latest, now, previous_ended=ended)
        return decided.state.to_json(), decided

    decided = store.update_schedule(schedule.name, change)
    if decided is None or not decided.state.pending:
        return state if decided is None else decided.state
    return _start(store, schedule, decided.state.pending, now=now)


def _start(store: Store, schedule: Schedule, pending: tuple[str, ...], *, now: datetime) -> State:
    """Create the runs of the planned ticks (or find them), then forget the ticks."""
    at = [datetime.fromisoformat(tick) for tick in pending]
    store.create_runs([_new_run(schedule, tick) for tick in at], now=now)

    def forget(current: str | None) -> tuple[str, State]:
        state = State.from_json(current) if current else State(schedule.spec, since=now)
        state = replace(state, pending=tuple(t for t in state.pending if t not in pending))
        return state.to_json(), state

    return store.update_schedule(schedule.name, forget)


def _new_run(schedule: Schedule, tick: datetime) -> NewRun:
    workflow = schedule.workflow
    return NewRun(
        run_id(schedule.name, tick),
        workflow.name,
        schedule.input(tick),
        priority=workflow.priority or 0,
        version=workflow.version,
        queue=workflow.queue,
    )


class Schedules:
    """The schedules of a store, and of an app's code (`registry`): what `app.schedules` and
    `durably schedules` act through."""

    def __init__(self, store: Store, registry: Registry | None, clock: Clock) -> None:
        self._store = store
        self._registry = registry
        self._clock = clock

    def all(self) -> list[ScheduleInfo]:
        """Every schedule in the store, and those the app defines that no worker registered."""
        now = self._clock.now()
        states = {name: State.from_json(text) for name, text in self._store.schedules().items()}
        defined = {} if self._registry is None else self._registry.schedules
        for name, schedule in defined.items():
            states.setdefault(name, State(schedule.spec, since=now))
        return [_info(name, states[name], name in defined) for name in sorted(states)]

    # A person's action (`by`, reaching durably `via` the CLI, the API, the dashboard) is
    # recorded in the audit trail; code's own calls, without `by`, are not.

    def pause(self, name: str, *, by: str | None = None, via: Via = Via.LIBRARY) -> None:
        """No tick of it starts until it is resumed (ticks meanwhile are not caught up)."""
        self._change(name, lambda state: replace(state, paused=True))
        self._record(Action.PAUSE_SCHEDULE, by, via, schedule=name)

    def resume(self, name: str, *, by: str | None = None, via: Via = Via.LIBRARY) -> None:
        """Its ticks from now on start again (and a tick held before the pause, for its
        previous run's end with overlap="queue", still starts once that run ends)."""
        now = self._clock.now()
        self._change(name, lambda state: replace(state, paused=False, since=now))
        self._record(Action.RESUME_SCHEDULE, by, via, schedule=name)

    def trigger(self, name: str, *, by: str | None = None, via: Via = Via.LIBRARY) -> str:
        """Start a run of the schedule now, outside its ticks (its policies do not apply); its
        run's id."""
        schedule, now = self._defined(name), self._clock.now()
        run = _new_run(schedule, now)
        if by is not None:  # recorded with the run's start, if it starts
            run = replace(run, audit=audit_of(Action.TRIGGER_SCHEDULE, by, via, schedule=name))
        self._store.create_runs([run], now=now)
        return run.id

    def backfill(
        self,
        name: str,
        start: datetime,
        end: datetime,
        *,
        by: str | None = None,
        via: Via = Via.LIBRARY,
    ) -> list[str]:
        """Start a run for every tick from `start` to `end` (both included), as if they had
        come; ticks already started are found, not started again. The runs' ids, in order."""
        schedule = self._defined(name)
        if start.tzinfo is None or end.tzinfo is None or end < start:
            raise DurablyError("a backfill needs a time-zone-aware start at or before its end")
        due: list[datetime] = []
        for tick in ticks(schedule.spec, start - timedelta(microseconds=1)):  # start included
            if tick > end or len(due) > MAX_BACKFILL:
                break
            if tick >= start:
                due.append(tick)
        if len(due) > MAX_BACKFILL:
            raise DurablyError(
                f"the backfill covers more than {MAX_BACKFILL:,} ticks: split it into shorter spans"
            )
        runs = [_new_run(schedule, tick) for tick in due]
        self._store.create_runs(runs, now=self._clock.now())
        span = {"schedule": name, "start": start.isoformat(), "end": end.isoformat()}
        self._record(Action.BACKFILL_SCHEDULE, by, via, runs=len(runs), **span)
        return [run.id for run in runs]

    def _record(self, action: Action, by: str | None, via: Via, **detail: str | int) -> None:
        if by is not None:
            self._store.record_audit(audit_of(action, by, via, **detail), now=self._clock.now())

    def _defined(self, name: str) -> Schedule:
        schedules = {} if self._registry is None else self._registry.schedules
        if name not in schedules:
            known = ", ".join(sorted(schedules)) or "none"
            raise UnknownSchedule(
                f"no schedule named {name!r} is defined by this app (defined: {known}); "
                "starting its runs needs the app that defines it (the CLI: --app)"
            )
        return schedules[name]

    def _change(self, name: str, how: Callable[[State], State]) -> None:
        stored = self._store.schedules()
        if name not in stored:
            defined = {} if self._registry is None else self._registry.schedules
            if name not in defined:
                known = ", ".join(sorted({*stored, *defined})) or "none"
                raise UnknownSchedule(
                    f"no schedule is named {name!r} in this store or app (known: {known}); a "
                    "schedule is stored once a worker of its app has run (or give --app)"
                )
            schedule = defined[name]  # defined, not registered yet: register it now
            register(self._store, schedule, now=self._clock.now())

        def change(current: str | None) -> tuple[str, None]:
            assert current is not None
            return how(State.from_json(current)).to_json(), None

        self._store.update_schedule(name, change)


def _info(name: str, state: State, defined: bool) -> ScheduleInfo:
    spec = state.spec
    when = f"cron {spec.cron} ({spec.timezone})" if spec.cron else f"every {spec.every:g}s"
    return ScheduleInfo(
        name,
        spec.workflow,
        when,
        spec.overlap,
        spec.catchup,
        state.paused,
        state.last_tick,
        state.last_run,
        state.next_fire(name),
        state.fired,
        state.skipped,
        defined,
    )
