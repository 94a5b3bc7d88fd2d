"""Webhooks' queries, one implementation for both stores (durably.core.webhooks): subscribe,
list and remove webhooks; lease the deliveries due, settle them, list and retry the dead.

The deliveries themselves are made by the trigger on durably_runs (durably.stores.sql.schema),
in the transaction of the status change."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from durably.core.webhooks import (
    DeliveryState,
    NewWebhook,
    Outgoing,
    Settlement,
    Webhook,
    WebhookDelivery,
    WebhookKind,
)
from durably.stores.sql.reads import Connection, Dialect
from durably.stores.sql.rows import from_ts, ts
from durably.stores.webhooks import Retried

__all__ = [
    "add",
    "deliveries",
    "due",
    "listed",
    "remove",
    "retry",
    "settle",
    "take",
]

_WEBHOOK = "id, url, kinds, secret IS NOT NULL, workflow, attempts, created_at"
_DELIVERY = (
    "d.id, d.webhook, d.kind, d.run_id, d.workflow, d.status, d.at, d.state, d.attempts,"
    " d.due_at, d.last_error, d.delivered_at, d.queue, d.queue_key, d.correlation_id"
)


def add(
    db: Connection,
    dialect: Dialect,
    webhook: NewWebhook,
    *,
    now: datetime,
    trigger: str | None = None,
) -> Webhook:
    """Insert the webhook and its kinds, in the caller's transaction; `trigger`: the notices
    trigger to make if it is not there (SQLite's, which exists only while a webhook does)."""
    if trigger is not None:
        db.execute(trigger)
    mark = dialect.mark
    kinds = ",".join(webhook.kinds)
    db.execute(
        "INSERT INTO durably_webhooks (id, url, kinds, secret, workflow, attempts, created_at)"
        f" VALUES ({', '.join([mark] * 7)})",
        (
            webhook.id,
            webhook.url,
            kinds,
            webhook.secret,
            webhook.workflow,
            webhook.attempts,
            ts(now),
        ),
    )
    for kind in webhook.kinds:
        db.execute(
            f"INSERT INTO durably_webhook_kinds (kind, webhook, workflow) VALUES ({mark}, {mark},"
            f" {mark})",
            (str(kind), webhook.id, webhook.workflow),
        )
    return Webhook(
        webhook.id,
        webhook.url,
        webhook.kinds,
        webhook.secret is not None,
        webhook.workflow,
        webhook.attempts,
        now,
    )


def listed(db: Connection) -> list[Webhook]:
    rows = db.execute(f"SELECT {_WEBHOOK} FROM durably_webhooks ORDER BY created_at, id")
    return [_webhook_of(row) for row in rows.fetchall()]


def remove(db: Connection, dialect: Dialect, webhook_id: str, *, trigger: bool = False) -> bool:
    """Delete the webhook, its kinds and its deliveries, in the caller's transaction; with
    `trigger`, drop the notices trigger once no webhook is left (SQLite's)."""
    mark = dialect.mark
    db.execute(f"DELETE FROM durably_webhook_kinds WHERE webhook = {mark}", (webhook_id,))
    db.execute(f"DELETE FROM durably_deliveries WHERE webhook = {mark}", (webhook_id,))
    gone = db.execute(f"DELETE FROM durably_webhooks WHERE id = {mark}", (webhook_id,))
    if trigger and db.execute("SELECT 1 FROM durably_webhooks LIMIT 1").fetchone() is None:
        db.execute("DROP TRIGGER IF EXISTS durably_runs_notices")
    return bool(gone.rowcount)


def take(
    db: Connection,
    dialect: Dialect,
    *,
    now: datetime,
    lease: timedelta,
    limit: int,
    lock: str,
) -> list[Outgoing]:
    """Lease up to `limit` due deliveries (`lock`: how the dialect keeps two takers apart,
    FOR UPDATE SKIP LOCKED on PostgreSQL; SQLite's write lock is the transaction's)."""
    mark = dialect.mark
    ids = [
        row[0]
        for row in db.execute(
            f"SELECT id FROM durably_deliveries WHERE state = 'due' AND due_at <= {mark}"
            f" ORDER BY due_at, id LIMIT {mark}{lock}",
            (ts(now), limit),
        ).fetchall()
    ]
    if not ids:
        return []
    chosen, params = dialect.one_of("id", ids)
    db.execute(
        f"UPDATE durably_deliveries SET due_at = {mark} WHERE {chosen}", [ts(now + lease), *params]
    )
    chosen, params = dialect.one_of("d.id", ids)
    rows = db.execute(
        f"SELECT {_DELIVERY}, w.url, w.secret, w.attempts FROM durably_deliveries AS d"
        f" JOIN durably_webhooks AS w ON w.id = d.webhook WHERE {chosen} ORDER BY d.due_at, d.id",
        params,
    ).fetchall()
    return [Outgoing(_delivery_of(row), row[-3], row[-2], row[-1]) for row in rows]


def settle(
    db: Connection, dialect: Dialect, settled: Sequence[Settlement], *, now: datetime
) -> list[bool]:
    """Record each attempt, fenced by the attempts recorded before it, in the caller's
    transaction."""
    return [_settle(db, dialect.mark, item, now) for item in settled]


def _settle(db: Connection, mark: str, item: Settlement, now: datetime) -> bool:
    if item.error is None:
        state, due_at, delivered_at = DeliveryState.DELIVERED, None, ts(now)
    elif item.retry_at is not None:
        state, due_at, delivered_at = DeliveryState.DUE, ts(item.retry_at), None
    else:
        state, due_at, delivered_at = DeliveryState.DEAD, None, None
    done = db.execute(
        f"UPDATE durably_deliveries SET state = {mark}, attempts = {mark}, due_at = {mark},"
        f" last_error = coalesce({mark}, last_error), delivered_at = {mark}"
        f" WHERE id = {mark} AND state = 'due' AND attempts = {mark}",
        (
            str(state),
            item.attempts,
            due_at,
            item.error,
            delivered_at,
            item.delivery_id,
            item.attempts - 1,
        ),
    )
    return bool(done.rowcount)


def deliveries(
    db: Connection, dialect: Dialect, *, webhook: str | None, dead: bool, limit: int
) -> list[WebhookDelivery]:
    mark = dialect.mark
    where: list[str] = []
    params: list[object] = []
    if webhook is not None:
        where.append(f"d.webhook = {mark}")
        params.append(webhook)
    if dead:
        where.append("d.state = 'dead'")
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = db.execute(
        f"SELECT {_DELIVERY} FROM durably_deliveries AS d{clause} ORDER BY d.id DESC LIMIT {mark}",
        [*params, limit],
    ).fetchall()
    return [_delivery_of(row) for row in rows]


def retry(db: Connection, dialect: Dialect, delivery_id: int, *, now: datetime) -> Retried:
    mark = dialect.mark
    done = db.execute(
        f"UPDATE durably_deliveries SET state = 'due', attempts = 0, due_at = {mark}"
        f" WHERE id = {mark} AND state = 'dead'",
        (ts(now), delivery_id),
    )
    if done.rowcount:
        return Retried.RETRIED
    found = db.execute(f"SELECT 1 FROM durably_deliveries WHERE id = {mark}", (delivery_id,))
    return Retried.NOT_DEAD if found.fetchone() else Retried.NO_DELIVERY


def due(db: Connection, dialect: Dialect, *, now: datetime) -> int:
    row = db.execute(
        f"SELECT count(*) FROM durably_deliveries WHERE state = 'due' AND due_at <= {dialect.mark}",
        (ts(now),),
    ).fetchone()
    return int(row[0])


def _webhook_of(row: Sequence[Any]) -> Webhook:
    id_, url, kinds, signed, workflow, attempts, created_at = row
    return Webhook(
        id_,
        url,
        tuple(WebhookKind(kind) for kind in kinds.split(",")),
        bool(signed),
        workflow,
        attempts,
        from_ts(created_at),
    )


def _delivery_of(row: Sequence[Any]) -> WebhookDelivery:
    return WebhookDelivery(
        id=row[0],
        webhook=row[1],
        kind=WebhookKind(row[2]),
        run_id=row[3],
        workflow=row[4],
        status=row[5],
        at=from_ts(row[6]),
        state=DeliveryState(row[7]),
        attempts=row[8],
        due_at=None if row[9] is None else from_ts(row[9]),
        last_error=row[10],
        delivered_at=None if row[11] is None else from_ts(row[11]),
        queue=row[12],
        key=row[13],
        correlation_id=row[14],
    )
