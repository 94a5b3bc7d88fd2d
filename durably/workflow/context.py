"""What code inside a workflow or step can ask about where it runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol, TypeVar

from durably.errors import DurablyError, NotInWorkflow, QueryRefused

__all__ = [
    "Beats",
    "Execution",
    "ReplayFrontier",
    "StepScope",
    "at_frontier",
    "call_scope",
    "connection",
    "current_execution",
    "current_step",
    "idempotency_key",
    "in_step",
    "refuse_in_query",
    "replay_only",
    "step_key",
]

T = TypeVar("T")


class Waits(Protocol):
    """The durable waits and values of a run (runtime/waits.py is the engine's)."""

    def sleep_until(self, until: datetime) -> None: ...

    def wait_for_signal(self, name: str, timeout: timedelta | None) -> str: ...

    def value(self, kind: str, make: Callable[[], str]) -> str: ...


class Execution(Protocol):
    """The run a workflow body executes in, as its step calls see it (a RunExecution)."""

    run_id: str
    is_async: bool

    @property
    def cancel_requested(self) -> bool: ...  # a person cancelled the run (durably.cancelled)

    def call_step(
        self, step: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Awaitable[Any]: ...

    def call_step_blocking(
        self, step: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Any: ...

    @property
    def waits(self) -> Waits: ...

    def on_loop(self, call: Callable[[], T]) -> T: ...

    def run_blocking(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T: ...

    # durably.approval: `ask` is a runtime.approving.ApprovalCall, the answer a Decision
    # (named loosely here: this module stays below the runtime modules it would import)
    def approval(self, ask: Any) -> Coroutine[Any, Any, Any]: ...

    def clock_now(self) -> datetime: ...

    # durably.continue_as_new: raises (runtime.flow.ContinueAsNew) with the encoded input
    def continue_as_new(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> NoReturn: ...

    # child runs (a runtime.children.Children: start, result, call), named loosely as above
    @property
    def children(self) -> Any: ...

    # durably.patched / deprecated_patch (a runtime.patches.Patches: patched, retired)
    @property
    def patches(self) -> Any: ...

    # durably.update handlers (a runtime.updates.Updates: register)
    @property
    def updates(self) -> Any: ...

    # durably.set_event / write_stream from workflow code (a runtime.outputs.RunOutputs)
    @property
    def outputs(self) -> Publisher: ...

    # durably.gather: the calls' results in call order (see runtime.fanout)
    def gather(
        self,
        calls: list[Awaitable[Any]],
        *,
        limit: int | None,
        return_exceptions: bool,
        cancel_on_failure: bool,
    ) -> Coroutine[Any, Any, list[Any]]: ...


class Publisher(Protocol):
    """How code publishes for callers (runtime.outputs): the run's workflow code through
    `Execution.outputs`, a step's body through `StepScope.outputs`. Values are JSON."""

    def set_event(self, key: str, value: str) -> None: ...

    def write(self, key: str, value: str | None) -> None: ...  # None: the stream's end


class Beats(Protocol):
    """A step attempt's heartbeats (runtime.heartbeats.Heartbeats), as durably.heartbeat and
    the attempt's call use them."""

    previous: str | None  # the details an earlier attempt recorded last, as JSON

    def beat(self, details: str) -> None: ...

    async def guard(self, call: Awaitable[Any]) -> Any: ...


@dataclass(frozen=True, slots=True)
class StepScope:
    run_id: str
    position: int
    name: str
    attempt: int
    key: str
    beats: Beats | None = None  # a step body's (none for compensations)
    connection: Any = None  # a transactional step's, to write through (durably.connection)
    outputs: Publisher | None = None  # a step body's: durably.set_event / write_stream


class ReplayFrontier(BaseException):
    """A replay test (durably.testing.replay) reached code that would run for real: a step
    body, a reconcile or compensation hook. The replay stops there, having done nothing."""


# Set by a replay test around its worker: every task and thread it starts sees it.
_replay_only: ContextVar[bool] = ContextVar("durably_replay_only", default=False)
_execution: ContextVar[Execution | None] = ContextVar("durably_execution", default=None)
_step: ContextVar[StepScope | None] = ContextVar("durably_step", default=None)
# The name of the query whose handler runs here (durably.workflow.queries), if one does.
answering: ContextVar[str | None] = ContextVar("durably_answering", default=None)


def current_execution() -> Execution | None:
    return _execution.get()


def current_step() -> StepScope | None:
    """The step attempt whose body (or hook) runs here, if any."""
    return _step.get()


def in_step() -> bool:
    """Whether code runs inside a step's body (rather than the workflow's own code)."""
    return _step.get() is not None


def step_key(run_id: str, position: int, name: str) -> str:
    """The idempotency key of a step call: the same for every attempt, replay and worker.
    `run_id` is the run's `call_scope` (its id, or its id and generation)."""
    return f"{run_id}:{position}:{name}"


def call_scope(run_id: str, generation: int) -> str:
    """What a run's step keys and default child ids begin with: its id, and in the second
    and later generations of a run that continued as new, its generation too (`order-7@2`):
    each generation's calls are new calls, and must not meet the keys of the last one."""
    return run_id if generation <= 1 else f"{run_id}@{generation}"


def idempotency_key() -> str:
    """The idempotency key of the step attempt running now; pass it to the service you call."""
    scope = _step.get()
    if scope is None:
        raise DurablyError(
            "durably.idempotency_key() was called outside a step; call it inside a function "
            "decorated with @app.step while a worker runs it"
        )
    return scope.key


def connection() -> Any:
    """The database connection of the transactional step running here (@app.transaction):
    what it writes through it commits in the same transaction as the step's outcome, or not
    at all. The store's own connection (sqlite3 or psycopg), with commit, rollback and close
    kept for durably: return to commit, raise to roll back."""
    scope = _step.get()
    if scope is None or scope.connection is None:
        raise DurablyError(
            "durably.connection() was called outside a transactional step; call it inside a "
            "function decorated with @app.transaction while a worker runs it"
        )
    return scope.connection


@contextmanager
def replay_only() -> Iterator[None]:
    """Within it, workers replay histories and run no user code (ReplayFrontier instead)."""
    token = _replay_only.set(True)
    try:
        yield
    finally:
        _replay_only.reset(token)


def replaying_only() -> bool:
    """Whether workers here only replay (a rehearsal, a query): they make nothing new."""
    return _replay_only.get()


def at_frontier(what: str) -> None:
    """Before user code runs for real: in a replay test, stop here (ReplayFrontier)."""
    if _replay_only.get():
        raise ReplayFrontier(what)


def cancelled() -> bool:
    """Whether a person cancelled the run this code runs in. A sync step is never interrupted
    against its will: a long one can look now and then, and stop early (its result, or its
    failure, is recorded as usual; then the run's completed steps are compensated). Also
    true in the workflow's code, which is stopped at its next durable call anyway."""
    execution = current_execution()
    if execution is None:
        raise NotInWorkflow(
            "durably.cancelled() was called outside a run; call it in a step or in workflow "
            "code while a worker runs it"
        )
    return execution.cancel_requested


# -- what every durable call of workflow code shares ------------------------------------


def refuse_in_query(what: str) -> None:
    """Before a durable call made where no run executes: QueryRefused if a query's handler
    makes it (its run was replayed, and is not executing: the call would act, or run a step
    for real)."""
    name = answering.get()
    if name is not None:
        raise QueryRefused(
            f"the handler of query {name!r} called {what}; a query reads the state the run's "
            "replay rebuilt and never acts: make the call in the workflow's code, and let the "
            "handler return what it has"
        )


def here(what: str) -> Execution:
    """The run whose workflow code calls durably.`what`; NotInWorkflow if none does."""
    execution = current_execution()
    if execution is None:
        refuse_in_query(f"durably.{what}()")
    if execution is None or in_step():
        where = "inside a step" if execution is not None else "outside a workflow"
        raise NotInWorkflow(
            f"durably.{what}() was called {where}; it is recorded in the workflow's history, "
            "so call it from workflow code (the function decorated with @app.workflow)"
        )
    return execution


def durable_call(what: str, call: Callable[[Execution], Any], *, awaited: bool) -> Any:
    """`call(execution)` on the run's loop; for an awaited call in an async workflow, an
    awaitable that makes it."""
    execution = here(what)
    if awaited and execution.is_async:
        return awaitable(lambda: call(execution))
    return execution.on_loop(lambda: call(execution))


def awaitable(call: Callable[[], T]) -> Awaitable[T]:
    async def made() -> T:
        return call()

    return made()


def step_scope(what: str) -> StepScope:
    scope = current_step()
    if scope is None or scope.beats is None:
        raise NotInWorkflow(
            f"durably.{what}() was called outside a step; call it in the body of a function "
            "decorated with @app.step while a worker runs it"
        )
    return scope
