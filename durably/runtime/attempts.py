"""One attempt of user code (a step body, its reconcile or compensation hook): run within
its timeout; its result recorded (or replayed), and when it fails, the retry decision."""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from durably.clock import Clock
from durably.codec.encoding import decode, encode, read_back
from durably.core import event_data, payloads
from durably.core.control import Request, cancel_error
from durably.core.history import ErrorInfo, EventKind
from durably.core.replay import StepRecord
from durably.core.retry import GiveUp, Retry, classify, decide
from durably.errors import Escalated, PayloadError, StepFailed, StepTimeout
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.flow import Cancelling, Suspend
from durably.runtime.hooks import Hooks
from durably.runtime.threads import in_daemon_thread
from durably.workflow.context import StepScope, _step, at_frontier

if TYPE_CHECKING:
    from durably.workflow.definitions import Step

__all__ = [
    "call_user",
    "observed",
    "record_cancelled",
    "record_completed",
    "record_failure",
    "replayed",
    "within",
]

log = logging.getLogger("durably.execution")


async def call_user(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    scope: StepScope,
    step: Step,
) -> Any:
    """Call a step body (or its reconcile or compensation hook) within the step's timeout."""
    at_frontier(f"step {step.name!r}")
    token = _step.set(scope)
    try:
        timeout = step.options.timeout
        # the body's kind is known from its definition: asking inspect costs ~5 µs a step
        if step.is_async if fn is step.fn else inspect.iscoroutinefunction(fn):
            call = fn(*args, **kwargs)
        else:  # a thread nobody joins: a hung body is abandoned after its timeout, and a
            # stopping worker does not wait for it (its run is handed back)
            call = in_daemon_thread(fn, args, kwargs, name=f"durably-step-{step.name}")
        if fn is step.fn and scope.beats is not None and step.options.heartbeat_timeout:
            call = scope.beats.guard(call)  # the body's beats; a reconcile hook has none
        if timeout is None:
            return await call
        message = f"step {step.name!r} attempt ran past its timeout of {timeout}"
        return await within(call, timeout.total_seconds(), lambda: StepTimeout(message))
    finally:
        _step.reset(token)


@contextmanager
def observed(hooks: Hooks | None, scope: StepScope, dependency: str | None) -> Iterator[None]:
    """Around a step body's call: the hooks hear that the attempt started and how it ended. A
    hook that raises (fault injection) fails the attempt, like the body would."""
    if hooks is None:
        yield
        return
    try:
        hooks.attempt_started(scope.run_id, scope.name, scope.attempt, dependency)
        yield
    except Exception as exc:
        hooks.attempt_finished(scope.run_id, scope.name, scope.attempt, dependency, exc)
        raise
    hooks.attempt_finished(scope.run_id, scope.name, scope.attempt, dependency, None)


def record_completed(
    writer: HistoryWriter,
    step: Step,
    position: int,
    attempt: int,
    value: Any,
    limit: int | None = None,
) -> Any:
    """Record the step's result; what the workflow sees is what a replay would see: the
    value after a JSON round trip. A result that cannot be stored (or takes more than
    `limit` bytes) fails the step for good; its body ran, so its undo is owed."""
    what = f"the result of step {step.name!r}"
    try:
        result = encode(value, step.return_hint, what=what, limit=limit)
    except PayloadError as exc:
        error = ErrorInfo.of(exc)
        data = event_data.encode_payload(payloads.StepFailed(error, "terminal", unknown=True))
        writer.append(EventKind.STEP_FAILED, position, step.name, attempt, data)
        raise StepFailed(step.name, error.error_class, error.message) from None
    writer.append(EventKind.STEP_COMPLETED, position, step.name, attempt, result)
    return read_back(value, result, step.return_hint, what=what)


