"""The Store contract for priorities: claims take the lowest rank first (the due time less a
minute per level of priority), never a run before it is due, and every way a run is created
keeps its priority. Every test runs against both real stores."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import timedelta

import pytest

from durably.core.history import Event, EventKind
from durably.core.priority import MAX_PRIORITY
from durably.core.status import RunStatus
from durably.stores import Checkpoint, NewRun, Store, migrate_store, open_store
from durably.stores.sql.schema import migrations
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, new_run


def _run(run_id: str, priority: int) -> NewRun:
    return NewRun(run_id, WORKFLOW, "[]", priority=priority)


def _claim_ids(
    store: Store, clock: FakeClock, limit: int = 100, lease: timedelta = LEASE
) -> list[str]:
    claims = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=lease, limit=limit)
    return [claim.run_id for claim in claims]


def test_runs_due_together_are_claimed_highest_priority_first(
    store: Store, clock: FakeClock
) -> None:
    for run_id, priority in [("low", 0), ("high", 10), ("mid", 3), ("top", MAX_PRIORITY)]:
        store.create_run(_run(run_id, priority), now=clock.now())

    assert _claim_ids(store, clock, limit=2) == ["top", "high"]
    assert _claim_ids(store, clock, limit=2) == ["mid", "low"]


def test_a_priority_is_a_head_start_in_minutes_not_a_place_ahead_of_every_lower_run(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(_run("waited-10-minutes", 0), now=clock.now())
    clock.advance("7m")
    store.create_run(_run("waited-3-minutes", 0), now=clock.now())
    clock.advance("3m")
    store.create_run(_run("urgent", 5), now=clock.now())  # ranks as if due 5 minutes ago

    assert _claim_ids(store, clock) == ["waited-10-minutes", "urgent", "waited-3-minutes"]


def test_a_batch_of_starts_keeps_each_runs_priority(store: Store, clock: FakeClock) -> None:
    outcomes = store.create_runs([_run("a", 0), _run("b", 7), _run("c", 2)], now=clock.now())

    assert [record.priority for record, _ in outcomes] == [0, 7, 2]
    assert [store.get_run(name).priority for name in "abc"] == [0, 7, 2]  # type: ignore[union-attr]
    assert _claim_ids(store, clock) == ["b", "c", "a"]


def test_a_claim_carries_the_runs_priority(store: Store, clock: FakeClock) -> None:
    store.create_run(_run("r1", 42), now=clock.now())

    [claim] = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    assert claim.priority == 42
    assert store.take("r1", "person", [RunStatus.RUNNING], now=clock.now(), lease=LEASE) is None
    clock.advance(LEASE)  # a running run is taken only once its worker is presumed dead
    taken = store.take("r1", "person", [RunStatus.RUNNING], now=clock.now(), lease=LEASE)
    assert taken is not None
    assert taken.priority == 42


def test_a_high_priority_run_is_never_claimed_before_it_is_due(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(_run("sleeper", MAX_PRIORITY), now=clock.now())
    [claim] = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    due = clock.now() + timedelta(minutes=1)
    store.commit([checkpoint(claim, status=RunStatus.PENDING, available_at=due)], now=clock.now())
    store.create_run(_run("plain", 0), now=clock.now())

    assert _claim_ids(store, clock, lease=timedelta(hours=1)) == ["plain"]
    clock.advance("59s")
    assert _claim_ids(store, clock) == []
    clock.advance("1s")
    assert _claim_ids(store, clock) == ["sleeper"]


def test_an_expired_lease_is_taken_over_in_rank_order_too(store: Store, clock: FakeClock) -> None:
    store.create_run(_run("plain", 0), now=clock.now())
    store.create_run(_run("urgent", 20), now=clock.now())
    assert _claim_ids(store, clock) == ["urgent", "plain"]
    clock.advance(LEASE + timedelta(seconds=1))  # both leases ran out: their worker died

    claims = store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    assert [claim.run_id for claim in claims] == ["urgent"]


def test_a_child_and_a_fork_are_created_with_the_priority_given(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(_run("parent", 4), now=clock.now())
    [claim] = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=1)
    child = NewRun("parent.1.kid", WORKFLOW, "[]", parent="parent", priority=9)
    starting = Checkpoint(claim.run_id, claim.epoch, (), starts=(child,))
    assert store.commit([starting], now=clock.now()) == [True]
    kid = store.get_run("parent.1.kid")
    assert kid is not None
    assert (kid.parent, kid.priority) == ("parent", 9)

    ended = checkpoint(claim, status=RunStatus.COMPLETED, result="null")
    assert store.commit([ended], now=clock.now()) == [True]
    started = Event(1, EventKind.RUN_STARTED, clock.now())
    note = Event(0, EventKind.RUN_RESTARTED, clock.now(), data='{"run": "again"}')
    forked = NewRun("again", WORKFLOW, "[]", priority=4)
    assert store.fork(forked, [started], source="parent", note=note, now=clock.now())
    again = store.get_run("again")
    assert again is not None
    assert again.priority == 4


@pytest.mark.parametrize("create", [True, False], ids=["by-a-worker", "by-durably-migrate"])
def test_a_store_made_before_priorities_migrates_its_runs_to_priority_zero(
    store_url: str, clock: FakeClock, create: bool
) -> None:
    """A v4 store (no priority column) with a due run: migrated by this durably (opened to
    work, or by `durably migrate` before a command that only reads opens it), the run is still
    there, priority 0, and claimed through the new index."""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgres"
    older = [
        s for version, statements in migrations(dialect, 0) if version <= 4 for s in statements
    ]
    insert = (
        "INSERT INTO durably_runs (id, workflow, status, input, created_at, updated_at,"
        " available_at, event_count) VALUES ('old', 'send_invoice', 'pending', '[]', 1, 1, 1, 0)"
    )
    setup = [
        "CREATE TABLE durably_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        *older,
        "INSERT INTO durably_meta VALUES ('schema_version', '4')",
        insert,
    ]
    if dialect == "sqlite":
        with closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as db:
            for statement in setup:
                db.execute(statement)
            db.commit()
    else:
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as db:
            for statement in setup:
                db.execute(statement)  # type: ignore[call-overload]

    if not create:
        assert migrate_store(store_url).found == 4
    store = open_store(store_url, create=create)
    try:
        old = store.get_run("old")
        assert old is not None
        assert old.priority == 0
        store.create_run(new_run("new"), now=clock.now())
        assert _claim_ids(store, clock) == ["old", "new"]
    finally:
        store.close()


@pytest.mark.parametrize("priority", [-1, MAX_PRIORITY + 1])
def test_the_rank_rule_is_the_one_documented(priority: int) -> None:
    from durably.core.priority import check_priority, rank
    from durably.errors import DurablyError

    with pytest.raises(DurablyError, match=f"from 0 \\(the default\\) to {MAX_PRIORITY}"):
        check_priority(priority)
    due = FakeClock().now()
    assert rank(due, 5) == due - timedelta(minutes=5)


def test_the_store_itself_refuses_a_priority_out_of_range(store: Store, clock: FakeClock) -> None:
    """The client checks priorities; the schema checks them too, so that no rank comes after
    its due time (which would let a claim stop reading too early)."""
    with pytest.raises(Exception, match="priority"):
        store.create_run(_run("negative", -1), now=clock.now())
    assert store.get_run("negative") is None
