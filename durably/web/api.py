"""The HTTP API: everything a person or another service does with runs, under /api. Every
route goes through the app's client (durably.client.client), like the CLI and the app's own code:
the same checks, the same records in the run's history, with the token's name as who acted.

Reads need a token of either role unless the server opened them (`--open-reads`); actions
need a token with the write role. /api/health and /api/ready are open (for probes).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi import Body as FastBody
from starlette.exceptions import HTTPException

from durably.client.client import Client
from durably.client.exports import redacted
from durably.core.attributes import MAX_ATTRIBUTES, attributes_of
from durably.core.audit import Via
from durably.core.bulk import Matching
from durably.core.names import MAX_NAME, NAME_PATTERN, RUN_ID_PATTERN
from durably.core.status import RunStatus
from durably.errors import DurablyError, StoreUnavailable
from durably.stores.records import Happened, RunRecord
from durably.views.bodies import (
    DecideIn,
    FailIn,
    QueryIn,
    ReasonIn,
    RestartIn,
    RetryIn,
    SignalIn,
    SkipIn,
    StartIn,
    UpgradeIn,
)
from durably.views.breakers import breakers
from durably.views.bulk import BulkIn, BulkJobOut, BulkPreviewOut, BulkRunOut
from durably.views.models import (
    ActionOut,
    ApprovalOut,
    AuditPageOut,
    BreakerOut,
    DeadLetterOut,
    HistoryOut,
    QueryOut,
    QueueOut,
    ReleaseOut,
    RunOut,
    RunPageOut,
    ScheduleOut,
    SignalOut,
    StatusOut,
    UpgradeOut,
    WorkerOut,
)
from durably.web.access import Auditor, Reader, Served, Writer, served
from durably.web.auth import Identity
from durably.web.errors import ERROR_RESPONSES

__all__ = ["router"]

router = APIRouter(prefix="/api", responses=ERROR_RESPONSES)
State = Annotated[Served, Depends(served)]
RunId = Annotated[
    str, Path(min_length=1, max_length=MAX_NAME, pattern=RUN_ID_PATTERN, description="The run's id")
]
Name = Annotated[str, Path(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)]
Limit = Annotated[int, Query(ge=1, le=500, description="At most this many")]
T = TypeVar("T")
Body = Annotated[T | None, FastBody()]  # an optional JSON body: none is the same as {}


@router.get("/health", tags=["health"])
def health() -> StatusOut:
    """The server is up (it does not ask the store: that is /api/ready)."""
    return StatusOut(status="ok")


@router.get("/ready", tags=["health"], responses={503: ERROR_RESPONSES[503]})
def ready(state: State) -> StatusOut:
    """The store answers: the server can serve (503 while it cannot be reached)."""
    try:
        state.client.stats()
    except DurablyError as exc:
        raise StoreUnavailable(f"the store cannot be reached: {exc}") from None
    return StatusOut(status="ready")


# -- runs ---------------------------------------------------------------------------------


@router.post(
    "/runs",
    tags=["runs"],
    status_code=201,
    response_model=RunOut,
    responses={
        200: {
            "model": RunOut,
            "description": "The run with this id existed already, with the same workflow and "
            "input; or, for a debounced start, the run of its key it joined",
        }
    },
)
def start(body: StartIn, state: State, who: Writer, response: Response) -> RunOut:
    """Start a run, idempotent on `id`: the same id with the same input answers the existing
    run (200); with a different workflow or input, 409. A debounced start (`debounce`,
    `debounce_key`) answers the run its key gathers starts in: 201 if it made it, else 200."""
    started = state.api.start_json(
        body.workflow,
        json.dumps(body.input),
        id=body.id,
        priority=body.priority,
        correlation_id=body.correlation_id,
        by=who.name,
        attributes=body.attributes,
        debounce=body.debounce,
        debounce_key=body.debounce_key,
        max_wait=body.max_wait,
        queue=body.queue,
        key=body.key,
        delay=body.delay,
        start_at=body.start_at,
    )
    if not started.created:
        response.status_code = 200
    return _shown(state, who, started.run)


@router.get("/runs", tags=["runs"])
def list_runs(
    state: State,
    who: Reader,
    status: Annotated[RunStatus | None, Query()] = None,
    workflow: Annotated[
        str | None, Query(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)
    ] = None,
    correlation_id: Annotated[
        str | None, Query(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)
    ] = None,
    limit: Limit = 50,
    cursor: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
    happened: Annotated[
        list[Happened] | None,
        Query(description="Only runs to which each of these happened (repeat the parameter)"),
    ] = None,
    slower_than: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=40,
            description="Only runs whose status last changed longer than this after their start "
            "(10s, 5m)",
        ),
    ] = None,
    since: Annotated[
        datetime | None, Query(description="Only runs started at or after it (ISO 8601, with zone)")
    ] = None,
    until: Annotated[
        datetime | None, Query(description="Only runs started before it (ISO 8601, with zone)")
    ] = None,
    attr: Annotated[
        list[str] | None,
        Query(
            max_length=MAX_ATTRIBUTES,
            description="Only runs started with this attribute, written name:value (e.g. "
            "customer:42); repeat the parameter: each must match",
        ),
    ] = None,
    key: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_NAME,
            pattern=NAME_PATTERN,
            description="Only runs started with this key",
        ),
    ] = None,
    queue: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_NAME,
            pattern=NAME_PATTERN,
            description="Only runs on this queue (default: the default queue)",
        ),
    ] = None,
) -> RunPageOut:
    """Runs, most recently updated first, a page at a time (pass `next_cursor` back); found
    by status, workflow, correlation id, what happened to them, how long they took, when
    they started, their attributes, key and queue."""
    client = state.client_for(who)
    page = client.runs(
        status=status,
        workflow=workflow,
        limit=limit,
        cursor=cursor,
        correlation_id=correlation_id,
        happened=happened or [],
        slower_than=slower_than,
        since=since,
        until=until,
        attributes=None if attr is None else attributes_of(attr, "attr"),
        key=key,
        queue=queue,
    )
    workers, now = client.workers(), client.clock.now()
    ids = [run.id for run in page.runs]
    histories, attributes = client.store.histories(ids), client.store.attributes(ids)  # a read each
    shown = [
        RunOut.of(run, histories.get(run.id, []), workers, now, attributes.get(run.id))
        for run in page.runs
    ]
    return RunPageOut(runs=shown, next_cursor=page.next_cursor)


# -- bulk actions (registered before /runs/{run_id}, which would take "bulk" for a run's id) --

JobId = Annotated[str, Path(min_length=1, max_length=MAX_NAME, description="The bulk job's id")]


@router.post(
    "/runs/bulk",
    tags=["bulk"],
    status_code=202,
    response_model=None,
    responses={
        202: {"model": BulkJobOut, "description": "The job, running in the background"},
        200: {
            "model": BulkPreviewOut,
            "description": "A dry run, or a filter that matches no run: what would be acted "
            "on; no job is made",
        },
    },
)
def bulk_act(
    body: BulkIn, state: State, who: Writer, request: Request, response: Response
) -> BulkJobOut | BulkPreviewOut:
    """Cancel, retry, pause, resume or restart every run the filter matches, as a job that
    runs in the background and survives a restart of the server: answered at once with the
    job (its progress at `link`). The runs are chosen now; a run the action does not fit is
    skipped, with why. The same person's unfinished job of the same action and filter is
    resumed rather than made again (`resumed`). A filter that names nothing needs
    `all: true`; `dry_run` only counts."""
    run_filter, bulk = body.filter.to_filter(), state.api.bulk
    if body.dry_run:
        response.status_code = 200
        found = bulk.preview(body.action, run_filter, every=body.all, limit=20)
        return BulkPreviewOut.of(body.action, run_filter, found)
    begun = bulk.begin(body.action, run_filter, every=body.all, by=who.name, reason=body.reason)
    if begun.job is None:
        response.status_code = 200
        return BulkPreviewOut.of(body.action, run_filter, Matching({}, []))
    request.app.state.bulk_jobs.submit(begun.job.id)
    return BulkJobOut.of(begun.job, resumed=begun.resumed)


@router.get("/runs/bulk", tags=["bulk"])
def bulk_jobs(
    state: State,
    who: Reader,
    unfinished: Annotated[bool, Query(description="Only jobs with runs left")] = False,
    limit: Limit = 50,
) -> list[BulkJobOut]:
    """Bulk jobs, the newest first, with their progress."""
    jobs = state.client.bulk.jobs(limit=limit, unfinished=unfinished)
    return [BulkJobOut.of(job) for job in jobs]


@router.get("/runs/bulk/{job_id}", tags=["bulk"])
def bulk_job(job_id: JobId, state: State, who: Reader) -> BulkJobOut:
    """A bulk job's progress: how many runs it chose, acted on and skipped; `state` running
    or finished."""
    return BulkJobOut.of(state.client.bulk.job(job_id))


@router.get("/runs/bulk/{job_id}/skipped", tags=["bulk"])
def bulk_skipped(job_id: JobId, state: State, who: Reader, limit: Limit = 100) -> list[BulkRunOut]:
    """The runs the job skipped, each with why, by id."""
    return [BulkRunOut.of(item) for item in state.client.bulk.skipped(job_id, limit=limit)]


def _shown(state: Served, who: Identity, run: RunRecord) -> RunOut:
    """A run an action answers, explained, read again if `who` may not see its payloads."""
    client = state.client_for(who)
    return _explained(client, run if client is state.client else client.get(run.id))


def _explained(client: Client, run: RunRecord) -> RunOut:
    """The run with what it does now and what happens next (`now`, `next`)."""
    now, attributes = client.clock.now(), client.attributes(run.id)
    return RunOut.of(run, client.history(run.id), client.workers(), now, attributes)


@router.get("/runs/{run_id}", tags=["runs"])
def get_run(run_id: RunId, state: State, who: Reader) -> RunOut:
    """The run's state, with what it is doing now and what happens next, in words."""
    client = state.client_for(who)
    return _explained(client, client.get(run_id))


