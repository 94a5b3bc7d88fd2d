"""Waits with real worker processes and real SIGKILLs, on both stores: a timer that comes due
while every worker is down, signals sent while the run's worker is being killed, and an
approval that times out with nobody answering and no worker running at its timeout, and a
long step whose worker dies: the next attempt resumes from its last recorded heartbeat."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.core.event_data import read_payload
from durably.core.history import EventKind
from durably.core.payloads import SignalReceived
from tests.chaos.waits_app import build
from tests.integration.processes import kill, start_worker, wait_until

pytestmark = pytest.mark.chaos

TARGET = "tests.chaos.waits_app:app"


def test_a_timer_due_while_every_worker_is_down_fires_when_one_starts(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    log = tmp_path / "worker.log"
    try:
        handle = client.start("nap", 1.0, id="nap-1")
        processes.append(start_worker(store_url, log, target=TARGET))
        wait_until(
            "the timer was set",
            lambda: any(e.kind is EventKind.TIMER_SET for e in client.client.history("nap-1")),
            log,
        )
        kill(processes[0])  # the only worker dies while the run sleeps
        time.sleep(1.5)  # the timer comes due with nobody to run it
        run = client.client.get("nap-1")
        assert run.status is RunStatus.PENDING
        assert run.lease_owner is None  # it held no worker while it slept

        processes.append(start_worker(store_url, tmp_path / "second.log", target=TARGET))
        assert handle.result(timeout=30) == "woke"
        fired = [e for e in client.client.history("nap-1") if e.kind is EventKind.TIMER_FIRED]
        assert len(fired) == 1
    finally:
        client.close()


def test_signals_sent_while_the_worker_is_killed_arrive_once_each_in_order(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    count = 30
    client = build(durably.App(store_url))
    options = ("--name", "signal-worker", "--poll", "50ms")  # a restart recovers at once
    try:
        handle = client.start("collect", count, id="c-1")
        processes.append(start_worker(store_url, tmp_path / "w0.log", *options, target=TARGET))
        kills = 0
        for item in range(count):
            client.client.signal("c-1", "item", item, by="sender")
            if item in (7, 15, 23):  # kill the worker right after a signal, and replace it
                kill(processes[-1])
                kills += 1
                log = tmp_path / f"w{kills}.log"
                processes.append(start_worker(store_url, log, *options, target=TARGET))
            time.sleep(0.01)
        assert handle.result(timeout=60) == list(range(count))  # none lost, none twice

        taken = [
            read_payload(e, SignalReceived).message
            for e in client.client.history("c-1")
            if e.kind is EventKind.SIGNAL_RECEIVED
        ]
        assert len(taken) == count
        assert len(set(taken)) == count  # each message taken by exactly one wait
    finally:
        client.close()


def test_an_approval_nobody_answers_times_out_by_itself_across_worker_deaths(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    log = tmp_path / "worker.log"
    try:
        handle = client.start("refund", 40, id="refund-1")
        processes.append(start_worker(store_url, log, target=TARGET))
        wait_until(
            "the approval was requested",
            lambda: client.client.get("refund-1").status is RunStatus.NEEDS_ATTENTION,
            log,
        )
        [pending] = client.client.approvals()
        assert (pending.run_id, pending.name, pending.details) == ("refund-1", "refund", "40")
        kill(processes[0])  # nobody answers, and the worker dies while it waits
        time.sleep(1.5)  # the timeout passes with no worker running
        assert client.client.get("refund-1").status is RunStatus.NEEDS_ATTENTION

        processes.append(start_worker(store_url, tmp_path / "second.log", target=TARGET))
        assert handle.result(timeout=30) == "rejected by durably (timeout)"
        history = client.client.history("refund-1")
        assert [e.kind for e in history].count(EventKind.APPROVAL_DECIDED) == 1
        asked = [e for e in history if e.kind is EventKind.STEP_COMPLETED]
        assert [e.name for e in asked] == ["ask_manager"]  # the request went out once
        assert client.client.approvals() == []
    finally:
        client.close()


@pytest.mark.slow
def test_a_long_step_resumes_from_its_last_heartbeat_after_its_worker_dies(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    client = build(durably.App(store_url))
    options = ("--name", "export-worker")  # a restart under its name recovers its runs at once
    log = tmp_path / "first.log"
    try:
        handle = client.start("nightly_export", 40, id="export-1")
        processes.append(start_worker(store_url, log, *options, target=TARGET))

        def progress() -> list[int]:
            return [
                json.loads(e.data or "{}")["done"]
                for e in client.client.history("export-1")
                if e.kind is EventKind.STEP_HEARTBEAT
            ]

        wait_until(
            "a heartbeat past the start was recorded", lambda: max(progress(), default=0) > 0, log
        )
        kill(processes[0])  # mid-step: its attempt has no outcome
        recorded = max(progress())
        processes.append(start_worker(store_url, tmp_path / "second.log", *options, target=TARGET))
        result = handle.result(timeout=60)
        assert result == {"resumed_from": recorded, "chunks": 40}  # not from 0
    finally:
        client.close()
