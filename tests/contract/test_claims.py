"""The Store contract for leases: claim, lease expiry and takeover, renew, and claim
exclusivity under concurrent claimers. Every test runs against both real stores."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from datetime import timedelta

import pytest

from durably.core.history import EventKind
from durably.core.status import RunStatus
from durably.stores import Lease, Store, open_store
from durably.testing import FakeClock

from .support import (
    LEASE,
    WORKFLOW,
    checkpoint,
    claim_only,
    claimed_data,
    execute_sql,
    in_threads,
    new_run,
    step_events,
)


def test_a_claim_leases_the_run_and_records_a_claimed_event(store: Store, clock: FakeClock) -> None:
    created, _ = store.create_run(new_run("r1", input='{"amount": 12}'), now=clock.now())
    clock.advance("1s")
    now = clock.now()

    [claim] = store.claim("worker-a", [WORKFLOW], now=now, lease=LEASE, limit=10)

    assert (claim.run_id, claim.workflow, claim.input, claim.epoch) == (
        "r1",
        WORKFLOW,
        '{"amount": 12}',
        1,
    )
    assert claim.lease == Lease("r1", 1)
    assert [(e.seq, e.kind) for e in claim.events] == [
        (1, EventKind.RUN_STARTED),
        (2, EventKind.CLAIMED),
    ]
    assert claim.events[-1].at == now
    assert claimed_data(claim.events[-1]) == {"owner": "worker-a", "epoch": 1}
    assert store.history("r1") == list(claim.events)
    run = store.get_run("r1")
    assert run is not None
    assert run.status == RunStatus.RUNNING
    assert (run.lease_owner, run.lease_epoch) == ("worker-a", 1)
    assert run.available_at == now + LEASE  # a running run's available_at is its lease expiry
    assert run.updated_at == now
    assert run.created_at == created.created_at
    assert run.event_count == claim.events[-1].seq


def test_only_runs_of_the_named_workflows_are_claimed(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("a1", workflow="a"), now=clock.now())
    store.create_run(new_run("b1", workflow="b"), now=clock.now())
    store.create_run(new_run("c1", workflow="c"), now=clock.now())

    claims = store.claim("w", ["a", "c"], now=clock.now(), lease=LEASE, limit=10)

    assert sorted(claim.run_id for claim in claims) == ["a1", "c1"]
    assert store.claim("w", ["a", "c", "z"], now=clock.now(), lease=LEASE, limit=10) == []
    b1 = store.get_run("b1")
    assert b1 is not None
    assert b1.status == RunStatus.PENDING


def test_nothing_is_claimed_for_no_workflows_or_a_zero_limit(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())

    assert store.claim("w", [], now=clock.now(), lease=LEASE, limit=10) == []
    assert store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=0) == []
    assert len(store.history("r1")) == 1


def test_a_claim_takes_at_most_limit_runs_the_longest_due_first(
    store: Store, clock: FakeClock
) -> None:
    for n in range(5):
        store.create_run(new_run(f"r{n}"), now=clock.now())
        clock.advance("1s")

    first = store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=2)
    rest = store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)

    assert sorted(claim.run_id for claim in first) == ["r0", "r1"]
    assert sorted(claim.run_id for claim in rest) == ["r2", "r3", "r4"]
    assert store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []


def test_a_run_due_later_is_not_claimed_before_its_time(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    due = clock.now() + timedelta(hours=1)
    later = checkpoint(claim, status=RunStatus.PENDING, available_at=due)
    assert store.commit([later], now=clock.now()) == [True]

    clock.advance(timedelta(hours=1) - timedelta(seconds=1))
    assert store.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []

    clock.set(due)  # due exactly now: available_at <= now
    again = claim_only(store, clock, "r1", owner="w")
    assert again.epoch == 2


def test_a_claim_returns_the_whole_history_so_far(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    first = claim_only(store, clock, "r1")
    steps = step_events(first, 0, clock.now())
    released = step_events(steps, 1, clock.now())[:1]  # a step started, then handed back
    handback = checkpoint(
        first, steps + released, status=RunStatus.PENDING, available_at=clock.now()
    )
    assert store.commit([handback], now=clock.now()) == [True]
    clock.advance("1s")

    second = claim_only(store, clock, "r1", owner="worker-b")

    assert second.events[:-1] == (*first.events, *steps, *released)
    assert [event.seq for event in second.events] == list(range(1, len(second.events) + 1))
    assert claimed_data(second.events[-1]) == {"owner": "worker-b", "epoch": 2}
    run = store.get_run("r1")
    assert run is not None
    assert run.event_count == second.events[-1].seq


def test_a_first_claim_hands_back_the_run_started_event_exactly_as_stored(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    # On PostgreSQL a first claim makes the run_started event from the data kept in the run's
    # row (schema V15) instead of reading the history: it must be the stored event exactly.
    started = '{"correlation_id": "order-7", "trace_parent": "00-4bf9-00f0-01"}'
    store.create_run(dataclasses.replace(new_run("one"), started=started), now=clock.now())
    clock.advance("0.25s")
    batch = [
        dataclasses.replace(new_run("many-1"), started=started),
        new_run("many-2"),  # no run_started data: NULL, not "not kept"
    ]
    store.create_runs(batch, now=clock.now())
    clock.advance("1s")

    claims = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)

    assert sorted(claim.run_id for claim in claims) == ["many-1", "many-2", "one"]
    for claim in claims:
        assert list(claim.events) == store.history(claim.run_id)
        assert [(event.seq, event.kind) for event in claim.events[:1]] == [
            (1, EventKind.RUN_STARTED)
        ]
    data = {claim.run_id: claim.events[0].data for claim in claims}
    assert data == {"one": started, "many-1": started, "many-2": None}
    if not store_url.startswith("sqlite"):  # made from the rows, which kept the data
        kept = execute_sql(store_url, "SELECT id, started FROM durably_runs ORDER BY id")
        assert kept == [("many-1", started), ("many-2", None), ("one", started)]


def test_a_run_whose_row_does_not_keep_its_start_is_claimed_with_its_history_read(
    store: Store, store_url: str, clock: FakeClock
) -> None:
    # A run made before schema V15 (or by a write that does not keep its run_started data in
    # its row) reads '' there on PostgreSQL: its history is read, as for any later claim.
    store.create_run(new_run("old"), now=clock.now())
    store.create_run(new_run("new"), now=clock.now())
    if not store_url.startswith("sqlite"):
        execute_sql(store_url, "UPDATE durably_runs SET started = '' WHERE id = 'old'")
    clock.advance("1s")

    claims = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)

    assert sorted(claim.run_id for claim in claims) == ["new", "old"]
    for claim in claims:
        assert list(claim.events) == store.history(claim.run_id)
        assert [event.kind for event in claim.events] == [EventKind.RUN_STARTED, EventKind.CLAIMED]


def test_a_leased_run_is_taken_over_only_after_its_lease_expires(
    store: Store, clock: FakeClock
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    first = claim_only(store, clock, "r1", owner="worker-a")

    clock.advance(LEASE - timedelta(seconds=1))
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []

    clock.advance("2s")
    second = claim_only(store, clock, "r1", owner="worker-b")

    assert second.epoch == first.epoch + 1
    assert claimed_data(second.events[-1]) == {
        "owner": "worker-b",
        "epoch": 2,
        "took_over_from": "worker-a",
    }
    assert [event.kind for event in store.history("r1")] == [
        EventKind.RUN_STARTED,
        EventKind.CLAIMED,
        EventKind.CLAIMED,
    ]
    run = store.get_run("r1")
    assert run is not None
    assert (run.status, run.lease_owner, run.lease_epoch) == (RunStatus.RUNNING, "worker-b", 2)
    assert run.available_at == clock.now() + LEASE


def test_renew_extends_held_leases(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1", owner="worker-a")
    old_expiry = clock.now() + LEASE
    clock.advance("20s")

    assert store.renew([claim.lease], now=clock.now(), lease=LEASE) == {"r1"}
    new_expiry = clock.now() + LEASE
    run = store.get_run("r1")
    assert run is not None
    assert run.available_at == new_expiry
    assert (run.lease_owner, run.lease_epoch) == ("worker-a", 1)

    clock.set(old_expiry + timedelta(seconds=1))
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []

    clock.set(new_expiry)
    assert claim_only(store, clock, "r1", owner="worker-b").epoch == 2


def test_renew_returns_only_the_leases_still_held(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("lost", workflow="x"), now=clock.now())
    store.create_run(new_run("kept", workflow="y"), now=clock.now())
    store.create_run(new_run("done", workflow="y"), now=clock.now())
    claims = {
        c.run_id: c for c in store.claim("a", ["x", "y"], now=clock.now(), lease=LEASE, limit=10)
    }
    finished = checkpoint(claims["done"], status=RunStatus.COMPLETED, result="1")
    assert store.commit([finished], now=clock.now()) == [True]
    clock.advance(LEASE + timedelta(seconds=1))
    taken = claim_only(store, clock, "lost", owner="b", workflow="x")  # a's lease expired

    leases = [claims[run_id].lease for run_id in ("lost", "kept", "done")]
    held = store.renew([*leases, Lease("no-such-run", 1)], now=clock.now(), lease=LEASE)

    assert held == {"kept"}  # an expired lease nobody took over is still held
    lost = store.get_run("lost")
    assert lost is not None
    assert (lost.lease_owner, lost.lease_epoch) == ("b", taken.epoch)
    assert lost.available_at == clock.now() + LEASE  # b's lease, untouched by a's renewal
    done = store.get_run("done")
    assert done is not None
    assert (done.status, done.available_at) == (RunStatus.COMPLETED, None)
    assert store.renew([], now=clock.now(), lease=LEASE) == set()


def test_a_stale_epoch_is_not_renewed(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    first = claim_only(store, clock, "r1", owner="a")
    clock.advance(LEASE + timedelta(seconds=1))
    second = claim_only(store, clock, "r1", owner="b")
    expiry = clock.now() + LEASE
    clock.advance("10s")

    assert store.renew([first.lease], now=clock.now(), lease=LEASE) == set()

    run = store.get_run("r1")
    assert run is not None
    assert (run.lease_owner, run.lease_epoch, run.available_at) == ("b", second.epoch, expiry)


@pytest.mark.parametrize("shared", [False, True], ids=["own-stores", "one-store"])
def test_concurrent_claimers_claim_every_run_exactly_once(
    store: Store, store_url: str, clock: FakeClock, shared: bool
) -> None:
    run_ids = [f"r{n:03}" for n in range(200)]
    for run_id in run_ids:
        store.create_run(new_run(run_id), now=clock.now())
    claimers = 6
    stores = [store if shared else open_store(store_url) for _ in range(claimers)]
    lock = threading.Lock()
    claimed: list[tuple[str, str, int]] = []

    def claim_until_empty(index: int) -> None:
        owner = f"worker-{index}"
        while batch := stores[index].claim(
            owner, [WORKFLOW], now=clock.now(), lease=LEASE, limit=3 + index % 4
        ):
            with lock:
                claimed.extend((c.run_id, owner, c.epoch) for c in batch)

    try:
        # Each thread connects before the start, so that all claim from the first moment.
        in_threads(claimers, claim_until_empty, ready=lambda index: stores[index].get_run("-"))
    finally:
        for opened in stores:
            if opened is not store:
                opened.close()

    counts = Counter(run_id for run_id, _, _ in claimed)
    assert sorted(counts) == run_ids, "some runs were never claimed"
    assert [run_id for run_id, n in counts.items() if n > 1] == [], "claimed twice"
    assert {epoch for _, _, epoch in claimed} == {1}
    owners = {run_id: owner for run_id, owner, _ in claimed}
    for run in store.runs(limit=1000):
        assert (run.status, run.lease_owner, run.lease_epoch) == (
            RunStatus.RUNNING,
            owners[run.id],
            1,
        )
        kinds = [event.kind for event in store.history(run.id)]
        assert kinds == [EventKind.RUN_STARTED, EventKind.CLAIMED]
