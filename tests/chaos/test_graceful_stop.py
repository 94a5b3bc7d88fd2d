"""A real worker process told to stop (SIGTERM) finishes or hands back what it holds.

Real time is the point here: a separate process, a real signal, a step that really sleeps.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import durably
from durably.stores import Store, open_store
from tests.integration.processes import start_worker, wait_for_step_start
from tests.integration.stop_app import make_app

pytestmark = pytest.mark.chaos


def stop(worker: subprocess.Popen[bytes], log: Path, *, within: float) -> float:
    """SIGTERM the worker; return how long it took to exit (0 expected)."""
    began = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    try:
        code = worker.wait(timeout=within)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
        pytest.fail(f"the worker did not exit within {within}s of SIGTERM:\n{log.read_text()}")
    assert code == 0, log.read_text()
    return time.monotonic() - began


@pytest.fixture
def client(sqlite_url: str) -> Iterator[durably.App]:
    opened = make_app(sqlite_url)
    yield opened
    opened.close()


def test_sigterm_lets_a_short_step_finish(
    client: durably.App, sqlite_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    handle = client.start("sleepy", 1.0, id="short")
    log = tmp_path / "worker.log"
    worker = start_worker(sqlite_url, log, "--stop-grace", "10s")
    processes.append(worker)
    wait_for_step_start(client, handle.id, worker, log)

    took = stop(worker, log, within=10)

    assert took < 8
    run = client.client.get(handle.id)
    assert run.status is durably.RunStatus.COMPLETED, log.read_text()
    assert run.lease_owner is None
    assert handle.result(timeout=0) == "slept 1.0s"


def test_sigterm_hands_back_a_step_that_outlasts_the_grace(
    client: durably.App, sqlite_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    handle = client.start("sleepy", 600.0, id="long")
    log = tmp_path / "worker.log"
    worker = start_worker(sqlite_url, log, "--stop-grace", "1s", "--lease", "30s")
    processes.append(worker)
    wait_for_step_start(client, handle.id, worker, log)

    took = stop(worker, log, within=10)

    assert took < 8
    run = client.client.get(handle.id)
    assert run.status is durably.RunStatus.PENDING, log.read_text()
    assert run.lease_owner is None
    history = client.client.history(handle.id)
    assert [str(event.kind) for event in history][-2:] == ["step_started", "released"]
    assert run.available_at is not None
    assert run.available_at <= datetime.now(UTC)  # due again at once, for the next worker


def test_either_way_the_run_is_never_left_running_with_a_live_lease(
    client: durably.App, sqlite_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    handles = [
        client.start("sleepy", seconds, id=f"mix-{n}")
        for n, seconds in enumerate([0.2, 600.0, 0.5, 600.0])
    ]
    log = tmp_path / "worker.log"
    worker = start_worker(sqlite_url, log, "--stop-grace", "2s")
    processes.append(worker)
    for handle in handles:
        wait_for_step_start(client, handle.id, worker, log)

    stop(worker, log, within=10)

    for handle in handles:
        run = client.client.get(handle.id)
        assert run.status in (durably.RunStatus.COMPLETED, durably.RunStatus.PENDING), run
        assert run.lease_owner is None
    statuses = sorted(str(client.client.get(h.id).status) for h in handles)
    assert statuses == ["completed", "completed", "pending", "pending"]


class _StopsWhileOpening(durably.App):
    """An app whose store is opened just as a stop arrives (SIGTERM during start-up)."""

    stopper: durably.Worker | None = None

    @property
    def store(self) -> Store:
        if self.stopper is not None:  # once: the first time the worker opens it
            stopper, self.stopper = self.stopper, None
            stopper.stop()
        return super().store


@pytest.mark.timeout(30)
def test_a_stop_that_arrives_while_the_store_opens_is_not_lost(sqlite_url: str) -> None:
    app = _StopsWhileOpening(sqlite_url)
    worker = app.worker(poll="50ms")
    app.stopper = worker
    began = time.monotonic()

    worker.run()  # returns at once instead of serving forever

    assert time.monotonic() - began < 10
    app.close()


@pytest.mark.postgres
def test_sigterm_stops_a_worker_whose_store_is_down_within_its_grace(
    postgres_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    # Its store calls fail and are retried with backoff: the stop must not wait for them
    # forever (it did: the worker's loop awaited a retried call and never saw the stop).
    open_store(postgres_url).close()  # the schema, made while the database takes writes
    read_only = postgres_url + "%20-cdefault_transaction_read_only%3Don"  # as a standby is
    log = tmp_path / "worker.log"
    worker = start_worker(read_only, log, "--stop-grace", "2s")
    processes.append(worker)
    deadline = time.monotonic() + 30
    while "store unavailable, retrying" not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, log.read_text()
        assert worker.poll() is None, log.read_text()
        time.sleep(0.05)

    took = stop(worker, log, within=15)

    assert took < 10
    assert "stopped with its store down" in log.read_text(errors="replace")
