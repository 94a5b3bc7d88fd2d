"""`make demo`: fulfil orders with two real worker processes, SIGKILL one mid-run, report.

What it shows: every order completes once the killed worker's leases expire and another
worker takes its runs over; steps that were cut short run again with the same idempotency
key, so no customer is charged twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click

import durably
from durably.core.status import FINAL, RunStatus
from examples.orders.services import Services

__all__ = ["run_demo"]

_LEASE = "2s"


def run_demo(*, orders: int, store_url: str | None, workdir: Path | None = None) -> None:
    workdir = workdir or Path.cwd() / "demo"
    workdir.mkdir(exist_ok=True)
    for stale in workdir.glob("*.db*"):
        stale.unlink()
    store_url = store_url or f"sqlite:///{workdir / 'durably.db'}"
    env = {**os.environ, "DURABLY_STORE": store_url, "DEMO_SERVICES": str(workdir / "services.db")}
    os.environ.update(env)
    services = Services(env["DEMO_SERVICES"])

    from examples.orders.workflows import Order, app, fulfil

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
    command = [sys.executable, "-m", "durably", "worker", "examples.orders.workflows:app",
               "--concurrency", "16", "--lease", _LEASE, "--poll", "50ms"]  # fmt: skip
    return subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)


def _count_finished(app: durably.App) -> int:
    return sum(len(app.runs(status=status, limit=1_000_000)) for status in FINAL)


def _report(app: durably.App, services: Services, orders: int, killed: bool) -> None:
    completed = len(app.runs(status=RunStatus.COMPLETED, limit=1_000_000))
    effects = services.report()
    taken_over = [
        run.id
        for run in app.runs(limit=1_000_000)
        if any(
            e.kind == "claimed" and e.data and "took_over_from" in e.data
            for e in app.history(run.id)
        )
    ]
    rows = [
        ("orders", orders),
        ("completed", completed),
        ("worker killed with SIGKILL", "yes" if killed else "no"),
        ("runs taken over from the killed worker", len(taken_over)),
        ("service calls", effects["calls"]),
        ("effects applied (one per step)", effects["effects"]),
        ("step bodies run again after the kill", effects["calls"] - effects["effects"]),
        ("charges", effects["charges"]),
        ("duplicate charges", effects["duplicate_charges"]),
    ]
    click.echo("")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        click.echo(f"  {label:<{width}}  {value}")
    if taken_over:
        command = f"durably runs show {taken_over[0]} --store {app.store.url}"
        click.echo(f"\nSee how one run was taken over:\n  {command}")
