"""Asking a run a query (durably.query): the run and its history are read from the store, and
answered by this process from the app's code (durably.runtime.queries), without a worker and
without writing anything to the store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durably.codec.encoding import encode
from durably.durations import Duration, parse_duration
from durably.errors import ConfigError, RunNotFound
from durably.runtime.queries import Answer, answer
from durably.stores import Store
from durably.workflow.registry import Registry

__all__ = ["Answer", "ask", "encoded_args", "registry_of"]


def ask(
    store: Store,
    registry: Registry,
    run_id: str,
    name: str,
    args: str = "[]",
    *,
    timeout: Duration | None = None,
) -> Answer:
    """The answer of run `run_id` to the query `name`, with `args` (a JSON list)."""
    limit = None if timeout is None else parse_duration(timeout, what="the query's timeout")
    run = store.get_run(run_id) if "\x00" not in run_id else None
    if run is None:
        raise RunNotFound(f"no run has the id {run_id!r} in {store.url}")
    return answer(registry, run, store.history(run_id), name, args, timeout=limit)


def encoded_args(name: str, args: Sequence[Any]) -> str:
    """A query's arguments, given as Python values, as the JSON list `ask` takes: each must
    be a JSON value that reads back unchanged (the handler's hints type it on the way in)."""
    return encode(list(args), what=f"the arguments of query {name!r}", path="args")


def registry_of(definitions: object) -> Registry:
    """The app's code a client knows (an App, or its Registry): a query replays it."""
    if isinstance(definitions, Registry):
        return definitions
    registry = getattr(definitions, "registry", None)
    if isinstance(registry, Registry):
        return registry
    raise ConfigError(
        "a query replays the run against the app's code, and this client has none: ask "
        "through the app (app.client, a handle from app.start) or pass --app module:app"
    )
