"""The read queries, one implementation for both stores.

SQLite and PostgreSQL differ here only in how a parameter is written (`?`, `%s`) and how a
list of values is passed (one parameter each, or one array): a `Dialect` says which. Each
function runs on a connection the store hands it, inside the store's own transaction and
retry handling.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from durably.core.approvals import AWAITING_APPROVAL_ERROR, ESCALATION
from durably.core.history import Event, error_class_name
from durably.core.queues import DEFAULT_QUEUE
from durably.core.status import FINAL, PARKED, RunStatus
from durably.errors import StepFailed
from durably.stores.records import Happened, RunRecord
from durably.stores.sql.rows import EVENT_COLUMNS, RUN_COLUMNS, event_of, run_of, ts
from durably.stores.sql.schema import BIRTH, CLAIM_RANK

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "born_as",
    "born_histories",
    "conditions",
    "get_run",
    "histories",
    "runs",
    "states",
    "unclaimable",
]


class Connection(Protocol):
    """What the reads need of a connection: sqlite3's and psycopg's both have it."""

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    mark: str  # how a parameter is written
    arrays: bool  # whether a list of values is one array parameter (PostgreSQL)
    whole: str  # the whole part of a positive number, `{}` for it (SQLite may lack floor())
    row_lock: str = ""  # after a SELECT: hold its rows until the transaction ends (PostgreSQL)
    # the history is partitioned by the birth of its run (PostgreSQL: schema.BIRTH): a read
    # of a run's events says its birth too, so that it reads that partition alone
    partitioned: bool = False

    def one_of(self, column: str, values: Sequence[object]) -> tuple[str, list[object]]:
        """`column` is one of `values` (none: false), with its parameters."""
        if self.arrays:
            return f"{column} = ANY({self.mark})", [list(values)]
        return f"{column} IN ({', '.join(self.mark * len(values))})", list(values)


SQLITE = Dialect("?", arrays=False, whole="CAST({} AS INTEGER)")  # `IN ()` matches nothing
POSTGRES = Dialect("%s", arrays=True, whole="floor({})", row_lock=" FOR UPDATE", partitioned=True)


def born_as(dialect: Dialect, events: str, runs: str) -> str:
    """On PostgreSQL, " AND" the condition that the events `events` (a table's alias) have
    the birth of their run `runs` (an alias of durably_runs); on SQLite, nothing."""
    if not dialect.partitioned:
        return ""
    return f" AND {events}.born = coalesce({runs}.born, {runs}.created_at)"


def get_run(db: Connection, dialect: Dialect, run_id: str) -> RunRecord | None:
    row = db.execute(
        f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE id = {dialect.mark}", (run_id,)
    ).fetchone()
    return None if row is None else run_of(row)


def histories(db: Connection, dialect: Dialect, run_ids: Sequence[str]) -> dict[str, list[Event]]:
    """The events of each of these runs, in order (a run without events is left out)."""
    found: dict[str, list[Event]] = {}
    if not run_ids:
        return found
    if dialect.partitioned:
        rows = db.execute(f"SELECT id, {BIRTH} FROM durably_runs WHERE id = ANY(%s)", [run_ids])
        return born_histories(db, dict(rows.fetchall()))
    which, params = dialect.one_of("run_id", run_ids)
    rows = db.execute(
        f"SELECT run_id, {EVENT_COLUMNS} FROM durably_events WHERE {which} ORDER BY run_id, seq",
        params,
    )
    for run_id, *event in rows:
        found.setdefault(run_id, []).append(event_of(event))
    return found


def born_histories(db: Connection, births: Mapping[str, float]) -> dict[str, list[Event]]:
    """PostgreSQL: the events of these runs (id: birth, schema.BIRTH), in order. The births
    are values the statement is planned with (a custom plan: PostgreSQL keeps to those while
    a generic one would read every partition), so it reads only their partitions of the
    history."""
    found: dict[str, list[Event]] = {}
    rows = db.execute(
        f"SELECT run_id, born, {EVENT_COLUMNS} FROM durably_events"
        " WHERE run_id = ANY(%s) AND born = ANY(%s) ORDER BY run_id, seq",
        [list(births), sorted(set(births.values()))],
    )
    for run_id, born, *event in rows:
        if born == births[run_id]:  # not a row of an earlier run of its id, of another birth
            found.setdefault(run_id, []).append(event_of(event))
    return found


def runs(
    db: Connection,
    dialect: Dialect,
    *,
    status: RunStatus | None,
    workflow: str | None,
    limit: int,
    after: tuple[datetime, str] | None,
    **filters: Any,
) -> list[RunRecord]:
    """Most recently updated first, ties by id (descending); only those after `after`, and
    those `filters` (the keywords of `conditions`) match."""
    mark = dialect.mark
    where, params = conditions(dialect, status=status, workflow=workflow, **filters)
    since = filters.get("since")  # a bound on the index's time as well (see _SKEW)
    floor = None if since is None else ts(since - _SKEW)
    given = {name for name, value in filters.items() if value}  # an empty one: no condition
    if status is None and given <= _BY_STATUS and limit > 0:
        return _newest(db, dialect, where, params, floor=floor, limit=limit, after=after)
    if floor is not None:
        where.append(f"updated_at >= {mark}")
        params.append(floor)
    if after is not None:
        where.append(_AFTER.format(mark=mark))
        at = ts(after[0])
        params += [at, at, after[1]]
    rows = db.execute(
        f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE {' AND '.join(where)}"
        + _NEWEST.format(mark=mark),
        [*params, limit],
    ).fetchall()
    return [run_of(row) for row in rows]


# The filters whose pages are read status by status (_newest), each through an index that
# holds each status's matching runs in time order, or a range of one: the workflow's and the
# named queue's (workflow or queue, status, updated_at), and `since` a range of the status
# index's (status, updated_at) (the default queue's runs are most runs: they are found there
# too, the others passed over). Any other filter goes to one query that the database plans:
# a key through its own index in time order, a correlation id or an attribute through theirs.
_BY_STATUS = frozenset({"workflow", "queue", "since"})

# A run's last change comes after its start, on one clock; a worker whose clock is behind its
# starter's may write a run's updated_at before its created_at. `since` bounds updated_at too
# (so that its page is a range of an index, not every run), less this much: a run is missed
# only if its worker's clock was this far behind its starter's, which breaks leases first.
_SKEW = timedelta(hours=1)

# A keyset, not an OFFSET: `updated_at <= t` is the index's range, the rest breaks ties on
# updated_at (every run of one batch commit shares it) by id.
_AFTER = "updated_at <= {mark} AND (updated_at < {mark} OR id < {mark})"
_NEWEST = " ORDER BY updated_at DESC, id DESC LIMIT {mark}"


def _newest(
    db: Connection,
    dialect: Dialect,
    where: list[str],
    params: list[object],
    *,
    floor: float | None,
    limit: int,
    after: tuple[datetime, str] | None,
) -> list[RunRecord]:
    """The page of the runs `where` matches (every run, or those of _BY_STATUS's filters),
    newest first, read status by status however many runs the store holds. No index orders
    the whole table by time: the one query over it read and sorted every run for a page (the
    first page of `durably runs list` took 120 ms on SQLite, 76 ms on PostgreSQL, beside
    100,000 ended runs; `--workflow` 65 ms; benchmarks `large`). Each status's runs are in
    time order in an index, though. The `limit`-th newest matching run of each status (read
    from the end of its index entries alone) bound the page from below by the latest of
    them, since that status alone fills the page from there on; the page is then the runs
    from that bound up, of the statuses that have any (their newest is read too). `floor`:
    no run of the page is older (one bound, the higher, for the planner to range over)."""
    mark, statuses = dialect.mark, [str(status) for status in RunStatus]
    at = None if after is None else ts(after[0])
    probed, probing = where, params  # and above the floor
    if floor is not None:
        probed, probing = [*where, f"updated_at >= {mark}"], [*params, floor]
    matching = "".join(f" AND {condition}" for condition in probed)
    before = "" if at is None else f" AND r.updated_at < {mark}"  # a bound for what is after
    newest = f" FROM durably_runs AS r WHERE r.status = s.column1{matching}"
    probe = (  # each subquery planned once, run for each status
        f"SELECT s.column1, (SELECT r.updated_at{newest}{before}"
        f" ORDER BY r.updated_at DESC LIMIT 1 OFFSET {mark}),"
        f" (SELECT r.updated_at{newest} ORDER BY r.updated_at DESC LIMIT 1)"
        f" FROM (VALUES {', '.join([f'({mark})'] * len(statuses))}) AS s"
    )
    first = [*probing, *([] if at is None else [at]), limit - 1]
    found = db.execute(probe, [*first, *probing, *statuses]).fetchall()
    bound = max((nth for _, nth, _ in found if nth is not None), default=floor)
    some = [
        s for s, _, newest in found if newest is not None and (bound is None or newest >= bound)
    ]
    if not some:  # no run matches
        return []
    which, more = dialect.one_of("status", some)
    where, params = [which, *where], [*more, *params]
    if after is not None:
        where.append(_AFTER.format(mark=mark))
        params += [at, at, after[1]]
    if bound is not None:
        where.append(f"updated_at >= {mark}")
        params.append(bound)
    rows = db.execute(
        f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE {' AND '.join(where)}"
        + _NEWEST.format(mark=mark),
        [*params, limit],
    ).fetchall()
    return [run_of(row) for row in rows]


def conditions(
    dialect: Dialect,
    *,
    status: RunStatus | None = None,
    workflow: str | None = None,
    patch: str | None = None,
    correlation_id: str | None = None,
    happened: Collection[Happened] = (),
    slower_than: timedelta | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    key: str | None = None,
    queue: str | None = None,
    attributes: Mapping[str, str] | None = None,
) -> tuple[list[str], list[object]]:
    """The conditions on durably_runs of Store.runs's filters, and their parameters: what
    lists runs a page at a time, and what selects a bulk job's runs.

    Only the filters given are written into the query, so the planner sees `status = ?`
    and can walk the (status, updated_at) index instead of testing every row."""
    mark = dialect.mark
    where: list[str] = []
    params: list[object] = []
    if status is not None:
        where.append(f"status = {mark}")
        params.append(str(status))
    if workflow is not None:
        where.append(f"workflow = {mark}")
        params.append(workflow)
    if correlation_id is not None:
        where.append(f"correlation_id = {mark}")
        params.append(correlation_id)
    if key is not None:
        where.append(f"queue_key = {mark}")
        params.append(key)
    if queue == DEFAULT_QUEUE:
        where.append("queue IS NULL")
    elif queue is not None:
        where.append(f"queue = {mark}")
        params.append(queue)
    for name, value in (attributes or {}).items():
        where.append(_HAS_ATTRIBUTE.format(mark=mark))
        params += [name, value]
    if patch is not None:
        ended, more = dialect.one_of("status", sorted(FINAL))
        where.append(f"NOT ({ended}) AND {_OLD_SIDE.format(mark=mark)}")
        params += [*more, patch, patch]
    for what in sorted(set(happened)):
        condition, more = _HAPPENED[Happened(what)]
        where.append(
            "EXISTS (SELECT 1 FROM durably_events AS e WHERE e.run_id = durably_runs.id"
            f"{born_as(dialect, 'e', 'durably_runs')} AND {condition.format(mark=mark)})"
        )
        params += more
    if slower_than is not None:
        where.append(f"updated_at - created_at > {mark}")
        params.append(slower_than.total_seconds())
    if since is not None:
        where.append(f"created_at >= {mark}")
        params.append(ts(since))
    if until is not None:
        where.append(f"created_at < {mark}")
        params.append(ts(until))
    return where, params


def parked(
    db: Connection,
    dialect: Dialect,
    *,
    decisions: bool,
    limit: int,
    after: tuple[datetime, str] | None,
) -> list[RunRecord]:
    """Parked runs, `limit` at most, found by their rows alone (through the index of status
    and time): with `decisions`, those that wait for a person's decision (an approval, an
    escalation), oldest first; else every other parked run (the dead letters; escalations
    too), newest first. `after`: the (updated_at, id) of the last of the previous page."""
    mark = dialect.mark
    if decisions:
        where = (
            f"status = 'needs_attention' AND (error_class = {mark}"
            f" OR (error_class = {mark} AND error_message LIKE {mark}))"
        )
        params: list[object] = [AWAITING_APPROVAL_ERROR, _STEP_FAILED, _ESCALATED]
        order, before, earlier = "ASC", ">=", ">"
    else:
        which, statuses = dialect.one_of("status", sorted(PARKED))
        where = f"({which}) AND (error_class IS NULL OR error_class <> {mark})"
        params = [*statuses, AWAITING_APPROVAL_ERROR]
        order, before, earlier = "DESC", "<=", "<"
    if after is not None:
        where += f" AND updated_at {before} {mark}"
        where += f" AND (updated_at {earlier} {mark} OR id {earlier} {mark})"
        at = ts(after[0])
        params += [at, at, after[1]]
    rows = db.execute(
        f"SELECT {RUN_COLUMNS} FROM durably_runs WHERE {where}"
        f" ORDER BY updated_at {order}, id {order} LIMIT {mark}",
        [*params, limit],
    ).fetchall()
    return [run_of(row) for row in rows]


# How a run waiting for a person's decision is parked: by an approval (its error says so), or
# by durably.escalate, whose step fails "escalated" (durably.errors.StepFailed's message)
_STEP_FAILED = error_class_name(StepFailed)
_ESCALATED = f"step {ESCALATION!r} failed (escalated)%"


# A run has an attribute: written `id IN (...)` rather than a correlated EXISTS, so that both
# databases start from the index on (name, value) and look the runs up by id, where SQLite
# would read every run and probe its attributes.
_HAS_ATTRIBUTE = (
    "id IN (SELECT run_id FROM durably_attributes WHERE name = {mark} AND value = {mark})"
)


# What happened to a run, as a condition on its events (found through their primary key's
# run_id), and its parameters; a claim records whom it took the run over from, if it did
_HAPPENED: dict[Happened, tuple[str, list[object]]] = {
    Happened.TAKEN_OVER: (
        "(e.kind = 'attempt_lost' OR (e.kind = 'claimed' AND e.data LIKE {mark}))",
        ['%"took_over_from"%'],
    ),
    Happened.RETRIED: (
        "e.kind IN ('attempt_failed', 'run_retried', 'compensation_attempt_failed')",
        [],
    ),
    Happened.COMPENSATED: ("e.kind = 'compensation_completed'", []),
}


# The runs that may be on a patch's old side (through the index of patch decisions): of the
# workflows whose runs met the patch, every run but those that took its new side. A run that
# has not met it yet may have a history past its point (it started on older code): it counts.
_OLD_SIDE = """workflow IN (SELECT r.workflow FROM durably_runs AS r
        JOIN durably_events AS e ON e.run_id = r.id
        WHERE e.kind = 'patch_decided' AND e.name = {mark})
    AND id NOT IN (SELECT run_id FROM durably_events
        WHERE kind = 'patch_decided' AND name = {mark} AND data = 'true')"""


def unclaimable(
    db: Connection, dialect: Dialect, known: Collection[str], *, now: datetime
) -> dict[str, int]:
    """Due runs whose workflow is not in `known`: name -> count."""
    which, params = dialect.one_of("workflow", list(known))
    rows = db.execute(
        "SELECT workflow, count(*) FROM durably_runs"
        f" WHERE {CLAIM_RANK} <= {dialect.mark} AND available_at <= {dialect.mark}"
        f" AND NOT ({which}) GROUP BY workflow",
        [ts(now), ts(now), *params],
    ).fetchall()
    return {name: count for name, count in rows}


def states(db: Connection, table: str) -> dict[str, str]:
    """Every state in a table of shared states (durably_gates, durably_schedules), by name."""
    return dict(db.execute(f"SELECT name, state FROM {table}").fetchall())
