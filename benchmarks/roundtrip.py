"""Round trips and starts: what a caller outside the worker pays, on each store, with the same
round trip on DBOS Transact beside durably's.

    roundtrip   start -> result of a 3-step workflow (each step returns x + 1), one workflow
                at a time, run by a worker in another process: ms from before the start to
                the result in the caller's hands, after WARM_UP unrecorded round trips (the
                first of which waits for the worker to be up).
      durably   app.start(three_steps, n).result() in this process; `durably worker` in a
                child process, polling once a minute, so that only its wake-ups move a run
                (LISTEN/NOTIFY on PostgreSQL, a local socket on SQLite); result() waits for
                the store's word that the run ended.
      DBOS      DBOSClient.enqueue_async(...) on a queue, then the handle's get_result, in a
                process of its own (`python -m benchmarks.runners.dbos_runner roundtrip`);
                the DBOS app (the runner's `chain` workflow of @DBOS.step()s) launched in a
                `queue-worker` child process that serves that queue. A client enqueueing and
                a worker process dequeueing is how DBOS runs a workflow in another process.
                DBOS 3.4 has no wake-up for a queue: the worker's queue thread polls, every
                0.2 s here (the runner's setting, as in benchmarks.compare; DBOS's default is
                1 s; --dbos-queue-poll-ms changes it), and get_result polls every 10 ms
                (DBOS's default is 1 s). One at a time, each enqueue comes just after the
                poll that ran the previous workflow, so a DBOS round trip is about one poll
                interval: that is what a DBOS user gets from a worker in another process.
    starts      durably alone: starts/s on an empty store with no worker, `app.start` in a
                loop, `app.start_many` in batches of 100, and 8 threads calling `app.start`
                at once (their starts share commits). --starts 0 skips them.

Why the round trip is a fair comparison: both engines run the same workload the same way (3
trivial async steps, the caller waits for each result before the next start, the workflow
runs in a worker process that was idle and warmed up), each measurement on a fresh store made
by benchmarks.stores (SQLite: a new file in a temp dir, WAL, synchronous=FULL; PostgreSQL: a
new database, synchronous_commit=on; the DBOS runner sets both on every connection it opens
and reports what it read back), and the engines take turns going first from one repetition
to the next, so that drift on the machine hits both. What differs is each engine's own way
to get a started run to a worker and its end back to the caller: that is what is measured.
Both callers run in a process that has done the warm-up round trips (durably's in this one,
DBOS's in its runner, since DBOS is a process-wide singleton).

Figures per engine: the median of each repetition's round trips, shown as the median of
those medians and their range; the p95 of every round trip; "heard", how long after the run's
last commit the caller had its result (the run's end stamp: durably's worker clock just
before that commit; DBOS's database clock at the start of that transaction, to the second
only on SQLite before Python 3.12, so n/a there); and "beyond the commits", the median less
6 single-row commits of the store (its floor, measured in each repetition). 6 is what a
durably run commits (start, claim, the first step's start, then one per step, each with the
next step's start or the run's end); DBOS commits as many (enqueue, dequeue, one per step,
its end; it writes no step's start). Both counts were checked on SQLite by tracing every
connection's commits. The ratio is DBOS's median over durably's: how many times longer a
DBOS caller waits for the same result.

    python -m benchmarks.roundtrip                              # both stores, both engines
    python -m benchmarks.roundtrip --stores sqlite --runs 100 --repeat 3 --engines durably

PostgreSQL: --postgres-url, default $DURABLY_BENCH_POSTGRES or
postgresql://postgres@127.0.0.1:5432/test. The table goes to stdout (progress to stderr);
every sample, the machine, the date and the durability settings to
benchmarks/results/roundtrip-latest.json (--out for another file).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import durably
from benchmarks.compare import p95
from benchmarks.environment import busy_note, load_average, run_context
from benchmarks.plan import Trial, number
from benchmarks.runners.durably_runner import store_url
from benchmarks.runners.processes import ROOT, ProcessRunner
from benchmarks.runners.protocol import BenchmarkError
from benchmarks.stores import POSTGRES_URL, Store, open_store, postgres_problem

__all__ = ["app", "main"]

ENGINES = ("durably", "dbos")
STEPS = 3
WARM_UP = 10  # unrecorded round trips first, on both engines
COMMITS_PER_RUN = 6  # start, claim, the first step's start, 3 step checkpoints (the last: end)
FLOOR_COMMITS = 500
THREADS = 8
BATCH = 100
WORKLOAD = "round trip"
OUT = ROOT / "benchmarks" / "results" / "roundtrip-latest.json"


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
def fresh_durably_store(store: Store) -> Iterator[str]:
    """A new empty store (file or database) for durably, with the comparison's durability."""
    with store.fresh("durably") as url:
        yield store_url(url, fast=False)


def floor_ms(store: Store) -> float:
    """The store's own cost of one single-row durable commit, one client, one at a time."""
    return 1000 * store.commit_floor(FLOOR_COMMITS) / FLOOR_COMMITS


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


