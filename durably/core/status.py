"""Run states and the one table of allowed transitions between them."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FINAL", "PARKED", "TRANSITIONS", "RunStatus", "check_transition"]


class RunStatus(StrEnum):
    PENDING = "pending"  # waiting to be claimed, possibly not before a due time
    RUNNING = "running"  # leased by a worker
    COMPLETED = "completed"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"  # parked for a person: nothing runs until they act
    COMPENSATION_FAILED = "compensation_failed"  # parked: an undo could not be done
    TIMED_OUT = "timed_out"  # the workflow's deadline passed (completed steps compensated)
    CANCELLED = "cancelled"
    PAUSED = "paused"  # a person paused it: no step or undo starts until they resume it


TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.PENDING: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.PENDING,  # released by a stopping worker, or waiting for a due time
            RunStatus.RUNNING,  # taken over after the lease expired
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.NEEDS_ATTENTION,
            RunStatus.COMPENSATION_FAILED,
            RunStatus.TIMED_OUT,
            RunStatus.CANCELLED,
            RunStatus.PAUSED,  # stopped before its next step, for a person's pause
        }
    ),
    # a person acts on a parked run (retry, skip, fail): it is leased for the action, then
    # handed back to the workers as pending
    # (or its parent ended, and its cancel makes it pending to be undone: inbox.send)
    RunStatus.NEEDS_ATTENTION: frozenset({RunStatus.RUNNING, RunStatus.PENDING}),
    RunStatus.COMPENSATION_FAILED: frozenset({RunStatus.RUNNING}),
    # resumed or cancelled: leased for the person's action, then handed back as pending (a
    # parent's cancel makes it pending at once)
    RunStatus.PAUSED: frozenset({RunStatus.RUNNING, RunStatus.PENDING}),
    RunStatus.FAILED: frozenset(),
    RunStatus.TIMED_OUT: frozenset(),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

FINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELLED})
PARKED = frozenset({RunStatus.NEEDS_ATTENTION, RunStatus.COMPENSATION_FAILED})  # dead letters


def check_transition(old: RunStatus, new: RunStatus) -> None:
    """Raise ValueError unless a run may move from `old` to `new`."""
    if new not in TRANSITIONS[old]:
        raise ValueError(f"a run cannot move from {old} to {new}")
