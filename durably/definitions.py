"""Workflow and step definitions: what the decorators return."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from durably.codec import return_hint
from durably.runtime.context import current_execution

__all__ = ["Step", "Workflow"]


class Workflow:
    """A function registered as a workflow. Calling it directly just calls the function."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = name
        self.is_async = inspect.iscoroutinefunction(fn)
        self.return_hint = return_hint(fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<durably workflow {self.name!r}>"


class Step:
    """A function registered as a step.

    Inside an async workflow a call returns an awaitable; inside a sync workflow it returns
    the value. Outside any workflow it is a plain call of the function.
    """

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.name = name
        self.is_async = inspect.iscoroutinefunction(fn)
        self.return_hint = return_hint(fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        execution = current_execution()
        if execution is None:
            return self.fn(*args, **kwargs)
        if execution.is_async:
            return execution.call_step(self, args, kwargs)
        return execution.call_step_blocking(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<durably step {self.name!r}>"
