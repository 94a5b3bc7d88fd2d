"""`durably runs query`: ask a run a question its workflow answers (durably.query), from the
app's code in this process: the run's history is replayed here, running no step and writing
nothing to the store."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from durably.cli.base import DURATION, PRECEDENCE, client_for, json_arguments, where
from durably.cli.commands import runs

__all__ = ["runs_query"]


@runs.command("query", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@click.argument("name")
@click.argument("args_json", nargs=-1)
@click.option(
    "--timeout",
    type=DURATION,
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="Give up (and abandon the replay) after this long.",
)
def runs_query(
    app_target: str | None,
    store_url: str | None,
    run_id: str,
    name: str,
    args_json: tuple[str, ...],
    timeout: timedelta,
) -> None:
    """Ask run RUN_ID the query NAME (a handler its workflow registered with @durably.query),
    passing each ARGS_JSON as one argument (JSON: 3, '"text"', '{"a": 1}'), and print the
    answer as JSON. Needs --app: the run's history is replayed against the app's code here,
    with no step run and nothing written; the state is the run's as of its last checkpoint."""
    args = json_arguments(args_json, "the query")
    with client_for(app_target, store_url) as client:
        try:
            answer = client.ask(run_id, name, json.dumps(args), timeout=timeout)
        except TimeoutError as exc:
            raise click.ClickException(f"{exc} (--timeout)") from None
    click.echo(json.dumps(json.loads(answer.text), indent=1))
