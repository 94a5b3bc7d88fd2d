"""Group commit under a crash, with a real worker process on both stores: a batch is
acknowledged only once durable, so a worker killed between assembling a batch and its commit
loses no acknowledged checkpoint, and a new worker finishes every run exactly."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import durably
from durably.core.history import EventKind
from durably.stores import Store
from tests.chaos.commit_crash_app import STEPS, make_app

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]


def test_a_crash_between_batch_assembly_and_commit_loses_no_acknowledged_checkpoint(
    store_url: str, tmp_path: Path
) -> None:
    acked = tmp_path / "acked.txt"
    client = make_app(store_url, str(acked), crash=False)
    runs = [f"run-{i:02d}" for i in range(16)]
    workflow = client.workflow_named("counting")
    handles = [client.start(workflow, run, id=run) for run in runs]

    crashed = subprocess.run(
        [sys.executable, "-m", "tests.chaos.commit_crash_app", store_url, str(acked), "1"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert crashed.returncode == 137, crashed.stderr.decode()[-2000:]  # died in the commit

    acknowledged = [line.split() for line in acked.read_text().splitlines()]
    assert acknowledged, "no checkpoint was acknowledged before the crash"
    for run, position in acknowledged:
        completed = {
            event.position
            for event in client.client.history(run)
            if event.kind == EventKind.STEP_COMPLETED
        }
        assert int(position) in completed, f"{run}: step {position} was acknowledged, not kept"

    # A new worker (the dead one's leases expired) finishes every run exactly.
    recover = make_app(store_url, str(acked), crash=False)
    client.close()
    _expire_all_leases(recover.store)
    assert recover.run_until_idle(concurrency=16) == len(runs)
    assert [h.result(timeout=0) for h in handles] == [sum(range(STEPS))] * len(runs)
    recover.close()


def _expire_all_leases(store: Store) -> None:
    for run in store.runs(status=durably.RunStatus.RUNNING, limit=1000):
        assert run.lease_owner is not None
        store.expire_leases(run.lease_owner, now=datetime.now(run.created_at.tzinfo))


def _expire_all_leases(store: Store) -> None:
    for run in store.runs(status=durably.RunStatus.RUNNING, limit=1000):
        assert run.lease_owner is not None
        store.expire_leases(run.lease_owner, now=datetime.now(run.created_at.tzinfo))
