"""The dashboard: server-rendered pages (Jinja2) over the same client as the API, for people.

A person logs in with an API token once (/login); a signed session cookie then says who they
are. Every form carries the session's CSRF token and posts to an action route that acts
through the client, with the person's token name as who acted, then redirects back with what
happened (or what was refused, and why) at the top of the page.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from durably.client.pages import status_of
from durably.core.approvals import fold_approvals
from durably.core.attributes import attributes_of
from durably.core.audit import Action, Via
from durably.core.bulk import RunFilter
from durably.core.status import FINAL, PARKED, RunStatus
from durably.durations import parse_duration
from durably.errors import DurablyError, PayloadError, RunNotFound
from durably.stores.records import Happened
from durably.views.actions import allowed
from durably.views.breakers import breakers
from durably.views.deploys import summary
from durably.views.details import short
from durably.views.explaining import explain, root_cause
from durably.views.gantt import gantt, span_seconds
from durably.views.published import event_rows, progress_of
from durably.views.timeline import describe_run, timeline
from durably.web.access import Served, count_failure, locked_out, lockout_message, served
from durably.web.auth import Identity
from durably.web.charts import chart, per_minute
from durably.web.sessions import COOKIE

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
# a stored value as a person may see it: encrypted ones masked, secrets redacted, cut short
templates.env.filters["shown"] = lambda text, limit=120: short(text or "", limit)
State = Annotated[Served, Depends(served)]
_STATUSES = [str(status) for status in RunStatus]


class _LoginNeeded(Exception):
    pass


def person(request: Request, state: State) -> Identity | None:
    """Who is looking: their session's identity; None when nobody logged in (then only a
    server with open reads shows pages)."""
    identity = state.sessions.read(request.cookies.get(COOKIE))
    return identity if identity is not None and state.tokens.knows(identity) else None


Person = Annotated[Identity | None, Depends(person)]


class LogInFirst(Exception):
    """A page asked for by nobody logged in, on a server whose reads are not open: answered
    with the login page before the page's handler reads the store (an anonymous request
    costs the database nothing)."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


def viewer(request: Request, state: State) -> Identity | None:
    """Who looks at a page: their session's identity, or None on a server with open reads;
    else LogInFirst."""
    who = person(request, state)
    if who is None and not state.open_reads:
        query = "?" + request.url.query if request.url.query else ""
        raise LogInFirst(f"/login?next={quote(str(request.url.path) + query)}")
    return who


Viewer = Annotated[Identity | None, Depends(viewer)]


async def log_in_first(request: Request, exc: LogInFirst) -> Response:
    return RedirectResponse(exc.target, status_code=303)


def _page(
    request: Request, state: Served, who: Identity | None, template: str, **context: Any
) -> Response:
    cookie = request.cookies.get(COOKIE)
    csrf = state.sessions.csrf(cookie) if cookie and who is not None else ""
    return templates.TemplateResponse(
        request,
        template,
        {
            "who": who,
            "csrf": csrf,
            "said": request.query_params.get("said"),
            "refused": request.query_params.get("refused"),
            "page": template.split(".")[0],
            **context,
        },
    )


# -- login ----------------------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, next: str = "/runs", refused: str | None = None) -> Response:
    return templates.TemplateResponse(
        request, "login.html", {"next": _local(next), "refused": refused, "who": None}
    )


@router.post("/login")
def login(
    request: Request,
    state: State,
    token: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/runs",
) -> Response:
    wait = locked_out(request, state)  # before the token is looked at
    if wait is not None:
        return templates.TemplateResponse(
            request,
            "login.html",
            {"next": _local(next), "refused": lockout_message(wait), "who": None},
            status_code=429,
            headers={"Retry-After": str(wait)},
        )
    identity = state.tokens.identify(token.strip()) if token.strip() else None
    if identity is None:
        count_failure(request, state)
        said = urlencode(
            {"next": _local(next), "refused": "that token is not one this server knows"}
        )
        return RedirectResponse(f"/login?{said}", status_code=303)
    state.dashboard.record(Action.LOGIN, by=identity.name)  # before the session is given
    response = RedirectResponse(_local(next), status_code=303)
    secure = request.url.scheme == "https"  # behind a TLS proxy that says so (proxy headers)
    response.set_cookie(
        COOKIE, state.sessions.issue(identity), httponly=True, samesite="strict", secure=secure
    )
    return response


