"""What the tests of a person steering a run (app.client.cancel, pause, resume) share: a
worker that drains in a thread of its own while the test steers, a step body held in flight
until the test lets it go, a reserve step whose undo is logged, an order that waits, and the
checks of a run that ended cancelled.

A worker reads the messages sent to the runs it holds every second, on real time (a cancel, a
pause): nothing announces that it did, so a test that needs it polls for it (`wait_until`: the
run's execution in this process, or the checkpoint that carried it to the store), and never
waits on the clock. The fixtures here are the level's (tests/integration/conftest.py imports
them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest

import durably
from durably import RunStatus
from durably.core.event_data import read_payload
from durably.core.history import ErrorInfo, EventKind
from durably.core.payloads import Compensating
from durably.runtime.execution import RunExecution
from durably.workflow.context import current_execution

__all__ = [
    "WAIT",
    "Held",
    "assert_cancelled",
    "calls",
    "held",
    "join",
    "order",
    "reserve",
    "step_started",
    "undo_events",
    "undone",
    "wait_until",
    "worker_thread",
]

WAIT = 20.0  # seconds: generous, for a loaded machine; nothing here is timed


def worker_thread(app: durably.App) -> threading.Thread:
    """`app.run_until_idle()` in a thread of its own: the test thread steers meanwhile."""
    thread = threading.Thread(target=app.run_until_idle, name="test-worker", daemon=True)
    thread.start()
    return thread


def join(thread: threading.Thread) -> None:
    thread.join(WAIT)
    assert not thread.is_alive(), "the worker did not become idle"


def wait_until(what: str, done: Callable[[], bool], timeout: float = WAIT) -> None:
    """Poll `done`, a condition that nothing announces (a worker took a message in); fail if
    it is still false after `timeout`."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout}s")
        time.sleep(0.01)


class Held:
    """A sync step body (or undo) held in flight until the test lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.executions: list[RunExecution] = []

    def hold(self) -> None:
        """In the body: say that it is in flight, and under which execution; wait for `go`."""
        execution = current_execution()
        assert isinstance(execution, RunExecution)
        self.executions.append(execution)
        self.entered.set()
        assert self.go.wait(WAIT)

    def go_once_taken_in(self, message: Literal["pause", "cancel"]) -> None:
        """Let the body go once its run's execution has taken the pause (or cancel) in: let
        go sooner, it could end (and the next step start) before the message reaches it.
        Nothing about it is in the store before the run's next checkpoint."""
        [execution] = self.executions

        def taken_in() -> bool:
            control = execution.control
            return (control.pause if message == "pause" else control.cancel) is not None

        wait_until(f"the worker took the {message} in", taken_in)
        self.go.set()


@pytest.fixture
def held() -> Iterator[Held]:
    holder = Held()
    yield holder
    holder.go.set()  # a test that failed leaves no body hanging


@pytest.fixture
def undone() -> list[Any]:
    """What the undos of the run's steps did, in order."""
    return []


@pytest.fixture
def calls() -> list[str]:
    """The step bodies that ran, in order."""
    return []


@pytest.fixture
def reserve(app: durably.App, undone: list[Any], calls: list[str]) -> durably.Step:
    """`reserve(item)` holds the item ("hold-{item}"); its undo, `release`, logs the hold."""

    @app.step
    async def reserve(item: str) -> str:
        calls.append(f"reserve {item}")
        return f"hold-{item}"

    @reserve.compensation
    async def release(item: str, hold: str) -> None:
        undone.append(hold)

    return reserve


@pytest.fixture
def order(app: durably.App, reserve: durably.Step, calls: list[str]) -> durably.Workflow:
    """`order(item, wait)` reserves, then waits as `wait` says ("sleep": a day, "signal":
    for the signal "go", anything else: not at all), then ships."""

    @app.step
    async def ship(item: str) -> str:
        calls.append(f"ship {item}")
        return f"shipped {item}"

    @app.workflow
    async def order(item: str, wait: str) -> str:
        await reserve(item)
        if wait == "sleep":
            await durably.sleep("1d")
        elif wait == "signal":
            await durably.wait_for_signal("go")
        return await ship(item)  # type: ignore[no-any-return]

    return order


def step_started(app: durably.App, run_id: str, name: str) -> bool:
    started = EventKind.STEP_STARTED
    return any(event.kind is started and event.name == name for event in app.client.history(run_id))


def assert_cancelled(app: durably.App, run_id: str, by: str, reason: str | None) -> None:
    """The run ended cancelled, compensated, with the error that names who and why."""
    run = app.client.get(run_id)
    assert run.status is RunStatus.CANCELLED
    why = f": {reason}" if reason else ""
    assert run.error == ErrorInfo("durably.errors.RunCancelled", f"cancelled by {by}{why}")
    history = app.client.history(run_id)
    assert history[-1].kind is EventKind.RUN_CANCELLED
    [compensating] = [e for e in history if e.kind is EventKind.COMPENSATING]
    payload = read_payload(compensating, Compensating)
    assert payload.then is RunStatus.CANCELLED
    assert payload.error == run.error
    assert [event.kind for event in history].count(EventKind.RUN_CANCELLED) == 1


def undo_events(app: durably.App, run_id: str) -> list[tuple[str, int | None, str | None]]:
    """(kind, position, name) of every compensation event, in order."""
    undoing = {EventKind.COMPENSATION_STARTED, EventKind.COMPENSATION_COMPLETED}
    return [
        (str(e.kind), e.position, e.name) for e in app.client.history(run_id) if e.kind in undoing
    ]
