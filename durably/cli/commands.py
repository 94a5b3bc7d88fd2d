"""The `durably` command: run workers, start and inspect runs, the demo and the benchmarks
(a person's answers to runs: durably.cli.answers).

Every command finds its store the same way: --store, else the store of the app named by
--app, else $DURABLY_STORE, else ./durably.db. Every command goes through durably.client.client,
the one client App uses too. Only `worker` and `start` may create a store; the others open
one that exists or say where they looked. Errors are one line, `error: ...`: exit status 1
when durably refused (an unknown run, an action the run's state does not allow), 2 when the
command line is wrong.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from datetime import datetime, timedelta
from typing import Any

import click

from durably.app import App
from durably.cli.base import (
    BY,
    DURATION,
    MOMENT,
    PRECEDENCE,
    VERBOSE,
    attributes_option,
    cli,
    client_for,
    load_app,
    where,
    worker_hint,
)
from durably.cli.output import AS_JSON, Column, echo_json, echo_table, echo_tracebacks
from durably.cli.supervisor import Child, Supervisor, duration_text
from durably.core.priority import MAX_PRIORITY
from durably.core.status import RunStatus
from durably.runtime.neighbours import default_name
from durably.runtime.upgrades import Outcome
from durably.runtime.worker import Worker
from durably.stores import may_migrate
from durably.stores.records import Happened
from durably.views.deploys import summary
from durably.views.models import (
    HistoryOut,
    RunOut,
    RunPageOut,
)
from durably.views.published import PublishedOut, published_pairs
from durably.views.timeline import describe_run, timeline

__all__ = ["bench", "demo", "runs", "runs_show", "start", "worker"]

log = logging.getLogger("durably.worker")


@cli.command(epilog="Which store: --store, else the app's.")
@click.argument("target")
@click.option("--store", "store_url", default=None, metavar="URL", help="Overrides the app's.")
@click.option("--concurrency", default=32, show_default=True, help="Runs executed at once.")
@click.option(
    "--lease",
    default="10s",
    show_default=True,
    type=DURATION,
    help="How long a dead worker's runs wait before another takes them over (renewed "
    "every third; a dead worker on the same machine is seen within seconds).",
)
@click.option(
    "--poll", default="200ms", show_default=True, type=DURATION, help="Idle poll interval."
)
@click.option(
    "--stop-grace",
    default="10s",
    show_default=True,
    type=DURATION,
    help="Time to finish on SIGTERM.",
)
@click.option(
    "--name",
    default=None,
    help="A stable name for this worker (unique among live workers). Restarted under the "
    "same name, it recovers the runs its last incarnation held at once, without waiting "
    "for their leases to expire.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (/metrics; needs durably[metrics]). With "
    "--processes N, worker k of N serves on this port + k - 1.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="The address the metrics are served on (0.0.0.0: every interface).",
)
@click.option(
    "--queues",
    default=None,
    metavar="NAME,...",
    help="Take runs of these queues only (comma-separated; `default` is the default queue). "
    "Default: every queue the app declares, and the default one.",
)
@click.option(
    "--webhook-timeout",
    default="10s",
    show_default=True,
    type=DURATION,
    help="How long a webhook delivery waits for its receiver's answer (docs/how-to/webhooks.md).",
)
@VERBOSE
@click.option(
    "--upgrade",
    "upgrading",
    is_flag=True,
    help="First move the runs no live worker serves to this code, each only if it replays "
    "their history (durably upgrade); with --processes, once, before the workers start.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes to run, each with these options, named NAME-1 .. NAME-N. Above 1, "
    "this process supervises them: it forwards SIGTERM and SIGINT, and starts again one that "
    "dies (after 1s, doubling up to 30s).",
)
def worker(
    target: str,
    store_url: str | None,
    concurrency: int,
    lease: timedelta,
    poll: timedelta,
    stop_grace: timedelta,
    name: str | None,
    metrics_port: int | None,
    metrics_host: str,
    queues: str | None,
    webhook_timeout: timedelta,
    upgrading: bool,
    processes: int,
) -> None:
    """Run a worker for the app at TARGET (module:attribute) until SIGTERM or Ctrl-C (with
    --processes N: N workers, each a process of its own)."""
    app = load_app(target)
    if store_url:
        app.use_store(store_url)
    served = None if queues is None else [q.strip() for q in queues.split(",") if q.strip()]
    options = {"concurrency": concurrency, "lease": lease, "poll": poll, "stop_grace": stop_grace}
    options |= {"queues": served, "webhook_timeout": webhook_timeout}
    if processes > 1:
        if metrics_port is not None and metrics_port + processes - 1 > 65535:
            raise click.BadParameter(
                f"{processes} workers serve their metrics on ports {metrics_port} to "
                f"{metrics_port + processes - 1}, past 65535: give a lower port",
                param_hint="--metrics-port",
            )
        _make_worker(app, None, options)  # the options are checked here, once
        base = name or default_name()
        if upgrading:
            _upgrade(app, by=f"worker {base}")
        app.close()  # the supervisor holds no store open while the workers run
        argv = [sys.executable, "-m", "durably", *_root_options(), "worker", target]
        argv += ["--concurrency", str(concurrency), "--lease", duration_text(lease)]
        argv += ["--poll", duration_text(poll), "--stop-grace", duration_text(stop_grace)]
        argv += ["--webhook-timeout", duration_text(webhook_timeout)]
        argv += ["--metrics-host", metrics_host]
        argv += [] if store_url is None else ["--store", store_url]
        argv += [] if queues is None else ["--queues", queues]
        children = []
        for k in range(1, processes + 1):
            port = [] if metrics_port is None else ["--metrics-port", str(metrics_port + k - 1)]
            children.append(Child(f"{base}-{k}", [*argv, "--name", f"{base}-{k}", *port]))
        click.get_current_context().exit(Supervisor(children, stop_grace=stop_grace).run())
    if metrics_port is not None:
        from durably.observability.metrics import Metrics  # the metrics extra: only if asked

        metrics = Metrics(store=lambda: app.store, clock=app.clock)
        app.hooks.append(metrics)
        metrics.serve(metrics_port, metrics_host)
    running = _make_worker(app, name, options)  # after the metrics: it takes the app's hooks
    if upgrading:
        _upgrade(app, by=f"worker {running.name}")
    running.run()


def _make_worker(app: App, name: str | None, options: dict[str, Any]) -> Worker:
    """The app's worker with these options; one the worker refuses is a usage error."""
    try:
        return app.worker(name=name, **options)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _upgrade(app: App, *, by: str) -> None:
    """`--upgrade`: the runs no live worker serves moved to this code, and what stays, logged."""
    upgrades = app.upgrade(by=by)
    log.info("%s", summary(upgrades, dry_run=False))
    for upgraded in upgrades:
        if upgraded.outcome is not Outcome.MOVED:
            log.warning(
                "run %s stays on version %s (%s): %s",
                *(upgraded.run_id, upgraded.from_version, upgraded.outcome, upgraded.why),
            )