@router.post("/logout")
def logout(request: Request, state: State, csrf: Annotated[str, Form()] = "") -> Response:
    """End the session on the server too (a copy of its cookie is refused from now on); like
    every form, only with the session's CSRF token."""
    cookie = request.cookies.get(COOKIE)
    if not state.sessions.check_csrf(cookie, csrf):
        refused = "the form's CSRF token is missing or stale: reload the page and try again"
        return _back("/runs", refused=refused)
    who = person(request, state)
    state.sessions.end(cookie)
    if who is not None:
        state.dashboard.record(Action.LOGOUT, by=who.name)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


def _local(target: str) -> str:
    """Only a path of this server (never another site) is a place to go after logging in."""
    return target if target.startswith("/") and not target.startswith("//") else "/runs"


# -- pages --------------------------------------------------------------------------------


@router.get("/")
def home() -> Response:
    return RedirectResponse("/runs", status_code=303)


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    state: State,
    who: Viewer,
    status: Annotated[str | None, Query()] = None,
    workflow: Annotated[str | None, Query()] = None,
    q: Annotated[str | None, Query(description="A run's id or a correlation id")] = None,
    cursor: Annotated[str | None, Query()] = None,
    happened: Annotated[str | None, Query()] = None,
    slower_than: Annotated[str | None, Query()] = None,
    attr: Annotated[str | None, Query(description="An attribute, name:value")] = None,
    key: Annotated[str | None, Query()] = None,
    queue: Annotated[str | None, Query()] = None,
    since: Annotated[str | None, Query(description="A duration back from now, or a time")] = None,
    until: Annotated[str | None, Query(description="A time")] = None,
) -> Response:
    client = state.client_for(who)
    counts = client.stats().by_status
    status = status if status in _STATUSES else None
    workflow = workflow or None
    found, next_cursor, refused, matching = [], None, None, None
    try:
        if q:
            found = client.runs(correlation_id=q.strip(), limit=50).runs
            with contextlib.suppress(RunNotFound):
                found = [client.get(q.strip()), *found]
        else:
            now = client.clock.now()
            page = client.runs(
                status=status,
                workflow=workflow,
                limit=50,
                cursor=cursor,
                happened=[happened] if happened else [],
                slower_than=slower_than or None,
                attributes=attributes_of([attr.strip()], "the attribute") if attr else None,
                key=key.strip() if key else None,
                queue=queue.strip() if queue else None,
                since=_since(since, now) if since else None,
                until=_moment(until, "until") if until else None,
            )
            found, next_cursor = page.runs, page.next_cursor
            # "All N matching" acts on the status and workflow filters; offered only when no
            # other filter narrows the list, so that it acts on exactly the runs listed.
            narrowed = happened or slower_than or attr or key or queue or since or until
            if not narrowed and who is not None and who.can_write:
                chosen = RunFilter(status=status_of(status) if status else None, workflow=workflow)
                matching = client.bulk.count(chosen)  # what the bar's "all N" acts on
    except DurablyError as exc:
        refused = str(exc)
    filters = {"attr": attr, "key": key, "queue": queue, "since": since, "until": until}
    return _page(
        request,
        state,
        who,
        "runs.html",
        runs=found,
        counts=counts,
        statuses=_STATUSES,
        status=status,
        workflow=workflow or "",
        q=q or "",
        happened=happened or "",
        slower_than=slower_than or "",
        happenings=[str(what) for what in Happened],
        next_cursor=next_cursor,
        list_refused=refused,
        attributes=client.store.attributes([run.id for run in found]),  # one read
        **{name: given or "" for name, given in filters.items()},
        matching=matching,
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str, state: State, who: Viewer) -> Response:
    client = state.client_for(who)
    try:
        run = client.get(run_id)
    except RunNotFound as exc:
        return _page(request, state, who, "missing.html", message=str(exc))
    events, workers, now = client.history(run_id), client.workers(), client.clock.now()
    attributes, published = client.attributes(run_id), client.store.published_events(run_id)
    pending = [a for a in fold_approvals(events) if a.pending and run.status not in FINAL]
    # a run under way: its chart runs to now; one that ended or waits for a person: its own
    until = None if run.status in FINAL or run.status in PARKED else now
    return _page(
        request,
        state,
        who,
        "run.html",
        run=run,
        explanation=explain(run, events, workers, now),
        cause=None
        if run.error is None or run.status is RunStatus.CANCELLED
        else root_cause(events),
        pairs=[p for p in describe_run(run, events, workers, now) if p[0] != "now"],
        attributes=attributes,  # each a link to the runs that share it
        progress=progress_of(published),  # durably.progress, and durably.set_event's keys
        published=event_rows(published),
        rows=timeline(events),
        gantt=gantt(events, until),
        span=span_seconds(events, until),
        approvals=pending,
        parked=run.status in PARKED,
        ended=run.status in FINAL,
        can={str(action) for action in allowed(run, events, now)},
    )


