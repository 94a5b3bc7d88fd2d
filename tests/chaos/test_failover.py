"""Losing the database machine: a PostgreSQL primary with a synchronous standby, two clusters
of the test's own. Workers run on a URL that names both (`host=a,b` with
target_session_attrs=read-write); the primary dies in the middle of the work (an immediate
shutdown, as a crash) and the standby is promoted. The workers carry on against it, every run
completes, and no checkpoint that a step saw acknowledged is lost: each one a step recorded
as acknowledged is in the promoted server's history.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from tests.chaos.control_app import journal
from tests.chaos.failover_app import STEPS
from tests.integration.processes import patiently, start_worker, wait_until
from tests.pg_cluster import ThrowawayPostgres

pytestmark = [pytest.mark.chaos, pytest.mark.postgres, pytest.mark.slow]

TARGET = "tests.chaos.failover_app:app"
RUNS = 60
WORKERS = 2


def both(primary: ThrowawayPostgres, standby: ThrowawayPostgres) -> str:
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    return (
        f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write&connect_timeout=2"
    )


@pytest.mark.timeout(300)
def test_workers_carry_on_after_a_failover_and_lose_no_acknowledged_checkpoint(
    replicated_postgres: tuple[ThrowawayPostgres, ThrowawayPostgres],
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    primary, standby = replicated_postgres
    url = both(primary, standby)
    acked = tmp_path / "acked.txt"
    monkeypatch.setenv("FAILOVER_ACKED", str(acked))  # the workers inherit it
    client = durably.App(url)
    try:

        @client.workflow(name="counting", version="1")
        async def counting(run: str) -> int: ...

        ids = [f"f-{n:03d}" for n in range(RUNS)]
        for run_id in ids:
            client.start("counting", run_id, id=run_id)
        for n in range(WORKERS):
            log = tmp_path / f"worker-{n}.log"
            processes.append(start_worker(url, log, "--lease", "3s", target=TARGET))
        wait_until("work under way", lambda: len(journal(acked)) >= RUNS, tmp_path / "worker-0.log")

        primary.stop("immediate")  # the database machine is gone
        seen = set(journal(acked))  # acknowledged before the failover, at the latest now
        standby.promote()

        def done() -> bool:
            runs = patiently(lambda: client.client.runs(limit=RUNS + 1).runs)
            return len(runs) == RUNS and all(r.status is RunStatus.COMPLETED for r in runs)

        log = tmp_path / "worker-0.log"
        wait_until("every run completed on the promoted server", done, log, timeout=120)
        expected = sum(range(STEPS))
        for run_id in ids:
            assert client.handle(run_id).result(timeout=0) == expected
            history = client.client.history(run_id)
            completed = [e.position for e in history if e.kind is EventKind.STEP_COMPLETED]
            assert sorted(completed) == list(range(STEPS)), (run_id, completed)
        # every checkpoint a step saw acknowledged survived the loss of the primary
        for line in seen:
            run_id, position = line.split()
            history = client.client.history(run_id)
            assert any(
                e.kind is EventKind.STEP_COMPLETED and e.position == int(position) for e in history
            ), f"{run_id}: the acknowledged checkpoint of step {position} was lost"
        assert len(seen) >= RUNS  # the failover landed in the middle of the work
        assert any(len([ln for ln in seen if ln.startswith(r)]) < STEPS - 1 for r in ids)
        for process in processes:
            assert process.poll() is None  # the workers rode it out
    finally:
        client.close()
