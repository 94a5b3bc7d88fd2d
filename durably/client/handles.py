"""A handle on one run, as `App.start` returns it: its status and, once it ends, its result,
through the client that made it."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

from durably.client.client import Client
from durably.client.outcomes import DEFAULT_POLL
from durably.client.queries import encoded_args
from durably.core.status import RunStatus
from durably.durations import Duration

__all__ = ["RunHandle"]


class RunHandle:
    """A run, seen from outside: its status and, once it ends, its result."""

    def __init__(self, client: Client, run_id: str) -> None:
        self.client = client
        self.id = run_id

    def status(self) -> RunStatus:
        return self.client.get(self.id).status

    async def status_async(self) -> RunStatus:
        """`status` from an event loop: the store call runs in a thread."""
        return (await asyncio.to_thread(self.client.get, self.id)).status

    def result(self, timeout: Duration | None = None, *, poll: Duration = DEFAULT_POLL) -> Any:
        """Wait for the run to end and return its result; raise WorkflowFailed if it failed.

        The store says when the run ends (LISTEN/NOTIFY on PostgreSQL, a local socket on
        SQLite); the run is also read again every `poll` in case that word is lost. A store
        outage is waited out like a run still in progress: with a timeout, the TimeoutError
        names the last store error; with none, it keeps waiting."""
        record = self.client.wait(self.id, timeout=timeout, poll=poll)
        return self.client.outcome(record)

    async def result_async(
        self,
        timeout: Duration | None = None,  # noqa: ASYNC109 (result()'s own, on the loop too)
        *,
        poll: Duration = DEFAULT_POLL,
    ) -> Any:
        """`result` from an event loop, without blocking it: the store calls run in a
        thread, and the wait for the run's end is on the loop."""
        record = await self.client.wait_async(self.id, timeout=timeout, poll=poll)
        return self.client.outcome(record)

    def query(self, name: str, *args: Any, timeout: Duration | None = None) -> Any:
        """Ask the run the query `name` (a handler its workflow registered with
        `@durably.query`), passing it `args` (JSON values): its value as the run's state
        stands at its last checkpoint, or at its end. The run's history is replayed in this
        process against the app's code, running no step and changing nothing; the cost grows
        with the history. TimeoutError once `timeout` passes (the replay is abandoned)."""
        text = encoded_args(name, args)
        return self.client.ask(self.id, name, text, timeout=timeout).value

    async def query_async(
        self,
        name: str,
        *args: Any,
        timeout: Duration | None = None,  # noqa: ASYNC109 (query()'s own, in its thread)
    ) -> Any:
        """`query` from an event loop: the replay runs in a thread."""
        return await asyncio.to_thread(functools.partial(self.query, name, *args, timeout=timeout))

    def __repr__(self) -> str:
        return f"<RunHandle {self.id!r}>"