@router.get("/dead-letters", response_class=HTMLResponse)
def dead_letters_page(request: Request, state: State, who: Viewer) -> Response:
    letters = state.client_for(who).dead_letters(limit=200)
    return _page(request, state, who, "dead_letters.html", letters=letters)


@router.get("/approvals", response_class=HTMLResponse)
def approvals_page(request: Request, state: State, who: Viewer) -> Response:
    pending = state.client_for(who).approvals(limit=200)
    return _page(request, state, who, "approvals.html", approvals=pending)


@router.get("/breakers", response_class=HTMLResponse)
def breakers_page(request: Request, state: State, who: Viewer) -> Response:
    client = state.client
    gates = breakers(client.gates(), now=client.clock.now())
    return _page(request, state, who, "breakers.html", breakers=gates)


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, state: State, who: Viewer) -> Response:
    client = state.client
    now = client.clock.now()
    stats = client.stats()
    sampler = request.app.state.sampler
    sampler.add(stats, now)  # the charts end where the table stands
    samples = sampler.samples()
    parked = tuple(str(s) for s in PARKED)
    ended = client.activity(since=now - timedelta(hours=1))
    bad = {str(RunStatus.FAILED), str(RunStatus.TIMED_OUT), *parked}
    charts = [
        per_minute("runs completed a minute", ended, {str(RunStatus.COMPLETED)}, now),
        per_minute("runs failed, timed out or parked a minute", ended, bad, now),
        chart("queue depth (due runs)", samples, lambda s: float(s.due), now),
        chart("oldest due run's wait (s)", samples, lambda s: s.oldest_due_seconds, now),
        chart("running", samples, _status(str(RunStatus.RUNNING)), now),
        chart("pending", samples, _status(str(RunStatus.PENDING)), now),
        chart(
            "dead letters",
            samples,
            lambda s: float(sum(s.by_status.get(p, 0) for p in parked)),
            now,
        ),
        chart("failed (in the store)", samples, _status(str(RunStatus.FAILED)), now),
    ]
    oldest = None if stats.oldest_due is None else (now - stats.oldest_due).total_seconds()
    return _page(request, state, who, "queues.html", stats=stats, oldest_due=oldest, charts=charts)


def _status(name: str) -> Callable[[Any], float]:
    return lambda sample: float(sample.by_status.get(name, 0))


