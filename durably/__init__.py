"""durably: durable workflows for Python.

app = durably.App()                       # ./durably.db, or durably.App("postgresql://...")

@app.step
async def charge(order_id: str, amount: int) -> str:
    return await payments.charge(amount, idempotency_key=durably.idempotency_key())

@app.workflow
async def checkout(order_id: str, amount: int) -> str:
    return await charge(order_id, amount)

app.start(checkout, "o-1", 120, id="order-o-1").result(timeout=60)
"""

from durably.app import App
from durably.client.approvals import PendingApproval
from durably.client.control import Steered
from durably.client.dead_letters import DeadLetter
from durably.client.handles import RunHandle
from durably.client.starts import Start
from durably.core.approvals import ApprovalRequest
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.payloads import Decision
from durably.core.retry import Retry
from durably.core.secrets import Secret
from durably.core.status import RunStatus
from durably.errors import (
    BranchCancelled,
    ChildFailed,
    ChildIdTaken,
    ConfigError,
    DeadlineExceeded,
    DurablyError,
    Escalated,
    EventNotSet,
    HeartbeatTimeout,
    LeaseLost,
    MissingCompensation,
    NonDeterminismError,
    NotInWorkflow,
    PayloadError,
    PoisonPill,
    QueryFailed,
    QueryRefused,
    RunCancelled,
    RunConflict,
    RunEnded,
    RunNotFound,
    SchemaTooNew,
    SchemaTooOld,
    SignalTimeout,
    StepFailed,
    StepTimeout,
    StoreError,
    StoreUnavailable,
    Terminal,
    Throttled,
    TransactionAborted,
    TransactionEnded,
    UnknownQuery,
    UnknownWorkflow,
    UpdateRefused,
    WorkflowFailed,
)
from durably.resilience import Breaker, Dependency
from durably.runtime.worker import Worker
from durably.stores import RunRecord
from durably.workflow.children import ChildHandle, continue_as_new, start_child
from durably.workflow.context import cancelled, connection, idempotency_key
from durably.workflow.definitions import Step, StepOptions, Workflow
from durably.workflow.determinism import deprecated_patch, now, patched, random, uuid4
from durably.workflow.gather import gather
from durably.workflow.heartbeats import heartbeat, last_heartbeat
from durably.workflow.outputs import close_stream, progress, set_event, write_stream
from durably.workflow.people import approval, escalate
from durably.workflow.queries import query
from durably.workflow.updates import update
from durably.workflow.waits import sleep, sleep_until, wait_for_signal

__all__ = [
    "App",
    "ApprovalRequest",
    "BranchCancelled",
    "Breaker",
    "ChildFailed",
    "ChildHandle",
    "ChildIdTaken",
    "ConfigError",
    "DeadLetter",
    "DeadlineExceeded",
    "Decision",
    "Dependency",
    "DurablyError",
    "ErrorInfo",
    "Escalated",
    "Event",
    "EventKind",
    "EventNotSet",
    "HeartbeatTimeout",
    "LeaseLost",
    "MissingCompensation",
    "NonDeterminismError",
    "NotInWorkflow",
    "PayloadError",
    "PendingApproval",
    "PoisonPill",
    "QueryFailed",
    "QueryRefused",
    "Retry",
    "RunCancelled",
    "RunConflict",
    "RunEnded",
    "RunHandle",
    "RunNotFound",
    "RunRecord",
    "RunStatus",
    "SchemaTooNew",
    "SchemaTooOld",
    "Secret",
    "SignalTimeout",
    "Start",
    "Steered",
    "Step",
    "StepFailed",
    "StepOptions",
    "StepTimeout",
    "StoreError",
    "StoreUnavailable",
    "Terminal",
    "Throttled",
    "TransactionAborted",
    "TransactionEnded",
    "UnknownQuery",
    "UnknownWorkflow",
    "UpdateRefused",
    "Worker",
    "Workflow",
    "WorkflowFailed",
    "approval",
    "cancelled",
    "close_stream",
    "connection",
    "continue_as_new",
    "deprecated_patch",
    "escalate",
    "gather",
    "heartbeat",
    "idempotency_key",
    "last_heartbeat",
    "now",
    "patched",
    "progress",
    "query",
    "random",
    "set_event",
    "sleep",
    "sleep_until",
    "start_child",
    "update",
    "uuid4",
    "wait_for_signal",
    "write_stream",
]
