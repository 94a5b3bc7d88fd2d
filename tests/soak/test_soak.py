"""Soak: an hour at a stated peak, then ten minutes at twice the peak, on each store, with a
worker killed every minute (SIGKILL) and replaced. The workers' memory, their database
connections and the backlog of due runs stay bounded, the backlog drains once the load stops,
and every run completes with each of its steps journalled. A report (samples.csv and a PNG
chart of throughput, memory, connections and backlog over time) goes to soak-report/<store>.

    make soak                                   # the full hour and ten minutes, both stores
    SOAK_MINUTES=5 SOAK_DOUBLE_MINUTES=1 make soak    # a short rehearsal

Not in `make test` (marker `soak`). Only 127.0.0.1 is contacted.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.status import FINAL
from tests.chaos.control_app import journal
from tests.chaos.load_app import CHAIN, build, expected
from tests.integration.processes import REPO, start_worker

from .report import Sample, write_report

pytestmark = pytest.mark.soak

TARGET = "tests.chaos.load_app:app"
PEAK = 40  # runs of `chain` (4 steps) started per second: the stated peak
MINUTES = float(os.environ.get("SOAK_MINUTES", "60"))
DOUBLE_MINUTES = float(os.environ.get("SOAK_DOUBLE_MINUTES", "10"))
WORKERS = 2
KILL_EVERY = 60.0  # seconds
SAMPLE_EVERY = 5.0  # seconds
DRAIN_WITHIN = 120.0  # seconds for the backlog to drain once the load stops
RSS_GROWTH = 1.5  # the last quarter's memory within this of the second quarter's (+ slack)
RSS_SLACK_MB = 40.0


@dataclass
class Fleet:
    """The worker processes, by slot; each killed one is replaced under its slot's name, so
    it recovers its runs at once."""

    url: str
    folder: Path
    processes: list[subprocess.Popen[bytes]]
    slots: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    kills: int = 0

    def start(self, slot: int) -> None:
        log = self.folder / f"worker-{slot}-{self.kills}.log"
        worker = start_worker(self.url, log, "--name", f"soak-{slot}", target=TARGET)
        self.slots[slot] = worker
        self.processes.append(worker)

    def kill_one(self, rng: random.Random) -> None:
        slot = rng.choice(sorted(self.slots))
        victim = self.slots[slot]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        self.kills += 1
        self.start(slot)

    def rss_mb(self) -> float:
        total = 0.0
        for worker in self.slots.values():
            try:
                status = Path(f"/proc/{worker.pid}/status").read_text()
            except OSError:
                continue
            rss = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
            total += int(rss[0]) / 1024 if rss else 0.0
        return total

    def connections(self, store: str) -> int:
        """Open database connections of the workers (PostgreSQL: sockets to the server; SQLite:
        handles of the database file and its -wal), read from /proc."""
        count = 0
        for worker in self.slots.values():
            try:
                links = [os.readlink(fd) for fd in Path(f"/proc/{worker.pid}/fd").iterdir()]
            except OSError:
                continue
            if store == "sqlite":
                count += sum(1 for link in links if link.endswith(("durably.db", "durably.db-wal")))
            else:
                count += sum(1 for link in links if link.startswith("socket:"))
        return count


@pytest.mark.timeout(int((MINUTES + DOUBLE_MINUTES) * 60 + 900))
def test_soak_at_peak_then_twice_peak_with_kills_stays_bounded(
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    request: pytest.FixtureRequest,
) -> None:
    if "soak" not in str(request.config.getoption("markexpr")):
        pytest.skip("a soak: run it with `make soak` (pytest -m soak)")
    store = "postgres" if store_url.startswith("postgresql") else "sqlite"
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    plan = f"peak {PEAK}/s for {MINUTES} min, twice that for {DOUBLE_MINUTES} min"
    print(f"\nsoak on {store}: seed {seed}, {plan}")
    effects = tmp_path / "effects.txt"
    client = build(durably.App(store_url))
    fleet = Fleet(store_url, tmp_path, processes)
    samples: list[Sample] = []
    try:
        for slot in range(WORKERS):
            fleet.start(slot)
        began = time.monotonic()
        started = 0
        phases = [("peak", PEAK, MINUTES * 60), ("double", 2 * PEAK, DOUBLE_MINUTES * 60)]
        next_sample, next_kill = began, began + KILL_EVERY
        for phase, rate, seconds in phases:
            phase_began = time.monotonic()
            while (now := time.monotonic()) - phase_began < seconds:
                # the runs the phases so far should have started by now
                due = _started_before(phases, phase) + int((now - phase_began) * rate)
                while started < due:
                    client.start("chain", started, str(effects), id=f"s-{started:07d}")
                    started += 1
                if now >= next_kill:
                    fleet.kill_one(rng)
                    next_kill += KILL_EVERY
                if now >= next_sample:
                    samples.append(_sample(client, fleet, store, began, phase, started))
                    next_sample += SAMPLE_EVERY
                time.sleep(0.01)  # real time is the point: a steady rate of starts
        load_ended = time.monotonic()
        while time.monotonic() - load_ended < DRAIN_WITHIN:
            samples.append(_sample(client, fleet, store, began, "drain", started))
            if samples[-1].in_flight == 0:
                break
            time.sleep(SAMPLE_EVERY)
        chart = write_report(samples, REPO / "soak-report" / store, f"durably soak on {store}")
        print(f"report: {chart} and samples.csv beside it")

        _check_bounded(samples)
        assert samples[-1].in_flight == 0, f"runs still in flight {DRAIN_WITHIN}s after the load"
        assert samples[-1].completed == started
        _check_ledger(client, effects, started)
        assert fleet.kills >= int((MINUTES + DOUBLE_MINUTES) * 60 / KILL_EVERY) - 1
    finally:
        client.close()


def _started_before(phases: list[tuple[str, int, float]], phase: str) -> int:
    """Runs the phases before `phase` started in all."""
    total = 0
    for name, rate, seconds in phases:
        if name == phase:
            return total
        total += int(rate * seconds)
    return total


def _sample(
    client: durably.App, fleet: Fleet, store: str, began: float, phase: str, started: int
) -> Sample:
    stats = client.store.stats(now=datetime.now(UTC))
    completed = stats.by_status.get(str(RunStatus.COMPLETED), 0)
    ended = {str(status) for status in FINAL}
    in_flight = sum(count for status, count in stats.by_status.items() if status not in ended)
    return Sample(
        seconds=time.monotonic() - began,
        phase=phase,
        started=started,
        completed=completed,
        backlog=stats.due,
        in_flight=in_flight,
        rss_mb=fleet.rss_mb(),
        connections=fleet.connections(store),
        kills=fleet.kills,
    )


def _check_bounded(samples: list[Sample]) -> None:
    loaded = [s for s in samples if s.phase != "drain"]
    quarter = max(1, len(loaded) // 4)
    second = max(s.rss_mb for s in loaded[quarter : 2 * quarter] or loaded)
    last = max(s.rss_mb for s in loaded[-quarter:])
    assert last <= second * RSS_GROWTH + RSS_SLACK_MB, f"memory grew: {second:.0f} -> {last:.0f}"
    connections = max(s.connections for s in samples)
    assert connections <= WORKERS * 12, f"{connections} connections for {WORKERS} workers"
    worst = max(s.backlog for s in loaded)
    assert worst <= 2 * PEAK * 30, f"a backlog of {worst}: the workers fell behind by > 30 s"


def _check_ledger(client: durably.App, effects: Path, started: int) -> None:
    runs = client.client.runs(limit=started + 1, status=RunStatus.COMPLETED).runs
    assert len(runs) == started
    for n in random.Random(0).sample(range(started), min(started, 200)):
        assert client.handle(f"s-{n:07d}").result(timeout=0) == expected(n)
    keys = Counter(line.split()[1] for line in journal(effects))
    assert len(keys) == started * len(CHAIN), "a step's effect is missing from the journal"
