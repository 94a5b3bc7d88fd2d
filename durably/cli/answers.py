"""A person's answers to runs: the dead letters (list, show, retry, skip, fail), the approvals
(list, approve, reject) and signals, from the command line, through the client."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from durably.cli.base import BY, PRECEDENCE, cli, client_for, where, worker_hint
from durably.cli.commands import runs_show
from durably.cli.output import AS_JSON, Column, echo_json, echo_table, retry_each
from durably.views.models import ApprovalOut, DeadLetterOut

__all__ = ["approvals", "dlq", "signal"]


@cli.group()
def dlq() -> None:
    """The dead-letter list: runs parked for a person, and what a person can do with them.

    An action is recorded in the run's history and hands the run back; a worker of the app
    must be running for it to move on."""


@dlq.command("list", epilog=PRECEDENCE)
@where
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
@AS_JSON
def dlq_list(app_target: str | None, store_url: str | None, limit: int, as_json: bool) -> None:
    """Parked runs, newest first, with the step that stopped them and its own error (the
    root cause, with the class the step raised)."""
    with client_for(app_target, store_url) as client:
        letters = client.dead_letters(limit=limit)
    if as_json:
        echo_json([DeadLetterOut.of(letter) for letter in letters])
        return
    echo_table(
        [
            Column("RUN", max_width=40),
            Column("STATUS"),
            Column("STEP", max_width=32),
            Column("TRIES", justify="right"),
            Column("ERROR", max_width=90),
        ],
        (
            [
                letter.run_id,
                str(letter.status),
                ("undo of " if letter.undo else "") + (letter.step or ""),
                str(letter.attempts),
                ""
                if letter.error is None
                else f"{letter.error.error_class}: {letter.error.message}",
            ]
            for letter in letters
        ),
    )
    if not letters:
        click.echo("(no dead letters)")


@dlq.command("show", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@AS_JSON
@click.pass_context
def dlq_show(
    ctx: click.Context, app_target: str | None, store_url: str | None, run_id: str, as_json: bool
) -> None:
    """The parked run's state and timeline (same as `durably runs show`)."""
    ctx.invoke(
        runs_show, app_target=app_target, store_url=store_url, run_id=run_id, as_json=as_json
    )


@dlq.command("retry", epilog=PRECEDENCE)
@where
@click.argument("run_ids", nargs=-1, metavar="RUN_ID...")
@click.option(
    "--from-step", type=int, default=None, help="Run every step from this position again."
)
@click.option("--all", "every", is_flag=True, help="Every dead letter (or of --workflow).")
@click.option("--workflow", default=None, help="With --all: only this workflow's.")
@BY
def dlq_retry(
    app_target: str | None,
    store_url: str | None,
    run_ids: tuple[str, ...],
    from_step: int | None,
    every: bool,
    workflow: str | None,
    by: str,
) -> None:
    """Fresh attempts for parked runs, with the same idempotency keys: the RUN_IDs given, or
    with --all every dead letter. Many at once show a progress bar on a terminal; one that
    is refused is said and the others go on (exit status 1 if any was refused)."""
    if bool(run_ids) == every or (workflow and not every):
        raise click.UsageError("give RUN_ID... or --all [--workflow NAME] (not both)")
    with client_for(app_target, store_url) as client:
        if every:
            letters = client.dead_letters(limit=1_000_000)
            run_ids = tuple(x.run_id for x in letters if workflow in (None, x.workflow))
        refused = retry_each(client, run_ids, by=by, from_step=from_step)
        retried = len(run_ids) - len(refused)
        click.echo(
            f"{retried} run(s) pending again"
            if len(run_ids) != 1 or refused
            else f"run {run_ids[0]} is pending again"
        )
        if retried:
            them = "it" if retried == 1 else "them"
            worker_hint(app_target, client, f"for {them} to move on")
    if refused:
        for run_id, why in refused:
            click.echo(f"error: run {run_id}: {why}", err=True)
        raise SystemExit(1)


