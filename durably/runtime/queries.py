"""Answering a query: the run's history, read from its store, is replayed against the app's
code in a throwaway store (a rehearsal: durably.runtime.rehearsals, where no step, timer or
child runs for real), and the handler its code registered under the query's name
(durably.workflow.queries) is called where the replay stopped: after the last call the
history records, or at the end of a finished run. The run's own store is only read, so a
query never changes a run, and any process with the app's code can answer one, with or
without a worker.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durably.codec.encoding import decode, decode_call, encode, return_hint
from durably.codec.parameters import parameters_of
from durably.core.history import Event, error_class_name
from durably.core.names import check_name
from durably.errors import (
    DurablyError,
    NonDeterminismError,
    PayloadError,
    QueryFailed,
    QueryRefused,
    UnknownQuery,
    UnknownWorkflow,
)
from durably.runtime.rehearsals import rehearse, replayable
from durably.stores import NewRun, RunRecord
from durably.workflow.context import answering
from durably.workflow.queries import Handlers, collecting
from durably.workflow.registry import Registry

__all__ = ["Answer", "answer"]


@dataclass(frozen=True, slots=True)
class Answer:
    """A query's answer: the handler's value (read back from its JSON, as a run's result is)
    and its JSON text. `calls`: the calls (steps, timers, waits, ...) the replay went through
    before the handler was called."""

    name: str
    value: Any
    text: str
    calls: int


def answer(
    registry: Registry,
    run: RunRecord,
    events: Sequence[Event],
    name: str,
    args: str = "[]",
    *,
    timeout: timedelta | None = None,
) -> Answer:
    """Ask run `run` (with its history `events`) the query `name`, passing the handler `args`
    (a JSON list). The replay and the handler run in a thread of their own: TimeoutError once
    `timeout` passes, and the replay is abandoned (it ends by itself, writing to nothing but
    its throwaway store). The errors, each saying what to do, are in durably.errors: see
    `_replay_and_ask` and `_call`."""
    check_name(name, "a query's name")
    _check_code(registry, run)
    given = _given_args(args, name)
    outcome: list[Answer | BaseException] = []

    def ask() -> None:
        try:
            outcome.append(_replay_and_ask(registry, run, events, name, given))
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome.append(exc)

    thread = threading.Thread(target=ask, name=f"durably-query-{run.id}", daemon=True)
    thread.start()
    thread.join(None if timeout is None else timeout.total_seconds())
    if not outcome:
        raise TimeoutError(
            f"query {name!r} of run {run.id!r} got no answer within {timeout}: its replay "
            f"({len(events)} events) was abandoned; ask again with a longer timeout"
        )
    [result] = outcome
    if isinstance(result, BaseException):
        raise result
    return result


def _check_code(registry: Registry, run: RunRecord) -> None:
    """The app's code for the run's workflow runs the run's version: else UnknownWorkflow."""
    workflow = registry.workflow_named(run.workflow)  # UnknownWorkflow naming the known ones
    if run.version is not None and run.version not in workflow.serves:
        served = ", ".join(sorted(workflow.serves))
        raise UnknownWorkflow(
            f"run {run.id!r} is pinned to version {run.version} of workflow {run.workflow!r}, "
            f"and this app's code runs versions {served}: ask the query from a process that "
            "has the code of that version (or declare it with versions=[...] on the "
            "workflow's decorator if this code still follows its runs)"
        )


def _given_args(args: str, name: str) -> list[Any]:
    try:
        given = json.loads(args)
    except ValueError as exc:
        raise PayloadError(f"the arguments of query {name!r} are not JSON: {exc}") from None
    if not isinstance(given, list):
        raise PayloadError(
            f"the arguments of query {name!r} must be a JSON list (the handler's arguments "
            f"by position), not {type(given).__name__}"
        )
    return given


def _replay_and_ask(
    registry: Registry, run: RunRecord, events: Sequence[Event], name: str, given: list[Any]
) -> Answer:
    """Replay the run with its handlers collected, then call the one named `name`."""
    history = replayable(events)
    with collecting(run.id) as handlers:
        calls = 0
        if history:  # a run with no history yet has run none of its code
            [rehearsal] = rehearse(registry, [(NewRun(run.id, run.workflow, run.input), events)])
            problem, calls = rehearsal.problem, rehearsal.calls
            if problem is not None and rehearsal.incompatible:
                raise NonDeterminismError(
                    position=-1,
                    recorded="",
                    called="",
                    why=f"the code answering the query differs from the code of run "
                    f"{run.id!r}: {problem.message}",
                )
            if problem is not None:
                raise DurablyError(
                    f"the replay of run {run.id!r} for query {name!r} stopped early: "
                    f"{problem.error_class}: {problem.message}"
                )
    handler = _handler(handlers, name, calls)
    value = _call(handler, name, given)
    hint = return_hint(handler)
    what = f"the answer of query {name!r}"
    text = encode(value, hint, what=what)
    return Answer(name, decode(text, hint, what=what), text, calls)


def _handler(handlers: Handlers, name: str, calls: int) -> Callable[..., Any]:
    found = handlers.found.get(name)
    if found is not None:
        return found
    names = ", ".join(sorted(handlers.found)) or "none"
    raise UnknownQuery(
        f"run {handlers.run_id!r} registered no query handler named {name!r} by the point "
        f"its replay reached (after {calls} recorded calls); registered by then: {names}. "
        "A handler registered later in the workflow's code can be asked once the run gets "
        "past the line that registers it"
    )


def _call(handler: Callable[..., Any], name: str, given: list[Any]) -> Any:
    """The handler's value for the arguments `given`, read through its parameters' hints."""
    what = f"query {name!r}"
    args, _ = decode_call(json.dumps({"args": given, "kwargs": {}}), handler, what=what)
    parameters = parameters_of(handler)
    if not parameters.fits(args, {}):
        parameters.bind(args, {}, what=what)
    token = answering.set(name)
    try:
        return handler(*args)
    except QueryRefused:
        raise
    except Exception as exc:
        raise QueryFailed(name, error_class_name(type(exc)), str(exc)) from exc
    finally:
        answering.reset(token)
