"""Round trips and starts: what a caller outside the worker pays, on each store.

    roundtrip   start -> result of a 3-step workflow, one at a time, with `durably worker`
                running in another process (polling once a minute, so only wake-ups move
                the run along): ms per workflow, and the part of it after the run's last
                commit (how late the caller hears that its run ended). Beside it, the store's
                own commit floor: a 3-step run is 6 durable commits (start, claim, one per
                step and the last one with the run's end), so "beyond the commits" is the
                round trip less 6 floors.
    starts      starts/s on an empty store with no worker: `app.start` in a loop,
                `app.start_many` in batches of 100, and 8 threads calling `app.start` at
                once (their starts share commits).

    python -m benchmarks.roundtrip                         # both stores
    python -m benchmarks.roundtrip --stores sqlite --runs 100

PostgreSQL: $DURABLY_BENCH_POSTGRES (default postgresql://postgres@127.0.0.1:5432/test); each
measurement gets a schema of its own, dropped after. SQLite: a new file in a temp dir, WAL,
synchronous=FULL. The table goes to stdout, every sample to
benchmarks/results/roundtrip-latest.json. This module imports nothing from the other
benchmark modules but benchmarks.environment, so that it stands alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import durably
from benchmarks.environment import busy_note, run_context

__all__ = ["app", "main"]

ROOT = Path(__file__).parent.parent
POSTGRES = os.environ.get("DURABLY_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
COMMITS_PER_RUN = 6  # start, claim, 3 step checkpoints, the last one with the run's end
THREADS = 8
BATCH = 100


def make_app(store: str | None = None) -> durably.App:
    made = durably.App(store)  # None: $DURABLY_STORE, as the worker process gets it

    @made.step
    async def add(a: int, b: int) -> int:
        return a + b

    @made.workflow
    async def three_steps(n: int) -> int:
        total = await add(n, 1)
        total = await add(total, 1)
        return await add(total, 1)

    return made


app = make_app()  # what the worker process serves


# -- stores ---------------------------------------------------------------------------------


@contextmanager
def fresh_store(kind: str) -> Iterator[str]:
    """A URL of an empty store of this kind, removed after."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="durably-roundtrip-") as tmp:
            yield f"sqlite:///{Path(tmp) / 'durably.db'}?synchronous=FULL"
        return
    import psycopg

    schema = f"durably_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
    separator = "&" if "?" in POSTGRES else "?"
    try:
        yield f"{POSTGRES}{separator}options=-csearch_path%3D{schema}&synchronous_commit=on"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as db:
            db.execute(f"DROP SCHEMA {schema} CASCADE")  # type: ignore[arg-type]


def commit_floor_ms(kind: str, commits: int = 500) -> float:
    """The store's own cost of one single-row durable commit, one client, one at a time."""
    if kind == "sqlite":
        with (
            tempfile.TemporaryDirectory(prefix="durably-floor-") as tmp,
            closing(sqlite3.connect(Path(tmp) / "floor.db", isolation_level=None)) as db,
        ):
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
            began = time.perf_counter()
            for i in range(commits):
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT INTO floor (id, data) VALUES (?, ?)", (i, "x"))
                db.execute("COMMIT")
            return 1000 * (time.perf_counter() - began) / commits
    import psycopg

    with psycopg.connect(POSTGRES, autocommit=True) as db:
        db.execute("CREATE TEMP TABLE floor (id integer PRIMARY KEY, data text NOT NULL)")
        db.execute("SET synchronous_commit = on")
        began = time.perf_counter()
        for i in range(commits):
            db.execute("INSERT INTO floor (id, data) VALUES (%s, %s)", (i, "x"))
        return 1000 * (time.perf_counter() - began) / commits


# -- round trips ----------------------------------------------------------------------------


