"""Executing one claimed run: replaying its history, running new steps, checkpointing.

A step's start is committed before its body runs. Its outcome is appended to the pending
events and committed together with the next step's start (or the run's end): the code
between two steps is deterministic and has no side effects, so the outcome is durable
before anything else can happen in the world. That is one commit per step, not two.

A failed attempt that will be retried writes its due time and hands the run back (the
wait is durable: any worker picks the run up when it is due, and replays to that step).

The parts, each in a module of its own: writing the history behind the lease fence
(checkpoints), a step call run for real (steps), one attempt of user code and its retry
decision (attempts), breakers and limits (admission), undoing completed steps
(compensation), unwinding (flow).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from durably.codec.encoding import decode_call, encode
from durably.core import event_data, payloads
from durably.core.children import lineage
from durably.core.control import Control, Request, cancel_error, fold_control
from durably.core.history import ErrorInfo, EventKind
from durably.core.payloads import Decision
from durably.core.replay import (
    Replay,
    RunPhase,
    StepRecord,
    check_known,
    fold_run,
    next_action,
    next_wait,
    progressed,
)
from durably.core.secrets import secrets_in_text
from durably.core.status import RunStatus
from durably.errors import (
    DeadlineExceeded,
    LeaseLost,
    NonDeterminismError,
    PayloadError,
    PoisonPill,
    StepFailed,
    UnsafeConcurrency,
)
from durably.runtime import body, fanout, generations, takeovers
from durably.runtime.admission import Gates
from durably.runtime.approvals import await_approval
from durably.runtime.attempts import (
    replayed,
)
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.children import Children
from durably.runtime.committer import Committer
from durably.runtime.compensation import Compensation
from durably.runtime.engine import Engine
from durably.runtime.flow import (
    Abandoned,
    Cancelling,
    CheckpointFailed,
    ContinueAsNew,
    Pause,
    Suspend,
    WaitForPerson,
)
from durably.runtime.interrupts import Interrupts
from durably.runtime.outputs import RunOutputs
from durably.runtime.patches import Patches
from durably.runtime.steps import StepRunner
from durably.runtime.updates import Updates
from durably.runtime.waits import Waits
from durably.stores.records import Claim, Delivery
from durably.workflow.context import (
    ReplayFrontier,
    _execution,
    call_scope,
)
from durably.workflow.people import ApprovalCall

if TYPE_CHECKING:
    from durably.workflow.definitions import Step

__all__ = ["RunExecution"]

log = logging.getLogger("durably.execution")
T = TypeVar("T")

_ALONE_REASON = "a worker died while running it"
_NEXT_SUSPECT = event_data.encode_payload(
    payloads.Released("ran alone past where its worker died; others wait")
)


class RunExecution:
    """One worker's turn at one run, under one lease epoch."""

    def __init__(
        self, claim: Claim, engine: Engine, committer: Committer, loop: asyncio.AbstractEventLoop
    ) -> None:
        settings = engine.settings
        self.run_id = claim.run_id
        # step keys and child ids: the run's id, and its generation once it continued as new
        self.call_scope = call_scope(claim.run_id, generations.generation(claim.events))
        self.workflow_name = claim.workflow  # for the logs (durably.observability.logs)
        self.epoch = claim.epoch
        self.suspended = False  # handed back to wait (until wake_at; None: for a message)
        self.wake_at: datetime | None = None
        self._claim = claim
        self._engine = engine
        self._workflow = engine.registry.workflow_named(claim.workflow)
        self.is_async = self._workflow.is_async
        self.priority = claim.priority
        self._clock = settings.clock
        self._limit = settings.max_payload  # bytes an input or result may take as JSON
        self._hooks = settings.hooks
        self._loop = loop
        seed = None if settings.seed is None else f"{settings.seed}:{claim.run_id}:{claim.epoch}"
        self._rng = random.Random(seed)
        self._writer = HistoryWriter(
            claim, committer, self._clock, settings.hooks, on_lost=self._stop_everything
        )
        self._committer = committer
        self._compensation = Compensation(self._writer, engine, self._rng, self.before_new_work)
        self.waits = Waits(self._writer, self._clock, self.place)
        family = lineage(claim.events)
        limit, inherited = self._workflow.deadline, family.deadline  # a child's, its parent's
        own = claim.events[0].at + limit if limit is not None and claim.events else None
        # the workflow's deadline, or its parent's if that comes first (a child run's)
        self.deadline = min(own, inherited) if own and inherited else own or inherited
        self.correlation_id = family.correlation_id  # for the logs, and its children
        self.trace_parent = family.trace_parent  # for the traces (observability.tracing)
        self.children = Children(self, self._writer, engine.registry, lambda: self.deadline)
        self.patches = Patches(self._writer, self._where)
        store = engine.store
        self.outputs = RunOutputs(
            self._writer,
            committer,
            lambda writes, now: store.append_stream(claim.run_id, claim.epoch, writes, now=now),
            self._clock,
            loop,
            generation=generations.generation(claim.events),
        )
        self.updates = Updates(self._writer, self.outputs)
        self._phase: RunPhase | None = None
        self.control = Control()  # what people asked of the run (cancel, pause), so far
        self.interrupts = Interrupts()  # async step bodies a cancel cancels
        self.gathering = 0  # durably.gather calls under way: its checkpoints come in batches
        self._branches = fanout.Branches(is_async=self.is_async)
        gates = Gates(engine, committer, self._clock)
        self._steps = StepRunner(self, self._writer, engine, gates, self._rng, loop)
        self._position = 0
        self.closed = False
        self._body_over = False  # the workflow body returned, raised or passed its deadline
        # Set by the worker for a run taken over from a dead worker: nothing else runs in
        # this process until the run gets past the point where that worker died.
        self.alone = False
        self.strict = False  # set by the worker: a worker died among suspects run together
        self._others = 0  # suspects started together with this one
        self._after_alone: Callable[[], bool] = lambda: False

    @property
    def lost(self) -> bool:
        """The lease is gone: write nothing more."""
        return self._writer.lost

    @lost.setter
    def lost(self, value: bool) -> None:
        self._writer.lost = value

    def run_alone(self, after: Callable[[], bool], *, others: int = 0) -> None:
        """Run with no run but other suspects (`others` of them, started together) in this
        process until past the point of the last death. `after()` is called then; True means
        other suspects wait for their turn, so this run is handed back rather than kept."""
        self.alone = True
        self._others = others
        self._after_alone = after

    def _stop_everything(self) -> None:
        """A write was refused (the lease is gone) or failed: stop the run's async step
        bodies in flight, all branches of a gather too, by cancelling the run's task at the
        loop's next turn (the refusal itself may be unwinding through that task now)."""
        main = self._branches.main
        if main is not None and not main.done():
            self._loop.call_soon(main.cancel)

    async def run(self) -> None:
        """Drive the run to its end, a wait, or until the lease is lost or the worker stops."""
        token = _execution.set(self)
        self._branches.main = asyncio.current_task()
        try:
            await self._drive()
        except Pause as pause:
            await self._stop_for(pause.request)
            self.suspended = True
        except WaitForPerson as wait:
            self.wake_at = self._due(wait.due)
            await self._writer.wait_for_person(wait.why, wake_at=self.wake_at)
            self.suspended = True
        except Suspend as wait:
            taken_in = self.control.pause
            if taken_in is not None and self.control.cancel is None:  # a pause came meanwhile
                await self._stop_for(taken_in)  # the wait's due time is in the history
            else:
                self.wake_at = self._due(wait.due)
                await self._writer.flush(RunStatus.PENDING, available_at=self.wake_at)
            self.suspended = True
        except LeaseLost as exc:
            self.lost = True
            log.warning("run %s: %s", self.run_id, exc)
        except Abandoned as exc:  # a body that ran on after its lease was lost: said already
            log.info("run %s: %s", self.run_id, exc)
        except CheckpointFailed as exc:
            log.error("run %s: %s; it is retried when its lease expires", self.run_id, exc)
        except ReplayFrontier:  # a replay test got to code that would run for real: stop
            self.suspended = True
        except asyncio.CancelledError:
            if not self.lost:
                await asyncio.shield(self._writer.release())
            raise
        finally:
            self.closed = True
            _execution.reset(token)

    async def _stop_for(self, pause: Request) -> None:
        """Stop `paused`, unless a resume or a cancel came since the worker last read the
        run's messages: then hand it back due now, and the next claim goes on."""
        read = functools.partial(self._engine.store.mail, [self.run_id])
        self.deliver((await self._committer.call(read)).get(self.run_id, ()))
        if self.control.pause is None or self.control.cancel is not None:
            self.wake_at = self._clock.now()
            await self._writer.flush(RunStatus.PENDING, available_at=self.wake_at)
        else:
            await self._writer.pause(pause)

    async def release(self) -> None:
        """Hand back a run this worker claimed but never started (it waited to run alone)."""
        await self._writer.release()

    @property
    def cancel_requested(self) -> bool:
        return self.control.cancel is not None

    def deliver(self, inbox: Sequence[Delivery]) -> None:
        """Messages sent to the run while this worker holds it: folded into the history (its
        next checkpoint commits them). A cancel cancels the async step bodies in flight; a
        pause lets them finish, and stops the run before its next step."""
        if self.closed or self.lost or not self._writer.receive(inbox):
            return
        self.control = fold_control(self._writer.events)
        if self.control.cancel is not None:
            self.interrupts.cancel_run()

    async def _drive(self) -> None:
        try:
            self._writer.receive(self._claim.inbox)
            check_known(self._writer.events)
            phase = self._phase = fold_run(self._writer.events)
            self.control = control = fold_control(self._writer.events)
            if control.cancel is not None and phase.compensating is None:
                await self._compensation.run(cancel_error(control.cancel), RunStatus.CANCELLED)
                return
            if control.pause is not None and control.cancel is None:  # a cancel wins
                raise Pause(control.pause)
            limit = self._workflow.max_recoveries
            takeovers.check_poison(
                phase, self._engine.settings.max_recoveries if limit is None else limit
            )
            takeovers.record_lost_attempts(self._writer, phase)
            if self.alone:
                alone = payloads.RunningAlone(_ALONE_REASON, self._others)
                self._writer.append(EventKind.RUNNING_ALONE, data=event_data.encode_payload(alone))
                await self._writer.flush()
            if phase.compensating is not None:
                final = RunStatus(phase.final_status or "failed")
                await self._compensation.run(phase.compensating, final)
                return
            what = f"run {self.run_id!r}"
            stored, fn, limit = self._claim.input, self._workflow.fn, self._limit
            args, kwargs = decode_call(stored, fn, what=what, limit=limit)
            try:
                value = await self._call_workflow(args, kwargs)
            except ContinueAsNew as new:
                self.check_control()  # a cancel or a pause comes first
                self.wake_at = await generations.continue_as_new(
                    self._writer,
                    new.input,
                    deadline=self.deadline,
                    clock=self._clock,
                    version=self._workflow.version,
                )
                self.suspended = True
                return
            if self.control.cancel is not None:  # the body let a cancel pass and returned
                raise Cancelling(self.control.cancel)
        except (NonDeterminismError, UnsafeConcurrency, PayloadError, PoisonPill) as exc:
            error = ErrorInfo.of(exc)
            await self._writer.park(RunStatus.NEEDS_ATTENTION, error, reason=type(exc).__name__)
            return
        except StepFailed as exc:
            if self.control.cancel is not None:  # it failed because it was cancelled
                await self._compensation.run(cancel_error(self.control.cancel), RunStatus.CANCELLED)
            elif exc.reason != "terminal":  # a person decides: retry, skip, or fail
                error = ErrorInfo.of(exc)
                # unless the workflow's deadline comes first: it wakes the run to time out
                deadline = self.deadline
                wake = deadline if deadline and deadline > self._clock.now() else None
                await self._writer.park(
                    RunStatus.NEEDS_ATTENTION, error, reason=exc.reason, wake_at=wake
                )
            else:
                await self._compensation.run(ErrorInfo.of(exc), RunStatus.FAILED)
            return
        except DeadlineExceeded as exc:
            await self._compensation.run(ErrorInfo.of(exc), RunStatus.TIMED_OUT)
            return
        except Cancelling as cancelling:
            await self._compensation.run(cancel_error(cancelling.request), RunStatus.CANCELLED)
            return
        except (LeaseLost, asyncio.CancelledError, Suspend, CheckpointFailed):
            raise
        except Exception as exc:  # the workflow's own code failed (an assert too): no retry
            cancel = self.control.cancel
            if cancel is not None:
                await self._compensation.run(cancel_error(cancel), RunStatus.CANCELLED)
            else:
                error = ErrorInfo.raised(exc, self.input_secrets)
                name = self._workflow.name
                log.warning("run %s: workflow %s failed: %s", self.run_id, name, error.report())
                await self._compensation.run(error, RunStatus.FAILED)
            return
        await self._complete(value)

    @property
    def input_secrets(self) -> list[str]:
        """The secrets in the run's input (durably.core.secrets): kept out of the messages of
        the errors it records. Read on a failure only, never on the way to success."""
        return secrets_in_text(self._claim.input)

    async def _complete(self, value: Any) -> None:
        workflow = self._workflow
        what = f"the result of workflow {workflow.name!r}"
        try:
            result = encode(value, workflow.return_hint, what=what, limit=self._limit)
        except PayloadError as exc:
            await self._compensation.run(ErrorInfo.of(exc), RunStatus.FAILED)
            return
        self.children.end_with_parent()
        await self._writer.finish(RunStatus.COMPLETED, EventKind.RUN_COMPLETED, result=result)

    def check_control(self) -> None:
        """Before the workflow body goes on (a step, a durable call): stop it if a person
        cancelled or paused the run meanwhile."""
        control = self.control
        if control.cancel is not None:
            raise Cancelling(control.cancel)
        if control.pause is not None:
            raise Pause(control.pause)

    async def before_new_work(self) -> None:
        """Before a step or an undo starts: a paused run stops here. A run that ran alone and
        has an outcome to record is past the point where its last worker died: commit that
        proof, and let the worker run others again (handing this run back if other suspects
        wait for their turn)."""
        if self.control.pause is not None and self.control.cancel is None:  # a cancel wins
            raise Pause(self.control.pause)
        if not self.alone or not progressed(self._writer.pending):
            return
        await self._writer.flush()
        self.alone = False
        if self._after_alone():
            self._writer.append(EventKind.RELEASED, data=_NEXT_SUSPECT)
            raise Suspend(self._clock.now())

    async def _call_workflow(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """The body's value, once it returned having made every call its history records."""
        assert self._phase is not None
        try:
            call = body.call_body(
                self._workflow.fn,
                args,
                kwargs,
                is_async=self.is_async,
                deadline=self.deadline,
                now=self._clock.now(),
                thread_name=f"durably-run-{self.run_id}",
            )
            return await body.followed(call, self._phase.steps, lambda: self._position)
        finally:
            # From here on the workflow body has no say: a sync body still running in its
            # thread (past its deadline) gets no further step, and no late step outcome.
            self._body_over = True

    # -- steps --------------------------------------------------------------------------

    async def call_step(
        self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any], *, hide: str = ""
    ) -> Any:
        """A step call from the workflow: replay its recorded outcome or run it for real
        (runtime/steps.py). `hide`: a secret in the arguments (an approval's token), left out
        of the history."""
        self.check_body_may_go_on()
        self.check_control()
        self._branches.one_call(f"step {step.name!r}")
        assert self._phase is not None
        position = self._position
        self._position += 1
        action = next_action(self._phase.steps, position, step.name)
        self.updates.before_call(position, new=not isinstance(action, Replay))
        if isinstance(action, Replay):
            return replayed(step, action.record)
        return await self._steps.run(step, position, action, args, kwargs, hide=hide)

    def in_branch(self) -> bool:
        """Whether the code calling now runs in a durably.gather branch."""
        return self._branches.in_branch()

    def check_body_may_go_on(self) -> None:
        if self.lost or self.closed or self._body_over:
            raise Abandoned(f"run {self.run_id!r}: this workflow body no longer runs here")

    def call_step_blocking(self, step: Step, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """A step call from a sync workflow, which runs in a thread of its own."""
        return self.run_blocking(lambda: self.call_step(step, args, kwargs))

    def run_blocking(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run `make()` on the run's event loop and wait for it, from a sync workflow's thread."""
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result()

    def on_loop(self, call: Callable[[], T]) -> T:
        """`call()` on the run's event loop: at once from async workflow code, by a hop (and
        blocking) from a sync workflow's thread."""
        if self.is_async:
            return call()

        async def hop() -> T:
            return call()

        return asyncio.run_coroutine_threadsafe(hop(), self._loop).result()

    def clock_now(self) -> datetime:
        return self._clock.now()

    def continue_as_new(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> NoReturn:
        raise ContinueAsNew(generations.next_input(self._workflow, args, kwargs))

    async def gather(
        self,
        calls: list[Awaitable[Any]],
        *,
        limit: int | None,
        return_exceptions: bool,
        cancel_on_failure: bool,
    ) -> list[Any]:
        self.gathering += 1
        try:
            return await fanout.gather(
                self.interrupts,
                calls,
                limit=limit or self._engine.concurrency,
                return_exceptions=return_exceptions,
                cancel_on_failure=cancel_on_failure,
            )
        finally:
            self.gathering -= 1

    async def approval(self, ask: ApprovalCall) -> Decision:
        return await await_approval(self, self._writer, ask)

    def _where(self) -> tuple[int, bool]:
        """The body's next position, and whether the history holds calls from there on."""
        assert self._phase is not None
        return self._position, self._position < len(self._phase.steps)

    def peek(self, position: int) -> StepRecord | None:
        """What the history holds at `position`, if anything (the position is not taken)."""
        assert self._phase is not None
        steps = self._phase.steps
        return steps[position] if position < len(steps) else None

    def place(self, name: str) -> tuple[int, StepRecord | None]:
        """The next position, for a timer, signal wait, value or approval named `name`."""
        self.check_body_may_go_on()
        self.check_control()
        self._branches.one_call(name)
        assert self._phase is not None
        position = self._position
        self._position += 1
        record = next_wait(self._phase.steps, position, name)
        self.updates.before_call(position, new=record is None or not record.completed)
        return position, record

    # -- time ---------------------------------------------------------------------------

    def _due(self, due: datetime | None) -> datetime | None:
        """A wait ends at its due time, or at the deadline if that comes first."""
        deadline = self.deadline
        if deadline is not None and (self._phase is None or self._phase.compensating is None):
            return deadline if due is None else min(due, deadline)
        return due
