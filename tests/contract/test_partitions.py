"""PostgreSQL's history partitions (durably.stores.postgres.partitions): each run's history
lives whole in the partition of its birth, made ahead of time; its reads touch that partition
alone; retention drops a partition once its runs are gone, and keeps one a run still lives in;
a birth no partition covers goes to the DEFAULT partition and works all the same."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from durably.core.status import RunStatus
from durably.stores import NewRun, Store, open_store
from durably.stores.postgres import partitions
from durably.stores.postgres.store import PostgresStore
from durably.stores.records import WorkerBeat
from durably.stores.sql import reads
from durably.stores.sql.rows import ts
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, claim_only, execute_sql, new_run, step_events

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(postgres_url: str) -> Iterator[PostgresStore]:
    opened = open_store(postgres_url)
    assert isinstance(opened, PostgresStore)
    yield opened
    opened.close()


def _names(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as db:
        return {p.name for p in partitions.listed(db)}


def _homes(url: str, run_id: str) -> set[str]:
    """The partitions that hold events of `run_id`."""
    rows = execute_sql(
        url,
        "SELECT DISTINCT tableoid::regclass::text FROM durably_events WHERE run_id = ?",
        [run_id],
    )
    return {row[0] for row in rows}


def _make(url: str, at: datetime) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        partitions.make_ahead(db, ts(at), partitions.DEFAULT_WIDTH, told=set())


def _ended(store: Store, clock: FakeClock, run_id: str) -> None:
    store.create_run(new_run(run_id), now=clock.now())
    claim = claim_only(store, clock, run_id)
    steps = step_events(claim, 0, clock.now())
    done = checkpoint(claim, steps, status=RunStatus.COMPLETED, result="null")
    assert store.commit([done], now=clock.now()) == [True]


def test_partitions_are_made_ahead_at_open_and_by_workers_beats(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    today = datetime.fromtimestamp(time.time(), UTC)  # the migration goes by the wall clock
    made = _names(postgres_url)
    ahead = {f"durably_events_{(today + timedelta(days=n)):%Y%m%d}" for n in range(4)}
    assert ahead <= made
    assert {"durably_events_legacy", "durably_events_default"} <= made

    beat = WorkerBeat("w", clock.now(), clock.now(), timedelta(seconds=10), {WORKFLOW: ()})
    pg.beat(beat)  # the worker's own clock: the fake one, 2026-01-01
    fake = {f"durably_events_202601{day:02}" for day in range(1, 5)}
    assert fake <= _names(postgres_url)
    execute_sql(postgres_url, "DROP TABLE durably_events_20260104")
    pg.beat(beat)  # within the hour: nothing made
    assert "durably_events_20260104" not in _names(postgres_url)


def test_a_runs_history_lives_whole_in_the_partition_of_its_birth(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    _make(postgres_url, clock.now())
    pg.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(pg, clock, "r1")
    clock.advance(timedelta(days=2))  # its later events are of a day with a partition of its own
    first = step_events(claim, 0, clock.now())
    assert pg.commit([checkpoint(claim, first, available_at=clock.now())], now=clock.now()) == [
        True
    ]
    again = claim_only(pg, clock, "r1")
    assert pg.commit([checkpoint(again, status=RunStatus.COMPLETED)], now=clock.now()) == [True]

    assert _homes(postgres_url, "r1") == {"durably_events_20260101"}
    history = pg.history("r1")
    assert [e.seq for e in history] == list(range(1, len(history) + 1))
    assert len(history) == 5  # started, claimed, the step's two, claimed


def _scanned(url: str, sql: str, params: Any) -> list[str]:
    """The partitions of the history a statement read (EXPLAIN ANALYZE, rolled back)."""
    with psycopg.connect(url) as db:
        [[plan]] = db.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchall()
        db.rollback()
    found: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        name = node.get("Relation Name", "")
        read = node["Node Type"] != "ModifyTable" and node.get("Actual Loops", 0) > 0
        if name.startswith("durably_events") and read:
            found.append(name)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return found


class _Capture:
    """A connection that records the statement it is given instead of running it."""

    def __init__(self) -> None:
        self.sql, self.params = "", None

    def execute(self, sql: Any, params: Any = None, /) -> Any:
        self.sql, self.params = sql, params
        return self

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter([])


def test_a_claim_and_a_history_read_each_read_one_partition_of_thirty(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    for day in range(0, 30, 4):
        _make(postgres_url, clock.now() + timedelta(days=day))
    assert len(_names(postgres_url)) >= 32
    for day in range(30):  # a run born each day
        at = clock.now() + timedelta(days=day)
        pg.create_run(new_run(f"r{day}"), now=at)
    later = clock.now() + timedelta(days=31)

    capture = _Capture()
    reads.histories(capture, reads.POSTGRES, ["r7"])  # the births first, then by them:
    reads.born_histories(capture, {"r7": ts(clock.now() + timedelta(days=7))})
    assert _scanned(postgres_url, capture.sql, capture.params) == ["durably_events_20260108"]

    claims = pg.claim("w", [WORKFLOW], now=later, lease=LEASE, limit=3)  # born days 0, 1, 2
    assert [len(claim.events) for claim in claims] == [2, 2, 2]
    capture = _Capture()
    births = {f"r{day}": ts(clock.now() + timedelta(days=day)) for day in (12, 20)}
    reads.born_histories(capture, births)
    scanned = _scanned(postgres_url, capture.sql, capture.params)
    assert sorted(scanned) == ["durably_events_20260113", "durably_events_20260121"]


def test_retention_drops_a_partition_whose_runs_are_all_gone(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    _make(postgres_url, clock.now())
    _ended(pg, clock, "a")
    _ended(pg, clock, "b")
    clock.advance(timedelta(days=1))
    _ended(pg, clock, "c")  # born the next day
    clock.advance(timedelta(days=10))
    _make(postgres_url, clock.now())
    _ended(pg, clock, "recent")

    assert pg.prunable(clock.now() - timedelta(days=1)) == 3
    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 3

    names = _names(postgres_url)
    assert "durably_events_20260101" not in names
    assert "durably_events_20260102" not in names
    gone = execute_sql(
        postgres_url,
        "SELECT count(*) FROM pg_class"
        " WHERE relname = ? AND relnamespace = current_schema()::regnamespace",
        ["durably_events_20260101"],
    )  # this test's schema: other tests' may hold a partition of that name
    assert gone == [(0,)]
    assert [pg.get_run(run_id) for run_id in "abc"] == [None, None, None]
    assert len(pg.history("recent")) == 4
    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 0


def test_a_run_that_lives_on_keeps_its_partition_until_it_ends_and_ages(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    _make(postgres_url, clock.now())
    _ended(pg, clock, "gone")
    pg.create_run(
        NewRun("long", WORKFLOW, "{}", due=clock.now() + timedelta(days=20)), now=clock.now()
    )
    clock.advance(timedelta(days=10))

    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 1

    assert "durably_events_20260101" in _names(postgres_url)
    assert _homes(postgres_url, "gone") == set()  # its events deleted row by row
    assert len(pg.history("long")) == 1
    clock.advance(timedelta(days=11))
    _make(postgres_url, clock.now())
    claim = claim_only(pg, clock, "long")
    assert pg.commit([checkpoint(claim, status=RunStatus.COMPLETED)], now=clock.now()) == [True]
    assert _homes(postgres_url, "long") == {"durably_events_20260101"}
    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 0  # not aged yet
    assert "durably_events_20260101" in _names(postgres_url)

    clock.advance(timedelta(days=2))
    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 1
    assert "durably_events_20260101" not in _names(postgres_url)


def test_a_partition_whose_lock_is_not_had_in_time_is_dropped_by_a_later_prune(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    _make(postgres_url, clock.now())
    _ended(pg, clock, "a")
    clock.advance(timedelta(days=10))
    with psycopg.connect(postgres_url) as holder:  # a reader in the middle of a long read
        holder.execute("LOCK TABLE durably_events_20260101 IN ACCESS SHARE MODE")
        assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 1
        assert "durably_events_20260101" in _names(postgres_url)
        holder.rollback()
    assert pg.get_run("a") is None
    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 0
    assert "durably_events_20260101" not in _names(postgres_url)


def test_a_birth_without_a_partition_goes_to_the_default_one_and_works(
    pg: PostgresStore, postgres_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    _ended(pg, clock, "early")  # no partition of 2026-01-01 yet
    pg.create_run(new_run("waiting"), now=clock.now())
    assert _homes(postgres_url, "early") == {"durably_events_default"}
    assert len(pg.history("early")) == 4

    with caplog.at_level(logging.WARNING, logger="durably.store"):
        _make(postgres_url, clock.now())
        told: set[str] = set()
        with psycopg.connect(postgres_url, autocommit=True) as db:
            for _ in range(2):
                partitions.make_ahead(db, ts(clock.now()), partitions.DEFAULT_WIDTH, told=told)
    refused = [r for r in caplog.records if "durably_events_20260101" in r.getMessage()]
    assert len(refused) == 2  # one from each maker: each says it once
    names = _names(postgres_url)
    assert "durably_events_20260101" not in names
    assert "durably_events_20260102" in names

    claim = claim_only(pg, clock, "waiting")  # the default partition's runs carry on
    assert pg.commit([checkpoint(claim, status=RunStatus.COMPLETED)], now=clock.now()) == [True]
    assert len(pg.history("waiting")) == 2
    clock.advance(timedelta(days=10))
    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 2  # row by row
    assert _homes(postgres_url, "early") == set()
    assert "durably_events_default" in _names(postgres_url)


def test_a_run_restarted_from_one_in_a_dropped_partition_keeps_its_history(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    _make(postgres_url, clock.now())
    _ended(pg, clock, "source")
    clock.advance(timedelta(days=5))
    _make(postgres_url, clock.now())
    history = pg.history("source")
    forked = [e for e in history if e.kind.value == "run_started"]
    note = history[-1].__class__(0, history[-1].kind, clock.now(), data="{}")
    assert pg.fork(new_run("source.restart-1"), forked, source="source", note=note, now=clock.now())
    clock.advance(timedelta(days=5))

    assert pg.prune(clock.now() - timedelta(days=2), limit=100) == 1

    assert "durably_events_20260101" not in _names(postgres_url)
    assert pg.history("source.restart-1") == forked
    assert _homes(postgres_url, "source.restart-1") == {"durably_events_20260106"}


def test_a_scrape_counts_ended_runs_exactly_after_retention_drops_by_birth(
    pg: PostgresStore, postgres_url: str, clock: FakeClock
) -> None:
    # Retention deletes a partition's runs by their birth, not their end: a run born first
    # may have ended after one born later, which stays. The scrape's tally counts afresh.
    _make(postgres_url, clock.now())
    clock.advance(timedelta(hours=23))
    _ended(pg, clock, "early")  # born on day 0, ended then: the oldest end
    clock.advance(timedelta(minutes=30))
    pg.create_run(new_run("long", "slow"), now=clock.now())  # born on day 0, ends on day 1
    clock.advance(timedelta(hours=1))
    _ended(pg, clock, "short")  # born on day 1, ended then: before "long"
    clock.advance(timedelta(hours=7))
    claim = claim_only(pg, clock, "long", workflow="slow")
    done = checkpoint(claim, step_events(claim, 0, clock.now()), status=RunStatus.COMPLETED)
    assert pg.commit([done], now=clock.now()) == [True]
    clock.advance(timedelta(days=5))
    assert pg.stats(now=clock.now()).by_status == {"completed": 3}

    assert pg.prune(clock.now() - timedelta(days=1), limit=2) == 2  # day 0's: early and long
    assert pg.get_run("short") is not None
    assert pg.stats(now=clock.now()).by_status == {"completed": 1}
    assert pg.prune(clock.now() - timedelta(days=1), limit=100) == 1
    assert pg.stats(now=clock.now()).by_status == {}
