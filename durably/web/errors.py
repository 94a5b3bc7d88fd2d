"""Every error the API gives is JSON, `{"error": kind, "message": ...}`, with a message that
names what is wrong and what to do: 422 for a body or query that does not fit (naming the
field), 404 for an unknown run or workflow, 409 for an action the run's state refuses or a
start that conflicts, 401/403 for a missing or weak token, 429 (with Retry-After) from an
address locked out for guessing tokens, 503 while the store is down, 504 for a query that got
no answer in its time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from durably.core.webhooks import UnknownDelivery, UnknownWebhook
from durably.errors import (
    ConfigError,
    DurablyError,
    PayloadError,
    RunConflict,
    RunNotFound,
    StoreUnavailable,
    UnknownBulkJob,
    UnknownQuery,
    UnknownSchedule,
    UnknownWorkflow,
)
from durably.views.models import ErrorOut

__all__ = ["ERROR_RESPONSES", "install"]

# (exception class, status, kind): the first that matches wins
_BY_CLASS: Sequence[tuple[type[DurablyError], int, str]] = (
    (RunNotFound, 404, "not_found"),
    (UnknownWorkflow, 404, "not_found"),
    (UnknownSchedule, 404, "not_found"),
    (UnknownBulkJob, 404, "not_found"),
    (UnknownQuery, 404, "not_found"),
    (UnknownWebhook, 404, "not_found"),
    (UnknownDelivery, 404, "not_found"),
    (RunConflict, 409, "conflict"),
    (PayloadError, 422, "validation"),
    (ConfigError, 422, "validation"),
    (StoreUnavailable, 503, "store_unavailable"),
    (DurablyError, 409, "refused"),  # the run's state does not allow it
)
_KIND = {
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    429: "locked_out",
    504: "timeout",
}

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"description": what, "model": ErrorOut}
    for code, what in (
        (401, "No token, or one the server does not know"),
        (403, "The token may only read"),
        (404, "No such run, workflow, schedule, bulk job, query handler, webhook or delivery"),
        (409, "The run's state refuses the action, or the id is taken by another start"),
        (422, "The body or query does not fit: the message names the field"),
        (429, "Too many unknown tokens from this address: wait the seconds of Retry-After"),
        (503, "The store cannot be reached; try again"),
    )
}


def install(app: FastAPI) -> None:
    """Make every error of `app` a JSON ErrorOut."""
    app.add_exception_handler(DurablyError, _durably)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http)  # type: ignore[arg-type]


def error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": kind, "message": message}, status_code=status, headers=headers)


async def _durably(request: Request, exc: DurablyError) -> JSONResponse:
    for cls, status, kind in _BY_CLASS:
        if isinstance(exc, cls):
            return error(status, kind, str(exc))
    raise exc  # pragma: no cover - DurablyError itself is in the table


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = [_problem(item) for item in exc.errors()]
    return error(422, "validation", "; ".join(problems) or "the request does not fit")


async def _http(request: Request, exc: HTTPException) -> JSONResponse:
    kind = _KIND.get(exc.status_code, "error")
    return error(exc.status_code, kind, str(exc.detail), headers=getattr(exc, "headers", None))


def _problem(item: Any) -> str:
    """One validation problem in words: where, what is wrong, what was expected."""
    where = ".".join(str(part) for part in item.get("loc", ()) if part != "body") or "body"
    kind = item.get("type", "")
    if kind == "json_invalid":
        why = item.get("ctx", {}).get("error", "unreadable")
        return f"the body is not valid JSON ({why}): send a JSON object"
    if kind == "missing":
        return f"{where} is required"
    if kind == "extra_forbidden":
        return f"{where} is not a field of this request: leave it out"
    return f"{where}: {item.get('msg', 'is not valid')}"
