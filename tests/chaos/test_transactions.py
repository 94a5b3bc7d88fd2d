"""Transactional steps with real worker processes, on both stores: the app's own row and the
step's outcome are durable together or not at all. A worker that dies just before the
transaction commits leaves neither (the next worker books once); one that dies just after
leaves both (the next worker does not book again); one SIGKILLed in the middle of the body
leaves neither, and its store is not left locked.

What the steps did is journalled to a file by the worker (tests.chaos.ledger_app).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.history import EventKind
from tests.chaos.control_app import journal, write
from tests.chaos.ledger_app import CREATE_LEDGER, NAME, build
from tests.integration.conftest import execute_sql
from tests.integration.processes import REPO, kill, start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.ledger_app:app"
WAIT = 30.0  # seconds: generous; nothing here is timed


def booked(store_url: str) -> list[str]:
    if store_url.startswith("sqlite"):
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as db:
            return [row[0] for row in db.execute("SELECT id FROM ledger")]
    import psycopg

    with psycopg.connect(store_url) as db:
        return [row[0] for row in db.execute("SELECT id FROM ledger")]


def completed(client: durably.App, run_id: str) -> list[str | None]:
    return [e.name for e in client.client.history(run_id) if e.kind is EventKind.STEP_COMPLETED]


def lines(path: Path, what: str) -> list[str]:
    return [line for line in journal(path) if line.split()[0] == what]


@pytest.fixture
def client(store_url: str) -> durably.App:
    app = build(durably.App(store_url))
    app.store  # noqa: B018  (durably's tables first, the app's own beside them)
    execute_sql(store_url, CREATE_LEDGER)
    return app


def crash_at_commit(store_url: str, when: str) -> None:
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.chaos.ledger_app", store_url, when],
        cwd=REPO,
        capture_output=True,
        timeout=60,
    )
    assert crashed.returncode == 137, crashed.stderr.decode()[-2000:]


def test_a_worker_that_dies_just_before_the_commit_leaves_no_row_and_no_outcome(
    client: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    try:
        handle = client.start("booking", "e-1", str(effects), id="b-1")
        crash_at_commit(store_url, "before")
        assert lines(effects, "book") == ["book b-1:0:book"]  # the body ran
        assert booked(store_url) == []  # and its row died with its transaction
        assert completed(client, "b-1") == []
        assert EventKind.STEP_STARTED not in {e.kind for e in client.client.history("b-1")}

        processes.append(start_worker(store_url, log, "--name", NAME, target=TARGET))
        assert handle.result(timeout=WAIT) == ["booked e-1", "told e-1"]
        assert booked(store_url) == ["e-1"]
        assert completed(client, "b-1") == ["book", "notify"]
        assert lines(effects, "book") == ["book b-1:0:book"] * 2  # run again, booked once
    finally:
        client.close()


def test_a_worker_that_dies_just_after_the_commit_leaves_the_row_and_the_outcome(
    client: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    try:
        handle = client.start("booking", "e-2", str(effects), id="b-2")
        crash_at_commit(store_url, "after")
        assert booked(store_url) == ["e-2"]
        assert completed(client, "b-2") == ["book"]
        assert client.client.get("b-2").status is RunStatus.RUNNING  # leased to the dead worker

        processes.append(start_worker(store_url, log, "--name", NAME, target=TARGET))
        assert handle.result(timeout=WAIT) == ["booked e-2", "told e-2"]
        assert booked(store_url) == ["e-2"]
        assert lines(effects, "book") == ["book b-2:0:book"]  # never run again
        assert lines(effects, "notify") == ["notify b-2:1:notify"]
    finally:
        client.close()


def test_a_worker_killed_in_the_middle_of_the_body_leaves_nothing_and_no_lock(
    client: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    effects = tmp_path / "effects.txt"
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    write(str(effects), "linger")  # the first attempt waits after its insert
    try:
        handle = client.start("booking", "e-3", str(effects), id="b-3")
        processes.append(start_worker(store_url, first, "--name", NAME, target=TARGET))
        wait_until("the body lingering", lambda: "lingering" in journal(effects), first)
        kill(processes[0])
        assert booked(store_url) == []
        assert completed(client, "b-3") == []

        processes.append(start_worker(store_url, second, "--name", NAME, target=TARGET))
        assert handle.result(timeout=WAIT) == ["booked e-3", "told e-3"]
        assert booked(store_url) == ["e-3"]
        assert completed(client, "b-3") == ["book", "notify"]
        assert lines(effects, "book") == ["book b-3:0:book"] * 2
    finally:
        client.close()
