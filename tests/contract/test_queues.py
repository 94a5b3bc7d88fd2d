"""The Store contract for queues (durably.core.queues): a claim takes runs of the queues it
serves only, never more of a limited queue's runs, or of one key's, than its slots allow
(across concurrent claimers), hands the free slots round-robin between keys, and frees a slot
when a run ends or waits. Every test runs against both real stores."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest

from durably.core.queues import DEFAULT_QUEUE, Queue, parse_rate
from durably.core.status import RunStatus
from durably.stores import Claim, Store, open_store
from durably.testing import FakeClock

from .support import LEASE, WORKFLOW, checkpoint, in_threads, new_run

DEFAULT = Queue(DEFAULT_QUEUE, fair=False)
EMAILS = Queue("emails", fair=False)  # routing only: no limits


def start(store: Store, clock: FakeClock, run_id: str, queue: str | None, key: str | None) -> None:
    store.create_run(replace(new_run(run_id), queue=queue, key=key), now=clock.now())


def claim(
    store: Store, clock: FakeClock, queues: list[Queue] | None, limit: int = 100, owner: str = "w"
) -> list[Claim]:
    return store.claim(owner, [WORKFLOW], now=clock.now(), lease=LEASE, limit=limit, queues=queues)


def ids(claims: list[Claim]) -> list[str]:
    return sorted(claim.run_id for claim in claims)


def test_a_claim_takes_runs_of_the_queues_it_serves_only(store: Store, clock: FakeClock) -> None:
    start(store, clock, "plain", None, None)
    start(store, clock, "mail", "emails", None)
    start(store, clock, "sms", "texts", None)

    assert ids(claim(store, clock, [DEFAULT])) == ["plain"]
    assert ids(claim(store, clock, [EMAILS])) == ["mail"]
    assert claim(store, clock, [EMAILS, DEFAULT]) == []
    assert ids(claim(store, clock, None)) == ["sms"]  # a tool's claim: every queue


def test_the_runs_of_one_key_hold_no_more_slots_than_its_limit(
    store: Store, clock: FakeClock
) -> None:
    queue = Queue("imports", concurrency_per_key=2)
    for n in range(5):
        start(store, clock, f"a{n}", "imports", "customer-a")
        start(store, clock, f"b{n}", "imports", "customer-b")

    first = claim(store, clock, [queue])
    assert ids(first) == ["a0", "a1", "b0", "b1"]
    assert claim(store, clock, [queue]) == []

    # One ends, another waits for a timer: both free their slot for the next of their key.
    [a0, a1] = [c for c in first if c.run_id in ("a0", "a1")]
    store.commit([checkpoint(a0, status=RunStatus.COMPLETED, result="1")], now=clock.now())
    later = clock.now() + LEASE * 10
    store.commit([checkpoint(a1, status=RunStatus.PENDING, available_at=later)], now=clock.now())
    assert ids(claim(store, clock, [queue])) == ["a2", "a3"]
    assert claim(store, clock, [queue]) == []


def test_a_queue_holds_no_more_slots_than_its_concurrency(store: Store, clock: FakeClock) -> None:
    queue = Queue("reports", concurrency=3)
    for n in range(6):
        start(store, clock, f"r{n}", "reports", None)

    assert len(claim(store, clock, [queue])) == 3
    assert claim(store, clock, [queue]) == []


def test_an_expired_lease_frees_its_slot_and_its_run_is_claimed_again(
    store: Store, clock: FakeClock
) -> None:
    queue = Queue("imports", concurrency_per_key=1)
    start(store, clock, "a0", "imports", "k")
    start(store, clock, "a1", "imports", "k")
    [held] = claim(store, clock, [queue], owner="dead")
    assert held.run_id == "a0"
    assert claim(store, clock, [queue]) == []

    # Its worker is presumed dead: its slot is free, and both runs are due (the one it held
    # since its lease ran out, so a1 ranks first).
    clock.advance(LEASE * 2)
    [next_one] = claim(store, clock, [queue], owner="alive")
    assert next_one.run_id == "a1"
    assert claim(store, clock, [queue], owner="alive") == []


def test_a_key_with_one_run_is_claimed_beside_a_key_with_a_thousand(
    store: Store, clock: FakeClock
) -> None:
    queue = Queue("imports")  # fair, no limits
    store.create_runs(
        [replace(new_run(f"big{n:04}"), queue="imports", key="big") for n in range(1000)],
        now=clock.now(),
    )
    clock.advance("1s")
    start(store, clock, "small", "imports", "small")
    clock.advance("1s")

    assert "small" in ids(claim(store, clock, [queue], limit=2))


def test_fair_claims_go_round_robin_between_keys(store: Store, clock: FakeClock) -> None:
    queue = Queue("imports")
    for key, count in (("a", 6), ("b", 3), ("c", 1)):
        for n in range(count):
            start(store, clock, f"{key}{n}", "imports", key)
            clock.advance("1ms")

    # One run of every key in turn, then a second of each, then a third...
    assert ids(claim(store, clock, [queue], limit=6)) == ["a0", "a1", "a2", "b0", "b1", "c0"]
    # ...and the next claim goes on from the key where this one stopped.
    assert ids(claim(store, clock, [queue], limit=2)) == ["a3", "b2"]


def test_limited_and_plain_queues_share_one_claim(store: Store, clock: FakeClock) -> None:
    limited = Queue("imports", concurrency=1)
    start(store, clock, "i0", "imports", None)
    start(store, clock, "i1", "imports", None)
    start(store, clock, "p0", None, None)

    assert ids(claim(store, clock, [limited, DEFAULT])) == ["i0", "p0"]


@pytest.mark.parametrize("per_key", [1, 3])
def test_concurrent_claimers_never_exceed_a_keys_slots(
    store: Store, store_url: str, clock: FakeClock, per_key: int
) -> None:
    queue = Queue("imports", concurrency_per_key=per_key, concurrency=per_key * 3)
    store.create_runs(
        [
            replace(new_run(f"{key}-{n:02}"), queue="imports", key=key)
            for key in ("a", "b", "c", "d")
            for n in range(20)
        ],
        now=clock.now(),
    )
    claimers = 6
    stores = [open_store(store_url) for _ in range(claimers)]
    lock = threading.Lock()
    claimed: list[str] = []

    def claim_once(index: int) -> None:
        taken = claim(stores[index], clock, [queue], limit=5, owner=f"w{index}")
        with lock:
            claimed.extend(c.run_id for c in taken)

    try:
        in_threads(claimers, claim_once, ready=lambda index: stores[index].get_run("-"))
    finally:
        for opened in stores:
            opened.close()

    per = Counter(run_id.split("-")[0] for run_id in claimed)
    assert len(claimed) == len(set(claimed)) == min(per_key * 3, per_key * 4)
    assert max(per.values()) <= per_key
    running = [run for run in store.runs(status=RunStatus.RUNNING, limit=1000)]
    assert sorted(run.id for run in running) == sorted(claimed)


def test_a_queues_rate_holds_back_runs_beginning_in_its_window(
    store: Store, clock: FakeClock
) -> None:
    queue = Queue("calls", rate=parse_rate("2/minute", "rate"))
    for n in range(5):
        start(store, clock, f"c{n}", "calls", None)
        clock.advance("1ms")

    first = claim(store, clock, [queue])
    assert ids(first) == ["c0", "c1"]
    for claimed in first:
        store.commit([checkpoint(claimed, status=RunStatus.COMPLETED, result="1")], now=clock.now())
    clock.advance("59s")
    assert claim(store, clock, [queue]) == []
    clock.advance("2s")  # the first two began more than a minute ago
    assert ids(claim(store, clock, [queue])) == ["c2", "c3"]


def test_a_keys_rate_holds_back_its_own_runs_only(store: Store, clock: FakeClock) -> None:
    queue = Queue("calls", rate_per_key=parse_rate("1/minute", "rate_per_key"))
    for n in range(3):
        start(store, clock, f"a{n}", "calls", "a")
        start(store, clock, f"b{n}", "calls", "b")
        clock.advance("1ms")

    first = claim(store, clock, [queue])
    assert ids(first) == ["a0", "b0"]
    assert claim(store, clock, [queue]) == []
    for claimed in first:
        store.commit([checkpoint(claimed, status=RunStatus.COMPLETED, result="1")], now=clock.now())
    clock.advance("61s")
    assert ids(claim(store, clock, [queue])) == ["a1", "b1"]


def test_a_run_that_began_is_not_held_back_by_a_rate(store: Store, clock: FakeClock) -> None:
    queue = Queue("calls", rate=parse_rate("1/minute", "rate"))
    start(store, clock, "c0", "calls", None)
    start(store, clock, "c1", "calls", None)
    [began] = claim(store, clock, [queue])
    assert began.run_id == "c0"
    # It sleeps a second: woken, it goes on although the rate is spent for the minute.
    wake = clock.now() + timedelta(seconds=1)
    store.commit([checkpoint(began, status=RunStatus.PENDING, available_at=wake)], now=clock.now())
    clock.advance("2s")
    assert ids(claim(store, clock, [queue])) == ["c0"]
