"""Breakers and limits around a step attempt: take a slot and a token before it, give the
slot back (and tell the breaker how it went) after it. The arithmetic is pure
(durably.resilience.gates); this module does the store round trips."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import TYPE_CHECKING

from durably.clock import Clock
from durably.core.history import EventKind
from durably.core.payloads import StepWaiting, encode_payload
from durably.resilience.gates import Wait, entering, leaving
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.committer import Committer
from durably.runtime.engine import Engine
from durably.runtime.flow import Suspend

if TYPE_CHECKING:
    from durably.definitions import Step

__all__ = ["Gates"]

_DEFAULT_HOLD = timedelta(minutes=5)  # a concurrency slot's lease when a step has no timeout


class Gates:
    def __init__(self, engine: Engine, committer: Committer, clock: Clock) -> None:
        self._engine = engine
        self._committer = committer
        self._clock = clock

    async def enter(self, writer: HistoryWriter, step: Step, position: int) -> None:
        """Before an attempt at a protected dependency: take a slot and a token, or wait
        (durably: the run is handed back until then, and no attempt is spent)."""
        name = step.options.dependency
        if name is None:
            return
        change = entering(
            self._engine.registry.dependency_policy(name),
            holder=f"{writer.run_id}:{position}",
            now=self._clock.now(),
            hold=step.options.timeout or _DEFAULT_HOLD,
        )
        update = functools.partial(self._engine.store.update_gate, name, change)
        answer = await self._committer.call(update)
        if isinstance(answer, Wait):
            data = encode_payload(StepWaiting(answer.reason, name, answer.until))
            writer.append(EventKind.STEP_WAITING, position, step.name, None, data)
            raise Suspend(answer.until)

    async def leave(self, run_id: str, step: Step, position: int, *, failed: bool) -> None:
        name = step.options.dependency
        if name is None:
            return
        change = leaving(
            self._engine.registry.dependency_policy(name),
            holder=f"{run_id}:{position}",
            now=self._clock.now(),
            failed=failed,
        )
        update = functools.partial(self._engine.store.update_gate, name, change)
        await self._committer.call(update)
