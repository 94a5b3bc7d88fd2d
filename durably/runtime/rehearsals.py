"""Rehearsals: does this code follow the histories of these runs? Each history is replayed
against the code in a throwaway SQLite store, and none of the user's code runs for real: a
step the history records returns its recorded outcome, and the first call that would run for
real ends the rehearsal there (durably.workflow.context.ReplayFrontier). A call the history
does not record at its place is found as it would be in production: the run is parked with
NonDeterminismError, here in the throwaway store only.

Replay tests (durably.testing.replay) rehearse one exported run; `durably upgrade` rehearses
every run in flight on a version no live worker serves before moving it to the code being
deployed (durably.runtime.upgrades).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from durably.clock import FakeClock
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.replay import fold_run
from durably.core.retry import Retry
from durably.core.status import RunStatus
from durably.runtime.engine import Settings
from durably.runtime.handoffs import Taker
from durably.runtime.worker import Worker
from durably.stores import NewRun, Store, open_store
from durably.workflow.context import replay_only
from durably.workflow.registry import Registry

__all__ = ["INCOMPATIBLE", "Rehearsal", "rehearse", "replayable"]

# Where a run's replayable history ends: what follows is its end, not its workflow's calls.
_ENDINGS = frozenset(
    {
        EventKind.RUN_COMPLETED,
        EventKind.RUN_FAILED,
        EventKind.RUN_CANCELLED,
        EventKind.COMPENSATING,
    }
)
# The errors of code that no longer follows a history (the rest of a park is the history's)
INCOMPATIBLE = ("NonDeterminismError", "UnsafeConcurrency")
_THE_HISTORYS_OWN = ("StepFailed", "Escalated")


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """How the code went through one run's history. `problem` None: it follows the history
    as far as the history goes (`calls`: the calls it records: steps, timers, waits, ...).
    Else why it stopped: `incompatible` if the code no longer follows the history (the
    message names the recorded call and the new one), else another reason (the run's input
    does not fit the new signature, say)."""

    run_id: str
    calls: int
    problem: ErrorInfo | None = None
    incompatible: bool = False

    @property
    def follows(self) -> bool:
        return self.problem is None


def replayable(events: Sequence[Event]) -> list[Event]:
    """The history up to the run's end (its completion, failure, cancel or undo)."""
    kept: list[Event] = []
    for event in events:
        if event.kind in _ENDINGS:
            break
        kept.append(event)
    return kept


def rehearse(registry: Registry, runs: Sequence[tuple[NewRun, Sequence[Event]]]) -> list[Rehearsal]:
    """Rehearse each run (as created, with its history) against the code of `registry`, all
    in one throwaway store; one Rehearsal a run, in order. A history must not be empty."""
    if not runs:
        return []
    histories = [replayable(events) for _, events in runs]
    clock = FakeClock(max(events[-1].at for events in histories))
    with tempfile.TemporaryDirectory(prefix="durably-rehearsal-") as folder:
        path = Path(folder) / "rehearsal.db"
        path.write_bytes(_empty_store_image())
        store = open_store(f"sqlite:///{path}")
        try:
            for (run, _), events in zip(runs, histories, strict=True):
                # any worker claims a run of no version: the code rehearsed is the one to try
                store.import_run(replace(run, version=None), events, now=clock.now())
            with replay_only():
                Worker(_Stage(registry, store, clock), name="durably-rehearsal").run_until_idle()
            return [
                _verdict(store, run.id, len(fold_run(events).steps))
                for (run, _), events in zip(runs, histories, strict=True)
            ]
        finally:
            store.close()


@functools.cache
def _empty_store_image() -> bytes:
    """The file of an empty SQLite store at this durably's schema, made once a process: a
    rehearsal's throwaway store starts as a copy of it (under 1 ms) rather than creating and
    migrating its tables (~8 ms, most of a query of a short run: durably.runtime.queries).
    Immutable bytes, so the cache holds no state a test could see change."""
    with tempfile.TemporaryDirectory(prefix="durably-rehearsal-") as folder:
        path = Path(folder) / "empty.db"
        open_store(f"sqlite:///{path}").close()  # closing checkpoints the WAL into the file
        return path.read_bytes()


def _verdict(store: Store, run_id: str, calls: int) -> Rehearsal:
    """A run the rehearsal parked for anything but its history's own failure did not follow."""
    run = store.get_run(run_id)
    assert run is not None
    if run.status is not RunStatus.NEEDS_ATTENTION or run.error is None:
        return Rehearsal(run_id, calls)
    error_class = run.error.error_class
    if error_class.endswith(_THE_HISTORYS_OWN):
        return Rehearsal(run_id, calls)
    return Rehearsal(run_id, calls, run.error, incompatible=error_class.endswith(INCOMPATIBLE))


@dataclass
class _Stage:
    """The host a rehearsal's worker serves: the code, a throwaway store, a fake clock, and
    no hooks (a rehearsal is not an attempt: metrics and traces do not hear of it)."""

    registry: Registry
    _store: Store
    clock: FakeClock

    @property
    def store(self) -> Store:
        return self._store

    def settings(self) -> Settings:
        return Settings(
            clock=self.clock,
            default_retry=Retry(),  # no attempt runs: no retry
            max_recoveries=1_000_000,
            seed=0,
            hooks=None,
        )

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        return _nothing

    def offer(self, taker: Taker) -> Callable[[], None]:
        return _nothing  # a rehearsal starts no run: nothing to hand over


def _nothing() -> None:
    return None
