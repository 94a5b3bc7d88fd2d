"""Run states and the one table of allowed transitions between them."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FINAL", "TRANSITIONS", "RunStatus", "check_transition"]


class RunStatus(StrEnum):
    PENDING = "pending"  # waiting to be claimed, possibly not before a due time
    RUNNING = "running"  # leased by a worker
    COMPLETED = "completed"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"  # parked for a person: nothing runs until they act
    CANCELLED = "cancelled"


TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.PENDING: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.PENDING,  # released by a stopping worker, or waiting for a due time
            RunStatus.RUNNING,  # taken over after the lease expired
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.NEEDS_ATTENTION,
            RunStatus.CANCELLED,
        }
    ),
    RunStatus.NEEDS_ATTENTION: frozenset(
        {RunStatus.PENDING, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.FAILED: frozenset({RunStatus.PENDING}),  # a person retries it
    RunStatus.COMPLETED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

FINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})


def check_transition(old: RunStatus, new: RunStatus) -> None:
    """Raise ValueError unless a run may move from `old` to `new`."""
    if new not in TRANSITIONS[old]:
        raise ValueError(f"a run cannot move from {old} to {new}")
