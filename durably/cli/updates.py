"""`durably runs update`: send a running workflow an update (durably.update) and print its
handler's answer once the run has applied it. No app code is needed here: the update is a
message to the run, and the answer is read from the store."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from durably.cli.base import DURATION, PRECEDENCE, client_for, json_arguments, where
from durably.cli.commands import runs
from durably.client.handles import RunHandle

__all__ = ["runs_update"]


@runs.command("update", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@click.argument("name")
@click.argument("args_json", nargs=-1)
@click.option(
    "--id",
    "update_id",
    metavar="ID",
    help="The update's id: the same id is applied once and answered with the same value "
    "(send it again after a lost answer). Default: a new update.",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="Stop waiting for the answer after this long (the update stays sent).",
)
def runs_update(
    app_target: str | None,
    store_url: str | None,
    run_id: str,
    name: str,
    args_json: tuple[str, ...],
    update_id: str | None,
    timeout: timedelta,
) -> None:
    """Send run RUN_ID the update NAME (a handler its workflow registered with
    @durably.update), passing each ARGS_JSON as one argument (JSON: 3, '"text"', '{"a": 1}'),
    and print the handler's answer as JSON once the run has applied it (at its workflow's next
    durable call). Exits non-zero, with the reason, if its validator or handler refused it.
    Put `--` before an argument that starts with a dash: `... add_item -- -1`."""
    args = json_arguments(args_json, "the update")
    with client_for(app_target, store_url) as client:
        try:
            answer = RunHandle(client, run_id).update(
                name, *args, timeout=timeout, update_id=update_id
            )
        except TimeoutError as exc:
            raise click.ClickException(f"{exc} (--timeout)") from None
    click.echo(json.dumps(answer, indent=1))