@router.get("/runs/{run_id}/history", tags=["runs"])
def history(run_id: RunId, state: State, who: Reader) -> HistoryOut:
    """Every event of the run, in order, each with its data and in words."""
    client = state.client_for(who)
    client.get(run_id)  # 404 for an unknown run, rather than an empty history
    return HistoryOut.of(run_id, client.history(run_id))


@router.get("/runs/{run_id}/export", tags=["runs"])
def export(run_id: RunId, state: State, who: Reader) -> dict[str, Any]:
    """The run and its whole history, as `durably runs export` writes it (for replay tests),
    with secrets redacted."""
    return redacted(state.client_for(who).export(run_id))


@router.post(
    "/runs/{run_id}/queries/{name}",
    tags=["runs"],
    responses={504: {"description": "No answer within the timeout: the replay was abandoned"}},
)
def query(
    run_id: RunId, name: Name, state: State, who: Reader, body: Body[QueryIn] = None
) -> QueryOut:
    """Ask the run the query `name` (a handler its workflow registered with durably.query):
    the server replays the run's history against the app's code, running no step and
    writing nothing, and answers with the handler's value. A read: it changes nothing."""
    client = state.client_for(who)
    if client is not state.client:  # a token that may not see the run's payloads
        raise HTTPException(
            403, "a query's answer is made from the run's payloads, which this token may not see"
        )
    body = body or QueryIn()
    try:
        answer = client.ask(
            run_id, name, json.dumps(body.args), timeout=timedelta(seconds=body.timeout)
        )
    except TimeoutError as exc:
        raise HTTPException(504, f"{exc} (the body's timeout, in seconds)") from None
    return QueryOut(run=run_id, query=name, answer=json.loads(answer.text), calls=answer.calls)