@router.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request, state: State, who: Viewer) -> Response:
    client = state.client
    now = client.clock.now()
    listed = [(w, w.alive(now), (now - w.seen_at).total_seconds()) for w in client.workers()]
    return _page(request, state, who, "workers.html", workers=listed)


@router.get("/schedules", response_class=HTMLResponse)
def schedules_page(request: Request, state: State, who: Viewer) -> Response:
    return _page(request, state, who, "schedules.html", schedules=state.app.schedules.all())


@router.get("/audit", response_class=HTMLResponse)
def audit_page(
    request: Request,
    state: State,
    who: Viewer,
    by: Annotated[str | None, Query()] = None,
    run: Annotated[str | None, Query()] = None,
    since: Annotated[str | None, Query(description="A duration back from now, or a time")] = None,
    cursor: Annotated[str | None, Query()] = None,
) -> Response:
    """The audit trail: for a person logged in, even on a server whose reads are open."""
    if who is None:
        return RedirectResponse(f"/login?next={quote('/audit')}", status_code=303)
    client = state.client
    entries, next_cursor, refused = [], None, None
    try:
        page = client.audit(
            limit=100,
            cursor=cursor or None,
            since=_since(since, client.clock.now()) if since else None,
            by=by or None,
            run_id=run or None,
        )
        entries = [(e, json.loads(e.detail) if e.detail else {}) for e in page.entries]
        next_cursor = page.next_cursor
    except DurablyError as exc:
        refused = str(exc)
    context = {"by": by or "", "run": run or "", "since": since or "", "list_refused": refused}
    return _page(
        request, state, who, "audit.html", entries=entries, next_cursor=next_cursor, **context
    )


def _since(given: str, now: datetime) -> datetime:
    """A duration back from `now` (1h), or a time (UTC unless it says otherwise)."""
    with contextlib.suppress(ValueError, DurablyError):
        return now - parse_duration(given.strip(), what="since")
    try:
        return _moment(given, "since")
    except PayloadError:
        raise PayloadError(
            f"since {given!r} is neither a duration back from now (30m, 1h, 7d) nor a time "
            "(2026-11-27, 2026-11-27T10:00)"
        ) from None


