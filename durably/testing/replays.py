"""Replay tests: does the code you are about to deploy still follow the histories of runs in
flight? `durably.testing.replay(app, "run.json")` replays an exported run (durably runs
export) against the app's current code, in a throwaway SQLite store, and runs none of its
user code: a step the history records returns its recorded outcome; the first call that would
run for real ends the replay there (durably.workflow.context.ReplayFrontier). A call the
history does not record at its place fails the test with NonDeterminismError, as it would
park the run in production.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from durably.client.exports import read_export
from durably.clock import FakeClock
from durably.core.history import Event, EventKind
from durably.core.replay import fold_run
from durably.core.status import RunStatus
from durably.errors import DurablyError, NonDeterminismError
from durably.stores import NewRun, RunRecord, open_store
from durably.workflow.context import replay_only
from durably.workflow.registry import Registry

__all__ = ["Replayed", "replay"]

# Where a run's replayable history ends: what follows is its end, not its workflow's calls.
_ENDINGS = {
    EventKind.RUN_COMPLETED,
    EventKind.RUN_FAILED,
    EventKind.RUN_CANCELLED,
    EventKind.COMPENSATING,
}
_INCOMPATIBLE = ("NonDeterminismError", "UnsafeConcurrency")


class App(Protocol):
    """What a replay needs of the app whose code it tries (a durably.App): its definitions,
    and its class, to make a replaying app of the same code on a throwaway store."""

    registry: Registry

    def workflow_named(self, name: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class Replayed:
    """A replay that found nothing incompatible: the run, and how many calls (steps, timers,
    signal waits, ...) its history records, which the current code followed as far as it
    went."""

    run_id: str
    workflow: str
    calls: int


def replay(app: App, source: str | Path | Mapping[str, Any]) -> Replayed:
    """Replay the exported run `source` (a file's path, its JSON, or its data) against `app`'s
    code, running none of its steps. NonDeterminismError if the code no longer follows the
    history (the message names both calls); DurablyError if the replay could not get through
    it for another reason (its message says which)."""
    exported = read_export(source)
    events = _replayable(exported.events)
    app.workflow_named(exported.workflow)  # UnknownWorkflow: the app does not define it
    with tempfile.TemporaryDirectory(prefix="durably-replay-") as folder:
        store = open_store(f"sqlite:///{Path(folder) / 'replay.db'}")
        clock = FakeClock(events[-1].at)
        make: Any = type(app)  # the app's own class: no import of it here
        replayer = make(store, clock=clock, max_recoveries=1_000_000)
        replayer.registry = app.registry
        try:
            store.import_run(
                NewRun(exported.run_id, exported.workflow, exported.input), events, now=clock.now()
            )
            with replay_only():
                replayer.run_until_idle()
            run = store.get_run(exported.run_id)
        finally:
            replayer.close()
            store.close()
    assert run is not None
    _verdict(run)
    return Replayed(exported.run_id, exported.workflow, len(fold_run(events).steps))


def _replayable(events: Sequence[Event]) -> list[Event]:
    """The history up to the run's end (its completion, failure, cancel or undo)."""
    kept: list[Event] = []
    for event in events:
        if event.kind in _ENDINGS:
            break
        kept.append(event)
    if not kept:
        raise DurablyError("the exported run has no history to replay")
    return kept


def _verdict(run: RunRecord) -> None:
    """Raise if the replay parked the run for anything but the history's own failure."""
    if run.status is not RunStatus.NEEDS_ATTENTION or run.error is None:
        return
    error_class, message = run.error.error_class, run.error.message
    if error_class.endswith(_INCOMPATIBLE):
        raise NonDeterminismError(position=-1, recorded="", called="", why=message)
    if error_class.endswith("StepFailed") or "Escalated" in error_class:
        return  # the history's own failure, replayed: the code follows it
    raise DurablyError(f"the replay stopped at a parked run: {error_class}: {message}")
