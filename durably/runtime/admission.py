"""Breakers and limits around a step attempt: take a slot and a token before it, give the
slot back (and tell the breaker how it went) after it. The arithmetic is pure
(durably.resilience.gates); this module does the store round trips.

A wait costs one `step_waiting` event, however many times the run looks again before the gate
lets it through: a look that finds the same reason to wait adds none. A run waiting for a
half-open breaker's probe or for a concurrency slot is woken (made due now, Store.wake) by
the attempt whose end opens the gate for it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durably.clock import Clock
from durably.core.event_data import encode_payload, read_payload
from durably.core.history import Event, EventKind
from durably.core.names import check_name
from durably.core.payloads import StepWaiting
from durably.resilience.gates import Wait, entering, leaving
from durably.runtime.checkpoints import HistoryWriter
from durably.runtime.committer import Committer
from durably.runtime.engine import Engine
from durably.runtime.flow import Suspend

if TYPE_CHECKING:
    from durably.workflow.definitions import Step, StepOptions

__all__ = ["Gates", "gate_name"]

_DEFAULT_HOLD = timedelta(minutes=5)  # a concurrency slot's lease when a step has no timeout


class Gates:
    def __init__(self, engine: Engine, committer: Committer, clock: Clock) -> None:
        self._engine = engine
        self._committer = committer
        self._clock = clock

    async def enter(
        self, writer: HistoryWriter, step: Step, position: int, name: str | None
    ) -> None:
        """Before an attempt at a protected dependency (`name`: its gate, gate_name): take a
        slot and a token, or wait (durably: the run is handed back until then, and no
        attempt is spent)."""
        dependency = step.options.dependency
        if name is None or dependency is None:
            return
        now = self._clock.now()
        waits = _wait_so_far(writer.events, position)
        change = entering(
            self._engine.registry.dependency_policy(dependency),
            holder=_holder(writer.run_id, position),
            now=now,
            hold=step.options.timeout or _DEFAULT_HOLD,
            since=waits[0].at if waits else None,  # its place in line is kept
        )
        update = functools.partial(self._engine.store.update_gate, name, change)
        answer = await self._committer.call(update)
        if not isinstance(answer, Wait):
            return
        if not _same_wait(waits, answer, name):
            data = encode_payload(StepWaiting(answer.reason, name, answer.until))
            writer.append(EventKind.STEP_WAITING, position, step.name, None, data)
        raise Suspend(answer.until)

    async def leave(
        self,
        run_id: str,
        step: Step,
        position: int,
        name: str | None,
        *,
        failed: bool,
        throttled_for: timedelta | None = None,
    ) -> None:
        """After an admitted attempt at gate `name`: give its slot back, tell the breaker
        whether it failed (or, if the service throttled it, the rate limit for how long),
        and wake the runs the gate now lets through."""
        dependency = step.options.dependency
        if name is None or dependency is None:
            return
        now = self._clock.now()
        change = leaving(
            self._engine.registry.dependency_policy(dependency),
            holder=_holder(run_id, position),
            now=now,
            failed=failed,
            throttled=throttled_for,
        )
        store = self._engine.store
        woken = await self._committer.call(functools.partial(store.update_gate, name, change))
        if woken:
            runs = [holder.rpartition(":")[0] for holder in woken]
            await self._committer.call(functools.partial(store.wake, runs, now=now))


def gate_name(options: StepOptions, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
    """The gate a call of a step with these options goes through: its dependency's, or with
    `dependency_key`, that dependency's for the key its arguments give ("partner[acct-7]"):
    each key has its own breaker, rate and slots, under the dependency's policy."""
    if options.dependency is None:
        return None
    if options.dependency_key is None:
        return options.dependency
    key = check_name(str(options.dependency_key(*args, **kwargs)), "a dependency key")
    return f"{options.dependency}[{key}]"


def _holder(run_id: str, position: int) -> str:
    """Who holds a slot or waits in line: one step call of one run (`leave` splits it)."""
    return f"{run_id}:{position}"


def _wait_so_far(events: Sequence[Event], position: int) -> list[Event]:
    """The `step_waiting` events at `position` since its last other event: the wait the step
    is in, oldest first (none if it is not waiting)."""
    waits: list[Event] = []
    for event in reversed(events):
        if event.position != position:
            continue
        if event.kind is not EventKind.STEP_WAITING:
            break
        waits.append(event)
    return waits[::-1]


def _same_wait(waits: Sequence[Event], answer: Wait, dependency: str) -> bool:
    """Whether the step waits already, for this reason: then a look adds no event."""
    if not waits:
        return False
    last = read_payload(waits[-1], StepWaiting)
    return (last.waiting, last.dependency) == (answer.reason, dependency)
