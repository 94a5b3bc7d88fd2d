"""A step call run for real: its start recorded (with its idempotency key), its breakers
and limits passed, its reconcile hook asked after an unknown outcome, its body run under the
run's interrupts and heartbeats, and its outcome recorded: completed, failed (with the retry
decision), or cancelled.

RunExecution (runtime/execution.py) decides which call this is and whether the history holds
its outcome already; this module runs the ones it does not.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from durably.codec.encoding import encode_call
from durably.core import event_data, payloads
from durably.core.control import Control
from durably.core.history import ErrorInfo, EventKind
from durably.core.replay import Execute
from durably.core.retry import classify
from durably.core.secrets import REDACTED, secrets_in_text
from durably.errors import LeaseLost, StepFailed
from durably.runtime import transactions
from durably.runtime.admission import Gates, gate_name
from durably.runtime.attempts import (
    call_user,
    observed,
    record_cancelled,
    record_completed,
    record_failure,
)
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.engine import Engine
from durably.runtime.flow import Suspend
from durably.runtime.heartbeats import Heartbeats
from durably.runtime.interrupts import AttemptCancelled, Interrupts
from durably.runtime.outputs import RunOutputs, StepOutputs
from durably.workflow.context import StepScope, step_key

if TYPE_CHECKING:
    from durably.workflow.definitions import Step

__all__ = ["StepRunner"]

# A secret-bearing argument (an approval's request) that cannot be stored: said without it.
_UNPASSABLE = (
    "step {!r} cannot take the approval request ({}): annotate its parameter as "
    "durably.ApprovalRequest"
)


class Running(Protocol):
    """What a step call needs of the run it belongs to (a RunExecution)."""

    run_id: str
    call_scope: str
    control: Control
    interrupts: Interrupts
    outputs: RunOutputs

    @property
    def input_secrets(self) -> list[str]: ...

    def check_body_may_go_on(self) -> None: ...

    async def before_new_work(self) -> None: ...

    def in_branch(self) -> bool: ...


class StepRunner:
    """Runs one run's step calls for real, through its history writer."""

    def __init__(
        self,
        execution: Running,
        writer: HistoryWriter,
        engine: Engine,
        gates: Gates,
        rng: random.Random,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        settings = engine.settings
        self._execution = execution
        self._writer = writer
        self._engine = engine
        self._gates = gates
        self._clock = settings.clock
        self._limit = settings.max_payload  # bytes an input or result may take as JSON
        self._hooks = settings.hooks
        self._rng = rng  # the run's, for the retry jitter
        self._loop = loop

    async def run(
        self,
        step: Step,
        position: int,
        action: Execute,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        hide: str = "",
    ) -> Any:
        """Run the step at `position` for real, as `action` (from the history) says."""
        execution = self._execution
        if (why := execution.interrupts.doomed()) is not None:  # its gather failed: start nothing
            self._cancelled(step, position, None, why)
        if action.not_before is not None and action.not_before > self._clock.now():
            # Claimed before its retry is due, woken by a message: wait again, with no new
            # attempt.
            raise Suspend(action.not_before)
        try:
            what = f"step {step.name!r}"
            input_json = encode_call(args, kwargs, step.fn, what=what, limit=self._limit)
            if hide:
                input_json = input_json.replace(hide, REDACTED)
            key = step.options.key(*args, **kwargs) if step.options.key else None
            gate = gate_name(step.options, args, kwargs)
        except Exception as exc:
            message = str(exc) if not hide else _UNPASSABLE.format(step.name, type(exc).__name__)
            raise StepFailed(step.name, ErrorInfo.of(exc).error_class, message) from None
        key = str(key) if key is not None else step_key(execution.call_scope, position, step.name)
        await execution.before_new_work()
        await self._gates.enter(self._writer, step, position, gate)
        beats = Heartbeats(
            self._writer,
            self._loop,
            position=position,
            name=step.name,
            attempt=action.attempt,
            timeout=step.options.heartbeat_seconds,
            previous=action.heartbeat,
        )
        publisher = StepOutputs(execution.outputs, self._loop, position, action.attempt)
        scope = StepScope(
            execution.run_id, position, step.name, action.attempt, key, beats, outputs=publisher
        )
        data = event_data.step_started_data(key, input_json, undo=step.compensate_fn is not None)
        transactional = step.options.transactional
        if transactional:  # what came before commits first; its start goes with its outcome
            transactions.check_alone(step, concurrent=execution.in_branch())
            if self._writer.has_pending:
                await self._writer.flush()
        started = self._writer.append(
            EventKind.STEP_STARTED, position, step.name, action.attempt, data
        )
        first_started_at = action.first_started_at or started.at
        if not transactional:
            await self._writer.flush()
        unknown = action.unknown
        failed_for_breaker = False
        throttled_for = None
        try:
            if unknown and step.reconcile_fn is not None:
                found = await call_user(step.reconcile_fn, args, kwargs, scope, step)
                found_data = event_data.encode_payload(payloads.StepReconciled(found is not None))
                self._writer.append(
                    EventKind.STEP_RECONCILED, position, step.name, action.attempt, found_data
                )
                if found is not None:
                    return self._completed(step, position, action.attempt, found)
            unknown = False  # with no reconcile hook the body runs again, same key
            if execution.control.cancel is not None:  # it came while the reconcile hook ran
                self._cancelled(step, position, action.attempt, None)
            body = self._call_body(step, args, kwargs, scope)
            value = await execution.interrupts.run(position, body, is_async=step.is_async)
        except LeaseLost:
            raise
        except AttemptCancelled as cancelled:
            await beats.close(failed=True)
            execution.check_body_may_go_on()
            cut_off = cancelled.started and not transactional  # a transaction rolls back
            self._cancelled(step, position, action.attempt, cancelled.why, cut_off=cut_off)
        except Exception as exc:
            await beats.close(failed=True)  # its latest details go with the failure
            policy = step.options.retry or self._engine.settings.default_retry
            verdict = classify(exc, policy)
            failed_for_breaker = verdict.retryable  # a business "no" is not
            throttled_for = verdict.throttled_for  # a "slow down" is the rate limit's business
            execution.check_body_may_go_on()
            if execution.control.cancel is not None:  # it stopped for the cancel: no retry
                raised, cut_off = ErrorInfo.of(exc), not transactional
                self._cancelled(step, position, action.attempt, None, raised, cut_off=cut_off)
            record_failure(
                self._writer,
                step,
                scope,
                exc,
                unknown=unknown,
                first_started_at=first_started_at,
                policy=policy,
                clock=self._clock,
                rng=self._rng,
                hide=[hide, *secrets_in_text(input_json), *execution.input_secrets],
            )
        finally:
            await beats.close(failed=False)
            await self._gates.leave(
                execution.run_id,
                step,
                position,
                gate,
                failed=failed_for_breaker,
                throttled_for=throttled_for,
            )
        if transactional:  # its outcome is committed already
            return value
        return self._completed(step, position, action.attempt, value)

    def _cancelled(
        self,
        step: Step,
        position: int,
        attempt: int | None,
        why: ErrorInfo | None,
        raised: ErrorInfo | None = None,
        *,
        cut_off: bool = False,
    ) -> NoReturn:
        """The step call was cancelled: see attempts.record_cancelled (the run's cancel, if
        any, read now)."""
        cancel = self._execution.control.cancel
        record_cancelled(
            self._writer, cancel, step, position, attempt, why, raised, cut_off=cut_off
        )

    async def _call_body(
        self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any], scope: StepScope
    ) -> Any:
        if step.options.transactional:
            return await transactions.transact(
                step,
                args,
                kwargs,
                scope,
                writer=self._writer,
                store=self._engine.store,
                clock=self._clock,
                hooks=self._hooks,
            )
        if self._hooks is None:  # the usual case: no hook to tell
            return await call_user(step.fn, args, kwargs, scope, step)
        with observed(self._hooks, scope, step.options.dependency):
            return await call_user(step.fn, args, kwargs, scope, step)

    def _completed(self, step: Step, position: int, attempt: int, value: Any) -> Any:
        self._execution.check_body_may_go_on()  # an outcome that comes too late is not recorded
        return record_completed(self._writer, step, position, attempt, value, self._limit)
