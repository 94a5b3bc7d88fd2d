"""How read commands print: a table for people (aligned, long cells cut with an ellipsis, a
status in its colour on a terminal only), or with --json the same shapes the HTTP API answers
with (durably.views.models), for scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import click
from pydantic import BaseModel, TypeAdapter
from rich.console import Console
from rich.table import Table
from rich.text import Text

from durably.client.client import Client
from durably.errors import DurablyError
from durably.views.timeline import TimelineRow

__all__ = [
    "AS_JSON",
    "Column",
    "echo_json",
    "echo_table",
    "echo_tracebacks",
    "retry_each",
]

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
    "closed": "green",  # a breaker's
    "open": "red",
    "half_open": "yellow",
}


@dataclass(frozen=True, slots=True)
class Column:
    """A table's column: its header, and how it lays out (rich's Column options)."""

    header: str
    justify: Literal["left", "right"] = "left"
    max_width: int | None = None  # longer cells end in an ellipsis
    fold: bool = False  # the last, free-text column: wrapped on a terminal, whole in a pipe


def echo_table(columns: Sequence[Column], rows: Iterable[Sequence[str]]) -> None:
    """Rows aligned under their headers, long cells cut with an ellipsis, a status in its
    colour on a terminal only. Written with rich (it measures wide characters and knows
    what a terminal can show); piped, the lines are not cut to a terminal's width."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(
            column.header,
            justify=column.justify,
            max_width=column.max_width,
            no_wrap=not column.fold,
            overflow="fold" if column.fold else "ellipsis",
        )
    for row in rows:
        table.add_row(*(_coloured(cell) for cell in row))
    terminal = sys.stdout.isatty()
    console = Console(
        highlight=False,
        soft_wrap=False,
        width=None if terminal else 10_000,  # piped: each row on one line, as written
        no_color=not terminal,
    )
    with console.capture() as captured:
        console.print(table)
    for line in captured.get().splitlines():
        click.echo(line.rstrip())


def _coloured(cell: str) -> Text:
    colour = _COLOURS.get(cell)
    return Text(cell, style=colour) if colour else Text(cell)


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
