"""A bulk cancel survives its CLI killed half-way, on both stores: `durably runs cancel
--workflow ... --yes` runs as a real process over 1,000 waiting runs (200 in the quick run),
is SIGKILLed once its job has acted on some of them (read from the store), and is run again:
the same command resumes the same job, and every run is cancelled exactly once: one cancel
in its history, one audit entry naming the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.client.starts import Start
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import MessageReceived
from durably.stores import open_store
from tests.integration.cli_app import make_app
from tests.integration.processes import REPO, wait_until

pytestmark = pytest.mark.chaos

WORKFLOW = "await_approval"  # each waits for a signal: pending until it is cancelled


def cancel_in_bulk(store_url: str, log: Path) -> subprocess.Popen[bytes]:
    """The CLI, as a person runs it, on the store: a process of its own."""
    env = {k: v for k, v in os.environ.items() if k not in ("DURABLY_STORE", "CLI_APP_STORE")}
    command = [sys.executable, "-m", "durably", "runs", "cancel", "--workflow", WORKFLOW]
    command += ["--store", store_url, "--yes", "--by", "ops"]
    with log.open("ab") as out:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("runs", [200, pytest.param(1000, marks=pytest.mark.slow)])
def test_a_bulk_cancel_killed_half_way_is_resumed_and_cancels_each_run_once(
    store_url: str, tmp_path: Path, runs: int
) -> None:
    app = make_app(store_url)
    ids = [f"o-{n:04d}" for n in range(runs)]
    app.client.start_many([Start(WORKFLOW, (run_id,), id=run_id) for run_id in ids])
    app.run_until_idle()  # each run now waits for its signal
    watcher, log = open_store(store_url), tmp_path / "cli.log"
    try:
        first = cancel_in_bulk(store_url, log)

        def under_way() -> bool:
            jobs = watcher.bulk_jobs(limit=1)
            return bool(jobs) and jobs[0].acted >= 1

        wait_until("the bulk job acted on a run", under_way, log)
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        [killed] = watcher.bulk_jobs(limit=10)
        assert 1 <= killed.acted < runs, f"the CLI was killed too late: {killed}"
        assert not killed.finished

        second = cancel_in_bulk(store_url, log)
        assert second.wait(timeout=120) == 0, log.read_text()
        said = log.read_text()
        assert f"resuming bulk job {killed.id} where it stopped" in said
        [job] = watcher.bulk_jobs(limit=10)  # the same job, not a second one
        assert (job.id, job.total, job.acted, job.skipped, job.finished) == (
            killed.id,
            runs,
            runs,
            0,
            True,
        )

        app.run_until_idle()  # a worker folds each cancel in, and the runs end cancelled
        assert_cancelled_once(app, ids, job.id)
    finally:
        watcher.close()
        app.close()


def assert_cancelled_once(app: durably.App, ids: list[str], job_id: str) -> None:
    histories = app.store.histories(ids)
    for run_id in ids:
        received = [
            read_payload(event, MessageReceived)
            for event in histories[run_id]
            if event.kind is EventKind.MESSAGE_RECEIVED
        ]
        assert [(m.kind, m.sender) for m in received] == [("cancel", "ops")], run_id
        assert histories[run_id][-1].kind is EventKind.RUN_CANCELLED, run_id
    statuses = Counter(run.status for run in app.client.runs(limit=len(ids) + 1).runs)
    assert statuses == {RunStatus.CANCELLED: len(ids)}
    entries = app.store.audit_trail(limit=2 * len(ids), by="ops")
    assert Counter(e.run_id for e in entries) == dict.fromkeys(ids, 1)
    assert {(e.action, e.via, json.loads(e.detail or "{}")["job"]) for e in entries} == {
        ("cancel", "cli", job_id)
    }
