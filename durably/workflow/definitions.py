"""Workflow and step definitions: what the decorators return."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from durably.codec.encoding import encode_call, return_hint
from durably.core.retry import Retry
from durably.core.schedules import Spec
from durably.errors import ConfigError
from durably.workflow.context import current_execution, in_step, refuse_in_query
from durably.workflow.versions import code_version, source_tokens

__all__ = ["Schedule", "Step", "StepOptions", "Workflow"]


class Workflow:
    """A function registered as a workflow. Called from another workflow, it runs as a child
    run; called anywhere else, it just calls the function."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: str,
        *,
        deadline: timedelta | None = None,
        max_recoveries: int | None = None,
        priority: int | None = None,
        version: str | None = None,
        versions: Collection[str] = (),
        queue: str | None = None,
    ) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = name
        self.deadline = deadline
        self.max_recoveries = max_recoveries  # None: the app's
        # its runs' priority when their start names none (None: 0, or a child's parent's)
        self.priority = priority
        self._version = version  # None: a hash of its code (durably.workflow.versions)
        # its source, read now: the file may change on disk before the version is first used
        self._tokens = source_tokens(fn) if version is None else ()
        self.versions = tuple(versions)  # older versions this code runs too
        self.queue = queue  # its runs' queue when their start names none (None: the default)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.return_hint = return_hint(fn)

    @functools.cached_property
    def version(self) -> str:
        """The version its runs are pinned to at start: the one given, or a hash of its code
        as it was loaded (computed on first use, once the steps it calls are defined)."""
        return self._version or code_version(self.fn, _registered_name, tokens=self._tokens)

    @property
    def serves(self) -> frozenset[str]:
        """The versions of its runs this code runs: its own, and the older ones declared."""
        return frozenset((self.version, *self.versions))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """From workflow code: start it as a child run and wait for its result (await it in
        an async workflow); a ChildFailed if the child does not complete. Anywhere else (a
        test, a step): a plain call of the function."""
        execution = current_execution()
        if execution is None:
            refuse_in_query(f"the workflow {self.name!r}")
        if execution is None or in_step():
            return self.fn(*args, **kwargs)
        return execution.children.call(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<durably workflow {self.name!r}>"


@dataclass(frozen=True, slots=True)
class StepOptions:
    retry: Retry | None = None  # None: the app's default
    timeout: timedelta | None = None  # per attempt
    key: Callable[..., str] | None = None  # idempotency key from the step's arguments
    dependency: str | None = None  # the outside service it calls, for breakers and limits
    # whose account at that service a call uses, from the step's arguments: each its own gate
    dependency_key: Callable[..., str] | None = None
    heartbeat_timeout: timedelta | None = None  # lost once its heartbeats stop this long
    # @app.transaction: the body writes through durably.connection() in the transaction
    # that records its outcome (durably.runtime.transactions)
    transactional: bool = False

    @property
    def heartbeat_seconds(self) -> float | None:
        timeout = self.heartbeat_timeout
        return None if timeout is None else timeout.total_seconds()


class Step:
    """A function registered as a step.

    Inside an async workflow a call returns an awaitable; inside a sync workflow it returns
    the value. Outside any workflow it is a plain call of the function.
    """

    def __init__(
        self, fn: Callable[..., Any], name: str, options: StepOptions | None = None
    ) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = name
        self.options = options or StepOptions()
        self.is_async = inspect.iscoroutinefunction(fn)
        self.return_hint = return_hint(fn)
        self.compensate_fn: Callable[..., Any] | None = None
        self.reconcile_fn: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        execution = current_execution()
        if execution is None:
            refuse_in_query(f"the step {self.name!r}")
            return self.fn(*args, **kwargs)
        if execution.is_async:
            return execution.call_step(self, args, kwargs)
        return execution.call_step_blocking(self, args, kwargs)

    def compensation(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register the undo of this step: called with the step's arguments and its result."""
        self.compensate_fn = fn
        return fn

    def reconcile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Register "did it already happen?": called with the step's arguments before an
        attempt that follows an unknown one (timed out, or its worker died). Return the
        result if the effect happened (the body is not run), or None to run the body."""
        if self.options.transactional:
            raise ConfigError(
                f"transactional step {self.name!r} takes no reconcile hook: its writes commit "
                "with its outcome or not at all, so no attempt of it is ever unknown"
            )
        self.reconcile_fn = fn
        return fn

    def __repr__(self) -> str:
        return f"<durably step {self.name!r}>"


def _registered_name(thing: object) -> str | None:
    return thing.name if isinstance(thing, Step | Workflow) else None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A workflow started on a schedule (@app.schedule): when (`spec`), and with what."""

    name: str
    workflow: Workflow
    spec: Spec
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None
    tick: str | None = None  # the workflow's parameter that gets the tick's time

    def input(self, at: datetime) -> str:
        """The input of the run of the tick at `at`, encoded for the workflow."""
        kwargs = dict(self.kwargs or {})
        if self.tick is not None:
            kwargs[self.tick] = at
        what = f"schedule {self.name!r}"
        return encode_call(self.args, kwargs, self.workflow.fn, what=what)
