"""What a run publishes, from the command line: `durably runs events` (its events and
progress), `durably runs stream` (one stream's items as they come) and `durably runs follow`
(a live view of the run until it ends, whose exit status says how it ended).

Each waits on the store's wake-ups (the client's `Published`: LISTEN/NOTIFY on PostgreSQL, a
local socket on SQLite), not on sleeps; the run is read again every --poll in case a wake-up
is lost, which is also how a status change that publishes nothing (running to waiting) shows.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import click

from durably.cli.base import DURATION, PRECEDENCE, client_for, where
from durably.cli.commands import runs
from durably.cli.output import AS_JSON, Column, echo_json, echo_table
from durably.client.client import Client
from durably.core.outputs import PROGRESS, PublishedEvent, StreamItem
from durably.core.status import FINAL, RunStatus
from durably.stores.records import RunRecord
from durably.views.explaining import explain
from durably.views.published import (
    EXIT_CODES,
    PublishedEventOut,
    PublishedOut,
    StreamItemOut,
    end_line,
    event_line,
    event_rows,
    item_line,
    progress_of,
    status_line,
    value_of,
)

__all__ = ["runs_events", "runs_follow", "runs_stream"]

_INTERRUPTED = 130  # Ctrl-C, as a shell reports it
_PAGE = 1_000  # stream items read at once
_FOLLOW_EXITS = (
    "Exit status: 0 the run completed, 3 it failed, 4 it timed out, 5 it was cancelled; "
    "1 durably refused (no such run), 130 stopped with Ctrl-C. A run parked for a person "
    "(needs_attention) has not ended: it is followed on. " + PRECEDENCE
)
_POLL = click.option(
    "--poll",
    default="1s",
    show_default=True,
    type=DURATION,
    help="Read the run again this often in case a wake-up from the store is lost.",
)


@runs.command("events", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@AS_JSON
def runs_events(app_target: str | None, store_url: str | None, run_id: str, as_json: bool) -> None:
    """The events run RUN_ID set (durably.set_event), each key's latest value and when it was
    set, and its progress (durably.progress) as a bar."""
    with client_for(app_target, store_url) as client:
        found = client.published.event_records(run_id)
    if as_json:
        echo_json(PublishedOut.of(found))
        return
    progress = progress_of(found)
    if progress is not None:
        click.echo(f"progress: {progress.bar}\n")
    rows = event_rows(found)
    if not rows:
        click.echo("(no event set)")
        return
    echo_table([Column("KEY", max_width=40), Column("VALUE", fold=True), Column("SET AT")], rows)


@runs.command("stream", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@click.argument("key")
@click.option(
    "--from",
    "offset",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="The offset to start at (the one after the last item read, to read on).",
)
@click.option(
    "--timeout",
    default=None,
    type=DURATION,
    help="Give up after this long without a new item (30s, 5m); default: wait until the "
    "stream or the run ends.",
)
@_POLL
@AS_JSON
def runs_stream(
    app_target: str | None,
    store_url: str | None,
    run_id: str,
    key: str,
    offset: int,
    timeout: timedelta | None,
    poll: timedelta,
    as_json: bool,
) -> None:
    """The items of stream KEY of run RUN_ID (durably.write_stream), one a line, as they are
    written, until the stream is closed or the run ends (Ctrl-C stops). With --json, one
    object a line: {"offset", "value", "attempt", "at"}; read on from the last offset + 1."""
    context = click.get_current_context()
    with client_for(app_target, store_url) as client:
        items = client.published.stream(run_id, key, offset=offset, timeout=timeout, poll=poll)
        try:
            for item in items:
                click.echo(_item_json(item) if as_json else item_line(key, item, named=False))
        except TimeoutError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            context.exit(_INTERRUPTED)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # the generator's subscription, now rather than when collected


@runs.command("follow", epilog=_FOLLOW_EXITS)
@where
@click.argument("run_id")
@click.option(
    "--stream",
    "streams",
    multiple=True,
    metavar="KEY",
    help="Print this stream's items too, as they come (repeat it for several streams).",
)
@_POLL
@AS_JSON
def runs_follow(
    app_target: str | None,
    store_url: str | None,
    run_id: str,
    streams: tuple[str, ...],
    poll: timedelta,
    as_json: bool,
) -> None:
    """Follow run RUN_ID until it ends: each change of status, each event it sets (its
    progress as a bar), and the items of the streams named with --stream, as they come; then
    how it ended, its result or its error. With --json, one object a line, each with a
    `type` (status, event, progress, item, end)."""
    context = click.get_current_context()
    with client_for(app_target, store_url) as client:
        try:
            ended = _Follower(client, run_id, streams, as_json).follow(poll)
        except KeyboardInterrupt:
            context.exit(_INTERRUPTED)
    context.exit(EXIT_CODES.get(ended, 1))


class _Follower:
    """What of the run it printed already: its status, each event's latest value, how far it
    read each stream."""

    def __init__(self, client: Client, run_id: str, streams: tuple[str, ...], as_json: bool):
        self.client, self.run_id, self.as_json = client, run_id, as_json
        self.status: RunStatus | None = None
        self.events: dict[str, PublishedEvent] = {}
        self.offsets = dict.fromkeys(dict.fromkeys(streams), 0)  # in order, once each
        self.closed: set[str] = set()

    def follow(self, poll: timedelta) -> RunStatus:
        """Print what is new until the run ends; how it ended."""
        published = self.client.published
        subscription = published.subscribe(self.run_id)
        try:
            while True:
                subscription.clear()  # what comes after this read wakes the wait below
                run = self.client.get(self.run_id)  # first: once ended, the reads below see all
                self._status(run)
                self._events()
                for key in self.offsets:
                    self._stream(key)
                if run.status in FINAL:
                    self._end(run)
                    return run.status
                subscription.wait(poll.total_seconds())
        finally:
            subscription.close()

    def _status(self, run: RunRecord) -> None:
        if run.status is self.status or run.status in FINAL:
            self.status = run.status
            return
        self.status = run.status
        history = self.client.history(self.run_id)
        said = explain(run, history, self.client.workers(), self.client.clock.now()).now
        if self.as_json:
            _echo_line({"type": "status", "status": run.status.value, "now": said})
        else:
            click.echo(status_line(run.status, said))

    def _events(self) -> None:
        for event in self.client.store.published_events(self.run_id):
            if self.events.get(event.key) == event:
                continue
            self.events[event.key] = event
            if not self.as_json:
                click.echo(event_line(event))
            elif event.key == PROGRESS and (progress := progress_of([event])) is not None:
                _echo_line({"type": "progress", **progress.model_dump(mode="json")})
            else:
                shown = PublishedEventOut.of(event).model_dump(mode="json")
                _echo_line({"type": "event", **shown})

    def _stream(self, key: str) -> None:
        while key not in self.closed:
            items = self.client.store.read_stream(
                self.run_id, key, offset=self.offsets[key], limit=_PAGE
            )
            for item in items:
                if item.is_end:
                    self.closed.add(key)
                    break
                self.offsets[key] = item.offset + 1
                if self.as_json:
                    shown = StreamItemOut.of(item).model_dump(mode="json")
                    _echo_line({"type": "item", "stream": key, **shown})
                else:
                    click.echo(item_line(key, item, named=True))
            if len(items) < _PAGE:
                return

    def _end(self, run: RunRecord) -> None:
        if not self.as_json:
            click.echo(end_line(run))
            return
        error = None if run.error is None else f"{run.error.error_class}: {run.error.message}"
        result = None if run.result is None else value_of(run.result)
        _echo_line({"type": "end", "status": run.status.value, "result": result, "error": error})


def _item_json(item: StreamItem) -> str:
    return StreamItemOut.of(item).model_dump_json()


def _echo_line(record: dict[str, Any]) -> None:
    click.echo(json.dumps(record, separators=(",", ":")))
