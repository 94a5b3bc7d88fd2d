"""Outbound webhooks as people and programs manage them (`app.client.webhooks`, the CLI's
`durably webhooks`, the API's /api/webhooks): subscribe a URL to kinds of run state change,
list and remove subscriptions, read the deliveries and their dead-letter list, send a dead
one again. Checks happen here, once, for every way in (durably.core.webhooks)."""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Collection
from datetime import timedelta
from typing import Protocol

from durably.clock import Clock
from durably.core.audit import Action, Via, audit_of
from durably.core.webhooks import (
    DEFAULT_ATTEMPTS,
    DeliveryNotDead,
    NewWebhook,
    UnknownDelivery,
    UnknownWebhook,
    Webhook,
    WebhookDelivery,
    check_kinds,
    check_webhook,
)
from durably.runtime.webhooks import Courier, Passed
from durably.stores.protocol import Store
from durably.stores.webhooks import Retried

__all__ = ["Webhooks"]


class Host(Protocol):
    """What webhooks need of the client they are managed through."""

    @property
    def store(self) -> Store: ...

    clock: Clock
    via: Via

    def who(self, by: str | None) -> str: ...


class Webhooks:
    """Webhooks on the client's store."""

    def __init__(self, client: Host) -> None:
        self._client = client

    @property
    def _store(self) -> Store:
        return self._client.store

    def add(
        self,
        url: str,
        events: Collection[str],
        *,
        secret: str | None = None,
        workflow: str | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        by: str | None = None,
    ) -> Webhook:
        """Subscribe `url` to these event kinds (durably.core.webhooks.WebhookKind) of the
        runs of `workflow` (None: of every workflow), signed with `secret` if one is given,
        each delivery tried up to `attempts` times. ConfigError names what does not fit.
        Recorded in the audit trail as `by`'s (without the URL: it may hold a credential)."""
        if isinstance(events, str):
            events = events.split(",")
        webhook = NewWebhook(
            id=f"wh_{secrets.token_hex(6)}",
            url=url,
            kinds=check_kinds(events),
            secret=secret,
            workflow=workflow,
            attempts=attempts,
        )
        made = self._store.add_webhook(check_webhook(webhook), now=self._client.clock.now())
        kinds = ",".join(made.kinds)
        self._record(Action.ADD_WEBHOOK, by, webhook=made.id, events=kinds, workflow=workflow)
        return made

    def list(self) -> list[Webhook]:
        """Every webhook, oldest first: whether it has a secret, never the secret."""
        return self._store.webhooks()

    def get(self, webhook_id: str) -> Webhook:
        for webhook in self._store.webhooks():
            if webhook.id == webhook_id:
                return webhook
        raise self._unknown(webhook_id)

    def remove(self, webhook_id: str, *, by: str | None = None) -> None:
        """Unsubscribe it; its deliveries, sent or not, go with it."""
        if not self._store.remove_webhook(webhook_id):
            raise self._unknown(webhook_id)
        self._record(Action.REMOVE_WEBHOOK, by, webhook=webhook_id)

    def deliveries(
        self, webhook_id: str | None = None, *, failed: bool = False, limit: int = 100
    ) -> builtins.list[WebhookDelivery]:
        """The newest deliveries (of one webhook); `failed`: only the dead ones, whose every
        attempt failed (the dead-letter list)."""
        if webhook_id is not None:
            self.get(webhook_id)
        return self._store.deliveries(webhook=webhook_id, dead=failed, limit=limit)

    def retry(self, delivery_id: int, *, by: str | None = None) -> None:
        """Send a dead delivery again: due now, with its webhook's attempts anew."""
        known = 0 < delivery_id < 2**63  # what a database's integer holds
        now = self._client.clock.now()
        done = self._store.retry_delivery(delivery_id, now=now) if known else Retried.NO_DELIVERY
        if done is Retried.NO_DELIVERY:
            raise UnknownDelivery(
                f"no webhook delivery has the id {delivery_id}: `durably webhooks deliveries "
                "--failed` lists the dead ones"
            )
        if done is Retried.NOT_DEAD:
            raise DeliveryNotDead(
                f"webhook delivery {delivery_id} is not dead (it is due, being sent, or was "
                "delivered): only a delivery whose every attempt failed is retried"
            )
        self._record(Action.RETRY_DELIVERY, by, delivery=delivery_id)

    def deliver(self, *, timeout: timedelta = timedelta(seconds=10)) -> Passed:
        """Send the deliveries due now, once (what every worker does in the background)."""
        courier = Courier(self._store, self._client.clock, timeout=timeout)
        return courier.deliver_due()

    def _record(self, action: Action, by: str | None, **detail: str | int | None) -> None:
        """`action` in the audit trail, once done (no write of its own to go with)."""
        entry = audit_of(action, self._client.who(by), self._client.via, **detail)
        self._store.record_audit(entry, now=self._client.clock.now())

    def _unknown(self, webhook_id: str) -> UnknownWebhook:
        return UnknownWebhook(
            f"no webhook has the id {webhook_id!r}: `durably webhooks list` shows them"
        )
