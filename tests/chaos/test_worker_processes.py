"""`durably worker --processes N` with real processes, on both stores: the supervisor's
children share a batch under the names NAME-1 .. NAME-N; SIGTERM to the supervisor stops
every child, which hands its runs back, and the supervisor exits 0; a child SIGKILLed is
started again and every run still completes; the supervisor SIGKILLed (Linux), its children
stop by themselves and hand their runs back.

What the children did is read from the runs' histories (who claimed each run) and from the
supervisor's log (which process runs which worker)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import RunStatus, Start
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import Claimed
from tests.integration.processes import start_worker, wait_for_step_start, wait_until
from tests.integration.stop_app import make_app

pytestmark = pytest.mark.chaos

STARTED = " started (concurrency "  # a worker's line once it serves
RUNS_AS = re.compile(r"supervisor: worker (\S+) runs as process (\d+)")


@pytest.fixture(autouse=True)
def logs(tmp_path: Path) -> Iterator[None]:
    """After the test, no child of its supervisors left running (SIGKILL, if one failed)."""
    yield
    for log in tmp_path.glob("*.log"):
        for _, pid in pids(log):
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def app(store_url: str) -> Iterator[durably.App]:
    """The test's own client of the store (tests.integration.stop_app: sleepy(seconds))."""
    opened = make_app(store_url)
    yield opened
    opened.close()


def supervise(
    store_url: str,
    log: Path,
    processes: list[subprocess.Popen[bytes]],
    *options: str,
    count: int = 2,
) -> subprocess.Popen[bytes]:
    """`durably worker --processes COUNT` (each child --concurrency 4), once every child
    serves."""
    supervisor = start_worker(store_url, log, "--processes", str(count), *options)
    processes.append(supervisor)

    def serving() -> bool:
        if supervisor.poll() is not None:
            pytest.fail(f"the supervisor exited with {supervisor.returncode}:\n{log.read_text()}")
        return log.read_text().count(STARTED) >= count

    wait_until("every child serves", serving, log, timeout=60)
    return supervisor


def pids(log: Path) -> list[tuple[str, int]]:
    """Each start of a child the supervisor logged, in order: its worker name and process id."""
    return [(name, int(pid)) for name, pid in RUNS_AS.findall(log.read_text())]


def owners(app: durably.App, run_id: str) -> list[str]:
    claimed = [e for e in app.client.history(run_id) if e.kind is EventKind.CLAIMED]
    return [read_payload(e, Claimed).owner for e in claimed]


def gone(pid: int) -> bool:
    """Whether the process has ended (gone, or a zombie nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def stop(supervisor: subprocess.Popen[bytes], log: Path, within: float = 30) -> None:
    """SIGTERM to the supervisor: it exits 0, within `within` seconds."""
    supervisor.send_signal(signal.SIGTERM)
    try:
        code = supervisor.wait(timeout=within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the supervisor still ran {within}s after SIGTERM:\n{log.read_text()}")
    assert code == 0, log.read_text()


@pytest.mark.timeout(180)
def test_two_children_named_after_the_supervisor_share_a_batch_after_one_upgrade(
    app: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "supervisor.log"
    supervisor = supervise(store_url, log, processes, "--upgrade", "--poll", "50ms")
    handles = app.start_many([Start("sleepy", (0.2,)) for _ in range(40)])
    for handle in handles:
        assert app.client.wait(handle.id, timeout=60).status is RunStatus.COMPLETED

    # The default name, as a worker's (host:pid:tag), with the supervisor's process id
    base = f"{re.escape(socket.gethostname())}:{supervisor.pid}:[0-9a-f]{{6}}"
    children = [name for name, _ in pids(log)]
    assert len(children) == 2
    assert all(re.fullmatch(f"{base}-{k}", name) for k, name in enumerate(children, start=1))
    claimed = [owner for handle in handles for owner in owners(app, handle.id)]
    assert len(claimed) == 40  # each run claimed once: nobody died
    assert set(claimed) == set(children), f"not both children claimed runs: {set(claimed)}"
    # --upgrade ran once, in the supervisor, before any child started
    text = log.read_text()
    assert text.count("no run is stranded") == 1, text
    assert text.index("no run is stranded") < text.index("supervisor: worker ")
    stop(supervisor, log)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sigterm_to_the_supervisor_stops_every_child_and_leaves_no_run_leased(
    app: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "supervisor.log"
    supervisor = supervise(store_url, log, processes, "--name", "pool", "--stop-grace", "1s")
    handles = app.start_many([Start("sleepy", (600.0,)) for _ in range(6)])
    for handle in handles:  # 8 slots in all: every run is held, none can end
        wait_for_step_start(app, handle.id, supervisor, log)
    held = {owner for handle in handles for owner in owners(app, handle.id)}
    assert held == {"pool-1", "pool-2"}, held

    stop(supervisor, log)

    for name, pid in pids(log):
        assert gone(pid), f"worker {name} (process {pid}) outlived its supervisor"
    for handle in handles:
        run = app.client.get(handle.id)
        assert run.status is RunStatus.PENDING, run
        assert run.lease_owner is None, run
        assert app.client.history(handle.id)[-1].kind is EventKind.RELEASED
    assert app.store.workers() == []  # each child said it was gone


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_child_killed_is_started_again_and_every_run_completes(
    app: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "supervisor.log"
    supervisor = supervise(store_url, log, processes, "--name", "pool", "--poll", "50ms")
    handles = app.start_many([Start("sleepy", (1.0,)) for _ in range(24)])
    wait_until(
        "pool-1 holds runs",
        lambda: any(app.client.get(h.id).lease_owner == "pool-1" for h in handles),
        log,
    )
    [(_, first)] = [(name, pid) for name, pid in pids(log) if name == "pool-1"]
    os.kill(first, signal.SIGKILL)

    wait_until("pool-1 started again", lambda: len(pids(log)) == 3, log)
    for handle in handles:
        assert app.client.wait(handle.id, timeout=60).status is RunStatus.COMPLETED
    assert supervisor.poll() is None, log.read_text()
    assert "worker pool-1 was killed by SIGKILL" in log.read_text()
    name, again = pids(log)[-1]
    assert (name, again != first) == ("pool-1", True)
    # the runs pool-1 held when it died were taken over from it, and completed
    taken = [
        handle.id
        for handle in handles
        for event in app.client.history(handle.id)
        if event.kind is EventKind.CLAIMED
        and read_payload(event, Claimed).took_over_from == "pool-1"
    ]
    assert taken, "no run the killed child held was taken over"
    stop(supervisor, log)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG)")
def test_children_of_a_supervisor_killed_stop_and_hand_their_runs_back(
    app: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "supervisor.log"
    supervisor = supervise(store_url, log, processes, "--name", "pool", "--stop-grace", "1s")
    handles = app.start_many([Start("sleepy", (600.0,)) for _ in range(6)])
    for handle in handles:
        wait_for_step_start(app, handle.id, supervisor, log)

    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait()

    for name, pid in pids(log):
        wait_until(f"worker {name} stopped", lambda pid=pid: gone(pid), log)
    for handle in handles:
        run = app.client.get(handle.id)
        assert (run.status, run.lease_owner) == (RunStatus.PENDING, None), run
