"""The dashboard's bulk actions (durably.client.bulk): the runs list's bar, which acts on the
runs ticked in the list or on every run matching the list's filter (its script asks the
person to confirm, naming the action and how many runs), and the pages that follow the jobs
(/bulk, and /bulk/{id}, which refreshes itself while its job runs). The server runs each
job in the background (durably.web.jobs)."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from durably.client.bulk import Begun
from durably.client.pages import status_of
from durably.core.bulk import RunFilter
from durably.errors import DurablyError, PayloadError, UnknownBulkJob
from durably.web.access import Served, served
from durably.web.auth import Identity
from durably.web.dashboard import Person, Viewer, _back, _local, _page
from durably.web.sessions import COOKIE

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
State = Annotated[Served, Depends(served)]
_SKIPPED_SHOWN = 200  # skipped runs a job's page lists, with why


@router.post("/runs/bulk")
async def act(request: Request, state: State, who: Person) -> Response:
    """Make (or resume) the job the bar asks for, as the person, and show its page."""
    form = await request.form()
    back = _local(str(form.get("back", "/runs")))
    if who is None:
        return RedirectResponse(f"/login?next={quote(back)}", status_code=303)
    if not state.sessions.check_csrf(request.cookies.get(COOKIE), str(form.get("csrf", ""))):
        refused = "the form's CSRF token is missing or stale: reload the page and try again"
        return _back(back, refused=refused)
    if not who.can_write:
        return _back(back, refused=f"{who.name} may only read: acting needs a write token")
    try:
        begun = await run_in_threadpool(_begin, state, who, form)
    except (DurablyError, ValueError) as exc:
        return _back(back, refused=str(exc))
    if begun.job is None:
        return _back(back, said=f"no run matches: nothing to {form.get('action')}")
    request.app.state.bulk_jobs.submit(begun.job.id)
    job = begun.job
    said = (
        f"your unfinished bulk job of this {job.action} goes on where it stopped"
        if begun.resumed
        else f"{job.action} of {job.total} run(s) under way"
    )
    return _back(f"/bulk/{job.id}", said=said)


@router.get("/bulk", response_class=HTMLResponse)
def jobs_page(
    request: Request,
    state: State,
    who: Viewer,
    unfinished: Annotated[bool, Query()] = False,
) -> Response:
    jobs = state.client.bulk.jobs(limit=100, unfinished=unfinished)
    return _page(request, state, who, "bulk_jobs.html", jobs=jobs, unfinished=unfinished)


@router.get("/bulk/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str, state: State, who: Viewer) -> Response:
    bulk = state.client.bulk
    try:
        job = bulk.job(job_id)
    except UnknownBulkJob as exc:
        return _page(request, state, who, "missing.html", message=str(exc))
    skipped = bulk.skipped(job_id, limit=_SKIPPED_SHOWN)
    return _page(request, state, who, "bulk_job.html", job=job, skipped=skipped)


def _begin(state: Served, who: Identity, form: FormData) -> Begun:
    """The job for the bar's form: its action, on the runs ticked (`scope` selected) or on
    every run matching the list's filter (`scope` matching)."""
    action = str(form.get("action", ""))
    reason = str(form.get("reason", "")).strip() or None
    scope = form.get("scope")
    if scope == "selected":
        ids = tuple(str(run_id) for run_id in form.getlist("ids"))
        if not ids:
            raise PayloadError("no run is ticked: tick runs in the list, or act on all matching")
        run_filter, every = RunFilter(ids=ids), False
    elif scope == "matching":
        status, workflow = form.get("status") or None, form.get("workflow") or None
        run_filter = RunFilter(
            status=None if status is None else status_of(str(status)),
            workflow=None if workflow is None else str(workflow),
        )
        every = run_filter.empty  # the list without a filter: every run, as its button says
    else:
        raise PayloadError(f"the form's scope {scope!r} is neither selected nor matching")
    return state.dashboard.bulk.begin(action, run_filter, every=every, by=who.name, reason=reason)
