"""Prometheus metrics on both stores: the hooks count claims, attempts, retries, failures by
error class and finished runs, and time steps and commits; the store's gauges (runs by status,
dead letters, queue depth and age, oldest run in flight, breakers) come from one read per
scrape; a real worker process serves them over HTTP with --metrics-port."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import durably
from durably import Retry
from durably.observability.metrics import Metrics
from durably.testing import FakeClock

from .conftest import DEAD_LEASE, dead_worker
from .processes import start_worker, wait_until
from .stop_app import make_app


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_hooks_and_store_gauges(store_url: str, clock: FakeClock) -> None:
    app = durably.App(store_url, clock=clock)
    metrics = Metrics(store=lambda: app.store, clock=clock)
    app.hooks.append(metrics)
    try:
        flaky = iter([ConnectionError("reset")])

        @app.step(retry=Retry(attempts=2, initial="1s"), dependency="payments")
        async def charge(n: int) -> int:
            if (error := next(flaky, None)) is not None:
                raise error
            return n

        @app.step(retry=Retry(attempts=1))
        async def refuse(n: int) -> int:
            raise durably.Terminal("no")

        @app.workflow
        async def paying(n: int) -> int:
            return await charge(n)  # type: ignore[no-any-return]

        @app.workflow
        async def refusing(n: int) -> int:
            return await refuse(n)  # type: ignore[no-any-return]

        @app.workflow
        async def waiting() -> None:
            await durably.wait_for_signal("go")

        app.start(paying, 1)
        app.start(refusing, 2)
        app.start(waiting)
        app.run_until_idle()
        clock.advance("1s")
        app.run_until_idle()
        app.start(paying, 3)  # due, and nobody claims it before the scrape
        clock.advance("5s")

        scraped = samples(generate_latest(metrics.registry).decode())
    finally:
        app.close()

    def value(name: str, **labels: str) -> float:
        return scraped[(name, tuple(sorted(labels.items())))]

    assert value("durably_step_attempts_total", step="charge", dependency="payments") == 2
    assert value("durably_step_retries_total", step="charge", dependency="payments") == 1
    assert (
        value(
            "durably_step_failures_total",
            step="charge",
            dependency="payments",
            error_class="builtins.ConnectionError",
        )
        == 1
    )
    assert value("durably_runs_finished_total", workflow="paying", status="completed") == 1
    assert value("durably_runs_finished_total", workflow="refusing", status="failed") == 1
    assert (
        value(
            "durably_run_failures_total",
            workflow="refusing",
            status="failed",
            error_class="durably.errors.Terminal",
        )
        == 1
    )
    assert value("durably_runs_claimed_total", workflow="paying", takeover="false") == 2
    assert value("durably_step_duration_seconds_count", step="charge") == 2
    assert value("durably_checkpoint_commit_seconds_count") >= 1
    claims = value("durably_claim_seconds_count")
    assert claims == value("durably_claim_size_count") >= 3  # every drain's claims, empty too
    assert value("durably_claim_size_sum") == 4  # the three runs, and the refused one's retry
    assert value("durably_claim_size_bucket", le="0.0") >= 1  # a drain ends on an empty claim
    assert value("durably_runs", status="completed") == 1
    assert value("durably_runs", status="failed") == 1
    assert value("durably_runs", status="pending") == 2
    assert value("durably_queue_depth") == 1
    assert value("durably_queue_oldest_due_age_seconds") == 5
    assert value("durably_oldest_in_flight_age_seconds") == 6  # the waiting run's age
    assert value("durably_dead_letters") == 0
    assert value("durably_breaker_open", dependency="payments") == 0


def test_a_worker_process_serves_its_metrics_over_http(
    store_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_app(store_url)
    log = tmp_path / "worker.log"
    try:
        handle = client.start("sleepy", 0.01)
        processes.append(start_worker(store_url, log, "--metrics-port", str(port)))
        wait_until("the run completed", lambda: handle.status().value == "completed", log)

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                return str(reply.read().decode())

        wait_until("metrics served", lambda: _served(scrape), log)
        scraped = samples(scrape())
    finally:
        client.close()
    assert (
        scraped[("durably_runs_finished_total", (("status", "completed"), ("workflow", "sleepy")))]
        == 1
    )
    assert scraped[("durably_runs", (("status", "completed"),))] == 1


def _served(scrape: Callable[[], str]) -> bool:
    try:
        return "durably_runs_finished_total" in scrape()
    except OSError:
        return False


def test_starts_undos_time_in_states_and_expired_leases(store_url: str, clock: FakeClock) -> None:
    app = durably.App(store_url, clock=clock)
    metrics = Metrics(store=lambda: app.store, clock=clock)
    app.hooks.append(metrics)
    try:
        undo_fails = iter([ConnectionError("warehouse busy")])

        @app.step
        async def reserve(n: int) -> int:
            return n

        @reserve.compensation
        async def release(n: int, held: int) -> None:
            if (error := next(undo_fails, None)) is not None:
                raise error

        @app.step(retry=Retry(attempts=1))
        async def charge(n: int) -> int:
            raise durably.Terminal("card declined")

        @app.workflow
        async def order(n: int) -> int:
            await reserve(n)
            await durably.sleep("10s")
            return await charge(n)  # type: ignore[no-any-return]

        @app.workflow
        async def stranded(n: int) -> int:
            return n

        app.start(order, 1)
        for _ in range(4):
            app.run_until_idle()
            clock.advance("10s")
        app.start(stranded, 2, id="s-1")
        dead_worker(app.store, clock, "stranded", [])
        clock.advance(DEAD_LEASE + timedelta(seconds=1))
        scraped = samples(generate_latest(metrics.registry).decode())
    finally:
        app.close()

    def value(name: str, **labels: str) -> float:
        return scraped.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("durably_runs_started_total", workflow="order") == 1
    assert value("durably_runs_claimed_total", workflow="order", takeover="false") >= 2
    assert value("durably_compensations_total", step="reserve", outcome="failed") == 1
    assert value("durably_compensations_total", step="reserve", outcome="completed") == 1
    assert value("durably_runs_finished_total", workflow="order", status="failed") == 1
    assert (
        value(
            "durably_run_failures_total",
            workflow="order",
            status="failed",
            error_class="durably.errors.Terminal",
        )
        == 1
    )  # the step's
    for state in ("pending", "running", "waiting"):
        assert value("durably_run_state_seconds_count", workflow="order", state=state) == 1
    # the sleep (10 s) and the undo's retry wait: the run waited at least 10 s of its life
    assert value("durably_run_state_seconds_sum", workflow="order", state="waiting") >= 10
    assert value("durably_runs_lease_expired") == 1  # s-1's worker is presumed dead
    assert value("durably_workers_live") == 0
