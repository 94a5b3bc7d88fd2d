"""Waiting for a run to end without polling: the store says when a run ends, and one listener
per client (per process and store) passes that on to the handles waiting for that run.

The store's finish notification (`Store.watch_finished`: LISTEN/NOTIFY on PostgreSQL, a local
datagram on SQLite) is best effort, so a waiter also reads the run again every `poll` (1 s by
default): a notification that is lost costs at most that. A waiter subscribes before it reads
the run, so a run that ends between the read and the wait has woken it already: the wait
returns at once.

Store calls block; the async flavour runs them in a thread and waits for wake-ups on the
event loop, so a web handler awaiting a result does not block its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from durably.core.status import FINAL
from durably.durations import Duration, parse_duration
from durably.errors import StoreUnavailable
from durably.stores import RunRecord, Store

__all__ = [
    "DEFAULT_POLL",
    "Finishes",
    "Subscription",
    "Watch",
    "wait_for_end",
    "wait_for_end_async",
]

DEFAULT_POLL = timedelta(seconds=1)
_OUTAGE_FIRST = 0.05  # seconds; a store outage is re-read sooner than the poll, doubling
_SHORTEST_POLL = 0.01  # seconds; poll=0 would spin


class Subscription:
    """Wake-ups for one waiter of one run: set from the listener's thread, waited for by a
    thread (`wait`) or on an event loop (`wait_async`)."""

    def __init__(
        self, owner: Finishes, run_id: str, loop: asyncio.AbstractEventLoop | None
    ) -> None:
        self.run_id = run_id
        self._owners = [owner]  # every listener it hears from (Finishes.attach)
        self._flag = threading.Event()
        self._loop = loop
        self._async_flag = asyncio.Event() if loop is not None else None

    def clear(self) -> None:
        """Forget earlier wake-ups: call it before reading the run, so that only an end
        after the read wakes the wait that follows (and one that comes meanwhile does)."""
        self._flag.clear()
        if self._async_flag is not None:
            self._async_flag.clear()

    def wait(self, seconds: float) -> bool:
        return self._flag.wait(max(0.0, seconds))

    async def wait_async(self, seconds: float) -> bool:
        assert self._async_flag is not None, "subscribed without a loop"
        try:
            await asyncio.wait_for(self._async_flag.wait(), max(0.0, seconds))
        except TimeoutError:
            return False
        return True

    def wake(self) -> None:
        self._flag.set()
        if self._loop is not None and self._async_flag is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(self._async_flag.set)

    def close(self) -> None:
        for owner in self._owners:
            owner.unsubscribe(self)


# How a listener hears of runs: a store's watch (watch_finished, watch_outputs) given the call
# to make with each run id it names; returns the stop call.
Watch = Callable[[Store, Callable[[str | None], None]], Callable[[], None]]


def _watch_finished(store: Store, heard: Callable[[str | None], None]) -> Callable[[], None]:
    return store.watch_finished(heard)


class Finishes:
    """The runs that end (or, with another `watch`, that publish), heard once for every
    waiter of a client.

    The store's listener starts on the first subscription (a client that never waits pays
    nothing) and stops on `close()`; a later subscription starts it again, on the store the
    client has then (App reopens its store after close)."""

    def __init__(self, store: Callable[[], Store], watch: Watch = _watch_finished) -> None:
        self._store = store
        self._watch = watch
        self._lock = threading.Lock()
        self._starting = threading.Lock()  # held while the listener starts: others wait
        self._waiting: dict[str, set[Subscription]] = {}
        self._stop: Callable[[], None] | None = None

    def subscribe(self, run_id: str, loop: asyncio.AbstractEventLoop | None = None) -> Subscription:
        """Wake-ups for `run_id` from now on (may block while the listener starts)."""
        subscription = Subscription(self, run_id, loop)
        with self._lock:
            self._waiting.setdefault(run_id, set()).add(subscription)
        self.listen()
        return subscription

    def listen(self) -> None:
        """Start the store's listener if it is not running. While the store cannot be
        reached it stays off (waiters poll, sooner during an outage) and the next call tries
        again."""
        if self._stop is not None:
            return
        with self._starting:
            if self._stop is None:
                with contextlib.suppress(StoreUnavailable):
                    # Returns once the listener hears: an end after this is not missed.
                    self._stop = self._watch(self._store(), self._heard)

    def attach(self, subscription: Subscription) -> None:
        """Wake `subscription` (another listener's) for its run too, until it closes."""
        with self._lock:
            self._waiting.setdefault(subscription.run_id, set()).add(subscription)
        subscription._owners.append(self)
        self.listen()

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            waiting = self._waiting.get(subscription.run_id)
            if waiting is not None:
                waiting.discard(subscription)
                if not waiting:
                    del self._waiting[subscription.run_id]

    def close(self) -> None:
        """Stop listening; waiters left fall back to polling until one subscribes again."""
        with self._starting:
            stop, self._stop = self._stop, None
        if stop is not None:
            stop()

    def _heard(self, run_id: str | None) -> None:
        """From the store's thread: `run_id` ended (None: any run may have, e.g. after the
        listener reconnected)."""
        with self._lock:
            if run_id is None:
                woken = [s for subscriptions in self._waiting.values() for s in subscriptions]
            else:
                woken = list(self._waiting.get(run_id, ()))
        for subscription in woken:
            subscription.wake()


@dataclass(slots=True)
class _Wait:
    """One waiter's state: what it read last and until when it waits. Pure bookkeeping, the
    same for the thread and the event loop."""

    run_id: str
    timeout: Duration | None
    deadline: float | None
    poll: float
    record: RunRecord | None = None
    unavailable: StoreUnavailable | None = None
    outage_pause: float = _OUTAGE_FIRST

    def saw(self, record: RunRecord | None, unavailable: StoreUnavailable | None) -> bool:
        """Note a read; whether the run has ended (the answer is in `record`)."""
        if unavailable is None:
            self.record, self.unavailable, self.outage_pause = record, None, _OUTAGE_FIRST
        else:
            self.unavailable = unavailable
        return unavailable is None and record is not None and record.status in FINAL

    def pause(self) -> float:
        """How long to wait for a wake-up before reading again; TimeoutError when time is up."""
        remaining = None if self.deadline is None else self.deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise self._timed_out()
        pause = self.poll
        if self.unavailable is not None:  # wake-ups are likely cut off too: read sooner
            pause = min(pause, self.outage_pause)
            self.outage_pause = min(self.outage_pause * 2, self.poll)
        return pause if remaining is None else min(pause, remaining)

    def _timed_out(self) -> TimeoutError:
        record = self.record
        if self.unavailable is not None:
            seen = "" if record is None else f" (last seen {record.status})"
            return TimeoutError(
                f"run {self.run_id!r} could not be read after {self._waited()}{seen}; "
                f"the last store error: {self.unavailable}"
            )
        assert record is not None
        detail = (
            "" if record.error is None else f" ({record.error.error_class}: {record.error.message})"
        )
        return TimeoutError(
            f"run {self.run_id!r} is still {record.status}{detail} after {self._waited()}"
        )

    def _waited(self) -> str:
        """The timeout as a person reads it: `5` (seconds) as `5s`, `"2m"` as given."""
        given = self.timeout
        if isinstance(given, int | float) and not isinstance(given, bool):
            return f"{given:g}s"
        if isinstance(given, timedelta):
            return f"{given.total_seconds():g}s"
        return str(given)


def wait_for_end(
    finishes: Finishes,
    read: Callable[[], RunRecord],
    run_id: str,
    *,
    timeout: Duration | None = None,
    poll: Duration = DEFAULT_POLL,
) -> RunRecord:
    """The run's record once it has ended (a final status), waiting for the store's word.

    A store outage is waited out like a run in progress; TimeoutError at `timeout` names the
    status last seen (or the last store error)."""
    wait = _start(run_id, timeout, poll)
    if wait.saw(*_read(read)):  # ended already: no listener needed
        return _ended(wait)
    wait.pause()  # TimeoutError already (timeout=0): no listener needed either
    subscription = finishes.subscribe(run_id)
    try:
        while True:
            subscription.clear()
            finishes.listen()  # after an outage that kept it off
            if wait.saw(*_read(read)):
                return _ended(wait)
            subscription.wait(wait.pause())
    finally:
        subscription.close()


async def wait_for_end_async(
    finishes: Finishes,
    read: Callable[[], RunRecord],
    run_id: str,
    *,
    timeout: Duration | None = None,  # noqa: ASYNC109 (it ends in TimeoutError with the status)
    poll: Duration = DEFAULT_POLL,
) -> RunRecord:
    """`wait_for_end` for an event loop: the reads run in a thread, the waits on the loop."""
    wait = _start(run_id, timeout, poll)
    if wait.saw(*await asyncio.to_thread(_read, read)):
        return _ended(wait)
    wait.pause()
    loop = asyncio.get_running_loop()
    subscription = await asyncio.to_thread(finishes.subscribe, run_id, loop)
    try:
        while True:
            subscription.clear()
            await asyncio.to_thread(finishes.listen)  # after an outage that kept it off
            if wait.saw(*await asyncio.to_thread(_read, read)):
                return _ended(wait)
            await subscription.wait_async(wait.pause())
    finally:
        subscription.close()


def _start(run_id: str, timeout: Duration | None, poll: Duration) -> _Wait:
    seconds = None if timeout is None else parse_duration(timeout).total_seconds()
    deadline = None if seconds is None else time.monotonic() + seconds
    every = parse_duration(poll, what="poll").total_seconds()
    return _Wait(run_id, timeout, deadline, max(every, _SHORTEST_POLL))


def _read(read: Callable[[], RunRecord]) -> tuple[RunRecord | None, StoreUnavailable | None]:
    try:
        return read(), None
    except StoreUnavailable as exc:  # the workers wait it out too
        return None, exc


def _ended(wait: _Wait) -> RunRecord:
    assert wait.record is not None
    return wait.record
