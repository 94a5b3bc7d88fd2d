"""Failure handling with real worker processes: a worker that dies after the charge went
through, a charge that answers after its timeout, a worker killed in the middle of a refund.

Real time is the point here: separate processes, a real os._exit and SIGKILL, a real lease
that has to expire. The ledger the steps act on is a SQLite file outside durably's store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from durably.core.status import FINAL
from durably.workflow.context import step_key
from tests.integration.conftest import data, events

from .checkout_app import Ledger, build_app

pytestmark = pytest.mark.chaos

REPO = Path(__file__).resolve().parents[2]
TARGET = "tests.chaos.checkout_app:app"
WAIT = 60.0  # seconds for anything a test waits for


class Workers:
    """Worker processes of `durably worker`, each with its own log; all killed at the end."""

    def __init__(self, store_url: str, ledger: Ledger, logs: Path) -> None:
        self.env = {**os.environ, "DURABLY_STORE": store_url, "CHECKOUT_LEDGER": ledger.path}
        for name in ("CHECKOUT_CRASH_AFTER", "CHECKOUT_LATE_CHARGE", "CHECKOUT_HANG_UNDO"):
            self.env.pop(name, None)
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
        )
        self.logs = logs
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def spawn(self, **faults: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"worker-{len(self.started)}.log"
        command = [
            sys.executable,
            "-m",
            "durably",
            "worker",
            TARGET,
            "--lease",
            "2s",
            "--poll",
            "50ms",
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, cwd=REPO, env={**self.env, **faults}, stdout=out, stderr=subprocess.STDOUT
            )
        self.started.append((process, log))
        return process

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()}" for _, log in self.started)

    def stop_all(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in self.started:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    book = Ledger(str(tmp_path / "ledger.db"))
    book.create()
    return book


@pytest.fixture
def client(store_url: str, ledger: Ledger) -> Iterator[durably.App]:
    """Starts runs and reads them; runs nothing itself."""
    app = build_app(store_url, ledger=ledger)
    yield app
    app.close()


@pytest.fixture
def workers(store_url: str, ledger: Ledger, tmp_path: Path) -> Iterator[Workers]:
    spawned = Workers(store_url, ledger, tmp_path)
    yield spawned
    spawned.stop_all()


def wait_until(what: str, condition: Callable[[], bool], workers: Workers) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting until {what}\n{workers.output()}")


def wait_for_end(client: durably.App, run_id: str, workers: Workers) -> durably.RunStatus:
    wait_until(f"run {run_id} ends", lambda: client.client.get(run_id).status in FINAL, workers)
    return client.client.get(run_id).status


def test_a_charge_done_by_a_worker_that_died_is_reconciled_not_repeated(
    client: durably.App, ledger: Ledger, workers: Workers
) -> None:
    handle = client.start("checkout", "o-1", id="crash-1")
    key = step_key("crash-1", 1, "charge")
    doomed = workers.spawn(CHECKOUT_CRASH_AFTER="charge")
    assert doomed.wait(timeout=WAIT) == 137, workers.output()  # died after charging
    assert ledger.effects()[key] == "ch-o-1"
    assert client.client.get(handle.id).status is RunStatus.RUNNING  # its lease is still there

    workers.spawn()
    assert wait_for_end(client, handle.id, workers) is RunStatus.COMPLETED, workers.output()

    assert handle.result(timeout=0) == "ch-o-1"
    calls = Counter(ledger.calls())
    assert calls[("charge", key)] == 1  # never charged twice
    assert calls[("find_charge", key)] == 1
    [reconciled] = events(client, handle.id, EventKind.STEP_RECONCILED)
    assert (reconciled.name, data(reconciled)) == ("charge", {"found": True})
    takeovers = [
        e for e in events(client, handle.id, EventKind.CLAIMED) if "took_over_from" in data(e)
    ]
    assert len(takeovers) == 1


def test_a_charge_that_answers_after_its_timeout_is_reconciled(
    client: durably.App, ledger: Ledger, workers: Workers
) -> None:
    handle = client.start("checkout", "o-2", id="late-1")
    key = step_key("late-1", 1, "charge")
    workers.spawn(CHECKOUT_LATE_CHARGE="1")

    assert wait_for_end(client, handle.id, workers) is RunStatus.COMPLETED, workers.output()
    assert handle.result(timeout=0) == "ch-o-2"
    calls = Counter(ledger.calls())
    assert calls[("charge", key)] == 1
    assert calls[("find_charge", key)] == 1
    [failed] = events(client, handle.id, EventKind.STEP_ATTEMPT_FAILED)
    assert data(failed)["error_class"] == "durably.errors.StepTimeout"
    assert data(failed)["unknown"] is True
    [reconciled] = events(client, handle.id, EventKind.STEP_RECONCILED)
    assert data(reconciled) == {"found": True}


def test_a_worker_killed_mid_refund_leaves_each_undo_done_once(
    client: durably.App, ledger: Ledger, workers: Workers
) -> None:
    handle = client.start("checkout", "reject-1", id="refund-1")
    refund_key = f"{step_key('refund-1', 1, 'charge')}:undo"
    release_key = f"{step_key('refund-1', 0, 'reserve')}:undo"
    victim = workers.spawn(CHECKOUT_HANG_UNDO="refund")
    wait_until("the refund is under way", lambda: refund_key in ledger.effects(), workers)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=WAIT)

    workers.spawn()
    assert wait_for_end(client, handle.id, workers) is RunStatus.FAILED, workers.output()

    history = client.client.history(handle.id)
    done = Counter(e.position for e in history if e.kind is EventKind.COMPENSATION_COMPLETED)
    assert done == {1: 1, 0: 1}  # each compensation completed exactly once
    started = [(e.position, e.attempt) for e in history if e.kind is EventKind.COMPENSATION_STARTED]
    assert started == [(1, 1), (1, 2), (0, 1)]
    calls = Counter(ledger.calls())
    assert calls[("refund", refund_key)] == 2  # at least once: again after the kill
    assert calls[("release", release_key)] == 1
    effects = ledger.effects()
    assert effects[refund_key] == "refunded ch-reject-1"  # applied once, by its key
    assert effects[release_key] == "released res-reject-1"
    run = client.client.get(handle.id)
    assert run.error is not None
    assert "reject-1 is refused" in run.error.message
