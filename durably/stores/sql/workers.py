"""Workers and the versions they serve, the same SQL for both stores: the condition a claim
adds for pinned runs, the count of due runs no worker here serves, and the list of workers
(durably_workers), each beating every third of its lease."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from durably.stores.records import Serves, WorkerBeat
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import from_ts, ts
from durably.stores.sql.schema import CLAIM_RANK

__all__ = ["SEPARATOR", "beat", "forget", "keys", "listed", "served", "unserved"]

SEPARATOR = "\n"  # between a workflow's name and a version, in the keys a claim matches
_FORGOTTEN_AFTER = timedelta(days=1)  # a worker silent this long is dropped from the list


def served(dialect: Dialect, workflows: Serves) -> tuple[str, list[object]]:
    """The condition that a run's workflow is one of these and its version one they serve
    (or none recorded), with its parameters. A plain collection of names serves any version."""
    which, params = dialect.one_of("workflow", list(workflows))
    pairs = keys(workflows)
    if pairs is None:
        return which, params
    pinned, more = dialect.one_of(f"workflow || {dialect.mark} || version", pairs)
    return f"{which} AND (version IS NULL OR {pinned})", [*params, SEPARATOR, *more]


def keys(workflows: Serves) -> list[str] | None:
    """ "name<SEPARATOR>version" for each version served; None when any version is."""
    if not isinstance(workflows, Mapping):
        return None
    return [f"{name}{SEPARATOR}{v}" for name, versions in workflows.items() for v in versions]


def unserved(
    db: Connection, dialect: Dialect, serves: Mapping[str, Collection[str]], *, now: datetime
) -> dict[tuple[str, str], int]:
    """Due runs of these workflows pinned to versions they do not serve, by (name, version)."""
    which, params = dialect.one_of("workflow", list(serves))
    pinned, more = dialect.one_of(f"workflow || {dialect.mark} || version", keys(serves) or [])
    at, mark = ts(now), dialect.mark
    rows = db.execute(
        "SELECT workflow, version, count(*) FROM durably_runs"
        f" WHERE {CLAIM_RANK} <= {mark} AND available_at <= {mark} AND {which}"
        f" AND version IS NOT NULL AND NOT ({pinned}) GROUP BY workflow, version",
        [at, at, *params, SEPARATOR, *more],
    ).fetchall()
    return {(name, version): count for name, version, count in rows}


def beat(db: Connection, dialect: Dialect, worker: WorkerBeat) -> None:
    mark = dialect.mark
    serves = json.dumps({name: list(versions) for name, versions in worker.serves.items()})
    queues = None if worker.queues is None else json.dumps(list(worker.queues))
    db.execute(
        "INSERT INTO durably_workers (name, started_at, seen_at, beat_seconds, serves, queues)"
        f" VALUES ({mark}, {mark}, {mark}, {mark}, {mark}, {mark}) ON CONFLICT (name) DO UPDATE"
        " SET seen_at = excluded.seen_at, beat_seconds = excluded.beat_seconds,"
        " serves = excluded.serves, started_at = excluded.started_at, queues = excluded.queues",
        (
            worker.name,
            ts(worker.started_at),
            ts(worker.seen_at),
            worker.every.total_seconds(),
            serves,
            queues,
        ),
    )
    db.execute(
        f"DELETE FROM durably_workers WHERE seen_at < {mark}",
        (ts(worker.seen_at - _FORGOTTEN_AFTER),),
    )


def forget(db: Connection, dialect: Dialect, name: str) -> None:
    db.execute(f"DELETE FROM durably_workers WHERE name = {dialect.mark}", (name,))


def listed(db: Connection) -> list[WorkerBeat]:
    rows = db.execute(
        "SELECT name, started_at, seen_at, beat_seconds, serves, queues FROM durably_workers"
        " ORDER BY name"
    ).fetchall()
    return [
        WorkerBeat(
            name,
            from_ts(started),
            from_ts(seen),
            timedelta(seconds=every),
            {workflow: tuple(v) for workflow, v in json.loads(serves).items()},
            None if queues is None else tuple(json.loads(queues)),
        )
        for name, started, seen, every, serves, queues in rows
    ]
