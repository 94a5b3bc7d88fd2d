"""Which SQLite commits wait for the disk, read from the system calls of a real process
(strace): a start and a step's start do; a claim and a lease's renewal do not, because the
lease holder's next commit makes them durable with it (Connections.leasing, in
durably.stores.sqlite.connections). A process killed after its claim leaves the claim in the
file; the store's other commits wait for the disk as before, even after a claim that failed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from durably.core.history import EventKind
from durably.core.status import RunStatus
from durably.stores.sqlite.store import SQLiteStore
from tests.conftest import installed
from tests.integration import leasing_app

ROOT = Path(__file__).resolve().parents[2]
_MARK = re.compile(r'write\(2, "@(\w+)\\n"')
_SYNC = re.compile(r"\b(fsync|fdatasync)\(")


def _strace() -> str:
    return installed("strace", "strace", needed_by="the tests of which commits wait for the disk")


def _syncs_by_phase(tmp_path: Path, synchronous: str, *mode: str) -> dict[str, int]:
    """Run leasing_app under strace: how many fsyncs each of its marked phases made."""
    trace = tmp_path / "trace.txt"
    subprocess.run(
        [
            _strace(),
            "-f",
            "-qq",
            "-e",
            "trace=fsync,fdatasync,write",
            "-e",
            "signal=none",
            "-o",
            str(trace),
            sys.executable,
            "-m",
            "tests.integration.leasing_app",
            str(tmp_path / "durably.db"),
            synchronous,
            *mode,
        ],
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    phases: dict[str, int] = {}
    phase = "opening"
    for line in trace.read_text().splitlines():
        if (mark := _MARK.search(line)) is not None:
            phase = mark.group(1)
            phases[phase] = 0
        elif _SYNC.search(line) and not line.rstrip().endswith("<unfinished ...>"):
            phases[phase] = phases.get(phase, 0) + 1
    return phases


def test_a_claim_and_a_renewal_wait_for_no_disk_and_the_next_commit_makes_them_durable(
    tmp_path: Path,
) -> None:
    phases = _syncs_by_phase(tmp_path, "FULL")

    assert list(phases) == ["opening", "start", "claim", "renew", "step", "end"]
    assert phases["start"] >= 1  # acknowledged: on disk
    assert phases["claim"] == 0
    assert phases["renew"] == 0
    assert phases["step"] >= 1  # the step's start, and with it the claim before it


def test_a_claim_that_failed_leaves_the_next_commit_waiting_for_the_disk(tmp_path: Path) -> None:
    phases = _syncs_by_phase(tmp_path, "FULL", "busy-first")

    assert phases["claim"] == 0
    assert phases["renew"] == 0
    assert phases["step"] >= 1


def test_with_synchronous_normal_no_commit_waits_for_the_disk(tmp_path: Path) -> None:
    phases = _syncs_by_phase(tmp_path, "NORMAL")

    assert [phases[phase] for phase in ("start", "claim", "renew", "step")] == [0, 0, 0, 0]


def test_a_process_killed_after_its_claim_leaves_the_claim_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "durably.db"
    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.leasing_app",
            str(path),
            "FULL",
            "killed-after-claim",
        ],
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert killed.returncode == -9

    store = SQLiteStore(path)
    try:
        run = store.get_run(leasing_app.RUN)
        assert run is not None
        assert run.status == RunStatus.RUNNING
        history = store.history(leasing_app.RUN)
        assert [event.kind for event in history] == [EventKind.RUN_STARTED, EventKind.CLAIMED]
        # the lease holds: another worker takes nothing until it ends
        now = datetime.now(UTC)
        lease = timedelta(seconds=30)
        assert store.claim("worker-b", [leasing_app.WORKFLOW], now=now, lease=lease, limit=1) == []
        later = now + leasing_app.LEASE + timedelta(seconds=1)
        [taken] = store.claim("worker-b", [leasing_app.WORKFLOW], now=later, lease=lease, limit=1)
        assert taken.run_id == leasing_app.RUN
    finally:
        store.close()
