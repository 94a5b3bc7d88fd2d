"""Waiting for a result without polling, with a real worker process on both stores: a handle
hears that its run ended from the store (LISTEN/NOTIFY on PostgreSQL, a local socket on
SQLite), from a thread and from an event loop.

The worker processes here poll once a minute and the handles read their run again only every
POLL (60 s), so a result that arrives within the test's bound was heard, not polled for."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from tests.integration.processes import start_worker, wait_for_step_start
from tests.integration.stop_app import make_app

pytestmark = pytest.mark.chaos

POLL = "60s"  # the handles' fallback poll: far longer than any bound below
HEARD_WITHIN = 15.0  # seconds; well before the fallback poll would read the run again


@pytest.fixture
def client(store_url: str) -> Iterator[durably.App]:
    opened = make_app(store_url)
    yield opened
    opened.close()


def running_in_a_worker_process(
    client: durably.App,
    store_url: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
    seconds: float,
) -> durably.RunHandle:
    """A run whose one step sleeps `seconds` in a real `durably worker`, started already."""
    log = tmp_path / "worker.log"
    worker = start_worker(store_url, log, "--poll", "60s")
    processes.append(worker)
    handle = client.start("sleepy", seconds)
    wait_for_step_start(client, handle.id, worker, log)
    assert handle.status() is RunStatus.RUNNING  # so the waits below begin before the end
    return handle


def test_a_handle_waiting_in_a_thread_hears_a_worker_process_end_the_run(
    client: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    handle = running_in_a_worker_process(client, store_url, tmp_path, processes, 1.0)
    answers: list[object] = []

    def wait() -> None:
        began = time.monotonic()
        answers.append(handle.result(timeout="50s", poll=POLL))
        answers.append(time.monotonic() - began)

    waiter = threading.Thread(target=wait)
    waiter.start()
    waiter.join(timeout=55)

    assert answers[0] == "slept 1.0s", (tmp_path / "worker.log").read_text()
    assert isinstance(answers[1], float)
    assert answers[1] < HEARD_WITHIN  # heard: the next read was a minute away


def test_result_async_hears_the_end_without_blocking_the_loop(
    client: durably.App, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    handle = running_in_a_worker_process(client, store_url, tmp_path, processes, 1.0)

    async def main() -> tuple[object, float, int]:
        ticks = 0
        done = asyncio.Event()

        async def tick() -> None:  # runs only while the loop is free
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        began = time.monotonic()
        try:
            answer = await handle.result_async(timeout="50s", poll=POLL)
        finally:
            done.set()
            await ticker
        return answer, time.monotonic() - began, ticks

    answer, elapsed, ticks = asyncio.run(main())

    assert answer == "slept 1.0s", (tmp_path / "worker.log").read_text()
    assert elapsed < HEARD_WITHIN
    assert ticks >= 10  # the loop went on while the handle waited (about 100 in a second)
