"""What workflow code calls besides its steps: durable timers, signal waits, approvals, and
values that replay unchanged (the clock, ids, random numbers).

Like a step call, each is recorded in the run's history at its place in the workflow. In an
async workflow `sleep`, `sleep_until`, `wait_for_signal` and `approval` are awaited; in a
sync workflow the same calls block. `now`, `uuid4` and `random` are plain calls in both.

Why they exist: a workflow body runs again on every replay, so anything it reads from the
world must come back the same. `datetime.now()` in a workflow body is a bug: after a crash
the replay sees another time, and a branch on it may take another path than the first run
did (durably then stops the run with a NonDeterminismError, or, worse, it repeats a step
with other arguments). `durably.now()` is read once and recorded; replays get the recorded
value.
"""

from __future__ import annotations

import inspect
import json
import random as _random
import uuid as _uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from durably.codec.encoding import NO_HINT, encode
from durably.core.approvals import ON_TIMEOUT
from durably.core.durations import Duration, parse_duration
from durably.core.patches import check_name
from durably.core.priority import check_priority
from durably.errors import DurablyError, NotInWorkflow, PayloadError
from durably.runtime.approvals import ApprovalCall
from durably.runtime.waits import check_signal_name
from durably.workflow.context import Execution, StepScope, current_execution, current_step, in_step
from durably.workflow.definitions import Step, Workflow

__all__ = [
    "ChildHandle",
    "approval",
    "cancelled",
    "continue_as_new",
    "gather",
    "heartbeat",
    "last_heartbeat",
    "now",
    "random",
    "sleep",
    "sleep_until",
    "start_child",
    "uuid4",
    "wait_for_signal",
]

T = TypeVar("T")


def sleep(duration: Duration) -> Any:
    """Wait `duration` ("10m", "2d", seconds, a timedelta), durably: the run is handed back
    and holds no worker until the time comes, across restarts of every worker."""
    delta = _duration(duration, "the sleep's duration")
    return _wait("sleep", lambda execution: _until(execution, delta))


def sleep_until(moment: datetime) -> Any:
    """Wait until `moment` (a datetime with a time zone), durably."""
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise DurablyError(
            f"durably.sleep_until() needs a datetime with a time zone, not {moment!r}; "
            "for example datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)"
        )
    return _wait("sleep_until", lambda _execution: moment)


def wait_for_signal(name: str, *, timeout: Duration | None = None) -> Any:
    """The payload of the next signal `name` sent to this run (app.signal, `durably signal`),
    waiting for it durably. Signals sent before the wait are kept and taken in the order they
    came, each by one wait. Raises durably.SignalTimeout if `timeout` passes first."""
    check_signal_name(name)
    delta = None if timeout is None else _duration(timeout, "the signal's timeout")

    def wait(execution: Execution) -> Any:
        return json.loads(execution.waits.wait_for_signal(name, delta))

    return _call("wait_for_signal", wait, awaited=True)


def approval(
    name: str,
    *,
    timeout: Duration | None = None,
    on_timeout: str = "reject",
    remind_after: Duration | None = None,
    notify: Step | None = None,
    details: Any = None,
) -> Any:
    """Wait durably for a person to approve or reject; returns the durably.Decision.

    `notify`: a step (`@app.step`, taking one durably.ApprovalRequest) called with the request
    and its single-use token, and again every `remind_after` with a fresh token. Operators can
    decide without a token (`durably approve RUN NAME`). After `timeout`, durably decides by
    itself (`on_timeout` "reject" or "approve"), or "escalate"s: the approval then waits for a
    person with no timeout. Meanwhile the run is parked `needs_attention` and holds nothing.
    """
    check_signal_name(name, what="an approval")
    if on_timeout not in ON_TIMEOUT:
        raise DurablyError(
            f"durably.approval(on_timeout=...) must be one of {', '.join(ON_TIMEOUT)}, "
            f"not {on_timeout!r}"
        )
    limit = None if timeout is None else _duration(timeout, "the approval's timeout")
    remind = None if remind_after is None else _duration(remind_after, "remind_after")
    if notify is not None and not isinstance(notify, Step):
        raise DurablyError(
            f"durably.approval(notify=...) must be a step (a function decorated with @app.step "
            f"that takes one durably.ApprovalRequest), not {notify!r}"
        )
    try:
        text = None if details is None else encode(details, NO_HINT, what="the approval's details")
    except PayloadError as exc:
        raise DurablyError(str(exc)) from None
    ask = ApprovalCall(name, limit, on_timeout, remind, notify, text)
    execution = _here("approval")
    if execution.is_async:
        return execution.approval(ask)
    return execution.run_blocking(lambda: execution.approval(ask))