def record_cancelled(
    writer: HistoryWriter,
    cancel: Request | None,
    step: Step,
    position: int,
    attempt: int | None,
    why: ErrorInfo | None,
    raised: ErrorInfo | None = None,
    *,
    cut_off: bool = False,
) -> NoReturn:
    """The call was cancelled (`why`; None: with its run, by `cancel`): recorded as the
    step's outcome (with the error the body `raised` on its way out, if it raised one). The
    run's cancel stops the body; a branch's cancel fails the branch. `cut_off`: its body was
    cut off in flight, so it may have taken effect (an undo is owed)."""
    error = why or raised or cancel_error(cancel)  # type: ignore[arg-type]
    failed = payloads.StepFailed(error, "cancelled", attempt, unknown=cut_off)
    writer.append(
        EventKind.STEP_FAILED, position, step.name, attempt, event_data.encode_payload(failed)
    )
    if why is None:
        assert cancel is not None
        raise Cancelling(cancel)
    raise StepFailed(step.name, error.error_class, error.message, "cancelled")


def replayed(step: Step, record: StepRecord) -> Any:
    """The recorded outcome of a step call: its result, or its failure raised again."""
    if record.completed:
        assert record.result is not None
        what = f"the recorded result of step {step.name!r}"
        return decode(record.result, step.return_hint, what=what)
    assert record.error is not None
    raise StepFailed(
        step.name, record.error.error_class, record.error.message, record.failure_reason
    )


def record_failure(
    writer: HistoryWriter,
    step: Step,
    scope: StepScope,
    error: Exception,
    *,
    unknown: bool,
    first_started_at: datetime,
    policy: Retry,
    clock: Clock,
    rng: random.Random,
    hide: Sequence[str] = (),
) -> NoReturn:
    """Record a failed attempt; raise StepFailed (given up) or Suspend (retry when due).
    `hide`: secrets the step was given, kept out of the recorded error message. A timed-out
    attempt is unknown, unless its step is transactional (then it was rolled back)."""
    info = ErrorInfo.raised(error, hide)
    timed_out = isinstance(error, StepTimeout) and not step.options.transactional
    unknown = unknown or timed_out
    decision: Any = GiveUp("terminal")
    if isinstance(error, Escalated):
        reason = "escalated"
    else:
        decision = decide(
            policy,
            classify(error, policy),
            attempt=scope.attempt,
            first_attempt_at=first_started_at,
            now=clock.now(),
            rng=rng,
        )
        reason = decision.reason if isinstance(decision, GiveUp) else ""
    if reason:
        # a timed-out last attempt may have taken effect: an undo is owed if the run is undone
        given_up = payloads.StepFailed(info, reason, scope.attempt, unknown=unknown)
        data = event_data.encode_payload(given_up)
        writer.append(EventKind.STEP_FAILED, scope.position, scope.name, scope.attempt, data)
        _log_failed(scope, info, f"gave up ({reason})")
        raise StepFailed(step.name, info.error_class, info.message, reason) from error
    due: datetime = decision.due
    failed = payloads.AttemptFailed(info, due, unknown, policy.attempts, step.options.dependency)
    data = event_data.encode_payload(failed)
    writer.append(EventKind.STEP_ATTEMPT_FAILED, scope.position, scope.name, scope.attempt, data)
    _log_failed(scope, info, f"retry at {due.isoformat()}")
    raise Suspend(due)


def _log_failed(scope: StepScope, error: ErrorInfo, then: str) -> None:
    """A failed attempt in the worker's log, at warning level, with the user's traceback."""
    log.warning(
        "run %s: step %s attempt %d failed, %s: %s",
        *(scope.run_id, scope.name, scope.attempt, then, error.report()),
    )


async def within(
    call: Awaitable[Any],
    seconds: float,
    expired: Callable[[], Exception],
    *,
    limit: asyncio.Timeout | None = None,
) -> Any:
    """Await `call` for at most `seconds` (or until `limit`, which its owner may reschedule),
    then raise `expired()`. A TimeoutError that the call raises by itself passes through."""
    limit = limit or asyncio.timeout(seconds)
    try:
        async with limit:
            return await call
    except TimeoutError:
        if not limit.expired():
            raise
    raise expired()
