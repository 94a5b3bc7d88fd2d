"""Cancelling step bodies in flight: all of a run's when a person cancels it, or those of the
other branches of a durably.gather when one branch fails for good.

Only async step bodies are cancelled (a CancelledError inside them, taken back from their task
once caught, so the task goes on to record the outcome); a sync body runs in a thread and is
never interrupted against its will. A branch marked cancelled before its attempt starts runs
none. Each cancelled call says why (`AttemptCancelled.why`: None for the run's cancel)."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from durably.core.history import ErrorInfo

__all__ = ["AttemptCancelled", "Interrupts"]

T = TypeVar("T")
_RUN = "run"  # the reason of an interrupt for the run's own cancel


class AttemptCancelled(BaseException):
    """A step body was cancelled (or not started): `why` for a branch, None for the run.
    `started`: its body had begun (so it may have taken effect)."""

    def __init__(self, why: ErrorInfo | None, *, started: bool = True) -> None:
        super().__init__(why)
        self.why = why
        self.started = started


class Interrupts:
    def __init__(self) -> None:
        self._attempts: dict[int, asyncio.Task[Any]] = {}  # async bodies in flight, by position
        self._interrupted: dict[int, ErrorInfo | str] = {}  # position -> why (or _RUN)
        self._doomed: weakref.WeakKeyDictionary[asyncio.Task[Any], ErrorInfo] = (
            weakref.WeakKeyDictionary()
        )

    def doomed(self) -> ErrorInfo | None:
        """Why the current task's branch was cancelled, if it was."""
        if not self._doomed:  # the usual case: no gather gave up on a branch
            return None
        task = asyncio.current_task()
        return None if task is None else self._doomed.get(task)

    async def run(self, position: int, call: Awaitable[T], *, is_async: bool) -> T:
        """Await a step body; an async one is cancelled by `cancel_run` or `cancel_branches`
        meanwhile (AttemptCancelled). One that lets the cancel pass keeps its outcome."""
        if (why := self.doomed()) is not None:
            if asyncio.iscoroutine(call):
                call.close()  # never started
            raise AttemptCancelled(why, started=False)
        task = asyncio.current_task() if is_async else None
        if task is None:
            return await call
        self._attempts[position] = task
        try:
            return await call
        except asyncio.CancelledError:
            reason = self._taken_back(position)
            if isinstance(reason, ErrorInfo):
                raise AttemptCancelled(reason) from None
            if reason is not None:  # the run's cancel
                raise AttemptCancelled(None) from None
            raise
        finally:
            del self._attempts[position]
            self._taken_back(position)

    def cancel_run(self) -> None:
        """The run was cancelled: cancel every async body in flight."""
        self._cancel(self._attempts.items(), _RUN)

    def cancel_branches(self, tasks: Iterable[asyncio.Task[Any]], why: ErrorInfo) -> None:
        """These branches are given up: cancel their bodies in flight, start no other."""
        tasks = set(tasks)
        for task in tasks:
            self._doomed[task] = why
        self._cancel([(p, t) for p, t in self._attempts.items() if t in tasks], why)

    def _cancel(
        self, attempts: Iterable[tuple[int, asyncio.Task[Any]]], why: ErrorInfo | str
    ) -> None:
        for position, task in list(attempts):
            if position not in self._interrupted:
                self._interrupted[position] = why
                task.cancel("durably: the step was cancelled")

    def _taken_back(self, position: int) -> ErrorInfo | str | None:
        """Why the body at `position` was cancelled, once; the cancel is taken back from its
        task (which goes on to record the outcome)."""
        why = self._interrupted.pop(position, None)
        if why is not None and (task := asyncio.current_task()) is not None:
            task.uncancel()
        return why
