"""App: the registry of workflows and steps, and the client calls (start, result, runs)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, overload

from durably import operations
from durably.clock import Clock, SystemClock
from durably.codec import NO_HINT, decode, encode, encode_call
from durably.core.history import Event
from durably.core.status import FINAL, RunStatus
from durably.definitions import Step, StepOptions, Workflow
from durably.durations import Duration, parse_duration
from durably.errors import (
    ConfigError,
    RunConflict,
    RunNotFound,
    StoreUnavailable,
    UnknownWorkflow,
    WorkflowFailed,
)
from durably.resilience import Dependency
from durably.retry import Retry
from durably.runtime.worker import Worker
from durably.stores import NewRun, RunRecord, Store, open_store, resolve_url
from durably.testing import Faults

__all__ = ["App", "RunHandle"]

F = TypeVar("F", bound=Callable[..., Any])


class App:
    """Workflows and steps bound to one store.

    `store` is a URL (sqlite:///file.db, postgresql://...), a Store, or None for
    $DURABLY_STORE or ./durably.db. The store is opened on first use.
    """

    def __init__(
        self,
        store: str | Store | None = None,
        *,
        clock: Clock | None = None,
        default_retry: Retry | None = None,
        max_recoveries: int = 5,
        seed: int | None = None,
        faults: Faults | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.default_retry = default_retry or Retry()
        _check_recoveries(max_recoveries)
        self.max_recoveries = max_recoveries  # workers that may die under a run before parking
        self.seed = seed  # for the retry jitter; None: unpredictable
        self.faults = faults  # injected failures, for tests and the demo
        self._store: Store | None = store if not isinstance(store, str | None) else None
        self._url = None if self._store is not None else resolve_url(store)  # type: ignore[arg-type]
        self._open_lock = threading.Lock()
        self._workflows: dict[str, Workflow] = {}
        self._steps: dict[str, Step] = {}
        self._listeners: list[Callable[[], None]] = []
        self._dependencies: dict[str, Dependency] = {}

    # -- definitions --------------------------------------------------------------------

    @overload
    def workflow(self, fn: Callable[..., Any], /) -> Workflow: ...
    @overload
    def workflow(
        self,
        /,
        *,
        name: str | None = None,
        deadline: Duration | None = None,
        max_recoveries: int | None = None,
    ) -> Callable[[Callable[..., Any]], Workflow]: ...

    def workflow(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        deadline: Duration | None = None,
        max_recoveries: int | None = None,
    ) -> Workflow | Callable[[Callable[..., Any]], Workflow]:
        """Register a workflow. Its name (default: the function's) is what runs record.

        `deadline`: once this long has passed since the run started, it stops, its
        completed steps are compensated, and it ends `timed_out`. `max_recoveries`: how
        many workers may die under one of its runs before it is parked as a poison pill
        (default: the app's).
        """
        limit = None if deadline is None else parse_duration(deadline, what="deadline")
        _check_recoveries(max_recoveries)

        def register(fn: Callable[..., Any]) -> Workflow:
            chosen = _name_for(fn, name, self._workflows, "workflow")
            definition = Workflow(fn, chosen, deadline=limit, max_recoveries=max_recoveries)
            self._workflows[definition.name] = definition
            return definition

        return register if fn is None else register(fn)

    @overload
    def step(self, fn: Callable[..., Any], /) -> Step: ...
    @overload
    def step(
        self,
        /,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        key: Callable[..., str] | None = None,
        dependency: str | None = None,
    ) -> Callable[[Callable[..., Any]], Step]: ...

    def step(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: Duration | None = None,
        key: Callable[..., str] | None = None,
        dependency: str | None = None,
    ) -> Step | Callable[[Callable[..., Any]], Step]:
        """Register a step: a call whose outcome is checkpointed and never re-run once recorded.

        `retry`: its Retry policy (default: the app's). `timeout`: per attempt; a timed-out
        attempt is unknown and is reconciled before the next one. `key`: derive the
        idempotency key from the step's arguments (default: run id, position and name).
        `dependency`: the service it calls, for circuit breakers and limits.
        """
        options = StepOptions(
            retry=retry,
            timeout=None if timeout is None else parse_duration(timeout, what="timeout"),
            key=key,
            dependency=dependency,
        )

        def register(fn: Callable[..., Any]) -> Step:
            definition = Step(fn, _name_for(fn, name, self._steps, "step"), options)
            self._steps[definition.name] = definition
            return definition

        return register if fn is None else register(fn)

    def dependency(self, name: str, policy: Dependency) -> None:
        """Protect calls to the service `name` (steps with dependency=name): a circuit
        breaker shared by all workers, and optional rate and concurrency limits."""
        self._dependencies[name] = policy

    def dependency_policy(self, name: str) -> Dependency:
        """The policy for `name`; a dependency nobody configured gets a default breaker."""
        return self._dependencies.setdefault(name, Dependency())

    def step_named(self, name: str) -> Step | None:
        return self._steps.get(name)

    def workflow_names(self) -> list[str]:
        return list(self._workflows)

    def workflow_named(self, name: str) -> Workflow:
        try:
            return self._workflows[name]
        except KeyError:
            known = ", ".join(sorted(self._workflows)) or "none"
            raise UnknownWorkflow(
                f"no workflow named {name!r} is registered with this app (known: {known})"
            ) from None

    # -- client calls -------------------------------------------------------------------

    def start(
        self, workflow: Workflow | str, /, *args: Any, id: str | None = None, **kwargs: Any
    ) -> RunHandle:
        """Start a run, or return the existing one if a run with this `id` exists already."""
        definition = self.workflow_named(workflow if isinstance(workflow, str) else workflow.name)
        run_id = id or uuid.uuid4().hex
        payload = encode_call(args, kwargs, definition.fn, what=f"workflow {definition.name!r}")
        record, created = self.store.create_run(
            NewRun(run_id, definition.name, payload), now=self.clock.now()
        )
        if not created:
            _check_same_start(record, definition.name, payload)
        else:
            self._notify()
        return RunHandle(self, run_id)

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run."""
        self.get_run(run_id)
        return RunHandle(self, run_id)

    def get_run(self, run_id: str) -> RunRecord:
        record = self.store.get_run(run_id)
        if record is None:
            raise RunNotFound(f"no run has the id {run_id!r} in {self.store.url}")
        return record

    def runs(
        self, *, status: RunStatus | None = None, workflow: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        return self.store.runs(status=status, workflow=workflow, limit=limit)

    def history(self, run_id: str) -> list[Event]:
        self.get_run(run_id)
        return self.store.history(run_id)

    # -- a person's actions on parked runs (the dead-letter list) ----------------------

    def dead_letters(self, *, limit: int = 100) -> list[operations.DeadLetter]:
        """Runs parked for a person (needs_attention, compensation_failed), newest first."""
        return operations.dead_letters(self.store, limit=limit)

    def retry(self, run_id: str, *, from_step: int | None = None, by: str = "app") -> None:
        """Fresh attempts for a parked run, with the same idempotency keys."""
        operations.retry(self.store, run_id, now=self.clock.now(), by=by, from_step=from_step)
        self._notify()

    def skip_step(self, run_id: str, *, result: Any = None, by: str = "app") -> None:
        """Record `result` for the failed step (or answer an escalation); the run goes on."""
        # checked against the skipped step's return hint, as its own result would be
        name = operations.failed_step(self.store, run_id)
        step = None if name is None else self.step_named(name)
        hint = NO_HINT if step is None else step.return_hint
        result_json = encode(result, hint, what="the result given for the skipped step")
        operations.skip_step(
            self.store, run_id, now=self.clock.now(), by=by, result_json=result_json
        )
        self._notify()

    def fail(self, run_id: str, *, reason: str = "failed by a person", by: str = "app") -> None:
        """Give up on a parked run: its completed steps are compensated, then it fails."""
        operations.fail(self.store, run_id, now=self.clock.now(), by=by, reason=reason)
        self._notify()

    def worker(self, **options: Any) -> Worker:
        """A worker for this app (see Worker for the options)."""
        return Worker(self, **options)

    def run_until_idle(self, **options: Any) -> int:
        """Execute due runs in this process until none is left; return how many ended."""
        return Worker(self, **options).run_until_idle()

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` whenever this app starts a run; returns the unsubscribe call."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # -- the store ----------------------------------------------------------------------

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._open_lock:
                if self._store is None:
                    assert self._url is not None
                    self._store = open_store(self._url)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None if self._url is not None else self._store


class RunHandle:
    """A run, seen from outside: its status and, once it ends, its result."""

    def __init__(self, app: App, run_id: str) -> None:
        self.app = app
        self.id = run_id

    def status(self) -> RunStatus:
        return self.app.get_run(self.id).status

    def result(self, timeout: Duration | None = None) -> Any:
        """Wait for the run to end and return its result; raise WorkflowFailed if it failed.

        A store outage is waited out like a run still in progress: with a timeout, the
        TimeoutError names the last store error; with none, it keeps waiting."""
        deadline = (
            None if timeout is None else time.monotonic() + parse_duration(timeout).total_seconds()
        )
        pause = 0.002
        record: RunRecord | None = None
        while True:
            try:
                record, unavailable = self.app.get_run(self.id), None
            except StoreUnavailable as exc:  # the workers wait it out too
                unavailable = exc
            if unavailable is None and record is not None and record.status in FINAL:
                return self._outcome(record)
            if deadline is not None and time.monotonic() >= deadline:
                if unavailable is not None:
                    seen = "" if record is None else f" (last seen {record.status})"
                    raise TimeoutError(
                        f"run {self.id!r} could not be read after {timeout}{seen}; "
                        f"the last store error: {unavailable}"
                    )
                assert record is not None
                detail = (
                    ""
                    if record.error is None
                    else f" ({record.error.error_class}: {record.error.message})"
                )
                raise TimeoutError(
                    f"run {self.id!r} is still {record.status}{detail} after {timeout}"
                )
            time.sleep(
                pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic()))
            )
            pause = min(pause * 2, 0.1)

    def _outcome(self, record: RunRecord) -> Any:
        if record.status is RunStatus.COMPLETED:
            assert record.result is not None
            known = self.app._workflows.get(record.workflow)
            hint = NO_HINT if known is None else known.return_hint
            return decode(record.result, hint, what=f"the result of run {self.id!r}")
        error = record.error
        raise WorkflowFailed(
            self.id,
            record.status,
            error.error_class if error else "unknown",
            error.message if error else "",
        )

    def __repr__(self) -> str:
        return f"<RunHandle {self.id!r}>"


def _check_recoveries(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigError(
            f"max_recoveries must be a whole number of 0 or more, not {limit!r}: it is how many "
            "workers may die under one run before it is parked as a poison pill"
        )


def _name_for(fn: Callable[..., Any], name: str | None, taken: dict[str, Any], kind: str) -> str:
    chosen = name or getattr(fn, "__name__", "")
    if not chosen:
        raise ConfigError(f"a {kind} needs a name: pass name=...")
    if chosen in taken and taken[chosen].fn is not fn:
        raise ConfigError(
            f"two {kind}s are named {chosen!r}; give one of them another name with name=..."
        )
    return chosen


def _check_same_start(record: RunRecord, workflow: str, payload: str) -> None:
    same_input = record.input == payload or json.loads(record.input) == json.loads(payload)
    if record.workflow != workflow or not same_input:
        what = "workflow" if record.workflow != workflow else "input"
        raise RunConflict(
            f"a run with id {record.id!r} already exists with a different {what} "
            f"(workflow {record.workflow!r}, input {record.input}); starting it again with "
            f"workflow {workflow!r} and input {payload} would create a second run. Use another "
            "id, or app.handle(id) to follow the existing run."
        )
