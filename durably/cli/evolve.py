"""Commands for code and stores that evolve: which workers run which versions (`durably
workers`), moving stranded runs to the code being deployed (`durably upgrade`), a run's
history for a replay test of new code (`durably runs export`), and the deletion of old runs
(`durably prune`)."""

from __future__ import annotations

import json
import sys

import click

from durably.cli.base import BY, PRECEDENCE, cli, client_for, load_app, where
from durably.cli.commands import runs
from durably.cli.output import AS_JSON, Column, echo_json, echo_table
from durably.core.audit import Via
from durably.durations import parse_duration
from durably.runtime.upgrades import Outcome
from durably.views.breakers import breakers as read_breakers
from durably.views.deploys import summary
from durably.views.models import BreakerOut, UpgradeOut, WorkerOut

__all__ = ["prune", "runs_export", "upgrade", "workers"]


@runs.command("export", epilog=PRECEDENCE)
@where
@click.argument("run_id")
def runs_export(app_target: str | None, store_url: str | None, run_id: str) -> None:
    """Write RUN and its whole history as JSON to standard output: `durably runs export RUN >
    run.json`, then `durably.testing.replay(app, "run.json")` in a test replays it against
    your current code (no step runs) and fails if the code no longer follows it."""
    with client_for(app_target, store_url) as client:
        exported = client.export(run_id)
    click.echo(json.dumps(exported, indent=1))


@cli.command(epilog=PRECEDENCE)
@where
@AS_JSON
def workers(app_target: str | None, store_url: str | None, as_json: bool) -> None:
    """The workers of the store, live or lately gone, with the versions they run.

    A run is claimed only by a worker that runs its workflow's version (`durably runs show`
    says which can); a worker that missed three beats is presumed dead."""
    with client_for(app_target, store_url) as client:
        listed, now = client.workers(), client.clock.now()
    if as_json:
        echo_json([WorkerOut.of(worker, now) for worker in listed])
        return
    echo_table(
        [
            Column("WORKER", max_width=48),
            Column("STATE"),
            Column("LAST SEEN", justify="right"),
            Column("UP SINCE"),
            Column("QUEUES"),
            Column("SERVES", fold=True),
        ],
        (
            [
                worker.name,
                "live" if worker.alive(now) else "gone",
                f"{(now - worker.seen_at).total_seconds():.0f}s ago",
                worker.started_at.isoformat(timespec="seconds"),
                "all" if worker.queues is None else ", ".join(worker.queues),
                "; ".join(
                    f"{name} {', '.join(versions)}"
                    for name, versions in sorted(worker.serves.items())
                ),
            ]
            for worker in listed
        ),
    )
    if not listed:
        click.echo("(no worker has run on this store lately)")


@cli.command(epilog="Which store: --store, else the app's.")
@click.argument("target")
@click.option("--store", "store_url", default=None, metavar="URL", help="Overrides the app's.")
@click.option("--workflow", default=None, help="Only this workflow's runs.")
@click.option("--dry-run", is_flag=True, help="Say what would move; move nothing.")
@BY
@AS_JSON
def upgrade(
    target: str,
    store_url: str | None,
    workflow: str | None,
    dry_run: bool,
    by: str,
    as_json: bool,
) -> None:
    """Move the runs in flight on a version no live worker serves to the code of the app at
    TARGET (module:attribute), each only if that code replays its history without running a
    step; the others stay where they are, listed with the first call where code and history
    part. Exit status 1 if any run stays for that reason."""
    app = load_app(target)
    if store_url:
        app.use_store(store_url)
    try:
        upgrades = app.upgrade(workflow=workflow, dry_run=dry_run, by=by, via=Via.CLI)
    finally:
        app.close()
    if as_json:
        echo_json([UpgradeOut.of(upgraded) for upgraded in upgrades])
    else:
        for upgraded in upgrades:
            why = f"  {upgraded.why}" if upgraded.why else ""
            click.echo(
                f"{upgraded.run_id}: {upgraded.outcome} ({upgraded.workflow} "
                f"{upgraded.from_version} -> {upgraded.to_version}){why}"
            )
        click.echo(summary(upgrades, dry_run=dry_run))
    if any(upgraded.outcome is Outcome.DIVERGES for upgraded in upgrades):
        sys.exit(1)


@cli.command(epilog=PRECEDENCE)
@where
@AS_JSON
def breakers(app_target: str | None, store_url: str | None, as_json: bool) -> None:
    """Each dependency's circuit breaker and limits: open or closed, failures in the window,
    attempts in flight and in line, rate tokens left."""
    with client_for(app_target, store_url) as client:
        gates = read_breakers(client.gates(), now=client.clock.now())
    if as_json:
        echo_json([BreakerOut.of(gate) for gate in gates])
        return
    echo_table(
        [
            Column("DEPENDENCY", max_width=32),
            Column("BREAKER"),
            Column("FAILURES", justify="right"),
            Column("IN FLIGHT", justify="right"),
            Column("WAITING", justify="right"),
            Column("TOKENS", justify="right"),
            Column("OPENED"),
        ],
        (
            [
                gate.dependency,
                gate.breaker,
                str(gate.failures),
                str(gate.in_flight),
                str(gate.waiting),
                "full" if gate.tokens is None else f"{gate.tokens:g}",
                "" if gate.opened_at is None else gate.opened_at.isoformat(timespec="seconds"),
            ]
            for gate in gates
        ),
    )
    if not gates:
        click.echo("(no dependency has been called through a breaker or limit yet)")


@cli.command(epilog=PRECEDENCE)
@where
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="DURATION",
    help="Delete runs that ended longer ago than this (30d, 12h, ...).",
)
@click.option(
    "--batch",
    default=1_000,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Runs deleted a transaction.",
)
def prune(app_target: str | None, store_url: str | None, older_than: str, batch: int) -> None:
    """Delete the runs that ended (completed, failed, timed out, cancelled) longer ago than
    --older-than, with their histories, a batch at a time. Parked, paused and unfinished runs
    are never deleted. Workers of an app with retention= do the same on their own."""
    try:
        age = parse_duration(older_than, what="--older-than")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--older-than") from None
    with client_for(app_target, store_url) as client:
        before, total = client.clock.now() - age, 0
        on_screen = sys.stderr.isatty()  # a bar for a person; a line a batch for a log
        with click.progressbar(
            length=client.prunable(before), label="deleting", file=sys.stderr, hidden=not on_screen
        ) as bar:
            while deleted := client.prune(before, limit=batch):
                total += deleted
                bar.update(deleted)
                if not on_screen:
                    click.echo(f"deleted {total:,} run(s) so far", err=True)
    click.echo(f"deleted {total:,} run(s) that ended before {before.isoformat(timespec='seconds')}")
