"""Everything durably raises.

DurablyError
├── ConfigError                 a definition or setting is wrong
├── StoreError
│   ├── StoreUnavailable        the store cannot be reached (retryable)
│   ├── SchemaTooNew            the database was migrated by a newer durably
│   └── SchemaTooOld            the database needs `durably migrate` before this durably uses it
├── PayloadError                a value would not come back from JSON unchanged (refused, with
│                               its path and the fix), or a stored one cannot be read
├── RunConflict                 an id is reused with another workflow or input
├── RunNotFound
├── UnknownWorkflow             no workflow is registered under that name
├── UnknownBulkJob              no bulk job (durably runs bulk) has that id
├── NonDeterminismError         replay called another step than the history records
├── MissingCompensation         a step's undo is not registered in the code (the run parks)
├── UnsafeConcurrency           a gather branch made a second durable call (parked, like above)
├── BranchCancelled             a gather branch was cancelled because another branch failed
├── LeaseLost                   this worker no longer owns the run
├── StepFailed                  a step failed for good; what a workflow sees, live and on replay
├── StepTimeout · DeadlineExceeded · PoisonPill · Escalated
│   └── HeartbeatTimeout        (a StepTimeout) a long step's heartbeats stopped
├── SignalTimeout               durably.wait_for_signal: no signal before its timeout
├── RunCancelled                a person cancelled the run (its steps' and its own end)
├── NotInWorkflow               a durable call (sleep, now, ...) made outside workflow code
│   └── QueryRefused            a query handler made a durable call: queries read, never act
├── UnknownQuery                no handler of that name was registered where the replay got
├── QueryFailed                 a query handler raised (.error_class and .message)
├── ChildFailed                 a child run ended other than completed (its class and message)
├── ChildIdTaken                durably.start_child(id=...) named a run that is not its child
├── TransactionAborted          a transactional step went on after its SQL failed (retried)
└── WorkflowFailed              .error_class and .message of the run's failure

Raised by users in steps:
Terminal                        the step fails at once, without retry
└── TransactionEnded            (raised by durably) a transactional step ended its transaction
Throttled(retry_after=...)      retry, but not before retry_after
"""

from __future__ import annotations

from datetime import timedelta

from durably.durations import Duration, parse_duration

__all__ = [
    "BranchCancelled",
    "ChildFailed",
    "ChildIdTaken",
    "ConfigError",
    "DeadlineExceeded",
    "DurablyError",
    "Escalated",
    "EventNotSet",
    "HeartbeatTimeout",
    "LeaseLost",
    "MissingCompensation",
    "NonDeterminismError",
    "NotInWorkflow",
    "PayloadError",
    "PoisonPill",
    "QueryFailed",
    "QueryRefused",
    "RunCancelled",
    "RunConflict",
    "RunEnded",
    "RunNotFound",
    "SchemaTooNew",
    "SchemaTooOld",
    "SignalTimeout",
    "StepFailed",
    "StepTimeout",
    "StoreError",
    "StoreUnavailable",
    "Terminal",
    "Throttled",
    "TransactionAborted",
    "TransactionEnded",
    "UnknownBulkJob",
    "UnknownQuery",
    "UnknownSchedule",
    "UnknownWorkflow",
    "UnsafeConcurrency",
    "UpdateRefused",
    "WorkflowFailed",
]


class DurablyError(Exception):
    """Base of every error durably raises."""


class ConfigError(DurablyError):
    """A workflow, step or setting is defined in a way durably cannot use."""


class StoreError(DurablyError):
    """The store failed."""


class StoreUnavailable(StoreError):
    """The store cannot be reached; the operation can be tried again."""


class SchemaTooNew(StoreError):
    """The database schema is newer than this version of durably understands."""


class SchemaTooOld(StoreError):
    """The database schema is older than this version of durably uses, and this opener does not
    migrate it (a command that only reads, `$DURABLY_MIGRATE=never`, or a role that may not
    change the schema): `durably migrate` brings it up to date."""


class PayloadError(DurablyError):
    """A value is refused because it would not read back from JSON equal and of the same
    type (or arguments do not fit the function's signature), or a stored payload cannot be
    decoded. The message names the path inside the value and what to do."""


class RunConflict(DurablyError):
    """A run id already exists with another workflow or another input."""


class RunNotFound(DurablyError):
    """No run has that id."""


class EventNotSet(DurablyError, LookupError):
    """A run ended without setting the event a caller waited for (durably.set_event)."""


class RunEnded(DurablyError):
    """A message (a signal, an update) was sent to a run that has ended: none reaches it."""


class UpdateRefused(DurablyError):
    """The run refused an update (durably.update): `.by` says what refused it ("validator",
    "handler", or "run" when it ended first), `.error_class` and `.detail` what was raised."""

    def __init__(self, message: str, *, name: str, by: str, error_class: str, detail: str) -> None:
        super().__init__(message)
        self.name, self.by, self.error_class, self.detail = name, by, error_class, detail


class UnknownWorkflow(DurablyError):
    """No workflow is registered under the given name."""


class UnknownSchedule(ConfigError):
    """No schedule has the given name, in the store or the app."""


class UnknownBulkJob(DurablyError):
    """No bulk job (durably.core.bulk) has the given id in the store."""


_CHANGED = (
    "the workflow code changed under a run in flight (put the change behind "
    '`if durably.patched("...")`, or let old runs finish on the old code: give the new code a '
    "new version, or register it under a new workflow name)"
)


