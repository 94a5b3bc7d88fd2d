"""Compensation: when a run fails, is cancelled, is given up or passes its deadline, the undo
of each completed step runs in reverse order of completion, each durably (started, then
completed or failed, in the history) and with the step's retry policy, before the run ends."""

from __future__ import annotations

import inspect
import json
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from durably.clock import Clock
from durably.codec.encoding import decode, decode_call, encode
from durably.core.event_data import encode_payload, read_payload
from durably.core.history import ErrorInfo, EventKind
from durably.core.payloads import (
    Compensating,
    CompensationAttemptFailed,
    CompensationFailed,
    CompensationStarted,
    StepReconciled,
    StepStarted,
)
from durably.core.replay import StepRecord, fold_run, owed_undos
from durably.core.retry import GiveUp, classify, decide
from durably.core.secrets import secrets_in_text
from durably.core.status import RunStatus
from durably.errors import MissingCompensation, PayloadError
from durably.runtime.attempts import call_user
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.engine import Engine
from durably.runtime.flow import Suspend
from durably.runtime.lineage import cancel_children
from durably.workflow.context import StepScope

if TYPE_CHECKING:
    from durably.workflow.definitions import Step

__all__ = ["Compensation"]

_DID_NOT_HAPPEN = object()  # a reconcile hook found no effect of the unknown attempt


