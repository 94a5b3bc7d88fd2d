"""Helpers for testing code that uses durably: a fake clock that only moves when told, fault
injection into steps, and replay tests of exported runs against new code
(durably.testing.replays)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from durably.clock import FakeClock
from durably.errors import StepTimeout
from durably.runtime.hooks import Hooks
from durably.testing.replays import Replayed, replay

__all__ = ["FakeClock", "Faults", "Replayed", "replay"]


@dataclass
class _Plan:
    action: str  # "fail", "time_out", "crash"
    remaining: int
    error: Exception | None = None


class Faults(Hooks):
    """Fault injection for tests and demos, by step name or dependency name: engine hooks
    that fail, time out or kill the process where the plan says.

    faults = Faults()
    faults.fail("charge", times=2, error=ConnectionError("reset"))  # next 2 attempts
    faults.time_out("payments")                # next attempt at that dependency times out
    faults.crash_after("charge")               # the worker process dies after the body,
                                               # before the checkpoint (os._exit)
    faults.crash_before_commit(min_batch=8, after=2)  # the worker process dies with the
                                               # third batch of 8+ checkpoints assembled by
                                               # its group commit, before committing it
    faults.crash_after_commit(after=1)         # ... just after its second commit is durable
    app = durably.App(url, hooks=[faults])
    """

    def __init__(self) -> None:
        self._plans: dict[str, list[_Plan]] = {}
        self._lock = threading.Lock()
        self.injected: dict[str, int] = {}  # action -> how many were injected
        self._commit_crash: tuple[int, int] | None = None  # (batch size, batches to spare)
        self._committed_crash: tuple[int, int] | None = None  # the same, after the commit

    def fail(self, target: str, *, times: int = 1, error: Exception | None = None) -> Faults:
        return self._plan(target, _Plan("fail", times, error or ConnectionError("injected fault")))

    def time_out(self, target: str, *, times: int = 1) -> Faults:
        return self._plan(target, _Plan("time_out", times))

    def crash_after(self, target: str, *, times: int = 1) -> Faults:
        return self._plan(target, _Plan("crash", times))

    def crash_before_commit(self, *, min_batch: int = 1, after: int = 0) -> Faults:
        with self._lock:
            self._commit_crash = (min_batch, after)
        return self

    def crash_after_commit(self, *, min_batch: int = 1, after: int = 0) -> Faults:
        with self._lock:
            self._committed_crash = (min_batch, after)
        return self

    def before_commit(self, checkpoints: int) -> None:
        if self._spent("_commit_crash", checkpoints):
            os._exit(137)  # like SIGKILL: the batch is never committed, no caller acknowledged

    def checkpoint_committed(self, checkpoints: int) -> None:
        if self._spent("_committed_crash", checkpoints):
            os._exit(137)  # like SIGKILL: durable, but no caller acknowledged

    def _spent(self, plan: str, checkpoints: int) -> bool:
        """Count a batch of `checkpoints` against a commit crash plan: True when it is the one."""
        with self._lock:
            crash: tuple[int, int] | None = getattr(self, plan)
            if crash is None or checkpoints < crash[0]:
                return False
            min_batch, spare = crash
            setattr(self, plan, (min_batch, spare - 1))
        return spare <= 0

    def attempt_started(self, run_id: str, step: str, attempt: int, dependency: str | None) -> None:
        plan = self._take(step, dependency, ("fail", "time_out"))
        if plan is None:
            return
        if plan.action == "time_out":
            raise StepTimeout(f"step {step!r}: injected timeout")
        assert plan.error is not None
        raise plan.error

    def attempt_finished(
        self,
        run_id: str,
        step: str,
        attempt: int,
        dependency: str | None,
        error: BaseException | None,
    ) -> None:
        if error is None and self._take(step, dependency, ("crash",)) is not None:
            os._exit(137)  # like SIGKILL: no cleanup, no checkpoint

    def _plan(self, target: str, plan: _Plan) -> Faults:
        with self._lock:
            self._plans.setdefault(target, []).append(plan)
        return self

    def _take(self, step: str, dependency: str | None, actions: tuple[str, ...]) -> _Plan | None:
        with self._lock:
            for target in (step, dependency):
                for plan in self._plans.get(target or "", []):
                    if plan.action in actions and plan.remaining > 0:
                        plan.remaining -= 1
                        self.injected[plan.action] = self.injected.get(plan.action, 0) + 1
                        return plan
        return None