def _root_options() -> list[str]:
    """The `durably` options before the command (-v, --log-format), for a child's command."""
    root = click.get_current_context().find_root().params
    verbose = root.get("verbose") or logging.getLogger().isEnabledFor(logging.DEBUG)
    json_lines = root.get("log_format") == "json"
    return [*(["-v"] if verbose else []), *(["--log-format", "json"] if json_lines else [])]


@cli.command(epilog=PRECEDENCE)
@click.argument("workflow")
@click.option(
    "--app", "app_target", required=True, metavar="MODULE:ATTR", help="The app that defines it."
)
@click.option("--store", "store_url", default=None, metavar="URL", help="Overrides the app's.")
@click.option(
    "--input",
    "input_json",
    default="[]",
    show_default=True,
    metavar="JSON",
    help="The arguments: a JSON list (by position) or object (by name), checked against "
    "the workflow's parameter types.",
)
@click.option("--id", "run_id", default=None, help="The run's id (default: a random one).")
@click.option(
    "--correlation-id",
    default=None,
    help="The request this run serves, recorded with it and its children, searched by with "
    "`runs list --correlation-id`.",
)
@click.option(
    "--priority",
    type=click.IntRange(0, MAX_PRIORITY),
    default=None,
    help="0 (lowest) to 1000; each level is a minute's head start in the claim order. "
    "Default: the workflow's, else 0.",
)
@click.option("--queue", default=None, help="The queue the run goes on (default: the workflow's).")
@click.option(
    "--key",
    default=None,
    help="Whose run it is (a customer, a tenant): its queue's per-key limits and fairness.",
)
@click.option(
    "--delay", type=DURATION, default=None, help="Due this long from now, not at once (e.g. 24h)."
)
@click.option(
    "--start-at",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M%z"]),
    default=None,
    help="Due at this time, with its offset (2026-12-01T09:00+00:00), not at once.",
)
@attributes_option(
    "An attribute to find the run by (runs list --attr), e.g. customer=42; repeat it for "
    "more. Stored unencrypted: a secret-looking name (password, api_key, ...) is refused."
)
@click.option(
    "--debounce",
    type=DURATION,
    default=None,
    help="With --debounce-key: the starts of WORKFLOW with the key make one run, due once "
    "none came for this long (30s, 5m), with the last one's input.",
)
@click.option("--debounce-key", default=None, help="Which starts coalesce (a customer's id).")
@click.option(
    "--max-wait",
    type=DURATION,
    default=None,
    help="With --debounce: the run is due at the latest this long after its key's first start.",
)
@BY
def start(
    workflow: str,
    app_target: str,
    store_url: str | None,
    input_json: str,
    run_id: str | None,
    correlation_id: str | None,
    priority: int | None,
    queue: str | None,
    key: str | None,
    delay: timedelta | None,
    start_at: datetime | None,
    attributes: dict[str, str] | None,
    debounce: timedelta | None,
    debounce_key: str | None,
    max_wait: timedelta | None,
    by: str,
) -> None:
    """Start a run of WORKFLOW, or find the run that has this --id already (or, debounced,
    the run its key gathers starts in)."""
    if (debounce is None) != (debounce_key is None) or (max_wait is not None and debounce is None):
        raise click.UsageError(
            "--debounce and --debounce-key go together (and --max-wait with them): the starts "
            "with one key make one run, due once none came for the --debounce"
        )
    # A store may be created here (starting a run before any worker ran is fine), unless
    # $DURABLY_MIGRATE is never.
    with client_for(app_target, store_url, create=may_migrate()) as client:
        started = client.start_json(
            workflow,
            input_json,
            id=run_id,
            priority=priority,
            correlation_id=correlation_id,
            by=by,
            queue=queue,
            key=key,
            delay=delay,
            start_at=start_at,
            attributes=attributes,
            debounce=debounce,
            debounce_key=debounce_key,
            max_wait=max_wait,
        )
        run = started.run
        if started.created:
            click.echo(f"created run {run.id} (workflow {run.workflow}) in {client.store.url}")
            if run.available_at is not None and run.available_at > run.created_at:
                click.echo(f"due at {run.available_at.isoformat(timespec='seconds')}")
        elif debounce is not None:
            click.echo(f"joined run {run.id} (workflow {run.workflow}) in {client.store.url}")
        else:
            click.echo(f"run {run.id} exists already, with this workflow and input: {run.status}")
        if run.gathering and run.available_at is not None:
            click.echo(
                f"it gathers the starts of key {run.debounce!r} ({run.gathered} so far) and "
                f"is due at {run.available_at.isoformat(timespec='seconds')}"
            )
        worker_hint(app_target, client, "for it to run")


