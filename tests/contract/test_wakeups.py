"""The Store contract for restarts and wake-ups: expire_leases, and watch (LISTEN/NOTIFY on
PostgreSQL, local sockets on SQLite). Every test runs against both real stores; a second
store object on the same URL stands for another process."""

from __future__ import annotations

import threading

import pytest

from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.errors import ConfigError
from durably.stores import Claim, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, claim_only, claimed_data, new_run

WAIT = 20  # seconds: how long a wake-up may take before the test calls it missing


def _event(claim: Claim, kind: EventKind, clock: FakeClock) -> tuple[Event, ...]:
    return (Event(claim.events[-1].seq + 1, kind, clock.now()),)


def test_expire_leases_frees_only_the_owners_running_runs(store: Store, clock: FakeClock) -> None:
    for run_id in ("mine", "done"):
        store.create_run(new_run(run_id), now=clock.now())
    claims = {
        c.run_id: c
        for c in store.claim("worker-a", [WORKFLOW], now=clock.now(), lease=LEASE, limit=10)
    }
    done = claims["done"]
    finished = checkpoint(
        done, _event(done, EventKind.RUN_COMPLETED, clock), status=RunStatus.COMPLETED, result="1"
    )
    assert store.commit([finished], now=clock.now()) == [True]
    store.create_run(new_run("theirs"), now=clock.now())
    claim_only(store, clock, "theirs", owner="worker-b")

    assert store.expire_leases("worker-a", now=clock.now()) == 1
    assert store.expire_leases("nobody", now=clock.now()) == 0

    # The restarted worker-a takes its run back at once; worker-b's lease and the finished
    # run are untouched.
    again = claim_only(store, clock, "mine", owner="worker-a")
    assert again.epoch == claims["mine"].epoch + 1
    assert claimed_data(again.events[-1])["took_over_from"] == "worker-a"
    assert store.get_run("theirs").lease_owner == "worker-b"  # type: ignore[union-attr]
    assert store.get_run("done").status == RunStatus.COMPLETED  # type: ignore[union-attr]


def test_a_run_started_elsewhere_wakes_a_watcher(
    store: Store, other: Store, clock: FakeClock
) -> None:
    woken = threading.Event()
    stop = store.watch(woken.set)
    try:
        woken.clear()
        other.create_run(new_run("r1"), now=clock.now())
        assert woken.wait(WAIT), "the watcher was not woken by a run started elsewhere"
    finally:
        stop()


def test_a_run_handed_back_due_now_wakes_a_watcher(
    store: Store, other: Store, clock: FakeClock
) -> None:
    other.create_run(new_run("r1"), now=clock.now())
    claim = claim_only(other, clock, "r1")
    woken = threading.Event()
    stop = store.watch(woken.set)
    try:
        woken.clear()
        released = checkpoint(
            claim,
            _event(claim, EventKind.RELEASED, clock),
            status=RunStatus.PENDING,
            available_at=clock.now(),
        )
        assert other.commit([released], now=clock.now()) == [True]
        assert woken.wait(WAIT), "the watcher was not woken by a run handed back"
    finally:
        stop()


def test_a_stopped_watch_is_called_no_more(store: Store, other: Store, clock: FakeClock) -> None:
    calls: list[int] = []
    stop = store.watch(lambda: calls.append(1))
    stop()
    other.create_run(new_run("r1"), now=clock.now())
    seen = threading.Event()  # a second watcher proves the wake-up went out
    stop_second = store.watch(seen.set)
    try:
        other.create_run(new_run("r2"), now=clock.now())
        assert seen.wait(WAIT)
    finally:
        stop_second()
    assert calls == []


@pytest.mark.postgres
def test_postgres_synchronous_commit_is_a_url_option(postgres_url: str) -> None:
    fast = open_store(f"{postgres_url}&synchronous_commit=off")
    try:
        assert getattr(fast, "synchronous_commit", None) == "off"
        show = fast._db.run(  # type: ignore[attr-defined]
            lambda db: db.execute("SHOW synchronous_commit").fetchone()
        )
        assert show == ("off",)
        assert "synchronous_commit" not in fast.url
    finally:
        fast.close()
    with pytest.raises(ConfigError, match=r"synchronous_commit='maybe'.*on, off"):
        open_store(f"{postgres_url}&synchronous_commit=maybe")
