"""The app's ways to start runs and follow them (`App` is a `Starting`): start, start_async,
start_many, start_many_async and handle, each a call of the app's client that answers a
RunHandle. Its keyword options name what a start says besides the workflow's arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from durably.client.client import Client
from durably.client.handles import RunHandle
from durably.client.starts import Start
from durably.durations import Duration
from durably.workflow.definitions import Workflow

__all__ = ["Starting"]


class Starting:
    """Starting runs through `client`; the handles it answers follow them."""

    client: Client

    def start(
        self,
        workflow: Workflow | str,
        /,
        *args: Any,
        id: str | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        delay: Duration | None = None,
        start_at: datetime | None = None,
        attributes: Mapping[str, str] | None = None,
        debounce: Duration | None = None,
        debounce_key: str | None = None,
        max_wait: Duration | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """Start a run, or return the existing one if a run with this `id` exists already.
        `priority` (0 to 1,000; default: the workflow's, else 0): claimed ahead of lower
        runs that became due up to that many minutes before it (durably.core.priority).
        `correlation_id`: recorded with the run and its children (durably.client.correlation).
        `queue`, `key`, `delay`, `start_at`, `attributes`, `debounce`, `debounce_key`,
        `max_wait`: see `Client.start`. These words name options, not the workflow's
        arguments: a workflow with a parameter of one of these names is started with
        `app.client.start(workflow, args, kwargs, ...)`."""
        given = (id, priority, correlation_id, queue, key, delay, start_at, attributes)
        start = Start(workflow, args, kwargs, *given, debounce, debounce_key, max_wait)
        return RunHandle(self.client, self.client.start_one(start).run.id)

    def start_many(self, starts: Sequence[Start]) -> list[RunHandle]:
        """Start a batch of runs in one transaction (see `Client.start_many`); their
        handles in order."""
        return [
            RunHandle(self.client, started.run.id) for started in self.client.start_many(starts)
        ]

    async def start_async(
        self,
        workflow: Workflow | str,
        /,
        *args: Any,
        id: str | None = None,
        priority: int | None = None,
        correlation_id: str | None = None,
        queue: str | None = None,
        key: str | None = None,
        delay: Duration | None = None,
        start_at: datetime | None = None,
        attributes: Mapping[str, str] | None = None,
        debounce: Duration | None = None,
        debounce_key: str | None = None,
        max_wait: Duration | None = None,
        **kwargs: Any,
    ) -> RunHandle:
        """`start` from an event loop: the store call runs in a thread."""
        given = (id, priority, correlation_id, queue, key, delay, start_at, attributes)
        start = Start(workflow, args, kwargs, *given, debounce, debounce_key, max_wait)
        started = await self.client.start_one_async(start)
        return RunHandle(self.client, started.run.id)

    async def start_many_async(self, starts: Sequence[Start]) -> list[RunHandle]:
        """`start_many` from an event loop: the store call runs in a thread."""
        started = await self.client.start_many_async(starts)
        return [RunHandle(self.client, each.run.id) for each in started]

    def handle(self, run_id: str) -> RunHandle:
        """A handle on an existing run."""
        self.client.get(run_id)
        return RunHandle(self.client, run_id)
