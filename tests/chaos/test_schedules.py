"""Real worker processes race for every tick of a schedule that ticks each second, on both
stores: every tick gets exactly one run, none is lost, and each run's step runs once; and so
when the workers are killed in the middle of the ticks."""

from __future__ import annotations

import itertools
import random
import subprocess
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from tests.chaos.control_app import journal
from tests.integration.processes import kill, start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.schedule_app:app"
RACE_SECONDS = 4.0
PREFIX = "schedule:pulse:"


@pytest.mark.slow
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

    app = durably.App(store_url)
    try:
        runs = [run for run in app.client.runs(limit=1000).runs if run.id.startswith(PREFIX)]
    finally:
        app.close()
    ticks = sorted(datetime.fromisoformat(run.id.removeprefix(PREFIX)) for run in runs)
    ran = [line.split()[1] for line in journal(beats)]
    completed = {run.id.removeprefix(PREFIX) for run in runs if run.status is RunStatus.COMPLETED}

    assert len(ticks) >= RACE_SECONDS  # it ticked all along
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ticks))
    assert len(ran) == len(set(ran))  # no tick's step ran twice
    assert set(ran) == completed  # and every completed run's did


STORM_SECONDS = 6.0


@pytest.mark.slow
def test_ticks_survive_workers_killed_in_the_middle_of_them(
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two workers, each SIGKILLed and restarted under its name at random moments, in the
    middle of a tick's decision, its runs' creation or their steps: no tick is lost (missed
    ones are caught up), none gets two runs, and each tick's run completes; its step ran at
    least once with its key, twice only after a kill."""
    beats = tmp_path / "beats.txt"
    monkeypatch.setenv("SCHEDULE_LOG", str(beats))
    rng = random.Random()
    names = ["tick-a", "tick-b"]
    live: dict[str, subprocess.Popen[bytes]] = {}
    for name in names:
        log = tmp_path / f"{name}-0.log"
        live[name] = start_worker(store_url, log, "--poll", "50ms", "--name", name, target=TARGET)
        processes.append(live[name])
    wait_until("the first beat", lambda: bool(journal(beats)), tmp_path / "tick-a-0.log")
    kills, began = 0, time.monotonic()
    while time.monotonic() - began < STORM_SECONDS:
        time.sleep(rng.uniform(0.2, 0.8))  # real time is the point: kills land anywhere
        name = rng.choice(names)
        kill(live[name])
        kills += 1
        log = tmp_path / f"{name}-{kills}.log"
        live[name] = start_worker(store_url, log, "--poll", "50ms", "--name", name, target=TARGET)
        processes.append(live[name])
    time.sleep(2.5)  # real time: the last ticks come due and are run
    for process in live.values():
        process.terminate()
    for process in live.values():
        assert process.wait(timeout=30) == 0

    app = durably.App(store_url)
    try:
        runs = [run for run in app.client.runs(limit=1000).runs if run.id.startswith(PREFIX)]
        histories = {run.id: app.client.history(run.id) for run in runs}
    finally:
        app.close()
    ticks = sorted(datetime.fromisoformat(run.id.removeprefix(PREFIX)) for run in runs)
    ran = Counter(line.split()[1] for line in journal(beats))
    assert kills >= 6
    assert len(ticks) >= STORM_SECONDS  # it ticked all along, kills or not
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ticks))
    for run in runs:
        if run.status is RunStatus.COMPLETED:
            assert run.id.removeprefix(PREFIX) in ran  # its step ran
        completions = [e for e in histories[run.id] if e.kind is EventKind.STEP_COMPLETED]
        assert len(completions) <= 1
    assert sum(count - 1 for count in ran.values()) <= kills  # again only after a kill
    unfinished = [run.id for run in runs if run.status is not RunStatus.COMPLETED]
    assert len(unfinished) <= 2, unfinished  # at most the ticks of the last moment
