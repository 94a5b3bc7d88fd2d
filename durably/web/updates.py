"""The API's update route: `POST /api/runs/{run_id}/updates/{name}` sends the run an update
(durably.update) and answers with its handler's value once the run has applied it. Awaited on
the event loop: the wait for the answer blocks no thread of the server."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from fastapi import Body as FastBody
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from durably.client.handles import RunHandle
from durably.core.names import MAX_NAME, NAME_PATTERN, RUN_ID_PATTERN
from durably.views.bodies import UpdateIn
from durably.web.access import Served, Writer, served
from durably.web.errors import ERROR_RESPONSES

__all__ = ["UpdateOut", "router"]

router = APIRouter(prefix="/api", responses=ERROR_RESPONSES)
State = Annotated[Served, Depends(served)]
RunId = Annotated[
    str, Path(min_length=1, max_length=MAX_NAME, pattern=RUN_ID_PATTERN, description="The run's id")
]
Name = Annotated[str, Path(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)]


class UpdateOut(BaseModel):
    run: str
    update: str
    id: str = Field(description="The update's id: send it again to get the same answer")
    answer: Any = Field(description="The handler's value, as JSON")


@router.post(
    "/runs/{run_id}/updates/{name}",
    tags=["steer"],
    responses={
        409: {"description": "Refused: by its validator or handler, or the run ended first"},
        504: {"description": "Not applied within the timeout (it stays sent: ask again by id)"},
    },
)
async def update(
    run_id: RunId,
    name: Name,
    state: State,
    who: Writer,
    body: Annotated[UpdateIn | None, FastBody()] = None,
) -> UpdateOut:
    """Send the run the update `name` (a handler its workflow registered with
    durably.update) and answer with the handler's value once the run has applied it, at its
    workflow's next durable call. Each update id is applied once: send the same `id` again
    to get the same answer. 409 (with the error) if its validator or handler refused it."""
    body = body or UpdateIn()
    handle = RunHandle(state.api, run_id)
    update_id = body.id or uuid.uuid4().hex
    try:
        answer = await handle.update_async(
            name, *body.args, timeout=body.timeout, update_id=update_id, by=who.name
        )
    except TimeoutError as exc:
        raise HTTPException(504, str(exc)) from None
    return UpdateOut(run=run_id, update=name, id=update_id, answer=answer)