@router.post("/runs/{run_id}/signals/{name}", tags=["steer"], status_code=202)
def signal(
    run_id: RunId, name: Name, state: State, who: Writer, body: Body[SignalIn] = None
) -> SignalOut:
    """Send the signal `name`: the run's durably.wait_for_signal(name) takes it (signals of
    one name queue up in the order they were sent)."""
    body = body or SignalIn()
    sent = state.api.signal(run_id, name, body.data, by=who.name, dedupe_key=body.dedupe_key)
    return SignalOut(run=run_id, signal=name, message=sent.message_id, stored=sent.stored)


@router.post("/runs/{run_id}/approvals/{name}/approve", tags=["steer"])
def approve(
    run_id: RunId, name: Name, state: State, who: Writer, body: Body[DecideIn] = None
) -> ActionOut:
    """Approve the run's pending approval `name` (an escalation: durably.escalate)."""
    return _decide(state, run_id, name, who, body, approved=True)


@router.post("/runs/{run_id}/approvals/{name}/reject", tags=["steer"])
def reject(
    run_id: RunId, name: Name, state: State, who: Writer, body: Body[DecideIn] = None
) -> ActionOut:
    """Reject the run's pending approval `name`."""
    return _decide(state, run_id, name, who, body, approved=False)


def _decide(
    state: Served, run_id: str, name: str, who: Identity, body: DecideIn | None, *, approved: bool
) -> ActionOut:
    comment = None if body is None else body.comment
    state.api.decide(run_id, name, approved=approved, by=who.name, comment=comment)
    return ActionOut(run=run_id, action="approve" if approved else "reject")