@cli.group()
def runs() -> None:
    """List and inspect runs."""


@runs.command("list", epilog=PRECEDENCE)
@where
@click.option("--status", type=click.Choice([s.value for s in RunStatus]), default=None)
@click.option("--workflow", default=None)
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1))
@click.option("--cursor", default=None, help="Where the page starts (printed under the last).")
@click.option("--correlation-id", default=None, help="Only the runs started with it.")
@AS_JSON
@click.option(
    "--patch",
    default=None,
    metavar="ID",
    help="Only runs still on the old side of this patch (durably.patched), not ended: none "
    "left, and the patch can be retired (durably.deprecated_patch).",
)
@click.option("--taken-over", is_flag=True, help="Only runs taken over from a dead worker.")
@click.option("--retried", is_flag=True, help="Only runs with an attempt tried again.")
@click.option("--compensated", is_flag=True, help="Only runs with an undo that ran.")
@click.option(
    "--slower-than",
    type=DURATION,
    default=None,
    metavar="DURATION",
    help="Only runs whose status last changed longer than this after their start (10s, 5m).",
)
@click.option("--since", type=MOMENT, default=None, help="Only runs started at or after it.")
@click.option("--until", type=MOMENT, default=None, help="Only runs started before it.")
@attributes_option("Only runs started with this attribute, e.g. customer=42; repeat it: each.")
@click.option("--key", default=None, help="Only runs started with this key.")
@click.option("--queue", default=None, help="Only runs on this queue (default: the default one).")
def runs_list(
    app_target: str | None,
    store_url: str | None,
    status: str | None,
    workflow: str | None,
    limit: int,
    cursor: str | None,
    correlation_id: str | None,
    as_json: bool,
    patch: str | None,
    taken_over: bool,
    retried: bool,
    compensated: bool,
    slower_than: timedelta | None,
    since: datetime | None,
    until: datetime | None,
    attributes: dict[str, str] | None,
    key: str | None,
    queue: str | None,
) -> None:
    """The most recently updated runs, a page at a time; found by what happened to them
    (--taken-over, --retried, --compensated), how long they took, when they started, and
    their attributes, key and queue."""
    flags = {Happened.TAKEN_OVER: taken_over, Happened.RETRIED: retried}
    flags[Happened.COMPENSATED] = compensated
    with client_for(app_target, store_url) as client:
        page = client.runs(
            status=status,
            workflow=workflow,
            limit=limit,
            cursor=cursor,
            patch=patch,
            correlation_id=correlation_id,
            happened=[what for what, wanted in flags.items() if wanted],
            slower_than=slower_than,
            since=since,
            until=until,
            attributes=attributes,
            key=key,
            queue=queue,
        )
        if as_json:
            found = client.store.attributes([run.id for run in page.runs])  # one read
            shown = [RunOut.of(run, attributes=found.get(run.id)) for run in page.runs]
            echo_json(RunPageOut(runs=shown, next_cursor=page.next_cursor))
            return
    echo_table(
        [
            Column("RUN", max_width=40),
            Column("WORKFLOW", max_width=24),
            Column("STATUS"),
            Column("STARTED (UTC)"),
            Column("TOOK", justify="right"),
            Column("ERROR", max_width=80),
        ],
        (
            [
                run.id,
                run.workflow,
                str(run.status),
                run.created_at.strftime("%Y-%m-%d %H:%M:%S"),
                f"{(run.updated_at - run.created_at).total_seconds():.1f}s",
                "" if run.error is None else f"{run.error.error_class}: {run.error.message}",
            ]
            for run in page.runs
        ),
    )
    if page.next_cursor is not None:
        click.echo(f"(more: the next page is --cursor {page.next_cursor})")


