"""The Store contract for starting runs in a batch (create_runs) and for hearing that runs
ended (watch_finished). Every test runs against both real stores; a second store object on
the same URL stands for another process."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator

import pytest

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import Claim, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, claim_only, in_threads, new_run

WAIT = 20  # seconds: how long a notification may take before the test calls it missing


@pytest.fixture
def other(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


# -- create_runs ----------------------------------------------------------------------------


def test_create_runs_makes_each_run_as_create_run_would(store: Store, clock: FakeClock) -> None:
    now = clock.now()

    outcomes = store.create_runs([new_run("a"), new_run("b", input='{"amount": 7}')], now=now)

    assert [(record.id, created) for record, created in outcomes] == [("a", True), ("b", True)]
    for record, _ in outcomes:
        assert store.get_run(record.id) == record
        assert record.status == RunStatus.PENDING
        assert record.created_at == record.updated_at == record.available_at == now
        assert (record.lease_epoch, record.event_count) == (0, 1)
        assert store.history(record.id) == [Event(1, EventKind.RUN_STARTED, now)]
    assert outcomes[1][0].input == '{"amount": 7}'
    claimed = store.claim("w", [WORKFLOW], now=now, lease=LEASE, limit=10)
    assert sorted(claim.run_id for claim in claimed) == ["a", "b"]


def test_create_runs_finds_existing_ids_and_writes_nothing_for_them(
    store: Store, clock: FakeClock
) -> None:
    first, _ = store.create_run(new_run("old", input='{"amount": 1}'), now=clock.now())
    clock.advance("5s")

    outcomes = store.create_runs(
        [new_run("new"), new_run("old", input='{"amount": 2}')], now=clock.now()
    )

    assert [created for _, created in outcomes] == [True, False]
    assert outcomes[1][0] == first  # as it was: the other input is not written
    assert len(store.history("old")) == 1
    assert sorted(run.id for run in store.runs()) == ["new", "old"]


def test_an_id_given_twice_in_a_batch_is_created_once_by_its_first(
    store: Store, clock: FakeClock
) -> None:
    outcomes = store.create_runs(
        [new_run("x", input='{"amount": 1}'), new_run("x", input='{"amount": 2}')],
        now=clock.now(),
    )

    assert [created for _, created in outcomes] == [True, False]
    assert {record.input for record, _ in outcomes} == {'{"amount": 1}'}
    assert len(store.history("x")) == 1


def test_an_empty_batch_creates_nothing(store: Store, clock: FakeClock) -> None:
    assert store.create_runs([], now=clock.now()) == []
    assert store.runs() == []


def test_concurrent_batches_sharing_ids_make_each_run_once(store: Store, clock: FakeClock) -> None:
    ids = [f"r{n}" for n in range(20)]

    outcomes = in_threads(
        4, lambda _: store.create_runs([new_run(run_id) for run_id in ids], now=clock.now())
    )

    for run_id_index in range(len(ids)):
        made = [batch[run_id_index][1] for batch in outcomes]
        assert made.count(True) == 1, ids[run_id_index]
    assert len(store.runs(limit=100)) == len(ids)
    assert all(len(store.history(run_id)) == 1 for run_id in ids)


def test_a_batch_wakes_a_watcher_elsewhere(store: Store, other: Store, clock: FakeClock) -> None:
    woken = threading.Event()
    stop = store.watch(woken.set)
    try:
        other.create_runs([new_run("a"), new_run("b")], now=clock.now())
        assert woken.wait(WAIT), "the watcher was not woken by a batch started elsewhere"
    finally:
        stop()


# -- watch_finished -------------------------------------------------------------------------


def _ending(claim: Claim, clock: FakeClock, status: RunStatus) -> tuple[Event, ...]:
    kind = EventKind.RUN_COMPLETED if status is RunStatus.COMPLETED else EventKind.RUN_FAILED
    return (Event(claim.events[-1].seq + 1, kind, clock.now()),)


@pytest.mark.parametrize(
    "status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.NEEDS_ATTENTION]
)
def test_a_run_ended_elsewhere_is_heard_by_its_id(
    store: Store, other: Store, clock: FakeClock, status: RunStatus
) -> None:
    other.create_runs([new_run("r1"), new_run("r2")], now=clock.now())
    claims = {
        c.run_id: c for c in other.claim("w", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)
    }
    heard: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    stop = store.watch_finished(heard.put)
    try:
        still_running = checkpoint(claims["r2"], _step(claims["r2"], clock))
        ended = checkpoint(claims["r1"], _ending(claims["r1"], clock, status), status=status)
        assert other.commit([still_running, ended], now=clock.now()) == [True, True]

        assert "r1" in until_heard(heard, "r1")
        assert "r2" not in heard_up_to_a_later_end(other, clock, heard)  # r2 goes on running
    finally:
        stop()


def test_a_run_handed_back_or_refused_is_not_heard_as_ended(
    store: Store, other: Store, clock: FakeClock
) -> None:
    other.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(other, clock, "r1")
    heard: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    stop = store.watch_finished(heard.put)
    try:
        released = checkpoint(
            claim, _step(claim, clock), status=RunStatus.PENDING, available_at=clock.now()
        )
        assert other.commit([released], now=clock.now()) == [True]
        stale = checkpoint(
            claim, _ending(claim, clock, RunStatus.COMPLETED), status=RunStatus.COMPLETED
        )
        assert other.commit([stale], now=clock.now()) == [False]  # its lease is gone

        assert "r1" not in heard_up_to_a_later_end(other, clock, heard)
    finally:
        stop()


def test_a_stopped_finish_watch_is_called_no_more(
    store: Store, other: Store, clock: FakeClock
) -> None:
    calls: list[str | None] = []
    stop = store.watch_finished(calls.append)
    stop()
    other.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(other, clock, "r1")
    heard: queue.SimpleQueue[str | None] = queue.SimpleQueue()
    stop_second = store.watch_finished(heard.put)  # proves the notification went out
    try:
        done = checkpoint(
            claim, _ending(claim, clock, RunStatus.COMPLETED), status=RunStatus.COMPLETED
        )
        assert other.commit([done], now=clock.now()) == [True]
        assert "r1" in until_heard(heard, "r1")
    finally:
        stop_second()
    assert calls == []


def until_heard(heard: queue.SimpleQueue[str | None], run_id: str) -> list[str | None]:
    """What was heard up to `run_id` (or WAIT). On PostgreSQL, NOTIFY reaches the whole
    database: runs of other stores (schemas) in it may be heard too."""
    seen: list[str | None] = []
    deadline = time.monotonic() + WAIT
    while run_id not in seen and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            seen.append(heard.get(timeout=max(0.0, deadline - time.monotonic())))
    return seen


def heard_up_to_a_later_end(
    store: Store, clock: FakeClock, heard: queue.SimpleQueue[str | None]
) -> list[str | None]:
    """What is heard up to the end of a run that `store` ends now, after everything before:
    a store tells of ends in the order it committed them, so what an earlier commit told is
    among these (no wait on the clock for what must not come)."""
    store.create_run(new_run("later", workflow="sentinel"), now=clock.now())
    claim = claim_only(store, clock, "later", workflow="sentinel")
    ending = _ending(claim, clock, RunStatus.COMPLETED)
    assert store.commit([checkpoint(claim, ending, status=RunStatus.COMPLETED)], now=clock.now())
    seen = until_heard(heard, "later")
    assert "later" in seen, "the later end was not heard"
    return seen


def _step(claim: Claim, clock: FakeClock) -> tuple[Event, ...]:
    return (Event(claim.events[-1].seq + 1, EventKind.STEP_STARTED, clock.now(), 0, "s", 1),)
