"""The Store contract for pages of runs under each filter (Store.runs): whatever index or plan a
filter's page goes through (durably.stores.sql.reads reads some status by status), pages of
any size list every matching run once, newest first, ties by id, across statuses and runs
that share their time; and a filtered first page reads its own runs, not the whole table.
Every test runs against both real stores."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import psycopg
import pytest

from durably.core.history import ErrorInfo
from durably.core.status import RunStatus
from durably.stores import NewRun, RunRecord, Store
from durably.stores.sql import reads
from durably.testing import FakeClock

from .support import LEASE, checkpoint

WORKFLOWS = ("a", "b", "c")
QUEUES = (None, "q1", "q2")


def _runs(store: Store, clock: FakeClock) -> list[RunRecord]:
    """36 runs of three workflows on three queues (two keys), made in batches of 6 a second
    apart (each batch shares its time); then, at one time, 10 claimed, of which 4 completed,
    3 failed and 1 cancelled; every run as it is then."""
    made: list[str] = []
    for batch in range(6):
        runs = [
            NewRun(
                f"r{n:02d}",
                WORKFLOWS[n % 3],
                "[]",
                queue=QUEUES[n // 3 % 3],
                key=f"k{n % 2}" if QUEUES[n // 3 % 3] else None,
            )
            for n in range(batch * 6, batch * 6 + 6)
        ]
        store.create_runs(runs, now=clock.now())
        made += [run.id for run in runs]
        clock.advance("1s")
    claims = store.claim("w", list(WORKFLOWS), now=clock.now(), lease=LEASE, limit=10)
    clock.advance("1s")
    no = ErrorInfo("ValueError", "no")
    ended = [checkpoint(c, status=RunStatus.COMPLETED, result="1") for c in claims[:4]]
    ended += [checkpoint(c, status=RunStatus.FAILED, error=no) for c in claims[4:7]]
    ended += [checkpoint(c, status=RunStatus.CANCELLED) for c in claims[7:8]]
    assert store.commit(ended, now=clock.now()) == [True] * 8
    found = [store.get_run(run_id) for run_id in made]
    assert all(found)
    return [run for run in found if run is not None]


def _newest_first(runs: list[RunRecord]) -> list[str]:
    return [run.id for run in sorted(runs, key=lambda r: (r.updated_at, r.id), reverse=True)]


def _paged(store: Store, size: int, filters: dict[str, Any]) -> Iterator[list[str]]:
    after = None
    while page := store.runs(limit=size, after=after, **filters):
        yield [run.id for run in page]
        after = (page[-1].updated_at, page[-1].id)


def _filters(
    runs: list[RunRecord],
) -> dict[str, tuple[dict[str, Any], Callable[[RunRecord], bool]]]:
    """Each filter, and what it means of a run (brute force)."""
    middle = sorted({run.created_at for run in runs})[3]  # some runs either side
    found: dict[str, tuple[dict[str, Any], Callable[[RunRecord], bool]]] = {
        "all": ({}, lambda r: True),
        "since": ({"since": middle}, lambda r: r.created_at >= middle),
        "until": ({"until": middle}, lambda r: r.created_at < middle),
        "default queue": ({"queue": "default"}, lambda r: r.queue is None),
        "key": ({"key": "k1"}, lambda r: r.key == "k1"),
        "workflow and since": (
            {"workflow": "b", "since": middle},
            lambda r: r.workflow == "b" and r.created_at >= middle,
        ),
        "queue and workflow": (
            {"queue": "q1", "workflow": "c"},
            lambda r: r.queue == "q1" and r.workflow == "c",
        ),
    }
    for workflow in WORKFLOWS:
        found[f"workflow {workflow}"] = ({"workflow": workflow}, _is("workflow", workflow))
    for queue in QUEUES[1:]:
        found[f"queue {queue}"] = ({"queue": queue}, _is("queue", queue))
    for status in (RunStatus.PENDING, RunStatus.COMPLETED, RunStatus.FAILED):
        found[f"{status} of a"] = (
            {"status": status, "workflow": "a"},
            lambda r, s=status: r.status is s and r.workflow == "a",
        )
        found[f"{status} of q2"] = (
            {"status": status, "queue": "q2"},
            lambda r, s=status: r.status is s and r.queue == "q2",
        )
        found[f"{status} since"] = (
            {"status": status, "since": middle},
            lambda r, s=status: r.status is s and r.created_at >= middle,
        )
    return found


def _is(name: str, value: object) -> Callable[[RunRecord], bool]:
    return lambda run: getattr(run, name) == value


def test_pages_under_each_filter_list_every_matching_run_once_in_order(
    store: Store, clock: FakeClock
) -> None:
    runs = _runs(store, clock)
    assert {run.status for run in runs} >= {
        RunStatus.PENDING,
        RunStatus.RUNNING,
        RunStatus.COMPLETED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
    }

    for name, (filters, means) in _filters(runs).items():
        expected = _newest_first([run for run in runs if means(run)])
        assert expected or name.startswith(("completed", "failed")), name
        for size in (1, 2, 3, 5, 8, 50):
            pages = list(_paged(store, size, filters))
            assert [run_id for page in pages for run_id in page] == expected, (name, size)
            assert all(len(page) == size for page in pages[:-1]), (name, size)


def test_a_run_updated_between_pages_is_not_listed_again(store: Store, clock: FakeClock) -> None:
    # It moves to the front, ahead of the cursor; every run that stayed put is listed once.
    runs = _runs(store, clock)
    first = store.runs(limit=4, workflow="a")
    clock.advance("1s")
    moved = store.claim("w", ["a"], now=clock.now(), lease=LEASE, limit=100)
    assert moved
    listed, after = [run.id for run in first], (first[-1].updated_at, first[-1].id)
    while page := store.runs(limit=3, after=after, workflow="a"):
        listed += [run.id for run in page]
        after = (page[-1].updated_at, page[-1].id)

    assert len(listed) == len(set(listed))
    stayed = {run.id for run in runs if run.workflow == "a"} - {c.run_id for c in moved}
    assert stayed <= set(listed)


# -- the plans: a filtered first page reads its runs through an index ---------------------

PAGE = 10
MANY = 3_000  # ended runs, half of workflow `a` on queue q1


@pytest.fixture
def crowded(store: Store, store_url: str, clock: FakeClock) -> str:
    """A store of MANY ended runs, half of them of `a` on queue q1, made before the page's
    `since` (and its margin); then a few pending runs of `a` on q1."""
    base = clock.now().timestamp() - 7_200
    rows = [
        (f"old-{n:05d}", "a" if n % 2 else "other", "q1" if n % 2 else None, base - n, base - n)
        for n in range(MANY)
    ]
    _insert(store_url, rows)
    store.create_runs([NewRun(f"a-{n}", "a", "[]", queue="q1") for n in range(3)], now=clock.now())
    return store_url


def _insert(url: str, rows: list[tuple[object, ...]]) -> None:
    sql = (
        "INSERT INTO durably_runs (id, workflow, queue, status, input, created_at, updated_at)"
        " VALUES (?, ?, ?, 'completed', '[]', ?, ?)"
    )
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db, db:
            db.executemany(sql, rows)
            db.execute("ANALYZE")
        return
    with psycopg.connect(url, autocommit=True) as db:
        with db.cursor() as cursor:
            cursor.executemany(sql.replace("?", "%s"), rows)
        db.execute("ANALYZE durably_runs")


class _Tracing:
    """A connection that runs what the page's read runs, and records each statement."""

    def __init__(self, db: Any, explain: str) -> None:
        self.db, self.explain = db, explain
        self.plans: list[Any] = []

    def execute(self, sql: Any, params: Any = ()) -> Any:
        self.plans.append(self.db.execute(f"{self.explain} {sql}", params).fetchall())
        return self.db.execute(sql, params)