@contextmanager
def worker_process(url: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "DURABLY_STORE": url}
    command = [sys.executable, "-m", "durably", "worker", "benchmarks.roundtrip:app"]
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*command, "--poll", "60s", "--concurrency", "4"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def roundtrip(kind: str, runs: int) -> dict[str, Any]:
    with fresh_store(kind) as url, tempfile.TemporaryDirectory() as tmp:
        client = make_app(url)
        workflow = client.workflow_named("three_steps")
        log = Path(tmp) / "worker.log"
        try:
            with worker_process(url, log):
                if client.start(workflow, 0).result(timeout="60s") != 3:  # the worker is up
                    raise SystemExit(f"the worker gave a wrong answer:\n{log.read_text()}")
                for n in range(10):  # warm up: connections, caches, the listener
                    client.start(workflow, n).result(timeout="30s")
                totals, heard = [], []
                for n in range(runs):
                    began = time.perf_counter()
                    handle = client.start(workflow, n)
                    handle.result(timeout="30s")
                    ended, wall = time.perf_counter(), time.time()
                    totals.append(1000 * (ended - began))
                    # the run's last commit is stamped with the worker's clock just before it
                    heard.append(1000 * (wall - client.get_run(handle.id).updated_at.timestamp()))
        finally:
            client.close()
    floor = commit_floor_ms(kind)
    median = statistics.median(totals)
    return {
        "store": kind,
        "runs": runs,
        "roundtrip_ms": totals,
        "heard_after_end_ms": heard,
        "floor_commit_ms": floor,
        "median_ms": median,
        "p95_ms": statistics.quantiles(totals, n=20)[-1],
        "median_heard_ms": statistics.median(heard),
        "beyond_commits_ms": median - COMMITS_PER_RUN * floor,
    }


# -- starts ---------------------------------------------------------------------------------


def starts(kind: str, count: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"store": kind, "starts": count}
    figures["loop_per_s"] = timed_starts(kind, count, start_in_a_loop)
    if hasattr(durably.App, "start_many"):
        figures["batches_per_s"] = timed_starts(kind, count, start_in_batches)
    figures["threads_per_s"] = timed_starts(kind, count, start_from_threads)
    return figures


def timed_starts(kind: str, count: int, how: Callable[[durably.App, int], None]) -> float:
    with fresh_store(kind) as url:
        client = make_app(url)
        try:
            client.start("three_steps", -1)  # the store opened and migrated before timing
            began = time.perf_counter()
            how(client, count)
            elapsed = time.perf_counter() - began
            assert len(client.runs(limit=count + 1)) == count + 1
        finally:
            client.close()
    return count / elapsed


def start_in_a_loop(client: durably.App, count: int) -> None:
    for n in range(count):
        client.start("three_steps", n)


def start_in_batches(client: durably.App, count: int) -> None:
    from durably import Start  # type: ignore[attr-defined,unused-ignore]

    for first in range(0, count, BATCH):
        client.start_many(  # type: ignore[attr-defined,unused-ignore]
            [Start("three_steps", (n,)) for n in range(first, min(count, first + BATCH))]
        )


def start_from_threads(client: durably.App, count: int) -> None:
    barrier = threading.Barrier(THREADS)

    def starter(index: int) -> None:
        barrier.wait()
        for n in range(index, count, THREADS):
            client.start("three_steps", n)

    threads = [threading.Thread(target=starter, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# -- the command ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roundtrip")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=200, help="round trips per store")
    parser.add_argument("--starts", type=int, default=1000, help="starts per measurement")
    args = parser.parse_args(argv)
    context = run_context()
    note = busy_note()
    results: list[dict[str, Any]] = []
    for kind in args.stores.split(","):
        print(f"{kind}: round trips...", file=sys.stderr)
        trips = roundtrip(kind, args.runs)
        print(f"{kind}: starts...", file=sys.stderr)
        started = starts(kind, args.starts)
        results.append({"roundtrip": trips, "starts": started})
        print(
            f"{kind:9} start->result {trips['median_ms']:.2f} ms (p95 {trips['p95_ms']:.2f}),"
            f" heard {trips['median_heard_ms']:.2f} ms after the run's end,"
            f" floor {trips['floor_commit_ms']:.3f} ms/commit,"
            f" beyond {COMMITS_PER_RUN} commits {trips['beyond_commits_ms']:.2f} ms"
        )
        batches = started.get("batches_per_s")
        print(
            f"{kind:9} starts/s: loop {started['loop_per_s']:,.0f},"
            f" start_many({BATCH}) {'n/a' if batches is None else f'{batches:,.0f}'},"
            f" {THREADS} threads {started['threads_per_s']:,.0f}"
        )
    if note:
        print(note)
    out = ROOT / "benchmarks" / "results" / "roundtrip-latest.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"context": context, "busy": note, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
