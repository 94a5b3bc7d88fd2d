"""Picking due runs queue by queue (durably.core.queues), the same SQL for both stores.

A claim that serves no queue with limits reads the claimable index range by range, led by
the workflows and versions the worker serves (durably.stores.sql.due), with the served queues
added to its condition. A claim that serves limited or fair queues picks
from each such queue on its own, counting the queue's slots in use (its runs that hold a
live lease) and handing the free ones round-robin between keys, then fills what is left
from the other queues. The caller leases what was picked in the same transaction, and
holds every limited queue's lock while it does (on SQLite, the write lock; on PostgreSQL,
an advisory lock per queue, `lock_queues`), so that two claims never both count the same
free slot.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

from durably.core.queues import Queue
from durably.core.slots import Candidate, Counts, share
from durably.stores.records import Serves
from durably.stores.sql import workers
from durably.stores.sql.due import pick_due
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.schema import CLAIM_RANK

__all__ = ["Picked", "limited_of", "lock_queues", "pick", "plain_condition"]

# What a pick gives the lease: the run's id, status and lease owner before it.
Picked = tuple[str, str, str | None]

# An advisory lock per queue, for the claim's transaction (PostgreSQL).
_LOCK_QUEUE = "SELECT pg_advisory_xact_lock(hashtextextended('durably-queue:' || %s, 0))"


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
    workflows: Serves,
    queues: Sequence[Queue] | None,
    *,
    now: float,
    limit: int,
    lock: str,
    turns: MutableMapping[str, str],
) -> list[Picked]:
    """Up to `limit` due runs of the served `workflows` from these queues (None: every queue,
    limits aside): each limited queue's share, and the plain queues' (durably.stores.sql.due),
    starting the round at a different group each claim so that none waits behind the others
    for good. `lock` ends the plain pick (PostgreSQL: FOR UPDATE SKIP LOCKED)."""
    limited = limited_of(queues)
    groups: list[Queue | None] = [*limited, None]  # None: the plain queues, together
    first = int(now * 1000) % len(groups)
    picked: list[Picked] = []
    for group in groups[first:] + groups[:first]:
        wanted = limit - len(picked)
        if wanted <= 0:
            break
        if group is None:
            on = plain_condition(dialect, queues)
            due = pick_due(db, dialect, workflows, on, now=now, limit=wanted, lock=lock)
            picked += [(run_id, status, owner) for run_id, status, owner, _ in due]
        else:
            which = workers.served(dialect, workflows)
            picked += _pick_limited(db, dialect, which, group, now=now, limit=wanted, turns=turns)
    return picked


def _pick_limited(
    db: Connection,
    dialect: Dialect,
    served: tuple[str, list[object]],
    queue: Queue,
    *,
    now: float,
    limit: int,
    turns: MutableMapping[str, str],
) -> list[Picked]:
    """One limited queue's share (durably.core.slots): the next keys in turn after the one
    this store's last claim of the queue stopped at (`turns`), each key's first due runs,
    the slots and begins they hold, and round-robin between them. Its cost grows with the
    claim's limit, not with the queue's backlog: every read goes through an index."""
    name = queue.name
    busy, begun = _totals(db, dialect, queue, now=now)
    if queue.concurrency is not None:
        limit = min(limit, queue.concurrency - busy)
    if limit <= 0:
        return []
    after, visits = turns.get(name, ""), limit * 2
    keys: list[str | None] = [*_keys(db, dialect, name, after=after, visits=visits)]
    if len(keys) < visits and after:  # the end of the keys: round again from the first
        keys += [k for k in _keys(db, dialect, name, after="", visits=visits) if k <= after]
    keys = [*dict.fromkeys(keys), None]  # runs without a key: one more key, last
    rate = queue.rate_per_key
    counts = Counts(
        busy,
        begun,
        _by_key(db, dialect, name, keys, "status = 'running' AND available_at >", now),
        None
        if rate is None
        else _by_key(db, dialect, name, keys, "began_at >", now - rate.per.total_seconds()),
    )
    each = -(-limit // len(keys))  # a key's share of the claim, rounded up
    if queue.concurrency_per_key is not None:
        each = min(each, queue.concurrency_per_key)
    heads, rows = _heads(db, dialect, served, name, keys, now=now, each=each)
    taken = share(queue, heads, counts, limit=limit)
    more = [key for key, runs in heads if len(runs) == each]  # keys that may have more
    if len(taken) < limit and more and each < limit:  # fewer keys had work than looked at
        most = limit if queue.concurrency_per_key is None else queue.concurrency_per_key
        if most > each:
            heads, rows = _heads(db, dialect, served, name, keys, now=now, each=most)
            taken = share(queue, heads, counts, limit=limit)
    # The next claim goes on after the last key served, if this one is full; else after the
    # last key looked at (the keys before it had nothing more to give).
    looked = [key for key in keys if key is not None]
    if len(taken) >= limit:
        served_keys = {run.key for run in taken}
        looked = [key for key in looked if key in served_keys]
    if looked:
        turns[name] = looked[-1]
    return [rows[run.run_id] for run in taken]


def _totals(db: Connection, dialect: Dialect, queue: Queue, *, now: float) -> tuple[int, int]:
    """The queue's slots in use and runs begun in its rate's window, where it has limits."""
    mark, busy, begun = dialect.mark, 0, 0
    if queue.concurrency is not None:
        (busy,) = db.execute(
            "SELECT count(*) FROM durably_runs"
            f" WHERE queue = {mark} AND status = 'running' AND available_at > {mark}",
            (queue.name, now),
        ).fetchone()
    if queue.rate is not None:
        (begun,) = db.execute(
            f"SELECT count(*) FROM durably_runs WHERE queue = {mark} AND began_at > {mark}",
            (queue.name, now - queue.rate.per.total_seconds()),
        ).fetchone()
    return int(busy), int(begun)


def _keys(db: Connection, dialect: Dialect, queue: str, *, after: str, visits: int) -> list[str]:
    """Up to `visits` keys of the queue's claimable runs after `after`, in order: a skip scan
    of the queue's key index, one probe a key however many runs each has."""
    mark = dialect.mark
    rows = db.execute(
        f"""
        WITH RECURSIVE keys(key, n) AS (
            SELECT (SELECT min(queue_key) FROM durably_runs WHERE queue = {mark}
                AND queue_key > {mark} AND available_at IS NOT NULL), 1
            UNION ALL
            SELECT (SELECT min(queue_key) FROM durably_runs WHERE queue = {mark}
                AND queue_key > keys.key AND available_at IS NOT NULL), n + 1
            FROM keys WHERE keys.key IS NOT NULL AND n < {mark}
        )
        SELECT key FROM keys WHERE key IS NOT NULL""",
        (queue, after, queue, visits),
    ).fetchall()
    return [str(row[0]) for row in rows]


