"""Prometheus metrics for durably: engine hooks that count and time what workers do, and a
collector that asks the store, once per scrape, how many runs are in each state and how long
the oldest have waited. `durably worker --metrics-port 9464` serves them; in code:

    metrics = Metrics(store=lambda: app.store, clock=app.clock)
    app = durably.App(url, hooks=[metrics]); metrics.serve(9464)

Every name is listed in docs/reference/metrics.md. Needs the `metrics` extra
(pip install 'durably[metrics]'), which brings prometheus-client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as missing:  # pragma: no cover - the message is the point
    raise ImportError(
        "durably's metrics need prometheus-client: pip install 'durably[metrics]'"
    ) from missing

from durably.clock import Clock, SystemClock
from durably.core.history import Event
from durably.core.queues import DEFAULT_QUEUE
from durably.core.states import time_in_states
from durably.core.status import FINAL, PARKED, RunStatus
from durably.resilience.gates import GateState
from durably.runtime.hooks import Hooks
from durably.stores.protocol import Store
from durably.stores.records import RunStats, WorkerBeat
from durably.views.explaining import root_error

__all__ = ["Metrics", "store_registry"]

_STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300)
_FINAL = frozenset(str(status) for status in FINAL)
_FAILURES = frozenset(str(s) for s in (RunStatus.FAILED, RunStatus.TIMED_OUT, *PARKED))
_STATE_BUCKETS = (0.01, 0.1, 1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400)
_COMMIT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1)


class Metrics(Hooks):
    """Engine hooks that keep durably's counters and histograms in `registry` (a registry of
    its own by default), and a collector there that reads the store's gauges per scrape."""

    def __init__(
        self,
        *,
        store: Callable[[], Store] | None = None,
        clock: Clock | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self._clock = clock or SystemClock()
        self._started: dict[tuple[str, str, int], float] = {}  # attempt -> perf_counter
        self._lock = threading.Lock()
        self._commit_began = threading.local()
        r = self.registry
        self.claims = Counter(
            "durably_runs_claimed",
            "Runs leased by this worker",
            ["workflow", "takeover"],
            registry=r,
        )
        self.finished = Counter(
            "durably_runs_finished",
            "Runs that reached a final or parked status here",
            ["workflow", "status"],
            registry=r,
        )
        self.attempts = Counter(
            "durably_step_attempts", "Step attempts started", ["step", "dependency"], registry=r
        )
        self.retries = Counter(
            "durably_step_retries",
            "Step attempts after the first",
            ["step", "dependency"],
            registry=r,
        )
        self.failures = Counter(
            "durably_step_failures",
            "Step attempts that failed, by error class",
            ["step", "dependency", "error_class"],
            registry=r,
        )
        self.step_seconds = Histogram(
            "durably_step_duration_seconds",
            "Step attempts' duration",
            ["step"],
            buckets=_STEP_BUCKETS,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "durably_checkpoint_commit_seconds",
            "A batch of checkpoints' commit",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self.commit_size = Histogram(
            "durably_checkpoint_batch_size",
            "Checkpoints a commit takes",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=r,
        )
        self.claim_seconds = Histogram(
            "durably_claim_seconds",
            "A claim of due runs in the store",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self.claim_size = Histogram(
            "durably_claim_size",
            "Runs a claim took (0: none was due for this worker)",
            buckets=(0, 1, 2, 4, 8, 16, 32, 64, 128, 256),
            registry=r,
        )
        self.started = Counter(
            "durably_runs_started", "Runs claimed for the first time", ["workflow"], registry=r
        )
        self.compensations = Counter(
            "durably_compensations",
            "Attempts at a step's undo, by how they ended (completed, failed)",
            ["step", "outcome"],
            registry=r,
        )
        self.state_seconds = Histogram(
            "durably_run_state_seconds",
            "Time an ended run spent in each state (pending, running, waiting, paused, "
            "needs_attention), observed when it ends",
            ["workflow", "state"],
            buckets=_STATE_BUCKETS,
            registry=r,
        )
        self.run_failures = Counter(
            "durably_run_failures",
            "Runs that failed, timed out or were parked for a person, by the error class of "
            "their root cause (a step's own error)",
            ["workflow", "status", "error_class"],
            registry=r,
        )
        self.outages = Counter(
            "durably_store_outages",
            "Times this worker's store calls began to fail (the store down, its disk full, its "
            "file read-only); it retries them, losing nothing",
            registry=r,
        )
        self.store_available = Gauge(
            "durably_store_available",
            "1 while this worker's store calls work, 0 while it retries them",
            registry=r,
        )
        self.store_available.set(1)
        self.webhook_attempts = Counter(
            "durably_webhook_deliveries",
            "Webhook delivery attempts this worker made, by webhook and outcome: delivered "
            "(2xx), failed (tried again later) or dead (its last attempt failed)",
            ["webhook", "outcome"],
            registry=r,
        )
        if store is not None:
            r.register(_StoreCollector(store, self._clock))

    def serve(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve /metrics over HTTP on `host:port`, from a daemon thread."""
        start_http_server(port, addr=host, registry=self.registry)

    # -- hooks ----------------------------------------------------------------------------

    def claimed(self, run_id: str, workflow: str, *, takeover: bool) -> None:
        self.claims.labels(workflow, "true" if takeover else "false").inc()

    def claim_made(self, runs: int, seconds: float) -> None:
        self.claim_seconds.observe(seconds)
        self.claim_size.observe(runs)

    def attempt_started(self, run_id: str, step: str, attempt: int, dependency: str | None) -> None:
        labels = (step, dependency or "")
        self.attempts.labels(*labels).inc()
        if attempt > 1:
            self.retries.labels(*labels).inc()
        with self._lock:
            self._started[(run_id, step, attempt)] = time.perf_counter()

    def attempt_finished(
        self,
        run_id: str,
        step: str,
        attempt: int,
        dependency: str | None,
        error: BaseException | None,
    ) -> None:
        with self._lock:
            began = self._started.pop((run_id, step, attempt), None)
        if began is not None:
            self.step_seconds.labels(step).observe(time.perf_counter() - began)
        if error is not None:
            name = f"{type(error).__module__}.{type(error).__qualname__}"
            self.failures.labels(step, dependency or "", name).inc()

    def before_commit(self, checkpoints: int) -> None:
        self._commit_began.at = time.perf_counter()  # the committer's thread, or the loop's
        self.commit_size.observe(checkpoints)

    def checkpoint_committed(self, checkpoints: int) -> None:
        began = getattr(self._commit_began, "at", None)
        if began is not None:
            self.commit_seconds.observe(time.perf_counter() - began)

    def run_finished(self, run_id: str, workflow: str, status: str) -> None:
        self.finished.labels(workflow, status).inc()

    def run_began(self, run_id: str, workflow: str) -> None:
        self.started.labels(workflow).inc()

    def compensation_attempted(
        self, run_id: str, step: str, attempt: int, error: BaseException | None
    ) -> None:
        self.compensations.labels(step, "completed" if error is None else "failed").inc()

    def run_ended(self, run_id: str, workflow: str, status: str, events: Sequence[Event]) -> None:
        if status in _FAILURES:
            error = root_error(events)
            name = "" if error is None else error.error_class
            self.run_failures.labels(workflow, status, name).inc()
        if status in _FINAL:  # a parked run is not over: its states are counted at its end
            for state, seconds in time_in_states(events).items():
                self.state_seconds.labels(workflow, state).observe(seconds)

    def store_outage(self, reason: str | None) -> None:
        if reason is not None:
            self.outages.inc()
        self.store_available.set(0 if reason is not None else 1)

    def webhook_attempted(self, webhook: str, outcome: str) -> None:
        self.webhook_attempts.labels(webhook, outcome).inc()


def store_registry(store: Callable[[], Store], clock: Clock | None = None) -> CollectorRegistry:
    """A registry with the store's gauges alone: what a process that runs no worker (the
    server) serves, without counters that would stay at zero there."""
    registry = CollectorRegistry()
    registry.register(_StoreCollector(store, clock or SystemClock()))
    return registry


class _StoreCollector(Collector):
    """The gauges that need the store, read once per scrape (Store.stats, Store.gates and
    Store.workers: three small queries)."""

    def __init__(self, store: Callable[[], Store], clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        store, now = self._store(), self._clock.now()
        stats = store.stats(now=now)
        runs = GaugeMetricFamily("durably_runs", "Runs in the store, by status", labels=["status"])
        for status in sorted(RunStatus):  # a status with no run is 0, not missing
            runs.add_metric([status], stats.by_status.get(status, 0))
        yield runs
        parked = sum(count for status, count in stats.by_status.items() if status in PARKED)
        yield GaugeMetricFamily("durably_dead_letters", "Runs parked for a person", value=parked)
        yield GaugeMetricFamily(
            "durably_queue_depth", "Due runs waiting for a worker", value=stats.due
        )
        yield GaugeMetricFamily(
            "durably_runs_lease_expired",
            "Running runs whose lease expired: their worker's heartbeat is missing",
            value=stats.lease_expired,
        )
        workers = [worker for worker in store.workers() if worker.alive(now)]
        yield GaugeMetricFamily("durably_workers_live", "Workers beating now", value=len(workers))
        yield from _queues(stats, workers)
        yield _age(
            "durably_queue_oldest_due_age_seconds",
            "How long the longest-waiting due run has waited",
            stats.oldest_due,
            now,
        )
        yield _age(
            "durably_oldest_in_flight_age_seconds",
            "Age of the oldest run that has not ended",
            stats.oldest_in_flight,
            now,
        )
        breakers = GaugeMetricFamily(
            "durably_breaker_open",
            "1 while a dependency's circuit breaker is open or half open",
            labels=["dependency"],
        )
        for name, text in sorted(store.gates().items()):
            breakers.add_metric([name], 0.0 if GateState.load(text).breaker == "closed" else 1.0)
        yield breakers
        yield GaugeMetricFamily(
            "durably_webhook_deliveries_due",
            "Webhook deliveries due now and not being sent: a backlog that grows while "
            "receivers are down or no worker runs",
            value=store.due_deliveries(now=now),
        )


def _queues(stats: RunStats, live: Sequence[WorkerBeat]) -> Iterator[Metric]:
    """Each queue's due runs and the slots its runs hold, and the due runs of a queue that no
    live worker serves (durably.core.queues): they wait until one starts."""
    due = dict(stats.queue_due)
    due[DEFAULT_QUEUE] = max(0, stats.due - sum(due.values()))
    depth = GaugeMetricFamily(
        "durably_queue_due", "Due runs waiting for a worker, by queue", labels=["queue"]
    )
    running = GaugeMetricFamily(
        "durably_queue_running",
        "Runs of a named queue that hold a worker now (its concurrency slots in use)",
        labels=["queue"],
    )
    unserved = GaugeMetricFamily(
        "durably_queue_unserved",
        "Due runs of a queue that no live worker serves (durably worker --queues)",
        labels=["queue"],
    )
    for queue, count in sorted(due.items()):
        depth.add_metric([queue], count)
        served = any(w.queues is None or queue in w.queues for w in live)
        unserved.add_metric([queue], 0 if served else count)
    for queue, count in sorted(stats.queue_running.items()):
        running.add_metric([queue], count)
    yield from (depth, running, unserved)


def _age(name: str, documentation: str, since: datetime | None, now: datetime) -> Metric:
    age = 0.0 if since is None else max(0.0, (now - since).total_seconds())
    return GaugeMetricFamily(name, documentation, value=age)
