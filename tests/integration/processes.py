"""Real `durably worker` processes for the integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

import durably
from durably.core.history import EventKind
from durably.errors import StoreUnavailable

__all__ = ["kill", "patiently", "processes", "start_worker", "wait_for_step_start", "wait_until"]

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")
TARGET = "tests.integration.stop_app:app"


def start_worker(
    store_url: str,
    log: Path,
    *options: str,
    target: str = TARGET,
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """A `durably worker` process; `prefix`: a command it runs under (`ip netns exec NS`)."""
    env = {**os.environ, "DURABLY_STORE": store_url}
    env.pop("DURABLY_TEST_POSTGRES", None)
    command = [sys.executable, "-m", "durably", "worker", target, "--concurrency", "4"]
    with log.open("wb") as out:
        return subprocess.Popen(
            [*prefix, *command, *options],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_until(what: str, done: Callable[[], bool], log: Path, timeout: float = 30) -> None:
    """Poll `done` until it is true; fail with the worker's log if `timeout` passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.02)
    pytest.fail(f"{what} did not happen within {timeout}s:\n{log.read_text()}")


def patiently(call: Callable[[], T], deadline: float = 60.0) -> T:
    """A caller's retry of a store call while the store is unavailable (a faulty network, a
    failover): what a client does; signals (with a dedupe key), cancels and reads are safe
    to repeat."""
    give_up = time.monotonic() + deadline
    while True:
        try:
            return call()
        except StoreUnavailable:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.05)


def kill(worker: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker process and reap it."""
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()


def wait_for_step_start(
    client: durably.App, run_id: str, worker: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if EventKind.STEP_STARTED in {event.kind for event in client.client.history(run_id)}:
            return
        if worker.poll() is not None:
            pytest.fail(f"the worker exited with {worker.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"the worker never started the step:\n{log.read_text()}")


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()
