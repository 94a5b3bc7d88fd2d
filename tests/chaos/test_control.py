"""Cancel and pause with real worker processes, on both stores: the test process steers a run
that a `durably worker` process is running. A cancel reaches the async step in flight over
there and the run is undone; a worker killed with SIGKILL in the middle of that undo leaves it
to the next worker, which runs it again with the same idempotency key; a pause lets the step
in flight finish and stops the run before its next step, until a resume.

What the steps and undos did is journalled to a file by the worker (tests.chaos.control_app).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.event_data import read_payload
from durably.core.history import Event, EventKind
from durably.core.payloads import CompensationStarted, StepFailed
from durably.errors import WorkflowFailed
from tests.chaos.control_app import build, journal
from tests.integration.processes import kill, start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.control_app:app"
WAIT = 30.0  # seconds: generous; nothing here is timed


def events(client: durably.App, run_id: str, kind: EventKind) -> list[Event]:
    return [event for event in client.client.history(run_id) if event.kind is kind]


def started(client: durably.App, run_id: str, name: str) -> bool:
    return any(e.name == name for e in events(client, run_id, EventKind.STEP_STARTED))


def lines(path: Path, what: str) -> list[list[str]]:
    """The journal's lines that begin with `what`, split into words."""
    return [line.split() for line in journal(path) if line.split()[0] == what]


def test_a_cancel_reaches_the_step_running_in_another_process(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    log, effects = tmp_path / "worker.log", tmp_path / "effects.txt"
    try:
        handle = client.start("order", "lamp", str(effects), id="o-1")
        processes.append(start_worker(store_url, log, target=TARGET))
        wait_until("charge started", lambda: bool(lines(effects, "charge")), log)

        steered = client.client.cancel("o-1", reason="customer left", by="ops")
        assert (steered.changed, steered.status) == (True, RunStatus.RUNNING)
        with pytest.raises(WorkflowFailed, match="RunCancelled: cancelled by ops: customer left"):
            handle.result(timeout=WAIT)

        assert client.client.get("o-1").status is RunStatus.CANCELLED
        assert lines(effects, "charge-cancelled") == [["charge-cancelled", "o-1:1:charge"]]
        # the completed step was undone once, with its key and its recorded result
        assert lines(effects, "release") == [["release", "o-1:0:reserve:undo", "hold-lamp"]]
        assert lines(effects, "reserve") == [["reserve", "o-1:0:reserve"]]
        assert lines(effects, "ship") == []
        [failed] = events(client, "o-1", EventKind.STEP_FAILED)
        payload = read_payload(failed, StepFailed)
        assert (failed.name, payload.reason) == ("charge", "cancelled")
        assert payload.error.error_class == "durably.errors.RunCancelled"
        assert len(events(client, "o-1", EventKind.COMPENSATION_COMPLETED)) == 1
        assert client.client.history("o-1")[-1].kind is EventKind.RUN_CANCELLED
        assert processes[0].poll() is None  # the worker goes on, unharmed
    finally:
        client.close()


@pytest.mark.slow
def test_a_worker_killed_while_undoing_a_cancelled_run_leaves_the_undo_to_the_next(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    effects = tmp_path / "effects.txt"
    options = ("--name", "undo-worker")  # a restart under its name recovers its runs at once
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    try:
        handle = client.start("slow_undo", "room", str(effects), id="u-1")
        processes.append(start_worker(store_url, first, *options, target=TARGET))
        wait_until("hang started", lambda: bool(lines(effects, "hang")), first)
        assert client.client.cancel("u-1", by="ops").changed

        def undoing() -> bool:
            return bool(events(client, "u-1", EventKind.COMPENSATION_STARTED)) and bool(
                lines(effects, "unbook-started")
            )

        wait_until("the undo started", undoing, first)
        kill(processes[0])  # in the middle of the undo (it takes a while)
        assert lines(effects, "unbook-done") == []
        assert client.client.get("u-1").status is RunStatus.RUNNING  # still leased to the dead

        processes.append(start_worker(store_url, second, *options, target=TARGET))
        with pytest.raises(WorkflowFailed, match="RunCancelled: cancelled by ops"):
            handle.result(timeout=WAIT)

        assert client.client.get("u-1").status is RunStatus.CANCELLED
        key = "u-1:0:book:undo"
        # tried again by the next worker, with the same idempotency key; done once
        assert lines(effects, "unbook-started") == [["unbook-started", key, "booking-room"]] * 2
        assert lines(effects, "unbook-done") == [["unbook-done", key, "booking-room"]]
        undos = events(client, "u-1", EventKind.COMPENSATION_STARTED)
        assert len(undos) == 2
        assert {read_payload(e, CompensationStarted).key for e in undos} == {key}
        [done] = events(client, "u-1", EventKind.COMPENSATION_COMPLETED)
        assert (done.position, done.name) == (0, "book")
        assert len(events(client, "u-1", EventKind.COMPENSATING)) == 1
        assert lines(effects, "book") == [["book", "u-1:0:book"]]  # not run again
        assert client.client.history("u-1")[-1].kind is EventKind.RUN_CANCELLED
    finally:
        client.close()


@pytest.mark.slow
def test_a_pause_lets_the_step_running_in_another_process_finish_then_stops(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    log, effects = tmp_path / "worker.log", tmp_path / "effects.txt"
    try:
        handle = client.start("two_steps", "x", str(effects), id="p-1")
        processes.append(start_worker(store_url, log, target=TARGET))
        wait_until("slow started", lambda: bool(lines(effects, "slow")), log)

        steered = client.client.pause("p-1", reason="look first", by="ops")
        assert (steered.changed, steered.status) == (True, RunStatus.RUNNING)
        wait_until(
            "the run was paused",
            lambda: client.client.get("p-1").status is RunStatus.PAUSED,
            log,
        )
        assert lines(effects, "slow-done") == [["slow-done", "p-1:0:slow"]]
        [completed] = events(client, "p-1", EventKind.STEP_COMPLETED)
        assert (completed.name, completed.data) == ("slow", '"slow x"')
        assert not started(client, "p-1", "after")
        assert lines(effects, "after") == []
        assert len(events(client, "p-1", EventKind.RUN_PAUSED)) == 1
        assert [run.id for run in client.client.runs(status=RunStatus.PAUSED).runs] == ["p-1"]
        time.sleep(1.5)  # the worker, still up, leaves it alone
        assert client.client.get("p-1").status is RunStatus.PAUSED
        assert lines(effects, "after") == []

        resumed = client.client.resume("p-1", by="ops")
        assert (resumed.changed, resumed.status) == (True, RunStatus.PAUSED)
        assert handle.result(timeout=WAIT) == "after x"
        assert lines(effects, "slow") == [["slow", "p-1:0:slow"]]  # not run again
        assert lines(effects, "after") == [["after", "p-1:1:after"]]
    finally:
        client.close()