def _moment(given: str, what: str) -> datetime:
    """A time, ISO 8601 (UTC unless it says otherwise)."""
    try:
        moment = datetime.fromisoformat(given.strip())
    except ValueError:
        raise PayloadError(
            f"{what} {given!r} is not a time like 2026-11-27 or 2026-11-27T10:00"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# -- actions ------------------------------------------------------------------------------

Act = Callable[[Served, str, Identity, dict[str, str]], str]


def _form_action(run_action: Act) -> Callable[..., Any]:
    """An action route: checks the session (write role) and its CSRF token, acts, and
    redirects back to `back` with what happened or why it was refused."""

    async def route(request: Request, state: State, who: Person, target: str) -> Response:
        form = {key: str(value) for key, value in (await request.form()).items()}
        back = _local(form.get("back", "/runs"))
        if who is None:
            return RedirectResponse(f"/login?next={quote(back)}", status_code=303)
        if not state.sessions.check_csrf(request.cookies.get(COOKIE), form.get("csrf")):
            return _back(
                back,
                refused="the form's CSRF token is missing or stale: reload the page and try again",
            )
        if not who.can_write:
            return _back(back, refused=f"{who.name} may only read: acting needs a write token")
        try:  # off the event loop: an action may take a while (an upgrade rehearses runs)
            said = await run_in_threadpool(run_action, state, target, who, form)
        except (DurablyError, ValueError) as exc:
            return _back(back, refused=str(exc))
        return _back(back, said=said)

    return route


def _back(back: str, **message: str) -> Response:
    joiner = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{joiner}{urlencode(message)}", status_code=303)


def _json(form: dict[str, str], field: str) -> str:
    text = form.get(field, "").strip() or "null"
    try:
        json.loads(text)
    except ValueError as exc:
        raise PayloadError(f"{field} must be JSON ({exc}): write a string in quotes") from None
    return text


def _retry(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    state.dashboard.retry(run_id, by=who.name)
    return f"run {run_id} is pending again: a worker retries it"


def _skip(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    state.dashboard.skip_step_json(run_id, _json(form, "result"), by=who.name)
    return f"run {run_id} goes on with that result"


def _fail(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    reason = form.get("reason", "").strip() or "failed by a person"
    state.dashboard.fail(run_id, by=who.name, reason=reason)
    return f"run {run_id} will be compensated and failed"


def _cancel(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    return state.dashboard.cancel(run_id, by=who.name, reason=form.get("reason") or None).note or (
        f"run {run_id} is being cancelled"
    )


def _pause(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    return state.dashboard.pause(run_id, by=who.name, reason=form.get("reason") or None).note or (
        f"run {run_id} pauses before its next step"
    )


def _resume(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    return state.dashboard.resume(run_id, by=who.name).note or f"run {run_id} goes on"


def _release(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    released = state.dashboard.release(run_id, by=who.name)
    took = f"released {released.count} run(s) of worker {released.worker}"
    return f"{took}: the next worker to poll takes them over"


def _signal(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
    name = form.get("name", "").strip()
    state.dashboard.signal_json(run_id, name, _json(form, "data"), by=who.name)
    return f"signal {name!r} sent to run {run_id}"


def _decide(approved: bool) -> Act:
    def act(state: Served, run_id: str, who: Identity, form: dict[str, str]) -> str:
        name = form.get("name", "")
        comment = form.get("comment") or None
        state.dashboard.decide(run_id, name, approved=approved, by=who.name, comment=comment)
        return f"{'approved' if approved else 'rejected'} {name!r} of run {run_id}"

    return act


_RUN_ACTIONS: dict[str, Act] = {
    "retry": _retry,
    "skip": _skip,
    "fail": _fail,
    "cancel": _cancel,
    "pause": _pause,
    "resume": _resume,
    "release": _release,
    "signal": _signal,
    "approve": _decide(True),
    "reject": _decide(False),
}

for _name, _act in _RUN_ACTIONS.items():
    router.add_api_route(
        f"/runs/{{target}}/{_name}", _form_action(_act), methods=["POST"], name=f"dashboard {_name}"
    )


def _schedule(verb: str) -> Act:
    def act(state: Served, name: str, who: Identity, form: dict[str, str]) -> str:
        schedules, by, via = state.app.schedules, who.name, Via.DASHBOARD
        if verb == "trigger":
            return f"schedule {name!r} started run {schedules.trigger(name, by=by, via=via)}"
        (schedules.pause if verb == "pause" else schedules.resume)(name, by=by, via=via)
        return f"schedule {name!r} is {'paused' if verb == 'pause' else 'running again'}"

    return act


def _upgrade(state: Served, moving: str, who: Identity, form: dict[str, str]) -> str:
    """Move stranded runs to the server's code (`moving` "move"), or say which would move."""
    dry_run = moving != "move"
    upgrades = state.app.upgrade(dry_run=dry_run, by=who.name, via=Via.DASHBOARD)
    stays = [f"{u.run_id}: {u.why}" for u in upgrades if u.why]
    return "; ".join([summary(upgrades, dry_run=dry_run), *stays[:_STAYS_SHOWN]])


_STAYS_SHOWN = 5  # of the runs that stay, named with why in the message (durably upgrade: all)

router.add_api_route(
    "/workers/upgrade/{target}",
    _form_action(_upgrade),
    methods=["POST"],
    name="dashboard upgrade",
)

for _verb in ("pause", "resume", "trigger"):
    router.add_api_route(
        f"/schedules/{{target}}/{_verb}",
        _form_action(_schedule(_verb)),
        methods=["POST"],
        name=f"dashboard schedule {_verb}",
    )
