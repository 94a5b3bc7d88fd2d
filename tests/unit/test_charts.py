"""The dashboard's charts, pure: a series of samples becomes a polyline in a 300 x 60 box, the
last hour across (older samples left out), 0 at the bottom and the hour's peak at the top."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed")

from durably.stores.records import Ended
from durably.web.charts import Sample, chart, per_minute

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def sample(minutes_ago: float, due: int) -> Sample:
    return Sample(NOW - timedelta(minutes=minutes_ago), {}, due, 0.0)


def test_a_series_becomes_a_polyline_of_the_last_hour() -> None:
    drawn = chart(
        "depth",
        [sample(90, 50), sample(60, 0), sample(30, 4), sample(0, 2)],
        lambda s: float(s.due),
        NOW,
    )
    assert drawn.points == "0.0,58.0 150.0,2.0 300.0,30.0"  # the 90-minute-old one left out
    assert (drawn.latest, drawn.peak) == (2.0, 4.0)


def test_nothing_to_draw() -> None:
    flat = chart("depth", [sample(10, 0)], lambda s: float(s.due), NOW)
    assert flat.points == "250.0,58.0"
    assert (flat.latest, flat.peak) == (0.0, 0.0)
    empty = chart("depth", [], lambda s: float(s.due), NOW)
    assert (empty.points, empty.latest) == ("", 0.0)


def test_runs_ended_a_minute_over_the_last_hour() -> None:
    minute = NOW.replace(second=0)
    ended = [
        Ended(minute - timedelta(minutes=90), "completed", 9),  # before the hour: left out
        Ended(minute - timedelta(minutes=30), "completed", 4),
        Ended(minute - timedelta(minutes=30), "failed", 3),
        Ended(minute, "completed", 2),
    ]
    done = per_minute("completed", ended, {"completed"}, NOW)
    assert (done.latest, done.peak) == (2.0, 4.0)
    points = done.points.split()
    assert len(points) == 60  # a point a minute, zeros where none ended
    assert points[29] == "150.0,2.0"  # 30 minutes ago, at the peak
    assert points[0] == "5.0,58.0"  # 59 minutes ago: none
    assert per_minute("failed", ended, {"failed"}, NOW).peak == 3.0
