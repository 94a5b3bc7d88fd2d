"""Executing one claimed run: replaying its history, running new steps, checkpointing.

A step's start is committed before its body runs. Its outcome is appended to the pending
events and committed together with the next step's start (or the run's end): the code
between two steps is deterministic and has no side effects, so the outcome is durable
before anything else can happen in the world. That is one commit per step, not two.

A failed attempt that will be retried writes its due time and hands the run back (the
wait is durable: any worker picks the run up when it is due, and replays to that step).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from durably.codec import decode, decode_call, encode, encode_call
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.replay import (
    Replay,
    RunPhase,
    StepRecord,
    error_data,
    fold_run,
    next_action,
    progressed,
)
from durably.core.status import RunStatus
from durably.errors import (
    DeadlineExceeded,
    Escalated,
    LeaseLost,
    NonDeterminismError,
    PayloadError,
    PoisonPill,
    StepFailed,
    StepTimeout,
)
from durably.resilience.gates import Wait, entering, leaving
from durably.retry import GiveUp, classify, decide
from durably.runtime.context import StepScope, _execution, _step, step_key
from durably.runtime.threads import in_daemon_thread
from durably.stores.base import Checkpoint, Claim

if TYPE_CHECKING:
    from durably.app import App
    from durably.definitions import Step
    from durably.runtime.committer import Committer

__all__ = ["RunExecution"]

log = logging.getLogger("durably.execution")

_DEFAULT_HOLD = timedelta(minutes=5)  # a concurrency slot's lease when a step has no timeout
_ALONE_REASON = json.dumps({"reason": "a worker died while running it"})
_NEXT_SUSPECT = json.dumps({"reason": "ran alone past where its worker died; others wait"})


class _Suspend(BaseException):
    """Unwinds the workflow when the run must wait; BaseException so `except Exception`
    in user code cannot swallow it."""

    def __init__(self, due: datetime) -> None:
        self.due = due


class _Abandoned(BaseException):
    """Raised into a workflow body that runs on after it stopped counting (a sync body past
    its deadline): it must start no step and record nothing more."""


class _CheckpointFailed(BaseException):
    """A checkpoint could not be committed. Not the workflow's failure: the execution stops
    and the run's lease runs out, so a worker tries it again from its durable history."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"a checkpoint could not be committed: {cause!r}")
        self.cause = cause


