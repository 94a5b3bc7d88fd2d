"""The Store contract for checkpoints: commit, lease-epoch fencing, releasing, final
statuses and the one-outcome-per-step unique index. Every test runs against both stores."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.status import RunStatus
from durably.errors import StoreError
from durably.stores import Claim, Store
from durably.testing import FakeClock

from .support import (
    LEASE,
    WORKFLOW,
    checkpoint,
    claim_only,
    claimed_data,
    new_run,
    step_events,
)


def _integrity_errors() -> tuple[type[Exception], ...]:
    """What a store may raise when the database refuses a write for a constraint."""
    errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError, StoreError)
    try:
        import psycopg
    except ImportError:  # pragma: no cover - the postgres extra is not installed
        return errors
    return (*errors, psycopg.IntegrityError)


def _taken_over(store: Store, clock: FakeClock, run_id: str) -> tuple[Claim, Claim]:
    """worker-a claims the run, its lease expires, worker-b takes it over."""
    first = claim_only(store, clock, run_id, owner="worker-a")
    clock.advance(LEASE + timedelta(seconds=1))
    second = claim_only(store, clock, run_id, owner="worker-b")
    return first, second


def test_a_checkpoint_under_the_current_epoch_appends_its_events(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    leased = store.get_run("r1")
    clock.advance("2s")
    steps = step_events(claim, 0, clock.now())

    assert store.commit([checkpoint(claim, steps)], now=clock.now()) == [True]

    assert store.history("r1") == [*claim.events, *steps]
    run = store.get_run("r1")
    assert run is not None
    assert leased is not None
    assert run.event_count == steps[-1].seq
    # A step that keeps its run running moves no column an index holds, updated_at included
    # (so that PostgreSQL updates the row in place): it moves with the run's status.
    assert run.updated_at == leased.updated_at
    assert (run.status, run.lease_owner, run.lease_epoch) == (RunStatus.RUNNING, "worker-a", 1)
    assert run.available_at == leased.available_at  # status None keeps the lease as it was
    assert (run.result, run.error) == (None, None)


def test_checkpoints_follow_one_another(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    first = step_events(claim, 0, clock.now())
    second = step_events(first, 1, clock.now())

    assert store.commit([checkpoint(claim, first)], now=clock.now()) == [True]
    assert store.commit([checkpoint(claim, second)], now=clock.now()) == [True]
    assert store.commit([], now=clock.now()) == []

    assert store.history("r1") == [*claim.events, *first, *second]


@pytest.mark.parametrize(
    ("status", "result", "error", "kind"),
    [
        (RunStatus.COMPLETED, '{"paid": true}', None, EventKind.RUN_COMPLETED),
        (RunStatus.FAILED, None, ErrorInfo("ValueError", "bad amount"), EventKind.RUN_FAILED),
        (
            RunStatus.NEEDS_ATTENTION,
            None,
            ErrorInfo("durably.errors.NonDeterminismError", "step #0 changed"),
            EventKind.RUN_PARKED,
        ),
        (
            RunStatus.COMPENSATION_FAILED,
            None,
            ErrorInfo("RuntimeError", "refund refused"),
            EventKind.COMPENSATION_FAILED,
        ),
        (RunStatus.TIMED_OUT, None, ErrorInfo("TimeoutError", "deadline"), EventKind.RUN_FAILED),
    ],
    ids=["completed", "failed", "needs_attention", "compensation_failed", "timed_out"],
)
def test_a_final_status_ends_the_lease_and_the_run_is_never_claimed_again(
    store: Store,
    clock: FakeClock,
    status: RunStatus,
    result: str | None,
    error: ErrorInfo | None,
    kind: EventKind,
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    clock.advance("1s")
    final = Event(claim.events[-1].seq + 1, kind, clock.now())

    ending = checkpoint(claim, (final,), status=status, result=result, error=error)
    assert store.commit([ending], now=clock.now()) == [True]

    run = store.get_run("r1")
    assert run is not None
    assert (run.status, run.result, run.error) == (status, result, error)
    assert (run.available_at, run.lease_owner) == (None, None)
    assert run.updated_at == clock.now()  # its status changed
    assert run.lease_epoch == claim.epoch
    assert run.event_count == final.seq
    assert store.history("r1")[-1] == final
    clock.advance(timedelta(days=30))
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []
    assert store.unclaimable([], now=clock.now()) == {}
    assert store.renew([claim.lease], now=clock.now(), lease=LEASE) == set()


def test_a_stale_epoch_after_a_takeover_writes_nothing(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    first, second = _taken_over(store, clock, "r1")
    before_run, before_history = store.get_run("r1"), store.history("r1")
    clock.advance("1s")

    stale_steps = step_events(first, 0, clock.now())
    assert store.commit([checkpoint(first, stale_steps)], now=clock.now()) == [False]
    stale_end = checkpoint(first, status=RunStatus.COMPLETED, result='"late"')
    assert store.commit([stale_end], now=clock.now()) == [False]

    assert store.get_run("r1") == before_run
    assert store.history("r1") == before_history
    fresh_steps = step_events(second, 0, clock.now())
    assert store.commit([checkpoint(second, fresh_steps)], now=clock.now()) == [True]
    assert store.history("r1") == [*second.events, *fresh_steps]


def test_a_batch_commits_only_its_fresh_checkpoints(store: Store, clock: FakeClock) -> None:
    for run_id, workflow in (("fresh1", "y"), ("stale", "x"), ("fresh2", "y")):
        store.create_run(new_run(run_id, workflow=workflow), now=clock.now())
    claims = {
        c.run_id: c for c in store.claim("a", ["x", "y"], now=clock.now(), lease=LEASE, limit=10)
    }
    clock.advance(LEASE + timedelta(seconds=1))
    assert store.renew(
        [claims["fresh1"].lease, claims["fresh2"].lease], now=clock.now(), lease=LEASE
    ) == {"fresh1", "fresh2"}
    claim_only(store, clock, "stale", owner="b", workflow="x")  # takes over a's expired lease
    stale_before = store.get_run("stale"), store.history("stale")
    done = {
        run_id: Event(claims[run_id].events[-1].seq + 1, EventKind.RUN_COMPLETED, clock.now())
        for run_id in claims
    }
    batch = [
        checkpoint(
            claims[run_id], (done[run_id],), status=RunStatus.COMPLETED, result=f'"{run_id}"'
        )
        for run_id in ("fresh1", "stale", "fresh2")
    ]

    assert store.commit(batch, now=clock.now()) == [True, False, True]

    for run_id in ("fresh1", "fresh2"):
        run = store.get_run(run_id)
        assert run is not None
        assert (run.status, run.result) == (RunStatus.COMPLETED, f'"{run_id}"')
        assert store.history(run_id) == [*claims[run_id].events, done[run_id]]
    assert (store.get_run("stale"), store.history("stale")) == stale_before


def test_releasing_a_run_makes_it_claimable_again_at_its_time(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1", owner="worker-a")
    due = clock.now() + timedelta(minutes=10)
    released = Event(claim.events[-1].seq + 1, EventKind.RELEASED, clock.now())

    handback = checkpoint(claim, (released,), status=RunStatus.PENDING, available_at=due)
    assert store.commit([handback], now=clock.now()) == [True]

    run = store.get_run("r1")
    assert run is not None
    assert (run.status, run.available_at, run.lease_owner) == (RunStatus.PENDING, due, None)
    assert run.lease_epoch == claim.epoch
    # The released lease is over: its epoch can neither write nor renew any more.
    late = checkpoint(claim, step_events([released], 0, clock.now()))
    assert store.commit([late], now=clock.now()) == [False]
    assert store.renew([claim.lease], now=clock.now(), lease=LEASE) == set()
    clock.set(due - timedelta(seconds=1))
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []

    clock.set(due)
    again = claim_only(store, clock, "r1", owner="worker-b")

    assert again.epoch == claim.epoch + 1
    assert claimed_data(again.events[-1]) == {"owner": "worker-b", "epoch": 2}
    assert again.events[:-1] == (*claim.events, released)


def test_a_second_outcome_for_one_step_is_refused_by_the_database(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    store.create_run(new_run("r2", workflow="other"), now=clock.now())
    first, second = _taken_over(store, clock, "r1")
    assert store.commit(
        [checkpoint(first, step_events(first, 0, clock.now()))], now=clock.now()
    ) == [False]
    other = claim_only(store, clock, "r2", owner="worker-b", workflow="other")
    completed = step_events(second, 0, clock.now())
    assert store.commit([checkpoint(second, completed)], now=clock.now()) == [True]
    before = store.get_run("r1"), store.history("r1"), store.get_run("r2"), store.history("r2")
    # A writer under a fresh epoch records step 0's outcome again, with the next seq,
    # in one batch with an innocent checkpoint of another run.
    again = Event(completed[-1].seq + 1, EventKind.STEP_COMPLETED, clock.now(), 0, "step_0", 2, "0")
    innocent = checkpoint(other, step_events(other, 0, clock.now()))

    with pytest.raises(_integrity_errors()):
        store.commit([innocent, checkpoint(second, (again,))], now=clock.now())

    # The whole batch was one transaction: nothing of it was written.
    assert (store.get_run("r1"), store.history("r1"), store.get_run("r2"), store.history("r2")) == (
        before
    )
    # And the store is still usable.
    assert store.commit([innocent], now=clock.now()) == [True]


def test_committing_a_checkpoint_again_reports_it_applied_and_writes_nothing(
    store: Store, clock: FakeClock
) -> None:
    """A commit whose answer was lost with its connection is simply tried again."""
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    steps = step_events(claim, 0, clock.now())
    assert store.commit([checkpoint(claim, steps)], now=clock.now()) == [True]
    after_first = store.get_run("r1")
    clock.advance("1s")

    assert store.commit([checkpoint(claim, steps)], now=clock.now()) == [True]

    assert store.history("r1") == [*claim.events, *steps]
    assert store.get_run("r1") == after_first  # not even updated_at moved


def test_an_applied_final_checkpoint_is_reported_applied_again(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    done = Event(claim.events[-1].seq + 1, EventKind.RUN_COMPLETED, clock.now())
    ending = checkpoint(claim, (done,), status=RunStatus.COMPLETED, result='"paid"')
    assert store.commit([ending], now=clock.now()) == [True]

    assert store.commit([ending], now=clock.now()) == [True]

    run = store.get_run("r1")
    assert run is not None
    assert (run.status, run.result) == (RunStatus.COMPLETED, '"paid"')
    assert store.history("r1") == [*claim.events, done]


def test_a_stale_epoch_is_refused_even_where_its_seq_is_taken(
    store: Store, clock: FakeClock
) -> None:
    """After a takeover, the seq a stale writer would use holds the new owner's CLAIMED
    event: that is not the stale checkpoint applied, and it is still refused."""
    store.create_run(new_run("r1"), now=clock.now())
    first, second = _taken_over(store, clock, "r1")
    stale = step_events(first, 0, clock.now())
    assert stale[0].seq == second.events[-1].seq
    before = store.get_run("r1"), store.history("r1")

    assert store.commit([checkpoint(first, stale)], now=clock.now()) == [False]
    assert store.commit([checkpoint(first, stale)], now=clock.now()) == [False]

    assert (store.get_run("r1"), store.history("r1")) == before


def test_a_batch_mixing_an_applied_and_a_new_checkpoint_writes_only_the_new_one(
    store: Store, clock: FakeClock
) -> None:
    for run_id in ("done", "new"):
        store.create_run(new_run(run_id), now=clock.now())
    claims = {
        c.run_id: c for c in store.claim("a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)
    }
    applied = checkpoint(claims["done"], step_events(claims["done"], 0, clock.now()))
    assert store.commit([applied], now=clock.now()) == [True]
    clock.advance("1s")
    fresh = checkpoint(claims["new"], step_events(claims["new"], 0, clock.now()))
    later = checkpoint(claims["done"], step_events(applied.events, 1, clock.now()))

    assert store.commit([applied, fresh], now=clock.now()) == [True, True]
    assert store.commit([later], now=clock.now()) == [True]  # the run goes on from there

    assert store.history("done") == [*claims["done"].events, *applied.events, *later.events]
    assert store.history("new") == [*claims["new"].events, *fresh.events]
    run = store.get_run("new")
    assert run is not None
    assert run.event_count == fresh.events[-1].seq
