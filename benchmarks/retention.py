"""Retention costs little: W1 (1,000 workflows x 3 trivial steps, concurrency 32) on a store
that holds 100,000 runs ended two days ago, by an app that keeps them and by one with
retention="1d", whose worker deletes them (500 a transaction, between claims) while W1 runs;
then how long the deletion of all of them takes, on each store; W1's figures are the medians
of --pairs runs, each on a freshly filled store.

    python -m benchmarks.retention                      # both stores
    python -m benchmarks.retention --stores sqlite --old 20000

The table goes to stdout (progress to stderr), the figures to
benchmarks/results/retention-latest.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.runners.inprocess import chain_app
from benchmarks.stores import POSTGRES_URL, fresh_schema, fresh_sqlite, postgres_problem
from durably.client.ids import new_run_id
from durably.core.history import Event, EventKind
from durably.core.status import RunStatus
from durably.stores import Checkpoint, NewRun, Store, open_store

__all__ = ["main"]

RESULTS = Path(__file__).parent / "results" / "retention-latest.json"
WORKFLOWS, STEPS, BATCH = 1_000, 3, 1_000


def fill(store: Store, count: int) -> None:
    """`count` runs of three steps that completed two days ago."""
    at = datetime.now(UTC) - timedelta(days=2)
    for first in range(0, count, BATCH):
        runs = [NewRun(new_run_id(), "old", "[]") for _ in range(min(BATCH, count - first))]
        store.create_runs(runs, now=at)
        claims = store.claim("filler", ["old"], now=at, lease=timedelta(minutes=5), limit=BATCH)
        store.commit([_completed(claim.run_id, claim.epoch, claim.events[-1].seq, at)
                      for claim in claims], now=at)  # fmt: skip
        print(f"  {first + len(runs):,} old runs", file=sys.stderr, end="\r")
    print(file=sys.stderr)


def _completed(run_id: str, epoch: int, seq: int, at: datetime) -> Checkpoint:
    events = []
    for position in range(STEPS):
        name = f"step_{position}"
        events += [Event(seq + 1 + 2 * position, EventKind.STEP_STARTED, at, position, name, 1),
                   Event(seq + 2 + 2 * position, EventKind.STEP_COMPLETED, at, position, name,
                         1, "1")]  # fmt: skip
    events.append(Event(seq + 1 + 2 * STEPS, EventKind.RUN_COMPLETED, at))
    return Checkpoint(run_id, epoch, tuple(events), RunStatus.COMPLETED, result="1")


def settle(url: str) -> None:
    """Vacuum a PostgreSQL store's tables after the fill, as autovacuum would soon: until
    then the planner knows nothing of the 100,000 rows."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as db:
            db.execute("VACUUM ANALYZE durably_runs, durably_events")


def w1(url: str, retention: str | None) -> float:
    app, chain = chain_app(url, STEPS)
    app.retention = None if retention is None else timedelta(days=1)
    try:
        for i in range(WORKFLOWS):
            app.start(chain, i)
        began = time.perf_counter()
        if app.run_until_idle(concurrency=32) != WORKFLOWS:
            raise RuntimeError("W1 did not finish")
        return WORKFLOWS / (time.perf_counter() - began)
    finally:
        app.close()


def prune_all(url: str) -> tuple[float, int]:
    store = open_store(url)
    try:
        began, total = time.perf_counter(), 0
        while deleted := store.prune(datetime.now(UTC) - timedelta(days=1), limit=500):
            total += deleted
        return time.perf_counter() - began, total
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--old", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, dict[str, float]] = {}
    for store_name in args.stores.split(","):
        if store_name == "postgres" and (problem := postgres_problem(POSTGRES_URL)):
            print(f"postgres skipped: {problem}", file=sys.stderr)
            continue
        figures: dict[str, float] = {}
        samples: dict[str, list[float]] = {"kept": [], "retention": []}
        for _ in range(args.pairs):
            for label, retention in (("kept", None), ("retention", "1d")):
                fresh = fresh_sqlite() if store_name == "sqlite" else fresh_schema(POSTGRES_URL)
                with fresh as url:
                    opened = open_store(url)
                    fill(opened, args.old)
                    opened.close()
                    settle(url)
                    samples[label].append(w1(url, retention))
                    if retention is not None:
                        seconds, deleted = prune_all(url)
                        figures["prune_rest_s"], figures["pruned_rest"] = seconds, deleted
        figures["w1_kept"] = statistics.median(samples["kept"])
        figures["w1_retention"] = statistics.median(samples["retention"])
        results[store_name] = figures
        change = figures["w1_retention"] / figures["w1_kept"] - 1
        print(
            f"{store_name}: W1 {figures['w1_kept']:,.0f} workflows/s beside {args.old:,} old "
            f"runs kept, {figures['w1_retention']:,.0f} while deleting them ({change:+.1%}); "
            f"the {figures['pruned_rest']:,.0f} left deleted in {figures['prune_rest_s']:.1f}s"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
