"""How read commands print: a table for people (status in colour, on a terminal only: click
drops the colour when the output is piped), or with --json the same shapes the HTTP API
answers with (durably.views.models), for scripts."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
from pydantic import BaseModel, TypeAdapter

from durably.client.client import Client
from durably.errors import DurablyError
from durably.views.timeline import TimelineRow

__all__ = ["AS_JSON", "echo_json", "echo_tracebacks", "retry_each", "status"]

AS_JSON = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (the HTTP API's shapes), not a table."
)

_COLOURS = {
    "completed": "green",
    "failed": "red",
    "timed_out": "red",
    "compensation_failed": "red",
    "cancelled": "bright_black",
    "needs_attention": "yellow",
    "paused": "yellow",
    "running": "blue",
    "pending": "cyan",
}


def status(text: str, width: int = 0) -> str:
    """A run's status, padded to `width`, in its colour (shown on a terminal only)."""
    return click.style(f"{text:<{width}}", fg=_COLOURS.get(text.strip()))


def echo_json(value: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> None:
    if isinstance(value, BaseModel):
        click.echo(value.model_dump_json(indent=1))
    else:
        click.echo(TypeAdapter(Any).dump_json(value, indent=1).decode())


def echo_tracebacks(run_id: str, rows: Sequence[TimelineRow], *, shown: bool) -> None:
    """Each failed attempt's traceback; without `shown`, how to see them, if there are any."""
    told = [row for row in rows if row.traceback]
    if not told:
        return
    if not shown:
        click.echo(f"\n(where it raised: durably runs show {run_id} --traceback)")
        return
    for row in told:
        step = f" {row.step}" if row.step else ""
        attempt = f", attempt {row.attempt}" if row.attempt else ""
        click.echo(f"\n{row.what}{step}{attempt}:")
        click.echo(str(row.traceback).rstrip())


def retry_each(
    client: Client, run_ids: Sequence[str], *, by: str, from_step: int | None
) -> list[tuple[str, str]]:
    """Retry each run, with a progress bar on a terminal when there are many; the ones
    refused, with why (the others go on)."""
    refused: list[tuple[str, str]] = []

    def retry(run_id: str) -> None:
        try:
            client.retry(run_id, by=by, from_step=from_step)
        except DurablyError as exc:
            refused.append((run_id, str(exc)))

    if len(run_ids) > 1 and sys.stdout.isatty():
        with click.progressbar(run_ids, label="retrying", show_pos=True) as bar:
            for run_id in bar:
                retry(run_id)
    else:
        for run_id in run_ids:
            retry(run_id)
    return refused
