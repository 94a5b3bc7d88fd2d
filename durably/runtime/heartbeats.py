"""Heartbeats of a long step attempt: durably.heartbeat(details) as it goes.

Each beat pushes the attempt's heartbeat deadline on (`@app.step(heartbeat_timeout=...)`):
an attempt whose beats stop is lost like one past its timeout (HeartbeatTimeout, a
StepTimeout: reconciled, then retried), even while its worker renews the run's lease. The
deadline is an asyncio timeout that each beat reschedules, so a beat costs no task and no
timer of its own.

The details are recorded (`step_heartbeat`) so that the next attempt can resume where this
one got (durably.last_heartbeat), even after the worker dies: the first beat of an attempt
is committed at once, later ones at most every `_RECORD_EVERY` (or 80% of the heartbeat
timeout, if shorter), and the latest of a failed attempt goes in with its failure.

Beats come from the step's body: on the loop (an async step) or from its thread (a sync
step), which hands each one to the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

from durably.core.history import EventKind
from durably.errors import HeartbeatTimeout, LeaseLost
from durably.runtime.attempts import within
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.flow import CheckpointFailed

__all__ = ["Heartbeats"]

_RECORD_EVERY = 30.0  # seconds: at most one commit of a step's heartbeats this often


class Heartbeats:
    """The heartbeats of one step attempt."""

    def __init__(
        self,
        writer: HistoryWriter,
        loop: asyncio.AbstractEventLoop,
        *,
        position: int,
        name: str,
        attempt: int,
        timeout: float | None,
        previous: str | None,
    ) -> None:
        self.previous = previous  # the details (JSON) the attempts before this one recorded
        self._writer = writer
        self._loop = loop
        self._where = (position, name, attempt)
        self._timeout = timeout
        self._every = _RECORD_EVERY if timeout is None else min(_RECORD_EVERY, 0.8 * timeout)
        self._limit: asyncio.Timeout | None = None
        self._latest: str | None = None  # the details of the latest beat, as JSON
        self._unrecorded = False
        self._recorded_at: float | None = None  # loop time of the last recording
        self._recording: asyncio.Task[None] | None = None
        self._closed = False

    def beat(self, details: str) -> None:
        """A beat with `details` (JSON), from the step's body, on the loop or in its thread."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._on_loop(details)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                self._loop.call_soon_threadsafe(self._on_loop, details)

    async def guard(self, call: Awaitable[Any]) -> Any:
        """Await the attempt; HeartbeatTimeout once no beat came for the heartbeat timeout."""
        if self._timeout is None:
            return await call
        position, name, _attempt = self._where
        message = (
            f"step {name!r} (#{position}) sent no heartbeat for {self._timeout:g}s: the attempt "
            "is taken as lost"
        )
        self._limit = asyncio.timeout(self._timeout)
        return await within(
            call, self._timeout, lambda: HeartbeatTimeout(message), limit=self._limit
        )

    async def close(self, *, failed: bool) -> None:
        """The attempt ended: let a recording under way finish (it must not outlive the
        attempt); a failed attempt's latest details go with its failure."""
        self._closed = True
        if self._recording is not None:
            await asyncio.shield(self._recording)
        if failed and self._unrecorded and self._latest is not None:
            self._append(self._latest)

    def _on_loop(self, details: str) -> None:
        if self._closed:
            return
        self._latest, self._unrecorded = details, True
        if self._limit is not None and self._timeout is not None:
            self._limit.reschedule(self._loop.time() + self._timeout)
        now = self._loop.time()
        due = self._recorded_at is None or now - self._recorded_at >= self._every
        if due and self._recording is None:
            self._recording = self._loop.create_task(self._record(), name="durably-heartbeat")

    async def _record(self) -> None:
        try:
            if self._latest is not None:
                self._append(self._latest)
                self._recorded_at = self._loop.time()
                await self._writer.flush()
        except (LeaseLost, CheckpointFailed):
            pass  # the writer now knows it lost the run; the attempt's own end says so
        finally:
            self._recording = None

    def _append(self, details: str) -> None:
        position, name, attempt = self._where
        self._writer.append(EventKind.STEP_HEARTBEAT, position, name, attempt, details)
        self._unrecorded = False
