"""The Store contract for a transactional step's transaction (Store.transact): the work's own
writes and the checkpoint it returns are durable together or not at all; a stale lease runs
no work; what the work raises comes out as it was raised. Every test runs against both real
stores, with the app's own table (`ledger`) in the store's database."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durably.core.history import EventKind
from durably.errors import TransactionEnded
from durably.stores import Checkpoint, Lease, Store
from durably.testing import FakeClock

from .support import LEASE, claim_only, execute_sql, new_run, step_events


@pytest.fixture
def ledger(store: Store, store_url: str) -> str:
    execute_sql(store_url, "CREATE TABLE ledger (id TEXT PRIMARY KEY)")
    return store_url


def _insert(db: Any, url: str, entry: str) -> None:
    mark = "?" if url.startswith("sqlite") else "%s"
    db.execute(f"INSERT INTO ledger (id) VALUES ({mark})", (entry,))


def _rows(url: str) -> list[str]:
    return sorted(row[0] for row in execute_sql(url, "SELECT id FROM ledger"))


def test_the_works_writes_and_its_checkpoint_commit_together(
    store: Store, clock: FakeClock, ledger: str
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    events = step_events(claim, 0, clock.now())
    said: list[str] = []

    def work(db: Any) -> Checkpoint:
        _insert(db, ledger, "e-1")
        return Checkpoint(claim.run_id, claim.epoch, events)

    held = store.transact(claim.lease, work, now=clock.now(), committing=lambda: said.append("c"))

    assert held
    assert said == ["c"]
    assert _rows(ledger) == ["e-1"]
    assert store.history("r1")[-2:] == list(events)
    run = store.get_run("r1")
    assert run is not None
    assert run.event_count == events[-1].seq


def test_a_stale_lease_runs_no_work(store: Store, clock: FakeClock, ledger: str) -> None:
    store.create_run(new_run("r2"), now=clock.now())
    claim = claim_only(store, clock, "r2")
    clock.advance(LEASE + timedelta(seconds=1))
    claim_only(store, clock, "r2", owner="worker-b")  # taken over
    called: list[bool] = []

    def work(db: Any) -> Checkpoint:
        called.append(True)
        return Checkpoint(claim.run_id, claim.epoch, step_events(claim, 0, clock.now()))

    assert not store.transact(claim.lease, work, now=clock.now())
    assert called == []
    assert [e.kind for e in store.history("r2")].count(EventKind.STEP_STARTED) == 0


def test_what_the_work_raises_rolls_everything_back_and_comes_out_as_it_was(
    store: Store, clock: FakeClock, ledger: str
) -> None:
    store.create_run(new_run("r3"), now=clock.now())
    claim = claim_only(store, clock, "r3")
    before = store.history("r3")
    cause = KeyError("the cause")
    raised = ConnectionError("the service reset")
    raised.__cause__ = cause

    def work(db: Any) -> Checkpoint:
        _insert(db, ledger, "e-3")
        raise raised

    with pytest.raises(ConnectionError) as caught:
        store.transact(claim.lease, work, now=clock.now())

    assert caught.value is raised
    assert caught.value.__cause__ is cause
    assert _rows(ledger) == []
    assert store.history("r3") == before
    # the connection is clean afterwards: the same run commits as usual
    assert store.commit(
        [Checkpoint(claim.run_id, claim.epoch, step_events(claim, 0, clock.now()))],
        now=clock.now(),
    ) == [True]


def test_a_database_error_in_the_work_is_its_own_not_a_store_outage(
    store: Store, clock: FakeClock, ledger: str
) -> None:
    store.create_run(new_run("r4"), now=clock.now())
    claim = claim_only(store, clock, "r4")

    def work(db: Any) -> Checkpoint:
        db.execute("SELECT * FROM no_such_table")
        raise AssertionError("unreachable")

    with pytest.raises(Exception, match="no_such_table") as caught:
        store.transact(claim.lease, work, now=clock.now())
    assert type(caught.value).__module__.split(".")[0] in ("sqlite3", "psycopg")


def test_a_checkpoint_refused_at_the_fence_rolls_the_work_back(
    store: Store, clock: FakeClock, ledger: str
) -> None:
    store.create_run(new_run("r5"), now=clock.now())
    claim = claim_only(store, clock, "r5")
    mark = "?" if ledger.startswith("sqlite") else "%s"

    def work(db: Any) -> Checkpoint:
        _insert(db, ledger, "e-5")
        # another worker's takeover, in this very transaction: the fence must refuse
        db.execute(
            f"UPDATE durably_runs SET lease_epoch = lease_epoch + 1 WHERE id = {mark}", ("r5",)
        )
        return Checkpoint(claim.run_id, claim.epoch, step_events(claim, 0, clock.now()))

    assert not store.transact(claim.lease, work, now=clock.now())
    assert _rows(ledger) == []
    run = store.get_run("r5")
    assert run is not None
    assert run.lease_epoch == claim.epoch


def test_committing_that_raises_rolls_everything_back(
    store: Store, clock: FakeClock, ledger: str
) -> None:
    store.create_run(new_run("r6"), now=clock.now())
    claim = claim_only(store, clock, "r6")

    def work(db: Any) -> Checkpoint:
        _insert(db, ledger, "e-6")
        return Checkpoint(claim.run_id, claim.epoch, step_events(claim, 0, clock.now()))

    def abandon() -> None:
        raise TimeoutError("nobody waits for it any more")

    with pytest.raises(TimeoutError):
        store.transact(claim.lease, work, now=clock.now(), committing=abandon)
    assert _rows(ledger) == []
    assert [e.kind for e in store.history("r6")].count(EventKind.STEP_COMPLETED) == 0


def test_work_that_ends_the_transaction_itself_fails_for_good(
    store: Store, clock: FakeClock, ledger: str
) -> None:
    store.create_run(new_run("r7"), now=clock.now())
    claim = claim_only(store, clock, "r7")

    def work(db: Any) -> Checkpoint:
        db.execute("COMMIT")
        return Checkpoint(claim.run_id, claim.epoch, step_events(claim, 0, clock.now()))

    with pytest.raises(TransactionEnded, match="ended its transaction itself"):
        store.transact(claim.lease, work, now=clock.now())
    assert [e.kind for e in store.history("r7")].count(EventKind.STEP_COMPLETED) == 0


def test_a_lease_for_no_run_runs_no_work(store: Store, clock: FakeClock, ledger: str) -> None:
    def work(db: Any) -> Checkpoint:
        raise AssertionError("must not run")

    assert not store.transact(Lease("nobody", 1), work, now=clock.now())
    assert store.get_run("nobody") is None
