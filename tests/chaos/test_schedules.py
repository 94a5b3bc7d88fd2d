"""Three real worker processes race for every tick of a schedule that ticks each second, on
both stores: every tick gets exactly one run, none is lost, and each run's step runs once."""

from __future__ import annotations

import itertools
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from tests.chaos.control_app import journal
from tests.integration.processes import start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.schedule_app:app"
RACE_SECONDS = 4.0
PREFIX = "schedule:pulse:"


def test_three_workers_start_each_tick_exactly_once(
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beats = tmp_path / "beats.txt"
    monkeypatch.setenv("SCHEDULE_LOG", str(beats))
    logs = [tmp_path / f"worker-{n}.log" for n in range(3)]
    for log in logs:
        processes.append(start_worker(store_url, log, "--poll", "50ms", target=TARGET))
    wait_until("the first beat", lambda: bool(journal(beats)), logs[0])
    time.sleep(RACE_SECONDS)
    for process in processes:
        process.terminate()
    for process in processes:
        assert process.wait(timeout=30) == 0

    store = durably.App(store_url)
    try:
        runs = [run for run in store.runs(limit=1000) if run.id.startswith(PREFIX)]
    finally:
        store.close()
    ticks = sorted(datetime.fromisoformat(run.id.removeprefix(PREFIX)) for run in runs)
    ran = [line.split()[1] for line in journal(beats)]
    completed = {run.id.removeprefix(PREFIX) for run in runs if run.status is RunStatus.COMPLETED}

    assert len(ticks) >= RACE_SECONDS  # it ticked all along
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ticks))
    assert len(ran) == len(set(ran))  # no tick's step ran twice
    assert set(ran) == completed  # and every completed run's did
