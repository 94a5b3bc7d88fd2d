"""`durably demo`: fulfil orders with two real worker processes, SIGKILL one mid-run, report.

What it shows: every order completes once the killed worker's leases expire and another
worker takes its runs over; steps that were cut short run again with the same idempotency
key, so no customer is charged twice.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

import durably
from durably.core.event_data import payload_of
from durably.core.history import EventKind
from durably.core.payloads import Claimed, StepReconciled
from durably.core.status import FINAL, PARKED, RunStatus
from durably.demo.services import Services
from durably.views.commands import durably_command

__all__ = ["hints", "run_demo"]

_LEASE = "2s"
_APP = "durably.demo.workflows:app"


def run_demo(*, orders: int, store_url: str | None, workdir: Path | None = None) -> None:
    workdir = workdir or Path.cwd() / "demo"
    workdir.mkdir(exist_ok=True)
    for stale in workdir.glob("*.db*"):
        stale.unlink()
    store_url = store_url or f"sqlite:///{workdir / 'durably.db'}"
    env = {**os.environ, "DURABLY_STORE": store_url, "DEMO_SERVICES": str(workdir / "services.db")}
    os.environ.update(env)
    services = Services(env["DEMO_SERVICES"])

    from durably.demo.workflows import Order, app, fulfil

    click.echo(f"durably demo: {orders} orders, store {store_url}")
    for n in range(orders):
        order = Order(id=f"{n:05d}", total=1_000 + n, email=f"customer{n}@example.com")
        app.start(fulfil, order, id=f"order-{order.id}")

    workers = [_spawn_worker(env) for _ in range(2)]
    killed = False
    with click.progressbar(length=orders, label="fulfilling") as bar:
        done = 0
        while done < orders:
            time.sleep(0.1)
            finished = _count_finished(app)
            bar.update(finished - done)
            done = finished
            for worker in workers:
                if worker.poll() is not None:  # a worker must never die on its own
                    raise click.ClickException(f"a worker exited with code {worker.returncode}")
            if not killed and done >= orders * 0.3:
                workers[0].send_signal(signal.SIGKILL)
                workers[0].wait()
                workers[0] = _spawn_worker(env)
                killed = True
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=30)
    _report(app, services, orders, killed)


def _spawn_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    options = ["--concurrency", "16", "--lease", _LEASE, "--poll", "50ms"]
    command = [sys.executable, "-m", "durably", "worker", _APP, *options]
    log = open(Path(env["DEMO_SERVICES"]).with_name("workers.log"), "ab")  # noqa: SIM115
    return subprocess.Popen(command, env=env, stderr=log)


def _count_finished(app: durably.App) -> int:
    return sum(
        len(app.client.runs(status=status, limit=1_000_000).runs) for status in FINAL | PARKED
    )


def _report(app: durably.App, services: Services, orders: int, killed: bool) -> None:
    by_status: dict[str, int] = {}
    retried: dict[str, int] = {}
    taken_over = reconciled = 0
    dependencies = {name: step.options.dependency for name, step in app.registry.steps.items()}
    for run in app.client.runs(limit=1_000_000).runs:
        by_status[run.status] = by_status.get(run.status, 0) + 1
        for event in app.client.history(run.id):
            if event.kind is EventKind.STEP_ATTEMPT_FAILED and event.name:
                service = dependencies.get(event.name) or event.name
                retried[service] = retried.get(service, 0) + 1
            elif event.kind in (EventKind.CLAIMED, EventKind.STEP_RECONCILED):
                payload = payload_of(event)
                if isinstance(payload, Claimed) and payload.took_over_from is not None:
                    taken_over += 1
                elif isinstance(payload, StepReconciled) and payload.found:
                    reconciled += 1
    effects = services.report()
    letters = app.client.dead_letters(limit=1_000)
    rows: list[tuple[str, object]] = [
        ("orders", orders),
        ("completed", by_status.get(RunStatus.COMPLETED, 0)),
        (
            "compensated (out of stock: charge refunded, run failed)",
            by_status.get(RunStatus.FAILED, 0),
        ),
        ("dead-lettered (waiting for a person)", len(letters)),
        *[(f"attempts retried at {service}", count) for service, count in sorted(retried.items())],
        ("charges found by reconcile after a timeout", reconciled),
        ("worker killed with SIGKILL mid-run", "yes" if killed else "no"),
        ("runs taken over from the killed worker", taken_over),
        ("charges", effects["charges"]),
        ("refunds", effects["refunds"]),
        ("duplicate charges", effects["duplicate_charges"]),
    ]
    click.echo("")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        click.echo(f"  {label:<{width}}  {value}")
    if letters:
        click.echo(hints(letters[0].run_id, app.store.url, services.path))


def hints(run_id: str, store_url: str, services_path: str) -> str:
    """What to try next, pasteable in a new shell from any directory: the store's URL is
    absolute, the demo app is a module of the installed package, and `durably` is named by its
    path, as a new shell may not have the virtualenv it is installed in on its PATH."""
    command = durably_command()
    store = shlex.quote(store_url)
    where = f"{shlex.quote(run_id)} --store {store}"
    services = shlex.quote(services_path)
    worker = f"DEMO_SERVICES={services} {command} worker {_APP} --store {store}"
    return "\n".join(
        [
            f"\nInspect a dead letter:  {command} dlq show {where}",
            f"Retry it:               {command} dlq retry {where}",
            f"Then let a worker of the demo app carry it on (Ctrl-C stops it):\n  {worker}",
            "Or look at every run on the dashboard, http://127.0.0.1:8080 (pip install "
            "'durably[web]'; --open-reads: anybody may look; acting needs a token, "
            f"{command} token new):\n  {command} ui {_APP} --store {store} --open-reads",
        ]
    )
