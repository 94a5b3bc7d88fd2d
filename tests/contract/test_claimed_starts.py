"""The Store contract for a start that claims its run (create_claimed): what a worker of the
starting process is handed. It must leave the store exactly as a create and a claim would,
in one transaction. Every test runs against both real stores, plain and encrypted."""

from __future__ import annotations

import functools
from dataclasses import replace
from datetime import timedelta

import psycopg
import pytest

from durably.core.audit import Action, Via, audit_of
from durably.core.history import EventKind
from durably.core.status import RunStatus
from durably.stores import Lease, NewRun, Store, migrate_store, open_store
from durably.stores.postgres import starts
from durably.stores.sql.schema import CHANGES_TRIGGERS
from durably.testing import FakeClock

from .support import (
    LEASE,
    WORKFLOW,
    checkpoint,
    claim_only,
    claimed_data,
    execute_sql,
    new_run,
    older_schema,
    status_changes,
    step_events,
)

WAIT = 20  # seconds a change may take to be heard before the test calls it missing


def test_a_claimed_start_leaves_what_a_create_and_a_claim_leave(
    store: Store, clock: FakeClock
) -> None:
    run = replace(new_run("r1"), priority=7, correlation_id="order-9", started='{"x": 1}')
    now = clock.now()

    made = store.create_claimed(run, "worker-a", now=now, lease=LEASE)

    assert made is not None
    record, claim = made
    assert (claim.run_id, claim.workflow, claim.input, claim.epoch, claim.priority) == (
        "r1",
        WORKFLOW,
        '{"amount": 12}',
        1,
        7,
    )
    assert claim.lease == Lease("r1", 1)
    assert claim.inbox == ()
    assert [(e.seq, e.kind, e.at) for e in claim.events] == [
        (1, EventKind.RUN_STARTED, now),
        (2, EventKind.CLAIMED, now),
    ]
    assert claim.events[0].data == '{"x": 1}'
    assert claimed_data(claim.events[1]) == {"owner": "worker-a", "epoch": 1}
    assert store.history("r1") == list(claim.events)  # what it says it wrote, it wrote
    stored = store.get_run("r1")
    assert stored == record
    assert stored is not None
    assert stored.status == RunStatus.RUNNING
    assert (stored.lease_owner, stored.lease_epoch, stored.event_count) == ("worker-a", 1, 2)
    assert stored.available_at == now + LEASE  # its lease's end
    assert stored.created_at == stored.updated_at == now
    assert (stored.priority, stored.correlation_id) == (7, "order-9")


def test_a_claimed_start_is_not_claimed_again_while_its_lease_holds(
    store: Store, clock: FakeClock
) -> None:
    store.create_claimed(new_run("r1"), "worker-a", now=clock.now(), lease=LEASE)
    clock.advance(LEASE - timedelta(seconds=1))
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []

    clock.advance("2s")  # its worker died with it: taken over as any claimed run
    taken = claim_only(store, clock, "r1", owner="worker-b")

    assert taken.epoch == 2
    assert claimed_data(taken.events[-1]) == {
        "owner": "worker-b",
        "epoch": 2,
        "took_over_from": "worker-a",
    }


def test_a_claimed_start_is_written_under_its_lease_and_fenced_after_a_takeover(
    store: Store, clock: FakeClock
) -> None:
    made = store.create_claimed(new_run("r1"), "worker-a", now=clock.now(), lease=LEASE)
    assert made is not None
    _, claim = made
    steps = step_events(claim, 0, clock.now())
    assert store.commit([checkpoint(claim, steps)], now=clock.now()) == [True]

    clock.advance(LEASE + timedelta(seconds=1))
    claim_only(store, clock, "r1", owner="worker-b")
    late = step_events([*claim.events, *steps], 1, clock.now())

    assert store.commit([checkpoint(claim, late)], now=clock.now()) == [False]
    assert [e.kind for e in store.history("r1")][:4] == [
        EventKind.RUN_STARTED,
        EventKind.CLAIMED,
        EventKind.STEP_STARTED,
        EventKind.STEP_COMPLETED,
    ]


def test_a_claimed_start_of_a_taken_id_writes_nothing(store: Store, clock: FakeClock) -> None:
    existing, _ = store.create_run(new_run("r1", input='{"amount": 1}'), now=clock.now())
    clock.advance("1s")

    assert store.create_claimed(new_run("r1"), "worker-a", now=clock.now(), lease=LEASE) is None

    assert store.get_run("r1") == existing  # still pending, its input its own
    assert [e.kind for e in store.history("r1")] == [EventKind.RUN_STARTED]


