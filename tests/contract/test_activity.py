"""The Store contract for the dashboard's chart of the last hour (Store.activity): how many runs
ended or were parked in each minute since a time, by status; runs still going, and runs that
ended before it, are not counted. Every test runs against both real stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durably.core.status import RunStatus
from durably.stores import Store
from durably.stores.records import Ended
from durably.testing import FakeClock

from .test_pruning import _ended


def test_runs_ended_per_minute_by_status(store: Store, clock: FakeClock) -> None:
    clock.set(datetime(2026, 11, 24, 12, 0, 10, tzinfo=UTC))
    _ended(store, clock, "long-ago", RunStatus.COMPLETED)
    clock.advance("2h")  # 14:00:10
    _ended(store, clock, "a", RunStatus.COMPLETED)
    _ended(store, clock, "b", RunStatus.COMPLETED)
    _ended(store, clock, "c", RunStatus.FAILED)
    clock.advance("1m")  # 14:01:10
    _ended(store, clock, "d", RunStatus.NEEDS_ATTENTION)
    _ended(store, clock, "e", RunStatus.PAUSED)  # not an end
    _ended(store, clock, "f", RunStatus.PENDING)  # still going

    found = store.activity(since=clock.now() - timedelta(hours=1))

    at = datetime(2026, 11, 24, 14, 0, tzinfo=UTC)
    assert found == [
        Ended(at, "completed", 2),
        Ended(at, "failed", 1),
        Ended(at + timedelta(minutes=1), "needs_attention", 1),
    ]
    assert store.activity(since=clock.now() + timedelta(seconds=1)) == []
