"""The HTTP API's routes for what a run publishes (durably.core.outputs): its events and
progress, one event waited for, and a stream as Server-Sent Events. Reads: a token of either
role (or none, on open reads).

The stream is sent with Starlette's StreamingResponse: the SSE format is a few lines of text
(durably.views.published), and sse-starlette, which is not in the `web` extra, would add a
dependency for what this module does in a dozen lines. Every wait is on the event loop (the
client's async readers run store calls in a thread), so a waiting request blocks nobody.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from durably.client.published import MISSING
from durably.core.outputs import StreamItem, check_key
from durably.durations import parse_duration
from durably.errors import EventNotSet, PayloadError
from durably.views.models import ErrorOut
from durably.views.published import (
    KEEP_ALIVE,
    PublishedEventOut,
    PublishedOut,
    sse_end,
    sse_item,
)
from durably.web.access import Reader, Served, primary, served
from durably.web.api import RunId
from durably.web.errors import ERROR_RESPONSES, error

__all__ = ["LONGEST_WAIT", "router"]

router = APIRouter(prefix="/api", responses=ERROR_RESPONSES, tags=["published"])
State = Annotated[Served, Depends(served)]
# A route that waits on the store's wake-ups is served by the store itself, even on a server
# that reads from a replica (durably server --read-store): a standby refuses LISTEN, and lags.
Waiting = Annotated[Served, Depends(primary)]
# a key as durably.core.outputs.check_key takes it, without a `/` (no path segment has one)
Key = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        pattern=r"^[^\u0000-\u001f/]*[^\u0000-\u001f/\s][^\u0000-\u001f/]*$",
        description="The event's or stream's key (one with a `/` is not served here)",
    ),
]
LONGEST_WAIT = timedelta(seconds=60)  # a longer timeout waits this long
_KEEP_ALIVE_EVERY = 15.0  # seconds without an item before a comment line is sent


@router.get("/runs/{run_id}/events")
def events(run_id: RunId, state: State, who: Reader) -> PublishedOut:
    """Each event key the run set (durably.set_event) with its latest value and when, and
    what durably.progress said last (null: nothing)."""
    return PublishedOut.of(state.client_for(who).published.event_records(run_id))


@router.get(
    "/runs/{run_id}/events/{key}",
    response_model=PublishedEventOut,
    responses={
        408: {
            "description": "The run did not set it within `timeout`: ask again",
            "model": ErrorOut,
        },
        409: {"description": "The run ended without setting it: it never will", "model": ErrorOut},
    },
)
async def event(
    run_id: RunId,
    key: Key,
    state: Waiting,
    who: Reader,
    timeout: Annotated[  # noqa: ASYNC109 (the query's: how long the request may wait)
        str,
        Query(
            min_length=1,
            max_length=12,
            pattern=r"^[0-9]{1,6}(\.[0-9]{1,3})?(ms|s|m)$",
            description="How long to wait for the run to set it (30s, 500ms; 0s: do not "
            "wait); a longer wait than 60s waits 60s",
        ),
    ] = "30s",
) -> PublishedEventOut | JSONResponse:
    """The latest value of event `key`, waiting until the run sets it: 200 with it; 408 if
    `timeout` passes first (ask again); 409 if the run ended without setting it."""
    check_key(key, "an event's")
    waited = _wait_of(timeout)
    client = state.client_for(who)
    try:
        await client.published.get_event_async(run_id, key, timeout=waited, default=MISSING)
    except EventNotSet as exc:
        said = str(exc).split("; pass default=")[0]  # the Python caller's advice
        return error(409, "event_not_set", f"{said}: it never will")
    except TimeoutError as exc:
        return error(408, "timeout", f"{exc}: ask again to wait on")
    except ValueError:  # set, with a value this process cannot open: shown masked below
        pass
    found = await run_in_threadpool(client.store.published_events, run_id, [key])
    return PublishedEventOut.of(found[0])  # set: an event's key is never unset


@router.get(
    "/runs/{run_id}/streams/{key}",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "Server-Sent Events: `event: item` with `id: <offset>` and `data: "
            "<value JSON>` for each item, `: keep-alive` comments while idle, and a last "
            '`event: end` (`data: {"next_offset": n}`) when the stream or the run ends',
        }
    },
)
async def stream(
    run_id: RunId,
    key: Key,
    request: Request,
    state: Waiting,
    who: Reader,
    start: Annotated[
        int | None,
        Query(alias="from", ge=0, le=2**62, description="The offset of the first item to send (0)"),
    ] = None,
    last_event_id: Annotated[
        str,
        Header(
            pattern=r"^[0-9]{1,18}$",
            description="A reconnecting browser's: the offset of the last item it had",
        ),
    ] = "",
) -> StreamingResponse:
    """The run's stream `key` (durably.write_stream) as Server-Sent Events, from the offset
    after `Last-Event-ID` (a browser's EventSource reconnects with it), else from `from`,
    else from the first item; until the stream is closed or the run ends."""
    check_key(key, "a stream's")
    offset = _offset_of(last_event_id, start)
    client = state.client_for(who)
    await run_in_threadpool(client.get, run_id)  # 404 now, rather than an empty stream
    items = client.published.stream_async(run_id, key, offset=offset)
    return StreamingResponse(
        _events(items, offset, request),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},  # nginx: send on
    )


async def _events(
    items: AsyncIterator[StreamItem], offset: int, request: Request
) -> AsyncIterator[str]:
    """The SSE text of each item as it comes, a keep-alive comment every ~15 s without one,
    and the end. Starlette cancels it when the client goes; the reader's subscription is
    closed either way."""
    next_item: asyncio.Task[StreamItem] | None = None
    try:
        while True:
            if next_item is None:
                next_item = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({next_item}, timeout=_KEEP_ALIVE_EVERY)
            if not done:
                if await request.is_disconnected():
                    return
                yield KEEP_ALIVE
                continue
            try:
                item = next_item.result()
            except StopAsyncIteration:
                yield sse_end(offset)
                return
            next_item = None
            offset = item.offset + 1
            yield sse_item(item)
    finally:
        if next_item is not None and not next_item.done():
            next_item.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_item
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()


def _wait_of(timeout: str) -> timedelta:
    """The query's timeout, at most LONGEST_WAIT: a request that holds a connection longer
    is likelier cut by a proxy than answered, so a caller asks again instead."""
    try:
        waited = parse_duration(timeout, what="timeout")
    except (ValueError, TypeError) as exc:
        raise PayloadError(f"timeout: {exc}; give a duration like 30s") from None
    return min(waited, LONGEST_WAIT)


def _offset_of(last_event_id: str, start: int | None) -> int:
    """Where the stream starts: after the last item a reconnecting client had (the header's
    pattern makes it a whole number), else at `from`, else at the first item."""
    if not last_event_id:
        return start or 0
    return int(last_event_id) + 1
