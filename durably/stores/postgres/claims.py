"""PostgreSQL leases: picking runs with FOR UPDATE SKIP LOCKED, giving each a new epoch and a
`claimed` event, and reading back their histories and undelivered messages, all in one
statement (one round trip, its own transaction); and finding out what a lease whose answer
was lost did. Run by the store (durably.stores.postgres.store) on its connections."""

from __future__ import annotations

import json
from collections.abc import MutableMapping, Sequence
from typing import Any

import psycopg

from durably.core.history import Event, EventKind
from durably.core.queues import Queue
from durably.stores.postgres.connections import Connections
from durably.stores.records import Claim, Delivery
from durably.stores.sql import inbox, reads
from durably.stores.sql.queues import lock_queues, pick
from durably.stores.sql.rows import event_of, from_ts
from durably.stores.sql.schema import CLAIM_RANK

__all__ = ["SKIP_LOCKED", "Pick", "lease_limited", "lease_once", "pick_ids", "pick_one"]

# A pick: a SELECT of the runs to lease (id, status, lease_owner, due_rank: their claim rank),
# with its parameters; it locks the rows it selects.
Pick = tuple[str, list[object]]

SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"  # a pick of due runs passes over another claim's
_NOT_KEPT = ""  # a run's `started` when its row does not keep its run_started data (schema V15)

_PICK_ONE = (
    f"SELECT id, status, lease_owner, {CLAIM_RANK} AS due_rank FROM durably_runs"
    " WHERE id = %s AND status = ANY(%s) AND (status <> 'running' OR available_at <= %s)"
    " FOR UPDATE"
)
# Runs a limited queue's pick chose (durably.stores.sql.queues), if still due when leased.
_PICK_IDS = (
    f"SELECT id, status, lease_owner, {CLAIM_RANK} AS due_rank FROM durably_runs"
    f" WHERE id = ANY(%s) AND available_at <= %s{SKIP_LOCKED}"
)

# The lease. `logged` writes each run's `claimed` event with the data claimed_data
# (durably.stores.sql.rows) gives: the owner's part is JSON Python wrote (a parameter), the
# epoch and the owner taken over from, if any, are added here. The claim's own event is handed
# back from `logged`. One row shape for two kinds of rows (`part`): 0, a leased run, in claim
# order (its workflow, input, epoch, birth, priority, and its `claimed` event's seq, time and
# data); 2, an undelivered message (its id as `seq`, its sender as `t1`, its time as `at`). A
# leased run also brings its run_started data (`started`, schema V15) and its creation time: a
# run claimed for the first time (its `claimed` event is its second) whose row keeps that data
# has the run_started event alone for its history, made from them as the start wrote it. The
# messages are read by an array of the leased ids, so that they are index look-ups whatever the
# planner guesses of how many runs a claim leases. The histories are read (those of the others)
# by a second statement (reads.born_histories), given the runs' births as values: a read of the
# partitioned history in this statement, by births it learns only as it runs, was planned and
# set up over every partition (PostgreSQL prunes them only as it runs), and a claim cost 2.7x as
# much beside 36 daily partitions as beside none (measured); given as values, the births prune
# the partitions as the read is planned.
_LEASE = """
WITH picked AS ({pick}),
leased AS (
    UPDATE durably_runs AS r SET
        status = 'running', lease_owner = %s, lease_epoch = r.lease_epoch + 1,
        available_at = %s, updated_at = %s, event_count = r.event_count + 1,
        began_at = coalesce(r.began_at, %s)
    FROM picked WHERE r.id = picked.id
    RETURNING r.id, r.workflow, r.input, r.lease_epoch, r.inbox, r.priority, r.event_count,
        picked.status AS previous_status, picked.lease_owner AS previous_owner, picked.due_rank,
        coalesce(r.born, r.created_at) AS born, r.started, r.created_at
),
logged AS (
    INSERT INTO durably_events (run_id, seq, kind, at, born, data)
    SELECT id, event_count, 'claimed', %s, born, %s::text || lease_epoch || CASE
            WHEN previous_status = 'running' AND previous_owner <> ''
            THEN ', "took_over_from": ' || to_json(previous_owner)::text ELSE '' END || '}'
    FROM leased
    RETURNING run_id, seq, at, data
)
SELECT 0 AS part, l.due_rank, l.id, l.workflow AS t1, l.input AS t2, l.lease_epoch AS n1,
    l.born AS n2, l.priority::bigint AS n3, l.started AS t3, l.created_at AS n4, g.seq::bigint,
    'claimed' AS kind, g.at, NULL::integer AS position, NULL::text AS name,
    NULL::integer AS attempt, g.data
FROM leased AS l JOIN logged AS g ON g.run_id = l.id
UNION ALL
SELECT 2, NULL, m.run_id, m.sender, NULL, NULL, NULL, NULL, NULL, NULL, m.id, m.kind, m.sent_at,
    NULL, m.name, NULL, m.data
FROM durably_inbox AS m WHERE m.run_id = ANY(ARRAY(SELECT id FROM leased WHERE inbox > 0))
ORDER BY part, due_rank, id, seq
"""
_CLAIMED = """
SELECT r.id, r.workflow, r.input, r.lease_epoch, r.inbox, r.priority FROM durably_runs AS r
CROSS JOIN LATERAL (SELECT * FROM durably_events AS e WHERE e.run_id = r.id
    AND e.seq = r.event_count AND e.born = coalesce(r.born, r.created_at) OFFSET 0) AS e
WHERE r.status = 'running' AND r.lease_owner = %(owner)s AND r.updated_at = %(now)s
    AND e.kind = 'claimed' AND e.at = %(now)s
    AND (e.data::jsonb ->> 'epoch')::bigint = r.lease_epoch
    AND {which}
"""
# The runs a claim made at `now` by `owner` leased, if it committed: each is still leased to
# the owner, had its status last changed by that claim (updated_at), and has the claim's
# CLAIMED event last (a run that moved on since has other events after it). `now` tells one
# claim from another: every claim the engine makes passes a fresh one.


