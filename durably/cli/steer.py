"""Steering a run from the command line: cancel, pause, resume, and restarting an ended run
from a step (`durably runs restart`); `durably runs cancel|retry|pause|resume|restart` act on
one run, or on every run their options choose (durably.cli.bulk)."""

from __future__ import annotations

from typing import Any

import click

from durably.cli.base import BY, PRECEDENCE, cli, client_for, where, worker_hint
from durably.cli.bulk import act, choosing, refuse_with_run
from durably.cli.commands import runs
from durably.client.client import Client
from durably.client.control import Steered
from durably.core.bulk import BulkAction
from durably.core.event_data import read_payload
from durably.core.payloads import RunStarted

__all__ = [
    "cancel",
    "pause",
    "release",
    "restart",
    "resume",
    "runs_cancel",
    "runs_pause",
    "runs_resume",
    "runs_retry",
]

_REASON = click.option("--reason", default=None, help="Why (recorded in the run's history).")


@cli.command(epilog=PRECEDENCE)
@where
@click.argument("run_id")
@_REASON
@BY
def cancel(
    app_target: str | None, store_url: str | None, run_id: str, reason: str | None, by: str
) -> None:
    """Cancel run RUN_ID: its async step in flight is cancelled, its completed steps are
    compensated in reverse order, and it ends cancelled. Works on running, waiting, paused
    and parked runs; a second cancel changes nothing."""
    with client_for(app_target, store_url) as client:
        _say(client.cancel(run_id, by=by, reason=reason), "cancel", app_target, client)


@cli.command(epilog=PRECEDENCE)
@where
@click.argument("run_id")
@_REASON
@BY
def pause(
    app_target: str | None, store_url: str | None, run_id: str, reason: str | None, by: str
) -> None:
    """Pause run RUN_ID: a step in flight finishes; no new step, undo or timer runs until
    `durably resume`."""
    with client_for(app_target, store_url) as client:
        _say(client.pause(run_id, by=by, reason=reason), "pause", app_target, client)


@cli.command(epilog=PRECEDENCE)
@where
@click.argument("run_id")
@BY
def resume(app_target: str | None, store_url: str | None, run_id: str, by: str) -> None:
    """Resume the paused run RUN_ID from where it stopped."""
    with client_for(app_target, store_url) as client:
        _say(client.resume(run_id, by=by), "resume", app_target, client)


