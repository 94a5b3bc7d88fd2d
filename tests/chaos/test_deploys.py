"""Evolving a workflow under runs in flight, with real worker processes on both stores.

Runs start on v1 and stop half-way (waiting for a signal); every worker stops; v2, which adds
a step behind `durably.patched`, is deployed: the old runs finish on the old path and new runs
take the new one. Then runs on v1 again, and v3, which adds the step without the patch: the
old runs are parked needs_attention with a NonDeterminismError naming the step, and never
run a mixture of both codes; new runs on v3 take the new path.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from tests.chaos.control_app import journal
from tests.chaos.deploy_app import build
from tests.integration.processes import start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.deploy_app:app"
WAIT = 30.0  # seconds: generous; nothing here is timed


class Deploys:
    """Worker processes of one deploy at a time, and a client with that deploy's code."""

    def __init__(self, store_url: str, tmp: Path, processes: list[subprocess.Popen[bytes]]) -> None:
        self.url, self.tmp, self.processes = store_url, tmp, processes
        self.log = tmp / "steps.txt"
        self.client: durably.App | None = None

    def deploy(self, version: str, monkeypatch: pytest.MonkeyPatch) -> durably.App:
        """Stop every worker, then start one of `version` (and a client with its code)."""
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=WAIT)
        if self.client is not None:
            self.client.close()
        monkeypatch.setenv("DEPLOY", version)
        worker_log = self.tmp / f"worker-{version}-{len(self.processes)}.log"
        self.processes.append(start_worker(self.url, worker_log, target=TARGET))
        self.client = build(durably.App(self.url), version)
        self.worker_log = worker_log
        return self.client

    def waiting(self, client: durably.App, *orders: str) -> None:
        def all_wait() -> bool:
            return all(
                EventKind.SIGNAL_WAITING in {e.kind for e in client.client.history(order)}
                for order in orders
            )

        wait_until(f"{orders} waiting for the signal", all_wait, self.worker_log)

    def steps(self, order: str) -> list[str]:
        return [line.split()[0] for line in journal(self.log) if line.split()[1] == order]


@pytest.fixture
def deploys(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> Iterator[Deploys]:
    made = Deploys(store_url, tmp_path, processes)
    yield made
    if made.client is not None:
        made.client.close()


def test_a_patched_deploy_finishes_old_runs_on_the_old_path_and_an_unpatched_one_parks_them(
    deploys: Deploys, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = str(deploys.log)
    v1 = deploys.deploy("v1", monkeypatch)
    for order in ("old-1", "old-2"):
        v1.start("order", order, log, id=order)
    deploys.waiting(v1, "old-1", "old-2")

    v2 = deploys.deploy("v2", monkeypatch)
    for order in ("new-1", "new-2"):
        v2.start("order", order, log, id=order)
    deploys.waiting(v2, "new-1", "new-2")
    for order in ("old-1", "old-2", "new-1", "new-2"):
        v2.client.signal(order, "go")
    for order in ("old-1", "old-2", "new-1", "new-2"):
        assert v2.handle(order).result(timeout=WAIT) == f"shipped {order}"
    assert deploys.steps("old-1") == ["reserve", "ship"]  # the old path: no check
    assert deploys.steps("old-2") == ["reserve", "ship"]
    assert deploys.steps("new-1") == ["reserve", "check", "ship"]  # the new path
    assert deploys.steps("new-2") == ["reserve", "check", "ship"]

    v1 = deploys.deploy("v1", monkeypatch)
    v1.start("order", "old-3", log, id="old-3")
    deploys.waiting(v1, "old-3")

    v3 = deploys.deploy("v3", monkeypatch)
    v3.start("order", "new-3", log, id="new-3")
    deploys.waiting(v3, "new-3")
    v3.client.signal("old-3", "go")
    v3.client.signal("new-3", "go")
    assert v3.handle("new-3").result(timeout=WAIT) == "shipped new-3"

    def parked() -> bool:
        return v3.client.get("old-3").status is RunStatus.NEEDS_ATTENTION

    wait_until("old-3 parked", parked, deploys.worker_log)
    run = v3.client.get("old-3")
    assert run.error is not None
    assert run.error.error_class == "durably.errors.NonDeterminismError"
    assert "'check_fraud'" in run.error.message
    assert deploys.steps("old-3") == ["reserve"]  # never a mixture: nothing more ran
    assert deploys.steps("new-3") == ["reserve", "check", "ship"]


def test_a_worker_started_with_upgrade_moves_stranded_runs_and_finishes_them(
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An edit that keeps the calls (a new default version): the worker of the new code,
    started with --upgrade, moves the run the old code left asleep and runs it to its end."""
    from durably.testing import FakeClock
    from tests.integration import upgrade_app

    clock = FakeClock()  # months ago: the run's hour of sleep is long over for the worker
    first = upgrade_app.build(durably.App(store_url, clock=clock), "first")
    first.start("order", "o-1", id="o-1")
    first.run_until_idle()
    old = first.client.get("o-1").version
    assert first.client.get("o-1").status is RunStatus.PENDING

    monkeypatch.setenv("UPGRADE_CODE", "edited")
    log = tmp_path / "worker.log"
    processes.append(
        start_worker(store_url, log, "--upgrade", target="tests.integration.upgrade_app:app")
    )
    wait_until(
        "the upgraded run's end",
        lambda: first.client.get("o-1").status is RunStatus.COMPLETED,
        log,
        WAIT,
    )
    [note] = [e for e in first.client.history("o-1") if e.kind is EventKind.UPGRADED]
    assert f'"from": "{old}"' in (note.data or "")
    assert '"by": "worker ' in (note.data or "")
    assert "1 run(s) moved to the deployed code" in log.read_text()
    first.close()