class Compensation:
    def __init__(
        self,
        writer: HistoryWriter,
        engine: Engine,
        rng: random.Random,
        before_new_work: Callable[[], Awaitable[None]],
    ) -> None:
        self._writer = writer
        self._engine = engine
        self._clock: Clock = engine.settings.clock
        self._rng = rng
        self._before_new_work = before_new_work  # called before each undo starts

    async def run(self, error: ErrorInfo, final: RunStatus) -> None:
        """Undo completed steps in reverse order, each durably and with retries, then end
        the run in `final` (or park it, if an undo fails for good or cannot run). A step
        whose outcome is unknown (its worker died, it was cut off in flight, it timed out) is
        resolved first: its reconcile hook says whether it happened, else its undo runs
        anyway (with no result), since its effect may be in the world."""
        phase = fold_run(self._writer.events)
        if phase.compensating is None:
            data = encode_payload(Compensating(error, final))
            self._writer.append(EventKind.COMPENSATING, data=data)
            writer = self._writer  # its children still running are undone with it
            writer.outbox += cancel_children(writer.run_id, writer.events, _why(final, error))
        for record in owed_undos(phase):
            step = self._engine.registry.step_named(record.name)
            if step is None or (step.compensate_fn is None and _had_undo(record)):
                await self._cannot_undo(record, registered=step is not None)
                return
            if step.compensate_fn is None:
                continue  # nothing to undo
            due = phase.compensation_retry_at.get(record.position)
            if due is not None and due > self._clock.now():
                raise Suspend(due)  # claimed early (a message): no early attempt
            attempt = phase.compensation_attempts.get(record.position, 0) + 1
            if not await self._undo(step, record, attempt):
                return
        end = EventKind.RUN_CANCELLED if final is RunStatus.CANCELLED else EventKind.RUN_FAILED
        await self._writer.finish(final, end, error=error)

    async def _undo(self, step: Step, record: StepRecord, attempt: int) -> bool:
        """One attempt at one step's undo: True once done; False if the run was parked."""
        assert step.compensate_fn is not None
        writer, position, name = self._writer, record.position, step.name
        if record.started is None:  # the engine starts every step it completes
            raise PayloadError(f"step {name!r} (#{position}) completed but was never started")
        started = read_payload(record.started, StepStarted)
        what = f"the recorded input of step {name!r}"
        args, kwargs = decode_call(json.dumps(started.input), step.fn, what=what)
        # the undo takes the step's parameters, however they were passed, then the result
        bound = inspect.signature(step.fn).bind(*args, **kwargs)
        bound.apply_defaults()
        key = f"{started.key}:undo"
        scope = StepScope(writer.run_id, position, name, attempt, key)
        await self._before_new_work()
        data = encode_payload(CompensationStarted(key))
        writer.append(EventKind.COMPENSATION_STARTED, position, name, attempt, data)
        await writer.flush()
        hooks = self._engine.settings.hooks
        try:
            if record.completed:
                result = decode(record.result or "null", step.return_hint, what=what)
            else:  # its outcome is unknown
                reconciled = await self._reconcile(step, record, started, args, kwargs)
                if reconciled is _DID_NOT_HAPPEN:
                    writer.append(EventKind.COMPENSATION_COMPLETED, position, name, attempt)
                    return True
                result = reconciled
            await call_user(step.compensate_fn, [*bound.args, result], bound.kwargs, scope, step)
        except Exception as exc:
            if hooks is not None:
                hooks.compensation_attempted(writer.run_id, name, attempt, exc)
            return await self._failed(step, record, attempt, exc)
        if hooks is not None:
            hooks.compensation_attempted(writer.run_id, name, attempt, None)
        writer.append(EventKind.COMPENSATION_COMPLETED, position, name, attempt)
        return True

    async def _reconcile(
        self,
        step: Step,
        record: StepRecord,
        started: StepStarted,
        args: list[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """Whether the unknown attempt at `record` happened: its reconcile hook's answer (a
        found result is recorded as the step's, for its undo), _DID_NOT_HAPPEN if the hook
        found nothing, or None (no hook: the undo runs with no result, to be safe)."""
        if step.reconcile_fn is None:
            return None
        position, attempt = record.position, record.attempts
        scope = StepScope(self._writer.run_id, position, step.name, attempt, started.key)
        found = await call_user(step.reconcile_fn, args, kwargs, scope, step)
        data = encode_payload(StepReconciled(found is not None))
        self._writer.append(EventKind.STEP_RECONCILED, position, step.name, attempt, data)
        if found is None:
            return _DID_NOT_HAPPEN
        what = f"the result of step {step.name!r} its reconcile hook found"
        result = encode(found, step.return_hint, what=what)
        self._writer.append(EventKind.STEP_COMPLETED, position, step.name, attempt, result)
        return decode(result, step.return_hint, what=what)

    async def _cannot_undo(self, record: StepRecord, *, registered: bool) -> None:
        """The step's undo cannot run in this code: park the run for a person, who deploys
        code that registers it (then retries) or undoes the step by hand (then skips it)."""
        name, position = record.name, record.position
        missing = "its compensation" if registered else "no step of that name"
        error = ErrorInfo.of(
            MissingCompensation(
                f"step {name!r} (#{position}) {_effect(record)}, but {missing} is registered in "
                f"the code that runs this run, so its undo cannot run: deploy code that registers "
                f"it and retry (durably dlq retry {self._writer.run_id}), or undo it by hand and "
                f"skip it (durably dlq skip {self._writer.run_id})"
            )
        )
        data = encode_payload(CompensationFailed(error, "not registered", 0))
        self._writer.append(EventKind.COMPENSATION_FAILED, position, name, None, data)
        await self._writer.park(RunStatus.COMPENSATION_FAILED, error, reason="compensation failed")

    async def _failed(self, step: Step, record: StepRecord, attempt: int, exc: Exception) -> bool:
        policy = step.options.retry or self._engine.settings.default_retry
        # the step's recorded input and result hold what the undo was given
        given = [record.started.data if record.started else None, record.result]
        error = ErrorInfo.raised(exc, [found for text in given for found in secrets_in_text(text)])
        now = self._clock.now()
        decision = decide(
            policy,
            classify(exc, policy),
            attempt=attempt,
            first_attempt_at=now,
            now=now,
            rng=self._rng,
        )
        position, name = record.position, step.name
        if isinstance(decision, GiveUp):
            data = encode_payload(CompensationFailed(error, decision.reason, attempt))
            self._writer.append(EventKind.COMPENSATION_FAILED, position, name, attempt, data)
            message = f"compensation of step {name!r} failed ({decision.reason}): {error.message}"
            parked = ErrorInfo(error.error_class, message)
            await self._writer.park(
                RunStatus.COMPENSATION_FAILED, parked, reason="compensation failed"
            )
            return False
        data = encode_payload(CompensationAttemptFailed(error, decision.due))
        self._writer.append(EventKind.COMPENSATION_ATTEMPT_FAILED, position, name, attempt, data)
        raise Suspend(decision.due) from exc


def _had_undo(record: StepRecord) -> bool:
    """Whether the step had a compensation when it started (older histories do not say)."""
    return record.started is not None and read_payload(record.started, StepStarted).undo


def _effect(record: StepRecord) -> str:
    return "completed" if record.completed else "may have taken effect (its outcome is unknown)"


def _why(final: RunStatus, error: ErrorInfo) -> str:
    """What a child is told when its parent starts undoing its steps."""
    ended = "was cancelled" if final is RunStatus.CANCELLED else f"ends {final}"
    return f"its parent run {ended} ({error.error_class}: {error.message})"
