"""PostgreSQL restarts: once the server is back, no durably call fails.

Each test restarts (or stops) a throwaway cluster of its own (tests/pg_cluster.py), never
the shared server. `pg_ctl restart -m immediate` kills the server like a crash: every pooled
connection dies with it, and the pool only finds out when a statement uses one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

import durably
from durably.client.handles import RunHandle
from durably.core.history import EventKind
from durably.core.status import RunStatus
from durably.errors import StoreUnavailable
from durably.stores import Claim, Store, open_store
from durably.testing import FakeClock
from tests.contract.support import checkpoint, new_run, step_events
from tests.integration.processes import start_worker
from tests.pg_cluster import ThrowawayPostgres

from .restart_app import STEPS, WORKFLOW, build_app, expected_result

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

TARGET = "tests.chaos.restart_app:app"
LEASE = timedelta(seconds=30)
INVOICES = "send_invoice"  # the workflow of tests.contract.support.new_run
WAIT = 30.0  # seconds any one wait below may take before the test gives up


@dataclass(frozen=True, slots=True)
class _Call:
    """One read by the polling client: when it was made, and how it failed if it did."""

    started: float
    ended: float
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class _Downtime:
    began: float
    back: float  # when the server accepted a fresh connection again


# -- a client -----------------------------------------------------------------------------


def test_the_first_client_call_after_a_restart_succeeds(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    """The reported defect: the first call after the restart raised StoreUnavailable."""
    cluster = throwaway_postgres
    app = build_app(cluster.url)
    try:
        handle = app.start(WORKFLOW, 1, id="r1")
        _fill_the_pool(app.store, 4)
        assert _client_backends(cluster) == 4  # all idle in the pool, all about to die

        cluster.restart(mode="immediate")
        assert handle.status() is RunStatus.PENDING
        cluster.restart(mode="immediate")
        assert app.client.get("r1").status is RunStatus.PENDING
        cluster.restart(mode="immediate")
        assert [run.id for run in app.client.runs().runs] == ["r1"]
    finally:
        app.close()


def test_every_store_call_rides_out_its_connections_being_killed(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    cluster = throwaway_postgres
    opened = open_store(cluster.url)
    now = FakeClock().now()

    def store() -> Store:
        """The store, once the server has ended every connection it held."""
        _kill_client_backends(cluster)
        return opened

    try:
        assert store().create_run(new_run("r1"), now=now)[1]
        assert store().create_run(new_run("r2"), now=now)[1]
        [claim] = store().claim("w", [INVOICES], now=now, lease=LEASE, limit=1)
        assert claim.run_id == "r1"
        assert store().renew([claim.lease], now=now, lease=LEASE) == {"r1"}
        steps = checkpoint(claim, step_events(claim, 0, now))
        assert store().commit([steps], now=now) == [True]
        # A commit whose answer was lost with its connection, tried again: applied once.
        assert store().commit([steps], now=now) == [True]
        assert store().history("r1") == [*claim.events, *steps.events]
        assert _status(store(), "r1") is RunStatus.RUNNING
        assert sorted(run.id for run in store().runs()) == ["r1", "r2"]
        assert store().unclaimable([], now=now) == {INVOICES: 1}
        assert store().update_gate("g", lambda _: ("open", 7)) == 7
        assert store().gates() == {"g": "open"}
        taken = store().take("r2", "person:ann", [RunStatus.PENDING], now=now, lease=LEASE)
        assert taken is not None
        assert taken.run_id == "r2"
        assert store().expire_leases("w", now=now) == 1
    finally:
        opened.close()


def test_a_claim_repeated_after_its_connection_died_returns_what_it_leased(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    """A claim whose answer was lost, tried again with the same `now` (as a worker does):
    the runs it leased come back, under the same lease, instead of nothing."""
    store = open_store(throwaway_postgres.url)
    clock = FakeClock()
    try:
        for run_id in ("r1", "r2", "r3"):
            store.create_run(new_run(run_id), now=clock.now())
        clock.advance("1s")
        first = store.claim("w", [INVOICES], now=clock.now(), lease=LEASE, limit=2)
        _kill_client_backends(throwaway_postgres)

        again = store.claim("w", [INVOICES], now=clock.now(), lease=LEASE, limit=2)

        assert sorted(again, key=_by_run) == sorted(first, key=_by_run)
        assert len(first) == 2
        for claim in first:
            kinds = [event.kind for event in store.history(claim.run_id)]
            assert kinds == [EventKind.RUN_STARTED, EventKind.CLAIMED]  # leased once
        taken = store.take("r3", "person:ann", [RunStatus.PENDING], now=clock.now(), lease=LEASE)
        _kill_client_backends(throwaway_postgres)
        retaken = store.take("r3", "person:ann", [RunStatus.PENDING], now=clock.now(), lease=LEASE)
        assert taken is not None
        assert retaken == taken
    finally:
        store.close()


def test_waiting_for_a_result_rides_out_the_server_being_down(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    cluster = throwaway_postgres
    starter = build_app(cluster.url)
    run_id = starter.start(WORKFLOW, 5).id
    starter.close()
    cluster.stop(mode="immediate")
    client = build_app(cluster.url)  # its store cannot even be opened while the server is down
    handle = RunHandle(client.client, run_id)

    with pytest.raises(TimeoutError, match=r"the last store error: .*Connection refused"):
        handle.result(timeout="0.5s")

    def serve_again() -> None:  # while result() below waits
        cluster.start()
        worker = build_app(cluster.url)
        worker.run_until_idle()
        worker.close()

    later = threading.Timer(0.5, serve_again)
    later.start()
    try:
        assert handle.result(timeout=WAIT) == expected_result(5)
    finally:
        later.join(timeout=WAIT)
        client.close()


# -- workers ------------------------------------------------------------------------------


def test_a_worker_started_while_the_server_is_down_waits_for_it(
    throwaway_postgres: ThrowawayPostgres,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    cluster = throwaway_postgres
    client = build_app(cluster.url)
    client.store  # noqa: B018  (creates the tables while the server is up)
    client.close()
    cluster.stop(mode="immediate")
    log = tmp_path / "worker.log"
    worker = start_worker(cluster.url, log, target=TARGET)
    processes.append(worker)

    time.sleep(2)  # real time is the point: the worker must still be there, waiting
    assert worker.poll() is None, f"the worker exited with {worker.returncode}:\n{log.read_text()}"
    assert "cannot open the store" in log.read_text()
    assert "Connection refused" in log.read_text()

    cluster.start()
    client = build_app(cluster.url)
    try:
        handles = {seed: client.start(WORKFLOW, seed) for seed in range(5)}
        for seed, handle in handles.items():
            assert handle.result(timeout=WAIT) == expected_result(seed)
    finally:
        client.close()
    assert worker.poll() is None, f"the worker exited with {worker.returncode}:\n{log.read_text()}"
    _stop(worker)


def test_a_worker_waiting_for_the_server_stops_on_sigterm(
    throwaway_postgres: ThrowawayPostgres,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    cluster = throwaway_postgres
    cluster.stop(mode="immediate")
    log = tmp_path / "worker.log"
    worker = start_worker(cluster.url, log, target=TARGET)
    processes.append(worker)
    deadline = time.monotonic() + WAIT
    while "cannot open the store" not in log.read_text():  # it is waiting now
        assert time.monotonic() < deadline, f"the worker never waited:\n{log.read_text()}"
        assert worker.poll() is None, f"the worker exited:\n{log.read_text()}"
        time.sleep(0.05)

    worker.send_signal(signal.SIGTERM)

    assert worker.wait(timeout=WAIT) == 0, log.read_text()


def test_restarts_while_workers_run_and_a_client_polls(
    throwaway_postgres: ThrowawayPostgres,
    processes: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    cluster = throwaway_postgres
    client = build_app(cluster.url)
    poller = build_app(cluster.url)
    seeds = {f"run-{n:03d}": n * 7_919 + 13 for n in range(50)}
    for run_id, seed in seeds.items():
        client.start(WORKFLOW, seed, id=run_id)
    logs = [tmp_path / f"worker-{n}.log" for n in range(2)]
    processes.extend(start_worker(cluster.url, log, target=TARGET) for log in logs)
    downtimes: list[_Downtime] = []
    try:
        with _polling(poller, list(seeds)) as calls:
            for finished_at_least in (8, 25):  # restart while runs are in flight
                _wait_for_finished(client, finished_at_least)
                assert _finished(client) < len(seeds), "every run ended before the restart"
                began = time.monotonic()
                cluster.restart(mode="immediate")
                downtimes.append(_Downtime(began, time.monotonic()))
                _wait_for_reads(calls, after=downtimes[-1].back, count=5)
            _wait_for_finished(client, len(seeds))
        for worker, log in zip(processes, logs, strict=True):
            assert worker.poll() is None, f"a worker exited:\n{log.read_text()}"
        _check_results(client, seeds)
        _check_polls(calls, downtimes)
    finally:
        for worker in processes:
            _stop(worker)
        client.close()
        poller.close()


# -- helpers ------------------------------------------------------------------------------


def _fill_the_pool(store: Store, size: int) -> None:
    """Make the store's pool open `size` connections: each of `size` gate updates holds its
    transaction (so its connection) until all of them are inside theirs."""
    together = threading.Barrier(size, timeout=WAIT)

    def change(_: str | None) -> tuple[str, None]:
        together.wait()
        return "{}", None

    threads = [
        threading.Thread(target=store.update_gate, args=(f"gate-{n}", change)) for n in range(size)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT)


def _client_backends(cluster: ThrowawayPostgres) -> int:
    """Connections to the server, besides the one asking."""
    import psycopg

    with psycopg.connect(cluster.url, autocommit=True) as db:
        row = db.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _kill_client_backends(cluster: ThrowawayPostgres) -> None:
    """End every other connection to the server, and wait until they are gone."""
    import psycopg

    with psycopg.connect(cluster.url, autocommit=True) as db:
        killed = db.execute(
            "SELECT pid FROM pg_stat_activity, pg_terminate_backend(pid)"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
        assert killed, "the store held no connection to kill"
        pids = [pid for (pid,) in killed]
        deadline = time.monotonic() + WAIT
        while db.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", (pids,)).rowcount:
            assert time.monotonic() < deadline, "terminated backends did not exit"
            time.sleep(0.01)


def _by_run(claim: Claim) -> str:
    return claim.run_id


def _status(store: Store, run_id: str) -> RunStatus:
    run = store.get_run(run_id)
    assert run is not None
    return run.status


def _finished(app: durably.App) -> int:
    return len(app.client.runs(status=RunStatus.COMPLETED, limit=1_000).runs)


def _wait_for_finished(app: durably.App, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while (finished := _finished(app)) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"{finished} runs finished, not {count}, after {WAIT:g}s")
        time.sleep(0.02)


@contextmanager
def _polling(app: durably.App, run_ids: list[str]) -> Iterator[list[_Call]]:
    """A thread that reads runs in a loop, recording every call's times and error."""
    calls: list[_Call] = []
    stop = threading.Event()

    def poll() -> None:
        n = 0
        while not stop.is_set():
            started, error = time.monotonic(), None
            try:
                app.client.get(run_ids[n % len(run_ids)])
            except Exception as exc:
                error = exc
            calls.append(_Call(started, time.monotonic(), error))
            n += 1
            stop.wait(0.01)

    thread = threading.Thread(target=poll, name="poller")
    thread.start()
    try:
        yield calls
    finally:
        stop.set()
        thread.join(timeout=WAIT)