@router.post("/runs/{run_id}/cancel", tags=["steer"])
def cancel(run_id: RunId, state: State, who: Writer, body: Body[ReasonIn] = None) -> ActionOut:
    """Cancel the run: its completed steps are compensated, then it ends cancelled."""
    reason = None if body is None else body.reason
    return ActionOut.of(state.api.cancel(run_id, by=who.name, reason=reason))


@router.post("/runs/{run_id}/pause", tags=["steer"])
def pause(run_id: RunId, state: State, who: Writer, body: Body[ReasonIn] = None) -> ActionOut:
    """Pause the run before its next step (one in flight finishes)."""
    reason = None if body is None else body.reason
    return ActionOut.of(state.api.pause(run_id, by=who.name, reason=reason))


@router.post("/runs/{run_id}/resume", tags=["steer"])
def resume(run_id: RunId, state: State, who: Writer) -> ActionOut:
    """Resume the paused run from where it stopped."""
    return ActionOut.of(state.api.resume(run_id, by=who.name))


@router.post("/runs/{run_id}/retry", tags=["dead letters"])
def retry(run_id: RunId, state: State, who: Writer, body: Body[RetryIn] = None) -> ActionOut:
    """Fresh attempts for a parked run (from `from_step`: every step from there again)."""
    state.api.retry(run_id, by=who.name, from_step=None if body is None else body.from_step)
    return ActionOut(run=run_id, action="retry")


@router.post("/runs/{run_id}/skip", tags=["dead letters"])
def skip(run_id: RunId, state: State, who: Writer, body: Body[SkipIn] = None) -> ActionOut:
    """Record `result` for the parked run's failed step (checked against its return type;
    none: null)."""
    result = None if body is None else body.result
    state.api.skip_step_json(run_id, json.dumps(result), by=who.name)
    return ActionOut(run=run_id, action="skip")


@router.post("/runs/{run_id}/fail", tags=["dead letters"])
def fail(run_id: RunId, body: FailIn, state: State, who: Writer) -> ActionOut:
    """Give up on a parked (or stranded) run: compensate its completed steps, then fail it."""
    state.api.fail(run_id, by=who.name, reason=body.reason)
    return ActionOut(run=run_id, action="fail")


@router.post("/runs/{run_id}/restart", tags=["steer"], status_code=201)
def restart(run_id: RunId, state: State, who: Writer, body: Body[RestartIn] = None) -> RunOut:
    """Restart an ended run from a step, as a new run that reuses the outcomes before it
    (no body: from the first step that failed, was cancelled or undone)."""
    asked = body or RestartIn()
    restarted = state.api.restart(run_id, from_step=asked.from_step, by=who.name, id=asked.id)
    return _shown(state, who, restarted)


@router.post("/runs/{run_id}/release", tags=["steer"])
def release(run_id: RunId, state: State, who: Writer) -> ReleaseOut:
    """The run's worker is dead: end the leases it holds now, for others to take them over."""
    released = state.api.release(run_id, by=who.name)
    return ReleaseOut(run=run_id, worker=released.worker, released=released.count)


# -- lists --------------------------------------------------------------------------------


@router.get("/dead-letters", tags=["dead letters"])
def dead_letters(state: State, who: Reader, limit: Limit = 100) -> list[DeadLetterOut]:
    """Runs parked for a person, newest first, with the root cause of each."""
    return [DeadLetterOut.of(letter) for letter in state.client_for(who).dead_letters(limit=limit)]


