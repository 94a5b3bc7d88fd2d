"""Replay tests: does the code you are about to deploy still follow the histories of runs in
flight? `durably.testing.replay(app, "run.json")` replays an exported run (durably runs
export) against the app's current code, in a throwaway SQLite store, and runs none of its
user code (a rehearsal: durably.runtime.rehearsals). A call the history does not record at
its place fails the test with NonDeterminismError, as it would park the run in production.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from durably.client.exports import read_export
from durably.errors import DurablyError, NonDeterminismError
from durably.runtime.rehearsals import rehearse, replayable
from durably.stores import NewRun
from durably.workflow.registry import Registry

__all__ = ["Replayed", "replay"]


class App(Protocol):
    """What a replay needs of the app whose code it tries (a durably.App): its definitions."""

    registry: Registry


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
    if not replayable(exported.events):
        raise DurablyError("the exported run has no history to replay")
    app.registry.workflow_named(exported.workflow)  # UnknownWorkflow: the app lacks it
    run = NewRun(exported.run_id, exported.workflow, exported.input)
    [rehearsed] = rehearse(app.registry, [(run, exported.events)])
    problem = rehearsed.problem
    if problem is not None and rehearsed.incompatible:
        raise NonDeterminismError(position=-1, recorded="", called="", why=problem.message)
    if problem is not None:
        raise DurablyError(
            f"the replay stopped at a parked run: {problem.error_class}: {problem.message}"
        )
    return Replayed(exported.run_id, exported.workflow, rehearsed.calls)
