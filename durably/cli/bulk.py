"""Acting on every run a filter matches, from the command line (durably.client.bulk): the
options that choose runs in place of a RUN_ID (`durably runs cancel --workflow checkout
--status pending`), the dry run, the confirmation, the progress; and `durably runs bulk
list|show|resume` to follow the jobs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import click

from durably.cli.base import (
    MOMENT,
    PRECEDENCE,
    SINCE,
    attributes_option,
    client_for,
    where,
    worker_hint,
)
from durably.cli.commands import runs
from durably.cli.output import AS_JSON, Column, echo_json, echo_table
from durably.client.bulk import Bulk
from durably.client.client import Client
from durably.core.bulk import BulkAction, BulkJob, Matching, RunFilter, acts_on
from durably.core.status import RunStatus
from durably.views.bulk import BulkJobOut, BulkRunOut

__all__ = ["act", "bulk", "choosing", "refuse_with_run"]

F = TypeVar("F", bound=Callable[..., Any])

_SHOWN = 5  # ids a dry run names


def choosing(command: F) -> F:
    """The options that choose runs in place of a RUN_ID, and those of acting in bulk."""
    options = [
        click.option("--workflow", default=None, help="In place of RUN_ID: runs of this workflow."),
        click.option(
            "--status",
            type=click.Choice([s.value for s in RunStatus]),
            default=None,
            help="... in this status.",
        ),
        click.option(
            "--since",
            type=SINCE,
            default=None,
            help="... started at or after it: a time, or a duration back from now (1h).",
        ),
        click.option("--until", type=MOMENT, default=None, help="... started before it."),
        click.option("--key", default=None, help="... started with this key."),
        click.option("--queue", default=None, help='... on this queue ("default": the default).'),
        attributes_option("... with this attribute (name=value); repeat it: each must match."),
        click.option(
            "--all", "every", is_flag=True, help="Every run in the store (no filter given)."
        ),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Only say how many runs match, and the first: no change.",
        ),
        click.option(
            "--yes", is_flag=True, help="Do not ask to confirm (needed when not on a terminal)."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def refuse_with_run(chosen: dict[str, Any]) -> None:
    """A RUN_ID was given: the options that choose runs must not be."""
    given = sorted(f"--{name.replace('_', '-')}" for name, value in chosen.items() if value)
    if given:
        names = ", ".join(given).replace("--every", "--all")
        raise click.UsageError(
            f"give RUN_ID or options that choose runs, not both ({names} given with RUN_ID)"
        )


def act(
    action: BulkAction,
    app_target: str | None,
    store_url: str | None,
    *,
    by: str,
    reason: str | None = None,
    **chosen: Any,
) -> None:
    """Act on every run the options choose: say how many and which, ask to confirm, then run
    the job (or resume the person's unfinished one of the same action and filter)."""
    dry_run, yes, every = chosen.pop("dry_run"), chosen.pop("yes"), chosen.pop("every")
    with client_for(app_target, store_url) as client:
        run_filter = _filter_of(client, **chosen)
        if run_filter.empty and not every:
            raise click.UsageError(
                "give RUN_ID, or options that choose runs (--workflow, --status, --since, "
                "--until, --key, --queue, --attr); acting on every run in the store needs --all"
            )
        if every and not run_filter.empty:
            raise click.UsageError("--all is every run: give it without other filters")
        bulk = client.bulk
        found = bulk.unfinished(action, run_filter, by=by)
        if found is not None:
            click.echo(f"your unfinished bulk job {found.id} does this: {_progress(found)}")
        elif not _previewed(bulk.preview(action, run_filter, every=every, limit=_SHOWN), action):
            return
        if dry_run:
            click.echo("(a dry run: nothing was changed)")
            return
        _confirm(action, run_filter, found, yes)
        begun = bulk.begin(action, run_filter, every=every, by=by, reason=reason)
        if begun.job is None:
            click.echo(f"no run matches {run_filter.describe()} any more: nothing to {action}")
            return
        if begun.resumed:
            click.echo(f"resuming bulk job {begun.job.id} where it stopped")
        _run(client, begun.job, app_target)


# -- the jobs -------------------------------------------------------------------------------


@runs.group("bulk")
def bulk() -> None:
    """Bulk jobs: a person's cancel, retry, pause, resume or restart of every run a filter
    matched (`durably runs cancel --workflow W`, ...), their progress, and why runs were
    skipped."""


@bulk.command("list", epilog=PRECEDENCE)
@where
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--unfinished", is_flag=True, help="Only jobs with runs left to act on.")
@AS_JSON
def bulk_list(
    app_target: str | None, store_url: str | None, limit: int, unfinished: bool, as_json: bool
) -> None:
    """Bulk jobs, the newest first, with their progress."""
    with client_for(app_target, store_url) as client:
        jobs = client.bulk.jobs(limit=limit, unfinished=unfinished)
    if as_json:
        echo_json([BulkJobOut.of(job) for job in jobs])
        return
    echo_table(
        [
            Column("JOB"),
            Column("ACTION"),
            Column("RUNS", max_width=50),
            Column("BY", max_width=24),
            Column("VIA"),
            Column("STATE"),
            Column("DONE", justify="right"),
            Column("SKIPPED", justify="right"),
            Column("MADE (UTC)"),
        ],
        (
            [
                job.id,
                str(job.action),
                job.filter.describe(),
                job.by,
                str(job.via),
                job.state,
                f"{job.done}/{job.total}",
                str(job.skipped),
                job.created_at.strftime("%Y-%m-%d %H:%M:%S"),
            ]
            for job in jobs
        ),
    )
    if not jobs:
        click.echo("(no bulk jobs)")


@bulk.command("show", epilog=PRECEDENCE)
@where
@click.argument("job_id")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@AS_JSON
def bulk_show(
    app_target: str | None, store_url: str | None, job_id: str, limit: int, as_json: bool
) -> None:
    """A bulk job: what it does to which runs, who asked, its progress, and the runs it
    skipped, each with why (the first --limit)."""
    with client_for(app_target, store_url) as client:
        job, skipped = client.bulk.job(job_id), client.bulk.skipped(job_id, limit=limit)
    if as_json:
        echo_json({"job": BulkJobOut.of(job), "skipped": [BulkRunOut.of(s) for s in skipped]})
        return
    for label, value in [
        ("job", job.id),
        ("action", str(job.action) + (f" (reason: {job.reason})" if job.reason else "")),
        ("runs", job.filter.describe()),
        ("by", f"{job.by} (via {job.via})"),
        ("made", job.created_at.isoformat()),
        ("state", job.state + (f" at {job.finished_at.isoformat()}" if job.finished_at else "")),
        ("progress", _progress(job)),
    ]:
        click.echo(f"{label + ':':<10}{value}")
    if skipped:
        click.echo("")
        echo_table(
            [Column("SKIPPED RUN", max_width=40), Column("WHY", fold=True)],
            ([item.run_id, item.note or ""] for item in skipped),
        )
    if not job.finished:
        click.echo(f"\n(to go on with it: durably runs bulk resume {job.id})")


@bulk.command("resume", epilog=PRECEDENCE)
@where
@click.argument("job_id")
def bulk_resume(app_target: str | None, store_url: str | None, job_id: str) -> None:
    """Go on with an unfinished bulk job where it stopped (its runs were chosen when it was
    made; those acted on already are not acted on again). Each run is acted on as the job's
    person did."""
    with client_for(app_target, store_url) as client:
        job = client.bulk.job(job_id)
        if job.finished:
            click.echo(f"bulk job {job.id} is finished: {_progress(job)}")
            return
        click.echo(f"resuming bulk job {job.id}: {_progress(job)}")
        _run(client, job, app_target)


# -- helpers --------------------------------------------------------------------------------


def _filter_of(client: Client, *, since: datetime | timedelta | None, **given: Any) -> RunFilter:
    """The filter the options give; a --since back from now is a time from now on."""
    moment = client.clock.now() - since if isinstance(since, timedelta) else since
    return RunFilter(since=moment, **given)


def _previewed(found: Matching, action: BulkAction) -> bool:
    """Say what a job would act on; False when nothing matches (said too)."""
    if found.total == 0:
        click.echo(f"no run matches: nothing to {action}")
        return False
    more = f" and {found.total - len(found.first):,} more" if found.total > len(found.first) else ""
    click.echo(f"{found.total:,} run(s) match: {', '.join(found.first)}{more}")
    skipped = found.total - found.fitting(action)
    if skipped:
        fits = ", ".join(str(s) for s in RunStatus if s in acts_on(action))
        click.echo(f"{skipped:,} of them would be skipped: a {action} acts on runs that are {fits}")
    return True


def _confirm(action: BulkAction, run_filter: RunFilter, found: BulkJob | None, yes: bool) -> None:
    """Ask the person on a terminal; refuse elsewhere without --yes."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(
            f"not on a terminal, so nobody can confirm a {action} in bulk: add --yes "
            "(or --dry-run to only see what it would do)"
        )
    what = (
        f"resume bulk job {found.id}" if found else f"{action} the runs of {run_filter.describe()}"
    )
    click.confirm(f"{what[0].upper()}{what[1:]}?", abort=True)


def _run(client: Client, job: BulkJob, app_target: str | None) -> None:
    """Run the job to its end, with a progress bar on a terminal and a line a batch
    elsewhere; a job stopped by Ctrl-C says how to go on."""
    try:
        job = _with_progress(client.bulk, job)
    except KeyboardInterrupt:
        stopped = client.bulk.job(job.id)
        click.echo(
            f"\nstopped: {_progress(stopped)}. To go on: the same command again, or "
            f"durably runs bulk resume {job.id}",
            err=True,
        )
        raise SystemExit(130) from None
    click.echo(f"bulk job {job.id} finished: {_progress(job)}")
    if job.skipped:
        click.echo(f"(why each run was skipped: durably runs bulk show {job.id})")
    if job.acted and job.action is not BulkAction.PAUSE:
        worker_hint(app_target, client, "for the runs to move on")


def _with_progress(bulk: Bulk, job: BulkJob) -> BulkJob:
    if not sys.stdout.isatty():
        return bulk.run(job.id, progress=lambda now: click.echo(f"{job.id}: {_progress(now)}"))
    label = f"{job.action} ({job.id})"
    with click.progressbar(length=job.total, label=label, show_pos=True) as bar:
        bar.update(job.done)
        seen = [job.done]

        def progress(now: BulkJob) -> None:
            bar.update(now.done - seen[0])
            seen[0] = now.done

        return bulk.run(job.id, progress=progress)


def _progress(job: BulkJob) -> str:
    skipped = f", {job.skipped:,} skipped" if job.skipped else ""
    return f"{job.done:,} of {job.total:,} runs done ({job.acted:,} {job.action.past}{skipped})"
