"""A large store of finished runs, made quickly: `python -m benchmarks.fill --store URL --runs N
[--events-per-run 20] [--days 30] [--batch 10000]`.

The runs are written straight into the store's tables (PostgreSQL: COPY; SQLite: executemany
in big transactions, with the PRAGMAs of a bulk load, restored after), row for row what durably
writes when its workers run them (tests/integration/test_fill.py compares them with runs a
worker ran): runs of five workflows `name(x, steps)`, each step adding one to x, started
evenly over the last `days` (newest ending now), each its `run_started`, `claimed`, its
`step_started`/`step_completed` pairs and its end, seq 1..n, its row's event_count n.
Of every 50 runs 47 completed (as many steps as make --events-per-run events, or one less and
one more by turns where the count cannot be met), two failed (the workflow's code raised after
its steps: `compensating`, `run_failed`) and one was cancelled before a worker took it
(`message_received`, `compensating`, `run_cancelled`, and the audit entry of the cancel). No
other table holds rows of such a run. The schema is made by durably itself (open_store) first.
Fill a store nobody uses meanwhile: the fill writes without fsync (and, on SQLite, without a
journal where it can), so a fill cut short leaves a store to throw away. Payloads are written
as JSON, as a store without DURABLY_KEYS keeps them. PostgreSQL's tables are vacuumed and
analyzed after it, as autovacuum would within minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durably.core.control import Request, cancel_error
from durably.core.event_data import encode_payload, step_started_data
from durably.core.history import ErrorInfo, EventKind
from durably.core.payloads import Compensating, MessageReceived, RunFailed
from durably.core.status import RunStatus
from durably.stores import open_store
from durably.stores.sql.rows import claimed_data

# name(x, steps): each step, of this name, adds one to x
WORKFLOWS = (
    ("checkout", "charge"),
    ("invoice", "bill"),
    ("digest", "send"),
    ("report", "render"),
    ("sync", "copy"),
)
FAILED, CANCELLED = (7, 31), (19,)  # which runs of every 50 (by their place in the fill)
SENDER = "app"  # who cancels (as app.client.cancel records it)
RUN_COLUMNS = (
    "id, workflow, status, input, result, error_class, error_message, created_at, updated_at,"
    " lease_epoch, event_count, version, began_at"
)  # the rest as a new run has them (NULL, inbox 0, priority 0): a finished run keeps them so
EVENT_COLUMNS = "run_id, seq, kind, position, name, attempt, data, at"
AUDIT_COLUMNS = "at, actor, action, via, run_id, workflow, detail"
TABLES = (
    ("durably_runs", RUN_COLUMNS),
    ("durably_events", EVENT_COLUMNS),
    ("durably_audit", AUDIT_COLUMNS),
)
MICROS = 1_000_000
STEP_STARTED, STEP_COMPLETED = str(EventKind.STEP_STARTED), str(EventKind.STEP_COMPLETED)

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a fill writes: `runs` runs of about `events_per_run` events each, created evenly
    over the `days` before `end` (epoch seconds), `batch` runs a transaction."""

    runs: int
    events_per_run: int = 20
    days: float = 30.0
    end: float = field(default_factory=time.time)
    batch: int = 10_000
    seed: int = 1


@dataclass(frozen=True, slots=True)
class Filled:
    runs: int
    events: int
    seconds: float

    def __str__(self) -> str:
        rate = f"{self.runs / self.seconds:,.0f} runs/s, {self.events / self.seconds:,.0f} events/s"
        return f"{self.runs:,} runs, {self.events:,} events in {self.seconds:,.1f} s ({rate})"


@dataclass(slots=True)
class Batch:
    """The rows of a batch of runs: runs, their events, the audit entries of their cancels."""

    runs: list[Row] = field(default_factory=list)
    events: list[Row] = field(default_factory=list)
    audit: list[Row] = field(default_factory=list)

    def tables(self) -> tuple[list[Row], ...]:
        """Its rows in the order of TABLES."""
        return self.runs, self.events, self.audit


def steps_of(plan: Plan, status: str, place: int) -> int:
    """The steps of a run, so that its history has events_per_run events; where the shape
    cannot (a completed run has an odd count, 3 + 2 steps), one less and one more by turns."""
    if status == RunStatus.CANCELLED:
        return 0  # cancelled before a worker took it: 5 events
    fixed = 3 if status == RunStatus.COMPLETED else 4  # a failure: compensating, run_failed
    room = max(0, plan.events_per_run - fixed)
    return room // 2 + (room % 2) * (place // 50 % 2)


