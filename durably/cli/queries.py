"""`durably runs query`: ask a run a question its workflow answers (durably.query), from the
app's code in this process: the run's history is replayed here, running no step and writing
nothing to the store."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from durably.cli.base import DURATION, PRECEDENCE, client_for, where
from durably.cli.commands import runs
from durably.errors import PayloadError

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
    args = [_argument(text, number) for number, text in enumerate(args_json, start=1)]
    with client_for(app_target, store_url) as client:
        try:
            answer = client.ask(run_id, name, json.dumps(args), timeout=timeout)
        except TimeoutError as exc:
            raise click.ClickException(f"{exc} (--timeout)") from None
    click.echo(json.dumps(json.loads(answer.text), indent=1))


def _argument(text: str, number: int) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PayloadError(
            f"argument {number} of the query ({text!r}) is not JSON: {exc}; quote a string "
            """as JSON, e.g. '"text"'"""
        ) from None
