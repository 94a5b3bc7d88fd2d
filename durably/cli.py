"""The `durably` command: run workers, inspect runs, run the demo."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Iterator

import click

from durably import operations
from durably.app import App
from durably.clock import SystemClock
from durably.core.status import RunStatus
from durably.errors import DurablyError
from durably.stores import Store, open_store
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
@click.option(
    "--name",
    default=None,
    help="A stable name for this worker (unique among live workers). Restarted under the "
    "same name, it recovers the runs its last incarnation held at once, without waiting "
    "for their leases to expire.",
)
def worker(
    target: str, concurrency: int, lease: str, poll: str, stop_grace: str, name: str | None
) -> None:
    """Run a worker for the app at TARGET (module:attribute) until SIGTERM or Ctrl-C."""
    app = _load_app(target)
    app.worker(
        concurrency=concurrency, lease=lease, poll=poll, stop_grace=stop_grace, name=name
    ).run()


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


@cli.group()
def dlq() -> None:
    """The dead-letter list: runs parked for a person, and what a person can do with them."""


@dlq.command("list")
@_STORE
@click.option("--limit", default=50, show_default=True)
def dlq_list(store_url: str | None, limit: int) -> None:
    """Parked runs, newest first, with the step and error that stopped them."""
    store = open_store(store_url)
    letters = operations.dead_letters(store, limit=limit)
    click.echo(f"{'RUN':<36} {'STATUS':<20} {'STEP':<18} {'TRIES':>5}  ERROR")
    for letter in letters:
        error = (
            "" if letter.error is None else f"{letter.error.error_class}: {letter.error.message}"
        )
        step = letter.step or ""
        click.echo(
            f"{letter.run_id:<36} {letter.status:<20} {step:<18} {letter.attempts:>5}  {error[:90]}"
        )
    if not letters:
        click.echo("(no dead letters)")
    store.close()


@dlq.command("show")
@_STORE
@click.argument("run_id")
@click.pass_context
def dlq_show(ctx: click.Context, store_url: str | None, run_id: str) -> None:
    """The parked run's state and timeline (same as `durably runs show`)."""
    ctx.invoke(runs_show, store_url=store_url, run_id=run_id)


@dlq.command("retry")
@_STORE
@click.argument("run_id")
@click.option(
    "--from-step", type=int, default=None, help="Run every step from this position again."
)
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who acts (recorded).")
def dlq_retry(store_url: str | None, run_id: str, from_step: int | None, by: str) -> None:
    """Fresh attempts for a parked run, with the same idempotency keys."""
    with _store(store_url) as store:
        operations.retry(store, run_id, now=SystemClock().now(), by=by, from_step=from_step)
    click.echo(f"run {run_id} is pending again; a worker will pick it up")


@dlq.command("skip")
@_STORE
@click.argument("run_id")
@click.option("--result", "result_json", default="null", help="The step's result, as JSON.")
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who acts (recorded).")
def dlq_skip(store_url: str | None, run_id: str, result_json: str, by: str) -> None:
    """Record a result for the failed step (or answer an escalation); the run goes on."""
    with _store(store_url) as store:
        operations.skip_step(store, run_id, now=SystemClock().now(), by=by, result_json=result_json)
    click.echo(f"run {run_id} goes on with that result")


@dlq.command("fail")
@_STORE
@click.argument("run_id")
@click.option("--reason", required=True, help="Why (recorded in the run's history).")
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="Who acts (recorded).")
def dlq_fail(store_url: str | None, run_id: str, reason: str, by: str) -> None:
    """Give up: compensate the run's completed steps, then end it failed."""
    with _store(store_url) as store:
        operations.fail(store, run_id, now=SystemClock().now(), by=by, reason=reason)
    click.echo(f"run {run_id} will be compensated and failed")


@contextlib.contextmanager
def _store(url: str | None) -> Iterator[Store]:
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


@cli.command()
@click.option("--orders", default=200, show_default=True, help="How many orders to fulfil.")
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Store URL (default: ./demo/durably.db, emptied first).",
)
def demo(orders: int, store_url: str | None) -> None:
    """Fulfil orders through flaky fake services, kill a worker mid-run, and report.

    The services fail on purpose: connection resets, throttling, a charge whose answer comes
    after the step's timeout, items out of stock, a mailer that rejects some orders.
    """
    sys.path.insert(0, os.getcwd())
    try:
        from examples.orders.demo import run_demo
    except ImportError as exc:
        raise click.ClickException(
            f"the demo lives in the durably repository's examples/ folder ({exc}); "
            "run `make demo` or `durably demo` from the repository's root"
        ) from None
    run_demo(orders=orders, store_url=store_url)


@cli.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("options", nargs=-1, type=click.UNPROCESSED)
def bench(options: tuple[str, ...]) -> None:
    """durably beside DBOS Transact on the same workloads (python -m benchmarks.compare).

    Runs from a durably source checkout; OPTIONS go to the benchmark (--help lists them).
    """
    sys.path.insert(0, os.getcwd())
    try:
        compare = importlib.import_module("benchmarks.compare")
    except ImportError as exc:
        raise click.ClickException(
            f"durably bench runs the benchmarks of a durably source checkout ({exc}): run it "
            "from the checkout's root, after pip install -e '.[bench]' for the DBOS side"
        ) from exc
    sys.exit(compare.main(list(options)))


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