async def gather(
    *calls: Awaitable[Any],
    return_exceptions: bool = False,
    cancel_on_failure: bool = True,
    limit: int | None = None,
) -> list[Any]:
    """Run durable calls at once (step calls, e.g. `await durably.gather(charge(a), ship(b))`)
    and return their results in call order. Each takes its place in the history in the order
    the calls were made, so replay finds it whatever order they finished in.

    If a call fails for good, the others are cancelled (`cancel_on_failure=False`: they run
    to their end) and the first failure in call order is raised; with `return_exceptions`
    the failures are returned in place instead and nothing is cancelled. At most `limit`
    calls run at once (default: the worker's concurrency). A branch makes one durable call:
    for several steps in a row, use a workflow of their own. Async workflows only."""
    execution = _here("gather")
    refusal = None
    if not execution.is_async:
        refusal = (
            "durably.gather() runs calls of an async workflow; in a sync workflow, call the "
            "steps one after another (or make the workflow async)"
        )
    elif limit is not None and limit < 1:
        refusal = f"durably.gather(limit=...) must be at least 1, not {limit}"
    if refusal is not None:
        for call in calls:  # none of them runs
            if inspect.iscoroutine(call):
                call.close()
        raise DurablyError(refusal)
    return await execution.gather(
        list(calls),
        limit=limit,
        return_exceptions=return_exceptions,
        cancel_on_failure=cancel_on_failure,
    )


class ChildHandle:
    """A child run started by durably.start_child: `run_id`, and `result()` to wait for its
    end (await it in an async workflow; it blocks in a sync one)."""

    def __init__(self, run_id: str, workflow: Workflow) -> None:
        self.run_id = run_id
        self.workflow = workflow

    def result(self) -> Any:
        """The child's result, once it ends; durably.ChildFailed if it did not complete. The
        parent holds no worker while it waits, and the child's end wakes it."""
        workflow = self.workflow
        return _call("result", lambda ex: ex.children.result(self.run_id, workflow), awaited=True)

    def __repr__(self) -> str:
        return f"<durably child run {self.run_id!r} of {self.workflow.name!r}>"


def start_child(
    workflow: Workflow,
    *args: Any,
    id: str | None = None,
    detached: bool = False,
    priority: int | None = None,
    **kwargs: Any,
) -> Any:
    """Start `workflow` as a child run (a run of its own, with its own history, linked to
    this one both ways) and return its ChildHandle without waiting: await it in an async
    workflow. The start is recorded at its place in this workflow, so replay and crashes
    never start two children for one call. `id`: the child's run id (default: this run's id,
    the call's position and the workflow's name). The child inherits this run's deadline; it
    is cancelled if this run is cancelled or ends before it, unless `detached`. Its
    `priority` (0 to 1,000): default the child workflow's, else this run's. Calling the
    workflow directly (`await child(...)`) starts it and waits for its result."""
    if not isinstance(workflow, Workflow):
        raise DurablyError(
            f"durably.start_child() takes a workflow (a function decorated with "
            f"@app.workflow), not {workflow!r}"
        )
    if id is not None and (not isinstance(id, str) or not id):
        raise DurablyError(f"durably.start_child(id=...) must be a non-empty string, not {id!r}")
    if priority is not None:
        check_priority(priority, what="durably.start_child(priority=...)")

    def start(execution: Execution) -> ChildHandle:
        children = execution.children
        started = children.start(
            workflow, args, kwargs, run_id=id, detached=detached, priority=priority
        )
        return ChildHandle(started, workflow)

    return _call("start_child", start, awaited=True)


def continue_as_new(*args: Any, **kwargs: Any) -> NoReturn:
    """End this run's workflow body here and begin the run again, under the same id, with
    these arguments and a fresh history: a loop that runs for months keeps a short history.
    What was sent to the run and not used yet (signals no wait took) goes along; its
    deadline, parent and id stay. Children it started and did not see end are cancelled,
    unless started detached. Call it last, in place of returning; `except Exception` does
    not catch it."""
    _here("continue_as_new").continue_as_new(args, kwargs)


