"""The run page's chart spans the run's own time: a run that ended (or waits for a person)
is drawn from its first event to its last, however long after it is looked at; a run under
way is drawn to now."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durably.core.history import Event, EventKind
from durably.views.gantt import gantt, span_seconds

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


HISTORY = [
    Event(1, EventKind.RUN_STARTED, at(0)),
    Event(2, EventKind.STEP_STARTED, at(0), 0, "charge", 1, "{}"),
    Event(3, EventKind.STEP_COMPLETED, at(57), 0, "charge", 1, '"ok"'),
    Event(4, EventKind.RUN_COMPLETED, at(57)),
]


def test_an_ended_run_fills_the_width_however_late_it_is_looked_at() -> None:
    [row] = gantt(HISTORY)  # no now: the run ended

    [bar] = row.bars
    assert (bar.left, bar.width) == (0.0, 100.0)
    assert span_seconds(HISTORY) == 57.0


def test_a_run_under_way_is_drawn_to_now() -> None:
    under_way = HISTORY[:2]
    [row] = gantt(under_way, at(30))

    [bar] = row.bars
    assert (bar.outcome, bar.left, bar.width) == ("open", 0.0, 100.0)
    assert span_seconds(under_way, at(30)) == 30.0
    [later] = gantt(HISTORY, at(57 + 171))[0].bars  # an ended run given now: a quarter
    assert round(later.width) == 25