class NonDeterminismError(DurablyError):
    """The workflow called a different step than its history records at that position, or
    ended (returned, failed, continued as new) where its history records a later call."""

    def __init__(
        self, *, position: int, recorded: str, called: str, why: str | None = None
    ) -> None:
        super().__init__(
            why
            or f"step #{position} is recorded as {recorded!r} but the workflow now calls "
            f"{called!r}; {_CHANGED}"
        )
        self.position = position
        self.recorded = recorded
        self.called = called

    @classmethod
    def ended_early(cls, *, position: int, recorded: str, ending: str) -> NonDeterminismError:
        """The body `ending` ("returned", "raised ValueError", ...) before call #`position`,
        which its history records as `recorded`."""
        why = (
            f"step #{position} is recorded as {recorded!r} but the workflow now {ending} "
            f"before calling it; {_CHANGED}"
        )
        return cls(position=position, recorded=recorded, called="", why=why)


class MissingCompensation(DurablyError):
    """A step that completed (or may have taken effect) must be undone, but its step or its
    compensation is not registered in the code that runs the run (a deploy renamed or
    dropped it). The run is parked `compensation_failed` rather than ended with the effect
    left in the world."""


class UnsafeConcurrency(DurablyError):
    """A concurrent branch (of durably.gather or asyncio.gather) made a second durable call:
    its place in the history would depend on timing. The run is parked for a code fix."""


class BranchCancelled(DurablyError):
    """A step of a durably.gather was cancelled (or never started) because another branch of
    the same gather failed for good."""


class LeaseLost(DurablyError):
    """This worker's lease on the run was taken over; its writes are refused."""


class StepFailed(DurablyError):
    """A step failed for good. The workflow sees this both live and on replay.

    `reason` is "terminal" (retrying cannot help), "attempts exhausted", "budget exhausted"
    or "escalated". Left uncaught, a terminal failure fails the run (after compensation);
    the others park it in the dead-letter list for a person.
    """

    def __init__(self, step: str, error_class: str, message: str, reason: str = "terminal") -> None:
        super().__init__(f"step {step!r} failed ({reason}) with {error_class}: {message}")
        self.step = step
        self.error_class = error_class
        self.message = message
        self.reason = reason


class Escalated(DurablyError):
    """A workflow asked for a person (durably.escalate); the run waits for their answer."""


class NotInWorkflow(DurablyError):
    """A call that is recorded in a workflow's history (durably.sleep, now, ...) was made
    outside workflow code: outside any run, or inside a step. Never retried."""


class QueryRefused(NotInWorkflow):
    """A query handler (durably.query) called a durable function (a step, durably.sleep,
    ...): a query reads the run's state as replay rebuilt it, it never acts."""


class UnknownQuery(DurablyError):
    """No query handler of that name was registered by the point the run's replay reached
    (the message lists the names that were)."""


class QueryFailed(DurablyError):
    """A query handler raised: `.error_class` and `.message` are its exception's."""

    def __init__(self, name: str, error_class: str, message: str) -> None:
        super().__init__(f"query {name!r} raised {error_class}: {message}")
        self.name = name
        self.error_class = error_class
        self.message = message


class SignalTimeout(DurablyError):
    """durably.wait_for_signal: no signal of that name came before the wait's timeout."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class RunCancelled(DurablyError):
    """A person cancelled the run: what its cancelled step attempt and the run itself end
    with, after the run's completed steps were compensated."""


class StepTimeout(DurablyError):
    """A step attempt ran past its timeout. Whether its effect happened is unknown."""


class HeartbeatTimeout(StepTimeout):
    """A step attempt sent no heartbeat (durably.heartbeat) for its heartbeat_timeout: lost
    like one past its timeout (its effect is unknown: reconciled, then retried)."""


class DeadlineExceeded(DurablyError):
    """The workflow's deadline passed before it finished."""


class PoisonPill(DurablyError):
    """Workers kept dying while running this run; it is parked instead of killing more."""


class WorkflowFailed(DurablyError):
    """The run ended in failure; `error_class` and `message` say why."""

    def __init__(self, run_id: str, status: str, error_class: str, message: str) -> None:
        super().__init__(f"run {run_id!r} ended {status}: {error_class}: {message}")
        self.run_id = run_id
        self.status = status
        self.error_class = error_class
        self.message = message


class ChildFailed(DurablyError):
    """A child run (durably.start_child, or a workflow called from a workflow) ended other
    than completed: what its parent sees, live and on replay. `status` is how it ended
    (failed, cancelled, timed_out); `error_class` and `message` are the child's own error."""

    def __init__(
        self, run_id: str, workflow: str, status: str, error_class: str, message: str
    ) -> None:
        super().__init__(
            f"child run {run_id!r} ({workflow}) ended {status}: {error_class}: {message}"
        )
        self.run_id = run_id
        self.workflow = workflow
        self.status = status
        self.error_class = error_class
        self.message = message


class ChildIdTaken(DurablyError):
    """durably.start_child(id=...) named a run that exists and is not this call's child:
    no child was started (what the child's outcome says, as a ChildFailed)."""


class Terminal(Exception):
    """Raise (or subclass) in a step to fail it at once: retrying cannot help."""


class TransactionAborted(DurablyError):
    """A statement of a transactional step failed and the step went on (PostgreSQL aborts
    the transaction then): nothing of it was written, and the attempt failed."""


class TransactionEnded(Terminal):
    """A transactional step ended its own transaction (a COMMIT or ROLLBACK statement): its
    writes may be durable without its outcome, so it fails for good, never retried."""


class Throttled(Exception):
    """Raise in a step when a service says "slow down": retried no sooner than `retry_after`."""

    def __init__(self, message: str = "throttled", *, retry_after: Duration = "1s") -> None:
        super().__init__(message)
        self.retry_after: timedelta = parse_duration(retry_after, what="retry_after")
