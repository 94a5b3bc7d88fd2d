"""Reading what runs publish (durably.core.outputs), from any process: events' latest values,
progress, and streams, waiting for what is not there yet without polling.

A waiter is woken by the store when a run publishes (`Store.watch_outputs`) or ends
(`Store.watch_finished`); both are best effort, so it also reads again every `poll`. It
subscribes before it reads, so what is published between a read and the wait wakes it.

A stream's reader stops at the stream's end (durably.close_stream) or, failing that, once the
run has ended and every item it wrote has been read: a run's items are in the store before the
commit that ends it, so one more read after its end is seen finds them all.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from durably.client.outcomes import DEFAULT_POLL, Finishes, Subscription
from durably.core.outputs import PROGRESS, Progress, PublishedEvent, StreamItem, check_key
from durably.core.status import FINAL
from durably.core.updates import is_answer_key
from durably.durations import Duration, parse_duration
from durably.errors import EventNotSet
from durably.stores.protocol import Store
from durably.stores.records import RunRecord

__all__ = ["MISSING", "Published"]

MISSING: Any = object()  # get_event's default: raise rather than return a default
_PAGE = 1_000  # stream items a read takes at most


def _watch_outputs(store: Store, heard: Callable[[str | None], None]) -> Callable[[], None]:
    return store.watch_outputs(heard)


class Published:
    """What runs publish, read on one client's store."""

    def __init__(
        self,
        store: Callable[[], Store],
        get: Callable[[str], RunRecord],
        finishes: Finishes,
    ) -> None:
        self._store = store
        self._get = get  # the run's record, or RunNotFound
        self._finishes = finishes
        self._outputs = Finishes(store, _watch_outputs)

    def close(self) -> None:
        self._outputs.close()

    # -- events -------------------------------------------------------------------------

    def events(self, run_id: str) -> dict[str, Any]:
        """The latest value of each event key the run set (RunNotFound for no such run)."""
        return {event.key: json.loads(event.value) for event in self.event_records(run_id)}

    def event_records(self, run_id: str) -> list[PublishedEvent]:
        """The run's events as stored, but for the answers to updates (durably.core.updates),
        which their callers read."""
        found = self._store().published_events(run_id)
        if not found:
            self._get(run_id)
        return [event for event in found if not is_answer_key(event.key)]

    def progress(self, run_id: str) -> Progress | None:
        """What durably.progress said last in the run (None: it never did)."""
        found = self._store().published_events(run_id, [PROGRESS])
        if not found:
            self._get(run_id)
            return None
        return Progress.from_json(found[0].value)

    def get_event(
        self,
        run_id: str,
        key: str,
        *,
        timeout: Duration | None,
        default: Any,
        poll: Duration = DEFAULT_POLL,
    ) -> Any:
        """The latest value of event `key`, waiting until the run sets it."""
        check_key(key, "an event's")
        wait = _Deadline(timeout, poll)
        subscription = self._subscribe(run_id)
        try:
            while True:
                subscription.clear()
                found = self._store().published_events(run_id, [key])
                if found:
                    return json.loads(found[0].value)
                if (missed := self._never(run_id, key, wait, default)) is not None:
                    return missed.answer()
                subscription.wait(wait.pause())
        finally:
            subscription.close()

    async def get_event_async(
        self,
        run_id: str,
        key: str,
        *,
        timeout: Duration | None,  # noqa: ASYNC109 (get_event()'s own, on the loop too)
        default: Any,
        poll: Duration = DEFAULT_POLL,
    ) -> Any:
        check_key(key, "an event's")
        wait = _Deadline(timeout, poll)
        loop = asyncio.get_running_loop()
        subscription = await asyncio.to_thread(self._subscribe, run_id, loop)
        try:
            while True:
                subscription.clear()
                store = self._store()
                found = await asyncio.to_thread(store.published_events, run_id, [key])
                if found:
                    return json.loads(found[0].value)
                missed = await asyncio.to_thread(self._never, run_id, key, wait, default)
                if missed is not None:
                    return missed.answer()
                await subscription.wait_async(wait.pause())
        finally:
            subscription.close()

    # -- streams ------------------------------------------------------------------------

    def stream(
        self,
        run_id: str,
        key: str,
        *,
        offset: int = 0,
        timeout: Duration | None = None,
        poll: Duration = DEFAULT_POLL,
    ) -> Iterator[StreamItem]:
        """The stream's items from `offset` on, in order, as they are written, until its end
        or the run's; TimeoutError after `timeout` without a new item."""
        check_key(key, "a stream's")
        reading = _Reading(run_id, key, offset, timeout, poll)
        subscription = self._subscribe(run_id)
        try:
            while True:
                subscription.clear()
                items = self._read_or_end(run_id, key, reading.offset)
                if items is None:
                    return
                for item in items:
                    if not reading.took(item):
                        return
                    yield item
                if not items:
                    subscription.wait(reading.pause())
        finally:
            subscription.close()

    async def stream_async(
        self,
        run_id: str,
        key: str,
        *,
        offset: int = 0,
        timeout: Duration | None = None,  # noqa: ASYNC109 (stream()'s own, on the loop too)
        poll: Duration = DEFAULT_POLL,
    ) -> AsyncIterator[StreamItem]:
        check_key(key, "a stream's")
        reading = _Reading(run_id, key, offset, timeout, poll)
        loop = asyncio.get_running_loop()
        subscription = await asyncio.to_thread(self._subscribe, run_id, loop)
        try:
            while True:
                subscription.clear()
                items = await asyncio.to_thread(self._read_or_end, run_id, key, reading.offset)
                if items is None:
                    return
                for item in items:
                    if not reading.took(item):
                        return
                    yield item
                if not items:
                    await subscription.wait_async(reading.pause())
        finally:
            subscription.close()

    # -- shared -------------------------------------------------------------------------

    def subscribe(self, run_id: str, loop: asyncio.AbstractEventLoop | None = None) -> Subscription:
        """Wake-ups for a reader that watches several of the run's keys at once (`durably
        runs follow`): woken when the run publishes or ends. clear() it before reading,
        wait() after (best effort: read again now and then); close() it when done."""
        return self._subscribe(run_id, loop)

    def _subscribe(
        self, run_id: str, loop: asyncio.AbstractEventLoop | None = None
    ) -> Subscription:
        subscription = self._outputs.subscribe(run_id, loop)
        self._finishes.attach(subscription)
        return subscription

    def _ended(self, run_id: str) -> bool:
        return self._get(run_id).status in FINAL

    def _read_or_end(self, run_id: str, key: str, offset: int) -> list[StreamItem] | None:
        """The next items; None when there are none and will be none (the run ended)."""
        store = self._store()
        items = store.read_stream(run_id, key, offset=offset, limit=_PAGE)
        if items or not self._ended(run_id):
            return items
        return store.read_stream(run_id, key, offset=offset, limit=_PAGE) or None

    def _never(self, run_id: str, key: str, wait: _Deadline, default: Any) -> _Missed | None:
        """Why event `key` is not to be waited for any more (None: wait on)."""
        record = self._get(run_id)
        if record.status in FINAL:
            # set in the commit that ended it? It would be in the store by now.
            if self._store().published_events(run_id, [key]):
                return None
            why = f"run {run_id!r} ended ({record.status}) without setting event {key!r}"
            return _Missed(why, default)
        if wait.over():
            why = f"run {run_id!r} did not set event {key!r} within {wait.said}"
            why += f" (it is {record.status})"
            return _Missed(why, default, timed_out=True)
        return None


