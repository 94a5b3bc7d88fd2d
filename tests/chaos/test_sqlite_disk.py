"""SQLite's file system fails under a running worker: its disk fills up (a small tmpfs the
test mounts itself), then frees up again. The worker says so in its log and its metrics,
waits, and resumes with nothing lost and no step run twice; a client's start meanwhile gets a
StoreUnavailable that says what to do. A store on a read-only file system is refused at once
with a reason that names the folder.

Needs root (mount); CI runs as root. Elsewhere the tests skip, saying why.
"""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.errors import StoreUnavailable
from tests.chaos.control_app import journal
from tests.chaos.load_app import CHAIN, build, expected
from tests.conftest import unavailable
from tests.integration.processes import start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.load_app:app"
RUNS = 40


def _mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        why = f"cannot mount a small file system here ({done.stderr.strip() or 'not root'})"
        unavailable(why, "this test (it runs as root there)")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB tmpfs of the test's own, unmounted after it."""
    where = tmp_path / "disk"
    where.mkdir()
    _mount("-t", "tmpfs", "-o", "size=6m", "tmpfs", str(where))
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def _free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _metric(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    return None


def _fill(disk: Path) -> Path:
    """Write a file until the file system is full; the file."""
    filler = disk / "filler"
    with filler.open("wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_makes_the_worker_wait_and_then_resume_with_nothing_lost(
    small_disk: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    url = f"sqlite:///{small_disk / 'durably.db'}"
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    client = build(durably.App(url))
    port = _free_port()
    try:
        for n in range(RUNS // 2):
            client.start("chain", n, str(effects), id=f"c-{n:03d}")
        filler = _fill(small_disk)  # full before the worker starts its first step
        processes.append(start_worker(url, log, "--metrics-port", str(port), target=TARGET))
        wait_until(
            "the worker says the disk is full", lambda: "disk is full" in log.read_text(), log
        )
        unavailable = lambda: _metric(port, "durably_store_available") == 0.0  # noqa: E731
        wait_until("its metrics say the store is unavailable", unavailable, log)
        with pytest.raises(StoreUnavailable, match="free space on the file system"):
            client.start("chain", 99, str(effects), id="refused")
        assert processes[0].poll() is None  # it waits; it did not die

        filler.unlink()  # space again: the worker goes on by itself
        for n in range(RUNS // 2, RUNS):  # and new runs come in
            client.start("chain", n, str(effects), id=f"c-{n:03d}")
        wait_until(
            "every run completed",
            lambda: (
                all(
                    r.status is RunStatus.COMPLETED for r in client.client.runs(limit=RUNS + 1).runs
                )
                and len(client.client.runs(limit=RUNS + 1).runs) == RUNS
            ),
            log,
            timeout=60,
        )
        for n in range(RUNS):
            assert client.handle(f"c-{n:03d}").result(timeout=0) == expected(n)
        started = Counter(line.split()[1] for line in journal(effects))
        assert len(started) == RUNS * len(CHAIN)
        assert set(started.values()) == {1}  # no step ran twice: its commit was retried
        assert _metric(port, "durably_store_available") == 1.0
        outages = _metric(port, "durably_store_outages_total")
        assert outages is not None
        assert outages >= 1
        assert "store available again" in log.read_text()
    finally:
        client.close()


def test_a_store_on_a_read_only_file_system_is_refused_with_the_reason(
    small_disk: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{small_disk / 'durably.db'}"
    made = build(durably.App(url))
    made.start("chain", 1, str(tmp_path / "effects.txt"), id="c-1")
    made.close()
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    _mount("--bind", str(small_disk), str(read_only))
    try:
        _mount("-o", "remount,bind,ro", str(read_only))
        client = build(durably.App(f"sqlite:///{read_only / 'durably.db'}"))
        try:
            with pytest.raises(StoreUnavailable, match="is read-only: durably writes the file"):
                client.start("chain", 2, str(tmp_path / "effects.txt"), id="c-2")
        finally:
            client.close()
    finally:
        subprocess.run(["umount", "-l", str(read_only)], check=False)
