"""The Store contract for waking runs that wait in a gate's line (Store.wake): a pending run
that waits for later is made due now and workers are woken; no other run is touched. Every
test runs against both real stores; a second store object on the same URL stands for another
process."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from durably.core.status import RunStatus
from durably.stores import Claim, RunRecord, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, claim_only, new_run, step_events

WAIT = 20  # seconds: how long a wake-up may take before the test calls it missing


@pytest.fixture
def other(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


def record(store: Store, run_id: str) -> RunRecord:
    found = store.get_run(run_id)
    assert found is not None
    return found


def handed_back(
    store: Store, clock: FakeClock, run_id: str, *, due: datetime | None, owner: str = "worker-a"
) -> Claim:
    """Start a run, claim it and hand it back pending, due at `due` (None: on a message)."""
    store.create_run(new_run(run_id), now=clock.now())
    claim = claim_only(store, clock, run_id, owner=owner)
    events = step_events(claim, 0, clock.now())[:1]  # its step waits: no outcome yet
    waiting = checkpoint(claim, events, status=RunStatus.PENDING, available_at=due)
    assert store.commit([waiting], now=clock.now()) == [True]
    return claim


def test_a_run_due_later_is_made_due_now(store: Store, clock: FakeClock) -> None:
    handed_back(store, clock, "r1", due=clock.now() + timedelta(minutes=10))
    clock.advance(timedelta(seconds=5))
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []

    store.wake(["r1"], now=clock.now())

    assert record(store, "r1").available_at == clock.now()
    assert record(store, "r1").status is RunStatus.PENDING
    assert claim_only(store, clock, "r1", owner="worker-b").run_id == "r1"


def test_a_run_waiting_only_for_a_message_is_made_due_now(store: Store, clock: FakeClock) -> None:
    handed_back(store, clock, "r1", due=None)
    assert record(store, "r1").available_at is None

    store.wake(["r1"], now=clock.now())

    assert record(store, "r1").available_at == clock.now()


def test_a_run_due_earlier_keeps_its_due_time(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    created = clock.now()
    clock.advance(timedelta(seconds=5))

    store.wake(["r1"], now=clock.now())

    assert record(store, "r1").available_at == created


def test_a_running_run_keeps_its_lease(store: Store, clock: FakeClock) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    before = record(store, "r1")

    store.wake(["r1"], now=clock.now())

    after = record(store, "r1")
    assert (after.status, after.available_at, after.lease_owner, after.lease_epoch) == (
        RunStatus.RUNNING,
        clock.now() + LEASE,
        "worker-a",
        claim.epoch,
    )
    assert after == before
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []


@pytest.mark.parametrize(
    ("status", "wakes_at"),
    [(RunStatus.NEEDS_ATTENTION, timedelta(hours=1)), (RunStatus.COMPLETED, None)],
    ids=["parked", "ended"],
)
def test_a_parked_or_ended_run_is_left_as_it_is(
    store: Store, clock: FakeClock, status: RunStatus, wakes_at: timedelta | None
) -> None:
    store.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(store, clock, "r1")
    due = None if wakes_at is None else clock.now() + wakes_at
    result = "1" if status is RunStatus.COMPLETED else None
    ended = checkpoint(claim, (), status=status, result=result, available_at=due)
    assert store.commit([ended], now=clock.now()) == [True]
    before = record(store, "r1")

    store.wake(["r1"], now=clock.now())

    assert record(store, "r1") == before
    assert store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10) == []


def test_only_the_runs_named_are_woken_and_unknown_ones_are_ignored(
    store: Store, clock: FakeClock
) -> None:
    later = clock.now() + timedelta(minutes=10)
    for run_id in ("a", "b", "c"):
        handed_back(store, clock, run_id, due=later)

    store.wake(["a", "c", "c", "nobody"], now=clock.now())
    store.wake([], now=clock.now())

    assert {run_id: record(store, run_id).available_at for run_id in "abc"} == {
        "a": clock.now(),
        "b": later,
        "c": clock.now(),
    }


def test_many_runs_are_woken_at_once(store: Store, clock: FakeClock) -> None:
    """More runs than one SQLite statement takes parameters for."""
    later = clock.now() + timedelta(minutes=10)
    ids = [f"r{n}" for n in range(1_200)]
    store.create_runs([new_run(run_id) for run_id in ids], now=clock.now())
    claims = store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=2_000)
    back = [checkpoint(c, (), status=RunStatus.PENDING, available_at=later) for c in claims]
    assert all(store.commit(back, now=clock.now()))
    clock.advance(timedelta(seconds=1))

    store.wake(ids, now=clock.now())

    woken = store.claim("worker-b", [WORKFLOW], now=clock.now(), lease=LEASE, limit=2_000)
    assert sorted(claim.run_id for claim in woken) == sorted(ids)


def test_a_woken_run_wakes_workers_watching_the_store(
    store: Store, other: Store, clock: FakeClock
) -> None:
    handed_back(other, clock, "r1", due=clock.now() + timedelta(hours=1))
    woken = threading.Event()
    stop = store.watch(woken.set)
    try:
        woken.clear()  # a watcher may be poked once as it starts
        other.wake(["r1"], now=clock.now())
        assert woken.wait(WAIT), "the watcher was not woken by a run made due elsewhere"
    finally:
        stop()
