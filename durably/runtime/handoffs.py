"""Runs handed to a worker at their start: a run started in the worker's own process, which
the worker would claim at once anyway, is created already claimed for it, in the start's own
commit, and handed straight to its event loop (durably.client.starts.Takers makes the start).
The run pays no wake-up, no claim and no commit of its own for the claim: one commit fewer
between a start and its first step.

A worker takes such a run only when a claim would have taken it first: it serves the run's
workflow and version, the run's queue has no limits (a limited queue's counts and turns are the
claim's business), the run is due now, and the worker has a free slot and no other run
waiting for one (its last claim came back short). A slot is held from the moment the start
asks until the run arrives, so that the worker's claims and the starts of several threads
never promise more runs than its concurrency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import Protocol

from durably.core.queues import Queue
from durably.stores import Claim, NewRun

__all__ = ["Handoffs", "Taker"]

log = logging.getLogger("durably.worker")


class Taker(Protocol):
    """A worker of this process that takes new runs at their start (Client.offer)."""

    name: str  # the lease owner its runs are claimed for

    @property
    def lease(self) -> timedelta: ...

    def reserve(self, run: NewRun) -> bool:
        """Hold a slot for `run` if this worker would claim it now; then `hand` is called
        once, whatever the start's outcome. Called from the starting thread."""
        ...

    def hand(self, claim: Claim | None) -> None:
        """The run `reserve` held a slot for, created and claimed for this worker (None: it
        was not created, and the slot is free again). Called from the starting thread."""
        ...


class Handoffs:
    """A worker's side of the hand-over: which starts it takes, the slots they hold until
    they arrive, and their arrival on its event loop.

    `room(held)`: whether the worker has a slot free beyond the `held` ones, and would claim
    now (it is not stopping, waits on no backlog, runs nobody alone), asked under `lock`,
    which the worker's claim holds while it counts its free slots. `launch(claim)`: start
    running a run that arrived, on the loop."""

    def __init__(
        self,
        name: str,
        lease: timedelta,
        serves: Mapping[str, Collection[str]],
        queues: Sequence[Queue],
        loop: asyncio.AbstractEventLoop,
        *,
        room: Callable[[int], bool],
        launch: Callable[[Claim], None],
    ) -> None:
        self.name = name
        self.lease = lease
        self.lock = threading.Lock()
        self.held = 0  # slots held for runs on their way (read under `lock`, or as a bound)
        self._serves = serves
        # The stored names of the queues it serves that a claim takes from in plain due order.
        self._plain = {queue.stored for queue in queues if not queue.limited}
        self._loop = loop
        self._room = room
        self._launch = launch
        self._none_held: asyncio.Future[None] | None = None  # `arrived` waits on it

    def reserve(self, run: NewRun) -> bool:
        versions = self._serves.get(run.workflow)
        if versions is None or (run.version is not None and run.version not in versions):
            return False
        if run.queue not in self._plain or run.due is not None or run.debounce is not None:
            return False
        with self.lock:
            if not self._room(self.held):
                return False
            self.held += 1
        return True

    def hand(self, claim: Claim | None) -> None:
        if claim is None:  # nothing comes: the slot is free at once
            self._let_go()
            return
        try:
            self._loop.call_soon_threadsafe(self._arrive, claim)
        except RuntimeError:  # the worker's loop is closed: it has stopped since the start
            self._let_go()
            log.warning(
                "run %s was started for worker %s, which stopped meanwhile: it runs once its "
                "lease (%ss) runs out, on any worker",
                claim.run_id,
                self.name,
                self.lease.total_seconds(),
            )

    async def arrived(self, *, within: timedelta) -> None:
        """Once the worker has withdrawn its offer (no start asks any more), wait for the
        runs on their way to arrive (a start's commit: a millisecond or so; `within` at
        most), so that they are not left under its lease until that runs out. On the loop."""
        with self.lock:
            if not self.held:
                return
            waiter = self._none_held = self._loop.create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, within.total_seconds())

    def _arrive(self, claim: Claim) -> None:
        self._launch(claim)  # counted among the worker's runs before its slot is let go
        self._let_go()

    def _let_go(self) -> None:
        with self.lock:
            self.held -= 1
            if self.held or self._none_held is None:
                return
            done, self._none_held = self._none_held, None
        with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits any more
            self._loop.call_soon_threadsafe(_settle, done)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
