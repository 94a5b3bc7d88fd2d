"""Runs a workflow begins: child runs (`start_child`, or a workflow called from another)
and its own next generation (`continue_as_new`). The engine's side is runtime/children.py and
runtime/generations.py."""

from __future__ import annotations

from typing import Any, NoReturn

from durably.core.names import check_run_id
from durably.core.priority import check_priority
from durably.errors import DurablyError
from durably.workflow.context import Execution, durable_call, here
from durably.workflow.definitions import Workflow

__all__ = ["ChildHandle", "continue_as_new", "start_child"]


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
        return durable_call(
            "result", lambda ex: ex.children.result(self.run_id, workflow), awaited=True
        )

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
    if id is not None:
        check_run_id(id)
    if priority is not None:
        check_priority(priority, what="durably.start_child(priority=...)")

    def start(execution: Execution) -> ChildHandle:
        children = execution.children
        started = children.start(
            workflow, args, kwargs, run_id=id, detached=detached, priority=priority
        )
        return ChildHandle(started, workflow)

    return durable_call("start_child", start, awaited=True)


def continue_as_new(*args: Any, **kwargs: Any) -> NoReturn:
    """End this run's workflow body here and begin the run again, under the same id, with
    these arguments and a fresh history: a loop that runs for months keeps a short history.
    What was sent to the run and not used yet (signals no wait took) goes along; its
    deadline, parent and id stay. Children it started and did not see end are cancelled,
    unless started detached. Call it last, in place of returning; `except Exception` does
    not catch it."""
    here("continue_as_new").continue_as_new(args, kwargs)