@router.get("/approvals", tags=["steer"])
def approvals(state: State, who: Reader, limit: Limit = 100) -> list[ApprovalOut]:
    """Approvals and escalations waiting for a person, oldest first."""
    return [ApprovalOut.of(approval) for approval in state.client_for(who).approvals(limit=limit)]


@router.get("/audit", tags=["audit"])
def audit(
    state: State,
    who: Auditor,
    since: Annotated[
        datetime | None, Query(description="Only actions at or after it (ISO 8601, with zone)")
    ] = None,
    until: Annotated[
        datetime | None, Query(description="Only actions before it (ISO 8601, with zone)")
    ] = None,
    by: Annotated[
        str | None, Query(min_length=1, max_length=MAX_NAME, description="Only this one's")
    ] = None,
    run: Annotated[
        str | None, Query(min_length=1, max_length=MAX_NAME, description="Only those on it")
    ] = None,
    limit: Limit = 100,
    cursor: Annotated[str | None, Query(min_length=1, max_length=500)] = None,
) -> AuditPageOut:
    """The audit trail: every action people and tokens took (start, cancel, pause, resume,
    retry, skip, fail, restart, approve, reject, signal, release, dashboard logins), newest
    first, a page at a time (pass `next_cursor` back). Never a payload's value. Needs a
    token, even on a server whose reads are open."""
    page = state.client.audit(
        limit=limit, cursor=cursor, since=since, until=until, by=by, run_id=run
    )
    return AuditPageOut.of(page)


@router.get("/schedules", tags=["schedules"])
def schedules(state: State, who: Reader) -> list[ScheduleOut]:
    """The schedules in the store, with their next fire time."""
    return [ScheduleOut.of(info) for info in state.app.schedules.all()]


@router.post("/schedules/{name}/pause", tags=["schedules"])
def pause_schedule(name: Name, state: State, who: Writer) -> ActionOut:
    """Pause the schedule: no tick starts a run until it is resumed."""
    state.app.schedules.pause(name, by=who.name, via=Via.API)
    return ActionOut(run="", action="pause schedule", note=name)


@router.post("/schedules/{name}/resume", tags=["schedules"])
def resume_schedule(name: Name, state: State, who: Writer) -> ActionOut:
    """Resume the paused schedule from its next tick."""
    state.app.schedules.resume(name, by=who.name, via=Via.API)
    return ActionOut(run="", action="resume schedule", note=name)


@router.post("/schedules/{name}/trigger", tags=["schedules"])
def trigger_schedule(name: Name, state: State, who: Writer) -> ActionOut:
    """Start the schedule's workflow now, once, outside its ticks."""
    run = state.app.schedules.trigger(name, by=who.name, via=Via.API)
    return ActionOut(run=run, action="trigger schedule", note=name)


@router.get("/breakers", tags=["operations"])
def list_breakers(state: State, who: Reader) -> list[BreakerOut]:
    """Each dependency's breaker and limits."""
    client = state.client
    return [BreakerOut.of(info) for info in breakers(client.gates(), now=client.clock.now())]


@router.get("/workers", tags=["operations"])
def workers(state: State, who: Reader) -> list[WorkerOut]:
    """The workers of the store, live or lately gone, with the versions they run."""
    now: datetime = state.client.clock.now()
    return [WorkerOut.of(beat, now) for beat in state.client.workers()]


@router.post("/upgrade", tags=["operations"])
def upgrade(state: State, who: Writer, body: Body[UpgradeIn] = None) -> list[UpgradeOut]:
    """Move the runs in flight on a version no live worker serves to the server's code, each
    only if that code replays its history (no step runs); the others stay, with where code
    and history part (`why`). `dry_run`: only say what would move."""
    asked = body or UpgradeIn()
    upgrades = state.app.upgrade(
        workflow=asked.workflow, dry_run=asked.dry_run, by=who.name, via=Via.API
    )
    return [UpgradeOut.of(upgraded) for upgraded in upgrades]


@router.get("/queue", tags=["operations"])
def queue(state: State, who: Reader) -> QueueOut:
    """Runs by status, the queue's depth and the age of its oldest due run."""
    now = state.client.clock.now()
    return QueueOut.of(state.client.stats(), now)
