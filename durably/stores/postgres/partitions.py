"""PostgreSQL's history partitions. The history (durably_events) is partitioned by range of
the birth of its run (durably.stores.sql.schema.BIRTH: its created_at), a partition a day by
default: every event of a run has its birth, so a run's history lives whole in one partition,
and retention drops a partition whose runs have all gone instead of deleting its rows. Beside
the ranges: the legacy partition (the history of before V14, births below 1), dropped once its
last run is gone, and the DEFAULT partition (a birth no partition covers: made late, or a
clock far off), pruned row by row and never dropped.

Partitions are made ahead (this one and the next AHEAD) by the migration and by workers'
beats, an hour apart at most. Making one never fails its caller: DDL waits at most
LOCK_TIMEOUT for the table's locks (then waits for the next beat), and a range PostgreSQL
refuses (rows of it in the DEFAULT partition already; one overlapping a partition of another
width) is skipped, and said once."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from durably.core.status import FINAL
from durably.stores.sql import pruning, reads, tally
from durably.stores.sql.schema import BIRTH

__all__ = [
    "AHEAD",
    "DEFAULT_WIDTH",
    "LOCK_TIMEOUT",
    "Partition",
    "check_width",
    "listed",
    "make_ahead",
    "prune_partition",
    "ranges_ahead",
]

log = logging.getLogger("durably.store")

DEFAULT_WIDTH = timedelta(days=1)
AHEAD = 3  # partitions made past the one of now: days of a worker's absence they cover
# The longest DDL here waits for the history's locks: a statement that waits for a lock holds
# up those that come after it, claims and commits among them, for as long.
LOCK_TIMEOUT = "200ms"
_BOUND = re.compile(r"FOR VALUES FROM \((.+?)\) TO \((.+?)\)")


@dataclass(frozen=True, slots=True)
class Partition:
    """A partition of the history and the births it holds: [low, high); low None: every
    birth below high (the legacy partition); high None: the DEFAULT partition."""

    name: str
    low: float | None
    high: float | None


def check_width(width: timedelta) -> timedelta:
    """`width`, if partitions can be that wide: whole minutes, from an hour to a year."""
    seconds = width.total_seconds()
    if not timedelta(hours=1) <= width <= timedelta(days=366) or seconds % 60:
        raise ValueError(
            f"a history partition of {width} will not do: give whole minutes from 1h to 366d "
            "(1d, the default, suits most stores; 7d one that starts fewer runs)"
        )
    return width


def ranges_ahead(now: float, width: timedelta) -> list[tuple[float, float]]:
    """The ranges of births of the partition of `now` and the AHEAD after it, each `width`
    wide from the epoch on (so that every process makes the same ones)."""
    step = width.total_seconds()
    first = math.floor(now / step) * step
    return [(first + i * step, first + (i + 1) * step) for i in range(AHEAD + 1)]


def name_of(low: float, width: timedelta) -> str:
    """durably_events_YYYYMMDD (and _HHMM for partitions not a whole number of days)."""
    moment = datetime.fromtimestamp(low, UTC)
    whole_days = width.total_seconds() % 86_400 == 0
    return "durably_events_" + moment.strftime("%Y%m%d" if whole_days else "%Y%m%d_%H%M")


def listed(db: psycopg.Connection[Any]) -> list[Partition]:
    """The partitions of the history, oldest first, the DEFAULT last."""
    rows = db.execute(
        "SELECT c.relname, pg_catalog.pg_get_expr(c.relpartbound, c.oid)"
        " FROM pg_catalog.pg_inherits AS i JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'durably_events'::regclass"
    ).fetchall()
    found = [_partition(name, bound) for name, bound in rows]
    return sorted(found, key=lambda p: (p.high is None, p.high or 0.0))


def make_ahead(
    db: psycopg.Connection[Any], now: float, width: timedelta, *, told: set[str]
) -> list[str]:
    """Make the partitions ahead of `now` that are missing, each in a transaction of its own
    (`db` in autocommit); the names of those made. A range refused is said once (`told`: the
    names said already) and skipped; one whose locks were not had in time waits for the
    next call."""
    existing = {p.name for p in listed(db)}
    made: list[str] = []
    for low, high in ranges_ahead(now, width):
        name = name_of(low, width)
        if name in existing:
            continue
        try:
            with db.transaction():
                _make(db, name, low, high)
            made.append(name)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DuplicateTable):
            continue  # busy, or made meanwhile by another process
        except (psycopg.errors.CheckViolation, psycopg.errors.InvalidObjectDefinition) as exc:
            if name not in told:
                told.add(name)
                why = exc.diag.message_primary or str(exc)
                log.warning(
                    "the history partition %s was not made (%s): its runs' events stay in "
                    "durably_events_default, which retention prunes row by row",
                    name,
                    why,
                )
    return made


def prune_partition(
    db: psycopg.Connection[Any], partition: Partition, before: float, *, limit: int
) -> int:
    """In the caller's transaction: delete up to `limit` runs born in `partition`'s range
    that ended before `before`, with all they leave (durably.stores.sql.pruning) but their
    events; then drop the partition if no run born in its range is left, else delete those
    runs' events from it. How many runs were deleted.

    Nothing that outlives the prune loses its history: the check for runs left follows the
    deletion in this transaction, which holds the row of each run it deleted (a person's
    action on one waits, then finds it gone); a run acted on before the deletion is not
    deleted (its status is read again), and is then found left."""
    low = -math.inf if partition.low is None else partition.low
    assert partition.high is not None, "the DEFAULT partition is pruned row by row"
    ended, params = reads.POSTGRES.one_of("status", sorted(FINAL))
    born = f"{BIRTH} >= %s AND {BIRTH} < %s"
    ids = [
        row[0]
        for row in db.execute(
            f"SELECT id FROM durably_runs WHERE {born} AND {ended} AND updated_at < %s LIMIT %s",
            [low, partition.high, *params, before, limit],
        )
    ]
    deleted = pruning.delete_runs(db, reads.POSTGRES, ids) if ids else []
    if deleted:
        # Runs deleted by birth, not oldest end first: a scrape's tally must count afresh.
        tally.mark_pruned_out_of_order(db, reads.POSTGRES)
    left = db.execute(
        f"SELECT EXISTS (SELECT 1 FROM durably_runs WHERE {born})", [low, partition.high]
    ).fetchone()
    if left is not None and left[0]:
        if deleted:
            db.execute(f'DELETE FROM "{partition.name}" WHERE run_id = ANY(%s)', [deleted])
        return len(deleted)
    _drop(db, partition.name)
    return len(deleted)


def _drop(db: psycopg.Connection[Any], name: str) -> None:
    """Drop a partition none of whose runs is left, if its locks come in time; else leave it
    to the next prune (its rows are of runs gone: no read finds them)."""
    try:
        with db.transaction():  # a savepoint: the deletion stands either way
            db.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            db.execute(f'DROP TABLE "{name}"')
            db.execute("SET LOCAL lock_timeout = DEFAULT")
    except psycopg.errors.LockNotAvailable:
        log.info("the history partition %s is busy: dropped by a later prune", name)
    else:
        log.info("dropped the history partition %s: its runs are gone", name)


def _make(db: psycopg.Connection[Any], name: str, low: float, high: float) -> None:
    """Make the partition `name` of births [low, high) with its unique indexes, apart, and
    attach it: attaching takes a lock that lets the history be read and written meanwhile,
    where CREATE TABLE ... PARTITION OF would hold up every claim and commit."""
    db.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    db.execute(f'CREATE TABLE "{name}" (LIKE durably_events INCLUDING DEFAULTS)')
    db.execute(f'ALTER TABLE "{name}" ADD PRIMARY KEY (run_id, seq)')
    db.execute(
        f'CREATE UNIQUE INDEX "{name}_one_outcome" ON "{name}" (run_id, position)'
        " WHERE kind = 'step_completed'"
    )
    # the range as a check first: attaching then reads none of the (empty) table to prove it
    range_ = f"born >= {_literal(low)} AND born < {_literal(high)}"
    db.execute(f'ALTER TABLE "{name}" ADD CONSTRAINT "{name}_born" CHECK ({range_})')
    db.execute(
        f'ALTER TABLE durably_events ATTACH PARTITION "{name}"'
        f" FOR VALUES FROM ({_literal(low)}) TO ({_literal(high)})"
    )


def _literal(value: float) -> str:
    return repr(float(value))


def _partition(name: str, bound: str) -> Partition:
    if bound == "DEFAULT":
        return Partition(name, None, None)
    match = _BOUND.fullmatch(bound)
    if match is None:
        raise ValueError(f"the history partition {name} has bounds durably did not make: {bound}")
    low, high = (_bound(text) for text in match.groups())
    if high is None:
        raise ValueError(f"the history partition {name} has no upper bound: {bound}")
    return Partition(name, low, high)


def _bound(text: str) -> float | None:
    if text == "MINVALUE":
        return None
    return float(text.strip("'"))
