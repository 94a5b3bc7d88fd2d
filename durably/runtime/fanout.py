"""durably.gather: durable calls at once (steps, mostly), with positions fixed by the order
the calls were made, so that replay finds each where it was whatever order they finished in.

Each call runs as a branch task that makes that one call; at most `limit` run at once, and
they take their positions in call order (a FIFO semaphore: the k-th to start is the k-th
call). When a branch fails for good, the others are cancelled by default: an async step in
flight gets a CancelledError, a branch not started yet starts nothing, each recorded as a
`step_failed` with reason "cancelled"; a sync step finishes. The gather waits for every branch,
so nothing is left running behind it, then says what the workflow sees: the results in call
order, or the failure of the first branch in call order that failed by itself (the same on
replay), or how the run must stop (a wait, a cancel, a pause), for every branch at once.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any

from durably.core.history import ErrorInfo
from durably.errors import (
    BranchCancelled,
    LeaseLost,
    NonDeterminismError,
    PayloadError,
    StepFailed,
    UnsafeConcurrency,
)
from durably.runtime.flow import (
    Abandoned,
    Cancelling,
    CheckpointFailed,
    Pause,
    Suspend,
    WaitForPerson,
)
from durably.runtime.interrupts import Interrupts

__all__ = ["Branches", "gather"]

# How a branch's run must stop, most pressing first: the lease is gone or a write failed,
# the body must not go on, the code changed, a person cancelled or paused the run.
_STOPS: tuple[type[BaseException], ...] = (
    LeaseLost,
    CheckpointFailed,
    Abandoned,
    NonDeterminismError,
    UnsafeConcurrency,
    PayloadError,
    Cancelling,
    Pause,
)


class Branches:
    """The tasks of one run that make durable calls: the workflow body's own (`main`), and the
    branches of a gather, each of which makes one."""

    def __init__(self, *, is_async: bool) -> None:
        self.main: asyncio.Task[Any] | None = None  # the task the workflow body starts in
        self._is_async = is_async  # a sync body makes its calls one after another
        self._calling: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    def one_call(self, what: str) -> None:
        """A task other than the body's (a branch of durably.gather or of asyncio.gather)
        makes one durable call: its position is taken when the task starts, in the order the
        calls were made. A second call's position would depend on which branch finished
        first, so replay could not find it: refused."""
        task = asyncio.current_task()
        if task is None or task is self.main or not self._is_async:
            return
        if task in self._calling:
            raise UnsafeConcurrency(
                f"{what} was called from a concurrent branch that made a durable call already "
                "(a coroutine of several steps passed to durably.gather or asyncio.gather): "
                "its place in the history would depend on which branch finished first. Pass "
                "step calls to gather, or make the branch a workflow of its own"
            )
        self._calling.add(task)

    def in_branch(self) -> bool:
        """Whether the call under way comes from a branch (after its `one_call`)."""
        return asyncio.current_task() in self._calling


async def gather(
    interrupts: Interrupts,
    calls: Sequence[Awaitable[Any]],
    *,
    limit: int,
    return_exceptions: bool,
    cancel_on_failure: bool,
) -> list[Any]:
    slots = asyncio.Semaphore(limit)

    async def branch(call: Awaitable[Any]) -> Any:
        async with slots:
            return await call

    tasks = [asyncio.ensure_future(branch(call)) for call in calls]
    try:
        await _settle(interrupts, tasks, cancel_on_failure and not return_exceptions)
    except asyncio.CancelledError:  # the worker stops: no branch outlives its gather
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return _outcome(tasks, return_exceptions)


async def _settle(interrupts: Interrupts, tasks: list[asyncio.Task[Any]], fail_fast: bool) -> None:
    """Wait for every branch; at the first that fails for good, cancel the others. (One
    callback per branch: asyncio.wait in a loop would cost O(branches) per completion.)"""
    if not tasks:
        return
    every = asyncio.get_running_loop().create_future()
    remaining = len(tasks)
    given_up = False

    def finished(task: asyncio.Task[Any]) -> None:
        nonlocal remaining, given_up
        remaining -= 1
        error = _failure(task) if fail_fast and not given_up else None
        if error is not None:
            given_up = True
            why = ErrorInfo.of(
                BranchCancelled(
                    f"cancelled: another branch of the gather failed ({error.error_class}: "
                    f"{error.message})"
                )
            )
            interrupts.cancel_branches([other for other in tasks if not other.done()], why)
        if remaining == 0 and not every.done():
            every.set_result(None)

    for task in tasks:
        task.add_done_callback(finished)
    await every


def _failure(task: asyncio.Task[Any]) -> ErrorInfo | None:
    """The branch's failure for good (a step that failed, not a cancelled one), if any."""
    error = None if task.cancelled() else task.exception()
    if isinstance(error, StepFailed) and error.reason != "cancelled":
        return ErrorInfo(error.error_class, str(error))
    return None


def _outcome(tasks: list[asyncio.Task[Any]], return_exceptions: bool) -> list[Any]:
    outcomes: list[BaseException | None] = [
        asyncio.CancelledError() if task.cancelled() else task.exception() for task in tasks
    ]
    for kind in _STOPS:
        for error in outcomes:
            if isinstance(error, kind):
                raise error
    waits = [error for error in outcomes if isinstance(error, Suspend)]
    failures = [error for error in outcomes if isinstance(error, Exception)]
    if failures and not return_exceptions:
        raise _first_failure(failures)
    if waits:  # some branches wait (a retry's backoff, a gate, a timer): all wait, then replay
        raise _earliest(waits)
    if return_exceptions:
        return [
            task.result() if error is None else error
            for task, error in zip(tasks, outcomes, strict=True)
        ]
    return [task.result() for task in tasks]


def _first_failure(failures: list[Exception]) -> Exception:
    """The failure the workflow sees: the first in call order that failed by itself (not
    cancelled because another did), else the first."""
    for error in failures:
        if not (isinstance(error, StepFailed) and error.reason == "cancelled"):
            return error
    return failures[0]


def _earliest(waits: list[Suspend]) -> Suspend:
    """One wait for all: a person's decision if any branch waits for one, until the earliest
    due time of them all (None: only a message wakes the run)."""
    dues = [wait.due for wait in waits if wait.due is not None]
    due: datetime | None = min(dues) if dues else None
    person = next((wait for wait in waits if isinstance(wait, WaitForPerson)), None)
    if person is not None:
        return WaitForPerson(due, person.why)
    return Suspend(due)
