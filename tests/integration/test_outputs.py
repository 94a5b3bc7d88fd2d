"""What runs publish, end to end through the engine: durably.set_event / progress /
write_stream / close_stream from workflow code and from steps, read by callers with
handle.get_event / events / progress / read_stream. On both stores; the waits are real (a
worker in a thread, a caller woken by the store)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import durably
from durably import Retry, RunStatus
from durably.core.history import EventKind
from durably.core.outputs import Progress
from durably.errors import ConfigError, EventNotSet, NotInWorkflow, PayloadError
from durably.testing import FakeClock

from .conftest import events, settle

NO_WAIT = Retry(attempts=3, initial="0s", jitter="none")
WAIT = 20.0  # seconds a real wait may take before the test gives up


def test_events_set_by_workflow_code_are_recorded_once_whatever_the_replays(
    app: durably.App, clock: FakeClock
) -> None:
    @app.workflow
    async def order() -> str:
        durably.set_event("status", "reserved")
        await durably.sleep("1h")  # handed back: the next worker replays from the top
        durably.set_event("status", "shipped")
        await durably.sleep("1h")
        return "done"

    handle = app.start(order, id="o-1")
    app.run_until_idle()
    assert handle.get_event("status", timeout=0) == "reserved"
    settle(app, clock)

    assert handle.result(timeout=0) == "done"
    assert handle.get_event("status", timeout=0) == "shipped"
    sets = [(e.name, e.data, e.position) for e in events(app, "o-1", EventKind.EVENT_SET)]
    assert sets == [("status", '"reserved"', None), ("status", '"shipped"', None)]


def test_adding_an_event_to_a_workflow_does_not_strand_runs_in_flight(
    app: durably.App, other_app: durably.App, clock: FakeClock
) -> None:
    @app.workflow(name="invoice", version="7")  # both deploys say they follow one history
    async def before() -> int:
        await durably.sleep("1h")
        return 1

    handle = app.start(before, id="i-1")
    app.run_until_idle()  # waits on its timer, recorded by the code without events

    @other_app.workflow(name="invoice", version="7")  # code must follow the run's history
    async def after() -> int:  # the new deploy reports progress before the timer
        durably.progress(0, 1, "waiting for the hour")
        await durably.sleep("1h")
        durably.progress(1, 1, "sent")
        return 1

    settle(other_app, clock)
    assert handle.result(timeout=0) == 1
    assert other_app.client.get("i-1").status is RunStatus.COMPLETED
    assert handle_of(other_app, "i-1").progress() == Progress(1, 1, "sent")


def handle_of(app: durably.App, run_id: str) -> durably.RunHandle:
    return durably.RunHandle(app.client, run_id)


def test_a_retried_step_does_not_repeat_the_items_its_last_attempt_wrote(
    app: durably.App,
) -> None:
    attempts: list[int] = []

    @app.step(retry=NO_WAIT)
    async def generate(prompt: str) -> int:
        attempts.append(len(attempts) + 1)
        words = ["a", "b", "c"] if len(attempts) == 1 else ["A", "B", "C", "D", "E"]
        for word in words:
            durably.write_stream("tokens", word)
        if len(attempts) == 1:
            await asyncio.sleep(0)  # the items go to the store before the failure
            raise ConnectionError("the model's connection dropped")
        return len(words)

    @app.workflow
    async def answer(prompt: str) -> int:
        written = await generate(prompt)
        durably.close_stream("tokens")
        return written  # type: ignore[no-any-return]

    handle = app.start(answer, "hello", id="a-1")
    app.run_until_idle()

    assert handle.result(timeout=0) == 5
    items = list(handle.stream_items("tokens", timeout=0))
    assert [(item.value, item.attempt) for item in items] == [
        ('"a"', 1),
        ('"b"', 1),
        ('"c"', 1),
        ('"D"', 2),
        ('"E"', 2),
    ]
    assert list(handle.read_stream("tokens", offset=3)) == ["D", "E"]


def test_a_steps_progress_shows_while_the_step_runs(
    app: durably.App, release: threading.Event
) -> None:
    copied = threading.Event()

    @app.step
    def copy_files(count: int) -> int:  # a sync step: its calls hop to the loop
        for done in range(1, count + 1):
            durably.progress(done, count, "files copied")
            durably.write_stream("copied", f"file-{done}")
        copied.set()
        release.wait(WAIT)
        return count

    @app.workflow
    async def nightly() -> int:
        return await copy_files(3)  # type: ignore[no-any-return]

    handle = app.start(nightly, id="n-1")
    worker = threading.Thread(target=app.run_until_idle, daemon=True)
    worker.start()
    try:
        assert copied.wait(WAIT)
        reading = handle.stream_items("copied", timeout=WAIT)
        assert [next(reading).value for _ in range(3)] == ['"file-1"', '"file-2"', '"file-3"']
        progress: Progress | None = None
        for _ in range(200):  # committed soon after it is set: the step is still running
            progress = handle.progress()
            if progress == Progress(3, 3, "files copied"):
                break
            threading.Event().wait(0.02)
        assert progress == Progress(3, 3, "files copied")
        assert handle.status() is RunStatus.RUNNING
        assert progress.bar(10) == "[##########] 3/3 files copied"
    finally:
        release.set()
        worker.join(WAIT)
    assert handle.result(timeout=0) == 3
    assert list(handle.read_stream("copied", timeout=0)) == ["file-1", "file-2", "file-3"]


def test_a_caller_waiting_for_an_event_is_woken_when_it_is_set(
    app: durably.App, release: threading.Event
) -> None:
    @app.step
    def wait_for_the_test() -> None:
        release.wait(WAIT)

    @app.workflow
    async def order() -> str:
        await wait_for_the_test()
        durably.set_event("status", "charged")
        await wait_for_the_test()
        return "ok"

    handle = app.start(order, id="o-2")
    worker = threading.Thread(target=app.run_until_idle, daemon=True)
    worker.start()
    answer: list[Any] = []
    waiter = threading.Thread(target=lambda: answer.append(handle.get_event("status", WAIT)))
    waiter.start()
    release.set()
    waiter.join(WAIT)
    worker.join(WAIT)
    assert answer == ["charged"]
    assert handle.result(timeout=0) == "ok"


def test_get_event_says_when_the_event_is_not_coming(app: durably.App) -> None:
    @app.workflow
    async def quiet() -> int:
        return 1

    handle = app.start(quiet, id="q-1")
    with pytest.raises(TimeoutError, match=r"did not set event 'status' within 0s \(it is pending"):
        handle.get_event("status", timeout=0)
    assert handle.get_event("status", timeout=0, default="unknown") == "unknown"
    app.run_until_idle()
    with pytest.raises(EventNotSet, match=r"ended \(completed\) without setting event 'status'"):
        handle.get_event("status")
    assert handle.get_event("status", default=None) is None
    assert handle.events() == {}
    assert handle.progress() is None
    with pytest.raises(durably.RunNotFound):
        handle_of(app, "no-such-run").events()
    with pytest.raises(ConfigError, match="an event's key must be a non-empty string"):
        handle.get_event("")


def test_readers_of_a_run_that_ended_without_closing_its_stream_stop_at_its_last_item(
    app: durably.App,
) -> None:
    @app.workflow
    async def chatty() -> int:
        for n in range(3):
            durably.write_stream("log", n)
        return 3

    handle = app.start(chatty, id="c-1")
    app.run_until_idle()
    assert list(handle.read_stream("log")) == [0, 1, 2]

    async def read_async() -> list[Any]:
        return [value async for value in handle.read_stream_async("log", offset=1)]

    assert asyncio.run(read_async()) == [1, 2]


def test_a_reader_times_out_when_no_item_comes(app: durably.App) -> None:
    @app.workflow
    async def silent() -> int:
        await durably.wait_for_signal("go")
        return 1

    handle = app.start(silent, id="s-1")
    app.run_until_idle()
    with pytest.raises(TimeoutError, match=r"stream 'log' of run 's-1' had no new item for 0\.2s"):
        list(handle.read_stream("log", timeout=0.2))


def test_writing_to_a_closed_stream_fails_the_call_with_why(app: durably.App) -> None:
    @app.workflow
    async def sloppy() -> int:
        durably.write_stream("log", "a")
        durably.close_stream("log")
        durably.write_stream("log", "b")
        return 1

    handle = app.start(sloppy, id="x-1")
    app.run_until_idle()
    run = app.client.get("x-1")
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert "stream 'log' of run 'x-1' was closed" in run.error.message
    assert list(handle.read_stream("log")) == ["a"]


def test_a_value_that_would_not_read_back_is_refused_where_it_is_written(
    app: durably.App,
) -> None:
    @app.workflow
    async def odd() -> int:
        durably.set_event("when", {1, 2})  # a set is not JSON
        return 1

    app.start(odd, id="p-1")
    app.run_until_idle()
    run = app.client.get("p-1")
    assert run.error is not None
    assert run.error.error_class == f"{PayloadError.__module__}.{PayloadError.__name__}"
    assert "the value of event 'when'" in run.error.message


def test_publishing_outside_a_run_is_refused() -> None:
    with pytest.raises(NotInWorkflow, match="set_event"):
        durably.set_event("status", "on")
    with pytest.raises(NotInWorkflow, match="write_stream"):
        durably.write_stream("log", 1)
    with pytest.raises(ConfigError, match="done must be a number"):
        durably.progress("half")  # type: ignore[arg-type]


def test_a_run_that_continues_as_new_keeps_its_events_and_streams(
    app: durably.App, clock: FakeClock
) -> None:
    @app.workflow
    async def poller(round: int) -> int:
        durably.set_event("round", round)
        durably.write_stream("rounds", round)
        if round < 3:
            durably.continue_as_new(round + 1)
        durably.close_stream("rounds")
        return round

    handle = app.start(poller, 1, id="p-2")
    settle(app, clock)
    assert handle.result(timeout=0) == 3
    assert handle.get_event("round") == 3
    assert list(handle.read_stream("rounds")) == [1, 2, 3]