def test_a_claimed_start_writes_its_attributes_and_its_audit_entry(
    store: Store, clock: FakeClock
) -> None:
    started = audit_of(Action.START, "erin", Via.API)
    run = replace(new_run("r1"), attributes={"customer": "42"}, audit=started)

    assert store.create_claimed(run, "worker-a", now=clock.now(), lease=LEASE) is not None

    assert store.attributes(["r1"]) == {"r1": {"customer": "42"}}
    assert [(e.run_id, e.by) for e in store.audit_trail(limit=10)] == [("r1", "erin")]


@pytest.mark.parametrize(
    "waits",
    [
        {"debounce": "k"},
        {"due": FakeClock().now() + timedelta(minutes=5)},
    ],
    ids=["debounced", "due-later"],
)
def test_a_run_no_start_may_claim_is_refused_before_anything_is_written(
    store: Store, clock: FakeClock, waits: dict[str, object]
) -> None:
    run: NewRun = replace(new_run("r1"), **waits)  # type: ignore[arg-type]

    with pytest.raises(ValueError, match="create_run"):
        store.create_claimed(run, "worker-a", now=clock.now(), lease=LEASE)

    assert store.get_run("r1") is None


def test_a_claimed_start_is_heard_running_by_a_listener_of_another_store(
    store: Store, other: Store, clock: FakeClock
) -> None:
    """Its claim is a status change, as any claim's is (`durably listen` hears it)."""
    start = functools.partial(
        store.create_claimed, new_run("r"), "worker-a", now=clock.now(), lease=LEASE
    )

    [change] = status_changes(other, start, 1, wait=WAIT)

    assert (change.run, change.workflow, change.status) == ("r", WORKFLOW, "running")
    assert change.at == clock.now()


@pytest.mark.postgres
def test_a_postgres_claimed_start_tried_again_after_a_lost_answer_keeps_what_it_made(
    postgres_url: str, clock: FakeClock
) -> None:
    """A try whose connection died before its answer came may have committed: the second
    try (the store's `after_loss`) finds its own lease on the run and reports it made, where
    a plain second try would find the id taken and strand the run until its lease ran out."""
    store = open_store(postgres_url)
    try:
        run, now = new_run("r1"), clock.now()
        assert store.create_claimed(run, "worker-a", now=now, lease=LEASE) is not None
        with psycopg.connect(postgres_url, autocommit=True) as db:
            assert starts.claimed_before(db, run, "worker-a", now, LEASE) is True
            assert starts.claimed_before(db, run, "worker-b", now, LEASE) is False
            fresh = new_run("r2")
            with db.transaction():  # the first try never reached the server: made now
                assert starts.claimed_before(db, fresh, "worker-a", now, LEASE) is True
        assert [e.kind for e in store.history("r1")] == [EventKind.RUN_STARTED, EventKind.CLAIMED]
        made = store.get_run("r2")
        assert made is not None
        assert (made.status, made.lease_owner, made.lease_epoch) == ("running", "worker-a", 1)
    finally:
        store.close()


_CHANGES_TRIGGERS = (
    "SELECT tgname FROM pg_trigger WHERE tgrelid = 'durably_runs'::regclass"
    " AND tgname LIKE 'durably_runs_%%' AND tgname <> 'durably_runs_notices' ORDER BY tgname"
)


@pytest.mark.postgres
@pytest.mark.parametrize("was_on", [True, False])
def test_a_store_migrated_to_version_16_hears_claimed_starts_if_its_stream_was_on(
    postgres_url: str, clock: FakeClock, was_on: bool
) -> None:
    """Up to version 15 the stream was one trigger, on UPDATEs; a claimed start now inserts
    its run running, so a store whose stream was on gets the trigger on INSERTs too, and one
    whose stream was off stays off."""
    older_schema(postgres_url, 15)
    if was_on:
        execute_sql(postgres_url, CHANGES_TRIGGERS["durably_runs_changes"])

    assert migrate_store(postgres_url).found == 15
    expected = ["durably_runs_changes", "durably_runs_started_running"] if was_on else []
    assert [name for (name,) in execute_sql(postgres_url, _CHANGES_TRIGGERS)] == expected

    store, listener = open_store(postgres_url), open_store(postgres_url)
    try:
        assert listener.set_status_changes() is was_on
        start = functools.partial(
            store.create_claimed, new_run("r"), "worker-a", now=clock.now(), lease=LEASE
        )
        [change] = status_changes(listener, start, 1, wait=WAIT)  # turns it on if it was off
        assert (change.run, change.status) == ("r", "running")

        assert listener.set_status_changes(False) is False  # off: both triggers gone
        assert execute_sql(postgres_url, _CHANGES_TRIGGERS) == []
    finally:
        store.close()
        listener.close()
