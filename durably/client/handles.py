"""A handle on one run, as `App.start` returns it: its status and, once it ends, its result,
through the client that made it."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from durably.client import updates
from durably.client.client import Client
from durably.client.outcomes import DEFAULT_POLL
from durably.client.published import MISSING
from durably.client.queries import encoded_args
from durably.core.outputs import Progress, StreamItem
from durably.core.status import RunStatus
from durably.core.updates import UPDATE_KIND, Answer, Request, answer_key
from durably.durations import Duration
from durably.errors import RunEnded

__all__ = ["RunHandle"]


def _dedupe(request: Request) -> str:
    return f"durably:update:{request.id}"  # the same update sent again is stored once


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

    # -- what the run publishes (durably.set_event, progress, write_stream) -------------

    def get_event(
        self,
        key: str,
        timeout: Duration | None = None,
        *,
        default: Any = MISSING,
        poll: Duration = DEFAULT_POLL,
    ) -> Any:
        """The latest value of the run's event `key` (durably.set_event), waiting until the
        run sets it: woken by the store, without polling (and reading again every `poll` in
        case that word is lost). If the run ends without setting it: EventNotSet; after
        `timeout`: TimeoutError; or, with `default=`, that value instead of either."""
        return self.client.published.get_event(
            self.id, key, timeout=timeout, default=default, poll=poll
        )

    async def get_event_async(
        self,
        key: str,
        timeout: Duration | None = None,  # noqa: ASYNC109 (get_event()'s own, on the loop too)
        *,
        default: Any = MISSING,
        poll: Duration = DEFAULT_POLL,
    ) -> Any:
        """`get_event` from an event loop: reads run in a thread, the wait is on the loop."""
        return await self.client.published.get_event_async(
            self.id, key, timeout=timeout, default=default, poll=poll
        )

    def events(self) -> dict[str, Any]:
        """The latest value of each event key the run set, by key."""
        return self.client.published.events(self.id)

    def progress(self) -> Progress | None:
        """How far the run got, as durably.progress said last (None: it never said)."""
        return self.client.published.progress(self.id)

    def read_stream(
        self,
        key: str,
        *,
        offset: int = 0,
        timeout: Duration | None = None,
        poll: Duration = DEFAULT_POLL,
    ) -> Iterator[Any]:
        """The values of the run's stream `key` (durably.write_stream), in order, as they
        are written, from `offset` on (0: the first), until the stream is closed or the run
        ends. TimeoutError after `timeout` without a new item. `stream_items` gives each
        item's offset too, to resume from after a break."""
        for item in self.stream_items(key, offset=offset, timeout=timeout, poll=poll):
            yield json.loads(item.value or "null")

    def stream_items(
        self,
        key: str,
        *,
        offset: int = 0,
        timeout: Duration | None = None,
        poll: Duration = DEFAULT_POLL,
    ) -> Iterator[StreamItem]:
        """`read_stream`'s items as stored: offset, value (JSON), the step attempt that
        wrote it (None: workflow code), when."""
        return self.client.published.stream(self.id, key, offset=offset, timeout=timeout, poll=poll)

    async def read_stream_async(
        self,
        key: str,
        *,
        offset: int = 0,
        timeout: Duration | None = None,  # noqa: ASYNC109 (read_stream()'s own)
        poll: Duration = DEFAULT_POLL,
    ) -> AsyncIterator[Any]:
        """`read_stream` for an event loop: `async for token in handle.read_stream_async(k)`."""
        async for item in self.stream_items_async(key, offset=offset, timeout=timeout, poll=poll):
            yield json.loads(item.value or "null")

    def stream_items_async(
        self,
        key: str,
        *,
        offset: int = 0,
        timeout: Duration | None = None,
        poll: Duration = DEFAULT_POLL,
    ) -> AsyncIterator[StreamItem]:
        return self.client.published.stream_async(
            self.id, key, offset=offset, timeout=timeout, poll=poll
        )

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

    # -- updates (durably.update) --------------------------------------------------------

    def update(
        self,
        name: str,
        *args: Any,
        timeout: Duration | None = None,
        update_id: str | None = None,
        by: str | None = None,
        poll: Duration = DEFAULT_POLL,
    ) -> Any:
        """Send the run the update `name` with `args` (JSON values) and return its handler's
        value once the run has applied it (at its workflow's next durable call). The run
        answers each update once: give `update_id` to ask again after a lost answer (the
        same id is applied once, and answered with the same value, even after the run ended).
        UpdateRefused if its validator or handler raised, or if the run ended without
        applying it; TimeoutError after `timeout`. `by`: who sends it, for the audit trail."""
        request = updates.request(name, args, update_id)
        answered = self._answered(name, request.id)
        if answered is not None:
            return answered
        try:
            self.client.send(
                self.id,
                UPDATE_KIND,
                by=by,
                name=name,
                data=request.to_data(),
                dedupe_key=_dedupe(request),
            )
        except RunEnded as exc:  # sent before, by an earlier try with this id?
            if updates.was_sent(self.client.history(self.id), request.id):
                raise updates.ended_first(self.id, name) from exc
            raise
        with updates.waiting(self.id, name, request.id):
            data = self.client.published.get_event(
                self.id, answer_key(request.id), timeout=timeout, default=MISSING, poll=poll
            )
        return Answer.from_data(data).result(name)

    async def update_async(
        self,
        name: str,
        *args: Any,
        timeout: Duration | None = None,  # noqa: ASYNC109 (update()'s own, on the loop too)
        update_id: str | None = None,
        by: str | None = None,
        poll: Duration = DEFAULT_POLL,
    ) -> Any:
        """`update` from an event loop: store calls run in a thread, the wait is on the loop."""
        request = updates.request(name, args, update_id)
        answered = await asyncio.to_thread(self._answered, name, request.id)
        if answered is not None:
            return answered
        try:
            await self.client.send_async(
                self.id,
                UPDATE_KIND,
                by=by,
                name=name,
                data=request.to_data(),
                dedupe_key=_dedupe(request),
            )
        except RunEnded as exc:
            history = await asyncio.to_thread(self.client.history, self.id)
            if updates.was_sent(history, request.id):
                raise updates.ended_first(self.id, name) from exc
            raise
        with updates.waiting(self.id, name, request.id):
            data = await self.client.published.get_event_async(
                self.id, answer_key(request.id), timeout=timeout, default=MISSING, poll=poll
            )
        return Answer.from_data(data).result(name)

    def _answered(self, name: str, update_id: str) -> Any:
        """The answer already recorded for `update_id` (None: none yet)."""
        found = self.client.store.published_events(self.id, [answer_key(update_id)])
        if not found:
            return None
        return Answer.from_json(found[0].value).result(name)

    def __repr__(self) -> str:
        return f"<RunHandle {self.id!r}>"
