"""Every benchmark `python -m benchmarks` runs, by name, as data: its workloads (measures of
benchmarks/workloads/) at their sizes (full, --quick), repetitions, engines, durably's targets.
"""

from dataclasses import replace
from functools import partial
from typing import Any

from benchmarks.plan import Bench, Workload
from benchmarks.runners.protocol import Load
from benchmarks.workloads import capacity, engines, features, large, outputs, queries, queues
from benchmarks.workloads.features import Backlog
from benchmarks.workloads.queues import Depths, Spread


def targets(**limits: tuple[float, float]) -> dict[tuple[str, str], float]:
    """durably's targets by figure key and store, from each key's SQLite and PostgreSQL limits
    (the metric says which way is better); in the durable mode only."""
    pairs = [(key, zip(("sqlite", "postgres"), pair, strict=True)) for key, pair in limits.items()]
    return {(key, store): limit for key, pair in pairs for store, limit in pair}


CORE_TARGETS = targets(
    step_checkpoint_ms=(0.30, 0.70), w1_workflows_per_s=(1_000, 700), w2_steps_per_s=(10_000, 8_000)
)
COMPARE_TARGETS = CORE_TARGETS | targets(
    workflow_fixed_ms=(0.4, 1.0),
    hop_in_process_ms=(2, 3),
    hop_cross_process_ms=(2, 3),
    w3_recovery_s=(2, 2),
    w3_lost_runs=(0, 0),
    cold_start_ms=(150, 150),
)


def chain_workloads() -> list[Workload[Any]]:
    """W1 in workflows/s, W2 in steps/s, the sequential fit (one workflow at a time)."""
    seq = (Load(200, 3, concurrency=1), Load(50, 20, concurrency=1))
    fewer = (Load(50, 3, concurrency=1), Load(15, 20, concurrency=1))
    rate = engines.throughput
    return [
        Workload("w1", partial(rate, "w1", "workflows"), Load(1_000, 3), Load(200, 3)),
        Workload("w2", partial(rate, "w2", "steps"), Load(200, 20), Load(50, 20)),
        Workload("seq", engines.fit, seq, fewer),
    ]


def floor(commits: int, quick: int) -> Workload[int]:
    return Workload("floor", engines.floor, commits, quick, store_alone=True)


