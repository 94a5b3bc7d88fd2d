"""Wake-ups and restarts with real worker processes: a run started elsewhere wakes an idle
worker (LISTEN/NOTIFY on PostgreSQL, a local socket on SQLite), polling covers a wake-up
that is missed, a worker restarted under its name recovers its runs at once, and a worker
killed on the same machine as a live one has its runs taken over within seconds.

The workers here poll once a minute, and a killed worker's leases last a minute, so a run
that finishes within the 20 s each test allows was found by a wake-up, a restart or a
neighbour, not by polling or expiry.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably.stores import Store
from tests.integration.processes import start_worker, wait_for_step_start
from tests.integration.stop_app import make_app

WITHIN = "20s"

pytestmark = pytest.mark.chaos


@pytest.fixture
def client(store_url: str) -> Iterator[durably.App]:
    opened = make_app(store_url)
    yield opened
    opened.close()


def started_and_idle(
    client: durably.App, store_url: str, log: Path, *options: str
) -> subprocess.Popen[bytes]:
    """A worker process that has finished a first run and is now waiting for work."""
    worker = start_worker(store_url, log, "--poll", "60s", *options)
    first = client.start("sleepy", 0.0)
    try:
        first.result(timeout=WITHIN)
    except durably.DurablyError:
        worker.kill()
        worker.wait()
        pytest.fail(f"the worker did not run its first run:\n{log.read_text()}")
    time.sleep(0.3)  # back in its wait
    return worker


def test_a_run_started_elsewhere_wakes_an_idle_worker_process(
    client: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "worker.log"
    processes.append(started_and_idle(client, store_url, log))

    handle = client.start("sleepy", 0.0)

    assert handle.result(timeout=WITHIN) == "slept 0.0s", log.read_text()


@pytest.mark.postgres
def test_a_listener_whose_connection_drops_listens_again(
    postgres_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    import psycopg

    client = make_app(postgres_url)
    log = tmp_path / "worker.log"
    processes.append(started_and_idle(client, postgres_url, log))
    with psycopg.connect(postgres_url, autocommit=True) as db:
        ended = db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE query = 'LISTEN durably_due' AND pid <> pg_backend_pid()"
        ).fetchall()
    assert ended, "no listening connection was found"

    handle = client.start("sleepy", 0.0)

    assert handle.result(timeout=WITHIN) == "slept 0.0s", log.read_text()
    client.close()


def test_polling_finds_a_run_whose_wake_up_was_missed(client: durably.App, store_url: str) -> None:
    """A worker deaf to wake-ups (as if every NOTIFY were lost) still finds the run."""
    deaf = make_app(store_url)
    store: Store = deaf.store
    store.watch = lambda wake: lambda: None  # type: ignore[method-assign]
    worker = deaf.worker(poll="100ms")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.serve(),))
    thread.start()
    try:
        handle = client.start("sleepy", 0.0)
        assert handle.result(timeout=WITHIN) == "slept 0.0s"
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join(timeout=30)
        loop.close()
        deaf.close()


def test_a_worker_restarted_under_its_name_recovers_its_runs_at_once(
    client: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "first.log"
    first = start_worker(store_url, log, "--name", "orders-1", "--lease", "60s")
    processes.append(first)
    handle = client.start("sleepy", 1.0)
    wait_for_step_start(client, handle.id, first, log)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert client.client.get(handle.id).lease_owner == "orders-1"  # leased for another minute

    again_log = tmp_path / "again.log"
    processes.append(start_worker(store_url, again_log, "--name", "orders-1", "--poll", "60s"))

    assert handle.result(timeout=WITHIN) == "slept 1.0s", again_log.read_text()


def test_a_worker_on_the_same_machine_takes_over_a_killed_ones_runs_in_seconds(
    client: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """No names given: each worker is named for its host and process, so a live worker sees
    within a beat that the killed one's process is gone, and ends its minute-long lease."""
    log = tmp_path / "first.log"
    first = start_worker(store_url, log, "--lease", "60s")
    processes.append(first)
    handle = client.start("sleepy", 1.0)
    wait_for_step_start(client, handle.id, first, log)
    first.send_signal(signal.SIGKILL)
    first.wait()
    dead = client.client.get(handle.id).lease_owner
    assert dead is not None

    other_log = tmp_path / "other.log"
    processes.append(start_worker(store_url, other_log, "--lease", "60s", "--poll", "60s"))

    assert handle.result(timeout=WITHIN) == "slept 1.0s", other_log.read_text()
    said = other_log.read_text()
    assert f"worker {dead} on this machine is gone (its process is no more)" in said
    assert "1 run(s) it held are taken over now" in said