@dlq.command("skip", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@click.option(
    "--result",
    "result_json",
    default="null",
    show_default=True,
    metavar="JSON",
    help="The step's result, as JSON. With --app it is checked against the step's return "
    "type (and refused if it does not fit); without, it is recorded as given.",
)
@BY
def dlq_skip(
    app_target: str | None, store_url: str | None, run_id: str, result_json: str, by: str
) -> None:
    """Record a result for the failed step (or answer an escalation); the run goes on."""
    with client_for(app_target, store_url) as client:
        client.skip_step_json(run_id, result_json, by=by)
        checked = "" if app_target else " (not checked against the step's type: no --app)"
        click.echo(f"run {run_id} goes on with that result{checked}")
        worker_hint(app_target, client, "for it to move on")


@dlq.command("fail", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded in the run's history).")
@BY
def dlq_fail(
    app_target: str | None, store_url: str | None, run_id: str, reason: str, by: str
) -> None:
    """Give up: compensate the run's completed steps, then end it failed."""
    with client_for(app_target, store_url) as client:
        client.fail(run_id, by=by, reason=reason)
        click.echo(f"run {run_id} will be compensated and failed")
        worker_hint(app_target, client, "to compensate it")


@cli.group()
def approvals() -> None:
    """Approvals (durably.approval) and escalations waiting for a person.

    A decision is recorded in the run's history with who made it; a worker of the app must be
    running for the run to move on."""


@approvals.command("list", epilog=PRECEDENCE)
@where
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
@AS_JSON
def approvals_list(
    app_target: str | None, store_url: str | None, limit: int, as_json: bool
) -> None:
    """Approvals waiting for a decision, oldest first: the run, the approval's name, when
    it times out and what happens then, and its details."""
    with client_for(app_target, store_url) as client:
        pending = client.approvals(limit=limit)
    if as_json:
        echo_json([ApprovalOut.of(approval) for approval in pending])
        return
    echo_table(
        [
            Column("RUN", max_width=40),
            Column("APPROVAL", max_width=24),
            Column("REQUESTED"),
            Column("TIMES OUT"),
            Column("THEN"),
            Column("DETAILS", max_width=60),
        ],
        (
            [
                approval.run_id,
                approval.name,
                _minute(approval.requested_at),
                "never" if approval.until is None else _minute(approval.until),
                "escalated" if approval.escalated else approval.on_timeout or "-",
                approval.details or "",
            ]
            for approval in pending
        ),
    )
    if not pending:
        click.echo("(no approvals waiting)")


_COMMENT = click.option("--comment", default=None, help="Why (recorded with the decision).")
_TOKEN = click.option(
    "--token",
    default=None,
    help="Decide with the token the notify step was given, instead of RUN and NAME.",
)


def _decision(verb: str, *, approved: bool) -> click.Command:
    """The `durably approve` or `durably reject` command."""

    @where
    @click.argument("run_id", required=False)
    @click.argument("name", required=False)
    @_TOKEN
    @_COMMENT
    @BY
    def command(**options: Any) -> None:  # the options of _decide, as click parsed them
        _decide(**options, approved=approved)

    answer = "True" if approved else "False"
    command.__doc__ = (
        f"{verb.capitalize()} a run's approval NAME, or with --token the approval it was made "
        f"for (an escalation, NAME durably.escalate, is answered {answer})."
    )
    return click.command(verb, epilog=PRECEDENCE)(command)


cli.add_command(_decision("approve", approved=True))
cli.add_command(_decision("reject", approved=False))


def _decide(
    app_target: str | None,
    store_url: str | None,
    run_id: str | None,
    name: str | None,
    token: str | None,
    comment: str | None,
    by: str,
    *,
    approved: bool,
) -> None:
    by_name = run_id is not None and name is not None
    if by_name == (token is not None) or (token is not None and run_id is not None):
        raise click.UsageError("give RUN and NAME, or --token (not both)")
    with client_for(app_target, store_url) as client:
        if run_id is not None and name is not None:
            decision = client.decide(run_id, name, approved=approved, by=by, comment=comment)
        else:
            assert token is not None
            decision = client.decide_with_token(token, approved=approved, by=by, comment=comment)
            run_id = token.rpartition(".")[0].rpartition(".")[0]
        verdict = "approved" if decision.approved else "rejected"
        click.echo(f"{verdict} by {decision.by}; run {run_id} goes on")
        worker_hint(app_target, client, "for it to move on")


def _minute(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


@cli.command(epilog=PRECEDENCE)
@where
@click.argument("run_id")
@click.argument("name")
@click.option(
    "--data",
    "data_json",
    default="null",
    show_default=True,
    metavar="JSON",
    help="The signal's payload, as JSON.",
)
@BY
def signal(
    app_target: str | None, store_url: str | None, run_id: str, name: str, data_json: str, by: str
) -> None:
    """Send the signal NAME to run RUN_ID: its durably.wait_for_signal(NAME) takes it."""
    with client_for(app_target, store_url) as client:
        delivered = client.signal_json(run_id, name, data_json, by=by)
        click.echo(f"signal {name!r} sent to run {run_id} (message {delivered.message_id})")