class _Missed:
    """The event is not coming: the default, or the error that says why."""

    def __init__(self, why: str, default: Any, *, timed_out: bool = False) -> None:
        self.why, self.default, self.timed_out = why, default, timed_out

    def answer(self) -> Any:
        if self.default is not MISSING:
            return self.default
        if self.timed_out:
            raise TimeoutError(self.why)
        raise EventNotSet(f"{self.why}; pass default= to get a value instead")


class _Deadline:
    def __init__(self, timeout: Duration | None, poll: Duration) -> None:
        seconds = None if timeout is None else parse_duration(timeout).total_seconds()
        self.said = "no time" if seconds is None else f"{seconds:g}s"
        self._seconds = seconds
        self._deadline: float | None = None
        self.restart()
        self._poll = max(parse_duration(poll, what="poll").total_seconds(), 0.01)

    def restart(self) -> None:
        """The timeout starts again from now."""
        seconds = self._seconds
        self._deadline = None if seconds is None else time.monotonic() + seconds

    def over(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def pause(self) -> float:
        if self._deadline is None:
            return self._poll
        return max(0.0, min(self._poll, self._deadline - time.monotonic()))


class _Reading:
    """A stream reader's place, and how long it waits for a new item."""

    def __init__(
        self, run_id: str, key: str, offset: int, timeout: Duration | None, poll: Duration
    ) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"a stream's offset is a whole number >= 0, not {offset!r}")
        self.offset = offset
        self._what = f"stream {key!r} of run {run_id!r}"
        self._deadline = _Deadline(timeout, poll)

    def took(self, item: StreamItem) -> bool:
        """Whether to yield the item (False: the stream ended there)."""
        if item.is_end:
            return False
        self.offset = item.offset + 1
        self._deadline.restart()  # the timeout is for each new item
        return True

    def pause(self) -> float:
        if self._deadline.over():
            raise TimeoutError(
                f"{self._what} had no new item for {self._deadline.said} (read up to offset "
                f"{self.offset}; read on from there)"
            )
        return self._deadline.pause()
