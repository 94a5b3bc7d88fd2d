"""A run that kills its worker process, among healthy runs, on a worker that a supervisor
restarts whenever it dies: only the run that kills is parked as a poison pill."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import durably
from durably.core.history import EventKind
from durably.core.status import FINAL, RunStatus
from tests.integration.processes import processes, start_worker

from .poison_app import LIMIT, build_app

__all__ = ["processes"]

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.poison_app:app"
HEALTHY = 20
SETTLED = FINAL | {RunStatus.NEEDS_ATTENTION}


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_only_the_run_that_kills_its_workers_is_parked(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build_app(store_url)
    ids = [f"healthy-{n}" for n in range(HEALTHY)]
    for run_id in ids[:2]:  # the poison run is claimed together with healthy ones
        client.start("healthy", int(run_id.split("-")[1]), id=run_id)
    client.start("poison", 0, id="poison")
    for run_id in ids[2:]:
        client.start("healthy", int(run_id.split("-")[1]), id=run_id)

    crashes = _supervise(client, store_url, tmp_path, processes, [*ids, "poison"])

    for run_id in ids:
        record = client.client.get(run_id)
        assert record.status is RunStatus.COMPLETED, (run_id, record.status, record.error)
        assert client.handle(run_id).result(timeout=0) == 2 * int(run_id.split("-")[1])
        assert EventKind.RUN_PARKED not in {event.kind for event in client.client.history(run_id)}
    poisoned = client.client.get("poison")
    assert poisoned.status is RunStatus.NEEDS_ATTENTION
    assert poisoned.error is not None
    assert poisoned.error.error_class == "durably.errors.PoisonPill"
    story = [(str(e.kind), e.data) for e in client.client.history("poison") if e.position is None]
    assert 1 <= crashes <= LIMIT + 1, f"{crashes} crashes: {story}"
    # some healthy runs shared a worker with it when it died, and were taken over
    shared = [
        run_id
        for run_id in ids
        if any(event.kind is EventKind.RUNNING_ALONE for event in client.client.history(run_id))
    ]
    assert shared, "no healthy run was on the worker the poison run killed"
    client.close()


def _supervise(
    client: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    run_ids: list[str],
) -> int:
    """Run one worker (concurrency 4, a stable name) and restart it whenever it dies, until
    every run has settled; return how many times it died."""
    crashes = 0
    deadline = time.monotonic() + 120

    def start() -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker-{len(processes)}.log"
        worker = start_worker(
            store_url, log, "--name", "supervised", "--poll", "50ms", target=TARGET
        )
        processes.append(worker)
        return worker

    worker = start()
    while time.monotonic() < deadline:
        if all(client.client.get(run_id).status in SETTLED for run_id in run_ids):
            worker.terminate()
            assert worker.wait(timeout=30) == 0
            return crashes
        if worker.poll() is not None:
            assert worker.returncode == 137, tmp_path / f"worker-{len(processes) - 1}.log"
            crashes += 1
            worker = start()
        time.sleep(0.05)
    statuses = {run_id: client.client.get(run_id).status for run_id in run_ids}
    pytest.fail(f"runs did not settle after {crashes} crashes: {statuses}")
