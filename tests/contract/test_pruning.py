"""The Store contract for retention (Store.prune): runs that ended before a time are deleted
with their histories and inbox, oldest first, a batch at a time; parked, paused and unfinished
runs never are. Every test runs against both real stores."""

from __future__ import annotations

from datetime import timedelta

from durably.core.history import ErrorInfo
from durably.core.status import RunStatus
from durably.stores import Message, Store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, execute_sql, new_run


def _ended(store: Store, clock: FakeClock, run_id: str, status: RunStatus) -> None:
    store.create_run(new_run(run_id), now=clock.now())
    [claim] = store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    error = None if status is RunStatus.COMPLETED else ErrorInfo("x.Error", "it failed")
    result = "null" if status is RunStatus.COMPLETED else None
    later = clock.now() + timedelta(days=9) if status is RunStatus.PENDING else None
    store.commit(
        [checkpoint(claim, status=status, result=result, error=error, available_at=later)],
        now=clock.now(),
    )


def test_old_ended_runs_go_with_their_history_and_the_rest_stays(
    store: Store, clock: FakeClock, store_url: str
) -> None:
    for run_id, status in [
        ("done", RunStatus.COMPLETED),
        ("failed", RunStatus.FAILED),
        ("timed-out", RunStatus.TIMED_OUT),
        ("cancelled", RunStatus.CANCELLED),
        ("parked", RunStatus.NEEDS_ATTENTION),
        ("undo-failed", RunStatus.COMPENSATION_FAILED),
        ("paused", RunStatus.PAUSED),
        ("sleeping", RunStatus.PENDING),
    ]:
        _ended(store, clock, run_id, status)
        clock.advance("1s")
    store.create_run(new_run("never-claimed"), now=clock.now())
    store.send(Message("done", "signal", "test", name="late"), now=clock.now())  # refused: ended
    clock.advance("30d")
    _ended(store, clock, "recent", RunStatus.COMPLETED)

    assert store.prunable(clock.now() - timedelta(days=1)) == 4
    deleted = store.prune(clock.now() - timedelta(days=1), limit=100)

    assert deleted == 4
    assert store.prunable(clock.now() - timedelta(days=1)) == 0
    left = {run.id for run in store.runs(limit=100)}
    assert left == {"parked", "undo-failed", "paused", "sleeping", "never-claimed", "recent"}
    assert store.history("done") == []
    counted = execute_sql(
        store_url, "SELECT count(*) FROM durably_events WHERE run_id = ?", ["failed"]
    )
    assert counted == [(0,)]
    assert store.prune(clock.now() - timedelta(days=1), limit=100) == 0


def test_a_batch_takes_the_oldest_first(store: Store, clock: FakeClock) -> None:
    for n in range(5):
        _ended(store, clock, f"r{n}", RunStatus.COMPLETED)
        clock.advance("1m")

    assert store.prune(clock.now(), limit=2) == 2
    assert sorted(run.id for run in store.runs(limit=10)) == ["r2", "r3", "r4"]
    assert store.prune(clock.now(), limit=2) == 2
    assert store.prune(clock.now(), limit=2) == 1
    assert store.runs(limit=10) == []
