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

from durably.app import App, RunHandle
from durably.core.history import ErrorInfo, Event, EventKind
from durably.core.status import RunStatus
from durably.definitions import Step, Workflow
from durably.errors import (
    ConfigError,
    DurablyError,
    LeaseLost,
    NonDeterminismError,
    PayloadError,
    RunConflict,
    RunNotFound,
    SchemaTooNew,
    StepFailed,
    StoreError,
    StoreUnavailable,
    Terminal,
    UnknownWorkflow,
    WorkflowFailed,
)
from durably.runtime.context import idempotency_key
from durably.runtime.worker import Worker

__all__ = [
    "App",
    "ConfigError",
    "DurablyError",
    "ErrorInfo",
    "Event",
    "EventKind",
    "LeaseLost",
    "NonDeterminismError",
    "PayloadError",
    "RunConflict",
    "RunHandle",
    "RunNotFound",
    "RunStatus",
    "SchemaTooNew",
    "Step",
    "StepFailed",
    "StoreError",
    "StoreUnavailable",
    "Terminal",
    "UnknownWorkflow",
    "Worker",
    "Workflow",
    "WorkflowFailed",
    "idempotency_key",
]