def pick_one(run_id: str, statuses: Sequence[str], now: float) -> Pick:
    """The pick of one run, if it is in one of `statuses` (and not leased, if running)."""
    return _PICK_ONE, [run_id, list(statuses), now]


def pick_ids(run_ids: Sequence[str], now: float) -> Pick:
    return _PICK_IDS, [list(run_ids), now]


def lease_once(
    connections: Connections, picked: Pick, which: str, params: dict[str, Any]
) -> list[Claim]:
    """Lease the runs `picked` selects, in one statement. Leasing is not safe to repeat: if
    the connection dies, the lease may have committed, its runs now leased to the owner
    without the owner knowing. So the second try first looks for what that lease left
    (`which` narrows it to the runs it could have picked), and leases afresh only if
    nothing."""

    def lease(db: psycopg.Connection[Any]) -> list[Claim]:
        return _lease(db, picked, params)

    def settle(db: psycopg.Connection[Any]) -> list[Claim]:
        return _leased(db, which, params) or _lease(db, picked, params)

    return connections.run(lease, after_loss=settle)


def lease_limited(
    connections: Connections,
    workflows: Any,
    queues: Sequence[Queue],
    params: dict[str, Any],
    turns: MutableMapping[str, str],
) -> list[Claim]:
    """Lease due runs from queues some of which have limits: under each limited queue's
    advisory lock, pick its share and the others' (durably.stores.sql.queues), then lease
    them, in one transaction. Settled after a lost connection as `lease_once` does."""

    def lease(db: psycopg.Connection[Any]) -> list[Claim]:
        lock_queues(db, queues)
        picked = pick(
            db,
            reads.POSTGRES,
            workflows,
            queues,
            now=params["now"],
            limit=params["limit"],
            lock=SKIP_LOCKED,
            turns=turns,
        )
        if not picked:
            return []
        return _lease(db, pick_ids([run_id for run_id, _, _ in picked], params["now"]), params)

    def settle(db: psycopg.Connection[Any]) -> list[Claim]:
        return _leased(db, "r.workflow = ANY(%(workflows)s)", params) or lease(db)

    return connections.run(lease, transaction=True, after_loss=settle)


def _lease(db: psycopg.Connection[Any], picked: Pick, params: dict[str, Any]) -> list[Claim]:
    """Give the picked runs a new lease epoch, record each claim in its history, and read
    back what the worker needs of each."""
    pick_sql, pick_params = picked
    at, owner = params["now"], params["owner"]
    # claimed_data's JSON up to the epoch: {"owner": <owner>, "epoch": <epoch>[, ...]}
    head = json.dumps({"owner": owner, "epoch": 0})[: -len("0}")]
    lease_params = [owner, params["expires"], at, at, at, head]
    statement = _LEASE.replace("{pick}", pick_sql)  # its JSON has braces of its own
    rows = db.execute(statement, [*pick_params, *lease_params]).fetchall()
    runs = [row for row in rows if row[0] == 0]
    firsts = {row[2]: [_run_started(row)] for row in runs if _first_kept(row)}
    births = {row[2]: row[6] for row in runs if row[2] not in firsts}
    # the histories: no one but the lease's holder writes a leased run's events, so a read
    # after the lease's commit reads those before it, and the claimed event it wrote
    events = reads.born_histories(db, births) if births else {}
    return _claims(rows, {**events, **firsts})


def _first_kept(row: Sequence[Any]) -> bool:
    """Whether a leased run's row is of its first claim (its `claimed` event is its second)
    and keeps its run_started data: its history is that event alone."""
    return bool(row[10] == 2 and row[8] != _NOT_KEPT)


def _run_started(row: Sequence[Any]) -> Event:
    """A leased run's run_started event, as its start wrote it: the first of its history, at
    its creation, with the data kept in its row."""
    return event_of((1, str(EventKind.RUN_STARTED), row[9], None, None, None, row[8]))


def _claims(rows: Sequence[Sequence[Any]], events: dict[str, list[Event]]) -> list[Claim]:
    """The claims of _LEASE's rows (runs first, then their messages in order), with their
    histories (read after the lease: the claimed events are taken from its rows)."""
    leased: list[tuple[Any, ...]] = []
    claimed: dict[str, Event] = {}
    mail: dict[str, list[Delivery]] = {}
    for part, _, run_id, t1, t2, n1, _, n3, _, _, *event in rows:
        seq, kind, at, _, name, _, data = event
        if part == 0:
            claimed[run_id] = Event(seq, EventKind.CLAIMED, from_ts(at), None, None, None, data)
            leased.append((run_id, t1, t2, n1, 0, n3))  # the inbox count: not needed
        else:
            mail.setdefault(run_id, []).append(Delivery(seq, kind, name, data, t1, from_ts(at)))
    histories = {
        run_id: [*(e for e in events.get(run_id, []) if e.seq < event.seq), event]
        for run_id, event in claimed.items()
    }
    return inbox.claims_of(leased, histories, mail)


def _leased(db: psycopg.Connection[Any], which: str, params: dict[str, Any]) -> list[Claim]:
    """The claims a lease at params["now"] by params["owner"] made, if it committed."""
    return inbox.claims(
        db, reads.POSTGRES, db.execute(_CLAIMED.format(which=which), params).fetchall()
    )
