"""Child runs from a run's side: starting one (durably.start_child, or a workflow called from
a workflow) and waiting for its end.

A start takes the next position, like a step, and is recorded there (`child_started`); the
child run itself is created by the parent's next commit, in the same transaction
(`Checkpoint.starts`), so it exists exactly when the parent's history says it was started:
a worker that dies before that commit leaves neither, and its replay starts the child then;
one that dies after leaves both, and its replay finds the start recorded. Never two children
for one call.

The wait takes no position: it reads the child's end from the parent's history (the `child`
message the child's last commit sent, folded in), and until that is there the parent is
handed back, holding nothing, and woken by that message. It blocks until the end is known
and the end does not change, so a replay takes the same path whenever it runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from durably.codec.encoding import decode, encode_call
from durably.core.children import CHILD, ChildEnded, child_name
from durably.core.event_data import encode_payload, read_payload
from durably.core.history import EventKind
from durably.core.payloads import ChildStarted, MessageReceived, RunStarted
from durably.core.replay import StepRecord
from durably.core.status import RunStatus
from durably.errors import ChildFailed, DurablyError, PayloadError
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.flow import Suspend
from durably.runtime.lineage import cancel_children
from durably.stores.records import NewRun

if TYPE_CHECKING:
    from durably.workflow.definitions import Workflow
    from durably.workflow.registry import Registry

__all__ = ["Children"]

T = TypeVar("T")

_PARENT_COMPLETED = (
    "its parent run completed without waiting for its end (start it with detached=True to "
    "let it go on)"
)


class Run(Protocol):
    """What the children need of their parent's execution (a RunExecution)."""

    is_async: bool
    priority: int  # the run's: its children's, unless their start or workflow says otherwise
    correlation_id: str | None  # the run's: its children's
    call_scope: str  # what its children's default ids begin with (context.call_scope)
    trace_parent: str | None  # likewise

    def place(self, name: str) -> tuple[int, StepRecord | None]: ...

    def on_loop(self, call: Callable[[], T]) -> T: ...

    def check_control(self) -> None: ...


class Children:
    def __init__(
        self,
        run: Run,
        writer: HistoryWriter,
        registry: Registry,
        deadline: Callable[[], datetime | None],
    ) -> None:
        self._run = run
        self._writer = writer
        self._registry = registry
        self._deadline = deadline
        self._ended: dict[str, ChildEnded] = {}  # the children's ends read so far
        self._read = 0  # how many of the history's events were read for them

    def call(self, workflow: Workflow, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        """A workflow called from the workflow: started as a child run, its result awaited
        (in a sync workflow the call blocks until it is known)."""

        def call() -> Any:
            return self.result(self.start(workflow, args, kwargs), workflow)

        if not self._run.is_async:
            return self._run.on_loop(call)

        async def awaited() -> Any:
            return call()

        return awaited()

    def end_with_parent(self) -> None:
        """The parent completes: the children it started (not detached) and never saw end
        are cancelled, in the commit that ends it."""
        writer = self._writer
        writer.outbox += cancel_children(writer.run_id, writer.events, _PARENT_COMPLETED)

    def start(
        self,
        workflow: Workflow,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        run_id: str | None = None,
        detached: bool = False,
        priority: int | None = None,
    ) -> str:
        """Start `workflow` as a child run (or find the start recorded); its id. Its priority:
        `priority`, else its workflow's, else this run's."""
        self._check_registered(workflow)
        position, record = self._run.place(child_name(workflow.name))
        if record is not None:
            assert record.result is not None
            return str(json.loads(record.result)["run"])
        parent = self._writer.run_id
        scope = self._run.call_scope
        child = run_id if run_id is not None else f"{scope}.{position}.{workflow.name}"
        what = f"the input of child workflow {workflow.name!r}"
        try:
            input_json = encode_call(args, kwargs, workflow.fn, what=what)
        except PayloadError as exc:
            raise DurablyError(str(exc)) from None
        correlation = self._run.correlation_id
        started = RunStarted(
            parent=parent,
            deadline=self._deadline(),
            correlation_id=correlation,
            trace_parent=self._run.trace_parent,
        )
        given = (p for p in (priority, workflow.priority) if p is not None)
        new = NewRun(
            child,
            workflow.name,
            input_json,
            parent,
            encode_payload(started),
            priority=next(given, self._run.priority),
            version=workflow.version,
            correlation_id=correlation,
            queue=workflow.queue,
        )
        data = encode_payload(ChildStarted(child, workflow.name, detached))
        self._writer.append(
            EventKind.CHILD_STARTED, position, child_name(workflow.name), None, data
        )
        self._writer.starts += (new,)
        return child

    def result(self, run_id: str, workflow: Workflow) -> Any:
        """The child's result once it ended (ChildFailed if it did not complete); until then
        the run is handed back, to be woken by the child's end."""
        ended = self._end_of(run_id)
        if ended is None:
            self._run.check_control()  # a cancel or a pause stops the run rather than waiting
            raise Suspend(None)
        if ended.status is RunStatus.COMPLETED:
            what = f"the result of child run {run_id!r}"
            return decode(ended.result or "null", workflow.return_hint, what=what)
        error = ended.error
        raise ChildFailed(
            run_id,
            workflow.name,
            str(ended.status),
            "" if error is None else error.error_class,
            "" if error is None else error.message,
        )

    def _end_of(self, run_id: str) -> ChildEnded | None:
        events = self._writer.events
        for event in events[self._read :]:
            if event.kind is EventKind.MESSAGE_RECEIVED:
                message = read_payload(event, MessageReceived)
                if message.kind == CHILD and message.name is not None:
                    self._ended[message.name] = ChildEnded.of_message(message)
        self._read = len(events)
        return self._ended.get(run_id)

    def _check_registered(self, workflow: Workflow) -> None:
        known = self._registry.workflows.get(workflow.name)
        if known is None:
            raise DurablyError(
                f"{workflow!r} is not registered with this app, so no worker would run it as "
                "a child; decorate it with @app.workflow in the app the parent is registered in"
            )
