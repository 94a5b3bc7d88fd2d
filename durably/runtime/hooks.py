"""Engine hooks: what the engine tells an observer as it works.

Metrics, logs, traces and fault injection (durably.testing.Faults) are observers. Every
method does nothing by default: subclass Hooks and override what you need, then pass it as
`App(hooks=...)`. With no hooks the engine makes no call at all. Hooks are called on the
engine's own threads (the worker's event loop, its committer thread, a step's thread), so
they must be quick and must not block; an exception a hook raises is the engine's failure
where it was called (fault injection relies on that).
"""

from __future__ import annotations

from collections.abc import Sequence

from durably.core.history import Event

__all__ = ["HookChain", "Hooks", "chain"]


class Hooks:
    def claimed(self, run_id: str, workflow: str, *, takeover: bool) -> None:
        """A worker leased the run; `takeover`: from a worker whose lease had expired."""

    def claim_made(self, runs: int, seconds: float) -> None:
        """A worker's claim of due runs returned `runs` (0: none was due for it) after
        `seconds` in the store (its statement or transaction, not the wait for its turn)."""

    def attempt_started(self, run_id: str, step: str, attempt: int, dependency: str | None) -> None:
        """A step body is about to run (after its start was committed; a transactional
        step's start commits with its outcome, in the transaction the body runs in)."""

    def attempt_finished(
        self,
        run_id: str,
        step: str,
        attempt: int,
        dependency: str | None,
        error: BaseException | None,
    ) -> None:
        """A step body returned (error None) or raised; its outcome is not committed yet."""

    def before_commit(self, checkpoints: int) -> None:
        """A batch of `checkpoints` is assembled and about to be committed."""

    def checkpoint_committed(self, checkpoints: int) -> None:
        """A batch of `checkpoints` is durable."""

    def run_finished(self, run_id: str, workflow: str, status: str) -> None:
        """The run reached a final or parked status (`status` is a RunStatus value)."""

    def run_began(self, run_id: str, workflow: str) -> None:
        """A worker claimed the run for the first time (it was started, and now it runs)."""

    def compensation_attempted(
        self, run_id: str, step: str, attempt: int, error: BaseException | None
    ) -> None:
        """An attempt at a step's undo returned (error None) or raised."""

    def run_ended(self, run_id: str, workflow: str, status: str, events: Sequence[Event]) -> None:
        """As `run_finished` (a final status, or parked for a person), with the run's whole
        history: read it, do not keep it (durably.core.states.time_in_states says how long it
        spent in each state; durably.views.explaining.root_error what stopped it)."""

    def store_outage(self, reason: str | None) -> None:
        """The worker's store calls began to fail (`reason`: why, as the store said: down,
        its disk full, its file read-only), and it retries them; None: they work again."""

    def webhook_attempted(self, webhook: str, outcome: str) -> None:
        """A worker sent a delivery of `webhook` (durably.runtime.webhooks): `outcome` is
        "delivered" (the receiver answered 2xx), "failed" (it will be tried again) or "dead"
        (its last attempt failed: the webhooks' dead-letter list)."""


class HookChain(Hooks):
    """Several observers, called in order."""

    def __init__(self, hooks: Sequence[Hooks]) -> None:
        self.hooks = tuple(hooks)

    def claimed(self, run_id: str, workflow: str, *, takeover: bool) -> None:
        for hook in self.hooks:
            hook.claimed(run_id, workflow, takeover=takeover)

    def claim_made(self, runs: int, seconds: float) -> None:
        for hook in self.hooks:
            hook.claim_made(runs, seconds)

    def attempt_started(self, run_id: str, step: str, attempt: int, dependency: str | None) -> None:
        for hook in self.hooks:
            hook.attempt_started(run_id, step, attempt, dependency)

    def attempt_finished(
        self,
        run_id: str,
        step: str,
        attempt: int,
        dependency: str | None,
        error: BaseException | None,
    ) -> None:
        for hook in self.hooks:
            hook.attempt_finished(run_id, step, attempt, dependency, error)

    def before_commit(self, checkpoints: int) -> None:
        for hook in self.hooks:
            hook.before_commit(checkpoints)

    def checkpoint_committed(self, checkpoints: int) -> None:
        for hook in self.hooks:
            hook.checkpoint_committed(checkpoints)

    def run_finished(self, run_id: str, workflow: str, status: str) -> None:
        for hook in self.hooks:
            hook.run_finished(run_id, workflow, status)

    def run_began(self, run_id: str, workflow: str) -> None:
        for hook in self.hooks:
            hook.run_began(run_id, workflow)

    def compensation_attempted(
        self, run_id: str, step: str, attempt: int, error: BaseException | None
    ) -> None:
        for hook in self.hooks:
            hook.compensation_attempted(run_id, step, attempt, error)

    def run_ended(self, run_id: str, workflow: str, status: str, events: Sequence[Event]) -> None:
        for hook in self.hooks:
            hook.run_ended(run_id, workflow, status, events)

    def store_outage(self, reason: str | None) -> None:
        for hook in self.hooks:
            hook.store_outage(reason)

    def webhook_attempted(self, webhook: str, outcome: str) -> None:
        for hook in self.hooks:
            hook.webhook_attempted(webhook, outcome)


def chain(hooks: Sequence[Hooks | None]) -> Hooks | None:
    """One observer for several (None for none, so that the engine skips the calls)."""
    present = [hook for hook in hooks if hook is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else HookChain(present)
