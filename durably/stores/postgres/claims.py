"""PostgreSQL leases: picking runs with FOR UPDATE SKIP LOCKED, giving each a new epoch and a
`claimed` event in one statement and a batch insert, and finding out what a lease whose
answer was lost did. Run by the store (durably.stores.postgres.store) on its connections."""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from typing import Any

import psycopg

from durably.core.history import EventKind
from durably.core.queues import Queue
from durably.stores.postgres.connections import Connections
from durably.stores.protocol import Claim
from durably.stores.sql import inbox, reads
from durably.stores.sql.queues import lock_queues, pick
from durably.stores.sql.rows import claimed_data
from durably.stores.sql.schema import CLAIM_RANK

__all__ = ["PICK_DUE", "PICK_ONE", "lease_limited", "lease_once", "queue_filter"]

_INSERT_EVENT = (
    "INSERT INTO durably_events (run_id, seq, kind, at, position, name, attempt, data)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
PICK_DUE = f"""
    WHERE {CLAIM_RANK} <= %(now)s AND available_at <= %(now)s AND workflow = ANY(%(workflows)s)
        AND (%(pinned)s::text[] IS NULL OR version IS NULL
            OR workflow || %(separator)s || version = ANY(%(pinned)s)){{queues}}
    ORDER BY {CLAIM_RANK} LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED"""
# Runs a limited queue's pick chose (durably.stores.sql.queues), if still due when leased.
_PICK_IDS = """
    WHERE id = ANY(%(ids)s) AND available_at <= %(now)s
    FOR UPDATE SKIP LOCKED"""
PICK_ONE = """
    WHERE id = %(run_id)s AND status = ANY(%(statuses)s)
        AND (status <> 'running' OR available_at <= %(now)s)
    FOR UPDATE"""
_LEASE = """
WITH picked AS (
    SELECT id, status AS previous_status, lease_owner AS previous_owner FROM durably_runs
    {pick}
)
UPDATE durably_runs AS r SET
    status = 'running', lease_owner = %(owner)s, lease_epoch = r.lease_epoch + 1,
    available_at = %(expires)s, updated_at = %(now)s, event_count = r.event_count + 1,
    began_at = coalesce(r.began_at, %(now)s)
FROM picked WHERE r.id = picked.id
RETURNING r.id, r.workflow, r.input, r.lease_epoch, r.inbox, r.event_count,
    picked.previous_status, picked.previous_owner, r.priority
"""
_CLAIMED = """
SELECT r.id, r.workflow, r.input, r.lease_epoch, r.inbox, r.priority FROM durably_runs AS r
JOIN durably_events AS e ON e.run_id = r.id AND e.seq = r.event_count
WHERE r.status = 'running' AND r.lease_owner = %(owner)s AND r.updated_at = %(now)s
    AND e.kind = 'claimed' AND e.at = %(now)s
    AND (e.data::jsonb ->> 'epoch')::bigint = r.lease_epoch
    AND {which}
"""
# The runs a claim made at `now` by `owner` leased, if it committed: each is still leased to
# the owner, was last updated by that claim, and has the claim's CLAIMED event last (a run
# that moved on since has other events after it). `now` tells one claim from another: every
# claim the engine makes passes a fresh one.


def lease_once(
    connections: Connections, pick: str, which: str, params: dict[str, Any]
) -> list[Claim]:
    """Lease the runs `pick` selects. Leasing is not safe to repeat: if the connection
    dies, the lease may have committed, its runs now leased to the owner without the
    owner knowing. So the second try first looks for what that lease left (`which`
    narrows it to the runs it could have picked), and leases afresh only if nothing."""

    def lease(db: psycopg.Connection[Any]) -> list[Claim]:
        return _lease(db, pick, params)

    def settle(db: psycopg.Connection[Any]) -> list[Claim]:
        return _leased(db, which, params) or _lease(db, pick, params)

    return connections.run(lease, transaction=True, after_loss=settle)


def queue_filter(queues: Sequence[Queue] | None) -> tuple[str, list[str]]:
    """PICK_DUE's condition on the queue, for queues without limits (none for None: every
    queue), and the names for its %(queues)s."""
    if queues is None:
        return "", []
    plain = [queue.stored for queue in queues if not queue.limited]
    named = [name for name in plain if name is not None]
    parts = ["queue IS NULL"] if None in plain else []
    parts += ["queue = ANY(%(queues)s)"] if named else []
    return f" AND ({' OR '.join(parts) or 'FALSE'})", named


def lease_limited(
    connections: Connections,
    served: tuple[str, list[object]],
    queues: Sequence[Queue],
    params: dict[str, Any],
    turns: MutableMapping[str, str],
) -> list[Claim]:
    """Lease due runs from queues some of which have limits: under each limited queue's
    advisory lock, pick its share and the others' (durably.stores.sql.queues), then lease
    them. Settled after a lost connection as `lease_once` does."""

    def lease(db: psycopg.Connection[Any]) -> list[Claim]:
        lock_queues(db, queues)
        picked = pick(
            db,
            reads.POSTGRES,
            served,
            queues,
            now=params["now"],
            limit=params["limit"],
            lock=" FOR UPDATE SKIP LOCKED",
            turns=turns,
        )
        if not picked:
            return []
        return _lease(db, _PICK_IDS, {**params, "ids": [run_id for run_id, _, _ in picked]})

    def settle(db: psycopg.Connection[Any]) -> list[Claim]:
        return _leased(db, "r.workflow = ANY(%(workflows)s)", params) or lease(db)

    return connections.run(lease, transaction=True, after_loss=settle)


def _lease(db: psycopg.Connection[Any], pick: str, params: dict[str, Any]) -> list[Claim]:
    """Give the picked runs a new lease epoch and record each claim in its history."""
    taken = db.execute(_LEASE.format(pick=pick), params).fetchall()
    if not taken:
        return []
    owner, at = params["owner"], params["now"]
    with db.cursor() as cursor:
        cursor.executemany(
            _INSERT_EVENT,
            [
                _claimed_row(run_id, count, at, owner, epoch, previous_status, previous_owner)
                for run_id, _, _, epoch, _, count, previous_status, previous_owner, _ in taken
            ],
        )
    return inbox.claims(db, reads.POSTGRES, [(*row[:5], row[8]) for row in taken])


def _leased(db: psycopg.Connection[Any], which: str, params: dict[str, Any]) -> list[Claim]:
    """The claims a lease at params["now"] by params["owner"] made, if it committed."""
    return inbox.claims(
        db, reads.POSTGRES, db.execute(_CLAIMED.format(which=which), params).fetchall()
    )


def _claimed_row(
    run_id: str,
    seq: int,
    at: float,
    owner: str,
    epoch: int,
    previous_status: str,
    previous_owner: str | None,
) -> tuple[Any, ...]:
    data = claimed_data(owner, epoch, previous_status, previous_owner)
    return (run_id, seq, EventKind.CLAIMED, at, None, None, None, data)