@pytest.mark.parametrize("name", ["workflow", "queue", "workflow and status", "since"])
def test_a_filtered_first_page_does_not_read_the_whole_table(
    crowded: str, name: str, clock: FakeClock
) -> None:
    filters = {
        "workflow": {"workflow": "a"},
        "queue": {"queue": "q1"},
        "workflow and status": {"workflow": "a", "status": RunStatus.PENDING},
        "since": {"since": clock.now() - LEASE},
    }[name]
    wanted = {"status": None, "workflow": None, "limit": PAGE, "after": None, **filters}
    expected = 3 if filters.get("status") or "since" in filters else PAGE
    if crowded.startswith("sqlite"):
        with closing(sqlite3.connect(crowded.removeprefix("sqlite:///"))) as db:
            tracing = _Tracing(db, "EXPLAIN QUERY PLAN")
            page = reads.runs(tracing, reads.SQLITE, **wanted)
        steps = [row[3] for plan in tracing.plans for row in plan]
        assert not [step for step in steps if step.startswith(("SCAN durably_runs", "SCAN r"))]
        # a page sorted after its read reads a range of time: from the bound up
        [search] = [step for step in steps if step.startswith("SEARCH durably_runs ")]
        assert "USE TEMP B-TREE FOR ORDER BY" not in steps or "updated_at>?" in search, steps
        assert len(page) == expected
        return
    with psycopg.connect(crowded) as db:
        tracing = _Tracing(db, "EXPLAIN (ANALYZE, FORMAT JSON)")
        page = reads.runs(tracing, reads.POSTGRES, **wanted)
        db.rollback()
    assert len(page) == expected
    nodes = [node for [[plan]] in tracing.plans for node in _nodes(plan[0]["Plan"])]
    scans = [node for node in nodes if node.get("Relation Name") == "durably_runs"]
    assert scans
    assert not [node for node in scans if node["Node Type"] == "Seq Scan"], scans
    read = sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        for node in scans
    )
    assert read < MANY // 10, f"the page read {read} rows for its {expected}"


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)