class RunExecution:
    """One worker's turn at one run, under one lease epoch."""

    def __init__(
        self, claim: Claim, app: App, committer: Committer, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.run_id = claim.run_id
        self.epoch = claim.epoch
        self.lost = False  # the lease is gone: write nothing more
        self.wake_at: datetime | None = None  # set when the run was handed back to wait
        self._claim = claim
        self._app = app
        self._workflow = app.workflow_named(claim.workflow)
        self.is_async = self._workflow.is_async
        self._committer = committer
        self._clock = app.clock
        self._loop = loop
        seed = None if app.seed is None else f"{app.seed}:{claim.run_id}:{claim.epoch}"
        self._rng = random.Random(seed)
        self._events: list[Event] = list(claim.events)
        self._phase: RunPhase | None = None
        self._next_seq = max((event.seq for event in claim.events), default=0) + 1
        self._pending: list[Event] = []
        self._position = 0
        self.closed = False
        self._body_over = False  # the workflow body returned, raised or passed its deadline
        # Set by the worker for a run taken over from a dead worker: nothing else runs in
        # this process until the run gets past the point where that worker died.
        self.alone = False
        self._after_alone: Callable[[], bool] = lambda: False

    def run_alone(self, after: Callable[[], bool]) -> None:
        """Run with nothing else in this process until past the point of the last death.
        `after()` is called then; True means other suspects wait to run alone, so this run
        is handed back rather than kept."""
        self.alone = True
        self._after_alone = after

    async def run(self) -> None:
        """Drive the run to its end, a wait, or until the lease is lost or the worker stops."""
        token = _execution.set(self)
        try:
            await self._drive()
        except _Suspend as wait:
            self.wake_at = self._due(wait.due)
            await self._flush(RunStatus.PENDING, available_at=self.wake_at)
        except LeaseLost as exc:
            self.lost = True
            log.warning("run %s: %s", self.run_id, exc)
        except _CheckpointFailed as exc:
            log.error("run %s: %s; it is retried when its lease expires", self.run_id, exc)
        except asyncio.CancelledError:
            if not self.lost:
                await asyncio.shield(self._release())
            raise
        finally:
            self.closed = True
            _execution.reset(token)

    async def _drive(self) -> None:
        try:
            phase = self._phase = fold_run(self._events)
            self._check_poison(phase)
            if self.alone:
                self._append(EventKind.RUNNING_ALONE, data=_ALONE_REASON)
                await self._flush()
            if phase.compensating is not None:
                await self._compensate(
                    phase.compensating, RunStatus(phase.final_status or "failed")
                )
                return
            what = f"run {self.run_id!r}"
            args, kwargs = decode_call(self._claim.input, self._workflow.fn, what=what)
            value = await self._call_workflow(args, kwargs)
        except (NonDeterminismError, PayloadError, PoisonPill) as exc:
            await self._park(
                RunStatus.NEEDS_ATTENTION, ErrorInfo.of(exc), reason=type(exc).__name__
            )
            return
        except StepFailed as exc:
            if exc.reason != "terminal":  # a person decides: retry, skip, or fail
                await self._park(RunStatus.NEEDS_ATTENTION, ErrorInfo.of(exc), reason=exc.reason)
            else:
                await self._compensate(ErrorInfo.of(exc), RunStatus.FAILED)
            return
        except DeadlineExceeded as exc:
            await self._compensate(ErrorInfo.of(exc), RunStatus.TIMED_OUT)
            return
        except (LeaseLost, asyncio.CancelledError, _Suspend, _CheckpointFailed):
            raise
        except Exception as exc:  # the workflow's own code failed (an assert too): no retry
            await self._compensate(ErrorInfo.of(exc), RunStatus.FAILED)
            return
        try:
            result = encode(
                value,
                self._workflow.return_hint,
                what=f"the result of workflow {self._workflow.name!r}",
            )
        except PayloadError as exc:
            await self._compensate(ErrorInfo.of(exc), RunStatus.FAILED)
            return
        await self._finish(RunStatus.COMPLETED, EventKind.RUN_COMPLETED, result=result)

    def _check_poison(self, phase: RunPhase) -> None:
        limit = self._workflow.max_recoveries
        limit = self._app.max_recoveries if limit is None else limit
        if phase.deaths.poison(limit):
            raise PoisonPill(
                f"{phase.deaths.count} workers died or lost their lease while running this run, "
                f"the last while it ran alone on its worker (limit {limit}); parked so it stops "
                "taking workers down. Inspect it, then retry it (durably dlq retry) or fail it."
            )

    async def _before_new_work(self) -> None:
        """Before a step or an undo starts: a run that ran alone and has an outcome to record
        is past the point where its last worker died. Commit that proof, and let the worker
        run others again (handing this run back if other suspects wait to run alone)."""
        if not self.alone or not progressed(self._pending):
            return
        await self._flush()
        self.alone = False
        if self._after_alone():
            self._append(EventKind.RELEASED, data=_NEXT_SUSPECT)
            raise _Suspend(self._clock.now())

    async def _call_workflow(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        try:
            return await self._call_workflow_in_time(args, kwargs)
        finally:
            # From here on the workflow body has no say: a sync body still running in its
            # thread (past its deadline) gets no further step, and no late step outcome.
            self._body_over = True

    async def _call_workflow_in_time(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        deadline = self._deadline()
        remaining = None if deadline is None else (deadline - self._clock.now()).total_seconds()
        if deadline is not None and remaining is not None and remaining <= 0:
            raise DeadlineExceeded(f"the workflow's deadline passed at {deadline.isoformat()}")
        # A sync workflow gets a thread of its own, not one of the loop's pool: it blocks
        # while its steps run, and those may need the pool's threads.
        call = (
            self._workflow.fn(*args, **kwargs)
            if self.is_async
            else in_daemon_thread(
                self._workflow.fn, args, kwargs, name=f"durably-run-{self.run_id}"
            )
        )
        if deadline is None or remaining is None:
            return await call
        message = f"the workflow's deadline passed at {deadline.isoformat()}"
        return await _within(call, remaining, lambda: DeadlineExceeded(message))

    # -- steps --------------------------------------------------------------------------

    async def call_step(self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """A step call from the workflow: replay its recorded outcome or run it for real."""
        self._check_body_may_go_on()
        assert self._phase is not None
        position = self._position
        self._position += 1
        action = next_action(self._phase.steps, position, step.name)
        if isinstance(action, Replay):
            return self._replayed(step, action.record)
        try:
            input_json = encode_call(args, kwargs, step.fn, what=f"step {step.name!r}")
            key = step.options.key(*args, **kwargs) if step.options.key else None
        except Exception as exc:
            raise StepFailed(step.name, ErrorInfo.of(exc).error_class, str(exc)) from None
        key = str(key) if key is not None else step_key(self.run_id, position, step.name)
        await self._before_new_work()
        await self._enter_gate(step, position)
        scope = StepScope(self.run_id, position, step.name, action.attempt, key)
        data = json.dumps({"key": key})[:-1] + f', "input": {input_json}}}'
        self._append(EventKind.STEP_STARTED, position, step.name, action.attempt, data)
        first_started_at = action.first_started_at or self._pending[-1].at
        await self._flush()
        unknown = action.unknown
        failed_for_breaker = False
        try:
            if unknown and step.reconcile_fn is not None:
                found = await self._call_user(step.reconcile_fn, args, kwargs, scope, step)
                self._append(EventKind.STEP_RECONCILED, position, step.name, action.attempt,
                             json.dumps({"found": found is not None}))  # fmt: skip
                if found is not None:
                    return self._completed(step, position, action.attempt, found)
            unknown = False  # with no reconcile hook the body runs again, same key
            value = await self._call_body(step, args, kwargs, scope)
        except Exception as exc:
            policy = step.options.retry or self._app.default_retry
            failed_for_breaker = classify(exc, policy).retryable  # a business "no" is not
            self._attempt_failed(step, scope, exc, unknown, first_started_at)
        finally:
            await self._leave_gate(step, position, failed=failed_for_breaker)
        return self._completed(step, position, action.attempt, value)

    async def _call_body(
        self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any], scope: StepScope
    ) -> Any:
        faults = self._app.faults
        if faults is not None:
            faults.before(step.name, step.options.dependency)
        value = await self._call_user(step.fn, args, kwargs, scope, step)
        if faults is not None:
            faults.after(step.name, step.options.dependency)
        return value

    async def _enter_gate(self, step: Step, position: int) -> None:
        """Before an attempt at a protected dependency: take a slot and a token, or wait
        (durably: the run is handed back until then, and no attempt is spent)."""
        name = step.options.dependency
        if name is None:
            return
        change = entering(
            self._app.dependency_policy(name),
            holder=f"{self.run_id}:{position}",
            now=self._clock.now(),
            hold=step.options.timeout or _DEFAULT_HOLD,
        )
        answer = await self._committer.call(
            functools.partial(self._app.store.update_gate, name, change)
        )
        if isinstance(answer, Wait):
            data = {"waiting": answer.reason, "dependency": name, "until": answer.until.isoformat()}
            self._append(EventKind.STEP_WAITING, position, step.name, None, json.dumps(data))
            raise _Suspend(answer.until)

    async def _leave_gate(self, step: Step, position: int, *, failed: bool) -> None:
        name = step.options.dependency
        if name is None:
            return
        change = leaving(
            self._app.dependency_policy(name),
            holder=f"{self.run_id}:{position}",
            now=self._clock.now(),
            failed=failed,
        )
        await self._committer.call(functools.partial(self._app.store.update_gate, name, change))

    def _check_body_may_go_on(self) -> None:
        if self.lost or self.closed or self._body_over:
            raise _Abandoned(f"run {self.run_id!r}: this workflow body no longer runs here")

    def call_step_blocking(self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """A step call from a sync workflow, which runs in a thread of its own."""
        future = asyncio.run_coroutine_threadsafe(self.call_step(step, args, kwargs), self._loop)
        return future.result()

    def _completed(self, step: Step, position: int, attempt: int, value: Any) -> Any:
        self._check_body_may_go_on()  # an outcome that comes too late is not recorded
        what = f"the result of step {step.name!r}"
        try:
            result = encode(value, step.return_hint, what=what)
        except PayloadError as exc:
            error = ErrorInfo.of(exc)
            self._append(
                EventKind.STEP_FAILED,
                position,
                step.name,
                attempt,
                error_data(error, reason="terminal"),
            )
            raise StepFailed(step.name, error.error_class, error.message) from None
        self._append(EventKind.STEP_COMPLETED, position, step.name, attempt, result)
        # The workflow sees what a replay would see: the value after a JSON round trip.
        return decode(result, step.return_hint, what=what)

    def _attempt_failed(
        self, step: Step, scope: StepScope, exc: Exception, unknown: bool, first: datetime
    ) -> None:
        """Record a failed attempt; raise StepFailed (given up) or _Suspend (retry later)."""
        self._check_body_may_go_on()
        policy = step.options.retry or self._app.default_retry
        error = ErrorInfo.of(exc)
        unknown = unknown or isinstance(exc, StepTimeout)
        decision: Any = GiveUp("terminal")
        if isinstance(exc, Escalated):
            reason = "escalated"
        else:
            now = self._clock.now()
            decision = decide(policy, classify(exc, policy), attempt=scope.attempt,
                              first_attempt_at=first, now=now, rng=self._rng)  # fmt: skip
            reason = decision.reason if isinstance(decision, GiveUp) else ""
        if reason:
            data = error_data(error, reason=reason, attempts=scope.attempt)
            self._append(EventKind.STEP_FAILED, scope.position, scope.name, scope.attempt, data)
            raise StepFailed(step.name, error.error_class, error.message, reason) from exc
        due: datetime = decision.due
        data = error_data(error, retry_at=due.isoformat(), unknown=unknown)
        self._append(EventKind.STEP_ATTEMPT_FAILED, scope.position, scope.name, scope.attempt, data)
        log.info(
            "run %s: step %s attempt %d failed (%s), retry at %s",
            *(self.run_id, step.name, scope.attempt, error.error_class, due.isoformat()),
        )
        raise _Suspend(due)

    def _replayed(self, step: Step, record: StepRecord) -> Any:
        if record.completed:
            assert record.result is not None
            what = f"the recorded result of step {step.name!r}"
            return decode(record.result, step.return_hint, what=what)
        assert record.error is not None
        raise StepFailed(
            step.name, record.error.error_class, record.error.message, record.failure_reason
        )

    async def _call_user(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        scope: StepScope,
        step: Step,
    ) -> Any:
        """Call a step body (or its reconcile or compensation hook) within its timeout."""
        token = _step.set(scope)
        try:
            timeout = step.options.timeout
            if inspect.iscoroutinefunction(fn):
                call = fn(*args, **kwargs)
            else:  # a thread nobody joins: a hung body is abandoned after its timeout, and a
                # stopping worker does not wait for it (its run is handed back)
                call = in_daemon_thread(fn, args, kwargs, name=f"durably-step-{step.name}")
            if timeout is None:
                return await call
            message = f"step {step.name!r} attempt ran past its timeout of {timeout}"
            return await _within(call, timeout.total_seconds(), lambda: StepTimeout(message))
        finally:
            _step.reset(token)

    # -- compensation -------------------------------------------------------------------

    async def _compensate(self, error: ErrorInfo, final: RunStatus) -> None:
        """Undo completed steps in reverse order, each durably and with retries, then end."""
        phase = fold_run(self._events)
        if phase.compensating is None:
            self._append(EventKind.COMPENSATING, data=error_data(error, then=str(final)))
        for record in reversed(phase.steps):
            if record.completed and record.position not in phase.compensated:
                step = self._app.step_named(record.name)
                if step is not None and step.compensate_fn is not None:
                    attempt = phase.compensation_attempts.get(record.position, 0) + 1
                    if not await self._compensate_step(step, record, attempt):
                        return
        kind = EventKind.RUN_FAILED
        await self._finish(final, kind, error=error)

    async def _compensate_step(self, step: Step, record: StepRecord, attempt: int) -> bool:
        assert step.compensate_fn is not None
        started = json.loads(record.started or "{}")
        what = f"the recorded input of step {step.name!r}"
        args, kwargs = decode_call(json.dumps(started.get("input", {})), step.fn, what=what)
        # the undo takes the step's parameters, however they were passed, then the result
        bound = inspect.signature(step.fn).bind(*args, **kwargs)
        bound.apply_defaults()
        result = decode(record.result or "null", step.return_hint, what=what)
        key = f"{started.get('key', step_key(self.run_id, record.position, step.name))}:undo"
        scope = StepScope(self.run_id, record.position, step.name, attempt, key)
        position, name = record.position, step.name
        await self._before_new_work()
        self._append(
            EventKind.COMPENSATION_STARTED, position, name, attempt, json.dumps({"key": key})
        )
        await self._flush()
        try:
            undo = step.compensate_fn
            await self._call_user(undo, [*bound.args, result], bound.kwargs, scope, step)
        except Exception as exc:
            policy = step.options.retry or self._app.default_retry
            error = ErrorInfo.of(exc)
            now = self._clock.now()
            decision = decide(policy, classify(exc, policy), attempt=attempt,
                              first_attempt_at=now, now=now, rng=self._rng)  # fmt: skip
            if isinstance(decision, GiveUp):
                data = error_data(error, reason=decision.reason, attempts=attempt)
                self._append(EventKind.COMPENSATION_FAILED, position, name, attempt, data)
                message = (
                    f"compensation of step {name!r} failed ({decision.reason}): {error.message}"
                )
                parked = ErrorInfo(error.error_class, message)
                await self._park(
                    RunStatus.COMPENSATION_FAILED, parked, reason="compensation failed"
                )
                return False
            data = error_data(error, retry_at=decision.due.isoformat())
            self._append(EventKind.COMPENSATION_ATTEMPT_FAILED, position, name, attempt, data)
            raise _Suspend(decision.due) from exc
        self._append(EventKind.COMPENSATION_COMPLETED, position, name, attempt)
        return True

    # -- writing ------------------------------------------------------------------------

    def _append(
        self,
        kind: EventKind,
        position: int | None = None,
        name: str | None = None,
        attempt: int | None = None,
        data: str | None = None,
    ) -> None:
        event = Event(self._next_seq, kind, self._clock.now(), position, name, attempt, data)
        self._pending.append(event)
        self._events.append(event)
        self._next_seq += 1

    async def _flush(
        self,
        status: RunStatus | None = None,
        *,
        result: str | None = None,
        error: ErrorInfo | None = None,
        available_at: datetime | None = None,
    ) -> None:
        events, self._pending = tuple(self._pending), []
        checkpoint = Checkpoint(
            self.run_id, self.epoch, events, status, result, error, available_at
        )
        try:
            committed = await self._committer.commit(checkpoint)
        except Exception as exc:  # the engine failed, not the workflow: stop, keep nothing
            self.lost = True
            raise _CheckpointFailed(exc) from exc
        if not committed:
            self.lost = True
            raise LeaseLost(
                f"run {self.run_id!r}: lease epoch {self.epoch} was taken over by another worker; "
                "this worker's writes are refused"
            )

    async def _finish(
        self,
        status: RunStatus,
        kind: EventKind,
        *,
        result: str | None = None,
        error: ErrorInfo | None = None,
    ) -> None:
        self._append(kind, data=None if error is None else error_data(error))
        await self._flush(status, result=result, error=error)
        if error is not None:
            log.info(
                "run %s ended %s: %s: %s", self.run_id, status, error.error_class, error.message
            )

    async def _park(self, status: RunStatus, error: ErrorInfo, *, reason: str) -> None:
        """Stop and wait for a person: the run joins the dead-letter list."""
        self._append(EventKind.RUN_PARKED, data=error_data(error, reason=reason))
        await self._flush(status, error=error)
        log.warning(
            "run %s parked (%s): %s: %s", self.run_id, reason, error.error_class, error.message
        )

    async def release(self) -> None:
        """Hand back a run this worker claimed but never started (it waited to run alone)."""
        await self._release()

    async def _release(self) -> None:
        """Hand the run back (worker stopping): keep what is pending, due again at once."""
        self._append(EventKind.RELEASED)
        with contextlib.suppress(LeaseLost):
            await self._flush(RunStatus.PENDING, available_at=self._clock.now())

    def _deadline(self) -> datetime | None:
        if self._workflow.deadline is None or not self._events:
            return None
        return self._events[0].at + self._workflow.deadline

    def _due(self, due: datetime) -> datetime:
        """A wait ends at its due time, or at the deadline if that comes first."""
        deadline = self._deadline()
        if deadline is not None and (self._phase is None or self._phase.compensating is None):
            return min(due, deadline)
        return due


async def _within(call: Awaitable[Any], seconds: float, expired: Callable[[], Exception]) -> Any:
    """Await `call` for at most `seconds`, then raise `expired()`. A TimeoutError that the
    call raises by itself passes through as it is."""
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await call
    except TimeoutError:
        if not limit.expired():
            raise
    raise expired()
