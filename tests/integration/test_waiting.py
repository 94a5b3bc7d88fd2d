"""Waiting for a result without polling: a slow poll behind the store's word that a run ended,
for a notification that is lost; timeouts that name the status; one listener shared by many
handles. (Hearing a worker process end a run: tests/chaos/test_results_heard.py.)"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import durably
from durably import RunStatus
from durably.stores import Store
from durably.stores.sqlite.wakeups import LocalWakeups
from durably.testing import FakeClock

from .stop_app import make_app

POLL = "60s"  # the handles' fallback poll: far longer than any bound below
HEARD_WITHIN = 15.0  # seconds; well before the fallback poll would read the run again


@pytest.fixture
def client(store_url: str) -> Iterator[durably.App]:
    opened = make_app(store_url)
    yield opened
    opened.close()


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
        # the listener is started by the first to subscribe, which may still be connecting
        wait_until(lambda: listener_started(app) and listeners(app, store_url) > before)
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
    wait_until(lambda: listeners(app, store_url) == before)  # its connection's end is heard late


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


def listener_started(app: durably.App) -> bool:
    return app.client._finishes._stop is not None


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
