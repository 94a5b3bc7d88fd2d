"""What a store keeps of outbound webhooks (durably.core.webhooks) and how it tells of status
changes: the part of the Store protocol that subscribes URLs, hands workers the deliveries
due, settles them, lists the dead ones, and streams every status change to listeners."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from durably.core.webhooks import (
    NewWebhook,
    Outgoing,
    Settlement,
    StatusChange,
    Webhook,
    WebhookDelivery,
)

__all__ = ["Retried", "WebhookStore"]


class Retried(StrEnum):
    """What `retry_delivery` did."""

    RETRIED = "retried"  # dead, now due again with its attempts reset
    NOT_DEAD = "not_dead"  # due or delivered: nothing to retry
    NO_DELIVERY = "no_delivery"


class WebhookStore(Protocol):
    """Webhooks and the change stream. A delivery is made by the store itself, in the
    transaction that changes a run's status to one a webhook subscribes to (whichever write
    does it: a worker's commit, a person's action, a bulk job), so that it is there exactly
    when the change is."""

    def add_webhook(self, webhook: NewWebhook, *, now: datetime) -> Webhook:
        """Subscribe `webhook` (checked by the caller); from the next status change on."""
        ...

    def webhooks(self) -> list[Webhook]:
        """Every webhook, oldest first (whether each has a secret, never the secret)."""
        ...

    def remove_webhook(self, webhook_id: str) -> bool:
        """Unsubscribe it and delete its deliveries; False for an unknown id."""
        ...

    def take_deliveries(self, *, now: datetime, lease: timedelta, limit: int) -> list[Outgoing]:
        """Lease up to `limit` deliveries due by `now` (oldest due first) for `lease`: no
        other taker gets them until it runs out (a worker that dies with them leased: the
        next taker after it, so a delivery is sent at least once)."""
        ...

    def settle_deliveries(self, settled: Sequence[Settlement], *, now: datetime) -> list[bool]:
        """Record how these attempts of leased deliveries ended, in one transaction; for each,
        False (writing nothing of it) if the delivery moved on meanwhile (another taker
        recorded this attempt after the lease ran out)."""
        ...

    def deliveries(
        self, *, webhook: str | None = None, dead: bool = False, limit: int = 100
    ) -> list[WebhookDelivery]:
        """Up to `limit` deliveries, newest first: of `webhook` only, and only the dead."""
        ...

    def retry_delivery(self, delivery_id: int, *, now: datetime) -> Retried:
        """Make a dead delivery due now, its attempts counted from zero again."""
        ...

    def due_deliveries(self, *, now: datetime) -> int:
        """How many deliveries are due by `now` and not leased (a metrics gauge)."""
        ...

    def watch_status_changes(self, heard: Callable[[StatusChange], None]) -> Callable[[], None]:
        """Call `heard(change)`, from a thread of the store's, for each run status change any
        process commits from now on; returns the call that stops listening. Not durable:
        changes made while nobody listens are not kept (webhooks are the durable way).
        PostgreSQL: NOTIFY on the channel durably_changes, once turned on
        (set_status_changes); SQLite: datagrams to the processes of this machine."""
        ...

    def set_status_changes(self, on: bool | None = None) -> bool:
        """Turn the change stream on or off for every process of the store (None: leave it);
        whether it is on."""
        ...
