"""Picking due runs queue by queue (durably.core.queues), the same SQL for both stores.

A claim that serves no queue with limits reads the claim-rank index as it always did, with
the served queues added to its condition. A claim that serves limited or fair queues picks
from each such queue on its own, counting the queue's slots in use (its runs that hold a
live lease) and handing the free ones round-robin between keys, then fills what is left
from the other queues. The caller leases what was picked in the same transaction, and
holds every limited queue's lock while it does (on SQLite, the write lock; on PostgreSQL,
an advisory lock per queue, `lock_queues`), so that two claims never both count the same
free slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durably.core.queues import Queue
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.schema import CLAIM_RANK

__all__ = ["Picked", "limited_of", "lock_queues", "pick", "plain_condition"]

# What a pick gives the lease: the run's id, status and lease owner before it.
Picked = tuple[str, str, str | None]

# An advisory lock per queue, for the claim's transaction (PostgreSQL).
_LOCK_QUEUE = "SELECT pg_advisory_xact_lock(hashtextextended('durably-queue:' || %s, 0))"

# The key a run is counted under: runs without a key share one (no key is the empty string).
_KEY = "coalesce(queue_key, '')"


def limited_of(queues: Sequence[Queue] | None) -> list[Queue]:
    """The queues whose claims must count slots or go by key, by name (the locking order)."""
    return sorted((q for q in queues or () if q.limited), key=lambda q: q.name)


def plain_condition(dialect: Dialect, queues: Sequence[Queue] | None) -> tuple[str, list[object]]:
    """The condition that a run is on one of the served queues that have no limits ("1 = 1"
    for None: every queue, the claim of a tool or a test)."""
    if queues is None:
        return "1 = 1", []
    plain = [q.stored for q in queues if not q.limited]
    named = [name for name in plain if name is not None]
    parts: list[str] = ["queue IS NULL"] if None in plain else []
    params: list[object] = []
    if named:
        which, params = dialect.one_of("queue", named)
        parts.append(which)
    return (f"({' OR '.join(parts)})" if parts else "1 = 0"), params


def pick(
    db: Connection,
    dialect: Dialect,
    served: tuple[str, list[object]],
    queues: Sequence[Queue] | None,
    *,
    now: float,
    limit: int,
    lock: str,
) -> list[Picked]:
    """Up to `limit` due runs of the served workflows (`served`: their condition) from these
    queues (None: every queue, limits aside): each limited queue's share, and the plain
    queues', starting the round at a different group each claim so that none waits behind
    the others for good. `lock` ends the plain pick (PostgreSQL: FOR UPDATE SKIP LOCKED)."""
    limited = limited_of(queues)
    groups: list[Queue | None] = [*limited, None]  # None: the plain queues, together
    first = int(now * 1000) % len(groups)
    picked: list[Picked] = []
    for group in groups[first:] + groups[:first]:
        wanted = limit - len(picked)
        if wanted <= 0:
            break
        if group is None:
            picked += _pick_plain(db, dialect, served, queues, now=now, limit=wanted, lock=lock)
        else:
            picked += _pick_limited(db, dialect, served, group, now=now, limit=wanted)
    return picked


def _pick_plain(
    db: Connection,
    dialect: Dialect,
    served: tuple[str, list[object]],
    queues: Sequence[Queue] | None,
    *,
    now: float,
    limit: int,
    lock: str,
) -> list[Picked]:
    which, params = served
    on, more = plain_condition(dialect, queues)
    mark = dialect.mark
    rows = db.execute(
        "SELECT id, status, lease_owner FROM durably_runs"
        f" WHERE {CLAIM_RANK} <= {mark} AND available_at <= {mark} AND {which} AND {on}"
        f" ORDER BY {CLAIM_RANK} LIMIT {mark}{lock}",
        [now, now, *params, *more, limit],
    ).fetchall()
    return [(row[0], row[1], row[2]) for row in rows]


def _pick_limited(
    db: Connection,
    dialect: Dialect,
    served: tuple[str, list[object]],
    queue: Queue,
    *,
    now: float,
    limit: int,
) -> list[Picked]:
    """One limited queue's share: no more than its free slots, in all and per key, nor more
    runs beginning than its rates leave, in all and per key (a run that began already is
    not held back by a rate); the keys that hold the fewest slots first when the queue is
    fair (a key's n-th due run counts as its n-th slot), else by rank."""
    mark, name = dialect.mark, queue.name
    if queue.concurrency is not None:
        (busy,) = db.execute(
            "SELECT count(*) FROM durably_runs"
            f" WHERE queue = {mark} AND status = 'running' AND available_at > {mark}",
            (name, now),
        ).fetchone()
        limit = min(limit, queue.concurrency - busy)
    fresh_left: int | None = None  # runs that may begin, in all
    if queue.rate is not None:
        (began,) = db.execute(
            f"SELECT count(*) FROM durably_runs WHERE queue = {mark} AND began_at > {mark}",
            (name, now - queue.rate.per.total_seconds()),
        ).fetchone()
        fresh_left = queue.rate.count - began
    if limit <= 0:
        return []
    which, params = served
    place = "due.turn + coalesce(busy.n, 0)"
    fresh = "due.began_at IS NULL"
    kept: list[str] = []
    more: list[object] = []
    if queue.concurrency_per_key is not None:
        kept.append(f"{place} <= {mark}")
        more.append(queue.concurrency_per_key)
    if queue.rate_per_key is not None:
        kept.append(f"(NOT {fresh} OR due.fresh_turn + coalesce(begun.n, 0) <= {mark})")
        more.append(queue.rate_per_key.count)
    window = 0.0 if queue.rate_per_key is None else queue.rate_per_key.per.total_seconds()
    order = f"{place}, due.rank, due.id" if queue.fair else "due.rank, due.id"
    rows = db.execute(
        f"""
        WITH busy AS (
            SELECT {_KEY} AS key, count(*) AS n FROM durably_runs
            WHERE queue = {mark} AND status = 'running' AND available_at > {mark}
            GROUP BY {_KEY}
        ), begun AS (
            SELECT {_KEY} AS key, count(*) AS n FROM durably_runs
            WHERE queue = {mark} AND began_at > {mark} GROUP BY {_KEY}
        ), due AS (
            SELECT id, status, lease_owner, began_at, {_KEY} AS key, {CLAIM_RANK} AS rank,
                row_number() OVER (PARTITION BY {_KEY} ORDER BY {CLAIM_RANK}, id) AS turn,
                row_number() OVER (
                    PARTITION BY {_KEY}, began_at IS NULL ORDER BY {CLAIM_RANK}, id
                ) AS fresh_turn
            FROM durably_runs
            WHERE queue = {mark} AND {CLAIM_RANK} <= {mark} AND available_at <= {mark}
                AND {which}
        ), kept AS (
            SELECT due.id, due.status, due.lease_owner, due.began_at, {place} AS place,
                due.rank AS rank,
                row_number() OVER (PARTITION BY {fresh} ORDER BY {order}) AS nth
            FROM due LEFT JOIN busy ON busy.key = due.key
            LEFT JOIN begun ON begun.key = due.key
            {"WHERE " + " AND ".join(kept) if kept else ""}
        )
        SELECT id, status, lease_owner FROM kept
        WHERE {mark} OR began_at IS NOT NULL OR nth <= {mark}
        ORDER BY {"place, rank, id" if queue.fair else "rank, id"} LIMIT {mark}""",
        [
            name,
            now,
            name,
            now - window,
            name,
            now,
            now,
            *params,
            *more,
            fresh_left is None,
            fresh_left or 0,
            limit,
        ],
    ).fetchall()
    return [(row[0], row[1], row[2]) for row in rows]


def lock_queues(db: Any, queues: Sequence[Queue]) -> None:
    """Take each limited queue's advisory lock for the transaction (PostgreSQL), in order."""
    for queue in limited_of(queues):
        db.execute(_LOCK_QUEUE, (queue.name,))
