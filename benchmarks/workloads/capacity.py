"""What a workflow start, a step and a workflow's end cost, for the capacity model
(docs/explanation/capacity.md). On PostgreSQL: the CPU time of the store database's backends
(/proc: the server must run on this machine), the WAL written (pg_current_wal_lsn before and
after, less other databases' records, which pg_walinspect tells apart) and the transactions
committed (pg_stat_database.xact_commit): the role of $DURABLY_BENCH_POSTGRES must be a
superuser. On both stores: the statements this process sent (at the driver) and its CPU time.

A load runs on a fresh store in two windows, each by an app of its own: its starts (app.start
in a loop), then its runs (app.run_until_idle). A start costs its window over its runs; two
loads' run windows (3 and 20 steps) are fitted as runs x (end + steps x step), "end" being all
a run costs besides its start and its steps (its claim, its last commit): a pair at
concurrency 32, where checkpoints share commits, and a pair at concurrency 1. Then, for the
first pair, the tables' bytes per run and per event, what a VACUUM and deleting the runs
cost, and the connections of one `durably worker` process.
"""

import time
from collections.abc import Callable
from contextlib import closing, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import durably
from benchmarks.plan import Metric, Trial, Values
from benchmarks.runners import statements
from benchmarks.runners.durably_runner import bench_app
from benchmarks.runners.processes import workers
from benchmarks.runners.protocol import BenchmarkError, Load, durable
from benchmarks.stores import POSTGRES_URL, connect, fresh_database
from durably.stores import open_store

