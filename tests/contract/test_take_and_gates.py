"""The Store contract for a person taking a parked run (take) and for the shared state of
circuit breakers and limits (update_gate, gates). Every test runs against both stores."""

from __future__ import annotations

import json

import pytest

from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.status import PARKED, RunStatus
from durably.stores import Store, open_store
from durably.testing import FakeClock

from .support import LEASE, checkpoint, claim_only, claimed_data, in_threads, new_run


def _parked(store: Store, clock: FakeClock, run_id: str) -> tuple[int, list[Event]]:
    """Create a run, claim it and park it; its epoch and history."""
    store.create_run(new_run(run_id), now=clock.now())
    claim = claim_only(store, clock, run_id, owner="worker-a")
    parked = Event(claim.events[-1].seq + 1, EventKind.RUN_PARKED, clock.now())
    error = ErrorInfo("durably.errors.NonDeterminismError", "step #0 changed")
    park = checkpoint(claim, (parked,), status=RunStatus.NEEDS_ATTENTION, error=error)
    assert store.commit([park], now=clock.now()) == [True]
    return claim.epoch, store.history(run_id)


def test_take_leases_a_run_in_one_of_the_given_statuses(store: Store, clock: FakeClock) -> None:
    old_epoch, history = _parked(store, clock, "r1")
    clock.advance("1h")

    claim = store.take("r1", "person:ann", PARKED, now=clock.now(), lease=LEASE)

    assert claim is not None
    assert (claim.run_id, claim.epoch) == ("r1", old_epoch + 1)
    assert claim.events[:-1] == tuple(history)
    assert claim.events[-1].seq == history[-1].seq + 1
    assert claim.events[-1].at == clock.now()
    assert claimed_data(claim.events[-1]) == {"owner": "person:ann", "epoch": old_epoch + 1}
    run = store.get_run("r1")
    assert run is not None
    assert (run.status, run.lease_owner, run.lease_epoch) == (
        RunStatus.RUNNING,
        "person:ann",
        claim.epoch,
    )
    assert run.available_at == clock.now() + LEASE
    back = Event(claim.events[-1].seq + 1, EventKind.RUN_RETRIED, clock.now(), position=0)
    handback = checkpoint(claim, (back,), status=RunStatus.PENDING, available_at=clock.now())
    assert store.commit([handback], now=clock.now()) == [True]
    assert claim_only(store, clock, "r1", owner="worker-b").epoch == claim.epoch + 1


def test_take_refuses_a_run_in_another_status_or_unknown(store: Store, clock: FakeClock) -> None:
    _parked(store, clock, "parked")
    store.create_run(new_run("pending"), now=clock.now())
    before = store.get_run("pending"), store.history("pending")

    assert store.take("pending", "person:ann", PARKED, now=clock.now(), lease=LEASE) is None
    assert (
        store.take("parked", "person:ann", {RunStatus.FAILED}, now=clock.now(), lease=LEASE) is None
    )
    assert store.take("nope", "person:ann", PARKED, now=clock.now(), lease=LEASE) is None

    assert (store.get_run("pending"), store.history("pending")) == before
    parked = store.get_run("parked")
    assert parked is not None
    assert parked.status == RunStatus.NEEDS_ATTENTION


def test_a_gate_starts_empty_and_keeps_the_state_it_is_given(store: Store) -> None:
    seen: list[str | None] = []

    def open_breaker(state: str | None) -> tuple[str, str]:
        seen.append(state)
        return json.dumps({"open": True}), "opened"

    assert store.gates() == {}
    assert store.update_gate("payments", open_breaker) == "opened"
    assert store.update_gate("payments", open_breaker) == "opened"

    assert seen == [None, '{"open": true}']
    assert store.gates() == {"payments": '{"open": true}'}


def test_a_gate_change_that_raises_stores_nothing(store: Store) -> None:
    def broken(state: str | None) -> tuple[str, None]:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        store.update_gate("payments", broken)

    assert store.gates() == {}


def test_concurrent_gate_changes_are_serialised(store: Store, store_url: str) -> None:
    def increment(state: str | None) -> tuple[str, int]:
        count = 1 + (0 if state is None else int(json.loads(state)["count"]))
        return json.dumps({"count": count}), count

    def work(index: int) -> list[int]:
        mine = open_store(store_url)
        try:
            return [mine.update_gate("limit", increment) for _ in range(20)]
        finally:
            mine.close()

    answers = [answer for per_thread in in_threads(4, work) for answer in per_thread]

    assert sorted(answers) == list(range(1, 81))
    assert store.gates() == {"limit": '{"count": 80}'}
