"""Executing one claimed run: replaying its history, running new steps, checkpointing.

A step's start is committed before its body runs. Its outcome is appended to the pending
events and committed together with the next step's start (or the run's end): the code
between two steps is deterministic and has no side effects, so the outcome is durable
before anything else can happen in the world. That is one commit per step, not two.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from durably.clock import Clock
from durably.codec import decode, decode_call, encode, encode_call
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.replay import Replay, StepRecord, fold_steps, next_action
from durably.core.status import RunStatus
from durably.errors import LeaseLost, NonDeterminismError, PayloadError, StepFailed
from durably.runtime.context import StepScope, _execution, _step, step_key
from durably.stores.base import Checkpoint, Claim

if TYPE_CHECKING:
    from durably.definitions import Step, Workflow
    from durably.runtime.committer import Committer

__all__ = ["RunExecution"]

log = logging.getLogger("durably.execution")


class RunExecution:
    """One worker's turn at one run, under one lease epoch."""

    def __init__(
        self,
        claim: Claim,
        workflow: Workflow,
        committer: Committer,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.run_id = claim.run_id
        self.epoch = claim.epoch
        self.is_async = workflow.is_async
        self.lost = False  # the lease is gone: write nothing more
        self._claim = claim
        self._workflow = workflow
        self._committer = committer
        self._clock = clock
        self._loop = loop
        self._steps: list[StepRecord] = []
        self._next_seq = max((event.seq for event in claim.events), default=0) + 1
        self._pending: list[Event] = []
        self._position = 0

    async def run(self) -> None:
        """Drive the run to its end, or until the lease is lost or the worker stops."""
        token = _execution.set(self)
        try:
            await self._run()
        except LeaseLost as exc:
            self.lost = True
            log.warning("run %s: %s", self.run_id, exc)
        except asyncio.CancelledError:
            if not self.lost:
                await asyncio.shield(self._release())
            raise
        finally:
            _execution.reset(token)

    async def _run(self) -> None:
        name = self._workflow.name
        try:
            self._steps = fold_steps(self._claim.events)
            args, kwargs = decode_call(
                self._claim.input, self._workflow.fn, what=f"run {self.run_id!r}"
            )
            value = await self._call_workflow(args, kwargs)
        except (NonDeterminismError, PayloadError) as exc:
            await self._finish(
                RunStatus.NEEDS_ATTENTION, EventKind.RUN_PARKED, error=ErrorInfo.of(exc)
            )
            return
        except (LeaseLost, asyncio.CancelledError):
            raise
        except Exception as exc:  # the workflow failed: its own code or a step it did not catch
            await self._finish(RunStatus.FAILED, EventKind.RUN_FAILED, error=ErrorInfo.of(exc))
            return
        try:
            result = encode(value, what=f"the result of workflow {name!r}")
        except PayloadError as exc:
            await self._finish(RunStatus.FAILED, EventKind.RUN_FAILED, error=ErrorInfo.of(exc))
            return
        await self._finish(RunStatus.COMPLETED, EventKind.RUN_COMPLETED, result=result)

    async def _call_workflow(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if self.is_async:
            return await self._workflow.fn(*args, **kwargs)
        return await asyncio.to_thread(self._workflow.fn, *args, **kwargs)

    # -- steps --------------------------------------------------------------------------

    async def call_step(self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """A step call from the workflow: replay its recorded outcome or run it for real."""
        if self.lost:
            raise LeaseLost(f"run {self.run_id!r} is no longer leased by this worker")
        position = self._position
        self._position += 1
        action = next_action(self._steps, position, step.name)
        if isinstance(action, Replay):
            return self._replayed(step, action.record)
        try:
            input_json = encode_call(args, kwargs, what=f"step {step.name!r}")
        except PayloadError as exc:
            raise StepFailed(step.name, ErrorInfo.of(exc).error_class, str(exc)) from None
        key = step_key(self.run_id, position, step.name)
        scope = StepScope(self.run_id, position, step.name, action.attempt, key)
        started = json.dumps({"key": scope.key})[:-1] + f', "input": {input_json}}}'
        self._append(EventKind.STEP_STARTED, position, step.name, action.attempt, started)
        await self._flush()
        try:
            value = await self._run_body(step, args, kwargs, scope)
            result = encode(value, what=f"the result of step {step.name!r}")
        except Exception as exc:
            error = ErrorInfo.of(exc)
            data = json.dumps({"error_class": error.error_class, "message": error.message})
            self._append(EventKind.STEP_FAILED, position, step.name, action.attempt, data)
            raise StepFailed(step.name, error.error_class, error.message) from exc
        self._append(EventKind.STEP_COMPLETED, position, step.name, action.attempt, result)
        # The workflow sees what a replay would see: the value after a JSON round trip.
        return decode(result, step.return_hint, what=f"the result of step {step.name!r}")

    def call_step_blocking(self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """A step call from a sync workflow, which runs in a thread of its own."""
        future = asyncio.run_coroutine_threadsafe(self.call_step(step, args, kwargs), self._loop)
        return future.result()

    def _replayed(self, step: Step, record: StepRecord) -> Any:
        if record.completed:
            assert record.result is not None
            return decode(
                record.result, step.return_hint, what=f"the recorded result of step {step.name!r}"
            )
        assert record.error is not None
        raise StepFailed(step.name, record.error.error_class, record.error.message)

    async def _run_body(
        self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any], scope: StepScope
    ) -> Any:
        token = _step.set(scope)
        try:
            if step.is_async:
                return await step.fn(*args, **kwargs)
            return await asyncio.to_thread(step.fn, *args, **kwargs)
        finally:
            _step.reset(token)

    # -- writing ------------------------------------------------------------------------

    def _append(
        self,
        kind: EventKind,
        position: int | None = None,
        name: str | None = None,
        attempt: int | None = None,
        data: str | None = None,
    ) -> None:
        self._pending.append(
            Event(self._next_seq, kind, self._now(), position, name, attempt, data)
        )
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
        if not await self._committer.commit(checkpoint):
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
        data = (
            None
            if error is None
            else json.dumps({"error_class": error.error_class, "message": error.message})
        )
        self._append(kind, data=data)
        await self._flush(status, result=result, error=error)
        if error is not None:
            log.info(
                "run %s ended %s: %s: %s", self.run_id, status, error.error_class, error.message
            )

    async def _release(self) -> None:
        """Hand the run back (worker stopping): keep what is pending, due again at once."""
        self._append(EventKind.RELEASED)
        with contextlib.suppress(LeaseLost):
            await self._flush(RunStatus.PENDING, available_at=self._now())

    def _now(self) -> datetime:
        return self._clock.now()