@runs.command("release", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@BY
def release(app_target: str | None, store_url: str | None, run_id: str, by: str) -> None:
    """RUN_ID's worker is dead: end the leases it holds (this run's and its others'), so that
    the next worker to poll takes them over now instead of when they expire. Safe if it was
    alive after all: its later writes are refused, and the runs go on elsewhere."""
    with client_for(app_target, store_url) as client:
        released = client.release(run_id, by=by)
        if released.count:
            click.echo(f"released {released.count} run(s) held by worker {released.worker}")
        else:
            click.echo(
                f"worker {released.worker} holds no lease that has not expired: its runs are "
                "free for the next worker to claim already"
            )
        worker_hint(app_target, client, "to take them over")


@runs.command("restart", epilog=PRECEDENCE)
@where
@click.argument("run_id", required=False)
@click.option(
    "--from-step",
    "from_step",
    default=None,
    metavar="N|NAME",
    help="Where to run again from: a step's position (durably runs show) or its name "
    "(default: the first step that failed, was cancelled or undone).",
)
@click.option("--id", "new_id", default=None, help="The new run's id (default RUN_ID.restart-N).")
@choosing
@BY
def restart(
    app_target: str | None,
    store_url: str | None,
    run_id: str | None,
    from_step: str | None,
    new_id: str | None,
    by: str,
    **chosen: Any,
) -> None:
    """Restart the ended run RUN_ID from a step, as a new run: what it recorded before that
    step is reused; from there on it runs for real, with fresh idempotency keys. With options
    that choose runs in place of RUN_ID: every ended run they match, each from where it went
    wrong, as a bulk job."""
    if run_id is None:
        if from_step is not None or new_id is not None:
            raise click.UsageError("--from-step and --id are for one RUN_ID, not for many runs")
        act(BulkAction.RESTART, app_target, store_url, by=by, **chosen)
        return
    refuse_with_run(chosen)
    where_from: int | str | None = from_step
    if from_step is not None and from_step.isdigit():
        where_from = int(from_step)
    with client_for(app_target, store_url) as client:
        run = client.restart(run_id, from_step=where_from, by=by, id=new_id)
        started = read_payload(client.history(run.id)[0], RunStarted)
        click.echo(f"restarted run {run_id} as {run.id} from step #{started.from_step}")
        worker_hint(app_target, client, "for it to run")


_BULK = (
    "With options that choose runs in place of RUN_ID (--workflow, --status, --since, --until, "
    "--key, --queue, --attr, or --all), every run they match, as a bulk job: --dry-run says "
    "how many and which, a person on a terminal is asked to confirm (--yes: not), and the job "
    "survives a crash (the same command again resumes it)."
)


@runs.command("cancel", epilog=PRECEDENCE)
@where
@click.argument("run_id", required=False)
@_REASON
@choosing
@BY
def runs_cancel(
    app_target: str | None,
    store_url: str | None,
    run_id: str | None,
    reason: str | None,
    by: str,
    **chosen: Any,
) -> None:
    """Cancel run RUN_ID (as `durably cancel`), or every run the options choose."""
    if run_id is None:
        act(BulkAction.CANCEL, app_target, store_url, by=by, reason=reason, **chosen)
        return
    refuse_with_run(chosen)
    with client_for(app_target, store_url) as client:
        _say(client.cancel(run_id, by=by, reason=reason), "cancel", app_target, client)


@runs.command("pause", epilog=PRECEDENCE)
@where
@click.argument("run_id", required=False)
@_REASON
@choosing
@BY
def runs_pause(
    app_target: str | None,
    store_url: str | None,
    run_id: str | None,
    reason: str | None,
    by: str,
    **chosen: Any,
) -> None:
    """Pause run RUN_ID (as `durably pause`), or every run the options choose."""
    if run_id is None:
        act(BulkAction.PAUSE, app_target, store_url, by=by, reason=reason, **chosen)
        return
    refuse_with_run(chosen)
    with client_for(app_target, store_url) as client:
        _say(client.pause(run_id, by=by, reason=reason), "pause", app_target, client)


@runs.command("resume", epilog=PRECEDENCE)
@where
@click.argument("run_id", required=False)
@choosing
@BY
def runs_resume(
    app_target: str | None,
    store_url: str | None,
    run_id: str | None,
    by: str,
    **chosen: Any,
) -> None:
    """Resume the paused run RUN_ID (as `durably resume`), or every run the options
    choose."""
    if run_id is None:
        act(BulkAction.RESUME, app_target, store_url, by=by, **chosen)
        return
    refuse_with_run(chosen)
    with client_for(app_target, store_url) as client:
        _say(client.resume(run_id, by=by), "resume", app_target, client)


@runs.command("retry", epilog=PRECEDENCE)
@where
@click.argument("run_id", required=False)
@choosing
@BY
def runs_retry(
    app_target: str | None, store_url: str | None, run_id: str | None, by: str, **chosen: Any
) -> None:
    """Fresh attempts for the parked run RUN_ID, or every run the options choose, with the
    same idempotency keys (as `durably dlq retry`, which also retries from a step)."""
    if run_id is None:
        act(BulkAction.RETRY, app_target, store_url, by=by, **chosen)
        return
    refuse_with_run(chosen)
    with client_for(app_target, store_url) as client:
        client.retry(run_id, by=by)
        click.echo(f"run {run_id} is pending again")
        worker_hint(app_target, client, "for it to move on")


for _command in (runs_cancel, runs_pause, runs_resume, runs_retry):
    _command.help = f"{_command.help}\n\n{_BULK}"


def _say(steered: Steered, action: str, app_target: str | None, client: Client) -> None:
    if not steered.changed:
        click.echo(f"run {steered.run_id}: nothing to {action}: {steered.note}")
        return
    click.echo(f"run {steered.run_id} ({steered.status}): {action} sent; {steered.note}")
    worker_hint(app_target, client, "for it to move on")
