"""Big stores for benchmarks.scaling: copies of a run durably made, bulk-inserted under fresh
ids at earlier times (SQLite: one transaction, then a WAL checkpoint; PostgreSQL: COPY, then
VACUUM ANALYZE), each fill counted and sampled back through the store's own reads.
"""

from __future__ import annotations

import sqlite3
import sys
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import durably
from benchmarks.runners.inprocess import chain_app, check_completed
from benchmarks.runners.protocol import BenchmarkError, Load
from benchmarks.stores import Store as BenchStore
from durably.stores import Store
from durably.stores.sql.rows import EVENT_COLUMNS, RUN_COLUMNS, event_of, run_of
from durably.stores.sqlite.store import SQLiteStore

__all__ = ["check_replay", "fill"]

RUN_FIELDS = RUN_COLUMNS.split(", ")
EVENT_FIELDS = ["run_id", *EVENT_COLUMNS.split(", ")]  # the INSERT order of rows.event_row
COPY_SPACING = 0.01  # seconds between the copies' times, all before the run they copy

Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Template:
    """A run durably wrote, as raw rows: durably_runs in RUN_FIELDS order and its
    durably_events in EVENT_FIELDS order."""

    run: Row
    events: tuple[Row, ...]

    @property
    def id(self) -> str:
        return str(self.run[RUN_FIELDS.index("id")])

    def copy_run(self, run_id: str, earlier: float) -> Row:
        """The run's row under another id, `earlier` seconds before."""
        row = list(self.run)
        row[RUN_FIELDS.index("id")] = run_id
        for name in ("created_at", "updated_at", "available_at"):
            i = RUN_FIELDS.index(name)
            row[i] = None if row[i] is None else row[i] - earlier
        return tuple(row)

    def copy_events(self, run_id: str, earlier: float) -> Iterator[Row]:
        """Its events under another id (idempotency keys hold the run id), `earlier` seconds
        before."""
        at, data = EVENT_FIELDS.index("at"), EVENT_FIELDS.index("data")
        for event in self.events:
            row = list(event)
            row[EVENT_FIELDS.index("run_id")] = run_id
            row[at] -= earlier
            row[data] = None if row[data] is None else row[data].replace(self.id, run_id)
            yield tuple(row)

    def released(self) -> Template:
        """The run as a stopping worker leaves it after the last step: `released` instead of
        `run_completed`, pending and due again, no result."""
        *kept, last = self.events
        kind, at = EVENT_FIELDS.index("kind"), EVENT_FIELDS.index("at")
        if last[kind] != durably.EventKind.RUN_COMPLETED:
            raise BenchmarkError(f"the template run ends with {last[kind]}, not run_completed")
        event = list(last)
        event[kind], event[EVENT_FIELDS.index("data")] = str(durably.EventKind.RELEASED), None
        run = dict(zip(RUN_FIELDS, self.run, strict=True))
        run.update(
            status=str(durably.RunStatus.PENDING),
            result=None,
            available_at=last[at],
            lease_owner=None,
        )
        return Template(tuple(run.values()), (*kept, tuple(event)))


