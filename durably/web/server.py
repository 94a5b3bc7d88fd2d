"""The server process: the HTTP API (/api, its schema at /api/openapi.json, its docs at
/api/docs), the dashboard (/) and Prometheus metrics (/metrics), for one durably app.

    durably server shop:app --port 8080 --tokens-file tokens.txt

Needs the `web` extra (pip install 'durably[web]'): FastAPI, uvicorn, Jinja2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.staticfiles import StaticFiles

from durably.app import App
from durably.client.client import Client
from durably.stores import Store
from durably.web import api, bulk, dashboard, errors, published, updates, webhooks
from durably.web.access import PayloadsFor, Served
from durably.web.auth import Tokens
from durably.web.charts import Sampler
from durably.web.guard import DEFAULT_MAX_BODY, Guard
from durably.web.jobs import BulkJobs
from durably.web.lockouts import Lockouts
from durably.web.sessions import Sessions

__all__ = ["create_app", "serve"]

_STATIC = Path(__file__).parent / "static"


def create_app(
    app: App,
    *,
    tokens: Tokens,
    open_reads: bool = False,
    sessions: Sessions | None = None,
    metrics: bool = True,
    sample_every: float = 15.0,
    max_body: int = DEFAULT_MAX_BODY,
    payloads_for: PayloadsFor = "write",
    lockouts: Lockouts | None = None,
    reads: Store | None = None,
) -> FastAPI:
    """The ASGI app serving `app`'s store: API, dashboard and metrics. `sample_every`: how
    often the dashboard's charts read the store's counts (one query each time). `max_body`:
    the most bytes a request's body may take (413 beyond, before it is read). `payloads_for`:
    which role sees payloads encrypted at rest (durably.web.access.Served.client_for).
    `lockouts`: how many unknown tokens an address may try within a window (by default 10 a
    minute) before its attempts are answered 429, on `app`'s clock. `reads`: a replica of the
    store (a hot standby) that GET requests, the charts and /metrics read, leaving the store
    itself its writes, logins and waits (durably server --read-store)."""
    web = FastAPI(
        title="durably",
        summary="Start, inspect and steer durable workflow runs.",
        version="1",
        openapi_url="/api/openapi.json",
        docs_url=None,  # served below, with Swagger UI's assets from /static
        redoc_url=None,
    )
    shown = (lambda: reads) if reads is not None else (lambda: app.store)
    sampler = Sampler(shown, app.clock, every=sample_every)
    state = Served(
        app,
        tokens,
        sessions or Sessions(),
        open_reads,
        payloads_for=payloads_for,
        lockouts=lockouts or Lockouts(),
    )
    web.state.durably = state  # what every request but a GET is served with
    web.state.durably_reads = state  # a GET's: the same, reading through the replica if any
    if reads is not None:
        client = Client(reads, registry=app, clock=app.clock, max_payload=app.max_payload)
        web.state.durably_reads = dataclasses.replace(state, reads=client)
    web.state.sampler = sampler
    jobs = BulkJobs(lambda: app.client)
    web.state.bulk_jobs = jobs
    errors.install(web)
    web.add_exception_handler(dashboard.LogInFirst, dashboard.log_in_first)  # type: ignore[arg-type]
    web.include_router(api.router)
    web.include_router(published.router)
    web.include_router(dashboard.router)
    web.include_router(bulk.router)
    web.include_router(updates.router)
    web.include_router(webhooks.router)
    web.mount("/static", StaticFiles(directory=_STATIC), name="static")
    _mount_docs(web)
    web.add_middleware(Guard, max_body=max_body)  # security headers, the body's bound
    if metrics:
        _mount_metrics(web, shown, app)
    web.router.on_startup.append(sampler.start)
    web.router.on_startup.append(jobs.resume_unfinished)  # those a stop or a crash left
    web.router.on_shutdown.append(sampler.stop)
    web.router.on_shutdown.append(jobs.stop)
    return web


def _mount_docs(web: FastAPI) -> None:
    """/api/docs: Swagger UI over the API's schema, its script, stylesheet and start-up all
    served from /static (no CDN, no inline script), so the page carries the same content
    security policy as every other."""

    @web.get("/api/docs", include_in_schema=False)
    def docs(request: Request) -> Response:
        return dashboard.templates.TemplateResponse(
            request, "api_docs.html", {"schema": web.openapi_url}
        )


def _mount_metrics(web: FastAPI, store: Callable[[], Store], app: App) -> None:
    """/metrics: the gauges of `store` (a few queries per scrape), as a worker's
    --metrics-port serves them; the counters are the workers' own."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from durably.observability.metrics import store_registry
    except ImportError:  # the metrics extra is not installed: no /metrics
        return
    registry = store_registry(store, app.clock)

    @web.get("/metrics", include_in_schema=False)
    def scrape() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def serve(web: FastAPI, *, host: str, port: int, forwarded_allow_ips: str | None = None) -> None:
    """Serve until SIGTERM or Ctrl-C. `forwarded_allow_ips`: the proxies whose X-Forwarded-For
    and X-Forwarded-Proto are believed (uvicorn's; by default $FORWARDED_ALLOW_IPS, else
    127.0.0.1): the client's address they give is the one locked out for guessing tokens."""
    import uvicorn

    uvicorn.run(
        web,
        host=host,
        port=port,
        log_level="info",
        access_log=False,
        forwarded_allow_ips=forwarded_allow_ips,
    )
