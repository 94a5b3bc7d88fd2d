"""How an execution unwinds when it must stop: for a wait, for good, or on an engine failure.

They are BaseExceptions so that `except Exception` in user code cannot swallow them.
"""

from __future__ import annotations

from datetime import datetime

from durably.core.control import Request
from durably.core.history import ErrorInfo

__all__ = ["Abandoned", "Cancelling", "CheckpointFailed", "Pause", "Suspend", "WaitForPerson"]


class Suspend(BaseException):
    """The run must wait until `due` (a retry's backoff, a breaker or limit, a hand-back, a
    timer): it is released to the store with that due time, and any worker resumes it by
    replay. None: no time ends the wait (a signal awaited with no timeout); only a message to
    the run, or its deadline, wakes it."""

    def __init__(self, due: datetime | None) -> None:
        self.due = due


class WaitForPerson(Suspend):
    """The run waits for a person's decision (an approval): it is parked `needs_attention`,
    with `why`, until a person decides or `due` comes (a reminder, the approval's timeout;
    None: only a person, or the workflow's deadline)."""

    def __init__(self, due: datetime | None, why: ErrorInfo) -> None:
        super().__init__(due)
        self.why = why


class Pause(Suspend):
    """A person paused the run: it stops before its next step or undo (a step in flight
    finishes first) and waits, `paused`, until they resume it."""

    def __init__(self, request: Request) -> None:
        super().__init__(None)
        self.request = request


class Cancelling(BaseException):
    """A person cancelled the run: the workflow body stops at its next durable call (an async
    step in flight is cancelled), then the completed steps are compensated."""

    def __init__(self, request: Request) -> None:
        super().__init__(f"the run was cancelled by {request.by}")
        self.request = request


class Abandoned(BaseException):
    """Raised into a workflow body that runs on after it stopped counting (a sync body past
    its deadline, or whose lease is gone): it must start no step and record nothing more."""


class CheckpointFailed(BaseException):
    """A checkpoint could not be committed. Not the workflow's failure: the execution stops
    and the run's lease runs out, so a worker tries it again from its durable history."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(f"a checkpoint could not be committed: {cause!r}")
        self.cause = cause


class ContinueAsNew(BaseException):
    """durably.continue_as_new: the workflow body ends here, and the run begins again with
    this input (JSON) and a fresh history."""

    def __init__(self, input_json: str) -> None:
        super().__init__(input_json)
        self.input = input_json