def patched(patch_id: str) -> bool:
    """Whether this run takes the new side of a change made under running workflows:
    `if durably.patched("fraud-check"): <new code> else: <old code>`. A run that got past this
    point before the change (its history follows the old code) takes the old side; every other
    run the new one. Decided the first time the run gets here, recorded, and the same on every
    replay. It takes no place in the history: no step after it moves."""
    check_name(patch_id)
    side: bool = _call(
        "patched", lambda execution: execution.patches.patched(patch_id), awaited=False
    )
    return side


def deprecated_patch(patch_id: str) -> None:
    """Say that the patch `patch_id` is retired: the code has only its new side now. A run
    that took the old side (or got past this point before the patch) cannot follow this code
    and is parked with NonDeterminismError; `durably runs list --patch ID` lists such runs
    before you deploy."""
    check_name(patch_id)
    _call("deprecated_patch", lambda execution: execution.patches.retired(patch_id), awaited=False)


def now() -> datetime:
    """The current time (UTC), recorded on first execution and the same on every replay."""
    return _value(
        "now",
        lambda execution: json.dumps(execution.clock_now().isoformat()),
        datetime.fromisoformat,
    )


def uuid4() -> _uuid.UUID:
    """A random UUID, recorded on first execution and the same on every replay."""
    return _value("uuid4", lambda _execution: json.dumps(str(_uuid.uuid4())), _uuid.UUID)


def random() -> float:
    """A random float in [0, 1), recorded on first execution and the same on every replay."""
    return _value("random", lambda _execution: json.dumps(_random.random()), float)


# -- from inside a step ---------------------------------------------------------------------


def heartbeat(details: Any = None) -> None:
    """Tell durably a long step is alive, with how far it got (`details`, plain JSON). With
    `@app.step(heartbeat_timeout=...)`, an attempt whose heartbeats stop is lost (retried);
    the latest details are recorded and handed to the next attempt (last_heartbeat)."""
    scope = _step_scope("heartbeat")
    try:
        text = encode(details, NO_HINT, what="the heartbeat's details")
    except PayloadError as exc:
        raise DurablyError(str(exc)) from None
    assert scope.beats is not None
    scope.beats.beat(text)


def last_heartbeat() -> Any:
    """The details of the last heartbeat an earlier attempt of this step recorded (None if
    none did): where to resume."""
    scope = _step_scope("last_heartbeat")
    assert scope.beats is not None
    previous = scope.beats.previous
    return None if previous is None else json.loads(previous)


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


# -- plumbing -------------------------------------------------------------------------------


def _step_scope(what: str) -> StepScope:
    scope = current_step()
    if scope is None or scope.beats is None:
        raise NotInWorkflow(
            f"durably.{what}() was called outside a step; call it in the body of a function "
            "decorated with @app.step while a worker runs it"
        )
    return scope


def _duration(value: Duration, what: str) -> timedelta:
    try:
        return parse_duration(value, what=what)
    except ValueError as exc:
        raise DurablyError(str(exc)) from None


def _until(execution: Execution, delta: timedelta) -> datetime:
    return execution.clock_now() + delta


def _wait(what: str, until: Callable[[Execution], datetime]) -> Any:
    def wait(execution: Execution) -> None:
        execution.waits.sleep_until(until(execution))

    return _call(what, wait, awaited=True)


def _value(kind: str, make: Callable[[Execution], str], read: Callable[[Any], T]) -> T:
    def value(execution: Execution) -> T:
        return read(json.loads(execution.waits.value(kind, lambda: make(execution))))

    result: T = _call(kind, value, awaited=False)
    return result


def _call(what: str, call: Callable[[Execution], Any], *, awaited: bool) -> Any:
    """`call(execution)` on the run's loop; for an awaited call in an async workflow, an
    awaitable that makes it."""
    execution = _here(what)
    if awaited and execution.is_async:
        return _awaitable(lambda: call(execution))
    return execution.on_loop(lambda: call(execution))


def _here(what: str) -> Execution:
    """The run whose workflow code calls durably.`what`; NotInWorkflow if none does."""
    execution = current_execution()
    if execution is None or in_step():
        where = "inside a step" if execution is not None else "outside a workflow"
        raise NotInWorkflow(
            f"durably.{what}() was called {where}; it is recorded in the workflow's history, "
            "so call it from workflow code (the function decorated with @app.workflow)"
        )
    return execution


def _awaitable(call: Callable[[], T]) -> Awaitable[T]:
    async def made() -> T:
        return call()

    return made()
