"""The Store contract for what a metrics scrape reads (Store.stats): runs by status, exactly,
as runs start, end and are pruned, scrape after scrape of one store (which counts the ended
runs once and then only what changed: durably.stores.sql.tally) and at a first scrape of
another; the oldest run not ended, and the due ones. Every test runs against both real
stores."""

from __future__ import annotations

from datetime import timedelta

from durably.core.history import ErrorInfo
from durably.core.status import RunStatus
from durably.stores import NewRun, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, execute_sql

ZERO = timedelta(0)


def _counted(url: str) -> dict[str, int]:
    """Runs by status, counted in the table."""
    rows = execute_sql(url, "SELECT status, count(*) FROM durably_runs GROUP BY status")
    return {str(status): int(count) for status, count in rows}


def _end(
    store: Store, clock: FakeClock, ids: list[str], status: RunStatus, behind: timedelta = ZERO
) -> None:
    """Claim these (due) runs and end them in `status`, at one time (`behind` the clock's)."""
    claims = store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=100)
    assert sorted(c.run_id for c in claims) == sorted(ids)
    error = None if status is RunStatus.COMPLETED else ErrorInfo("ValueError", "no")
    ended = [checkpoint(c, status=status, error=error) for c in claims]
    assert store.commit(ended, now=clock.now() - behind) == [True] * len(ids)


def _start(
    store: Store, clock: FakeClock, prefix: str, count: int, workflow: str = WORKFLOW
) -> list[str]:
    ids = [f"{prefix}-{n}" for n in range(count)]
    store.create_runs([NewRun(run_id, workflow, "[]") for run_id in ids], now=clock.now())
    return ids


def test_runs_by_status_stay_exact_scrape_after_scrape(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    def scraped() -> dict[str, int]:
        got = store.stats(now=clock.now()).by_status
        assert got == _counted(store_url)
        fresh = open_store(store_url)  # a first scrape: every ended run counted
        try:
            assert fresh.stats(now=clock.now()).by_status == got
        finally:
            fresh.close()
        return got

    assert scraped() == {}
    for hour in range(5):  # ends an hour apart, each counted in its own ten minutes
        _end(store, clock, _start(store, clock, f"done-{hour}", 3), RunStatus.COMPLETED)
        _end(store, clock, _start(store, clock, f"failed-{hour}", 1), RunStatus.FAILED)
        _start(store, clock, f"waiting-{hour}", 2, "unserved")  # claimed by no _end
        clock.advance("5m")
        scraped()  # the ends are recent: not in the tally yet
        clock.advance("55m")
    assert scraped() == {"completed": 15, "failed": 5, "pending": 10}
    # pruning deletes the oldest ended runs: the tally drops what it deleted
    assert store.prune(clock.now() - timedelta(hours=3, minutes=30), limit=100) == 8
    assert scraped() == {"completed": 9, "failed": 3, "pending": 10}
    assert store.prune(clock.now() - timedelta(hours=2, minutes=45), limit=1) == 1
    assert scraped()["completed"] + scraped()["failed"] == 11
    assert store.prune(clock.now(), limit=100) == 11
    assert scraped() == {"pending": 10}


def test_an_end_written_a_little_after_the_time_it_records_is_counted(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    # A worker whose clock is a few minutes behind writes an end in the past of the scrape's.
    store.stats(now=clock.now())
    ids = _start(store, clock, "r", 2)
    _end(store, clock, ids, RunStatus.COMPLETED, behind=timedelta(minutes=5))

    assert store.stats(now=clock.now()).by_status == {"completed": 2}
    clock.advance("1h")
    assert store.stats(now=clock.now()).by_status == {"completed": 2}
    assert _counted(store_url) == {"completed": 2}


def test_the_oldest_run_not_ended_and_the_due_ones(store: Store, clock: FakeClock) -> None:
    _end(store, clock, _start(store, clock, "old", 1), RunStatus.COMPLETED)
    clock.advance("1m")
    first = clock.now()
    _start(store, clock, "due", 3)
    clock.advance("1m")
    store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)

    stats = store.stats(now=clock.now())

    assert stats.by_status == {"completed": 1, "pending": 2, "running": 1}
    assert stats.oldest_in_flight == first
    assert stats.due == 2
    assert stats.oldest_due == first
    assert stats.lease_expired == 0
    assert store.stats(now=clock.now() + LEASE * 2).lease_expired == 1


def test_runs_by_status_stay_exact_when_pruning_goes_past_a_day_at_once(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    # The tally keeps the oldest day by ten minutes; pruning past it in one go counts the
    # status afresh, and pruning within it drops the spans it passed.
    def scraped() -> dict[str, int]:
        got = store.stats(now=clock.now()).by_status
        assert got == _counted(store_url)
        return got

    for day in range(4):
        for hour in (0, 7, 13):
            _end(store, clock, _start(store, clock, f"d{day}-{hour}", 2), RunStatus.COMPLETED)
            clock.advance(timedelta(hours=6, minutes=20))
            scraped()
        clock.advance(timedelta(hours=5))
    assert scraped() == {"completed": 24}
    assert store.prune(clock.now() - timedelta(days=2, hours=1), limit=100) == 12
    assert scraped() == {"completed": 12}
    assert store.prune(clock.now() - timedelta(days=1, hours=12), limit=3) == 3
    assert scraped() == {"completed": 9}
    clock.advance("1d")
    assert scraped() == {"completed": 9}
    assert store.prune(clock.now(), limit=100) == 9
    assert scraped() == {}
    _end(store, clock, _start(store, clock, "again", 1), RunStatus.FAILED)
    assert scraped() == {"failed": 1}
    clock.advance("1h")
    assert scraped() == {"failed": 1}
