"""Asking a person from workflow code: `approval` waits for a decision (approve or reject,
with notices, reminders and a timeout), `escalate` parks the run until a person answers.
The engine's side of an approval is runtime/approvals.py; a person's, client/approvals.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durably.codec.encoding import encode
from durably.codec.parameters import NO_HINT
from durably.core.approvals import ESCALATION, ON_TIMEOUT
from durably.core.signals import check_signal_name
from durably.durations import Duration
from durably.errors import DurablyError, Escalated, PayloadError
from durably.workflow.context import current_execution, here
from durably.workflow.definitions import Step
from durably.workflow.waits import checked_duration

__all__ = ["ApprovalCall", "approval", "escalate"]


@dataclass(frozen=True, slots=True)
class ApprovalCall:
    """A durably.approval call, as the workflow made it."""

    name: str
    timeout: timedelta | None
    on_timeout: str
    remind_after: timedelta | None
    notify: Step | None
    details: str | None  # JSON


def approval(
    name: str,
    *,
    timeout: Duration | None = None,
    on_timeout: str = "reject",
    remind_after: Duration | None = None,
    notify: Step | None = None,
    details: Any = None,
) -> Any:
    """Wait durably for a person to approve or reject; returns the durably.Decision.

    `notify`: a step (`@app.step`, taking one durably.ApprovalRequest) called with the request
    and its single-use token, and again every `remind_after` with a fresh token. Operators can
    decide without a token (`durably approve RUN NAME`). After `timeout`, durably decides by
    itself (`on_timeout` "reject" or "approve"), or "escalate"s: the approval then waits for a
    person with no timeout. Meanwhile the run is parked `needs_attention` and holds nothing.
    """
    check_signal_name(name, what="an approval")
    if on_timeout not in ON_TIMEOUT:
        raise DurablyError(
            f"durably.approval(on_timeout=...) must be one of {', '.join(ON_TIMEOUT)}, "
            f"not {on_timeout!r}"
        )
    limit = None if timeout is None else checked_duration(timeout, "the approval's timeout")
    remind = None if remind_after is None else checked_duration(remind_after, "remind_after")
    if notify is not None and not isinstance(notify, Step):
        raise DurablyError(
            f"durably.approval(notify=...) must be a step (a function decorated with @app.step "
            f"that takes one durably.ApprovalRequest), not {notify!r}"
        )
    try:
        text = None if details is None else encode(details, NO_HINT, what="the approval's details")
    except PayloadError as exc:
        raise DurablyError(str(exc)) from None
    ask = ApprovalCall(name, limit, on_timeout, remind, notify, text)
    execution = here("approval")
    if execution.is_async:
        return execution.approval(ask)
    return execution.run_blocking(lambda: execution.approval(ask))


def _ask_a_person(reason: str) -> Any:
    raise Escalated(reason)


_ESCALATION = Step(_ask_a_person, ESCALATION)


def escalate(reason: str) -> Any:
    """Park the run for a person, with `reason`; returns the answer they give.

    The run waits in the dead-letter list (needs_attention). `app.client.skip_step(run_id,
    result=answer)` resumes it with `escalate(...)` returning `answer`; `app.client.fail(run_id)`
    compensates and fails it. Await it in an async workflow, like a step.
    """
    if current_execution() is None:
        raise DurablyError("durably.escalate() can only be called inside a workflow")
    return _ESCALATION(reason)