@runs.command("show", epilog=PRECEDENCE)
@where
@click.argument("run_id")
@click.option(
    "--traceback",
    "tracebacks",
    is_flag=True,
    help="After the timeline, where each failed attempt of the user's code raised.",
)
@AS_JSON
def runs_show(
    app_target: str | None, store_url: str | None, run_id: str, tracebacks: bool, as_json: bool
) -> None:
    """A run's state, what it does now and what happens next, and its whole timeline:
    steps, attempts, keys, durations, errors (--traceback: and where they were raised)."""
    with client_for(app_target, store_url) as client:
        run, history = client.get(run_id), client.history(run_id)
        workers, now, attributes = client.workers(), client.clock.now(), client.attributes(run_id)
        published = client.store.published_events(run_id)
    if as_json:
        shown = RunOut.of(run, history, workers, now, attributes)
        echo_json(
            {
                "run": shown,
                "published": PublishedOut.of(published),
                "history": HistoryOut.of(run_id, history).events,
            }
        )
        return
    for label, value in describe_run(run, history, workers, now, attributes):
        text = click.style(value, bold=True) if label == "now" else value
        click.echo(f"{label + ':':<15}{text}")
    for label, value in published_pairs(published):
        click.echo(f"{label + ':':<15}{value}")
    click.echo("")
    echo_table(
        [
            Column("AT (UTC)"),
            Column("+ms", justify="right"),
            Column("EVENT"),
            Column("STEP", max_width=32),
            Column("TRY", justify="right"),
            Column("TOOK ms", justify="right"),
            Column("DETAIL", fold=True),
        ],
        (
            [
                row.at.strftime("%H:%M:%S.%f")[:12],
                f"{row.offset_ms:.1f}",
                row.what,
                row.step,
                row.attempt,
                "" if row.duration_ms is None else f"{row.duration_ms:.1f}",
                row.detail,
            ]
            for row in timeline(history)
        ),
    )
    echo_tracebacks(run_id, timeline(history), shown=tracebacks)


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
    from durably.demo.scenario import run_demo

    run_demo(orders=orders, store_url=store_url)


@cli.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("options", nargs=-1, type=click.UNPROCESSED)
def bench(options: tuple[str, ...]) -> None:
    """durably beside DBOS Transact on the same workloads (python -m benchmarks compare).

    Runs from a durably source checkout; OPTIONS go to the benchmark (--help lists them).
    """
    sys.path.insert(0, os.getcwd())
    try:
        benchmarks = importlib.import_module("benchmarks.__main__")
    except ImportError as exc:
        raise click.ClickException(
            f"durably bench runs the benchmarks of a durably source checkout ({exc}): run it "
            "from the checkout's root, after pip install -e '.[bench]' for the DBOS side"
        ) from exc
    sys.exit(benchmarks.main(["compare", *options]))
