"""Waiting for a result without polling: a handle hears that its run ended from the store
(LISTEN/NOTIFY on PostgreSQL, a local socket on SQLite), from threads and from an event loop,
with a slow poll behind it for a notification that is lost.

The worker processes here poll once a minute and the handles read their run again only every
POLL (60 s), so a result that arrives within the test's bound was heard, not polled for."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import durably
from durably import RunStatus
from durably.stores import Store
from durably.stores.sqlite.wakeups import LocalWakeups
from durably.testing import FakeClock

from .processes import start_worker, wait_for_step_start
from .stop_app import make_app

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


def test_a_lost_notification_is_caught_by_the_fallback_poll(
    store_url: str, clock: FakeClock
) -> None:
    """A client deaf to the store's word (as if every notification were lost) still gets
    the result, at its next poll."""
    deaf = durably.App(store_url, clock=clock)
    worker_app = durably.App(store_url, clock=clock)
    for app in (deaf, worker_app):
        register_double(app)
    subscribed = threading.Event()

    def never_hears(wake: Callable[[str | None], None]) -> Callable[[], None]:
        subscribed.set()  # the handle read the run, saw it pending, and now waits
        return lambda: None

    store: Store = deaf.store
    store.watch_finished = never_hears  # type: ignore[method-assign]
    handle = deaf.start("double", 21)
    answers: list[object] = []
    waiter = threading.Thread(target=lambda: answers.append(handle.result("20s", poll="200ms")))
    waiter.start()
    try:
        assert subscribed.wait(20)
        assert worker_app.run_until_idle() == 1
        waiter.join(timeout=25)
        assert answers == [42]
    finally:
        waiter.join(timeout=25)
        deaf.close()
        worker_app.close()


def test_waiting_times_out_naming_the_status_sync_and_async(app: durably.App) -> None:
    handle = app.start(register_double(app), 1)

    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"run '.*' is still pending after 300ms"):
        handle.result(timeout="300ms", poll=POLL)
    assert 0.3 <= time.monotonic() - began < 10  # its timeout, not the poll, ended it
    with pytest.raises(TimeoutError, match=r"is still pending after 200ms"):
        asyncio.run(handle.result_async(timeout="200ms", poll=POLL))
    with pytest.raises(TimeoutError, match=r"is still pending after 0s"):
        asyncio.run(handle.result_async(timeout=0))


def test_result_async_of_a_failed_run_raises_workflow_failed(app: durably.App) -> None:
    @app.workflow
    async def broken(x: int) -> int:
        raise LookupError(f"no such thing: {x}")

    handle = app.start(broken, 7, id="broken-1")
    app.run_until_idle()

    with pytest.raises(durably.WorkflowFailed, match=r"LookupError: no such thing: 7"):
        asyncio.run(handle.result_async(timeout="5s"))
    assert asyncio.run(handle.status_async()) is RunStatus.FAILED


def test_many_waiting_handles_share_one_listener_that_stops_with_the_app(
    app: durably.App, other_app: durably.App, store_url: str
) -> None:
    register_double(app)
    register_double(other_app)
    before = listeners(app, store_url)
    handles = [app.start("double", n) for n in range(5)]
    answers: dict[str, object] = {}

    def wait(handle: durably.RunHandle) -> None:
        answers[handle.id] = handle.result(timeout="50s", poll=POLL)

    waiters = [threading.Thread(target=wait, args=(handle,)) for handle in handles]
    for waiter in waiters:
        waiter.start()
    try:
        wait_until(lambda: waiting_runs(app) == 5)
        assert listeners(app, store_url) == before + 1

        began = time.monotonic()
        assert other_app.run_until_idle() == 5  # another app: no in-process shortcut
        for waiter in waiters:
            waiter.join(timeout=HEARD_WITHIN)
        assert time.monotonic() - began < HEARD_WITHIN
        assert answers == {handle.id: 2 * n for n, handle in enumerate(handles)}
    finally:
        for waiter in waiters:
            waiter.join(timeout=60)
    app.close()
    assert listeners(app, store_url) == before


# -- helpers ------------------------------------------------------------------------------


def register_double(app: durably.App) -> durably.Workflow:
    @app.step
    async def twice(x: int) -> int:
        return 2 * x

    @app.workflow
    async def double(x: int) -> int:
        return await twice(x)

    return double


def waiting_runs(app: durably.App) -> int:
    return len(app.client._finishes._waiting)


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, "never came true"
        time.sleep(0.01)


def listeners(app: durably.App, store_url: str) -> int:
    """How many listeners for ended runs this process has on the store: sockets on SQLite,
    LISTEN connections on PostgreSQL."""
    if store_url.startswith("sqlite:///"):
        directory = LocalWakeups(store_url.removeprefix("sqlite:///"), "done").directory
        return len(os.listdir(directory)) if directory.exists() else 0
    import psycopg

    with psycopg.connect(store_url, autocommit=True) as db:
        row = db.execute(  # this process's only: other test runs may share the server
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (f"durably_done pid {os.getpid()}",),
        ).fetchone()
    assert row is not None
    return int(row[0])
