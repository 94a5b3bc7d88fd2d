"""Queries: a workflow's answer to "what is your state now?", asked from outside the run.

Workflow code registers a handler with `@durably.query`; it closes over the body's local
variables. Registering records nothing in the history and takes no position, so adding a
handler never changes how a run in flight replays. While a run executes on a worker the
decorator does nothing else; when a query is answered (durably.runtime.queries), the run's
history is replayed in a throwaway store and the handlers its code registers on the way are
collected here, to be called where the replay stopped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from durably.core.names import check_name
from durably.errors import ConfigError
from durably.workflow.context import here

__all__ = ["Handlers", "collecting", "query"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Handlers:
    """The query handlers the code of run `run_id` registered during its replay, by name (a
    later registration under a name replaces an earlier one, as a rebinding would)."""

    run_id: str
    found: dict[str, Callable[..., Any]] = field(default_factory=dict)


# Set around a query's replay: every task and thread its worker starts sees the same Handlers.
_collecting: ContextVar[Handlers | None] = ContextVar("durably_query_handlers", default=None)


@contextmanager
def collecting(run_id: str) -> Iterator[Handlers]:
    """Within it, the handlers the code of run `run_id` registers are kept in what it yields
    (a child run replayed alongside keeps its own to itself)."""
    handlers = Handlers(run_id)
    token = _collecting.set(handlers)
    try:
        yield handlers
    finally:
        _collecting.reset(token)


@overload
def query(fn: F, /) -> F: ...


@overload
def query(fn: str | None = None, /, *, name: str | None = None) -> Callable[[F], F]: ...


def query(fn: F | str | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Register a query handler in workflow code: `@durably.query` (named after the function)
    or `@durably.query("name")`. The handler is a plain `def` that reads the body's variables
    and returns a JSON value; it may take JSON arguments. Ask it with `handle.query(name)`,
    `durably runs query` or the HTTP API. It must not act: a durable call in it (a step,
    durably.sleep, ...) raises durably.QueryRefused."""
    if isinstance(fn, str):
        return query(name=fn)
    if fn is None:
        return lambda handler: _register(handler, name)
    return _register(fn, name)


def _register(handler: F, name: str | None) -> F:
    execution = here("query")
    chosen = check_name(
        name if name is not None else getattr(handler, "__name__", ""), "a query's name"
    )
    if inspect.iscoroutinefunction(handler) or not callable(handler):
        raise ConfigError(
            f"the query handler {chosen!r} must be a plain function (def, not async def): it "
            "reads the workflow's variables and returns; it awaits nothing"
        )
    handlers = _collecting.get()
    if handlers is not None and handlers.run_id == execution.run_id:
        handlers.found[chosen] = handler
    return handler
