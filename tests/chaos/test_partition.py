"""A network partition, with a real one: a worker process in a network namespace of the
test's own reaches a throwaway PostgreSQL cluster over a veth pair, and the test cuts the link
while that worker holds runs in the middle of long steps. A second worker, on this side,
takes the runs over once their leases expire and completes them. When the cut heals, the
first worker's late writes are refused by the lease fence and it stops its step bodies
promptly; it goes on serving. Checked from a journal the engine never touches.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from tests.chaos.control_app import journal
from tests.integration.processes import start_worker, wait_until
from tests.netns import HOST_IP, NETWORK, Partition
from tests.pg_cluster import ThrowawayPostgres, throwaway_binaries

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

TARGET = "tests.chaos.partition_app:app"
RUNS = ("p-1", "p-2")
LEASE = "2s"
STOP_WITHIN = 20.0  # seconds after the heal: TCP's retransmission backoff, then one renewal


@pytest.fixture
def cluster(partition: Partition) -> Iterator[ThrowawayPostgres]:
    """A cluster that listens on loopback and on this side of the veth pair too."""
    made = ThrowawayPostgres(throwaway_binaries())
    try:
        made.trust(NETWORK, HOST_IP)
        made.start()
        yield made
    finally:
        made.remove()


def ticks(log: Path, pid: int) -> int:
    return sum(1 for line in journal(log) if line.startswith("tick") and line.endswith(str(pid)))


@pytest.mark.timeout(180)
def test_a_worker_cut_off_is_taken_over_and_fenced_and_stops_once_the_cut_heals(
    partition: Partition,
    cluster: ThrowawayPostgres,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    inside = cluster.url.replace("127.0.0.1", HOST_IP)  # the address across the veth
    log = tmp_path / "effects.txt"
    client = durably.App(cluster.url)
    try:

        @client.workflow(name="haul", version="1")
        async def haul(log: str, seconds: float) -> int: ...

        for run_id in RUNS:
            client.start("haul", str(log), 120.0, id=run_id)
        options = ("--lease", LEASE)
        cut_off_log, other_log = tmp_path / "cut-off.log", tmp_path / "other.log"
        cut_off = start_worker(
            inside,
            cut_off_log,
            *options,
            "--name",
            "cut-off",
            target=TARGET,
            prefix=partition.prefix,
        )
        processes.append(cut_off)

        def grinding() -> bool:
            text = "".join(journal(log))
            return "p-1" in text and "p-2" in text and ticks(log, cut_off.pid) >= 4

        wait_until("both grinds ticking behind the veth", grinding, cut_off_log)

        partition.cut()
        cut_at = time.monotonic()
        other = start_worker(cluster.url, other_log, *options, "--name", "other", target=TARGET)
        processes.append(other)
        Path(f"{log}.hurry.{other.pid}").touch()  # the taker-over's grinds end at once
        wait_until(
            "the other side took the runs over and completed them",
            lambda: all(client.client.get(r).status is RunStatus.COMPLETED for r in RUNS),
            other_log,
            timeout=60,
        )
        settled = {run_id: client.client.history(run_id) for run_id in RUNS}
        for run_id in RUNS:
            assert client.handle(run_id).result(timeout=0) == other.pid
            claims = [e for e in settled[run_id] if e.kind is EventKind.CLAIMED]
            assert "took_over_from" in (claims[-1].data or "")  # the run really moved
        assert ticks(log, cut_off.pid) > 4  # it ground on, cut off, not knowing
        assert time.monotonic() - cut_at < 60

        partition.heal()
        healed_at = time.monotonic()

        def stopped() -> bool:
            before = ticks(log, cut_off.pid)
            time.sleep(0.5)  # real time is the point: a body still running ticks every 0.1 s
            return ticks(log, cut_off.pid) == before

        what = "the cut-off worker stopped its step bodies"
        wait_until(what, stopped, cut_off_log, timeout=STOP_WITHIN)
        print(f"stopped {time.monotonic() - healed_at:.1f}s after the heal")
        for run_id in RUNS:  # its late writes were refused: nothing of it came in
            assert client.client.history(run_id) == settled[run_id]
        assert cut_off.poll() is None  # it goes on serving
        fresh = client.start("haul", str(log), 0.0, id="p-3")
        Path(f"{log}.hurry.{cut_off.pid}").touch()
        assert fresh.result(timeout=30) in (cut_off.pid, other.pid)
    finally:
        client.close()