Pair = tuple[Load, Load]  # few steps, many steps
Totals = dict[str, float]
BACKGROUND = ("walwriter", "checkpointer", "background writer", "autovacuum worker")
FIGURES = (  # a window's totals, per unit: key, label, unit, scale
    ("server_cpu", "PostgreSQL CPU (the store's backends)", "us", 1e6),
    ("wal", "WAL written", "bytes", 1.0),
    ("commits", "transactions committed", "commits", 1.0),
    ("statements", "statements sent", "statements", 1.0),
    ("worker_cpu", "this process's CPU", "us", 1e6),
)
UPKEEP = (  # the c=32 pair's upkeep, fitted per step and per run besides its steps
    ("vacuum_cpu", "VACUUM (as autovacuum's): PostgreSQL CPU", "us", 1e6),
    ("vacuum_wal", "VACUUM (as autovacuum's): WAL", "bytes", 1.0),
    ("prune_cpu", "deleting it (retention): PostgreSQL CPU", "us", 1e6),
    ("prune_wal", "deleting it (retention): WAL", "bytes", 1.0),
)
TABLES = (  # the history with its partitions, if any (durably.stores.postgres.partitions)
    "pg_total_relation_size('durably_runs'), (SELECT coalesce(sum(pg_total_relation_size(relid)),"
    " 0)::bigint FROM pg_partition_tree('durably_events'))"
)
_counted: list[bool] = []  # statements.count() patches the drivers once a process


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """Each process's time on a CPU, in seconds: /proc/PID/schedstat's, the utime + stime of
    /proc/PID/stat to the nanosecond rather than the clock tick (10 ms)."""
    found = {}
    for pid in pids:
        with suppress(OSError):  # gone
            found[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    return found


@dataclass(frozen=True, slots=True)
class Reading:
    ours: dict[int, float]  # CPU seconds by backend of the store's database
    background: dict[int, float]  # by process of BACKGROUND, which serve every database
    lsn: str
    commits: int  # as the backends last reported them


class Server:
    """The PostgreSQL server of the store at `url`, seen from its maintenance database."""

    def __init__(self, url: str) -> None:
        self.url, self.name = url.split("?")[0], urlsplit(url).path.lstrip("/")
        self.db, self.slot = connect(POSTGRES_URL), self.name.replace("-", "_")
        self.local = Path(f"/proc/{self.one('SELECT pg_backend_pid()')}/schedstat").exists()
        with closing(connect(self.url)) as db:
            db.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

    def one(self, query: str, *args: Any) -> Any:
        return self.db.execute(query, args).fetchone()[0]

    def pids(self, where: str, *args: Any) -> list[int]:
        return [
            pid for (pid,) in self.db.execute(f"SELECT pid FROM pg_stat_activity {where}", args)
        ]

    def hold_wal(self) -> Reading:
        """Keep the WAL from now on until release_wal (a temporary physical replication slot,
        gone with this session at the latest: when other databases write much, a checkpoint
        may remove it before wal() reads it); a reading."""
        self.one("SELECT pg_create_physical_replication_slot(%s, true, true)", self.slot)
        return self.read()

    def release_wal(self) -> None:
        self.one("SELECT pg_drop_replication_slot(%s)", self.slot)

    def read(self) -> Reading:
        ours = cpu_seconds(self.pids("WHERE datname = %s", self.name))
        background = cpu_seconds(self.pids("WHERE backend_type = ANY(%s)", list(BACKGROUND)))
        lsn = self.one("SELECT pg_current_wal_lsn()::text")
        commits = self.one("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", self.name)
        return Reading(ours, background, lsn, int(commits))

    def gone(self) -> None:
        """Until the database's backends have exited, and so reported their last counts (a
        live backend reports to pg_stat_database at most once a second)."""
        deadline = time.monotonic() + 10
        while self.pids("WHERE datname = %s", self.name) and time.monotonic() < deadline:
            time.sleep(0.02)

    def wal(self, began: str, ended: str) -> tuple[float, float]:
        """Bytes of WAL between the two positions: this database's (the share of the records
        whose blocks or transaction are its own), and everyone's."""
        everyone = float(self.one("SELECT pg_wal_lsn_diff(%s, %s)", ended, began))
        if not everyone:
            return 0.0, 0.0
        while self.one("SELECT pg_current_wal_flush_lsn() < %s::pg_lsn", ended):
            time.sleep(0.01)  # pg_walinspect reads only WAL on disk
        with closing(connect(self.url)) as db:
            oid = db.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
            mine = f"%rel %/{oid.fetchone()[0]}/%"
            share = db.execute(_OURS, {"began": began, "ended": ended, "mine": mine}).fetchone()[0]
        return everyone * (1.0 if share is None else float(share)), everyone

    def tables(self, vacuum: bool = False) -> tuple[int, int, int]:
        """Bytes of durably_runs and durably_events with their indexes (after VACUUM FULL:
        their live rows only), and the count of events."""
        with closing(connect(self.url)) as db:
            if vacuum:
                db.execute("VACUUM FULL durably_runs, durably_events")
            runs, events = db.execute(f"SELECT {TABLES}").fetchone()
            return runs, events, db.execute("SELECT count(*) FROM durably_events").fetchone()[0]

    def close(self) -> None:
        self.db.close()


_OURS = """WITH r AS (SELECT xid, record_length, block_ref
                   FROM pg_get_wal_records_info(%(began)s, %(ended)s)),
            x AS (SELECT DISTINCT xid FROM r WHERE xid <> 0 AND block_ref LIKE %(mine)s)
SELECT sum(record_length) FILTER (WHERE block_ref LIKE %(mine)s OR xid IN (SELECT xid FROM x))
       / nullif(sum(record_length), 0)::float FROM r"""


def spent(was: dict[int, float], now: dict[int, float]) -> float:
    """CPU seconds between two readings (a process not in the first: all of its time)."""
    return sum(seconds - was.get(pid, 0.0) for pid, seconds in now.items())


def window(url: str, server: Server | None, work: Callable[[durably.App], object]) -> Totals:
    """Totals of work(app), by a new app on `url` (its store opened before, closed after)."""
    app = bench_app(url)
    app.store  # noqa: B018 (opening is the point)
    time.sleep(1.1 if server else 0)  # then a read, after which its backend reports the open
    app.client.runs(limit=1)
    before = server.hold_wal() if server else None
    said, cpu, wall = statements.so_far(), time.process_time(), time.perf_counter()
    work(app)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    totals = {"worker_cpu": cpu, "statements": statements.so_far() - said, "wall": wall}
    after = server.read() if server else None
    app.close()
    if server and before and after:
        server.gone()
        totals["commits"] = server.read().commits - before.commits
        totals["wal"], totals["wal_everyone"] = server.wal(before.lsn, after.lsn)
        server.release_wal()
        if server.local:
            totals["server_cpu"] = spent(before.ours, after.ours)
            totals["background_cpu"] = spent(before.background, after.background)
    return totals


def cost(server: Server, work: Callable[[], object]) -> tuple[float, float]:
    """The CPU seconds of the database's backends (open throughout) and its WAL, for work()."""
    before = server.hold_wal()
    work()
    after = server.read()
    wal = server.wal(before.lsn, after.lsn)[0]
    server.release_wal()
    return spent(before.ours, after.ours) if server.local else float("nan"), wal


def one_load(url: str, load: Load, upkept: bool) -> tuple[Totals, Totals, Totals]:
    """The totals of the load's starts and of its runs; its upkeep's, if `upkept`."""
    server, ran = Server(url) if url.startswith("postgresql") else None, list[int]()
    try:
        made = bench_app(url)
        made.store  # noqa: B018 (the schema made, outside the windows)
        made.close()
        empty = server.tables() if server else (0, 0, 0)

        def start(app: durably.App) -> None:
            for i in range(load.workflows):
                app.start("chain", i, load.steps)

        starts = window(url, server, start)
        runs = window(
            url, server, lambda app: ran.append(app.run_until_idle(concurrency=load.concurrency))
        )
        app = bench_app(url)
        done = app.client.runs(status=durably.RunStatus.COMPLETED, limit=load.workflows + 1).runs
        app.close()
        if ran != [load.workflows] or len(done) != load.workflows:
            raise BenchmarkError(f"{load}: {ran} runs ended, {len(done)} of them completed")
        return starts, runs, upkeep(url, server, empty) if server and upkept else {}
    finally:
        if server:
            server.close()


def upkeep(url: str, server: Server, empty: tuple[int, int, int]) -> Totals:
    """The tables' growth past `empty`, as left and after VACUUM FULL; the CPU and WAL of a
    VACUUM before that (as autovacuum's), and after it of deleting every run as retention
    does (500 a transaction)."""
    runs, events, count = server.tables()
    found: Totals = {"runs": runs - empty[0], "events": events - empty[1], "count": count}
    with closing(connect(server.url)) as db:
        vacuum = cost(server, lambda: db.execute("VACUUM durably_runs, durably_events"))
    packed, store = server.tables(vacuum=True), open_store(url)
    found |= {"packed_runs": packed[0] - empty[0], "packed_events": packed[1] - empty[1]}
    cutoff = datetime.now(UTC) + timedelta(minutes=1)
    prune = cost(server, lambda: all(iter(lambda: store.prune(cutoff, limit=500), 0)))
    store.close()
    return found | dict(zip([key for key, *_ in UPKEEP], (*vacuum, *prune), strict=True))


def connections(url: str, load: Load) -> tuple[int, int]:
    """The most connections one `durably worker` process (--concurrency as the load's) held
    while it ran the load, and how many of them LISTENed (named `<channel> pid <pid>`)."""
    app = bench_app(url)
    app.start_many([durably.Start("chain", (i, load.steps)) for i in range(load.workflows)])
    app.close()
    seen = (  # the connections left when the app closed are the worker's
        "SELECT count(*), count(*) FILTER (WHERE application_name LIKE '%% pid %%')"
        " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    left, most = "SELECT count(*) FROM durably_runs WHERE status IN ('pending', 'running')", (0, 0)
    with (
        closing(connect(url.split("?")[0])) as db,
        workers(url, 1, "--concurrency", str(load.concurrency)),
    ):
        deadline = time.monotonic() + 300
        while db.execute(left).fetchone()[0] and time.monotonic() < deadline:
            held, listening = db.execute(seen).fetchone()
            most = (max(most[0], held), max(most[1], listening))
            time.sleep(0.01)
    return most


def fit(pair: Pair, few: float, many: float) -> tuple[float, float]:
    """Per step, and per run besides its steps, from the two loads' totals."""
    a, b = few / pair[0].workflows, many / pair[1].workflows
    step = (b - a) / (pair[1].steps - pair[0].steps)
    return step, a - pair[0].steps * step


def measure(trial: Trial, pairs: tuple[Pair, Pair]) -> Values:
    """Of each FIGURE: per start, and per step and per end at each pair's concurrency; on
    PostgreSQL, the UPKEEP's; the shares of PostgreSQL's background CPU and of other databases'
    WAL; each load's steps/s (wall clock); bytes per run and per event; a worker's connections."""
    if not _counted:
        statements.count()
        _counted.append(True)
    postgres, values = trial.store.name == "postgres", Values()
    measured: list[tuple[Load, Totals, Totals, Totals]] = []  # load, starts, runs, upkeep
    for load in [load for pair in pairs for load in pair]:
        with fresh_database("durably_cap") if postgres else trial.fresh() as url:
            upkept = postgres and load.concurrency > 1
            measured.append((load, *one_load(durable(url) if postgres else url, load, upkept)))
    windows = [totals for _, starts, runs, _ in measured for totals in (starts, runs)]
    for key, label, unit, scale in FIGURES:
        if key not in windows[0]:
            continue  # a server's figure, on SQLite
        started = sum(m[1][key] for m in measured) / sum(m[0].workflows for m in measured)
        values[Metric(f"{key}_per_start", f"{label} per start", unit)] = scale * started
        for pair, (few, many) in zip(pairs, [measured[:2], measured[2:]], strict=True):
            step, end = fit(pair, scale * few[2][key], scale * many[2][key])
            c = pair[0].concurrency
            values[Metric(f"{key}_per_step_c{c}", f"{label} per step, c={c}", unit)] = step
            values[Metric(f"{key}_per_end_c{c}", f"{label} per end, c={c}", unit)] = end
    for key, label, unit, scale in UPKEEP if postgres else ():
        step, run = fit(pairs[0], *(scale * m[3][key] for m in measured[:2]))
        values[Metric(f"{key}_per_step", f"{label} per step", unit)] = step
        values[Metric(f"{key}_per_run", f"{label} per run besides its steps", unit)] = run
    if postgres:
        cpu = [sum(w.get(key, 0.0) for w in windows) for key in ("background_cpu", "server_cpu")]
        label = "WAL writer, checkpointer, bgwriter CPU over the backends' (all databases')"
        values[Metric("background_cpu", label, "%")] = 100 * cpu[0] / cpu[1] if cpu[1] else None
        wal = [sum(w[key] for w in windows) for key in ("wal", "wal_everyone")]
        label = "WAL of other databases in the windows (left out above)"
        values[Metric("others_wal", label, "%")] = 100 * (1 - wal[0] / wal[1])
    for load, _, runs, grown in measured:
        label = f"{load}, c={load.concurrency}: app.run_until_idle"
        rate = Metric(f"w{load.steps}_c{load.concurrency}_steps_per_s", label, "steps/s", True)
        values[rate] = load.workflows * load.steps / runs["wall"]
        for table, per, count in [("runs", "run", load.workflows), ("events", "event", 0.0)]:
            for prefix, after in [("", "as left"), ("packed_", "after VACUUM FULL")]:
                if prefix + table in grown:
                    label = f"durably_{table} + indexes per {per}, {load}, {after}"
                    metric = Metric(f"{prefix}{table}_bytes_{load.steps}", label, "bytes")
                    values[metric] = grown[prefix + table] / (count or grown["count"])
    if postgres:
        with fresh_database("durably_cap") as url:
            held, listening = connections(durable(url), pairs[0][1])
        label = f"one `durably worker` running {pairs[0][1]}, c=32: connections"
        values[Metric("worker_connections", label, "connections")] = held
        values[Metric("worker_listen_connections", "... of them LISTEN", "connections")] = listening
    return values
