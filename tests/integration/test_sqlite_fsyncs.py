"""Which SQLite commits wait for the disk, read from the system calls of a real process
(strace): a start and a step's start do; a claim and a lease's renewal do not, because the
lease holder's next commit makes them durable with it (Connections.leasing, in
durably.stores.sqlite.connections). A process killed after its claim leaves the claim in the
file; the store's other commits wait for the disk as before, even after a claim that failed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

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

    # (the start's transaction syncs the log's header once: it begins the log anew)
    assert [phases[phase] for phase in ("claim", "renew", "step")] == [0, 0, 0]


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


def _power_cut(path: Path, keep: int) -> None:
    """What a power cut leaves: the write-ahead log's first `keep` bytes (those synced; the
    rest lost), and no shared-memory index (it lived in memory, and is rebuilt)."""
    with open(f"{path}-wal", "r+b") as log:
        log.truncate(keep)
    Path(f"{path}-shm").unlink()


def _leased_then(path: Path, *mode: str) -> dict[str, int]:
    """leasing_app run to its SIGKILL: the log's lengths after its parts."""
    subprocess.run(
        [sys.executable, "-m", "tests.integration.leasing_app", str(path), "FULL", *mode],
        cwd=ROOT,
        timeout=60,
    )
    lengths: dict[str, int] = json.loads(Path(f"{path}.wal-lengths").read_text())
    return lengths


@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn"])
def test_a_power_cut_before_the_next_commit_leaves_the_run_as_if_never_claimed(
    tmp_path: Path, torn: bool
) -> None:
    """The claim and the renewal were not synced: a power cut may lose them, whole or torn
    part-way through their pages. Then the run is as the start left it, and is claimed
    again; nothing of the lost lease remains to confuse the next."""
    path = tmp_path / "durably.db"
    lengths = _leased_then(path, "killed-after-claim")
    assert lengths["renew"] > lengths["start"]  # the lease is in the log, past its synced part
    unsynced = lengths["renew"] - lengths["start"]
    _power_cut(path, lengths["start"] + (unsynced // 2 if torn else 0))

    store = SQLiteStore(path)
    try:
        run = store.get_run(leasing_app.RUN)
        assert run is not None
        assert (run.status, run.lease_epoch) == (RunStatus.PENDING, 0)
        assert [event.kind for event in store.history(leasing_app.RUN)] == [EventKind.RUN_STARTED]
        now = datetime.now(UTC)
        [claim] = store.claim(
            "worker-b", [leasing_app.WORKFLOW], now=now, lease=timedelta(seconds=30), limit=1
        )
        assert claim.epoch == 1
        assert [event.kind for event in claim.events] == [EventKind.RUN_STARTED, EventKind.CLAIMED]
    finally:
        store.close()


def test_the_first_steps_commit_makes_the_claim_before_it_durable(tmp_path: Path) -> None:
    """A power cut after the step's start (synced) keeps the claim too: it is in the log
    before the step's start, and the step's sync took every page before it."""
    path = tmp_path / "durably.db"
    lengths = _leased_then(path, "killed-after-step")
    _power_cut(path, lengths["step"])

    store = SQLiteStore(path)
    try:
        run = store.get_run(leasing_app.RUN)
        assert run is not None
        assert (run.status, run.lease_epoch) == (RunStatus.RUNNING, 1)
        assert [event.kind for event in store.history(leasing_app.RUN)] == [
            EventKind.RUN_STARTED,
            EventKind.CLAIMED,
            EventKind.STEP_STARTED,
        ]
    finally:
        store.close()
