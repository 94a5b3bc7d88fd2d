"""Runs a worker took over from a dead worker, which run alone, one turn after another.

A worker died while it ran each of them: the death may be theirs (a step that kills its
process). So a suspect runs with no other run in this worker until it gets past the point
of its last death (durably.core.replay.WorkerDeaths): all suspects whose deaths were never
seen alone start together, one that died even when alone runs strictly alone. While any
waits or runs alone, the worker starts nothing new.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator

from durably.runtime.execution import RunExecution

__all__ = ["Suspects"]

log = logging.getLogger("durably.worker")


class Suspects:
    """The suspects waiting for their turn alone (their leases kept: the worker renews them),
    and those running alone now. `launch` starts an execution on the worker; `poke` asks the
    worker to look again (a turn is over, or the waiting lost their leases)."""

    def __init__(self, launch: Callable[[RunExecution], None], poke: Callable[[], None]) -> None:
        self._waiting: deque[RunExecution] = deque()
        self._alone: list[RunExecution] = []
        self._launch = launch
        self._poke = poke

    def __len__(self) -> int:
        """How many wait for their turn (each holds a slot of the worker)."""
        return len(self._waiting)

    def __iter__(self) -> Iterator[RunExecution]:
        return iter(self._waiting)

    def __contains__(self, execution: object) -> bool:
        return execution in self._waiting

    def add(self, execution: RunExecution, *, strict: bool) -> None:
        """Set a taken-over run aside until its turn; `strict`: it died even when alone."""
        execution.strict = strict
        self._waiting.append(execution)

    def isolating(self) -> bool:
        """Whether a suspect waits to run alone, or runs alone now: nothing new starts."""
        running = any(execution.alone and not execution.closed for execution in self._alone)
        return bool(self._waiting) or running

    def start(self, *, others_running: bool) -> None:
        """Once nothing else runs (not `others_running`), start suspects with no other run:
        all those that may run together (a crash among them was never seen) at once, else
        one strictly alone."""
        if others_running or not self._waiting:
            return
        waiting = [execution for execution in self._waiting if not execution.lost]
        self._waiting.clear()
        together = [execution for execution in waiting if not execution.strict]
        strict = [execution for execution in waiting if execution.strict]
        start = together or strict[:1]
        self._waiting.extend(strict if together else strict[1:])
        if not start:
            self._poke()  # their leases went while they waited: look again
            return
        self._alone = start
        for execution in start:
            execution.run_alone(after=self._turn_over, others=len(start) - 1)
            self._launch(execution)
        how = "alone" if len(start) == 1 else f"with {len(start) - 1} other(s) taken over"
        log.info("running %d run(s) a dead worker held %s", len(start), how)

    def ended(self, execution: RunExecution) -> None:
        """An execution of the worker's ended (a suspect's turn among them, maybe)."""
        if execution in self._alone:
            self._alone.remove(execution)

    async def hand_back(self) -> None:
        """On stop: hand back, at once, those that never started (they stay suspects)."""
        while self._waiting:
            waiting = self._waiting.popleft()
            if not waiting.lost:
                await waiting.release()

    def _turn_over(self) -> bool:
        """A suspect running alone got past where its worker died; True if it is to be
        handed back because other suspects wait for their turn alone."""
        self._poke()
        return bool(self._waiting)
