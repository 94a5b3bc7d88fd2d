"""The API's bodies for outbound webhooks (durably.core.webhooks): the request that subscribes
a URL, a webhook as listed (whether it has a secret, never the secret), and a delivery;
`durably webhooks ... --json` prints the same shapes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from durably.core.names import MAX_NAME, NAME_PATTERN
from durably.core.webhooks import (
    DEFAULT_ATTEMPTS,
    MAX_ATTEMPTS,
    DeliveryState,
    Webhook,
    WebhookDelivery,
)

__all__ = ["DeliveryOut", "RetriedOut", "WebhookIn", "WebhookOut"]

_STRICT = ConfigDict(extra="forbid")
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN)]


class WebhookIn(BaseModel):
    """A URL to subscribe to kinds of run state change."""

    model_config = _STRICT
    url: str = Field(min_length=1, max_length=2000, description="http:// or https:// URL")
    events: list[str] = Field(  # none, or an unknown kind: refused by name (422)
        max_length=10,
        description="Kinds: run_completed, run_failed, run_cancelled, needs_attention, run_paused",
    )
    secret: str | None = Field(
        default=None,
        min_length=1,
        max_length=500,
        pattern=NAME_PATTERN,  # no control character
        description="Signs each delivery (Durably-Signature); never shown again",
    )
    workflow: Name | None = Field(default=None, description="Only this workflow's runs")
    attempts: int = Field(
        default=DEFAULT_ATTEMPTS,
        ge=1,
        le=MAX_ATTEMPTS,
        description="Attempts per delivery before it is dead",
    )


class WebhookOut(BaseModel):
    id: str
    url: str
    events: list[str]
    signed: bool = Field(description="Whether a secret signs its deliveries (never shown)")
    workflow: str | None
    attempts: int
    created_at: datetime

    @classmethod
    def of(cls, webhook: Webhook) -> WebhookOut:
        return cls(
            id=webhook.id,
            url=webhook.url,
            events=[str(kind) for kind in webhook.kinds],
            signed=webhook.signed,
            workflow=webhook.workflow,
            attempts=webhook.attempts,
            created_at=webhook.created_at,
        )


class DeliveryOut(BaseModel):
    id: int
    webhook: str
    kind: str
    run_id: str
    workflow: str
    status: str = Field(description="The run's status the delivery tells of")
    at: datetime = Field(description="When the run's status changed")
    state: DeliveryState
    attempts: int = Field(description="Attempts made so far")
    due_at: datetime | None = Field(description="Its next attempt (due deliveries only)")
    last_error: str | None
    delivered_at: datetime | None

    @classmethod
    def of(cls, delivery: WebhookDelivery) -> DeliveryOut:
        return cls(
            id=delivery.id,
            webhook=delivery.webhook,
            kind=str(delivery.kind),
            run_id=delivery.run_id,
            workflow=delivery.workflow,
            status=delivery.status,
            at=delivery.at,
            state=delivery.state,
            attempts=delivery.attempts,
            due_at=delivery.due_at,
            last_error=delivery.last_error,
            delivered_at=delivery.delivered_at,
        )


class RetriedOut(BaseModel):
    delivery: int
    state: DeliveryState = Field(
        default=DeliveryState.DUE, description="Due now: a worker sends it"
    )