class Loader:
    """Raw access to a store's tables, for templates and bulk copies."""

    mark = "?"  # the driver's parameter placeholder

    def __init__(self, db: Any) -> None:
        self._db = db

    def template(self, run_id: str) -> Template:
        run = self._db.execute(
            f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = {self.mark}", (run_id,)
        ).fetchone()
        events = self._db.execute(
            f"SELECT {', '.join(EVENT_FIELDS)} FROM durably_events WHERE run_id = {self.mark}"
            " ORDER BY seq",
            (run_id,),
        ).fetchall()
        if run is None:
            raise BenchmarkError(f"no run {run_id} to copy")
        return Template(tuple(run), tuple(tuple(event) for event in events))

    def load(self, runs: Iterable[Row], events: Iterable[Row]) -> None:
        raise NotImplementedError

    def count(self, table: str) -> int:
        return int(self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def close(self) -> None:
        self._db.close()


class SQLiteLoader(Loader):
    def __init__(self, path: str) -> None:
        super().__init__(sqlite3.connect(path, isolation_level=None, timeout=30))

    def load(self, runs: Iterable[Row], events: Iterable[Row]) -> None:
        """One transaction, then a WAL checkpoint so the timing starts from a settled file."""
        self._db.execute("BEGIN IMMEDIATE")
        self._db.executemany(_insert("durably_runs", RUN_FIELDS), runs)
        self._db.executemany(_insert("durably_events", EVENT_FIELDS), events)
        self._db.execute("COMMIT")
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


class PostgresLoader(Loader):
    mark = "%s"

    def __init__(self, url: str) -> None:
        import psycopg

        super().__init__(psycopg.connect(url, autocommit=True))

    def load(self, runs: Iterable[Row], events: Iterable[Row]) -> None:
        """COPY in one transaction, then VACUUM ANALYZE, as autovacuum would do by and by."""
        with self._db.transaction(), self._db.cursor() as cursor:
            for table, fields, rows in (
                ("durably_runs", RUN_FIELDS, runs),
                ("durably_events", EVENT_FIELDS, events),
            ):
                with cursor.copy(f"COPY {table} ({', '.join(fields)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
        self._db.execute("VACUUM (ANALYZE) durably_runs, durably_events")


def _insert(table: str, fields: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})"


@contextmanager
def loader_for(app: durably.App, url: str) -> Iterator[Loader]:
    store = app.store
    loader: Loader
    loader = SQLiteLoader(store.path) if isinstance(store, SQLiteStore) else PostgresLoader(url)
    try:
        yield loader
    finally:
        loader.close()


def finished_template(app: durably.App, chain: durably.Workflow, loader: Loader) -> Template:
    """A run of 3 steps, run to its end by durably in this store."""
    handle = app.start(chain, 0)  # check_completed wants run i to start with i
    check_completed(app, [handle], Load(1, 3), app.run_until_idle(concurrency=1))
    return loader.template(handle.id)


def pending_template(url: str, loader: Loader) -> Template:
    """A pending run of `elsewhere`, started by durably in this store."""
    other = durably.App(url)

    @other.workflow(name="elsewhere")
    async def elsewhere(x: int) -> int:
        return x

    try:
        return loader.template(other.start(elsewhere, 7).id)
    finally:
        other.close()


def fill(
    app: durably.App, chain: durably.Workflow, url: str, *, finished: int, pending: int
) -> None:
    """Give the store `finished` finished runs of `chain` (3 steps) and `pending` pending runs
    of a workflow `app` does not know: one of each made by durably, the rest copies of it."""
    copies: list[tuple[Template, list[str]]] = []
    with loader_for(app, url) as loader:
        if finished:
            copies.append((finished_template(app, chain, loader), _ids(finished - 1)))
        if pending:
            copies.append((pending_template(url, loader), _ids(pending - 1)))
        loader.load(
            (t.copy_run(run_id, earlier) for t, ids in copies for run_id, earlier in _spaced(ids)),
            (
                row
                for t, ids in copies
                for run_id, earlier in _spaced(ids)
                for row in t.copy_events(run_id, earlier)
            ),
        )
        runs, events = loader.count("durably_runs"), loader.count("durably_events")
    want = (
        sum(len(ids) + 1 for _, ids in copies),
        sum(len(t.events) * (len(ids) + 1) for t, ids in copies),
    )
    if (runs, events) != want:
        raise BenchmarkError(f"the filled store holds {runs} runs and {events} events")
    for template, ids in copies:  # the oldest copy, the newest, and some between
        for run_id, earlier in list(_spaced(ids))[:: max(1, (len(ids) - 1) // 3)]:
            check_copy(app.store, template, run_id, earlier)


def _ids(count: int) -> list[str]:
    return [uuid.uuid4().hex for _ in range(count)]


def _spaced(ids: Sequence[str]) -> Iterator[tuple[str, float]]:
    """Each id with how much earlier than the template its copy is; the first is the oldest."""
    for n, run_id in enumerate(ids):
        yield run_id, COPY_SPACING * (len(ids) - n)


def check_copy(store: Store, template: Template, run_id: str, earlier: float) -> None:
    """The store reads the copy back as the run it copies, with its id and times."""
    want_run = run_of(template.copy_run(run_id, earlier))
    want_events = [event_of(row[1:]) for row in template.copy_events(run_id, earlier)]
    if store.get_run(run_id) != want_run or store.history(run_id) != want_events:
        raise BenchmarkError(f"the copy {run_id} reads back unlike the run it copies")


def check_replay(store: BenchStore) -> None:
    """Copies of a run stopped after its third step: a worker finishes each with the result
    of the run copied, running no step again (one claim and the end are all it adds)."""
    with store.fresh("durably") as url:
        app, chain = chain_app(url, 3)
        try:
            with loader_for(app, url) as loader:
                template = finished_template(app, chain, loader)
                stopped, ids = template.released(), _ids(3)
                loader.load(
                    [stopped.copy_run(i, earlier) for i, earlier in _spaced(ids)],
                    [row for i, earlier in _spaced(ids) for row in stopped.copy_events(i, earlier)],
                )
            for run_id, earlier in _spaced(ids):
                check_copy(app.store, stopped, run_id, earlier)
            if (finished := app.run_until_idle(concurrency=1)) != len(ids):
                raise BenchmarkError(f"the worker finished {finished} of {len(ids)} copies")
            result = app.get_run(template.id).result
            for run_id in ids:
                added = [e.kind for e in app.history(run_id)][len(stopped.events) :]
                if app.get_run(run_id).result != result or added != ["claimed", "run_completed"]:
                    raise BenchmarkError(f"the copy {run_id} replayed into {added}")
        finally:
            app.close()
    print(
        f"  {store.label}: copied runs read back and replay as durably wrote them", file=sys.stderr
    )
