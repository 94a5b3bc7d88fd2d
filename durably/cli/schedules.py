"""`durably schedules`: the schedules of a store, and what a person does with them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click

from durably.app import App
from durably.cli.base import BY, PRECEDENCE, cli, client_for, where
from durably.cli.output import AS_JSON, Column, echo_json, echo_table
from durably.core.audit import Via
from durably.runtime.schedules import Schedules
from durably.views.models import ScheduleOut

__all__ = ["schedules"]


@cli.group()
def schedules() -> None:
    """Workflows started on a schedule (@app.schedule): list, pause, resume, trigger,
    backfill. Workers of the app start the ticks; these commands act on the store."""


@schedules.command("list", epilog=PRECEDENCE)
@where
@AS_JSON
def schedules_list(app_target: str | None, store_url: str | None, as_json: bool) -> None:
    """Every schedule: when it ticks, its last tick and run, its next start, its counts."""
    with _acting(app_target, store_url) as acting:
        listed = acting.all()
    if as_json:
        echo_json([ScheduleOut.of(info) for info in listed])
        return
    echo_table(
        [
            Column("SCHEDULE", max_width=32),
            Column("WORKFLOW", max_width=24),
            Column("WHEN", max_width=40),
            Column("STATE"),
            Column("NEXT"),
            Column("FIRED", justify="right"),
            Column("SKIPPED", justify="right"),
            Column("LAST RUN", max_width=40),
        ],
        (
            [
                info.name,
                info.workflow,
                info.when,
                "paused" if info.paused else "active",
                "" if info.next_fire is None else info.next_fire.isoformat(timespec="seconds"),
                str(info.fired),
                str(info.skipped),
                info.last_run or "",
            ]
            for info in listed
        ),
    )
    if not listed:
        click.echo("(no schedule: decorate a workflow with @app.schedule, and run a worker)")


def _switcher(paused: bool, doc: str) -> click.Command:
    """`durably schedules pause` or `resume`: one body, told which."""

    @where
    @click.argument("name")
    @BY
    def switch(app_target: str | None, store_url: str | None, name: str, by: str) -> None:
        with _acting(app_target, store_url) as acting:
            (acting.pause if paused else acting.resume)(name, by=by, via=Via.CLI)
        click.echo(f"schedule {name} {'paused' if paused else 'resumed'}")

    switch.__doc__ = doc
    return schedules.command("pause" if paused else "resume", epilog=PRECEDENCE)(switch)


schedules_pause = _switcher(
    True, "Start no tick of NAME until it is resumed (ticks meanwhile are not caught up)."
)
schedules_resume = _switcher(False, "Start NAME's ticks again, from now on.")


@schedules.command("trigger", epilog=PRECEDENCE)
@where
@click.argument("name")
@BY
def schedules_trigger(app_target: str | None, store_url: str | None, name: str, by: str) -> None:
    """Start a run of NAME now, outside its ticks (needs --app: the run's input)."""
    with _acting(app_target, store_url) as acting:
        run_id = acting.trigger(name, by=by, via=Via.CLI)
    click.echo(f"started run {run_id}")


@schedules.command("backfill", epilog=PRECEDENCE)
@where
@click.argument("name")
@click.option("--from", "start", required=True, metavar="TIME", help="ISO 8601; UTC if no zone.")
@click.option("--to", "end", required=True, metavar="TIME", help="ISO 8601; UTC if no zone.")
@BY
def schedules_backfill(
    app_target: str | None, store_url: str | None, name: str, start: str, end: str, by: str
) -> None:
    """Start a run for every tick of NAME from --from to --to (both included); ticks started
    already are found, not started again (needs --app: the runs' input)."""
    with _acting(app_target, store_url) as acting:
        span = _time(start, "--from"), _time(end, "--to")
        started = acting.backfill(name, *span, by=by, via=Via.CLI)
    click.echo(
        f"{len(started)} tick(s) of {name} have their run: {', '.join(started[:3])}"
        + (" ..." if len(started) > 3 else "")
    )


@contextmanager
def _acting(app_target: str | None, store_url: str | None) -> Iterator[Schedules]:
    """The store's schedules, with the app's definitions when --app is given."""
    with client_for(app_target, store_url) as client:
        app = client.registry if isinstance(client.registry, App) else None
        yield Schedules(client.store, None if app is None else app.registry, client.clock)


def _time(text: str, option: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is no ISO 8601 time", param_hint=option) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
