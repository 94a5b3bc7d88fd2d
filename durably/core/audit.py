"""The audit trail: who did what to which run, how, and when, across every run.

A person's action (or a program's through a token) is recorded by the store in the same
transaction as the write that does it, so the trail and the runs cannot disagree: an action
that did not happen has no entry, and one that did has exactly one. An entry holds who acted,
the action, how they reached durably (the API, the dashboard, the CLI, the library), the run
and its workflow, and a short detail: a reason, a step's or a signal's name. Never a payload's
value (an input, a signal's data, a result): those may be secret.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

__all__ = ["Action", "Audit", "AuditEntry", "Via", "audit_of", "of_job"]

_MAX_DETAIL_TEXT = 200  # characters of a reason or a comment kept in an entry's detail


class Action(StrEnum):
    """What a person did."""

    START = "start"
    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"
    RETRY = "retry"
    SKIP = "skip"
    FAIL = "fail"
    RESTART = "restart"
    APPROVE = "approve"
    REJECT = "reject"
    SIGNAL = "signal"
    MESSAGE = "message"  # a message of the caller's own kind to a run's inbox (Client.send)
    RELEASE = "release"  # ended a dead worker's leases
    LOGIN = "login"  # to the dashboard, with a token
    LOGOUT = "logout"
    UPGRADE = "upgrade"  # moved a stranded run to the deployed version (durably upgrade)
    PAUSE_SCHEDULE = "pause_schedule"
    RESUME_SCHEDULE = "resume_schedule"
    TRIGGER_SCHEDULE = "trigger_schedule"  # started a run of it now (the entry names the run)
    BACKFILL_SCHEDULE = "backfill_schedule"  # started its missed ticks' runs
    ADD_WEBHOOK = "add_webhook"  # subscribed a URL to runs' state changes (durably webhooks)
    REMOVE_WEBHOOK = "remove_webhook"
    RETRY_DELIVERY = "retry_delivery"  # sent a dead webhook delivery again


class Via(StrEnum):
    """How the person reached durably."""

    API = "api"
    DASHBOARD = "dashboard"
    CLI = "cli"
    LIBRARY = "library"


@dataclass(frozen=True, slots=True)
class Audit:
    """An entry to record with the write that does the action (the store adds the time, the
    run and its workflow). `detail`: JSON, with no payload's value in it."""

    action: Action
    by: str
    via: Via
    detail: str | None = None
    # the bulk job that acts (durably.core.bulk): the store settles the job's run with the
    # entry, and refuses a second entry of the job on the run, rolling the action back
    job: str | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An entry of the trail as the store keeps it."""

    id: int  # the order entries were recorded in
    at: datetime
    by: str
    action: str
    via: str
    run_id: str | None
    workflow: str | None
    detail: str | None  # JSON


def audit_of(action: Action, by: str, via: Via, **detail: str | int | None) -> Audit:
    """The entry for `action`, with the given details that are set (texts cut short)."""
    kept = {
        key: value[:_MAX_DETAIL_TEXT] if isinstance(value, str) else value
        for key, value in detail.items()
        if value is not None
    }
    return Audit(action, by, via, json.dumps(kept, sort_keys=True) if kept else None)


def of_job(entry: Audit, job: str | None) -> Audit:
    """`entry` as an action of the bulk job `job` (durably.core.bulk), named in its detail;
    as it is for None."""
    if job is None:
        return entry
    detail = {**(json.loads(entry.detail) if entry.detail else {}), "job": job}
    return replace(entry, detail=json.dumps(detail, sort_keys=True), job=job)
