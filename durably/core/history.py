"""The events a run's history is made of. A history is append-only; `seq` orders it.

What each kind carries in `Event.data`, typed, and its JSON both ways: durably.core.payloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from durably.core.secrets import scrub
from durably.core.tracebacks import user_traceback

__all__ = ["UNREADABLE_ROW", "ErrorInfo", "Event", "EventKind", "error_class_name"]

# The kind of the event a store gives for a stored row it cannot read (a corrupted row): its
# data says why. It is never written; no kind durably writes has a parenthesis.
UNREADABLE_ROW = "(unreadable row)"


class EventKind(StrEnum):
    RUN_STARTED = "run_started"  # data: none, or where a restarted run came from, or its parent
    CLAIMED = "claimed"  # a worker took the lease (data: owner, epoch, previous owner)
    STEP_STARTED = "step_started"  # before the body runs (data: idempotency key, input)
    STEP_COMPLETED = "step_completed"  # data: the result as JSON
    STEP_ATTEMPT_FAILED = "attempt_failed"  # another attempt follows (error, retry_at, unknown)
    STEP_RECONCILED = "step_reconciled"  # after an unknown attempt (data: found)
    STEP_FAILED = "step_failed"  # the step's final outcome is failure (data: error, reason)
    STEP_WAITING = "step_waiting"  # no attempt: a breaker or limit said wait (data: until)
    STEP_SKIPPED = "step_skipped"  # a person gave the step's result (data: the result)
    COMPENSATING = "compensating"  # the run failed; undo completed steps (data: the error)
    COMPENSATION_STARTED = "compensation_started"
    COMPENSATION_COMPLETED = "compensation_completed"
    COMPENSATION_ATTEMPT_FAILED = "compensation_attempt_failed"
    COMPENSATION_FAILED = "compensation_failed"  # the undo failed for good (or cannot run)
    COMPENSATION_SKIPPED = "compensation_skipped"  # a person did the undo by hand (data: by)
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_PARKED = "run_parked"  # needs a person (data: error, reason)
    RUN_CANCELLED = "run_cancelled"  # a person cancelled it; compensated (data: the error)
    RUN_PAUSED = "run_paused"  # a person paused it before its next step (data: by, reason)
    RUN_RESTARTED = "run_restarted"  # this ended run was restarted as another (data: it)
    RUN_RETRIED = "run_retried"  # a person asked for fresh attempts (position: from step)
    UPGRADED = "upgraded"  # moved to a deployed version its history replays on (data: from, to)
    RELEASED = "released"  # a worker handed the run back (stopping, or after running alone)
    RUNNING_ALONE = "running_alone"  # a worker died under the run: it now runs with no other
    ATTEMPT_LOST = "attempt_lost"  # taken over: the dead worker's attempt at this step is lost
    MESSAGE_RECEIVED = "message_received"  # a command from outside, out of the run's inbox
    # Durable calls a workflow makes besides steps, at a position like a step's:
    TIMER_SET = "timer_set"  # durably.sleep / sleep_until (data: until)
    TIMER_FIRED = "timer_fired"  # the timer's time came; the workflow goes on
    SIGNAL_WAITING = "signal_waiting"  # durably.wait_for_signal (data: until, or none)
    SIGNAL_RECEIVED = "signal_received"  # the signal the wait took (data: message, data, ...)
    SIGNAL_TIMED_OUT = "signal_timed_out"  # no signal before the wait's timeout
    VALUE_RECORDED = "value_recorded"  # durably.now / uuid4 / random (data: the value)
    CHILD_STARTED = "child_started"  # a child run was started (data: its id, its workflow)
    APPROVAL_REQUESTED = "approval_requested"  # durably.approval (data: until, on_timeout, ...)
    APPROVAL_TOKEN = "approval_token"  # a token was made for a notice (data: its hash, notice)
    APPROVAL_ESCALATED = "approval_escalated"  # timed out with on_timeout="escalate"
    APPROVAL_DECIDED = "approval_decided"  # data: approved, by, at, comment, via
    STEP_HEARTBEAT = "step_heartbeat"  # a long step's progress (data: the details, as JSON)
    # durably.patched: which side of a change the run takes (name: the patch; data: true for
    # the new code, false for the old); no position: patches shift no step
    PATCH_DECIDED = "patch_decided"
    # durably.set_event / durably.progress (name: the event's key; data: its value as JSON).
    # From workflow code: no position (an event shifts no step); from a step: the step's
    # position and attempt. The latest value of each key is also kept apart from the history
    # (it outlives continue_as_new), where callers read and wait for it.
    EVENT_SET = "event_set"

    @classmethod
    def _missing_(cls, value: object) -> EventKind | None:
        """A kind this version does not know (a newer durably wrote it): kept under its own
        name, so that a history holding one still reads, shows and exports whole. `known`
        is False for it, and a worker parks its run rather than replay it by guesswork."""
        if not isinstance(value, str) or not value:
            return None
        kind = str.__new__(cls, value)
        kind._name_ = value.upper()
        kind._value_ = value
        return kind

    @property
    def known(self) -> bool:
        """Whether this version of durably wrote, and understands, this kind."""
        return self._name_ in EventKind.__members__


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error as recorded: its class's full name, its message, and for an error the user's
    code raised (a step's attempt, an undo, a workflow body), its traceback (user frames;
    durably.core.tracebacks). Two errors are equal when class and message are."""

    error_class: str
    message: str
    traceback: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, error: BaseException) -> ErrorInfo:
        return cls(error_class_name(type(error)), str(error))

    @classmethod
    def raised(cls, error: BaseException, hide: str | Sequence[str] = ()) -> ErrorInfo:
        """The error the user's code raised, with its traceback; `hide`: secrets the code was
        given (an approval's token, the values of secret fields and parameters), replaced
        in the message and the traceback."""
        info = cls.of(error)
        text = user_traceback(error)
        secrets = [hide] if isinstance(hide, str) else list(hide)
        secrets = [secret for secret in secrets if secret]
        if secrets:
            hidden = None if text is None else scrub(text, secrets)
            return cls(info.error_class, scrub(info.message, secrets), hidden)
        return cls(info.error_class, info.message, text)

    def report(self) -> str:
        """Class and message, and the traceback (if recorded) on the lines below: for logs."""
        said = f"{self.error_class}: {self.message}"
        return said if self.traceback is None else f"{said}\n{self.traceback.rstrip()}"


def error_class_name(kind: type[BaseException]) -> str:
    """How an error's class is recorded: its bare name for builtins, else module.QualName."""
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    kind: EventKind
    at: datetime
    position: int | None = None  # the step's place in the workflow, for step events
    name: str | None = None  # the step's name, for step events
    attempt: int | None = None
    data: str | None = None  # JSON text
