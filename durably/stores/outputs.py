"""The store's side of what runs publish for callers (durably.core.outputs): events' latest
values, streams, and a wake-up for callers waiting on either. Part of every Store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from durably.core.outputs import PublishedEvent, StreamItem, StreamWrite

__all__ = ["OutputStore"]


class OutputStore(Protocol):
    def append_stream(
        self, run_id: str, epoch: int, writes: Sequence[StreamWrite], *, now: datetime
    ) -> bool:
        """Append `writes` (in order) to the run's streams, fenced by its lease epoch: False,
        writing nothing, if `epoch` is not the run's lease any more. A write whose place was
        written already is skipped (durably.core.outputs), as is one after its stream's end.
        Safe to repeat. Callers waiting on the run are woken when something new is in."""
        ...

    def published_events(
        self, run_id: str, keys: Sequence[str] | None = None
    ) -> list[PublishedEvent]:
        """The latest value of each event key the run set (of `keys` only, if given)."""
        ...

    def read_stream(
        self, run_id: str, key: str, *, offset: int = 0, limit: int = 1_000
    ) -> list[StreamItem]:
        """Up to `limit` items of the run's stream `key`, from `offset` on, in order."""
        ...

    def watch_outputs(self, wake: Callable[[str | None], None]) -> Callable[[], None]:
        """Call `wake(run_id)` (from a thread of its own) when a run set an event or appended
        to a stream (None: any run may have: after a reconnect, or too many to name); returns
        the stop call. Best effort: a waiter also looks again now and then."""
        ...
