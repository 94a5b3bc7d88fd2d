"""The `durably` command: run workers, inspect runs, run the demo."""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from durably.app import App
from durably.core.status import RunStatus
from durably.errors import DurablyError
from durably.stores import open_store
from durably.timeline import describe_run, timeline

__all__ = ["main"]

_STORE = click.option(
    "--store",
    "store_url",
    envvar="DURABLY_STORE",
    default=None,
    help="Store URL (default: $DURABLY_STORE, else sqlite:///durably.db).",
)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Log debug details.")
def cli(verbose: bool) -> None:
    """durably: durable workflows for Python."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@cli.command()
@click.argument("target")
@click.option("--concurrency", default=32, show_default=True, help="Runs executed at once.")
@click.option(
    "--lease", default="30s", show_default=True, help="Lease length; renewed every third."
)
@click.option("--poll", default="200ms", show_default=True, help="Idle poll interval.")
@click.option("--stop-grace", default="10s", show_default=True, help="Time to finish on SIGTERM.")
def worker(target: str, concurrency: int, lease: str, poll: str, stop_grace: str) -> None:
    """Run a worker for the app at TARGET (module:attribute) until SIGTERM or Ctrl-C."""
    app = _load_app(target)
    app.worker(concurrency=concurrency, lease=lease, poll=poll, stop_grace=stop_grace).run()


@cli.group()
def runs() -> None:
    """List and inspect runs."""


@runs.command("list")
@_STORE
@click.option("--status", type=click.Choice([s.value for s in RunStatus]), default=None)
@click.option("--workflow", default=None)
@click.option("--limit", default=50, show_default=True)
def runs_list(store_url: str | None, status: str | None, workflow: str | None, limit: int) -> None:
    """The most recently updated runs."""
    store = open_store(store_url)
    records = store.runs(
        status=RunStatus(status) if status else None, workflow=workflow, limit=limit
    )
    click.echo(f"{'RUN':<36} {'WORKFLOW':<20} {'STATUS':<16} {'UPDATED':<24} ERROR")
    for run in records:
        error = "" if run.error is None else f"{run.error.error_class}: {run.error.message}"[:60]
        updated = run.updated_at.isoformat(timespec="milliseconds")
        click.echo(f"{run.id:<36} {run.workflow:<20} {run.status:<16} {updated:<24} {error}")
    store.close()


@runs.command("show")
@_STORE
@click.argument("run_id")
def runs_show(store_url: str | None, run_id: str) -> None:
    """A run's state and its whole timeline: steps, attempts, keys, durations, errors."""
    store = open_store(store_url)
    run = store.get_run(run_id)
    if run is None:
        raise click.ClickException(f"no run has the id {run_id!r} in {store.url}")
    for label, value in describe_run(run):
        click.echo(f"{label + ':':<15}{value}")
    click.echo("")
    click.echo(f"{'+ms':>10}  {'EVENT':<15} {'STEP':<24} {'TRY':>3} {'TOOK ms':>8}  DETAIL")
    for row in timeline(store.history(run_id)):
        took = "" if row.duration_ms is None else f"{row.duration_ms:.1f}"
        cells = f"{row.offset_ms:>10.1f}  {row.what:<15} {row.step:<24} {row.attempt:>3}"
        click.echo(f"{cells} {took:>8}  {row.detail}")
    store.close()


@cli.command()
@click.option("--orders", default=200, show_default=True, help="How many orders to fulfil.")
@click.option("--store", "store_url", default=None, help="Store URL (default: a fresh demo.db).")
def demo(orders: int, store_url: str | None) -> None:
    """Fulfil orders through flaky fake services, kill a worker mid-run, and report."""
    from examples.orders.demo import run_demo

    run_demo(orders=orders, store_url=store_url)


def _load_app(target: str) -> App:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{target!r} is not MODULE:ATTRIBUTE (e.g. myapp.workflows:app)")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{target!r} is not a durably.App (found {type(app).__name__})")
    return app


def main() -> None:
    try:
        cli(standalone_mode=True)
    except DurablyError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