def status_of(place: int) -> str:
    at = place % 50
    if at in FAILED:
        return str(RunStatus.FAILED)
    return str(RunStatus.CANCELLED if at in CANCELLED else RunStatus.COMPLETED)


def traceback_of(workflow: str, x: int) -> str:
    """The user's traceback of a workflow that raised ValueError(f"gave up at {x}")."""
    return (
        "Traceback (most recent call last):\n"
        f'  File "/srv/app/workflows.py", line 42, in {workflow}\n'
        '    raise ValueError(f"gave up at {x}")\n'
        f"ValueError: gave up at {x}\n"
    )


def run_id_at(micros: int, random_bits: int) -> str:
    """A UUIDv7 of the creation time, as durably.client.ids.new_run_id makes them."""
    value = (micros // 1000 & (1 << 48) - 1) << 80 | random_bits
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    return f"{value:032x}"


def moment(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / MICROS, UTC)


class Histories:
    """The rows of a plan's runs, a batch at a time, in creation order."""

    def __init__(self, plan: Plan, messages: Iterator[int]) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.messages = messages  # the inbox ids of the cancels, in order
        self.span = int(plan.days * 86_400 * MICROS)
        self.start = int(plan.end * MICROS) - self.span
        host = "fill"
        owners = [f"{host}-{n}:{4000 + n}:{self.rng.getrandbits(24):06x}" for n in range(8)]
        self.claimed = [claimed_data(owner, 1, str(RunStatus.PENDING), None) for owner in owners]
        self.versions = [
            hashlib.sha256(f"fill:{w}".encode()).hexdigest()[:12] for w, _ in WORKFLOWS
        ]

    def batch(self, first: int, count: int) -> Batch:
        made, rng = Batch(), self.rng
        bits = os.urandom(10 * count)
        spacing = self.span / max(1, self.plan.runs)
        for n in range(count):
            place = first + n
            created = self.start + int((place + 0.9 * rng.random()) * spacing)
            run_id = run_id_at(created, int.from_bytes(bits[10 * n : 10 * n + 10], "big"))
            status = status_of(place)
            made.runs.append(self.history(made, run_id, status, place, created))
        return made

    def history(self, made: Batch, run_id: str, status: str, place: int, created: int) -> Row:
        """Append the run's events (and the audit entry of a cancel) to `made`; its row."""
        rng, events = self.rng, list[Row]()
        which = rng.randrange(len(WORKFLOWS))
        (workflow, step), x = WORKFLOWS[which], rng.randrange(1_000)
        steps = steps_of(self.plan, status, place)

        def add(kind: EventKind, data: str | None, at: int) -> None:
            events.append((run_id, len(events) + 1, str(kind), None, None, None, data, at / MICROS))

        add(EventKind.RUN_STARTED, None, created)
        claimed = created + 2_000 + rng.randrange(40_000)  # 2 to 42 ms in the queue
        add(EventKind.CLAIMED, self.claimed[rng.randrange(len(self.claimed))], claimed)
        at, took = claimed + 300, 1_000 + rng.randrange(20_000)  # a step: 1 to 21 ms
        for position in range(steps):
            seq, done = len(events), (at + took) / MICROS
            key, value = f"{run_id}:{position}:{step}", x + position
            data = step_started_data(key, f'{{"args":[{value}],"kwargs":{{}}}}')
            events.append((run_id, seq + 1, STEP_STARTED, position, step, 1, data, at / MICROS))
            events.append(
                (run_id, seq + 2, STEP_COMPLETED, position, step, 1, str(value + 1), done)
            )
            at += took + 150
        error: ErrorInfo | None = None
        if status == RunStatus.COMPLETED:
            add(EventKind.RUN_COMPLETED, None, at)
        elif status == RunStatus.FAILED:
            value = x + steps
            error = ErrorInfo("ValueError", f"gave up at {value}", traceback_of(workflow, value))
            add(EventKind.COMPENSATING, encode_payload(Compensating(error, RunStatus.FAILED)), at)
            at += 80
            add(EventKind.RUN_FAILED, encode_payload(RunFailed(error)), at)
        else:
            sent = created + (claimed - created) // 2
            error = cancel_error(Request(SENDER, None, moment(sent)))
            message = MessageReceived(
                next(self.messages), "cancel", None, None, SENDER, moment(sent)
            )
            made.audit.append((sent / MICROS, SENDER, "cancel", "library", run_id, workflow, None))
            add(EventKind.MESSAGE_RECEIVED, encode_payload(message), at)
            add(
                EventKind.COMPENSATING,
                encode_payload(Compensating(error, RunStatus.CANCELLED)),
                at + 150,
            )
            at += 230
            add(EventKind.RUN_CANCELLED, encode_payload(RunFailed(error)), at)
        made.events += events
        updated = (at + 50) / MICROS
        return (
            run_id,
            workflow,
            status,
            f'{{"args":[{x},{steps}],"kwargs":{{}}}}',
            str(x + steps) if status == RunStatus.COMPLETED else None,
            None if error is None else error.error_class,
            None if error is None else error.message,
            created / MICROS,
            updated,
            1,
            len(events),
            self.versions[which],
            claimed / MICROS,
        )


def cancels(runs: int) -> int:
    """How many of the first `runs` runs a fill cancels."""
    whole, rest = divmod(runs, 50)
    return whole * len(CANCELLED) + sum(at < rest for at in CANCELLED)


def fill(url: str, plan: Plan, progress: Callable[[int, int], object] = lambda *_: None) -> Filled:
    """Write `plan`'s runs into the store at `url` (made or migrated first by durably):
    progress(runs, events) after each batch; what was written, and how long it took."""
    open_store(url).close()
    postgres = url.startswith(("postgres:", "postgresql:"))
    began = time.perf_counter()
    events = (fill_postgres if postgres else fill_sqlite)(url, plan, progress)
    return Filled(plan.runs, events, time.perf_counter() - began)


def batches(plan: Plan, messages: Iterator[int]) -> Iterator[Batch]:
    """The plan's rows, a batch at a time; `messages`: the inbox ids its cancels take."""
    made = Histories(plan, messages)
    for first in range(0, plan.runs, plan.batch):
        yield made.batch(first, min(plan.batch, plan.runs - first))


def sqlite_path(url: str) -> Path:
    """The file of a SQLite store's URL (sqlite:///relative, sqlite:////absolute, a path)."""
    if "://" not in url:
        return Path(url)
    path = urlsplit(url).path
    return Path(path[1:] if path.startswith("/") else path)


# A bulk load's settings, each restored after: no fsync (the fill is redone if it is cut
# short), no journal, a large page cache, temporary b-trees in memory.
BULK_PRAGMAS = {
    "journal_mode": "OFF",
    "synchronous": "OFF",
    "cache_size": "-524288",  # KiB: 512 MiB
    "temp_store": "MEMORY",
}


def fill_sqlite(url: str, plan: Plan, progress: Callable[[int, int], object]) -> int:
    with closing(sqlite3.connect(sqlite_path(url), isolation_level=None)) as db:
        db.execute("PRAGMA busy_timeout = 10000")
        saved = {name: db.execute(f"PRAGMA {name}").fetchone()[0] for name in BULK_PRAGMAS}
        for name, value in BULK_PRAGMAS.items():
            db.execute(f"PRAGMA {name} = {value}")
        try:
            return sqlite_batches(db, plan, progress)
        finally:
            for name, value in saved.items():
                db.execute(f"PRAGMA {name} = {value}")


def sqlite_batches(
    db: sqlite3.Connection, plan: Plan, progress: Callable[[int, int], object]
) -> int:
    db.execute("BEGIN IMMEDIATE")
    found = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'durably_inbox'").fetchone()
    last = found[0] if found else 0
    reserved = last + cancels(plan.runs)
    if found:
        db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'durably_inbox'", [reserved])
    elif reserved:
        db.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('durably_inbox', ?)", [reserved]
        )
    db.execute("COMMIT")
    runs = events = 0
    for made in batches(plan, iter(range(last + 1, reserved + 1))):
        db.execute("BEGIN IMMEDIATE")
        for (table, columns), rows in zip(TABLES, made.tables(), strict=True):
            marks = ", ".join("?" * len(columns.split(",")))
            db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
        db.execute("COMMIT")
        runs, events = runs + len(made.runs), events + len(made.events)
        progress(runs, events)
    return events


