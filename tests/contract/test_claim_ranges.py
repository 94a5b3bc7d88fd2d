"""The Store contract for what a claim reads (durably.stores.sql.due): it leads with the
workflows and versions the worker serves, so that due runs of a workflow or a version it does
not serve are never read however many there are; it keeps claim order across every range it
reads, in one statement or (SQLite) several; and the claim's own event reads back exactly as
the engine writes it, taken over or not. Every test runs against both real stores."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import psycopg

from durably.core.history import EventKind
from durably.core.status import RunStatus
from durably.stores import NewRun, Store
from durably.stores.sql import reads
from durably.stores.sql.due import due_statements
from durably.stores.sql.rows import claimed_data
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW

BACKLOG = 2_000  # due runs no worker here serves, ahead of the served ones in claim order


def _run(run_id: str, workflow: str, version: str | None, priority: int = 0) -> NewRun:
    return NewRun(run_id, workflow, "[]", version=version, priority=priority)


def _backlog(store: Store, clock: FakeClock) -> None:
    """Due runs of a workflow nobody serves and of a version of WORKFLOW nobody serves, then
    (later, so behind them in claim order) the runs the worker serves."""
    store.create_runs(
        [_run(f"unknown-{n}", "unknown", "v1") for n in range(BACKLOG)]
        + [_run(f"old-{n}", WORKFLOW, "v1") for n in range(BACKLOG // 4)],
        now=clock.now(),
    )
    clock.advance("1s")
    store.create_run(_run("served", WORKFLOW, "v2"), now=clock.now())
    clock.advance("1s")
    store.create_run(_run("from-before-versions", WORKFLOW, None), now=clock.now())
    clock.advance("1s")


def test_a_claim_takes_what_it_serves_behind_a_backlog_of_what_it_does_not(
    store: Store, clock: FakeClock
) -> None:
    _backlog(store, clock)

    claims = store.claim("w", {WORKFLOW: ["v2"]}, now=clock.now(), lease=LEASE, limit=10)

    assert [claim.run_id for claim in claims] == ["served", "from-before-versions"]
    assert store.get_run("unknown-0").status is RunStatus.PENDING  # type: ignore[union-attr]


def test_the_backlog_a_worker_does_not_serve_is_never_read(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    _backlog(store, clock)
    serves = {WORKFLOW: ["v2"], "other": ["v1"]}
    now = clock.now().timestamp()
    if store_url.startswith("sqlite"):
        [(sql, params)] = due_statements(
            reads.SQLITE, serves, ("1 = 1", []), now=now, limit=10, lock=""
        )
        path = store_url.removeprefix("sqlite:///")
        with closing(sqlite3.connect(path)) as db:
            plan = [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
        runs = [step for step in plan if "durably_runs" in step]
        assert runs, plan
        lead = "SEARCH durably_runs USING INDEX durably_runs_claimable (workflow=?"
        assert all(step.startswith(lead) for step in runs), plan
        return
    [(sql, params)] = due_statements(
        reads.POSTGRES, serves, ("1 = 1", []), now=now, limit=10, lock=" FOR UPDATE SKIP LOCKED"
    )
    with psycopg.connect(store_url) as db:  # a transaction, rolled back: the locks go with it
        [[plan]] = db.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchall()
        db.rollback()
    scans = [node for node in _nodes(plan[0]["Plan"]) if node.get("Relation Name")]
    assert scans
    assert {node["Index Name"] for node in scans} == {"durably_runs_claimable"}
    read = sum(
        (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
        for node in scans
    )
    assert read <= 2, f"the claim read {read} rows for the 2 it serves"


def test_a_claim_over_more_ranges_than_one_statement_reads_keeps_claim_order(
    store: Store, clock: FakeClock
) -> None:
    # 150 workflows at 2 versions each, and none: 450 ranges (SQLite reads 200 a statement)
    names = [f"wf-{n:03}" for n in range(150)]
    runs = [_run(f"{name}-plain", name, "v1") for name in names]
    # a few, spread over the ranges, jump ahead by their priority
    urgent = {"wf-007": 9, "wf-149": 8, "wf-075": 7, "wf-140": 6}
    runs += [_run(f"{name}-urgent", name, "v2", priority) for name, priority in urgent.items()]
    store.create_runs(runs, now=clock.now())
    clock.advance("1s")
    serves = {name: ["v1", "v2"] for name in names}

    first = store.claim("w", serves, now=clock.now(), lease=LEASE, limit=6)

    taken = [claim.run_id for claim in first]
    assert taken[:4] == ["wf-007-urgent", "wf-149-urgent", "wf-075-urgent", "wf-140-urgent"]
    assert len(taken) == 6
    assert all(run_id.endswith("-plain") for run_id in taken[4:])
    rest = store.claim("w", serves, now=clock.now(), lease=LEASE, limit=1_000)
    assert len(rest) == len(runs) - 6
    assert not {claim.run_id for claim in rest} & set(taken)


def test_a_tools_claim_of_every_version_keeps_claim_order(store: Store, clock: FakeClock) -> None:
    for run in [_run("a", WORKFLOW, "v2"), _run("b", WORKFLOW, None), _run("c", WORKFLOW, "v1", 3)]:
        store.create_run(run, now=clock.now())
        clock.advance("1s")

    claims = store.claim("tool", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)

    assert [claim.run_id for claim in claims] == ["c", "a", "b"]


def test_the_claimed_event_reads_as_the_engine_writes_it(store: Store, clock: FakeClock) -> None:
    owner, other = 'wörker "a" 1', "worker-b"
    store.create_run(_run("r", WORKFLOW, None), now=clock.now())
    [first] = store.claim(owner, [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    clock.advance(LEASE * 2)  # the lease expires: the next claim takes the run over
    [second] = store.claim(other, [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)

    mine, taken = first.events[-1], second.events[-1]
    assert mine.kind is EventKind.CLAIMED
    assert taken.kind is EventKind.CLAIMED
    assert mine.data == claimed_data(owner, 1, "pending", None)
    assert json.loads(taken.data or "") == json.loads(claimed_data(other, 2, "running", owner))
    assert [event.data for event in store.history("r")[-2:]] == [mine.data, taken.data]


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)