def _by_key(
    db: Connection,
    dialect: Dialect,
    queue: str,
    keys: Sequence[str | None],
    condition: str,
    since: float,
) -> dict[str | None, int]:
    """How many of the queue's runs of these keys meet `condition` (which ends with a
    comparison to `since`), by key."""
    named = [key for key in keys if key is not None]
    mark = dialect.mark
    which, params = dialect.one_of("queue_key", named)
    rows = db.execute(
        f"SELECT queue_key, count(*) FROM durably_runs WHERE queue = {mark}"
        f" AND {condition} {mark} AND ({which} OR queue_key IS NULL) GROUP BY queue_key",
        [queue, since, *params],
    ).fetchall()
    return {row[0]: int(row[1]) for row in rows}


def _heads(
    db: Connection,
    dialect: Dialect,
    served: tuple[str, list[object]],
    queue: str,
    keys: Sequence[str | None],
    *,
    now: float,
    each: int,
) -> tuple[list[tuple[str | None, list[Candidate]]], dict[str, Picked]]:
    """The first `each` due runs of served workflows of each key, in claim order, in one
    statement; and what the lease needs of each."""
    which, params = served
    mark = dialect.mark
    arms: list[str] = []
    values: list[object] = []
    for key in keys:
        own = "queue_key IS NULL" if key is None else f"queue_key = {mark}"
        arms.append(
            "SELECT * FROM (SELECT id, status, lease_owner, began_at, queue_key"
            f" FROM durably_runs WHERE queue = {mark} AND {own}"
            f" AND {CLAIM_RANK} <= {mark} AND available_at <= {mark} AND {which}"
            f" ORDER BY {CLAIM_RANK} LIMIT {mark}) AS k{len(arms)}"
        )
        values += [queue, *([] if key is None else [key]), now, now, *params, each]
    found: dict[str | None, list[Candidate]] = {key: [] for key in keys}
    rows: dict[str, Picked] = {}
    for run_id, status, owner, began_at, key in db.execute(" UNION ALL ".join(arms), values):
        found[key].append(Candidate(run_id, key, began_at is not None))
        rows[run_id] = (run_id, status, owner)
    return [(key, runs) for key, runs in found.items() if runs], rows


def lock_queues(db: Any, queues: Sequence[Queue]) -> None:
    """Take each limited queue's advisory lock for the transaction (PostgreSQL), in order."""
    for queue in limited_of(queues):
        db.execute(_LOCK_QUEUE, (queue.name,))