def postgres_url(url: str) -> str:
    """The URL for psycopg: without the synchronous_commit option durably reads from it."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "synchronous_commit"]
    return urlunsplit(parts._replace(query=urlencode(query)))


def fill_postgres(url: str, plan: Plan, progress: Callable[[int, int], object]) -> int:
    import psycopg

    with psycopg.connect(postgres_url(url)) as db:
        db.execute("SET synchronous_commit = off")  # the fill's own commits; redone if cut short
        ids = db.execute(  # the cancels' inbox ids, taken as durably's own sends take them
            "SELECT nextval(pg_get_serial_sequence('durably_inbox', 'id'))"
            " FROM generate_series(1, %s)",
            [cancels(plan.runs)],
        ).fetchall()
        db.commit()
        make_partitions(db, plan)
        runs = events = 0
        for made in batches(plan, iter([n for (n,) in ids])):
            # each event with its run's birth: the partition of its history; each run with
            # its run_started data, as a start keeps it in the row (schema 15)
            born = {row[0]: row[7] for row in made.runs}
            started = {row[0]: row[6] for row in made.events if row[1] == 1}
            made.events = [(*row, born[row[0]]) for row in made.events]
            made.runs = [(*row, started[row[0]]) for row in made.runs]
            with db.cursor() as cursor:
                for (table, columns), rows in zip(TABLES, made.tables(), strict=True):
                    if table == "durably_events":
                        columns += ", born"
                    elif table == "durably_runs":
                        columns += ", started"
                    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                        for row in rows:
                            copy.write_row(row)
            db.commit()
            runs, events = runs + len(made.runs), events + len(made.events)
            progress(runs, events)
    with psycopg.connect(postgres_url(url), autocommit=True) as db:
        db.execute("VACUUM ANALYZE durably_runs, durably_events, durably_audit")
        # The pages the fill and its vacuum dirtied (hint bits, the visibility map) written
        # now, not by the checkpointer while figures are timed: beside 10,000,000 runs that
        # write-back took minutes, and claims and steps were 10-20x slower while it lasted.
        db.execute("CHECKPOINT")
    return events


def make_partitions(db: Any, plan: Plan) -> None:
    """The history's partitions of the days the fill's runs are born in, as workers that ran
    those days would have made them ahead (durably.stores.postgres.partitions)."""
    from durably.stores.postgres import partitions

    db.commit()
    db.autocommit = True
    day = partitions.DEFAULT_WIDTH.total_seconds()
    at = plan.end - plan.days * 86_400
    while at <= plan.end + day:
        partitions.make_ahead(db, at, partitions.DEFAULT_WIDTH, told=set())
        at += day * (partitions.AHEAD + 1)
    db.autocommit = False


def store_size(url: str) -> int:
    """Bytes the store takes: SQLite's file with its WAL; PostgreSQL's durably tables, with
    their indexes and TOAST."""
    if not url.startswith(("postgres:", "postgresql:")):
        path = sqlite_path(url)
        wal = path.with_name(path.name + "-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    import psycopg

    with psycopg.connect(postgres_url(url)) as db:
        row = db.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c"
            " WHERE c.relkind = 'r' AND c.relname LIKE 'durably%%'"
            " AND pg_table_is_visible(c.oid)"
        ).fetchone()
    return int(row[0]) if row else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        "python -m benchmarks.fill",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--store", required=True, help="sqlite:///path.db or postgresql://...")
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--events-per-run", type=int, default=20, help="(default: 20; at least 5)")
    parser.add_argument("--days", type=float, default=30.0, help="spread over (default: 30)")
    parser.add_argument("--batch", type=int, default=10_000, help="runs a transaction")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.events_per_run < 5 or args.batch < 1 or args.days <= 0:
        parser.error("--runs and --batch at least 1, --events-per-run at least 5, --days > 0")
    plan = Plan(args.runs, args.events_per_run, args.days, batch=args.batch, seed=args.seed)
    shown = time.monotonic()

    def progress(runs: int, events: int) -> None:
        nonlocal shown
        if time.monotonic() - shown > 10 or runs == plan.runs:
            shown = time.monotonic()
            print(f"  {runs:,}/{plan.runs:,} runs, {events:,} events", file=sys.stderr, flush=True)

    filled = fill(args.store, plan, progress)
    size = store_size(args.store)
    print(f"filled {filled}; the store takes {size / 2**20:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