def durably_roundtrip(trial: Trial, runs: int) -> dict[str, Any]:
    with fresh_durably_store(trial.store) as url, tempfile.TemporaryDirectory() as tmp:
        client = make_app(url)
        workflow = client.workflow_named("three_steps")
        log = Path(tmp) / "worker.log"
        try:
            with worker_process(url, log):
                if client.start(workflow, 0).result(timeout="60s") != STEPS:  # the worker is up
                    raise BenchmarkError(f"the worker gave a wrong answer:\n{log.read_text()}")
                for n in range(1, WARM_UP):  # connections, caches, the listener
                    client.start(workflow, n).result(timeout="30s")
                totals, heard = [], []
                for n in range(runs):
                    began = time.perf_counter()
                    handle = client.start(workflow, n)
                    result = handle.result(timeout="30s")
                    ended, wall = time.perf_counter(), time.time()
                    if result != n + STEPS:
                        raise BenchmarkError(f"run {n} returned {result!r}, not {n + STEPS}")
                    totals.append(1000 * (ended - began))
                    # the run's last commit is stamped with the worker's clock just before it
                    heard.append(1000 * (wall - client.get_run(handle.id).updated_at.timestamp()))
        finally:
            client.close()
    output = {"roundtrip_ms": totals, "heard_after_end_ms": heard, "worker_poll_seconds": 60}
    options = {"workflows": runs, "steps": STEPS, "warm-up": WARM_UP}
    return trial.record("durably", "roundtrip (in this process)", options, output)


def dbos_roundtrip(trial: Trial, runs: int, queue_poll_ms: float | None) -> dict[str, Any]:
    runner = trial.engine
    assert isinstance(runner, ProcessRunner)
    options: dict[str, object] = {"workflows": runs, "steps": STEPS, "warm-up": WARM_UP}
    if queue_poll_ms is not None:
        options["queue-poll-ms"] = queue_poll_ms
    with trial.fresh() as url:
        output = runner.run(trial, "roundtrip", url, **options)
    if len(output.get("roundtrip_ms", ())) != runs:
        raise BenchmarkError(f"{len(output.get('roundtrip_ms', ()))} round trips, not {runs}")
    return output


def summary(outputs: Sequence[dict[str, Any]], floor: float) -> dict[str, Any]:
    """One engine's figures on one store, from its repetitions' outputs."""
    medians = [statistics.median(output["roundtrip_ms"]) for output in outputs]
    every = [ms for output in outputs for ms in output["roundtrip_ms"]]
    heard = [
        ms for output in outputs for ms in output.get("heard_after_end_ms") or () if ms is not None
    ]
    median = statistics.median(medians)
    return {
        "median_ms": median,
        "min_ms": min(medians),
        "max_ms": max(medians),
        "repetition_medians_ms": medians,
        "p95_ms": p95(every),
        "median_heard_ms": statistics.median(heard) if heard else None,
        "beyond_commits_ms": median - COMMITS_PER_RUN * floor,
    }


def ratio(figures: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """DBOS's median over durably's, and the same repetition by repetition."""
    if "durably" not in figures or "dbos" not in figures:
        return None
    ours, theirs = figures["durably"], figures["dbos"]
    paired = [
        d / u
        for d, u in zip(theirs["repetition_medians_ms"], ours["repetition_medians_ms"], strict=True)
    ]
    return {
        "ratio": theirs["median_ms"] / ours["median_ms"],
        "min": min(paired),
        "max": max(paired),
    }


def measure_roundtrips(
    store: Store, engines: Sequence[str], runner: ProcessRunner | None, args: argparse.Namespace
) -> dict[str, Any]:
    """--repeat repetitions on `store`, each engine in turn (the first alternating)."""
    runs: list[dict[str, Any]] = []
    outputs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in engines}
    floors: list[float] = []
    if runner is not None:
        runner.warm_up(functools.partial(store.fresh, runner.name))
    for repetition in range(1, args.repeat + 1):
        order = list(engines) if repetition % 2 else list(engines)[::-1]
        for engine in order:
            trial = Trial(store, runner if engine == "dbos" else None, WORKLOAD, repetition, runs)
            if engine == "durably":
                output = durably_roundtrip(trial, args.runs)
            else:
                output = dbos_roundtrip(trial, args.runs, args.dbos_queue_poll_ms)
            outputs[engine].append(output)
            shown = number(statistics.median(output["roundtrip_ms"]))
            progress(f"{store.name}: round trip {repetition}/{args.repeat} {engine}: {shown} ms")
        floors.append(floor_ms(store))
    floor = statistics.median(floors)
    figures = {engine: summary(done, floor) for engine, done in outputs.items()}
    return {
        "floor_commit_ms": floors,
        "figures": figures,
        "ratio": ratio(figures),
        "runs": runs,
    }


# -- starts ---------------------------------------------------------------------------------


