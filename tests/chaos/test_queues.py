"""Queues with real worker processes, on both stores (durably.core.queues): three workers
never run more than a key's slots at once (as a ledger the engine never reads shows), a key
with one run is served beside a key with 10,000 within one claim cycle, and a worker never
takes a run of a queue it does not serve."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

import durably
from durably import RunStatus, Start
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import Claimed
from durably.views.explaining import explain
from tests.chaos.control_app import journal
from tests.chaos.queues_app import build
from tests.integration.processes import start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.queues_app:app"
POLL = ("--poll", "50ms")


def workers(
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    *queues: str,
    concurrency: int = 8,
) -> list[Path]:
    """One worker process per entry of `queues` (its --queues), named w0, w1... on from those
    started before, all started; their logs."""
    logs = []
    for n, served in enumerate(queues, start=len(processes)):
        log = tmp_path / f"w{n}.log"
        options = (*POLL, "--concurrency", str(concurrency), "--name", f"w{n}", "--queues", served)
        processes.append(start_worker(store_url, log, *options, target=TARGET))
        logs.append(log)
    for log in logs:
        wait_until("the worker started", lambda log=log: " started " in log.read_text(), log)
    return logs


@pytest.fixture
def app(store_url: str) -> Iterator[durably.App]:
    """The test's own client of the store, closed after it (its wake-up socket too)."""
    opened = build(durably.App(store_url))
    yield opened
    opened.close()


def most_at_once(lines: list[str]) -> dict[str, int]:
    """For each key, the most of its steps the ledger shows running at the same time."""
    now: Counter[str] = Counter()
    most: Counter[str] = Counter()
    for line in lines:
        what, key, _ = line.split()
        now[key] += 1 if what == "begin" else -1
        most[key] = max(most[key], now[key])
    return dict(most)


def owners(app: durably.App, run_id: str) -> set[str]:
    claimed = [e for e in app.client.history(run_id) if e.kind is EventKind.CLAIMED]
    return {read_payload(e, Claimed).owner for e in claimed}


@pytest.mark.timeout(180)
def test_three_workers_never_run_more_of_a_key_than_its_slots(
    app: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    ledger = str(tmp_path / "ledger.txt")
    # Each worker holds 3 runs at most: the 8 slots (4 keys, 2 each) need more than one of
    # them, so the limit is tested across processes, not inside one.
    logs = workers(store_url, tmp_path, processes, "imports", "imports", "imports", concurrency=3)
    keys = [f"customer-{k}" for k in range(4)]
    handles = app.start_many(
        [Start("imported", (key, n, ledger), key=key) for n in range(12) for key in keys]
    )

    def done() -> bool:
        return len([line for line in journal(ledger) if line.startswith("end ")]) == 48

    wait_until("every run ran", done, logs[0], timeout=120)
    for handle in handles:
        assert app.client.wait(handle.id, timeout=30).status is RunStatus.COMPLETED
    assert most_at_once(journal(ledger)) == dict.fromkeys(keys, 2)  # never 3, and it was used
    # The limit held across processes: more than one worker took the key's runs.
    assert len({owner for h in handles for owner in owners(app, h.id)}) >= 2


@pytest.mark.timeout(180)
def test_a_key_with_one_run_starts_within_a_claim_cycle_beside_a_key_with_ten_thousand(
    app: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    ledger = str(tmp_path / "ledger.txt")
    big = app.start_many([Start("bulk", ("big", n, ledger), key="big") for n in range(10_000)])
    logs = workers(store_url, tmp_path, processes, "bulk", "bulk", "bulk")
    wait_until("the big key began", lambda: len(journal(ledger)) >= 20, logs[0], timeout=60)
    seen = len(journal(ledger))
    small = app.start("bulk", "small", 0, ledger, key="small")
    created = app.client.get(small.id).created_at

    wait_until("the small key ran", lambda: "end small 0" in journal(ledger), logs[0], 60)
    assert app.client.wait(small.id, timeout=30).status is RunStatus.COMPLETED
    small_claimed = first_claimed(app, small.id)
    # The big key's runs the queue handed out once the small key had a run due, before it
    # handed that one out: the queue runs 4 at once, so at most those 4 slots, freeing, go
    # to the big key first. (Counted by claim, not by when a step began: a step begins a
    # moment after its claim, later under load, and the one that began first need not be
    # the one claimed first.)
    begun = [
        int(line.split()[2]) for line in journal(ledger)[seen:] if line.startswith("begin big")
    ]
    passed_over = [n for n in begun if created <= first_claimed(app, big[n].id) < small_claimed]
    assert len(passed_over) <= 4, passed_over


def first_claimed(app: durably.App, run_id: str) -> datetime:
    """When the run was first claimed."""
    return min(e.at for e in app.client.history(run_id) if e.kind is EventKind.CLAIMED)


@pytest.mark.timeout(180)
def test_a_worker_never_takes_a_run_of_a_queue_it_does_not_serve(
    app: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    ledger = str(tmp_path / "ledger.txt")
    mail = app.start_many([Start("mailed", (n, ledger)) for n in range(30)])
    imports = app.start_many(
        [Start("imported", (f"c{n % 5}", n, ledger), key=f"c{n % 5}") for n in range(30)]
    )
    # Nobody serves emails yet: its runs wait, and say why.
    workers(store_url, tmp_path, processes, "imports,default")
    for handle in imports:
        assert app.client.wait(handle.id, timeout=60).status is RunStatus.COMPLETED
    waiting = app.client.get(mail[0].id)
    assert waiting.status is RunStatus.PENDING
    now = app.clock.now()
    said = explain(waiting, app.client.history(waiting.id), app.store.workers(), now)
    assert "waiting for a worker on queue emails; none is live" in said.next

    workers(store_url, tmp_path, processes, "emails")
    for handle in mail:
        assert app.client.wait(handle.id, timeout=60).status is RunStatus.COMPLETED
    assert set().union(*(owners(app, h.id) for h in imports)) == {"w0"}
    assert set().union(*(owners(app, h.id) for h in mail)) == {"w1"}
