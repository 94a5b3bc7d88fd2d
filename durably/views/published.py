"""What runs publish (durably.core.outputs), as people and other programs see it: the API's
bodies for a run's events, progress and stream items, the Server-Sent Events lines of a
stream, and the lines `durably runs events|stream|follow|show` print. Pure: records in, text
and models out.

A value is shown as the views show every stored value (durably.views.details.shown): one
encrypted with a key this process does not hold reads `encrypted (key k2)`, secrets in JSON
read `[redacted]`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from durably.codec.encryption import masked, sealed_key
from durably.core.outputs import PROGRESS, Progress, PublishedEvent, StreamItem
from durably.core.secrets import redact
from durably.core.status import RunStatus
from durably.stores.records import RunRecord
from durably.views.details import moment, short, shown

__all__ = [
    "EXIT_CODES",
    "KEEP_ALIVE",
    "ProgressOut",
    "PublishedEventOut",
    "PublishedOut",
    "StreamItemOut",
    "end_line",
    "event_line",
    "event_rows",
    "item_line",
    "progress_of",
    "published_pairs",
    "sse_end",
    "sse_item",
    "status_line",
    "value_of",
]

# How `durably runs follow` exits, by how the run ended (1 and 2 are durably's own: refused,
# usage; 130 is Ctrl-C).
EXIT_CODES = {
    RunStatus.COMPLETED: 0,
    RunStatus.FAILED: 3,
    RunStatus.TIMED_OUT: 4,
    RunStatus.CANCELLED: 5,
}
KEEP_ALIVE = ": keep-alive\n\n"  # an SSE comment: proxies see traffic, browsers ignore it
_SHORT = 80  # characters of a value a terminal line shows


def value_of(text: str) -> Any:
    """A published value (JSON text) as the JSON value it is, for the API: encrypted with a
    key this process does not hold, `encrypted (key k2)`; secrets `[redacted]`."""
    if sealed_key(text) is not None:
        return masked(text)
    try:
        value = json.loads(text)
    except ValueError:  # durably writes JSON only; shown as it is rather than refused
        return text
    return redact(value)


class ProgressOut(BaseModel):
    done: float
    total: float | None
    message: str | None
    fraction: float | None = Field(description="done / total, at most 1 (null without a total)")
    bar: str = Field(description="The progress drawn in text: [######----] 3/10 message")
    at: datetime = Field(description="When durably.progress said it")

    @classmethod
    def of(cls, event: PublishedEvent) -> ProgressOut | None:
        progress = Progress.from_json(event.value)
        if progress is None:
            return None
        return cls(
            done=progress.done,
            total=progress.total,
            message=progress.message,
            fraction=progress.fraction,
            bar=progress.bar(),
            at=event.at,
        )


class PublishedEventOut(BaseModel):
    key: str
    value: Any = Field(description="The latest value durably.set_event gave the key")
    at: datetime = Field(description="When it was set")

    @classmethod
    def of(cls, event: PublishedEvent) -> PublishedEventOut:
        return cls(key=event.key, value=value_of(event.value), at=event.at)


class PublishedOut(BaseModel):
    events: list[PublishedEventOut] = Field(
        description="Each event key the run set (durably.set_event), with its latest value; "
        "progress is apart"
    )
    progress: ProgressOut | None = Field(
        description="What durably.progress said last (null: the run never said)"
    )

    @classmethod
    def of(cls, events: Sequence[PublishedEvent]) -> PublishedOut:
        return cls(
            events=[PublishedEventOut.of(event) for event in events if event.key != PROGRESS],
            progress=progress_of(events),
        )


class StreamItemOut(BaseModel):
    offset: int = Field(description="Its place in the stream: 0, 1, ...; read on from offset+1")
    value: Any
    attempt: int | None = Field(description="The step attempt that wrote it (null: workflow code)")
    at: datetime

    @classmethod
    def of(cls, item: StreamItem) -> StreamItemOut:
        return cls(
            offset=item.offset,
            value=value_of(item.value or "null"),
            attempt=item.attempt,
            at=item.at,
        )


def progress_of(events: Sequence[PublishedEvent]) -> ProgressOut | None:
    """The progress among a run's events (None: it never reported any)."""
    for event in events:
        if event.key == PROGRESS:
            return ProgressOut.of(event)
    return None


def event_rows(events: Sequence[PublishedEvent]) -> list[tuple[str, str, str]]:
    """(key, value cut short, when) for each event but progress, for a table."""
    return [
        (event.key, short(event.value, _SHORT), moment(event.at))
        for event in events
        if event.key != PROGRESS
    ]


def published_pairs(events: Sequence[PublishedEvent], *, most: int = 10) -> list[tuple[str, str]]:
    """The lines `runs show` adds under the run's facts: its progress bar, then its events
    (the first `most`, and how to see the others)."""
    pairs: list[tuple[str, str]] = []
    progress = progress_of(events)
    if progress is not None:
        pairs.append(("progress", progress.bar))
    rows = event_rows(events)
    pairs += [("event", f"{key} = {value}") for key, value, _ in rows[:most]]
    if len(rows) > most:
        pairs.append(("event", f"... {len(rows) - most} more: durably runs events RUN_ID"))
    return pairs


def event_line(event: PublishedEvent) -> str:
    """An event as `runs follow` prints it when it is set: progress as its bar."""
    if event.key == PROGRESS:
        progress = Progress.from_json(event.value)
        if progress is not None:
            return f"progress  {progress.bar()}"
    return f"event     {event.key} = {short(event.value, _SHORT)}"


def item_line(key: str, item: StreamItem, *, named: bool) -> str:
    """A stream item as a line: its value's JSON (`named`: after the stream's key and offset,
    for a view that shows several streams)."""
    if not named:
        return shown(item.value or "null")
    return f"stream    {key}[{item.offset}] {short(item.value or 'null', _SHORT)}"


def status_line(status: RunStatus, said: str | None) -> str:
    """A status change as `runs follow` prints it, with what the run does now."""
    return f"status    {status}" + (f": {said}" if said else "")


def end_line(run: RunRecord) -> str:
    """How the run ended, as the last line `runs follow` prints: its result or its error."""
    if run.error is not None:
        return f"{run.status}: {run.error.error_class}: {run.error.message}"
    result = "" if run.result is None else f": result {short(run.result, 1_000)}"
    return f"{run.status}{result}"


def sse_item(item: StreamItem) -> str:
    """A stream item as a Server-Sent Event: its offset is the id a browser sends back as
    Last-Event-ID when it reconnects."""
    data = json.dumps(value_of(item.value or "null"), separators=(",", ":"))
    return f"event: item\nid: {item.offset}\ndata: {data}\n\n"


def sse_end(next_offset: int) -> str:
    """The last event of a stream (it was closed, or the run ended), with the offset a reader
    would read on from. Its data is not empty: a browser's EventSource drops an event without
    data."""
    return f"event: end\ndata: {json.dumps({'next_offset': next_offset})}\n\n"
