"""Fold a history into step records and decide, per step call, whether to replay or run."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from durably.core.history import ErrorInfo, Event, EventKind
from durably.errors import NonDeterminismError, PayloadError

__all__ = ["Execute", "Replay", "StepRecord", "fold_steps", "next_action"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What the history says about the step call at one position."""

    position: int
    name: str
    attempts: int = 0  # attempts started
    result: str | None = None  # JSON of the result, once completed
    error: ErrorInfo | None = None  # the final failure, once failed
    completed: bool = False

    @property
    def settled(self) -> bool:
        return self.completed or self.error is not None


@dataclass(frozen=True, slots=True)
class Replay:
    """The step already has an outcome: hand it back without running the body."""

    record: StepRecord


@dataclass(frozen=True, slots=True)
class Execute:
    """Run the body for real, as this attempt."""

    position: int
    attempt: int


def fold_steps(events: Iterable[Event]) -> list[StepRecord]:
    """One record per step position, in position order, from a run's events."""
    steps: dict[int, StepRecord] = {}
    for event in events:
        if event.position is None or event.name is None:
            continue
        known = steps.get(event.position) or StepRecord(event.position, event.name)
        if event.kind is EventKind.STEP_STARTED:
            known = replace(known, attempts=max(known.attempts, event.attempt or 1))
        elif event.kind is EventKind.STEP_COMPLETED:
            known = replace(known, result=event.data, completed=True)
        elif event.kind is EventKind.STEP_FAILED:
            known = replace(known, error=_error_of(event))
        steps[event.position] = known
    return [steps[position] for position in sorted(steps)]


def next_action(steps: Sequence[StepRecord], position: int, name: str) -> Replay | Execute:
    """Decide whether the step call at `position` replays or runs for real."""
    if position >= len(steps):
        return Execute(position, attempt=1)
    recorded = steps[position]
    if recorded.name != name:
        raise NonDeterminismError(position=position, recorded=recorded.name, called=name)
    if recorded.settled:
        return Replay(recorded)
    return Execute(position, attempt=recorded.attempts + 1)  # unknown: crashed mid-attempt


def _error_of(event: Event) -> ErrorInfo:
    try:
        data = json.loads(event.data or "")
        return ErrorInfo(str(data["error_class"]), str(data["message"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise PayloadError(
            f"event #{event.seq} ({event.kind}) of step {event.name!r} holds unreadable "
            f"error data {event.data!r}: {exc}"
        ) from exc
