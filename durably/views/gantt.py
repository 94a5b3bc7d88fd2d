"""The run page's timeline as bars on a time axis (a Gantt-like view): one row per step or
durable call, a bar per attempt, wait and undo, coloured by how it ended. Pure: events in,
bars out; the template draws them as percentages of the run's span."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from durably.core.history import Event, EventKind

__all__ = ["Bar", "Row", "gantt", "span_seconds"]


@dataclass(frozen=True, slots=True)
class Bar:
    kind: str  # attempt, wait, undo
    outcome: str  # ok, failed, open (not ended yet), lost
    left: float  # percent of the span from the run's start
    width: float  # percent of the span (at least a sliver, to be seen)
    title: str  # what a hover says


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    bars: list[Bar]


_BEGINS = {
    EventKind.STEP_STARTED: "attempt",
    EventKind.TIMER_SET: "wait",
    EventKind.SIGNAL_WAITING: "wait",
    EventKind.APPROVAL_REQUESTED: "wait",
    EventKind.COMPENSATION_STARTED: "undo",
}
_ENDS = {
    EventKind.STEP_COMPLETED: "ok",
    EventKind.STEP_SKIPPED: "ok",
    EventKind.STEP_ATTEMPT_FAILED: "failed",
    EventKind.STEP_FAILED: "failed",
    EventKind.ATTEMPT_LOST: "lost",
    EventKind.TIMER_FIRED: "ok",
    EventKind.SIGNAL_RECEIVED: "ok",
    EventKind.SIGNAL_TIMED_OUT: "failed",
    EventKind.APPROVAL_DECIDED: "ok",
    EventKind.COMPENSATION_COMPLETED: "ok",
    EventKind.COMPENSATION_ATTEMPT_FAILED: "failed",
    EventKind.COMPENSATION_FAILED: "failed",
}


_UNDO = frozenset(
    {
        EventKind.COMPENSATION_STARTED,
        EventKind.COMPENSATION_COMPLETED,
        EventKind.COMPENSATION_ATTEMPT_FAILED,
        EventKind.COMPENSATION_FAILED,
        EventKind.COMPENSATION_SKIPPED,
    }
)


def gantt(events: Sequence[Event], now: datetime | None = None) -> list[Row]:
    """A row per position (in order of first appearance), each with its bars, on the run's
    own span: from its first event to its last, or to `now` for a run still under way (None
    for a run that ended or waits for a person: its chart does not stretch as time passes)."""
    if not events:
        return []
    origin = events[0].at
    end = events[-1].at if now is None else max(events[-1].at, now)
    span = max((end - origin).total_seconds(), 1e-3)

    def percent(moment: datetime) -> float:
        return 100.0 * (moment - origin).total_seconds() / span

    rows: dict[tuple[int, bool], Row] = {}
    open_bars: dict[tuple[int, bool], tuple[str, datetime, str]] = {}
    for event in events:
        if event.position is None:
            continue
        undo = event.kind in _UNDO
        key = (event.position, undo)
        if key not in rows:
            name = event.name or ""
            rows[key] = Row(f"#{event.position} {'undo ' if undo else ''}{name}", [])
        if event.kind in _BEGINS:
            attempt = "" if event.attempt is None else f" attempt {event.attempt}"
            open_bars[key] = (_BEGINS[event.kind], event.at, f"{event.kind}{attempt}")
        elif event.kind in _ENDS and key in open_bars:
            kind, began, title = open_bars.pop(key)
            rows[key].bars.append(_bar(kind, _ENDS[event.kind], began, event.at, title, percent))
    for key, (kind, began, title) in open_bars.items():
        rows[key].bars.append(_bar(kind, "open", began, end, title, percent))
    return list(rows.values())


def span_seconds(events: Sequence[Event], now: datetime | None = None) -> float:
    """The seconds the chart spans (its axis's end), as `gantt` draws it."""
    if not events:
        return 0.0
    end = events[-1].at if now is None else max(events[-1].at, now)
    return (end - events[0].at).total_seconds()


def _bar(
    kind: str,
    outcome: str,
    began: datetime,
    ended: datetime,
    title: str,
    percent: Callable[[datetime], float],
) -> Bar:
    left, right = percent(began), percent(ended)
    took = (ended - began).total_seconds()
    return Bar(kind, outcome, left, max(right - left, 0.4), f"{title}: {outcome}, {took:.3f}s")