def starts(store: Store, count: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"starts": count}
    figures["loop_per_s"] = timed_starts(store, count, start_in_a_loop)
    if hasattr(durably.App, "start_many"):
        figures["batches_per_s"] = timed_starts(store, count, start_in_batches)
    figures["threads_per_s"] = timed_starts(store, count, start_from_threads)
    return figures


def timed_starts(store: Store, count: int, how: Callable[[durably.App, int], None]) -> float:
    with fresh_durably_store(store) as url:
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


# -- the table ------------------------------------------------------------------------------


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{number(value)} ms"


def show(store: Store, measured: dict[str, Any], missing: dict[str, str]) -> None:
    floors = measured["floor_commit_ms"]
    floor = statistics.median(floors)
    print(f"\n{store.name}: commit floor {number(floor)} ms [{number(min(floors))}..", end="")
    print(f"{number(max(floors))}] (single-row commits, one at a time)")
    header = (
        "engine",
        "start->result [range]",
        "p95",
        "heard",
        f"beyond {COMMITS_PER_RUN} commits",
    )
    print(f"  {header[0]:8} {header[1]:>26} {header[2]:>10} {header[3]:>10} {header[4]:>18}")
    for engine, figure in measured["figures"].items():
        spread = f"[{number(figure['min_ms'])}..{number(figure['max_ms'])}]"
        print(
            f"  {engine:8} {ms(figure['median_ms']) + ' ' + spread:>26}"
            f" {ms(figure['p95_ms']):>10} {ms(figure['median_heard_ms']):>10}"
            f" {ms(figure['beyond_commits_ms']):>18}"
        )
    for engine, why in missing.items():
        print(f"  {engine:8} {why}")
    if (found := measured["ratio"]) is not None:
        spread = f"[{number(found['min'])}..{number(found['max'])}] by repetition"
        print(f"  ratio    {number(found['ratio'])}x {spread}: DBOS's time over durably's")


def show_starts(store: Store, started: dict[str, Any]) -> None:
    batches = started.get("batches_per_s")
    print(
        f"  starts/s (durably): loop {started['loop_per_s']:,.0f},"
        f" start_many({BATCH}) {'n/a' if batches is None else f'{batches:,.0f}'},"
        f" {THREADS} threads {started['threads_per_s']:,.0f}"
    )


# -- the command ----------------------------------------------------------------------------


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.roundtrip")
    parser.add_argument("--stores", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated")
    parser.add_argument("--runs", type=int, default=150, help="round trips per repetition")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per engine and store")
    parser.add_argument("--starts", type=int, default=1000, help="per measurement; 0: none")
    parser.add_argument("--postgres-url", default=POSTGRES_URL)
    parser.add_argument(
        "--dbos-queue-poll-ms", type=float, help="the DBOS queue's poll (default: the runner's)"
    )
    parser.add_argument("--out", type=Path, default=OUT, help="the results file")
    args = parser.parse_args(argv)
    for option, known in (("stores", ("sqlite", "postgres")), ("engines", ENGINES)):
        chosen = [item.strip() for item in getattr(args, option).split(",") if item.strip()]
        if unknown := sorted(set(chosen) - set(known)):
            parser.error(f"--{option}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        setattr(args, option, chosen)
    if args.runs < 2 or args.repeat < 1:
        parser.error("--runs must be at least 2 and --repeat at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    context, notes = run_context(), [note for note in (busy_note(),) if note]
    runner = ProcessRunner("dbos", fast=False) if "dbos" in args.engines else None
    missing = {} if runner is None or runner.missing is None else {"dbos": runner.missing}
    engines = [engine for engine in args.engines if engine not in missing]
    results: list[dict[str, Any]] = []
    try:
        for name in args.stores:
            if name == "postgres" and (problem := postgres_problem(args.postgres_url)):
                notes.append(f"PostgreSQL skipped: {args.postgres_url} is unreachable ({problem})")
                continue
            store = open_store(name, args.postgres_url, runner_processes=True, fast=False)
            measured = measure_roundtrips(store, engines, None if missing else runner, args)
            result = {"store": name, "durability": store.settings(), **measured}
            if args.starts > 0 and "durably" in engines:
                progress(f"{name}: starts...")
                result["starts"] = starts(store, args.starts)
            show(store, measured, missing)
            if "starts" in result:
                show_starts(store, result["starts"])
            results.append(result)
    except BenchmarkError as failure:
        print(failure.report(), file=sys.stderr)
        return 1
    for note in [*(f"{engine}: {why}" for engine, why in missing.items()), *notes]:
        print(note)
    record = {
        "benchmark": "roundtrip",
        "context": context,
        "load_average_after": load_average(),
        "notes": notes,
        "engines": {"durably": {"version": context["durably"]["version"]}}
        | ({} if runner is None else {"dbos": runner.describe()}),
        "settings": {
            "runs": args.runs,
            "repeat": args.repeat,
            "warm_up": WARM_UP,
            "steps": STEPS,
            "commits_per_run": COMMITS_PER_RUN,
            "dbos_queue_poll_ms": args.dbos_queue_poll_ms,  # None: the runner's default
        },
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    return 0


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