CORE = Bench(
    "core",
    "durably alone (only app.run_until_idle timed): W1, W2, the sequential fit; the store's floor",
    (*chain_workloads(), floor(2_000, 500)),
    targets=CORE_TARGETS,
)
COMPARE = Bench(
    "compare",
    "durably beside DBOS 3.4, a fresh process each: W1, W2, fit, W3, hops, a burst, cold start",
    (
        *chain_workloads(),
        Workload("w3", engines.recovery, (Load(500, 10), 10), (Load(100, 10), 10)),
        Workload("hop", engines.hop, 30, 10),
        Workload("queue", engines.queue, Load(1_000, 1), Load(200, 1)),
        Workload("cold", engines.cold_start, None, None),
        floor(2_000, 500),
    ),
    engines=("durably", "dbos"),
    targets=COMPARE_TARGETS,
)
KILLS = Bench(
    "kills",
    "W3 beside DBOS, killed at many points: the effects a SIGKILL makes a worker apply twice",
    (Workload("kills", engines.kills, (Load(200, 10), 10, 12), (Load(100, 10), 10, 4)),),
    repeat=1,
    engines=("durably", "dbos"),
)
ROUNDTRIP = Bench(
    "roundtrip",
    "start -> result beside DBOS, from outside the worker (and beyond 6 commits) and beside it"
    " in the caller's process (3 steps, and none); starts/s",
    (
        Workload("roundtrip", engines.roundtrip, (150, 10, 500), (30, 5, 200)),
        floor(500, 200),
        Workload("starts", engines.starts, 1_000, 200),
    ),
    repeat=5,
    engines=("durably", "dbos"),
)
SCALING = Bench(
    "scaling",
    "long histories, a takeover after 10,000 steps, claims beside 100,000 runs, 1/2/4/8 worker"
    " processes (durably worker --processes N): workflows/s, claims; starts beside a busy"
    " worker",
    (
        Workload("history", features.histories, (10, 100, 1_000, 10_000), (10, 100, 1_000)),
        Workload("pickup", features.pickup, 10_000, 1_000),
        *(
            Workload(f"claim-{name}", features.claims, Backlog(200, 200, 1, **held), quick)
            for name, held, quick in [
                ("empty", {}, Backlog(50, 50, 1)),
                ("10k", {"finished": 10_000}, Backlog(50, 50, 1, finished=2_000)),
                ("100k", {"finished": 100_000}, Backlog(50, 50, 1, finished=10_000)),
                ("elsewhere", {"elsewhere": 100_000}, Backlog(50, 50, 1, elsewhere=10_000)),
            ]
        ),
        Workload(
            "processes",
            features.processes,
            ((1, 2, 4, 8), Load(2_000, 3)),
            ((1, 2, 4, 8), Load(300, 3)),
        ),
        Workload(  # one run at a time per worker: a claim per run, where the claims meet
            "processes-c1",
            features.processes,
            ((1, 2, 4, 8), Load(1_000, 3, concurrency=1)),
            ((1, 2, 4, 8), Load(300, 3, concurrency=1)),
        ),
        Workload(  # a web process starting runs while a worker is busy on the same store
            "starts-beside",
            features.starts_beside,
            (Load(20_000, 3), 300),
            (Load(4_000, 3), 100),
        ),
    ),
)
SLEEPERS = Bench(
    "sleepers",
    "W1 and the per-step fit beside 100,000 runs asleep for a day; 10,000 timers due at once",
    (
        Workload("beside", features.beside, 100_000, 10_000),
        Workload("due", features.due, 10_000, 2_000),
    ),
)
PRIORITIES = Bench(
    "priorities",
    "a claim of 32 from 1,000 or 100,000 due runs, or 1,000 beside 100,000 asleep (pooled)",
    tuple(
        Workload(name, features.claims, Backlog(due, 30, sleeping=asleep), quick)
        for name, due, asleep, quick in [
            ("backlog-1k", 1_000, 0, Backlog(1_000, 10)),
            ("backlog-100k", 100_000, 0, Backlog(10_000, 10)),
            ("sleepers-100k", 1_000, 100_000, Backlog(1_000, 10, sleeping=10_000)),
        ]
    ),
    repeat=1,
)
SCHEDULES = Bench(
    "schedules",
    "W1 by an app with 200 more workflows, none scheduled and each scheduled hourly",
    (Workload("schedules", features.schedules, 200, 50),),
)
RETENTION = Bench(
    "retention",
    "W1 beside 100,000 runs ended two days ago, kept or deleted by retention; the rest, deleted",
    (Workload("retention", features.retention, 100_000, 20_000),),
)
FANOUT = Bench(
    "fanout",
    "one workflow gathering 1,000 trivial steps against one calling them in a row",
    (Workload("fanout", features.fanout, 1_000, 200),),
)
DEBOUNCE = Bench(
    "debounce",
    "debounced starts/s beside DBOS's Debouncer: one key in a loop, 100 keys, 8 threads on one",
    (Workload("debounce", engines.debounce, 2_000, 300),),
    engines=("durably", "dbos"),
)
QUEUES = Bench(
    "queues",
    "queues and keys beside DBOS 3.4: 1 run per key over 10,000 or 100 keys, a small key behind"
    " a big one's 10,000 runs, W1 on no queue or a queue; claims as a queue's due runs grow",
    (
        Workload(
            "per-key",
            queues.per_key,
            (Spread(10_000, 10_000), Spread(10_000, 100)),
            (Spread(200, 200), Spread(200, 40)),
        ),
        Workload("small-key", queues.small_key, (10_000, 5), (500, 5)),
        Workload("overhead", queues.overhead, (Load(1_000, 3), 100), (Load(200, 3), 50)),
        Workload(
            "claims",
            queues.claims,
            Depths((1_000, 10_000, 100_000), 10),
            Depths((1_000, 5_000), 5),
        ),
    ),
    engines=("durably", "dbos"),
)
QUERIES = Bench(
    "queries",
    "a query's answer (a replay of the history) for a run of 10, 100 and 1,000 completed steps",
    (Workload("latency", queries.latency, (10, 100, 1_000), (10, 100)),),
)
OUTPUTS = Bench(
    "outputs",
    "what a run publishes, read from another process beside DBOS 3.4: events set -> seen,"
    " a stream's items/s, a silent run's waiting reader's statements/s, durably's updates;"
    " durably's stream of 10,000 items",
    (
        Workload(
            "outputs",
            outputs.measure,
            outputs.Phases(events=50, items=1_000),
            outputs.Phases(events=20, items=300, wait_s=1.5, updates=10),
        ),
        Workload("stream-alone", outputs.stream_alone, 10_000, 2_000),
    ),
    engines=("durably", "dbos"),
)
CAPACITY = Bench(
    "capacity",
    "what a start, a step and a run's end cost PostgreSQL (CPU, WAL, commits) and the worker"
    " (CPU), fitted from W1 and W2 at c=32 and 3/20-step runs at c=1; bytes per run and per"
    " event; one worker's connections",
    (
        Workload(
            "capacity",
            capacity.measure,
            ((Load(1_000, 3), Load(200, 20)), (Load(100, 3, 1), Load(30, 20, 1))),
            ((Load(200, 3), Load(50, 20)), (Load(30, 3, 1), Load(10, 20, 1))),
        ),
    ),
)
LARGE = Bench(
    "large",
    "claims, the per-step fit, runs list's first page (filtered too) and the metrics scrape's"
    " run stats, empty and beside 1,000,000 finished runs of 20 events (benchmarks.fill;"
    " --fill-runs N), filled/empty; size per million runs",
    (Workload("large", large.measure, large.Large(1_000_000), large.Large(100_000)),),
    targets=targets(
        **{f"{key}_ratio": (1.10, 1.10) for key in large.LABELS}  # within 10%
    ),
)
ALL = (
    CORE,
    COMPARE,
    KILLS,
    ROUNDTRIP,
    SCALING,
    SLEEPERS,
    PRIORITIES,
    SCHEDULES,
    RETENTION,
    FANOUT,
    DEBOUNCE,
    QUEUES,
    QUERIES,
    OUTPUTS,
    CAPACITY,
    LARGE,
)
BENCHES = {bench.name: bench for bench in ALL}


def filled(bench: Bench, runs: int | None) -> Bench:
    """`bench`; the large one with `runs` finished runs in its filled store, at either size."""
    if bench is not LARGE or runs is None:
        return bench
    resized = [
        replace(w, size=replace(w.size, runs=runs), quick=replace(w.quick, runs=runs))
        for w in bench.workloads
    ]
    return replace(bench, workloads=tuple(resized))
