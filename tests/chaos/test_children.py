"""Child workflows with real worker processes, on both stores: a child exists exactly when its
parent's history says it was started. A worker that dies at the commit that would start it
leaves neither the start nor the child, and the next starts it once; one killed with SIGKILL
just after leaves both, and the next finds the start and waits for that child: never two.

What the steps did is journalled to a file by the worker (tests.chaos.family_app).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.children import started_children
from durably.core.history import EventKind
from tests.chaos.control_app import journal
from tests.chaos.family_app import NAME, build
from tests.integration.processes import REPO, kill, start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.family_app:app"
WAIT = 30.0  # seconds: generous; nothing here is timed


def words(path: Path, what: str) -> list[list[str]]:
    return [line.split() for line in journal(path) if line.split()[0] == what]


def children_of(client: durably.App, run_id: str) -> list[str]:
    return [run.id for run in client.client.runs(workflow="kid").runs if run.parent == run_id]


def test_a_worker_that_dies_at_the_commit_that_starts_a_child_leaves_no_child(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    effects, log = tmp_path / "effects.txt", tmp_path / "worker.log"
    try:
        handle = client.start("family", str(effects), id="f-1")
        crashed = subprocess.run(
            [sys.executable, "-m", "tests.chaos.family_app", store_url, "crash"],
            cwd=REPO,
            capture_output=True,
            timeout=60,
        )
        assert crashed.returncode == 137, crashed.stderr.decode()[-2000:]
        history = client.client.history("f-1")
        assert [e.name for e in history if e.kind is EventKind.STEP_STARTED] == ["note"]
        assert started_children(history) == []  # neither the start nor the child
        assert children_of(client, "f-1") == []

        processes.append(start_worker(store_url, log, "--name", NAME, target=TARGET))
        assert handle.result(timeout=WAIT) == "kid says kid"
        assert children_of(client, "f-1") == ["f-1.1.kid"]
        assert words(effects, "kid") == [["kid", "f-1.1.kid:0:note"]]
    finally:
        client.close()


def test_a_worker_killed_just_after_starting_a_child_leaves_one_child_to_the_next(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    effects = tmp_path / "effects.txt"
    options = ("--name", NAME)  # a restart under its name recovers its runs at once
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    try:
        handle = client.start("family", str(effects), id="f-2")
        processes.append(start_worker(store_url, first, *options, target=TARGET))
        # linger starts in the commit that started the child: the child exists by now
        wait_until("linger started", lambda: bool(words(effects, "linger")), first)
        kill(processes[0])
        assert children_of(client, "f-2") == ["f-2.1.kid"]
        assert client.client.get("f-2").status is RunStatus.RUNNING  # leased to the dead worker

        processes.append(start_worker(store_url, second, *options, target=TARGET))
        assert handle.result(timeout=WAIT) == "kid says kid"
        assert children_of(client, "f-2") == ["f-2.1.kid"]  # the replay found the start
        assert [c.run for c in started_children(client.client.history("f-2"))] == ["f-2.1.kid"]
        assert len(words(effects, "linger")) == 2  # the lost attempt, then the next
        assert client.client.get("f-2.1.kid").status is RunStatus.COMPLETED
    finally:
        client.close()