def _check_polls(calls: list[_Call], downtimes: list[_Downtime]) -> None:
    """Calls that overlapped a downtime may have failed, with StoreUnavailable; no other."""

    def during_downtime(call: _Call) -> bool:
        return any(call.started < down.back and call.ended > down.began for down in downtimes)

    failed = [call for call in calls if call.error is not None]
    assert all(isinstance(call.error, StoreUnavailable) for call in failed), failed
    after = [call for call in failed if not during_downtime(call)]
    assert not after, f"calls made once the server was back failed: {after}"


def _wait_for_reads(calls: list[_Call], *, after: float, count: int) -> None:
    """Wait until the poller has answered `count` reads begun after `after`: it goes on
    reading once the server is back. (Counting the reads that happened to fall between two
    restarts raced the workers: on a loaded machine they could finish the runs the next
    restart waits for before the poller's first read.)"""
    deadline = time.monotonic() + WAIT
    while (done := sum(c.started > after and c.error is None for c in list(calls))) < count:
        if time.monotonic() > deadline:
            pytest.fail(f"the poller answered {done} reads, not {count}, {WAIT:g}s after a restart")
        time.sleep(0.02)


def _check_results(app: durably.App, seeds: dict[str, int]) -> None:
    for run_id, seed in seeds.items():
        run = app.client.get(run_id)
        assert run.status is RunStatus.COMPLETED, f"{run_id} is {run.status}"
        assert json.loads(run.result or "null") == expected_result(seed), run_id
        positions = [
            e.position for e in app.client.history(run_id) if e.kind is EventKind.STEP_COMPLETED
        ]
        assert positions == list(range(STEPS)), f"{run_id} recorded steps {positions}"


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
