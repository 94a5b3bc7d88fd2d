"""The core benchmark: how fast durably checkpoints trivial workflows, and how far that is
from what its store can commit.

On SQLite (a fresh file in a temp dir: WAL, synchronous=FULL, the default) and on PostgreSQL
(synchronous_commit=on, set per connection; a fresh schema per workload, dropped after) it
measures, durably running in this process:

    w1        W1: 1,000 workflows x 3 trivial async steps, worker concurrency 32
    w2        W2: 200 workflows x 20 trivial async steps, worker concurrency 32
    seq       one workflow at a time (concurrency 1): 200 x 3 steps and 50 x 20 steps; the
              line time/workflow = fixed + steps x per_step through the two gives the cost of
              one step's checkpoint and the fixed cost of a workflow inside the worker (its
              claim and its final commit; app.start is timed on its own, during W1)
    floor     2,000 single-row INSERTs, each its own transaction, on the same store settings

All runs are started first (app.start); only `app.run_until_idle` is timed. Every figure is
the median of --repeat repetitions (default 3), each on a fresh store.

    python -m benchmarks.core                       # both stores, full sizes
    python -m benchmarks.core --quick --repeat 5    # smaller workloads
    python -m benchmarks.core --stores sqlite --only w1,seq,floor
    python -m benchmarks.core --postgres-url postgresql://user@host:5432/db

The table goes to stdout (progress to stderr); the figures, machine, Python version, date and
durability settings to benchmarks/results/core-<store>-latest.json. Without a reachable
PostgreSQL server ($DURABLY_BENCH_POSTGRES, default postgresql://postgres@127.0.0.1:5432/test)
its rows are skipped with a note.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from benchmarks import harness
from benchmarks.harness import Bench, Workload, at_least, at_most
from benchmarks.measures import Floor, Sequential, Throughput
from benchmarks.runners.protocol import Load

__all__ = ["BENCH", "FLOOR", "SEQUENTIAL", "TARGETS", "W1", "W2", "main"]

TARGETS = {  # durably's, by figure key and store
    ("step_checkpoint_ms", "sqlite"): at_most(0.30),
    ("step_checkpoint_ms", "postgres"): at_most(0.70),
    ("w1_workflows_per_s", "sqlite"): at_least(1_000),
    ("w1_workflows_per_s", "postgres"): at_least(700),
    ("w2_steps_per_s", "sqlite"): at_least(10_000),
    ("w2_steps_per_s", "postgres"): at_least(8_000),
}

# The workloads; benchmarks.compare runs the same sizes, timed with the starts.
W1 = Workload("w1", "W1", Throughput(started_first=True), Load(1_000, 3), quick=Load(200, 3))
W2 = Workload(
    "w2",
    "W2",
    Throughput(started_first=True),
    Load(200, 20),
    quick=Load(50, 20),
    report=("w2_workflows_per_s", "w2_steps_per_s"),
)
SEQUENTIAL = Workload(
    "seq",
    "sequential",
    Sequential(started_first=True),
    (Load(200, 3, concurrency=1), Load(50, 20, concurrency=1)),
    quick=(Load(50, 3, concurrency=1), Load(15, 20, concurrency=1)),
)
FLOOR = Workload("floor", "floor", Floor(), 2_000, quick=500)
BENCH = Bench("core", __doc__, (W1, W2, SEQUENTIAL, FLOOR), TARGETS)


def main(argv: Sequence[str] | None = None) -> int:
    return harness.main(BENCH, argv)


if __name__ == "__main__":
    sys.exit(main())
